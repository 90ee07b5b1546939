"""``aggregate_events``: every aggregate against a plain pandas reference, window and cut-off
boundaries, leakage planting, rolling cut-offs, partitioned data (Dask) and cuDF.

The reference is written the obvious way: a loop over cut-offs, entities and windows with
boolean masks, one Python value at a time. The engine must agree with it on random event
tables (hypothesis), with ties in time, missing values and events exactly on the boundaries.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.core.errors import ConfigError, DataError
from pipeline.events import aggregate_events

START = pd.Timestamp("2020-01-01")
DAY = pd.Timedelta(days=1)
ALL_FEATURES = {
    "n": "count", "rec": "recency", "ten": "tenure", "gap": "interval_mean",
    "s": {"sum": "v"}, "m": {"mean": "v"}, "lo": {"min": "v"}, "hi": {"max": "v"}, "sd": {"std": "v"},
    "u": {"nunique": "w"}, "f": {"first": "v"}, "l": {"last": "v"}, "ft": {"first": "w"}, "lt": {"last": "w"},
}


WINDOWS = {"12h": pd.Timedelta(hours=12), "1d": DAY, "3d": 3 * DAY, "1w": 7 * DAY, "7d": 7 * DAY, "14d": 14 * DAY,
           "30d": 30 * DAY, "60d": 60 * DAY}


# ------------------------------------------------------------------ reference
def reference_value(aggregate: str, column: str | None, window: pd.DataFrame, cutoff: pd.Timestamp) -> object:
    """One feature of one entity's events in one window, the obvious way."""
    if aggregate == "count":
        return len(window)
    if aggregate == "sum":
        return float(window[column].sum()) if len(window) else 0.0
    if aggregate == "nunique":
        return int(window[column].nunique())
    if not len(window):
        return math.nan
    times = window["t"]
    if aggregate == "recency":
        return (cutoff - times.max()) / DAY
    if aggregate == "tenure":
        return (cutoff - times.min()) / DAY
    if aggregate == "interval_mean":
        return (times.max() - times.min()) / DAY / (len(window) - 1) if len(window) >= 2 else math.nan
    if aggregate in ("first", "last"):
        ordered = window.sort_values("t", kind="stable")       # ties: row order
        return ordered[column].iloc[0 if aggregate == "first" else -1]
    return float(getattr(window[column], aggregate)())


def reference_aggregate(events: pd.DataFrame, cutoffs: list[str], windows: list[str], features: dict) -> pd.DataFrame:
    rows = []
    for cutoff in sorted(pd.Timestamp(c) for c in cutoffs):
        before = events[events["t"] < cutoff]
        for entity in sorted(before["k"].dropna().unique()):
            mine = before[before["k"] == entity]
            row = {"k": entity, "as_of": cutoff}
            for name, spec in features.items():
                aggregate, column = (spec, None) if isinstance(spec, str) else next(iter(spec.items()))
                for window in windows:
                    lower = None if window == "all" else cutoff - WINDOWS[window]
                    in_window = mine if lower is None else mine[mine["t"] >= lower]
                    row[f"{name}_{window}"] = reference_value(aggregate, column, in_window, cutoff)
            rows.append(row)
    return pd.DataFrame(rows)


def assert_matches_reference(out: pd.DataFrame, ref: pd.DataFrame) -> None:
    assert list(out.columns) == list(ref.columns)
    assert len(out) == len(ref)
    if not len(ref):
        return
    for column in ref.columns:
        got, want = out[column].tolist(), ref[column].tolist()
        for a, b in zip(got, want):
            if isinstance(b, float) and math.isnan(b):
                assert isinstance(a, float) and math.isnan(a), (column, got, want)
            elif isinstance(b, float):
                assert a == pytest.approx(b, rel=1e-9, abs=1e-9), (column, got, want)
            else:
                assert a == b, (column, got, want)


