"""``join``: keys checked (present, same kind, unique where validate says), missing keys never
match, a deterministic row order, suffixes, and partitioned results equal to in-memory ones."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.config import load_config
from pipeline.core.errors import ConfigError, DataError
from pipeline.stages.join import join_tables


def reference_join(left: pd.DataFrame, right: pd.DataFrame, keys: list[str], how: str,
                   suffixes=("", "_right")) -> pd.DataFrame:
    """The documented semantics, row by row: left rows in left order, each with its matches in
    right order (or alone), then right-only rows in right order; a missing key matches nothing."""
    clash = [c for c in left.columns if c in right.columns and c not in keys]
    lcols = [f"{c}{suffixes[0]}" if c in clash else c for c in left.columns]
    rcols = [f"{c}{suffixes[1]}" if c in clash else c for c in right.columns if c not in keys]
    rvalue_cols = [c for c in right.columns if c not in keys]

    def key(row):
        values = tuple(row[k] for k in keys)
        return None if any(pd.isna(v) for v in values) else values

    rows, matched_right = [], set()
    for _, lrow in left.iterrows():
        k = key(lrow)
        hits = [j for j in range(len(right)) if k is not None and key(right.iloc[j]) == k]
        for j in hits:
            matched_right.add(j)
            rows.append([*lrow.tolist(), *right.iloc[j][rvalue_cols].tolist()])
        if not hits and how in ("left", "outer"):
            rows.append([*lrow.tolist(), *[np.nan] * len(rvalue_cols)])
    if how in ("right", "outer"):
        for j in range(len(right)):
            if j not in matched_right:
                rrow = right.iloc[j]
                lvals = [rrow[c] if c in keys else np.nan for c in left.columns]
                rows.append([*lvals, *rrow[rvalue_cols].tolist()])
    return pd.DataFrame(rows, columns=[*lcols, *rcols])


def assert_same_rows(got: pd.DataFrame, expected: pd.DataFrame) -> None:
    assert list(got.columns) == list(expected.columns)
    assert len(got) == len(expected)
    for column in got.columns:
        a, b = got[column].tolist(), expected[column].tolist()
        assert all((pd.isna(x) and pd.isna(y)) or x == y for x, y in zip(a, b)), (column, a, b)


keys_with_gaps = st.one_of(st.none(), st.integers(0, 6))


@settings(max_examples=80, deadline=None, derandomize=True, database=None)
@given(left_keys=st.lists(keys_with_gaps, max_size=14), right_n=st.integers(0, 7),
       how=st.sampled_from(["inner", "left", "right", "outer"]), unique_right=st.booleans(), data=st.data())
def test_rows_and_order_match_the_reference(left_keys, right_n, how, unique_right, data):
    if unique_right:        # many_to_one: the right has each key once (missing keys are never keys)
        right_keys = data.draw(st.lists(st.integers(0, 6), min_size=right_n, max_size=right_n, unique=True))
        right_keys = [k if data.draw(st.booleans()) or i else None for i, k in enumerate(right_keys)]
        validate = "many_to_one"
    else:                   # one_to_many: the left unique instead
        left_keys = list(dict.fromkeys(k for k in left_keys if k is not None))
        right_keys = data.draw(st.lists(keys_with_gaps, min_size=right_n, max_size=right_n))
        validate = "one_to_many"
    left = pd.DataFrame({"k": pd.array(left_keys, dtype="Float64").astype("float64"),
                         "a": [f"l{i}" for i in range(len(left_keys))], "both": np.arange(len(left_keys))})
    right = pd.DataFrame({"k": pd.array(right_keys, dtype="Float64").astype("float64"),
                          "b": np.arange(len(right_keys)) * 10.0, "both": [f"r{i}" for i in range(len(right_keys))]})
    got = join_tables(left, right, on="k", how=how, validate=validate)
    assert_same_rows(got, reference_join(left, right, ["k"], how))
    assert list(got.index) == list(range(len(got)))


def test_a_left_join_keeps_pandas_own_order_and_values():
    rng = np.random.default_rng(0)
    left = pd.DataFrame({"id": rng.integers(0, 50, 300), "x": rng.normal(size=300)})
    right = pd.DataFrame({"id": rng.permutation(60), "y": rng.normal(size=60)})
    pd.testing.assert_frame_equal(join_tables(left, right, on="id"), left.merge(right, on="id", how="left"))


@pytest.mark.parametrize("how", ["inner", "left", "right", "outer"])
def test_multiple_keys_of_several_kinds(how):
    left = pd.DataFrame({"shop": ["a", "a", "b", None, "c"], "day": pd.to_datetime(
        ["2024-01-01", "2024-01-02", "2024-01-01", "2024-01-01", "2024-01-03"]), "sales": [1, 2, 3, 4, 5]})
    right = pd.DataFrame({"shop": ["b", "a", "a", "d"], "day": pd.to_datetime(
        ["2024-01-01", "2024-01-02", "2024-01-05", "2024-01-01"]), "weather": ["sun", "rain", "fog", "snow"]})
    got = join_tables(left, right, on=["shop", "day"], how=how, validate="one_to_one")
    assert_same_rows(got, reference_join(left, right, ["shop", "day"], how))


def test_missing_keys_never_match_though_pandas_would_match_them():
    left = pd.DataFrame({"k": [1.0, np.nan], "a": ["x", "y"]})
    right = pd.DataFrame({"k": [np.nan, 1.0], "b": ["nan-row", "one"]})
    assert left.merge(right, on="k", how="left")["b"].tolist() == ["one", "nan-row"]     # pandas' NaN == NaN
    got = join_tables(left, right, on="k", how="outer", validate="one_to_one")
    assert got["a"].tolist()[:2] == ["x", "y"] and got["b"].tolist()[0] == "one" and pd.isna(got["b"][1])
    assert got["b"].tolist()[2] == "nan-row" and pd.isna(got["a"][2]) and len(got) == 3
    text_left = pd.DataFrame({"k": ["a", None], "v": [1, 2]})
    text_right = pd.DataFrame({"k": [None, "a"], "w": [9, 8]})
    inner = join_tables(text_left, text_right, on="k", how="inner", validate="one_to_one")
    assert inner.to_dict("list") == {"k": ["a"], "v": [1], "w": [8]}


@pytest.mark.parametrize("side", ["left", "right"])
def test_a_key_missing_from_a_side_names_side_key_and_columns(side):
    tables = {"left": pd.DataFrame({"id": [1], "x": [2]}), "right": pd.DataFrame({"id": [1], "y": [3]})}
    tables[side] = tables[side].rename(columns={"id": "ID"})
    with pytest.raises(DataError) as info:
        join_tables(tables["left"], tables["right"], on="id")
    message = str(info.value)
    assert f"not in the {side} table" in message and "'id'" in message and "ID" in message


LEFT_DUP = pd.DataFrame({"id": [1, 2, 2, 3], "x": range(4)})
RIGHT_DUP = pd.DataFrame({"id": [3, 1, 1, 1, 2], "y": range(5)})
LEFT_ONE = pd.DataFrame({"id": [1, 2, 3], "x": range(3)})
RIGHT_ONE = pd.DataFrame({"id": [3, 2, 1], "y": range(3)})


@pytest.mark.parametrize("validate, left, right, side, example", [
    ("many_to_one", LEFT_ONE, RIGHT_DUP, "right", "id=1 (3 rows)"),
    ("one_to_many", LEFT_DUP, RIGHT_ONE, "left", "id=2 (2 rows)"),
    ("one_to_one", LEFT_ONE, RIGHT_DUP, "right", "id=1 (3 rows)"),
    ("one_to_one", LEFT_DUP, RIGHT_ONE, "left", "id=2 (2 rows)"),
])
def test_a_key_repeated_where_validate_says_unique_names_key_side_and_an_example(validate, left, right, side, example):
    with pytest.raises(DataError) as info:
        join_tables(left, right, on="id", validate=validate)
    message = str(info.value)
    assert f"key 'id' is not unique in the {side} table" in message and example in message
    assert f"validate: {validate}" in message and "Aggregate" in message


@pytest.mark.parametrize("validate, left, right, rows", [
    ("many_to_one", LEFT_DUP, RIGHT_ONE, 4), ("one_to_many", LEFT_ONE, RIGHT_DUP, 5)])
def test_repeats_on_the_side_validate_allows_multiply_rows(validate, left, right, rows):
    assert len(join_tables(left, right, on="id", validate=validate)) == rows


def test_repeated_missing_keys_are_not_repeated_keys():
    right = pd.DataFrame({"id": [1, None, None], "y": [1, 2, 3]})
    assert join_tables(LEFT_ONE, right, on="id")["y"].tolist()[0] == 1


@pytest.mark.parametrize("validate", ["many_to_many", "m:m"])
def test_many_to_many_is_refused_saying_what_to_do(validate):
    with pytest.raises(ValueError, match="many-to-many join is refused.*aggregate one table first"):
        join_tables(LEFT_DUP, RIGHT_DUP, on="id", validate=validate)


@pytest.mark.parametrize("left_values, right_values, shown", [
    ([1, 2], ["1", "2"], "number on the left (int64) and text on the right"),
    (pd.to_datetime(["2024-01-01", "2024-01-02"]), ["2024-01-01", "2024-01-02"], "date on the left"),
    ([True, False], [1, 0], "bool on the left (bool) and number on the right (int64)"),
])
def test_keys_of_different_kinds_name_the_key_and_both_dtypes(left_values, right_values, shown):
    left = pd.DataFrame({"id": left_values, "x": [1, 2]})
    right = pd.DataFrame({"id": right_values, "y": [3, 4]})
    with pytest.raises(DataError) as info:
        join_tables(left, right, on="id")
    assert "key 'id'" in str(info.value) and shown in str(info.value)


@pytest.mark.parametrize("left_dtype, right_dtype, common", [
    ("int32", "int64", "int64"), ("int64", "float64", "float64"), ("int16", "uint8", "int16"),
    ("Int64", "int64", None), ("category", "int64", "int64")])
def test_number_keys_of_different_widths_join(left_dtype, right_dtype, common):
    left = pd.DataFrame({"id": pd.Series([3, 1, 2]).astype(left_dtype), "x": [1, 2, 3]})
    right = pd.DataFrame({"id": pd.Series([1, 2, 3]).astype(right_dtype), "y": [10, 20, 30]})
    got = join_tables(left, right, on="id")
    assert got["y"].tolist() == [30, 10, 20]
    if common:
        assert str(got["id"].dtype) == common


def test_date_keys_of_different_units_join():
    left = pd.DataFrame({"day": pd.to_datetime(["2024-01-02", "2024-01-01"]).astype("datetime64[us]"), "x": [1, 2]})
    right = pd.DataFrame({"day": pd.to_datetime(["2024-01-01", "2024-01-02"]).astype("datetime64[ns]"), "y": [3, 4]})
    assert join_tables(left, right, on="day")["y"].tolist() == [4, 3]


def test_clashing_names_get_the_suffixes_and_keys_do_not():
    left = pd.DataFrame({"id": [1, 2], "name": ["a", "b"], "age": [30, 40]})
    right = pd.DataFrame({"id": [2, 1], "name": ["B", "A"], "city": ["x", "y"]})
    assert list(join_tables(left, right, on="id").columns) == ["id", "name", "age", "name_right", "city"]
    got = join_tables(left, right, on="id", suffixes=("_l", "_r"))
    assert list(got.columns) == ["id", "name_l", "age", "name_r", "city"] and got["name_r"].tolist() == ["A", "B"]


def test_suffixes_that_make_a_name_twice_are_refused():
    left = pd.DataFrame({"id": [1], "name": ["a"], "name_right": ["already"]})
    right = pd.DataFrame({"id": [1], "name": ["b"]})
    with pytest.raises(DataError, match=r"column\(s\) \['name_right'\] twice.*choose other suffixes"):
        join_tables(left, right, on="id")
    with pytest.raises(ValueError, match="two different texts"):
        join_tables(left, right, on="id", suffixes=("_x", "_x"))


def test_helper_column_names_in_the_data_do_not_collide():
    left = pd.DataFrame({"id": [2, 1], "__join_left_row__": [7, 8], "__join_null_guard__": [0, 0]})
    right = pd.DataFrame({"id": [1, 2], "__join_right_row__": [5, 6]})
    got = join_tables(left, right, on="id")
    assert got.to_dict("list") == {"id": [2, 1], "__join_left_row__": [7, 8], "__join_null_guard__": [0, 0],
                                   "__join_right_row__": [6, 5]}


def test_an_empty_side_joins():
    empty = LEFT_ONE.iloc[:0]
    assert len(join_tables(empty, RIGHT_ONE, on="id")) == 0
    assert join_tables(empty, RIGHT_ONE, on="id", how="outer")["y"].tolist() == [0, 1, 2]
    assert join_tables(LEFT_ONE, RIGHT_ONE.iloc[:0], on="id")["y"].isna().all()


# ------------------------------------------------------------------------------ partitioned
def _events(seed: int = 0, n: int = 400) -> tuple[pd.DataFrame, pd.DataFrame]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, 60, n).astype(float)
    ids[rng.random(n) < 0.05] = np.nan
    left = pd.DataFrame({"customer": ids, "amount": rng.normal(size=n), "note": rng.choice(["a", "b"], n)})
    people = rng.permutation(80)[:50].astype(float)
    right = pd.DataFrame({"customer": np.append(people, np.nan), "age": rng.integers(18, 90, 51),
                          "note": rng.choice(["x", "y"], 51)})
    return left, right


@pytest.mark.parametrize("how", ["inner", "left", "right", "outer"])
@pytest.mark.parametrize("right_partitioned", [False, True])
def test_a_partitioned_join_equals_the_in_memory_one(how, right_partitioned):
    import dask.dataframe as dd

    left, right = _events()
    expected = join_tables(left, right, on="customer", how=how)
    lazy_right = dd.from_pandas(right, npartitions=3) if right_partitioned else right
    lazy = join_tables(dd.from_pandas(left, npartitions=4), lazy_right, on="customer", how=how)
    got = lazy.compute().reset_index(drop=True)
    pd.testing.assert_frame_equal(got, expected, check_dtype=False)
    assert list(lazy.columns) == list(expected.columns)


@pytest.mark.parametrize("how", ["left", "inner"])
@pytest.mark.parametrize("right_partitioned", [False, True])
def test_a_left_partitioned_on_the_keys_meets_the_right_partition_by_partition(how, right_partitioned):
    """An aggregate's output is partitioned on its keys: the right table is shuffled the same
    way instead of broadcast whole to every partition, with the in-memory result."""
    import dask.dataframe as dd

    from pipeline.events import aggregate_events
    from pipeline.events.frames import is_key_partitioned

    rng = np.random.default_rng(5)
    events = pd.DataFrame({"customer": rng.integers(0, 90, 600).astype(float),
                           "t": pd.Timestamp("2021-01-01") + pd.to_timedelta(rng.integers(0, 300, 600), unit="D"),
                           "v": rng.normal(size=600)})
    _, right = _events()
    spec = dict(by="customer", time="t", as_of="2021-09-01", features={"n": "count", "s": {"sum": "v"}})
    expected = join_tables(aggregate_events(events, **spec), right, on="customer", how=how)
    lazy_left = aggregate_events(dd.from_pandas(events, npartitions=4), **spec)
    lazy_right = dd.from_pandas(right, npartitions=3) if right_partitioned else right
    lazy = join_tables(lazy_left, lazy_right, on="customer", how=how)
    assert is_key_partitioned(lazy, ["customer"])
    kinds = {type(node).__name__ for node in lazy.expr.walk()}
    assert "RearrangeByColumn" in kinds and not kinds & {"Merge", "_DelayedExpr"}    # shuffled, not broadcast
    got = lazy.compute().sort_values(["customer"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(got, expected.sort_values(["customer"]).reset_index(drop=True), check_dtype=False)


def test_a_right_table_in_fewer_partitions_is_cut_before_it_is_shuffled():
    """A right table read as one partition is cut into as many partitions as the left has
    before the shuffle: no task holds the whole table to split it 4 (or 234) ways."""
    import dask.dataframe as dd

    from pipeline.events import aggregate_events

    rng = np.random.default_rng(7)
    events = pd.DataFrame({"customer": rng.integers(0, 90, 600).astype(float),
                           "t": pd.Timestamp("2021-01-01") + pd.to_timedelta(rng.integers(0, 300, 600), unit="D")})
    _, right = _events()
    spec = dict(by="customer", time="t", as_of="2021-09-01", features={"n": "count"})
    lazy_left = aggregate_events(dd.from_pandas(events, npartitions=4), **spec)
    lazy = join_tables(lazy_left, dd.from_pandas(right, npartitions=1), on="customer", how="left")
    shuffles = [node for node in lazy.expr.walk() if type(node).__name__ == "RearrangeByColumn"]
    right_shuffle = [node for node in shuffles if "age" in node.frame.columns]
    assert right_shuffle and all(node.frame.npartitions == node.npartitions_out == 4 for node in right_shuffle)
    expected = join_tables(aggregate_events(events, **spec), right, on="customer", how="left")
    got = lazy.compute().sort_values(["customer"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(got, expected.sort_values(["customer"]).reset_index(drop=True), check_dtype=False)


def test_a_lined_up_join_still_refuses_a_repeated_right_key():
    import dask.dataframe as dd

    from pipeline.events import aggregate_events

    events = pd.DataFrame({"id": [1, 2, 3, 1], "t": pd.to_datetime(["2021-01-0%d" % d for d in (1, 2, 3, 4)])})
    lazy_left = aggregate_events(dd.from_pandas(events, npartitions=2), by="id", time="t", as_of="2021-02-01",
                                 features={"n": "count"})
    lazy = join_tables(lazy_left, RIGHT_DUP, on="id")
    with pytest.raises(DataError, match="not unique in the right table"):
        lazy.compute()


def test_a_partitioned_left_is_checked_for_repeats_when_validate_says_unique():
    import dask.dataframe as dd

    left = dd.from_pandas(LEFT_DUP, npartitions=2)
    with pytest.raises(DataError, match=r"not unique in the left table.*id=2 \(2 rows\)"):
        join_tables(left, RIGHT_ONE, on="id", validate="one_to_many")
    with pytest.raises(DataError, match="not unique in the right table"):
        join_tables(left, RIGHT_DUP, on="id")                       # an in-memory right: at once
    with pytest.raises(DataError, match="not unique in the right table"):
        join_tables(left, dd.from_pandas(RIGHT_DUP, npartitions=2), on="id")   # a partitioned right: once, first
    lazy = join_tables(left, dd.from_pandas(RIGHT_DUP, npartitions=2), on="id", how="outer")
    with pytest.raises(DataError, match="not unique in the right table"):
        lazy.compute()                                              # outer: as it streams


def test_an_in_memory_left_with_a_partitioned_right_is_in_memory():
    import dask.dataframe as dd

    left, right = _events(1)
    got = join_tables(left, dd.from_pandas(right, npartitions=2), on="customer", how="outer")
    pd.testing.assert_frame_equal(got, join_tables(left, right, on="customer", how="outer"), check_dtype=False)


# ------------------------------------------------------------------------------ config
JOIN_CONFIG = """\
name: t
stages:
  a: {kind: load, path: a.csv}
  b: {kind: load, path: b.csv}
  joined:
    kind: join
    inputs: INPUTS
    on: household_id
