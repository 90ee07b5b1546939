"""The CPU table engines: Polars (the default) and pandas (the reference, ``PIPELINE_CPU_ENGINE=pandas``)
give the same tables for ``aggregate_events``, ``label_events`` and ``join_tables``: the same dtypes,
row order and values (floats to 1e-12 relative: the engines sum in different orders).

The inputs carry what tells engines apart: missing keys and values, ties in time, several cut-offs
and windows, entities without events in a window, text / date / bool columns, every aggregate.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pandas as pd
import polars as pl
import pytest

from pipeline.backends import get_backend
from pipeline.core.errors import ConfigError
from pipeline.events import aggregate_events, label_events
from pipeline.stages.join import join_tables

ENGINES = ("pandas", "polars")
START = pd.Timestamp("2020-01-01")
CUTOFFS = ["2020-02-01", "2020-03-15", "2020-05-01"]
EVERY_AGGREGATE = {
    "n": "count", "rec": "recency", "ten": "tenure", "gap": "interval_mean",
    "s": {"sum": "v"}, "m": {"mean": "v"}, "lo": {"min": "v"}, "hi": {"max": "v"}, "sd": {"std": "v"},
    "u": {"nunique": "w"}, "f": {"first": "v"}, "l": {"last": "v"},
    "ft": {"first": "w"}, "lt": {"last": "w"}, "tlo": {"min": "w"}, "thi": {"max": "w"},
    "dlo": {"min": "d"}, "dl": {"last": "d"}, "bhi": {"max": "b"}, "blo": {"min": "b"},
    "bf": {"first": "b"}, "bl": {"last": "b"}, "bs": {"sum": "b"}, "bu": {"nunique": "b"},
    "is": {"sum": "i"}, "ihi": {"max": "i"}, "iu": {"nunique": "i"},
}


def on_each_engine(monkeypatch: pytest.MonkeyPatch, work: Callable[[], pd.DataFrame]) -> dict[str, pd.DataFrame]:
    out = {}
    for engine in ENGINES:
        monkeypatch.setenv("PIPELINE_CPU_ENGINE", engine)
        out[engine] = work()
    return out


def assert_same(results: dict[str, pd.DataFrame]) -> pd.DataFrame:
    reference, polars = results["pandas"], results["polars"]
    assert list(polars.columns) == list(reference.columns)
    assert polars.dtypes.to_dict() == reference.dtypes.to_dict()
    pd.testing.assert_frame_equal(polars, reference, check_exact=False, rtol=1e-12, atol=0)
    return reference


def random_events(seed: int = 0, n: int = 600) -> pd.DataFrame:
    """Events of 40 entities over 5 months, in whole days (many ties in time), with gaps."""
    rng = np.random.default_rng(seed)
    events = pd.DataFrame({
        "k": rng.integers(0, 40, n).astype("float64"),
        "t": START + pd.to_timedelta(rng.integers(0, 150, n), unit="D"),
        "v": rng.normal(10, 3, n),
        "w": pd.Series(rng.choice(["a", "b", "c", "é"], n), dtype="str"),
        "d": START + pd.to_timedelta(rng.integers(0, 1000, n), unit="h"),
        "b": rng.random(n) < 0.3,
        "i": rng.integers(-5, 5, n),
    })
    events.loc[rng.random(n) < 0.05, "k"] = np.nan          # events without a key
    events.loc[rng.random(n) < 0.1, "v"] = np.nan
    events.loc[rng.random(n) < 0.1, "w"] = None
    return events


def test_the_engine_is_polars_unless_the_environment_says_pandas(monkeypatch):
    cpu = get_backend("cpu")
    monkeypatch.delenv("PIPELINE_CPU_ENGINE", raising=False)
    assert cpu.table_engine.name == "polars"
    monkeypatch.setenv("PIPELINE_CPU_ENGINE", "pandas")
    assert cpu.table_engine is None
    monkeypatch.setenv("PIPELINE_CPU_ENGINE", "duckdb")
    with pytest.raises(ConfigError, match="PIPELINE_CPU_ENGINE.*polars.*pandas"):
        cpu.table_engine


def test_every_aggregate_window_and_cutoff_agrees(monkeypatch):
    events = random_events()
    facts: dict[str, dict] = {}

    def work() -> pd.DataFrame:
        facts[len(facts)] = {}
        return aggregate_events(events, by="k", time="t", as_of=CUTOFFS, features=EVERY_AGGREGATE,
                                windows=["1d", "7d", "30d", "all"], facts=facts[len(facts) - 1])

    result = assert_same(on_each_engine(monkeypatch, work))
    assert facts[0] == facts[1] and facts[0]["rows_without_key"] > 0
    assert set(result["as_of"]) == {pd.Timestamp(c) for c in CUTOFFS}
    assert (result["n_1d"] == 0).any() and result["lo_1d"].isna().any()    # entities without events there


def test_the_output_columns_are_writable(monkeypatch):
    """pandas writes into a frame's columns in place; the engine's arrays must allow it."""
    monkeypatch.setenv("PIPELINE_CPU_ENGINE", "polars")
    result = aggregate_events(random_events(), by="k", time="t", as_of=CUTOFFS, features=EVERY_AGGREGATE,
                              windows=["7d", "all"])
    for column in result.columns:
        result.loc[0, column] = result.loc[1, column]
    assert result.iloc[0].equals(result.iloc[1])


def test_text_and_date_keys_and_several_of_them(monkeypatch):
    events = random_events(seed=3)
    events["name"] = pd.Series(np.where(events["k"].isna(), None, "c" + events["k"].astype(str)), dtype="str")
    events["day"] = events["d"].dt.normalize().where(events.index % 50 != 0)         # some missing
    result = assert_same(on_each_engine(monkeypatch, lambda: aggregate_events(
        events, by=["name", "day"], time="t", as_of=CUTOFFS[1:], features=EVERY_AGGREGATE, windows=["30d", "all"])))
    assert result["day"].notna().all() and result["name"].notna().all()


def test_ties_in_time_keep_input_row_order(monkeypatch):
    """Among events at one time, the earlier input row comes first: ``first`` takes it, ``last``
    the later one (as the ties test of ``test_events_aggregate`` has it)."""
    events = pd.DataFrame({"k": [1, 1, 1, 2, 2],
                           "t": pd.to_datetime(["2020-01-02", "2020-01-02", "2020-01-01", "2020-01-05", "2020-01-05"]),
                           "v": [10.0, 20.0, 30.0, np.nan, 5.0]})
    result = assert_same(on_each_engine(monkeypatch, lambda: aggregate_events(
        events, by="k", time="t", as_of="2020-02-01", features={"f": {"first": "v"}, "l": {"last": "v"}})))
    assert result["f_all"].tolist()[0] == 30.0 and result["l_all"].tolist()[0] == 20.0
    assert np.isnan(result["f_all"].tolist()[1]) and result["l_all"].tolist()[1] == 5.0


@pytest.mark.parametrize("engine", ENGINES)
def test_bool_min_max_first_last_are_nullable_booleans_in_every_window(monkeypatch, engine):
    """Every entity has an event in ``all``, one has none in ``7d``: both windows give the
    nullable "boolean" dtype, True/False kept as bools and the missing value missing."""
    monkeypatch.setenv("PIPELINE_CPU_ENGINE", engine)
    events = pd.DataFrame({"k": [1, 1, 2], "t": pd.to_datetime(["2020-01-30", "2020-01-02", "2020-01-03"]),
                           "b": [True, False, True]})
    features = {name: {name: "b"} for name in ("min", "max", "first", "last")}
    result = aggregate_events(events, by="k", time="t", as_of="2020-02-01", features=features, windows=["7d", "all"])
    for name in features:
        for window in ("7d", "all"):
            assert str(result[f"{name}_{window}"].dtype) == "boolean", (name, window)
    assert result["max_all"].tolist() == [True, True]
    assert result["min_all"].tolist() == [False, True]
    assert result["first_7d"].tolist()[0] is True and result["first_7d"].isna().tolist() == [False, True]


@pytest.mark.parametrize("target", [
    {"y": "no_event"}, {"y": "any_event"}, {"y": "count"}, {"y": {"sum": "v"}}, {"y": {"sum": "i"}},
    {"y": {"mean": "v"}}, {"y": {"min": "w"}}, {"y": {"max": "d"}}, {"y": {"min": "i"}}, {"y": {"nunique": "w"}},
])
@pytest.mark.parametrize("horizon", ["7d", "30d"])
def test_labels_agree(monkeypatch, target, horizon):
    events = random_events(seed=5)
    entities = pd.DataFrame({"k": [3.0, 1.0, np.nan, 99.0, 7.0, 3.0, 12.0], "x": list("abcdefg")})
    facts: list[dict] = []

    def work() -> pd.DataFrame:
        facts.append({})
        return label_events(events, entities, by="k", time="t", as_of=CUTOFFS[:2], horizon=horizon, target=target,
                            facts=facts[-1])

    assert_same(on_each_engine(monkeypatch, work))
    assert facts[0] == facts[1]


def test_labels_of_an_entity_table_with_cutoffs_agree(monkeypatch):
    events = random_events(seed=6)
    features = aggregate_events(events, by="k", time="t", as_of=CUTOFFS[:2], features={"n": "count"})
    assert_same(on_each_engine(monkeypatch, lambda: label_events(
        events, features, by="k", time="t", as_of=CUTOFFS[:2], horizon="30d", target={"churn": "no_event"})))


LEFT = pd.DataFrame({"k": [1.0, 2.0, np.nan, 3.0, 2.0, 5.0, 1.0], "a": [1, 2, 3, 4, 5, 6, 7],
                     "s": pd.Series(["x", "y", "z", None, "u", "v", "w"], dtype="str"),
                     "b": [True, False, True, True, False, True, False]})
RIGHT = pd.DataFrame({"k": [2, 9, None, 1, 7], "c": [10, 20, 30, 40, 50], "a": [0.1, 0.2, 0.3, 0.4, 0.5],
                      "d": pd.to_datetime(["2020-01-01", "2020-01-02", None, "2020-01-04", "2020-01-05"]),
                      "flag": [True, False, True, False, True]})


@pytest.mark.parametrize("how", ["inner", "left", "right", "outer"])
@pytest.mark.parametrize("validate", ["many_to_one", "one_to_many", "one_to_one"])
def test_joins_agree(monkeypatch, how, validate):
    left = LEFT if validate == "many_to_one" else LEFT.drop_duplicates("k")
    right = RIGHT if validate != "one_to_many" else pd.concat([RIGHT, RIGHT.iloc[[0, 3]]], ignore_index=True)
    result = assert_same(on_each_engine(monkeypatch, lambda: join_tables(
        left, right, on="k", how=how, validate=validate)))
    assert list(result.columns) == ["k", "a", "s", "b", "c", "a_right", "d", "flag"]
    if how in ("left", "outer"):
        assert result["a"].iloc[:len(left)].tolist() == left["a"].tolist()[:len(left)] or validate == "one_to_many"


def test_join_row_order_with_repeated_right_keys(monkeypatch):
    """Left rows in left order, each with its matches in right order, then right-only rows."""
    left = pd.DataFrame({"k": ["b", "a", None, "c"], "x": [1, 2, 3, 4]})
    right = pd.DataFrame({"k": ["a", "z", "b", "a", None, "y"], "y": [1, 2, 3, 4, 5, 6]})
    result = assert_same(on_each_engine(monkeypatch, lambda: join_tables(
        left, right, on="k", how="outer", validate="one_to_many")))
    assert result["x"].tolist()[:5] == [1, 2, 2, 3, 4]
    assert result["y"].tolist()[:3] == [3, 1, 4]
    assert result["k"].tolist()[5:] == ["z", None, "y"] or result["y"].tolist()[5:] == [2, 5, 6]


def test_joins_on_two_keys_agree(monkeypatch):
    left = pd.DataFrame({"k": [1, 1, 2, 2, 3], "j": ["a", "b", "a", None, "a"], "x": range(5)})
    right = pd.DataFrame({"k": [1, 2, 2, 4], "j": ["b", "a", None, "a"], "y": [1.5, 2.5, 3.5, 4.5]})
    for how in ("inner", "left", "right", "outer"):
        assert_same(on_each_engine(monkeypatch, lambda: join_tables(left, right, on=["k", "j"], how=how,
                                                                    validate="one_to_one")))


@pytest.mark.parametrize("keys, dense", [
    (np.array([5, -100, 100, 0, -3], dtype=np.int8), False),        # span 201 > 2 x 5: Polars' sort
    (np.random.default_rng(3).permutation(np.arange(-120, 120)).astype(np.int8), True),
    (np.random.default_rng(4).permutation(np.arange(10**12, 10**12 + 3000, 2)), True),
    (np.random.default_rng(5).choice(10**9, 3000, replace=False), False),
])
def test_the_key_order_sorts_distinct_integer_keys_dense_or_not(keys, dense):
    from pipeline.backends.polars_engine import _dense_order, _key_order

    assert (_dense_order(pl.Series(keys)) is not None) == dense
    result = pl.DataFrame({"k": np.concatenate([keys, keys[::-1]]), "cut": np.repeat([1, 2], len(keys))})
    order = _key_order(result, ["k"], "cut")
    expected = np.concatenate([np.argsort(keys, kind="stable"), len(keys) + np.argsort(keys[::-1], kind="stable")])
    np.testing.assert_array_equal(order, expected)


def test_a_category_column_is_left_to_the_pandas_code(monkeypatch):
    events = random_events(seed=8)
    events["w"] = events["w"].astype("category")
    assert_same(on_each_engine(monkeypatch, lambda: aggregate_events(
        events, by="k", time="t", as_of=CUTOFFS, features={"u": {"nunique": "w"}, "f": {"first": "w"}})))


def test_partitioned_events_agree(monkeypatch):
    import dask
    import dask.dataframe as dd

    events = random_events(seed=9).dropna(subset=["k"])
    features = {k: v for k, v in EVERY_AGGREGATE.items() if k not in ("dlo", "dl")}

    def work() -> pd.DataFrame:
        lazy = aggregate_events(dd.from_pandas(events, npartitions=3), by="k", time="t", as_of=CUTOFFS,
                                features=features, windows=["7d", "all"])
        with dask.config.set(scheduler="synchronous"):
            return lazy.compute().sort_values(["as_of", "k"]).reset_index(drop=True)

    assert_same(on_each_engine(monkeypatch, work))


def test_empty_results_have_the_same_columns_and_dtypes(monkeypatch):
    """No event before the cut-off (a Dask partition can be so): no rows, every dtype as usual."""
    events = random_events(seed=10)
    result = assert_same(on_each_engine(monkeypatch, lambda: aggregate_events(
        events, by="k", time="t", as_of="2019-06-01", features=EVERY_AGGREGATE, windows=["7d", "all"])))
    assert len(result) == 0
    for how in ("inner", "left", "right", "outer"):
        assert_same(on_each_engine(monkeypatch, lambda: join_tables(
            LEFT.iloc[:0], RIGHT, on="k", how=how, validate="many_to_one")))


@pytest.mark.parametrize("unit", ["s", "ms", "us", "ns"])
def test_every_time_unit_agrees(monkeypatch, unit):
    """Polars keeps no seconds unit (datetime64[s] arrives as ms): windows, days and the
    cut-off column must not depend on it."""
    rng = np.random.default_rng(11)
    seconds = pd.to_timedelta(rng.integers(0, 90 * 24 * 3600, 300), unit="s")
    events = pd.DataFrame({"k": rng.integers(0, 20, 300), "t": (START + seconds).astype(f"datetime64[{unit}]"),
                           "v": rng.normal(size=300)})
    features = {"n": "count", "r": "recency", "g": "interval_mean", "tm": {"max": "t"}, "f": {"first": "v"}}
    result = assert_same(on_each_engine(monkeypatch, lambda: aggregate_events(
        events, by="k", time="t", as_of=["2020-02-15", "2020-03-01"], features=features, windows=["12h", "7d", "all"])))
    assert result["as_of"].dtype == np.dtype(f"datetime64[{unit}]")
    assert_same(on_each_engine(monkeypatch, lambda: label_events(
        events, events[["k"]].drop_duplicates(), by="k", time="t", as_of="2020-02-15", horizon="10d",
        target={"y": {"max": "t"}})))


# ---------------------------------------------------------------- the same bits on every run
def purchases(n: int = 400_000, seed: int = 5) -> pd.DataFrame:
    """Many events of a few thousand entities, float values of many magnitudes: enough rows that
    Polars' streaming group-by splits each sum over its threads."""
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"k": rng.integers(0, 3000, n),
                         "t": START + pd.to_timedelta(rng.integers(0, 365 * 24, n), unit="h"),
                         "v": rng.lognormal(2, 2, n) * rng.choice([-1.0, 1.0], n)})


