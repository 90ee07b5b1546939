"""Dates: the load's ``dates:`` (formats, offsets to UTC, bad values named with their line,
partitioned reads) and the ``date_parts`` / ``date_diff`` feature ops, against pandas."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from pydantic import ValidationError

from tests.support.cli import run_cli as _pipeline
from pipeline.backends import get_backend
from pipeline.config import load_config
from pipeline.core.errors import ConfigError, DataError, ExitCode
from pipeline.features import FeatureWorkflow
from pipeline.features.ops import OPS, DateDiff, DateParts, FillMissing
from pipeline.stages.load import LoadSpec, read_options
from tests.conftest import DEVICES, ROOT

CPU = get_backend("cpu")
CDNOW = ROOT / "data" / "cdnow_transactions.csv"
JOURNEY = ROOT / "data" / "completejourney_transactions_sample.csv"
ALL_PARTS = ["year", "month", "day", "dayofweek", "dayofyear", "week", "quarter", "hour"]


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def utc_reference(values: list[str | None]) -> pd.Series:
    """What the load must give for ISO text with offsets: UTC, zone dropped (pandas' own parse)."""
    return pd.to_datetime(pd.Series(values), utc=True, format="ISO8601").dt.tz_convert(None)


# ------------------------------------------------------------------ formats
def test_integer_dates_read_with_their_format(backend, tmp_path):
    path = write(tmp_path / "t.csv", "customer_id,date,spend\n00001,19970101,1.5\n00002,19971231,2\n00003,,3\n")
    frame = backend.to_host(backend.read(path, dtypes={"customer_id": "str"}, dates={"date": "%Y%m%d"}))
    assert str(frame["date"].dtype) == "datetime64[us]"
    assert frame["date"].iloc[:2].tolist() == [pd.Timestamp("1997-01-01"), pd.Timestamp("1997-12-31")]
    assert pd.isna(frame["date"].iloc[2])                        # a gap stays missing
    assert frame["customer_id"].tolist() == ["00001", "00002", "00003"]


def test_iso_offsets_become_utc_without_a_zone(backend, tmp_path):
    values = ["2017-01-28T14:06:53-05:00", "2017-07-01T23:30:00-04:00", None, "2017-03-01T10:00:00Z",
              "2017-03-01T10:00:00+0130"]
    lines = "".join(f"{i},{v or ''}\n" for i, v in enumerate(values))
    path = write(tmp_path / "t.csv", "id,ts\n" + lines)
    frame = backend.to_host(backend.read(path, dates={"ts": None}))
    assert frame["ts"].dt.tz is None
    pd.testing.assert_series_equal(frame["ts"], utc_reference(values).astype("datetime64[us]"), check_names=False)
    assert frame["ts"].iloc[1] == pd.Timestamp("2017-07-02 03:30:00")        # past midnight in UTC


def test_plain_dates_inferred_or_given(backend, tmp_path):
    path = write(tmp_path / "t.csv", "a,b,c\n1997-01-02,02/01/1997,1997-01-02 10:30\n1998-12-31,31/12/1998,\n")
    frame = backend.to_host(backend.read(path, dates={"a": None, "b": "%d/%m/%Y", "c": ""}))
    expected = [pd.Timestamp("1997-01-02"), pd.Timestamp("1998-12-31")]
    assert frame["a"].tolist() == expected and frame["b"].tolist() == expected
    assert frame["c"].iloc[0] == pd.Timestamp("1997-01-02 10:30") and pd.isna(frame["c"].iloc[1])


def test_a_day_first_layout_is_guessed_without_pandas_warning_and_recorded(backend, tmp_path, recwarn):
    """pandas warns "Pass `dayfirst=True`" on a day-first guess: an argument that is not the
    user's to pass. The layout is recorded instead (predict parses with it)."""
    path = write(tmp_path / "t.csv", "a\n31/12/1998\n01/02/1999\n")
    layouts: dict = {}
    frame = backend.to_host(backend.read(path, dates={"a": None}, layouts=layouts))
    assert frame["a"].tolist() == [pd.Timestamp("1998-12-31"), pd.Timestamp("1999-02-01")]
    assert layouts == {"a": "%d/%m/%Y"}
    assert not [w for w in recwarn if "dayfirst" in str(w.message)]


def test_a_parquet_timestamp_column_stays_and_an_aware_one_becomes_utc(backend, tmp_path):
    stamps = pd.to_datetime(["2017-01-01 10:00", "2017-07-01 10:00"])
    pd.DataFrame({"naive": stamps, "aware": stamps.tz_localize("America/New_York")}).to_parquet(tmp_path / "t.parquet")
    frame = backend.to_host(backend.read(tmp_path / "t.parquet", dates={"naive": None, "aware": None}))
    assert frame["naive"].tolist() == list(stamps)
    assert frame["aware"].dt.tz is None
    assert frame["aware"].tolist() == [pd.Timestamp("2017-01-01 15:00"), pd.Timestamp("2017-07-01 14:00")]


@pytest.mark.skipif(not (CDNOW.exists() and JOURNEY.exists()), reason="the event datasets are not in data/")
def test_the_bundled_event_data_parses(backend):
    cdnow = backend.to_host(backend.read(CDNOW, dtypes={"customer_id": "str"}, dates={"date": "%Y%m%d"}))
    assert len(cdnow) == 69_659 and cdnow["date"].notna().all()
    assert (cdnow["date"].min(), cdnow["date"].max()) == (pd.Timestamp("1997-01-01"), pd.Timestamp("1998-06-30"))
    journey = backend.to_host(backend.read(JOURNEY, dates={"transaction_timestamp": None}))
    raw = pd.read_csv(JOURNEY)["transaction_timestamp"]
    assert set(raw.str[-6:]) == {"-05:00", "-04:00"}                         # both DST offsets occur
    assert (journey["transaction_timestamp"] == utc_reference(list(raw))).all()


# ------------------------------------------------------------------ errors
def test_a_bad_value_is_named_with_its_line(backend, tmp_path):
    # Line 4 is blank: readers skip it, the message still names the file's own line number.
    path = write(tmp_path / "t.csv", "id,date\n1,19970101\n2,19970102\n\n3,19971301\n4,19970103\n")
    with pytest.raises(DataError, match=r"t\.csv: column 'date' holds '19971301' at line 5, which is not a date in "
                                        r"the format '%Y%m%d'"):
        backend.read(path, dates={"date": "%Y%m%d"})


def test_a_bad_value_in_an_inferred_layout_says_so(backend, tmp_path):
    path = write(tmp_path / "t.csv", "id,date\n1,1997-01-01\n2,1997-01-01 10:00\n")
    with pytest.raises(DataError, match=r"'1997-01-01 10:00' at line 3, .*'%Y-%m-%d', inferred from its first value"):
        backend.read(path, dates={"date": None})


def test_a_value_without_the_offset_its_format_needs_is_bad(backend, tmp_path):
    path = write(tmp_path / "t.csv", "id,ts\n1,2017-01-01 10:00:00-05:00\n2,2017-01-01 10:00:00\n")
    with pytest.raises(DataError, match=r"'2017-01-01 10:00:00' at line 3"):
        backend.read(path, dates={"ts": "%Y-%m-%d %H:%M:%S%z"})


def test_a_bad_value_in_parquet_is_named_with_its_row(backend, tmp_path):
    pd.DataFrame({"d": ["1997-01-01", "1997-02-30"]}).to_parquet(tmp_path / "t.parquet")
    with pytest.raises(DataError, match=r"column 'd' holds '1997-02-30' at row 2"):
        backend.read(tmp_path / "t.parquet", dates={"d": "%Y-%m-%d"})


def test_a_dates_column_missing_from_the_file_is_a_data_error(backend, tmp_path):
    path = write(tmp_path / "t.csv", "id,day\n1,1997-01-01\n")
    with pytest.raises(DataError, match=r"dates names column\(s\) \['date'\] that the data does not have"):
        backend.read(path, dates={"date": None})
    with pytest.raises(DataError, match=r"\['date'\] that the data does not have"):
        backend.read_partitioned(str(path), dates={"date": None})


def test_a_number_with_a_fraction_is_not_a_date(tmp_path):
    path = write(tmp_path / "t.csv", "id,date\n1,19970101\n2,19970101.5\n")
    with pytest.raises(DataError, match=r"'19970101.5' at line 3"):
        CPU.read(path, dates={"date": "%Y%m%d"})


LOAD = "name: t\nstages:\n  raw:\n    kind: load\n    path: t.csv\n"


@pytest.mark.parametrize(("extra", "problem"), [
    ('    dates: {date: "%Q"}\n', "not a strptime format"),
    ('    dates: {date: "%Y-%m-%d %Z"}\n', "zone names"),
    ('    dates: {date: "%z %Y"}\n', "must come last"),
    ('    dates: {date: "YYYY"}\n', "no % directive"),
    ("    columns: [id]\n    dates: {date: null}\n", r"dates names column\(s\) \['date'\] that columns does not read"),
])
def test_bad_dates_settings_are_config_errors_with_the_line(extra, problem):
    with pytest.raises(ConfigError, match=problem) as caught:
        load_config(text=LOAD + extra)
    assert caught.value.exit_code == ExitCode.CONFIG
    assert caught.value.issues[0].line == 5 + extra.count("\n")


def test_read_options_record_the_dates_for_predict():
    spec = LoadSpec(kind="load", path="t.csv", dates={"date": "%Y%m%d", "ts": ""}, na_values=[" "])
    assert read_options(spec) == {"na_values": [" "], "dates": {"date": "%Y%m%d", "ts": None}}
    assert "dates" not in read_options(LoadSpec(kind="load", path="t.csv"))


# ------------------------------------------------------------------ filters
def test_a_filter_on_a_date_column_compares_dates_in_csv_and_parquet(backend, tmp_path):
    pd.DataFrame({"id": [1, 2, 3], "date": [19970101, 19970615, 19971231]}).to_csv(tmp_path / "t.csv", index=False)
    pd.read_csv(tmp_path / "t.csv").to_parquet(tmp_path / "t.parquet")
    for name in ("t.csv", "t.parquet"):
        for value in ("1997-06-01", 19970601):
            frame = backend.to_host(backend.read(tmp_path / name, dates={"date": "%Y%m%d"},
                                                 filters=[("date", ">=", value), ("id", "<", 3)]))
            assert frame["id"].tolist() == [2], (name, value)


def test_a_guessed_layout_that_reads_day_or_month_first_alike_is_refused(tmp_path):
    """`dates: {ts: null}` read 01/06/1997, 02/06/1997, 05/07/1997 month first, and the same
    rows with 13/06/1997 first day first: 02/06/1997 was February in one file, June in the other."""
    write(tmp_path / "alike.csv", "id,ts\n1,01/06/1997\n2,02/06/1997\n3,05/07/1997\n")
    write(tmp_path / "told.csv", "id,ts\n1,13/06/1997\n2,02/06/1997\n3,05/07/1997\n")
    with pytest.raises(DataError, match=r"column 'ts': its dates read day first and month first alike \('%m/%d/%Y', "
                                        r"guessed from its first value '01/06/1997', and '%d/%m/%Y'\)"):
        CPU.read(tmp_path / "alike.csv", dates={"ts": None})
    told = CPU.read(tmp_path / "told.csv", dates={"ts": None})
    assert told["ts"].dt.month.tolist() == [6, 6, 7]
    assert CPU.read(tmp_path / "alike.csv", dates={"ts": "%d/%m/%Y"})["ts"].dt.month.tolist() == [6, 6, 7]
    write(tmp_path / "iso.csv", "id,ts\n1,1997-01-06\n2,1997-02-06\n")     # ISO: year, month, day
    assert CPU.read(tmp_path / "iso.csv", dates={"ts": None})["ts"].dt.month.tolist() == [1, 2]


def test_a_date_filter_value_is_one_layout_read_one_way(tmp_path):
    """"01/07/2017" kept January 7th on, "13/07/2017" July 13th on (exit 0, validate passed);
    an offset or "notadate" passed validate and failed at run time with pandas' words."""
    pd.DataFrame({"id": [1, 2, 3, 4], "date": ["2017-03-12T00:00", "2017-06-15T00:00", "2017-07-02T03:00", "2017-07-20T00:00"]}
                 ).to_csv(tmp_path / "ev.csv", index=False)
    for value in ("01/07/2017", "July 1 2017", "notadate"):
        with pytest.raises(DataError, match=r"is not a date"):
            CPU.read(tmp_path / "ev.csv", dates={"date": None}, filters=[("date", ">=", value)])
        text = f"name: f\nstages:\n  ev:\n    kind: load\n    path: {tmp_path / 'ev.csv'}\n" \
               f"    dates: {{date: null}}\n    filters: [[date, '>=', '{value}']]\n"
        (tmp_path / "f.yaml").write_text(text)
        proc = _pipeline("validate", "f.yaml", cwd=tmp_path)
        assert proc.returncode == ExitCode.CONFIG, proc.stderr
        assert "stages.ev.filters" in proc.stderr and "is not a date" in proc.stderr
    # An offset is taken to UTC, as the load takes the column's times with one.
    kept = CPU.read(tmp_path / "ev.csv", dates={"date": None}, filters=[("date", ">=", "2017-07-01T22:00:00-04:00")])
    assert kept["id"].tolist() == [3, 4]
    later = CPU.read(tmp_path / "ev.csv", dates={"date": None}, filters=[("date", ">", "2017-07-01T23:30:00-04:00")])
    assert later["id"].tolist() == [4]


# ------------------------------------------------------------------ partitioned
def test_partitioned_parse_equals_in_memory(backend, tmp_path):
    rng = np.random.default_rng(3)
    stamps = pd.Timestamp("2017-01-01") + pd.to_timedelta(rng.integers(0, 365 * 86_400, 600), unit="s")
    text = [s.tz_localize("America/New_York").isoformat() for s in stamps]
    frame = pd.DataFrame({"id": range(600), "day": stamps.strftime("%Y%m%d").astype(int), "ts": text})
    frame.loc[::7, "ts"] = None
    for i in range(3):
        frame.iloc[i * 200:(i + 1) * 200].to_csv(tmp_path / f"p{i}.csv", index=False)
    dates = {"day": "%Y%m%d", "ts": None}
    whole = pd.concat([backend.to_host(backend.read(tmp_path / f"p{i}.csv", dates=dates)) for i in range(3)],
                      ignore_index=True)
    lazy = backend.read_partitioned(str(tmp_path / "p*.csv"), dates=dates, blocksize="2KiB")
    assert lazy.npartitions > 3
    assert str(lazy._meta["ts"].dtype) == "datetime64[us]" and str(lazy._meta["day"].dtype) == "datetime64[us]"
    parted = backend.to_host(lazy).reset_index(drop=True)
    pd.testing.assert_frame_equal(parted, whole)
    assert (parted["ts"].dropna() == utc_reference(list(frame["ts"].dropna())).to_numpy()).all()


def test_a_bad_value_in_a_partition_names_its_file_and_line(backend, tmp_path):
    write(tmp_path / "a.csv", "id,date\n1,19970101\n")
    write(tmp_path / "b.csv", "id,date\n2,19970102\n3,1997x\n")
    lazy = backend.read_partitioned(str(tmp_path / "*.csv"), dates={"date": "%Y%m%d"})
    with pytest.raises(DataError, match=r"column 'date' holds '1997x' at line 3 of .*b\.csv"):
        backend.to_host(lazy)


# ------------------------------------------------------------------ feature ops
def random_dates(n: int, seed: int = 0) -> pd.Series:
    rng = np.random.default_rng(seed)
    stamps = pd.Series(pd.Timestamp("1995-01-01") + pd.to_timedelta(rng.integers(0, 6 * 365 * 24, n), unit="h"))
    stamps[rng.random(n) < 0.1] = pd.NaT
    return stamps.astype("datetime64[us]")


def test_date_parts_equal_pandas_reference_values(backend):
    dates = random_dates(400)
    frame = backend.from_pandas(pd.DataFrame({"x": np.arange(400.0), "d": dates}))
    op = DateParts(columns=["d"], parts=ALL_PARTS)
    out = backend.to_host(op.transform(frame, backend, op.fit(frame, backend)))
    assert list(out.columns) == op.output_columns(["x", "d"], None) == ["x"] + [f"d_{p}" for p in ALL_PARTS]
    reference = {part: getattr(dates.dt, part) for part in ALL_PARTS if part != "week"}
    reference["week"] = dates.dt.isocalendar()["week"]
    for part in ALL_PARTS:
        assert out[f"d_{part}"].dtype == np.float32
        expected = reference[part].astype("float64").to_numpy()
        np.testing.assert_array_equal(out[f"d_{part}"].to_numpy(dtype="float64"), expected, err_msg=part)


def test_date_parts_default_parts_and_iso_week_at_the_year_boundary(backend):
    frame = backend.from_pandas(pd.DataFrame({"d": pd.to_datetime(["2021-01-03", "2020-12-31"])}))
    op = DateParts(columns=["d"])
    out = backend.to_host(op.transform(frame, backend, op.fit(frame, backend)))
    assert list(out.columns) == ["d_year", "d_month", "d_day", "d_dayofweek"]
    assert out.iloc[0].tolist() == [2021, 1, 3, 6]                          # a Sunday
    week = DateParts(columns=["d"], parts=["week"])
    assert backend.to_host(week.transform(frame, backend, None))["d_week"].tolist() == [53, 53]


@pytest.mark.parametrize("unit", ["days", "weeks", "hours"])
def test_date_diff_to_a_literal_and_to_a_column_equal_pandas(backend, unit):
    start, end = random_dates(300, seed=1), random_dates(300, seed=2)
    frame = backend.from_pandas(pd.DataFrame({"start": start, "end": end, "x": 1.0}))
    seconds = {"days": 86_400, "weeks": 604_800, "hours": 3_600}[unit]
    literal = DateDiff(columns=["start"], until="1999-06-30 12:00", unit=unit)
    out = backend.to_host(literal.transform(frame, backend, None))
    assert list(out.columns) == ["end", "x", f"start_{unit}"] and out[f"start_{unit}"].dtype == np.float64
    expected = (pd.Timestamp("1999-06-30 12:00") - start).dt.total_seconds() / seconds
    np.testing.assert_allclose(out[f"start_{unit}"].to_numpy(), expected.to_numpy(), rtol=1e-12)
    column = DateDiff(columns=["start"], until="end", unit=unit)
    out = backend.to_host(column.transform(frame, backend, None))
    expected = (end - start).dt.total_seconds() / seconds
    np.testing.assert_allclose(out[f"start_{unit}"].to_numpy(), expected.to_numpy(), rtol=1e-12)
    assert out[f"start_{unit}"].isna().sum() == (start.isna() | end.isna()).sum()


def test_date_ops_read_iso_text_as_they_read_dates(backend):
    dates = random_dates(50)
    text = dates.dt.strftime("%Y-%m-%d %H:%M:%S").where(dates.notna())
    as_dates = backend.from_pandas(pd.DataFrame({"d": dates}))
    as_text = backend.from_pandas(pd.DataFrame({"d": text.astype("str")}))
    for op in (DateParts(columns=["d"], parts=ALL_PARTS), DateDiff(columns=["d"], until="2001-01-01")):
        pd.testing.assert_frame_equal(backend.to_host(op.transform(as_text, backend, None)),
                                      backend.to_host(op.transform(as_dates, backend, None)))


def test_date_ops_refuse_numbers_and_aware_columns_naming_the_fix():
    numbers = pd.DataFrame({"d": [19970101, 19970102]})
    with pytest.raises(DataError, match=r"'date_parts': column 'd' is int64, not a date; .*dates: \{d: '%Y%m%d'\}"):
        DateParts(columns=["d"]).transform(numbers, CPU, None)
    aware = pd.DataFrame({"d": pd.to_datetime(["2017-01-01"]).tz_localize("UTC")})
    with pytest.raises(DataError, match=r"'date_diff': column 'd' is timezone-aware"):
        DateDiff(columns=["d"], until="2018-01-01").transform(aware, CPU, None)
    text = pd.DataFrame({"d": ["1997-01-01", "soon"]})
    with pytest.raises(DataError, match=r"feature op 'date_parts': column 'd' holds 'soon' at row 2"):
        DateParts(columns=["d"]).transform(text, CPU, None)


def test_until_is_a_date_when_written_as_one_else_a_column():
    assert DateDiff(columns=["d"], until="1997-12-31").read_columns() == {"d"}
    assert DateDiff(columns=["d"], until="1997-12-31T10:00:00").until_date() == pd.Timestamp("1997-12-31 10:00")
    assert DateDiff(columns=["d"], until="as_of").read_columns() == {"d", "as_of"}
    with pytest.raises(ValidationError, match="written as a date but is not one"):
        DateDiff(columns=["d"], until="1997-02-30")
    with pytest.raises(ValidationError, match="listed more than once"):
        DateParts(columns=["d"], parts=["year", "year"])
    frame = pd.DataFrame({"d": pd.to_datetime(["1997-01-01"])})
    with pytest.raises(DataError, match=r"until '1997/12/31' is neither a column of the data nor an ISO date"):
        DateDiff(columns=["d"], until="1997/12/31").transform(frame, CPU, None)


def test_the_date_ops_are_registered_and_validated_from_yaml():
    assert {"date_parts", "date_diff"} <= set(OPS)
    text = ("name: t\nstages:\n  raw: {kind: load, path: t.csv, dates: {d: null}}\n"
            "  split: {kind: split, inputs: [raw], target: y, test: 0.2}\n"
            "  f:\n    kind: features\n    inputs: [split]\n    ops:\n"
            "      - date_diff: {columns: [d], until: 1997-12-31, unit: months}\n")
    with pytest.raises(ConfigError, match="unit") as caught:
        load_config(text=text)
    assert caught.value.issues[0].line == 9


def test_a_workflow_with_date_ops_saves_loads_and_scores_text(tmp_path):
    dates = random_dates(200)
    train = pd.DataFrame({"d": dates, "e": random_dates(200, seed=5), "x": np.arange(200.0)})
    ops = [DateDiff(columns=["d"], until="e", unit="weeks"), DateParts(columns=["e"], parts=["month", "week"]),
           FillMissing(columns=["d_weeks", "e_month", "e_week"], strategy="median")]
    wf = FeatureWorkflow(ops)
    fitted = wf.fit_transform(train)
    assert list(wf.input_columns_) == ["d", "e", "x"]
    wf.save(tmp_path / "wf.json")
    loaded = FeatureWorkflow.load(tmp_path / "wf.json")
    assert json.loads((tmp_path / "wf.json").read_text())["ops"][0]["params"] == {
        "columns": ["d"], "until": "e", "unit": "weeks"}
    # Scoring reads a flat CSV's dates as text: the same numbers come out.
    flat = train.assign(d=train["d"].dt.strftime("%Y-%m-%d %H:%M:%S"), e=train["e"].dt.strftime("%Y-%m-%d %H:%M:%S"))
    pd.testing.assert_frame_equal(loaded.transform(flat), fitted)


def test_date_ops_in_partitioned_featurisation_equal_in_memory():
    frame = pd.DataFrame({"d": random_dates(500), "e": random_dates(500, seed=4), "x": np.arange(500.0)})
    ops = [DateParts(columns=["d"], parts=["year", "week", "hour"]), DateDiff(columns=["e"], until="2002-01-01"),
           FillMissing(columns=["d_year", "d_week", "d_hour", "e_days"], strategy="mean")]
    memory = FeatureWorkflow(ops).fit_transform(frame)
    lazy = FeatureWorkflow(ops).fit_transform(dd.from_pandas(frame, npartitions=4))
    pd.testing.assert_frame_equal(lazy.compute(), memory)


# ------------------------------------------------------------------ the workflow's message
def test_a_date_column_left_after_the_ops_has_its_own_message():
    frame = pd.DataFrame({"d": random_dates(20).fillna(pd.Timestamp("2000-01-01")), "t": ["a"] * 20, "x": 1.0})
    with pytest.raises(DataError, match=r"^columns \['d'\] are dates: turn them into numbers with date_parts or "
                                        r"date_diff, or drop them$"):
        FeatureWorkflow([FillMissing(columns=["x"])]).fit(frame.drop(columns="t"))
    with pytest.raises(DataError, match=r"^columns \['d'\] are dates: .*; columns \['t'\] are still text after"):
        FeatureWorkflow([FillMissing(columns=["x"])]).fit(frame)
    with pytest.raises(DataError, match=r"^columns \['t'\] are still text after the feature ops"):
        FeatureWorkflow([DateParts(columns=["d"])]).fit(frame)


# ------------------------------------------------------------------ the whole command
def test_date_ops_through_pipeline_run_and_predict_on_a_flat_csv(tmp_path):
    rng = np.random.default_rng(0)
    n = 240
    signup = pd.Timestamp("1997-01-01") + pd.to_timedelta(rng.integers(0, 365, n), unit="D")
    last = (signup + pd.to_timedelta(rng.integers(1, 400 * 24, n), unit="h")).tz_localize("America/New_York")
    churn = np.where((last.tz_convert(None) - signup).days + rng.normal(0, 40, n) < 150, "yes", "no")
    pd.DataFrame({"id": [f"c{i:04d}" for i in range(n)], "signup": signup.strftime("%Y%m%d").astype(int),
                  "last": [t.isoformat() for t in last], "churn": churn}).to_csv(tmp_path / "events.csv", index=False)
    write(tmp_path / "dates.yaml", """name: dates
device: cpu
stages:
  raw:
    kind: load
    path: events.csv
    dates: {signup: "%Y%m%d", last: null}
  split: {kind: split, inputs: [raw], target: churn, positive: "yes", test: 0.25}
  features:
    kind: features
    inputs: [split]
    id: id
    ops:
      - date_diff: {columns: [signup], until: last, unit: days}
      - date_parts: {columns: [last], parts: [month, dayofweek, hour]}
      - standardize: {columns: [signup_days, last_month, last_dayofweek, last_hour]}
  logreg: {kind: train, inputs: [features], model: logistic_regression}
  export: {kind: export, inputs: [logreg]}
""")
    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return _pipeline(*args, cwd=tmp_path, env={"COLUMNS": "200"})

    proc = cli("run", "dates.yaml")
    assert proc.returncode == 0, proc.stderr
    from pipeline.runs.record import read_manifest

    latest = tmp_path / "runs" / "dates" / "latest"
    facts = read_manifest(latest).stages["raw"].facts
    # The layout the first value had is recorded, so predict parses as the run did.
    assert facts["read_options"]["dates"] == {"signup": "%Y%m%d", "last": "%Y-%m-%dT%H:%M:%S%z"}
    workflow = json.loads((latest / "export" / "models" / "logreg" / "workflow.json").read_text())
    assert workflow["input_columns"] == {"signup": "datetime64[us]", "last": "datetime64[us]"}
    # The raw CSV scores as the run scored its test rows.
    proc = cli("predict", "--run", "latest", "--pipeline", "dates", "--input", "events.csv", "--output", "scores.csv")
    assert proc.returncode == 0, proc.stderr
    scores = pd.read_csv(tmp_path / "scores.csv").set_index("id")
    run_scores = pd.read_parquet(latest / "export" / "predictions.parquet").set_index("id")
    np.testing.assert_allclose(scores.loc[run_scores.index].filter(like="score").iloc[:, 0],
                               run_scores["score_logreg"], rtol=1e-6)


# ------------------------------------------------------------------ GPU against pandas
@pytest.mark.gpu
@pytest.mark.skipif("gpu" not in DEVICES, reason="no GPU with RAPIDS here")
def test_cudf_parses_and_transforms_as_pandas(tmp_path):
    gpu = get_backend("gpu")
    values = ["2017-01-28T14:06:53-05:00", "2017-07-01T23:30:00-04:00", None, "2017-03-01T10:00:00Z"]
    lines = "".join(f"{i},{19970101 + i},{v or ''},{1 + i}/2/1997\n" for i, v in enumerate(values))
    path = write(tmp_path / "t.csv", "id,day,ts,loose\n" + lines)
    dates = {"day": "%Y%m%d", "ts": None, "loose": "%d/%m/%Y"}           # "loose" differs in length: host parse
    pd.testing.assert_frame_equal(gpu.to_host(gpu.read(path, dates=dates)), CPU.read(path, dates=dates),
                                  check_dtype=False)
    bad = write(tmp_path / "bad.csv", "id,day\n1,19970101\n2,19970230\n")
    with pytest.raises(DataError, match=r"'19970230' at line 3"):
        gpu.read(bad, dates={"day": "%Y%m%d"})
    frame = pd.DataFrame({"d": random_dates(300), "e": random_dates(300, seed=9)})
    for op in (DateParts(columns=["d"], parts=ALL_PARTS), DateDiff(columns=["d"], until="e", unit="hours")):
        pd.testing.assert_frame_equal(gpu.to_host(op.transform(gpu.from_pandas(frame), gpu, None)),
                                      op.transform(frame, CPU, None), check_dtype=False)