# ------------------------------------------------------------------ random tables
@st.composite
def event_tables(draw) -> pd.DataFrame:
    """Few entities, few distinct times (hours on a 20-day grid: ties and boundary hits are
    common), values with gaps, a text column, sometimes a missing key."""
    n = draw(st.integers(0, 40))
    keys = draw(st.lists(st.sampled_from(["a", "b", "c", "d", None]), min_size=n, max_size=n))
    span = draw(st.integers(0, 20 * 4))                 # a short span: many events share a time
    hours = draw(st.lists(st.integers(0, span), min_size=n, max_size=n).map(lambda quarters: [6 * q for q in quarters]))
    values = draw(st.lists(st.one_of(st.none(), st.integers(-5, 5).map(float)), min_size=n, max_size=n))
    words = draw(st.lists(st.sampled_from(["x", "y", "z"]), min_size=n, max_size=n))
    return pd.DataFrame({
        "k": pd.Series(keys, dtype="str"),
        "t": pd.Series(START + pd.to_timedelta(hours, unit="h"), dtype="datetime64[us]"),
        "v": pd.Series(values, dtype="float64"),
        "w": pd.Series(words, dtype="str"),
    })


cutoff_days = st.lists(st.integers(0, 21), min_size=1, max_size=3, unique=True).map(
    lambda days: [(START + pd.Timedelta(days=d)).date().isoformat() for d in days])
window_sets = st.lists(st.sampled_from(["12h", "1d", "3d", "1w", "all"]), min_size=1, max_size=3, unique=True)


feature_sets = st.lists(st.sampled_from(sorted(ALL_FEATURES)), min_size=1, max_size=5, unique=True).map(
    lambda names: {name: ALL_FEATURES[name] for name in names})


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=event_tables(), cutoffs=cutoff_days, windows=window_sets, features=feature_sets)
def test_every_aggregate_matches_the_reference(events, cutoffs, windows, features):
    out = aggregate_events(events, by="k", time="t", as_of=cutoffs, windows=windows, features=features)
    ref = reference_aggregate(events, cutoffs, windows, features)
    expected_columns = ["k", "as_of", *[f"{name}_{w}" for name in features for w in windows]]
    assert list(out.columns) == expected_columns
    assert_matches_reference(out, ref.reindex(columns=expected_columns))


def test_dtypes_are_fixed_whatever_the_data():
    events = pd.DataFrame({"k": ["a", "a"], "t": pd.to_datetime(["2020-01-01", "2020-01-05"]), "v": [1, 2],
                           "w": ["x", "y"]})
    out = aggregate_events(events, by="k", time="t", as_of="2020-01-10", windows=["1d", "all"], features=ALL_FEATURES)
    assert out["n_1d"].dtype == "int64" and out["u_all"].dtype == "int64"
    assert all(out[f"{name}_1d"].dtype == "float64" for name in ("rec", "ten", "gap", "s", "m", "lo", "hi", "sd", "f"))
    assert out["ft_all"].tolist() == ["x"] and out["lt_all"].tolist() == ["y"]     # text stays text
    assert out["as_of"].dtype == events["t"].dtype


# ------------------------------------------------------------------ boundaries
def boundary_events() -> pd.DataFrame:
    cutoff = pd.Timestamp("2020-02-01")
    week = pd.Timedelta(days=7)
    return pd.DataFrame({
        "k": ["on_cutoff", "window_start", "just_before_window", "just_before_cutoff"],
        "t": [cutoff, cutoff - week, cutoff - week - pd.Timedelta(seconds=1), cutoff - pd.Timedelta(seconds=1)],
        "v": [1.0, 2.0, 3.0, 4.0],
    })


def test_an_event_on_the_cutoff_is_not_a_feature_and_the_window_start_is_inside():
    out = aggregate_events(boundary_events(), by="k", time="t", as_of="2020-02-01", windows=["7d", "all"],
                           features={"n": "count"})
    counts = dict(zip(out["k"], zip(out["n_7d"], out["n_all"])))
    assert "on_cutoff" not in counts                      # time < c only: no row at all
    assert counts["window_start"] == (1, 1)               # c - w <= time
    assert counts["just_before_window"] == (0, 1)         # one second earlier: outside 7d
    assert counts["just_before_cutoff"] == (1, 1)