def test_the_polars_engine_gives_the_same_bits_on_every_run_by_default(monkeypatch):
    monkeypatch.setenv("PIPELINE_CPU_ENGINE", "polars")
    monkeypatch.delenv("PIPELINE_REDUCTIONS", raising=False)
    events = purchases()
    spec = dict(by="k", time="t", as_of=["2020-06-01", "2020-12-31"], windows=["30d", "all"],
                features={"s": {"sum": "v"}, "m": {"mean": "v"}, "sd": {"std": "v"}})
    first = aggregate_events(events, **spec)
    for _ in range(3):
        pd.testing.assert_frame_equal(aggregate_events(events, **spec), first, check_exact=True)
    entities = first.loc[first.as_of == pd.Timestamp("2020-06-01"), ["k"]]
    labels = [label_events(events, entities, by="k", time="t", as_of="2020-06-01", horizon="90d",
                           target={"y": {"sum": "v"}})
              for _ in range(3)]
    for again in labels[1:]:
        pd.testing.assert_frame_equal(again, labels[0], check_exact=True)
    # Exact sums: each within an ulp of the correctly rounded sum (pandas' own is within its rounding).
    before = events[events.t < pd.Timestamp("2020-12-31")]
    exact = before.groupby("k")["v"].agg(math.fsum)
    got = first[first.as_of == pd.Timestamp("2020-12-31")].set_index("k")["s_all"]
    np.testing.assert_allclose(got.loc[exact.index], exact, rtol=2.3e-16, atol=0)


