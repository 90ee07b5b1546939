"""``pipeline predict --as-of``: score raw events with the run's own feature definitions.

One real run per module over a generated event log (load with dates -> aggregate -> label ->
join -> split -> features -> logistic regression -> export of every row); the nightly job is
then the CLI in a subprocess on the same events at the same cut-off (it must give the run's
own scores) and at a later one.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipeline.core.errors import ExitCode, UsageError
from pipeline.predict.batch import predict_batch
from tests.conftest import working_directory
from tests.cli.test_end_to_end import cli

pytestmark = pytest.mark.slow

CUTOFF = "2020-09-01"

CONFIG = """\
name: events_predict
device: cpu
stages:
  events: {kind: load, path: events.csv, dtypes: {customer_id: str}, dates: {day: "%Y%m%d"}}
  customers: {kind: load, path: customers.csv, dtypes: {customer_id: str}}
  history:
    kind: aggregate
    inputs: [events]
    by: customer_id
    time: day
    as_of: "2020-09-01"
    windows: [30d, all]
    features: {orders: count, spend: {sum: amount}, recency_days: recency}
  labelled:
    kind: label
    inputs: {events: events, entities: history}
    by: customer_id
    time: day
    as_of: "2020-09-01"
    horizon: 60d
    target: {churn: no_event}
  joined:
    kind: join
    inputs: {left: labelled, right: customers}
    on: customer_id
    how: left
  split: {kind: split, inputs: [joined], target: churn, test: 0.3}
  features:
    kind: features
    inputs: [split]
    id: customer_id
    ops:
      - drop: {columns: [as_of]}
      - fill_missing: {columns: [recency_days_30d], strategy: median}
      - fill_missing: {columns: [segment], strategy: constant, value: none}
      - one_hot: {columns: [segment]}
  logreg: {kind: train, inputs: [features], model: logistic_regression}
  export: {kind: export, inputs: [logreg], split: all}