def test_rows_are_sorted_by_cutoff_then_keys():
    events = pd.DataFrame({"k": ["b", "a", "c", "a"], "j": [2, 1, 1, 1],
                           "t": pd.to_datetime(["2020-01-02", "2020-01-03", "2020-01-01", "2020-01-09"])})
    out = aggregate_events(events, by=["k", "j"], time="t", as_of=["2020-01-10", "2020-01-05"],
                           features={"n": "count"})
    assert list(zip(out["as_of"].dt.day, out["k"], out["j"])) == [
        (5, "a", 1), (5, "b", 2), (5, "c", 1), (10, "a", 1), (10, "b", 2), (10, "c", 1)]
    assert out.loc[out["as_of"].dt.day == 10, "n_all"].tolist() == [2, 1, 1]


def test_first_and_last_ties_keep_row_order():
    same = pd.Timestamp("2020-01-02")
    events = pd.DataFrame({"k": ["a", "a", "a"], "t": [same, same, same], "v": [7.0, 8.0, 9.0]})
    out = aggregate_events(events, by="k", time="t", as_of="2020-01-03", features={"f": {"first": "v"},
                                                                                  "l": {"last": "v"}})
    assert (out["f_all"].item(), out["l_all"].item()) == (7.0, 9.0)


def test_a_feature_may_have_its_own_windows():
    events = pd.DataFrame({"k": ["a"], "t": pd.to_datetime(["2020-01-01"]), "v": [5.0]})
    out = aggregate_events(events, by="k", time="t", as_of="2020-01-10", windows=["1d", "all"],
                           features={"n": "count", "big": {"max": "v", "windows": ["all"]}})
    assert list(out.columns) == ["k", "as_of", "n_1d", "n_all", "big_all"]


def test_an_aggregate_of_the_events_may_have_its_own_windows():
    """{recency: true, windows: [all]}: no empty-window recency to fill when only `all` is wanted."""
    events = pd.DataFrame({"k": ["a", "b"], "t": pd.to_datetime(["2020-01-01", "2020-01-09"])})
    out = aggregate_events(events, by="k", time="t", as_of="2020-01-10", windows=["2d", "all"],
                           features={"n": "count", "r": {"recency": True, "windows": ["all"]}})
    assert list(out.columns) == ["k", "as_of", "n_2d", "n_all", "r_all"]
    assert out["r_all"].tolist() == [9.0, 1.0]


# ------------------------------------------------------------------ leakage
def test_planted_events_change_features_only_from_before_the_cutoff():
    rng = np.random.default_rng(3)
    events = pd.DataFrame({"k": rng.choice(list("abcdef"), 300),
                           "t": START + pd.to_timedelta(rng.integers(0, 90 * 24, 300), unit="h"),
                           "v": rng.normal(size=300)})
    cutoff = START + pd.Timedelta(days=45)
    features = {"n": "count", "s": {"sum": "v"}, "hi": {"max": "v"}, "l": {"last": "v"}, "rec": "recency"}
    kwargs = dict(by="k", time="t", as_of=cutoff.isoformat(), windows=["7d", "all"], features=features)
    base = aggregate_events(events, **kwargs)
    after = pd.DataFrame({"k": list("abcdef") * 2, "v": 1e9,
                          "t": [cutoff] * 6 + [cutoff + pd.Timedelta(seconds=1)] * 6})
    planted_after = aggregate_events(pd.concat([events, after], ignore_index=True), **kwargs)
    pd.testing.assert_frame_equal(planted_after, base)
    before = pd.DataFrame({"k": list("abcdef"), "v": 1e9, "t": cutoff - pd.Timedelta(seconds=1)})
    planted_before = aggregate_events(pd.concat([events, before], ignore_index=True), **kwargs)
    assert (planted_before["s_7d"] > 1e8).all() and (planted_before["hi_all"] == 1e9).all()
    assert (planted_before["l_all"] == 1e9).all() and (planted_before["rec_7d"] < 1e-4).all()