def test_exact_sums_survive_cancellation_and_an_infinity_sums_as_pandas_does(monkeypatch):
    monkeypatch.setenv("PIPELINE_CPU_ENGINE", "polars")
    events = pd.DataFrame({"k": [1, 1, 1, 2, 2, 3], "t": [START] * 6,
                           "v": [1e16, 1.0, -1e16, np.inf, 2.0, np.nan]})
    out = aggregate_events(events, by="k", time="t", as_of="2020-01-02", features={"s": {"sum": "v"}, "m": {"mean": "v"}})
    assert out["s_all"].tolist()[0] == 1.0 and out["m_all"].tolist()[0] == pytest.approx(1 / 3, rel=1e-15)
    assert out["s_all"].tolist()[1] == np.inf and out["s_all"].tolist()[2] == 0.0


def amounts(n: int = 400_000, seed: int = 6) -> pd.DataFrame:
    """Prices in cents (two decimal places), some missing: the floats most event logs sum."""
    rng = np.random.default_rng(seed)
    cents = np.round(rng.lognormal(7, 2, n)) * rng.choice([-1, 1], n)
    values = cents / 100
    values[rng.random(n) < 0.01] = np.nan
    return pd.DataFrame({"k": rng.integers(0, 3000, n),
                         "t": START + pd.to_timedelta(rng.integers(0, 365 * 24, n), unit="h"), "v": values})


