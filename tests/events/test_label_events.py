"""``label_events``: targets against a plain pandas reference, horizon boundaries, leakage
planting, rolling cut-offs, entity tables with and without a cut-off column, censoring,
partitioned data (Dask) and cuDF."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.core.errors import DataError
from pipeline.events import aggregate_events, label_events

START = pd.Timestamp("2020-01-01")
TARGETS = ["no_event", "any_event", "count", {"sum": "v"}, {"mean": "v"}, {"min": "v"}, {"max": "v"},
           {"nunique": "v"}]


def reference_labels(events: pd.DataFrame, entities: list[str], cutoffs: list[str], horizon: pd.Timedelta,
                     target: object) -> pd.DataFrame:
    """Each entity at each cut-off, labelled from its events in [c, c + horizon), the obvious way."""
    rows = []
    for cutoff in sorted(pd.Timestamp(c) for c in cutoffs):
        for entity in entities:
            mine = events[(events["k"] == entity) & (events["t"] >= cutoff) & (events["t"] < cutoff + horizon)]
            if target == "no_event":
                value = int(len(mine) == 0)
            elif target == "any_event":
                value = int(len(mine) > 0)
            elif target == "count":
                value = len(mine)
            else:
                (aggregate, column), = target.items()
                values = mine[column]
                if aggregate == "sum":
                    value = float(values.sum())
                elif aggregate == "nunique":
                    value = int(values.nunique())
                else:
                    value = float(getattr(values, aggregate)()) if values.notna().any() else math.nan
                    if math.isnan(value):
                        continue                              # no value: the row is dropped
            rows.append({"k": entity, "as_of": cutoff, "y": value})
    return pd.DataFrame(rows, columns=["k", "as_of", "y"])


@st.composite
def labelled_cases(draw):
    n = draw(st.integers(1, 40))
    span = draw(st.integers(1, 60))
    keys = draw(st.lists(st.sampled_from(["a", "b", "c", None]), min_size=n, max_size=n))
    hours = draw(st.lists(st.integers(0, span), min_size=n, max_size=n))
    values = draw(st.lists(st.one_of(st.none(), st.integers(-3, 3).map(float)), min_size=n, max_size=n))
    events = pd.DataFrame({"k": pd.Series(keys, dtype="str"),
                           "t": pd.Series(START + pd.to_timedelta([12 * h for h in hours], unit="h"),
                                          dtype="datetime64[us]"),
                           "v": pd.Series(values, dtype="float64")})
    last = events["t"].max()
    horizon_days = draw(st.integers(1, 5))
    latest = (last + pd.Timedelta(days=1) - pd.Timedelta(days=horizon_days)).floor("D")
    offsets = draw(st.lists(st.integers(0, 10), min_size=1, max_size=3, unique=True))
    cutoffs = [(latest - pd.Timedelta(days=o)).isoformat() for o in offsets]
    return events, cutoffs, horizon_days, draw(st.sampled_from(TARGETS))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=labelled_cases())
def test_every_target_matches_the_reference(case):
    events, cutoffs, horizon_days, target = case
    entities = pd.DataFrame({"k": ["c", "a", "z", "b"]})                # "z" never has events
    out = label_events(events, entities, by="k", time="t", as_of=cutoffs, horizon=f"{horizon_days}d",
                       target={"y": target})
    ref = reference_labels(events, ["c", "a", "z", "b"], cutoffs, pd.Timedelta(days=horizon_days), target)
    assert list(out.columns) == ["k", "as_of", "y"]
    assert out["k"].tolist() == ref["k"].tolist() and out["as_of"].tolist() == ref["as_of"].tolist()
    for got, want in zip(out["y"].tolist(), ref["y"].tolist()):
        assert got == pytest.approx(want, rel=1e-9, abs=1e-12), (target, out, ref)
    expected_dtype = {"no_event": "int8", "any_event": "int8", "count": "int64"}.get(
        target if isinstance(target, str) else "", "int64" if target == {"nunique": "v"} else "float64")
    assert str(out["y"].dtype) == expected_dtype


def test_the_horizon_starts_on_the_cutoff_and_ends_before_cutoff_plus_horizon():
    cutoff, horizon = pd.Timestamp("2020-02-01"), pd.Timedelta(days=30)
    second = pd.Timedelta(seconds=1)
    events = pd.DataFrame({
        "k": ["on_cutoff", "before_cutoff", "last_second", "on_end", "late"],
        "t": [cutoff, cutoff - second, cutoff + horizon - second, cutoff + horizon, cutoff + 2 * horizon],
    })
    entities = pd.DataFrame({"k": ["on_cutoff", "before_cutoff", "last_second", "on_end"]})
    out = label_events(events, entities, by="k", time="t", as_of="2020-02-01", horizon="30d",
                       target={"churn": "no_event"})
    assert dict(zip(out["k"], out["churn"])) == {"on_cutoff": 0, "before_cutoff": 1, "last_second": 0, "on_end": 1}


def history(seed: int = 2) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"k": rng.choice(list("abcdefgh"), 400),
                         "t": START + pd.to_timedelta(rng.integers(0, 120 * 24, 400), unit="h"),
                         "v": rng.normal(size=400)})


def test_planted_events_change_labels_only_from_the_cutoff_on():
    events = history()
    cutoff = START + pd.Timedelta(days=60)
    entities = aggregate_events(events, by="k", time="t", as_of=cutoff.isoformat(), features={"n": "count"})
    kwargs = dict(by="k", time="t", as_of=cutoff.isoformat(), horizon="30d", target={"y": {"sum": "v"}})
    base = label_events(events, entities, **kwargs)
    before = pd.DataFrame({"k": list("abcdefgh"), "v": 1e9, "t": cutoff - pd.Timedelta(seconds=1)})
    pd.testing.assert_frame_equal(label_events(pd.concat([events, before], ignore_index=True), entities, **kwargs),
                                  base)
    after = pd.DataFrame({"k": list("abcdefgh"), "v": 1e9, "t": cutoff})
    planted = label_events(pd.concat([events, after], ignore_index=True), entities, **kwargs)
    assert ((planted["y"] - base["y"]) - 1e9).abs().max() < 1e-3
    assert planted.drop(columns="y").equals(base.drop(columns="y"))


def test_rolling_cutoffs_stack_the_single_cutoff_labels():
    events = history(4)
    cutoffs = ["2020-02-01", "2020-03-01", "2020-03-15"]
    kwargs = dict(by="k", time="t", horizon="21d", target={"churn": "no_event"})
    entities = aggregate_events(events, by="k", time="t", as_of=cutoffs, windows=["14d", "all"],
                                features={"n": "count"})
    stacked = label_events(events, entities, as_of=cutoffs, **kwargs)
    alone = pd.concat([label_events(events, entities[entities["as_of"] == c], as_of=c, **kwargs) for c in cutoffs],
                      ignore_index=True)
    pd.testing.assert_frame_equal(stacked, alone)
    static = pd.DataFrame({"k": list("hgfedcba"), "region": list("nsnsnsns")})
    crossed = label_events(events, static, as_of=cutoffs, **kwargs)
    assert list(crossed.columns) == ["k", "region", "as_of", "churn"] and len(crossed) == 24
    assert crossed["k"].tolist() == list("hgfedcba") * 3          # cut-off by cut-off, table order
    for cutoff in cutoffs:
        one = label_events(events, static, as_of=cutoff, **kwargs)
        pd.testing.assert_frame_equal(crossed[crossed["as_of"] == cutoff].reset_index(drop=True), one)


def test_entity_rows_keep_their_order_and_columns():
    events = history(6)
    entities = pd.DataFrame({"k": ["h", "a", "nobody", "c"], "size": [1, 2, 3, 4]})
    out = label_events(events, entities, by="k", time="t", as_of="2020-03-01", horizon="30d",
                       target={"orders": "count"})
    assert out["k"].tolist() == ["h", "a", "nobody", "c"] and out["size"].tolist() == [1, 2, 3, 4]
    assert out.loc[2, "orders"] == 0


def test_rows_without_a_value_or_a_key_are_dropped_and_counted():
    events = pd.DataFrame({"k": ["a", "a"], "t": pd.to_datetime(["2020-01-01", "2020-03-01"]), "v": [1.0, 5.0]})
    entities = pd.DataFrame({"k": ["a", "b", None]})
    facts: dict = {}
    out = label_events(events, entities, by="k", time="t", as_of="2020-02-01", horizon="30d",
                       target={"spend": {"mean": "v"}}, facts=facts)
    assert out["k"].tolist() == ["a"] and out["spend"].tolist() == [5.0]
    assert facts == {"rows_without_key": 1, "unlabeled": 1}


def test_a_horizon_past_the_data_is_refused_naming_the_dates():
    events = pd.DataFrame({"k": ["a", "a"], "t": pd.to_datetime(["2020-01-01", "2020-06-30"])})
    entities = pd.DataFrame({"k": ["a"]})
    kwargs = dict(by="k", time="t", horizon="30d", target={"churn": "no_event"})
    label_events(events, entities, as_of="2020-06-01", **kwargs)          # ends 07-01 = last event + 1 day
    with pytest.raises(DataError) as info:
        label_events(events, entities, as_of=["2020-05-01", "2020-06-02"], **kwargs)
    message = str(info.value)
    assert "as_of 2020-06-02" in message and "horizon 30d" in message and "last event (2020-06-30)" in message


@pytest.mark.parametrize("entities, message", [
    (pd.DataFrame({"k": ["a"], "churn": [1]}), "already has a column 'churn'"),
    (pd.DataFrame({"k": [1]}), "key 'k' is str in the events and int64 in the entity table"),
    (pd.DataFrame({"other": ["a"]}), "no column 'k' (by)"),
    (pd.DataFrame({"k": ["a"], "as_of": pd.to_datetime(["2020-03-01"])}), "rows at cut-off 2020-03-01"),
    (pd.DataFrame({"k": ["a"], "as_of": ["2020-02-01"]}), "time column 'as_of' is str"),
])
def test_entity_table_errors_name_the_column(entities, message):
    events = pd.DataFrame({"k": ["a", "a"], "t": pd.to_datetime(["2020-01-01", "2020-06-30"])})
    with pytest.raises(DataError) as info:
        label_events(events, entities, by="k", time="t", as_of="2020-02-01", horizon="30d",
                     target={"churn": "no_event"})
    assert message in str(info.value)


# ------------------------------------------------------------------ partitioned and GPU
def random_events(seed: int = 21, n: int = 3000) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"k": rng.integers(0, 150, n),
                         "t": (START + pd.to_timedelta(rng.integers(0, 200 * 24, n), unit="h")).astype("datetime64[us]"),
                         "v": rng.normal(size=n)})


CUTOFFS = ["2020-03-01", "2020-04-01", "2020-05-01"]
FEATURES = dict(by="k", time="t", as_of=CUTOFFS, windows=["30d", "all"], features={"n": "count", "s": {"sum": "v"}})


@pytest.mark.parametrize("target", ["no_event", {"sum": "v"}, {"max": "v"}])
def test_partitioned_labels_give_the_in_memory_result(target):
    import dask
    import dask.dataframe as dd

    events = random_events()
    entities = aggregate_events(events, **FEATURES)
    kwargs = dict(by="k", time="t", as_of=CUTOFFS, horizon="45d", target={"y": target})
    expected = label_events(events, entities, **kwargs)
    lazy_events = dd.from_pandas(events, npartitions=4)
    with dask.config.set(scheduler="threads"):
        lazy_entities = aggregate_events(lazy_events, **FEATURES)
        got = label_events(lazy_events, lazy_entities, **kwargs).compute()
        mixed = label_events(lazy_events, entities, **kwargs)             # in-memory entity table
    got = got.sort_values(["as_of", "k"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(got, expected, check_exact=False, rtol=1e-9)
    pd.testing.assert_frame_equal(mixed, expected, check_exact=False, rtol=1e-9)


def test_partitioned_labels_on_a_cluster(cluster_client):
    import dask.dataframe as dd

    events = random_events(seed=22)
    static = pd.DataFrame({"k": np.arange(0, 160), "group": np.arange(160) % 3})
    kwargs = dict(by="k", time="t", as_of=CUTOFFS, horizon="45d", target={"churn": "no_event"})
    expected = label_events(events, static, **kwargs)
    got = label_events(dd.from_pandas(events, npartitions=4), dd.from_pandas(static, npartitions=3), **kwargs)
    got = got.compute().sort_values(["as_of", "k"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(got, expected.sort_values(["as_of", "k"]).reset_index(drop=True))


@pytest.fixture
def gpu():
    from pipeline.backends import available_devices, get_backend

    if "gpu" not in available_devices():
        pytest.skip("needs an NVIDIA GPU with RAPIDS (cuDF)")
    return get_backend("gpu")


@pytest.mark.gpu
@pytest.mark.parametrize("target", ["no_event", "count", {"sum": "v"}, {"mean": "v"}])
def test_cudf_gives_the_pandas_result(gpu, target):
    events = random_events(seed=23)
    entities = aggregate_events(events, **FEATURES)
    kwargs = dict(by="k", time="t", as_of=CUTOFFS, horizon="45d", target={"y": target})
    expected = label_events(events, entities, **kwargs)
    got = gpu.to_host(label_events(gpu.from_pandas(events), gpu.from_pandas(entities), backend=gpu, **kwargs))
    pd.testing.assert_frame_equal(got, expected, check_exact=False, rtol=1e-9, check_dtype=False)
    assert str(got["y"].dtype) == str(expected["y"].dtype)


def _merges(frame) -> set[str]:
    """The merge / join expressions a Dask frame is built from."""
    return {type(node).__name__ for node in frame.expr.walk()} & {"Merge", "JoinRecursive", "HashJoinP2P"}


def test_labels_of_an_aggregate_on_dask_move_only_the_horizon_events():
    """The entity table an aggregate made is already partitioned on the keys: the label lines
    the events up with it partition by partition instead of merging (which would shuffle the
    whole, wide entity table)."""
    import dask
    import dask.dataframe as dd

    events = random_events(seed=23)
    kwargs = dict(by="k", time="t", as_of=CUTOFFS, horizon="45d", target={"y": "count"})
    expected = label_events(events, aggregate_events(events, **FEATURES), **kwargs)
    lazy_events = dd.from_pandas(events, npartitions=4)
    lazy_entities = aggregate_events(lazy_events, **FEATURES)
    lined_up = label_events(lazy_events, lazy_entities, **kwargs)
    assert not _merges(lined_up)
    assert lined_up.npartitions == lazy_entities.npartitions
    # The same entity table, no longer known to be partitioned on the keys: a merge.
    reshuffled = lazy_entities.repartition(npartitions=3)
    merged = label_events(lazy_events, reshuffled, **kwargs)
    assert _merges(merged)
    with dask.config.set(scheduler="threads"):
        for got in (lined_up, merged):
            got = got.compute().sort_values(["as_of", "k"]).reset_index(drop=True)
            pd.testing.assert_frame_equal(got, expected)


def test_an_entity_table_with_other_key_dtypes_is_merged_not_lined_up():
    import dask
    import dask.dataframe as dd

    events = random_events(seed=24)
    kwargs = dict(by="k", time="t", as_of=CUTOFFS, horizon="45d", target={"y": "no_event"})
    expected = label_events(events, aggregate_events(events, **FEATURES), **kwargs)
    lazy_entities = aggregate_events(dd.from_pandas(events, npartitions=4), **FEATURES)
    narrow_keys = dd.from_pandas(events.astype({"k": "int32"}), npartitions=4)
    got = label_events(narrow_keys, lazy_entities, **kwargs)
    assert _merges(got)
    with dask.config.set(scheduler="threads"):
        got = got.compute().sort_values(["as_of", "k"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(got, expected)