# ------------------------------------------------------------------ rolling cut-offs
def test_rolling_cutoffs_stack_the_single_cutoff_snapshots():
    rng = np.random.default_rng(5)
    events = pd.DataFrame({"k": rng.choice(list("abcdefgh"), 500),
                           "t": START + pd.to_timedelta(rng.integers(0, 120 * 24 * 60, 500), unit="min"),
                           "v": rng.normal(size=500)})
    cutoffs = ["2020-02-01", "2020-03-01", "2020-04-01"]
    kwargs = dict(by="k", time="t", windows=["30d", "all"], features=ALL_FEATURES | {"u": {"nunique": "v"},
                                                                                    "ft": {"first": "v"},
                                                                                    "lt": {"last": "v"}})
    stacked = aggregate_events(events, as_of=cutoffs, **kwargs)
    alone = pd.concat([aggregate_events(events, as_of=c, **kwargs) for c in cutoffs], ignore_index=True)
    pd.testing.assert_frame_equal(stacked, alone)
    assert sorted(stacked["as_of"].unique()) == [pd.Timestamp(c) for c in cutoffs]


# ------------------------------------------------------------------ data and config errors
def test_rows_without_a_key_are_dropped_and_counted():
    events = pd.DataFrame({"k": ["a", None, "a"], "t": pd.to_datetime(["2020-01-01"] * 3)})
    facts: dict = {}
    out = aggregate_events(events, by="k", time="t", as_of="2020-01-02", features={"n": "count"}, facts=facts)
    assert out["n_all"].tolist() == [2] and facts["rows_without_key"] == 1


@pytest.mark.parametrize("change, message", [
    (lambda e: e.drop(columns=["t"]), "no column 't' (time)"),
    (lambda e: e.assign(t=e["t"].dt.strftime("%Y%m%d")), "add `dates: {t: FORMAT}` to the load stage"),
    (lambda e: e.assign(t=e["t"].astype("int64")), "not a date-time"),
    (lambda e: e.assign(t=e["t"].dt.tz_localize("UTC")), "has a time zone"),
    (lambda e: e.assign(t=e["t"].where(e.index != 1)), "time column 't' has 1 missing value"),
    (lambda e: e.drop(columns=["v"]), "reads column 'v' (sum), which the events do not have"),
    (lambda e: e.assign(v=["1", "2", "3"]), "takes the sum of column 'v', which holds str"),
    (lambda e: e.drop(columns=["k"]), "no column 'k' (by)"),
])
def test_data_errors_name_the_column(change, message):
    events = pd.DataFrame({"k": ["a", "b", "a"], "t": pd.to_datetime(["2020-01-01", "2020-01-02", "2020-01-03"]),
                           "v": [1.0, 2.0, 3.0]})
    with pytest.raises(DataError) as info:
        aggregate_events(change(events), by="k", time="t", as_of="2020-02-01", features={"s": {"sum": "v"}})
    assert message in str(info.value)


@pytest.mark.parametrize("kwargs, message", [
    ({"windows": ["3m"]}, "not a fixed length; write 30d / 365d"),
    ({"windows": ["1w", "7d"]}, "'1w' and '7d' are the same window"),
    ({"features": {"s": {"median": "v"}}}, "unknown aggregate 'median'"),
    ({"features": {"r": {"recency": "t"}}}, "'recency' takes no column"),
    ({"features": {}}, "features is empty"),
    ({"as_of": "not a date"}, "'not a date' is not a date"),
    ({"as_of": ["2020-01-01", "2020-01-01"]}, "twice"),
    ({"as_of": "10/01/2024"}, "'10/01/2024' is not a date written YYYY-MM-DD"),     # month or day first?
    ({"as_of": ["2024-01-01", "13/01/2024"]}, "'13/01/2024' is not a date written YYYY-MM-DD"),
    ({"cutoff_column": "k"}, "cutoff_column 'k' is also a key"),
])
def test_bad_parameters_are_config_errors(kwargs, message):
    events = pd.DataFrame({"k": ["a"], "t": pd.to_datetime(["2020-01-01"]), "v": [1.0]})
    params = {"by": "k", "time": "t", "as_of": "2020-02-01", "features": {"n": "count"}} | kwargs
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("[", r"\[")):
        aggregate_events(events, **params)