@pytest.mark.parametrize("column, places", [("v", 2), ("whole", 0), ("ratio", None)])
def test_decimal_columns_are_summed_as_integers_of_their_last_place(column, places):
    from pipeline.backends.polars_engine import _FixedSums

    events = amounts(50_000)
    events["whole"] = np.floor(events["v"])
    events["ratio"] = events["v"] / 3
    frame = pl.from_pandas(events, nan_to_null=True)
    fixed = _FixedSums(frame, [column])
    assert column in fixed and fixed.decimals.get(column) == places
    assert not fixed.infinite


def test_a_decimal_column_with_an_infinity_sums_to_it_where_it_is(monkeypatch):
    monkeypatch.setenv("PIPELINE_CPU_ENGINE", "polars")
    monkeypatch.delenv("PIPELINE_REDUCTIONS", raising=False)
    events = pd.DataFrame({"k": [1, 1, 2, 2, 3], "t": [START] * 5, "v": [0.1, 0.2, np.inf, 1.25, -np.inf]})
    out = aggregate_events(events, by="k", time="t", as_of="2020-01-02", features={"s": {"sum": "v"}})
    assert out["s_all"].tolist() == [0.3, np.inf, -np.inf]       # 0.1 + 0.2 in cents: 0.3, not 0.30000000000000004