"""


def write_events(folder: Path, *, seed: int = 0) -> None:
    """Customers with a lasting buying rate (so recent activity predicts more activity), ids
    zero-padded text, days as YYYYMMDD integers (as the CDNOW log writes them)."""
    rng = np.random.default_rng(seed)
    rows = []
    for customer in range(300):
        rate = rng.lognormal(-3.0, 1.0)                  # events per day
        start = rng.integers(0, 200)
        days = np.flatnonzero(rng.random(366 - start) < rate) + start
        if not len(days):
            days = np.array([start])
        for day in days:
            date = pd.Timestamp("2020-01-01") + pd.Timedelta(days=int(day))
            rows.append((f"{customer:05d}", int(date.strftime("%Y%m%d")), round(float(rng.gamma(2.0, 15.0)), 2)))
    pd.DataFrame(rows, columns=["customer_id", "day", "amount"]).to_csv(folder / "events.csv", index=False)
    customers = pd.DataFrame({"customer_id": [f"{c:05d}" for c in range(0, 300, 2)],
                              "segment": rng.choice(["a", "b", "c"], size=150)})
    customers.to_csv(folder / "customers.csv", index=False)


@pytest.fixture(scope="module")
def events_run(tmp_path_factory) -> dict:
    project = tmp_path_factory.mktemp("events_project")
    write_events(project)
    (project / "events.yaml").write_text(CONFIG)
    proc = cli("run", "events.yaml", cwd=project)
    assert proc.returncode == 0, proc.stderr
    run_dir = (project / "runs" / "events_predict" / "latest").resolve()
    predictions = pd.read_parquet(run_dir / "export" / "predictions.parquet")
    return {"project": project, "run_dir": run_dir, "predictions": predictions}


def test_scores_from_raw_events_at_the_runs_cutoff_equal_the_runs_own(events_run, tmp_path):
    project = events_run["project"]
    out = tmp_path / "scores.csv"
    proc = cli("predict", "--run", "latest", "--input", "events.csv", "--as-of", CUTOFF, "--output", str(out),
               cwd=project)
    assert proc.returncode == 0, proc.stderr
    scores = pd.read_csv(out, dtype={"customer_id": str})
    own = events_run["predictions"]
    assert sorted(scores["customer_id"]) == sorted(own["customer_id"])
    merged = own.merge(scores, on="customer_id")
    np.testing.assert_allclose(merged["score"], merged["score_logreg"], rtol=1e-9, atol=1e-12)


def test_a_later_cutoff_scores_everyone_seen_by_then_and_needs_no_future(events_run, tmp_path):
    """At the last day of the log no horizon is left after the cut-off: training would refuse
    it, scoring must not (labels are not computed when scoring)."""
    project = events_run["project"]
    out = tmp_path / "late.parquet"
    proc = cli("predict", "--run", "latest", "--input", "events.csv", "--as-of", "2020-12-31", "--output",
               str(out), cwd=project)
    assert proc.returncode == 0, proc.stderr
    late = pd.read_parquet(out)
    events = pd.read_csv(project / "events.csv", dtype={"customer_id": str})
    seen = events.loc[events["day"] < 20201231, "customer_id"].unique()
    assert sorted(late["customer_id"]) == sorted(seen)
    assert len(late) > len(events_run["predictions"])
    early = events_run["predictions"].set_index("customer_id")["score_logreg"]
    both = late.set_index("customer_id")["score"].reindex(early.index)
    assert not np.allclose(both.to_numpy(), early.to_numpy())     # new events moved the scores


def test_new_events_in_a_folder_of_files_are_read_like_the_runs_events(events_run, tmp_path):
    project = events_run["project"]
    events = pd.read_csv(project / "events.csv", dtype=str)
    folder = tmp_path / "events"
    folder.mkdir()
    half = len(events) // 2
    events.iloc[:half].to_csv(folder / "part-0.csv", index=False)
    events.iloc[half:].to_csv(folder / "part-1.csv", index=False)
    with working_directory(project):                 # the run's other loads read paths relative to it
        with_folder = predict_batch(events_run["run_dir"], folder, tmp_path / "a.parquet", as_of=CUTOFF,
                                    device="cpu")
    assert with_folder.rows == len(events_run["predictions"])
    scores = pd.read_parquet(tmp_path / "a.parquet").merge(events_run["predictions"], on="customer_id")
    np.testing.assert_allclose(scores["score"], scores["score_logreg"], rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("args, expected", [
    (["--as-of", "not-a-date"], "is not a date"),
    (["--as-of", "01/02/2020"], "is not a date written YYYY-MM-DD"),
    (["--as-of", CUTOFF, "--partitioned"], "cannot be combined"),
])
def test_bad_as_of_usage_is_exit_2(events_run, tmp_path, args, expected):
    out = tmp_path / ("o" if "--partitioned" in args else "o.csv")
    proc = cli("predict", "--run", "latest", "--input", "events.csv", "--output", str(out), *args,
               cwd=events_run["project"])
    assert proc.returncode == ExitCode.CONFIG, proc.stderr
    assert expected in proc.stderr
    assert "Traceback" not in proc.stderr


def test_as_of_on_a_run_without_cutoff_stages_is_a_usage_error(tmp_path):
    from pipeline import run_pipeline
    from tests.conftest import small_config

    data = tmp_path / "rows.csv"
    rng = np.random.default_rng(1)
    pd.DataFrame({"id": range(40), "a": rng.normal(size=40), "b": rng.normal(size=40),
                  "churn": ["yes", "no"] * 20}).to_csv(data, index=False)
    config = tmp_path / "flat.yaml"
    config.write_text(small_config("flat", data, after="  export: {kind: export, inputs: [logreg]}\n"))
    result = run_pipeline(config, runs_dir=tmp_path / "runs")
    with pytest.raises(UsageError, match="no stage with a cut-off"):
        predict_batch(result.run_dir, data, tmp_path / "s.csv", as_of=CUTOFF, device="cpu")


def write_dated_rows(folder: Path, days: pd.DatetimeIndex, *, written: str, given: str,
                     rng: np.random.Generator) -> pd.DataFrame:
    """rows.csv (an id, ``days`` written as ``written``, a number, a label) and dates.yaml, whose
    load reads the dates with the format ``given`` (YAML: a quoted format, or null)."""
    rows = pd.DataFrame({"id": range(len(days)), "signup": days.strftime(written), "a": rng.normal(size=len(days)),
                         "churn": (days.month > 6).astype(int)})
    rows.to_csv(folder / "rows.csv", index=False)
    (folder / "dates.yaml").write_text(
        "name: dates\ndevice: cpu\nstages:\n"
        f"  raw: {{kind: load, path: rows.csv, dates: {{signup: {given}}}}}\n"
        "  split: {kind: split, inputs: [raw], target: churn, test: 0.25}\n"
        "  features: {kind: features, inputs: [split], id: id, ops: [{date_diff: {columns: [signup], until: 2021-01-01}}]}\n"
        "  logreg: {kind: train, inputs: [features], model: logistic_regression}\n"
        "  export: {kind: export, inputs: [logreg], split: all}\n")
    return rows


def test_predict_reads_dates_with_the_runs_formats(tmp_path):
    """Day-first dates (03/04/2020 is 3 April): without the run's format, a reader guessing
    ISO-like layouts reads month first and every score moves."""
    from pipeline import run_pipeline

    rng = np.random.default_rng(3)
    days = pd.Timestamp("2020-01-01") + pd.to_timedelta(rng.integers(0, 360, size=80), unit="D")
    days = days.insert(0, pd.Timestamp("2020-04-03"))[:80]         # first: 03/04/2020, either way round
    write_dated_rows(tmp_path, days, written="%d/%m/%Y", given='"%d/%m/%Y"', rng=rng)
    with working_directory(tmp_path):
        result = run_pipeline("dates.yaml", runs_dir=tmp_path / "runs")
        predict_batch(result.run_dir, "rows.csv", tmp_path / "scores.parquet", device="cpu")
    own = pd.read_parquet(Path(result.run_dir) / "export" / "predictions.parquet")
    scores = pd.read_parquet(tmp_path / "scores.parquet").merge(own, on="id")
    assert len(scores) == 80
    np.testing.assert_allclose(scores["score"], scores["score_logreg"], rtol=1e-9, atol=1e-12)


def test_predict_reads_dates_with_the_layout_the_run_inferred(tmp_path):
    """A load given no format (``dates: {signup: null}``) records the layout its first value
    had. A batch whose first value fits another layout (04/07/2021 of ISO training dates written
    day first) is refused naming the value, not guessed again and read month first."""
    from pipeline import run_pipeline
    from pipeline.core.errors import DataError

    rng = np.random.default_rng(4)
    days = pd.Timestamp("2020-01-01") + pd.to_timedelta(rng.integers(0, 360, size=80), unit="D")
    rows = write_dated_rows(tmp_path, days, written="%Y-%m-%d", given="null", rng=rng)
    day_first = rows.assign(signup=days.strftime("%d/%m/%Y"))
    day_first.iloc[:20].to_csv(tmp_path / "new.csv", index=False)
    with working_directory(tmp_path):
        result = run_pipeline("dates.yaml", runs_dir=tmp_path / "runs")
        manifest = json.loads((Path(result.run_dir) / "manifest.json").read_text())
        assert manifest["stages"]["raw"]["facts"]["read_options"]["dates"] == {"signup": "%Y-%m-%d"}
        with pytest.raises(DataError, match=r"new\.csv: column 'signup' holds '\d\d/\d\d/2020' at line 2, .*'%Y-%m-%d'"):
            predict_batch(result.run_dir, "new.csv", tmp_path / "scores.parquet", device="cpu")


def test_the_loads_date_filter_and_sample_chose_training_rows_and_do_not_apply_at_scoring(events_run, tmp_path):
    """A date filter bounds the training period (here it leaves training as it was): applied to
    tonight's log it dropped every later event, and the scores were those of the old log."""
    from pipeline.stages.load import LoadSpec

    project = events_run["project"]
    filtered = CONFIG.replace("name: events_predict", "name: events_filtered").replace(
        'dates: {day: "%Y%m%d"}}', 'dates: {day: "%Y%m%d"}, filters: [[day, "<", "2020-11-01"], [amount, ">", 0]]}')
    (project / "filtered.yaml").write_text(filtered)
    assert cli("run", "filtered.yaml", cwd=project).returncode == 0
    scores = {}
    for name in ("events_predict", "events_filtered"):
        out = tmp_path / f"{name}.parquet"
        proc = cli("predict", "--run", "latest", "--pipeline", name, "--input", "events.csv", "--as-of", "2020-12-31",
                   "--output", str(out), cwd=project)
        assert proc.returncode == 0, proc.stderr
        scores[name] = pd.read_parquet(out).set_index("customer_id")["score"].sort_index()
    pd.testing.assert_series_equal(scores["events_filtered"], scores["events_predict"], rtol=1e-9)
    spec = LoadSpec(kind="load", path="a.csv", dates={"day": None}, sample=100,
                    filters=[["day", "<", "2020-11-01"], ["amount", ">", 0]])
    replay = spec.reading("b.csv", "csv")
    assert (replay.path, replay.sample, replay.filters) == ("b.csv", None, [("amount", ">", 0)])