# ------------------------------------------------------------------ partitioned and GPU
def random_events(n: int = 3000, seed: int = 11) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    values = rng.normal(size=n)
    values[rng.random(n) < 0.05] = np.nan
    return pd.DataFrame({"k": rng.integers(0, 200, n), "j": rng.choice(["p", "q"], n),
                         "t": (START + pd.to_timedelta(rng.integers(0, 200 * 24, n), unit="h")).astype("datetime64[us]"),
                         "v": values, "w": rng.integers(0, 5, n)})


PARTITIONED = dict(by=["k", "j"], time="t", as_of=["2020-03-01", "2020-05-01", "2020-07-01"],
                   windows=["14d", "60d", "all"],
                   features=ALL_FEATURES | {"u": {"nunique": "w"}, "ft": {"first": "w"}, "lt": {"last": "w"}})


def test_partitioned_events_give_the_in_memory_result():
    import dask
    import dask.dataframe as dd

    events = random_events()
    expected = aggregate_events(events, **PARTITIONED)
    lazy = aggregate_events(dd.from_pandas(events, npartitions=5), **PARTITIONED)
    with dask.config.set(scheduler="threads"):
        got = lazy.compute()
    got = got.sort_values(["as_of", "k", "j"]).reset_index(drop=True)
    got["j"] = got["j"].astype(expected["j"].dtype)
    pd.testing.assert_frame_equal(got, expected, check_exact=False, rtol=1e-9)


def test_partitioned_events_on_a_cluster(cluster_client):
    import dask.dataframe as dd

    events = random_events(seed=12)
    expected = aggregate_events(events, **PARTITIONED)
    got = aggregate_events(dd.from_pandas(events, npartitions=4), **PARTITIONED).compute()
    got = got.sort_values(["as_of", "k", "j"]).reset_index(drop=True)
    got["j"] = got["j"].astype(expected["j"].dtype)
    pd.testing.assert_frame_equal(got, expected, check_exact=False, rtol=1e-9)


@pytest.fixture
def gpu():
    from pipeline.backends import available_devices, get_backend

    if "gpu" not in available_devices():
        pytest.skip("needs an NVIDIA GPU with RAPIDS (cuDF)")
    return get_backend("gpu")


@pytest.mark.gpu
def test_cudf_gives_the_pandas_result(gpu):
    backend = gpu
    events = random_events(seed=13)
    expected = aggregate_events(events, **PARTITIONED)
    got = backend.to_host(aggregate_events(backend.from_pandas(events), backend=backend, **PARTITIONED))
    pd.testing.assert_frame_equal(got, expected, check_exact=False, rtol=1e-9, check_dtype=False)
    features = [c for c in expected.columns if c not in ("k", "j")]
    assert list(got[features].dtypes.astype(str)) == list(expected[features].dtypes.astype(str))


@pytest.mark.gpu
def test_partitioned_cudf_gives_the_pandas_result(gpu):
    import dask
    import dask.dataframe as dd

    events = random_events(seed=14)
    expected = aggregate_events(events, **PARTITIONED)
    lazy = dd.from_pandas(events, npartitions=3).to_backend("cudf")
    with dask.config.set(scheduler="synchronous"):
        got = gpu.to_host(aggregate_events(lazy, backend=gpu, **PARTITIONED).compute())
    got = got.sort_values(["as_of", "k", "j"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(got, expected, check_exact=False, rtol=1e-9, check_dtype=False)