def test_decimal_sums_are_the_correctly_rounded_sums_of_the_decimals_on_every_run(monkeypatch):
    monkeypatch.setenv("PIPELINE_CPU_ENGINE", "polars")
    monkeypatch.delenv("PIPELINE_REDUCTIONS", raising=False)
    events = amounts()
    spec = dict(by="k", time="t", as_of="2020-12-31", windows=["30d", "all"],
                features={"s": {"sum": "v"}, "m": {"mean": "v"}})
    first = aggregate_events(events, **spec)
    for _ in range(3):
        pd.testing.assert_frame_equal(aggregate_events(events, **spec), first, check_exact=True)
    # Each group's cents summed as Python integers: the exact decimal sum, then one rounding
    # (the division by 100 may round once more: Polars multiplies by the reciprocal).
    cents = (events["v"] * 100).round()
    exact = cents.groupby(events["k"]).agg(lambda c: int(c.dropna().astype("int64").sum()) / 100)
    got = first.set_index("k")["s_all"].loc[exact.index]
    np.testing.assert_allclose(got, exact, rtol=2.3e-16, atol=0)
    counts = events["v"].notna().groupby(events["k"]).sum()
    np.testing.assert_allclose(first.set_index("k")["m_all"].loc[exact.index], exact / counts, rtol=5e-16)


