"""``split`` by group (no group on two sides) and out of time (oldest train, newest test)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline import run_pipeline
from pipeline.core.errors import DataError
from pipeline.runs.record import read_manifest
from pipeline.stages import split_frame
from pipeline.featuresets.split_positions import ordered_positions
from tests.conftest import TELCO


def _sides(positions, values: pd.Series) -> list[set]:
    return [set(values.iloc[p]) for p in positions]


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(n_rows=st.integers(3, 400), n_groups=st.integers(3, 60), test=st.floats(0.05, 0.5),
       valid=st.sampled_from([0.0, 0.1, 0.2]), seed=st.integers(0, 2**32 - 1), data=st.data())
def test_no_group_is_on_two_sides_and_every_row_is_on_one(n_rows, n_groups, test, valid, seed, data):
    groups = pd.Series(data.draw(st.lists(st.integers(0, n_groups - 1), min_size=n_rows, max_size=n_rows)))
    if groups.nunique() < 3:
        return
    train, val, tst = ordered_positions(n_rows, test=test, valid=valid, seed=seed, groups=groups.rename("g"))
    assert sorted(np.concatenate([train, val, tst]).tolist()) == list(range(n_rows))
    a, b, c = _sides((train, val, tst), groups)
    assert not (a & b) and not (a & c) and not (b & c)
    assert len(train) > 0 and (len(tst) > 0 or round(test * n_rows) == 0)


def test_a_group_split_deals_shares_close_to_the_fractions_and_follows_the_seed():
    groups = pd.Series(np.random.default_rng(0).integers(0, 500, 20_000))
    one = ordered_positions(20_000, test=0.2, valid=0.1, seed=7, groups=groups.rename("g"))
    again = ordered_positions(20_000, test=0.2, valid=0.1, seed=7, groups=groups.rename("g"))
    other = ordered_positions(20_000, test=0.2, valid=0.1, seed=8, groups=groups.rename("g"))
    assert all(np.array_equal(x, y) for x, y in zip(one, again))
    assert not np.array_equal(one[2], other[2])
    assert abs(len(one[2]) - 4000) < 100 and abs(len(one[1]) - 2000) < 100     # a group is ~40 rows


def test_out_of_time_puts_the_oldest_rows_in_train_and_keeps_one_time_on_one_side():
    times = pd.Series(np.repeat(np.arange(10), 100)[np.random.default_rng(1).permutation(1000)])
    train, val, tst = ordered_positions(1000, test=0.25, valid=0.1, seed=0, times=times.rename("t"))
    assert times[train].max() < times[val].min() and times[val].max() < times[tst].min()
    assert len(tst) == 300 and len(val) == 100          # the cut at 250 moved to the start of time 7


def test_date_text_is_ordered_as_dates_not_as_text():
    times = pd.Series(["2024-01-31", "2023-12-01", "2024-02-02", "2023-11-15", "2024-01-02"])
    train, _, tst = ordered_positions(5, test=0.4, valid=0.0, seed=0, times=times.rename("day"))
    assert sorted(times[tst]) == ["2024-01-31", "2024-02-02"]


def test_with_group_and_time_each_group_goes_by_its_newest_row():
    groups = pd.Series(["a", "a", "b", "b", "c", "c", "d"])
    times = pd.Series([1, 9, 2, 3, 4, 5, 6])
    train, _, tst = ordered_positions(7, test=0.25, valid=0.0, seed=0, groups=groups.rename("g"),
                                      times=times.rename("t"))
    assert set(groups[tst]) == {"a"} and set(groups[train]) == {"b", "c", "d"}


@pytest.mark.parametrize(("column", "values", "message"), [
    ("g", [1, None, 2, 3], "group column 'g' has 1 missing value"),
    ("g", [1, 1, 2, 2], "group column 'g' has 2 distinct value"),
    ("t", ["2024-01-01", "soon", "2024-01-03", "2024-01-04"], "order_by column 't' holds text that is not a date"),
    ("t", [1.0, None, 3.0, 4.0], "order_by column 't' has 1 missing value"),
])
def test_bad_group_and_time_columns_are_named(column, values, message):
    frame = pd.DataFrame({"y": [0, 1, 0, 1], "g": [1, 2, 3, 4], "t": [1, 2, 3, 4]}).assign(**{column: values})
    key = {"group": column} if column == "g" else {"order_by": column}
    with pytest.raises(DataError, match=message):
        split_frame(frame, "y", test=0.25, valid=0.25, **key)


@pytest.mark.parametrize("key", ["groups", "times"])
def test_one_group_or_time_holding_most_rows_leaves_no_training_rows_and_says_why(key):
    column = pd.Series([0] * 98 + [1, 2])
    kwargs = {"groups": column.rename("g")} if key == "groups" else {"times": column.rename("t")}
    for seed in range(5):                    # whichever order the groups are dealt in
        try:
            train, _, _ = ordered_positions(100, test=0.2, valid=0.1, seed=seed, **kwargs)
        except DataError as exc:
            assert "no rows are left to train on" in str(exc) and ("'g'" in str(exc) or "'t'" in str(exc))
        else:
            assert len(train) > 0


def test_a_missing_group_column_is_named():
    frame = pd.DataFrame({"y": [0, 1, 0, 1]})
    with pytest.raises(DataError, match="group column 'patient' not in the data"):
        split_frame(frame, "y", group="patient")


def test_partitioned_data_splits_by_group_wherever_a_groups_rows_sit():
    import dask.dataframe as dd

    rng = np.random.default_rng(5)
    pdf = pd.DataFrame({"y": rng.integers(0, 2, 20_000), "g": rng.integers(0, 2_000, 20_000).astype(str)})
    frame = dd.from_pandas(pdf, npartitions=7)                 # a group's rows in many partitions
    data = split_frame(frame, "y", group="g", test=0.2, valid=0.1, seed=11)
    parts = {name: f.compute() for name, f in data.frames.items()}
    a, b, c = (set(parts[n]["g"]) for n in ("train", "valid", "test"))
    assert not (a & b) and not (a & c) and not (b & c)
    assert sum(len(f) for f in parts.values()) == len(pdf)
    assert abs(len(parts["test"]) / len(pdf) - 0.2) < 0.03 and abs(len(parts["valid"]) / len(pdf) - 0.1) < 0.03
    again = split_frame(frame, "y", group="g", test=0.2, valid=0.1, seed=11).frames["test"].compute()
    assert set(again["g"]) == c


def test_a_groups_draw_depends_only_on_its_value_and_the_seed():
    from pipeline.featuresets.split_positions import group_draws

    one = group_draws(pd.Series(["a", "b", "a", "c"]), 3, "g")
    alone = group_draws(pd.Series(["c"]), 3, "g")
    assert one[0] == one[2] and one[3] == alone[0] and ((one >= 0) & (one < 1)).all()
    assert not np.array_equal(one, group_draws(pd.Series(["a", "b", "a", "c"]), 4, "g"))


def test_partitioned_data_refuses_order_by_with_the_way_out():
    import dask.dataframe as dd

    frame = dd.from_pandas(pd.DataFrame({"y": [0, 1] * 10, "t": range(20)}), npartitions=2)
    with pytest.raises(DataError, match="partitioned: false"):
        split_frame(frame, "y", order_by="t")


def test_a_run_splits_telco_by_group_and_records_how(tmp_path):
    frame = pd.read_csv(TELCO, na_values=[" "])
    frame["household"] = np.arange(len(frame)) // 3         # three rows per group
    frame["signup"] = pd.Timestamp("2020-01-01") + pd.to_timedelta(72 - frame["tenure"], unit="D")
    frame.to_csv(tmp_path / "telco.csv", index=False)
    (tmp_path / "c.yaml").write_text(f"""\