EXTRA"""


def _config(inputs: str = "[a, b]", extra: str = ""):
    return load_config(text=JOIN_CONFIG.replace("INPUTS", inputs).replace("EXTRA", extra))


@pytest.mark.parametrize("inputs, expected", [("[a, b]", ["a", "b"]), ("{right: a, left: b}", ["b", "a"])])
def test_a_join_block_loads_with_its_on_key_and_inputs_as_a_list_or_by_role(inputs, expected):
    spec = _config(inputs).stages["joined"]
    assert spec.on == "household_id" and spec.inputs == expected
    assert (spec.how, tuple(spec.suffixes), spec.validate) == ("left", ("", "_right"), "many_to_one")


@pytest.mark.parametrize("extra, message", [
    ("    validate: many_to_many\n", "many-to-many join is refused"),
    ("    suffixes: [_x, _x]\n", "two different texts"),
    ("    how: cross\n", "stages.joined.how"),
])
def test_bad_join_options_are_config_errors(extra, message):
    with pytest.raises(ConfigError) as info:
        _config(extra=extra)
    assert any(message in i.message or message in i.path for i in info.value.issues)


def test_an_empty_key_list_is_a_config_error():
    with pytest.raises(ConfigError) as info:
        load_config(text=JOIN_CONFIG.replace("INPUTS", "[a, b]").replace("on: household_id", "on: []")
                    .replace("EXTRA", ""))
    assert any("name one key column" in i.message for i in info.value.issues)


def test_a_join_needs_two_inputs():
    with pytest.raises(ConfigError) as info:
        _config("[a]")
    assert any("joined" in i.path for i in info.value.issues)


# ------------------------------------------------------------------------------ backends
def _joins_equal_pandas_joins(device: str, how: str) -> None:
    """``device``'s in-memory and partitioned joins, on one key and on two, equal pandas' joins."""
    import dask.dataframe as dd

    from pipeline.backends import get_backend

    backend = get_backend(device)
    left, people = _events(2, n=5000)
    left = left.assign(shop=np.where(np.arange(len(left)) % 3 == 0, "north", "south"))
    # validate: many_to_one (the default): the right table has each key once. A customer is on
    # one row of people and on two rows (one per shop) of the table joined on customer and shop.
    by_shop = pd.concat([people.assign(shop="north"), people.assign(shop="south")], ignore_index=True)
    for keys, right in (("customer", people.assign(shop="east")), (["customer", "shop"], by_shop)):
        expected = join_tables(left, right, on=keys, how=how)
        got = backend.to_host(join_tables(backend.from_pandas(left), backend.from_pandas(right), on=keys, how=how))
        pd.testing.assert_frame_equal(got, expected, check_dtype=False)
        lazy = join_tables(dd.from_pandas(backend.from_pandas(left), npartitions=3), backend.from_pandas(right),
                           on=keys, how=how)
        pd.testing.assert_frame_equal(backend.to_host(lazy.compute()).reset_index(drop=True), expected,
                                      check_dtype=False)


@pytest.mark.parametrize("how", ["inner", "left", "right", "outer"])
def test_pandas_joins_equal_pandas_joins_on_the_gpu_tests_data(how):
    """The CPU twin of the GPU test below: the same tables through the same checks, so a fault in
    the data or the checks shows here, on any machine, and a GPU failure is cuDF's alone."""
    _joins_equal_pandas_joins("cpu", how)