def test_fast_reductions_are_an_option_the_run_record_names(monkeypatch):
    backend = get_backend("cpu")
    monkeypatch.setenv("PIPELINE_CPU_ENGINE", "polars")
    monkeypatch.delenv("PIPELINE_REDUCTIONS", raising=False)
    assert backend.versions()["reductions"] == "repeatable" and backend.table_engine.repeatable
    monkeypatch.setenv("PIPELINE_REDUCTIONS", "fast")
    assert backend.versions()["reductions"] == "fast" and not backend.table_engine.repeatable
    events = purchases(20_000)
    fast = aggregate_events(events, by="k", time="t", as_of="2020-12-31", features={"s": {"sum": "v"}})
    monkeypatch.delenv("PIPELINE_REDUCTIONS")
    exact = aggregate_events(events, by="k", time="t", as_of="2020-12-31", features={"s": {"sum": "v"}})
    np.testing.assert_allclose(fast["s_all"], exact["s_all"], rtol=1e-12)
    monkeypatch.setenv("PIPELINE_CPU_ENGINE", "pandas")              # one core, row order: always repeatable
    monkeypatch.setenv("PIPELINE_REDUCTIONS", "fast")
    assert backend.versions()["reductions"] == "repeatable"
    monkeypatch.setenv("PIPELINE_REDUCTIONS", "quick")
    with pytest.raises(ConfigError, match=r"\$PIPELINE_REDUCTIONS is 'quick'"):
        backend.versions()


@pytest.mark.parametrize("outlier", [1e16, 1e22, 1e30, np.finfo(np.float64).max])
def test_one_huge_value_leaves_every_other_groups_sum_exact(monkeypatch, outlier):
    """The 128-bit form's unit came from the column's largest magnitude: one 1e30 made every
    other entity's sum and mean 0.0 (float max, a common sentinel, all of them), exit 0."""
    monkeypatch.delenv("PIPELINE_REDUCTIONS", raising=False)
    rng = np.random.default_rng(7)
    n = 50_000
    events = pd.DataFrame({"k": rng.integers(0, 500, n),
                           "t": START + pd.to_timedelta(rng.integers(0, 300, n), unit="D"),
                           "v": rng.lognormal(2, 1, n) * rng.choice([-1.0, 1.0], n)})
    events.loc[len(events)] = {"k": 999, "t": START, "v": outlier}
    spec = dict(by="k", time="t", as_of="2021-06-01", features={"s": {"sum": "v"}, "m": {"mean": "v"}})
    results = on_each_engine(monkeypatch, lambda: aggregate_events(events, **spec))
    exact = events.groupby("k")["v"].agg(math.fsum)
    for engine, table in results.items():
        got = table.set_index("k")["s_all"]
        assert got.loc[999] == outlier
        np.testing.assert_allclose(got.loc[exact.index[:-1]], exact.iloc[:-1], rtol=1e-13, atol=0, err_msg=engine)
    monkeypatch.setenv("PIPELINE_CPU_ENGINE", "polars")
    again = aggregate_events(events, **spec)                  # still the same bits on every run
    pd.testing.assert_frame_equal(again, results["polars"], check_exact=True)
    entities = pd.DataFrame({"k": exact.index})
    labels = label_events(events.assign(t=events.t + pd.Timedelta("1D")), entities, by="k", time="t",
                          as_of="2020-01-01", horizon="300d", target={"y": {"sum": "v"}}).set_index("k")["y"]
    inside = events[events.t + pd.Timedelta("1D") < START + pd.Timedelta("300D")].groupby("k")["v"].agg(math.fsum)
    np.testing.assert_allclose(labels.loc[inside.index[:-1]], inside.iloc[:-1], rtol=1e-13, atol=0)