name: grouped
device: cpu
stages:
  raw: {{kind: load, path: {tmp_path / 'telco.csv'}, na_values: [" "]}}
  split: {{kind: split, inputs: [raw], target: Churn, positive: "Yes", test: 0.2, valid: 0.1,
          group: household, order_by: signup}}
""")
    result = run_pipeline(tmp_path / "c.yaml", runs_dir=tmp_path / "runs")
    facts = read_manifest(result.run_dir).stages["split"].facts
    assert facts["split_by"] == ["group", "order_by"] and facts["stratified"] is False
    data = result.outputs["split"]
    households = [set(f["household"]) for f in data.frames.values()]
    assert not (households[0] & households[2]) and not (households[0] & households[1])
    newest_train = pd.to_datetime(data.frames["train"].groupby("household")["signup"].max()).max()
    oldest_test = pd.to_datetime(data.frames["test"].groupby("household")["signup"].max()).min()
    assert newest_train <= oldest_test


@pytest.mark.slow
def test_a_partitioned_run_on_a_cluster_splits_by_group(in_project):
    frame = pd.read_csv("data/telco_customer_churn.csv", na_values=[" "])
    frame.assign(household=np.arange(len(frame)) // 4).to_csv("data/telco_households.csv", index=False)
    result = run_pipeline("configs/churn_partitioned.yaml", overrides=[
        "stages.raw.path=data/telco_households.csv", "stages.split.group=household"], until=["features"])
    manifest = read_manifest(result.run_dir)
    assert manifest.status == "succeeded" and manifest.stages["split"].facts["split_by"] == ["group"]
    ids = {name: set(pd.read_parquet(f"{result.run_dir}/features/partitions/{name}", columns=["customerID"])["customerID"])
           for name in ("train", "test")}
    households = {name: {int(i) // 4 for i in frame.index[frame["customerID"].isin(v)]} for name, v in ids.items()}
    assert households["train"] and households["test"] and not (households["train"] & households["test"])