# ------------------------------------------------------------------------------ GPU
@pytest.mark.gpu
@pytest.mark.parametrize("how", ["inner", "left", "right", "outer"])
def test_cudf_joins_equal_pandas_joins(how):
    from tests.conftest import DEVICES

    if "gpu" not in DEVICES:
        pytest.skip("no GPU with RAPIDS here")
    _joins_equal_pandas_joins("gpu", how)


# ------------------------------------------------------------------------------ runs
def _write_pair(folder, seed: int = 5) -> tuple[pd.DataFrame, pd.DataFrame]:
    left, right = _events(seed)
    left.to_csv(folder / "events.csv", index=False)
    right.to_csv(folder / "people.csv", index=False)
    return pd.read_csv(folder / "events.csv"), pd.read_csv(folder / "people.csv")


@pytest.mark.parametrize("partitioned", [False, True])
def test_a_run_joins_and_records_facts(tmp_path, partitioned):
    from pipeline import run_pipeline
    from pipeline.runs.record import read_manifest

    left, right = _write_pair(tmp_path)
    (tmp_path / "c.yaml").write_text(f"""\
name: j
device: cpu
stages:
  events: {{kind: load, path: {tmp_path / 'events.csv'}, partitioned: {str(partitioned).lower()}}}
  people: {{kind: load, path: {tmp_path / 'people.csv'}}}
  joined: {{kind: join, inputs: {{left: events, right: people}}, on: customer, how: outer}}
""")
    result = run_pipeline(tmp_path / "c.yaml", runs_dir=tmp_path / "runs")
    facts = read_manifest(result.run_dir).stages["joined"].facts
    expected = join_tables(left, right, on="customer", how="outer")
    got = result.outputs["joined"]
    if partitioned:
        assert facts["partitions"] >= 1
        got = got.compute().reset_index(drop=True)
    else:
        unmatched = int((~left["customer"].isin(right["customer"].dropna()) | left["customer"].isna()).sum())
        assert facts == {"rows": len(expected), "left_rows": len(left), "right_rows": len(right),
                         "unmatched_left_rows": unmatched,
                         "unmatched_right_rows": int((~right["customer"].isin(left["customer"].dropna())
                                                      | right["customer"].isna()).sum())}
    pd.testing.assert_frame_equal(got, expected, check_dtype=False)