def test_a_python_stage_between_the_table_stages_and_the_split_is_replayed(events_run, tmp_path):
    """A step of the user's on the labelled table (capping spend) is part of the table the model
    learnt from: --as-of skipped it, and scores at the run's own cut-off differed from its own."""
    project = events_run["project"]
    (project / "capping.py").write_text(
        "def cap(ctx, inputs, upper):\n"
        "    (table,) = inputs.values()\n"
        "    return table.assign(spend_all=table['spend_all'].clip(upper=upper))\n")
    config = CONFIG.replace("name: events_predict", "name: events_capped").replace(
        "  split: {kind: split, inputs: [joined]",
        "  capped: {kind: python, inputs: [joined], function: 'capping:cap', params: {upper: 40}}\n"
        "  split: {kind: split, inputs: [capped]")
    (project / "capped.yaml").write_text(config)
    assert cli("run", "capped.yaml", cwd=project).returncode == 0
    out = tmp_path / "capped.csv"
    proc = cli("predict", "--run", "latest", "--pipeline", "events_capped", "--input", "events.csv", "--as-of", CUTOFF,
               "--output", str(out), cwd=project)
    assert proc.returncode == 0, proc.stderr
    own = pd.read_parquet(project / "runs" / "events_capped" / "latest" / "export" / "predictions.parquet")
    merged = own.merge(pd.read_csv(out, dtype={"customer_id": str}), on="customer_id")
    assert len(merged) == len(own)
    np.testing.assert_allclose(merged["score"], merged["score_logreg"], rtol=1e-9, atol=1e-12)