def test_a_partitioned_join_computes_on_a_cluster(cluster_client):
    import dask.dataframe as dd

    left, right = _events(7)
    left = left.assign(row=np.arange(len(left)))
    expected = join_tables(left, right.dropna(), on="customer", how="right")
    lazy = join_tables(dd.from_pandas(left, npartitions=3), dd.from_pandas(right.dropna(), npartitions=2),
                       on="customer", how="right")
    got = cluster_client.compute(lazy).result().reset_index(drop=True)
    pd.testing.assert_frame_equal(got, expected, check_dtype=False)


def test_a_join_that_matches_no_left_row_is_named_in_a_warning(caplog):
    """Keys written differently on the two sides ('007' against '7') match nothing, and every
    joined column comes out missing: a left join ran on with an info line only."""
    import logging

    from pipeline.backends import get_backend
    from pipeline.stages import STAGE_KINDS, StageContext
    from pipeline.stages.join import JoinSpec

    spec = JoinSpec(kind="join", inputs={"left": "a", "right": "b"}, on="k", how="left")
    ctx = StageContext(backend=get_backend("cpu"), seed=0, stage="joined", logger=logging.getLogger("test"))
    left = pd.DataFrame({"k": ["007", "008"], "x": [1, 2]})
    with caplog.at_level("INFO", logger="test"):
        STAGE_KINDS["join"].run(spec, ctx, {"a": left, "b": pd.DataFrame({"k": ["7", "8"], "y": [3, 4]})})
        assert ctx.facts["unmatched_left_rows"] == 2
        STAGE_KINDS["join"].run(spec, ctx, {"a": left, "b": pd.DataFrame({"k": ["007", "9"], "y": [3, 4]})})
    messages = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert ("WARNING", "joined: none of the 2 left rows has a match on k among the 2 right rows; check that the keys "
            "are written alike on both sides") in messages
    assert ("INFO", "joined: 1 of 2 left rows have no match on k") in messages
