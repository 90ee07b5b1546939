"""``split: test_latest: N``: the rows of the N latest cut-offs are the test split (out-of-time
validation on a table stacked from rolling cut-offs)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pipeline import run_pipeline
from pipeline.config import load_config
from pipeline.core.errors import ConfigError, DataError
from pipeline.runs.record import read_manifest
from pipeline.stages import split_frame
from pipeline.featuresets.split_positions import ordered_positions

CUTOFFS = pd.to_datetime(["1997-03-31", "1997-06-30", "1997-09-30", "1997-12-31"])


def rolling_table(seed: int = 0) -> pd.DataFrame:
    """Customers labelled at four cut-offs; fewer of them at each later one (as in churn data),
    the rows shuffled so the cut-off order is not the row order."""
    rng = np.random.default_rng(seed)
    parts = [pd.DataFrame({"customer": np.arange(n), "as_of": cutoff, "x": rng.normal(size=n),
                           "churn": rng.integers(0, 2, n)})
             for cutoff, n in zip(CUTOFFS, (120, 100, 90, 70))]
    table = pd.concat(parts, ignore_index=True)
    return table.iloc[rng.permutation(len(table))].reset_index(drop=True)


@pytest.mark.parametrize("n, held_out", [(1, CUTOFFS[3:]), (2, CUTOFFS[2:])])
def test_the_latest_cutoffs_are_exactly_the_test_split(n, held_out):
    table = rolling_table()
    data = split_frame(table, "churn", order_by="as_of", test_latest=n, valid=0.0)
    test, train = data.frames["test"], data.frames["train"]
    assert set(test["as_of"]) == set(held_out)
    assert len(test) == int(table["as_of"].isin(held_out).sum())
    assert not train["as_of"].isin(held_out).any() and len(train) + len(test) == len(table)


def test_the_share_given_as_test_is_not_used():
    table = rolling_table()
    data = split_frame(table, "churn", order_by="as_of", test=0.9, test_latest=1)
    assert set(data.frames["test"]["as_of"]) == {CUTOFFS[3]}


def test_valid_is_a_share_of_the_rows_before_the_held_out_cutoffs_newest_first():
    table = rolling_table()
    data = split_frame(table, "churn", order_by="as_of", test_latest=1, valid=0.3)
    # 310 rows before the last cut-off; 30% is 93: the cut moves to the end of the 90 rows of
    # cut-off 3 and then on past cut-off 2 (a cut never goes through one time).
    assert set(data.frames["valid"]["as_of"]) == {CUTOFFS[2], CUTOFFS[1]}
    assert set(data.frames["train"]["as_of"]) == {CUTOFFS[0]}
    small = split_frame(table, "churn", order_by="as_of", test_latest=1, valid=0.25)
    assert set(small.frames["valid"]["as_of"]) == {CUTOFFS[2]}      # 78 of 310: within cut-off 3


def test_positions_of_the_latest_times_on_numbers_and_date_text():
    times = pd.Series(["2024-03-01", "2024-01-01", "2024-02-01", "2024-03-01", "2024-01-01"])
    train, valid, test = ordered_positions(5, test=0.0, valid=0.0, seed=0, times=times.rename("d"),
                                           test_latest=1)
    assert test.tolist() == [0, 3] and train.tolist() == [1, 2, 4] and not len(valid)
    _, _, test = ordered_positions(5, test=0.0, valid=0.0, seed=0, times=pd.Series([5, 1, 3, 5, 4], name="t"),
                                   test_latest=2)
    assert test.tolist() == [0, 3, 4]


def test_with_group_a_group_is_held_out_when_its_newest_row_is_at_a_latest_cutoff():
    table = rolling_table()
    data = split_frame(table, "churn", order_by="as_of", group="customer", test_latest=1)
    test, train = data.frames["test"], data.frames["train"]
    newest = table.groupby("customer")["as_of"].max()
    assert set(test["customer"]) == set(newest.index[newest == CUTOFFS[3]])
    assert not set(test["customer"]) & set(train["customer"])
    assert len(test) == int(table["customer"].isin(test["customer"]).sum())  # all of a group's rows


def test_folds_chain_forward_over_the_rows_before_the_held_out_cutoff():
    table = rolling_table()
    data = split_frame(table, "churn", order_by="as_of", test_latest=1, folds=2)
    train = data.frames["train"]
    assert set(data.frames["test"]["as_of"]) == {CUTOFFS[3]} and len(data.folds) == 2
    for fit, scored in data.folds:
        assert train["as_of"].iloc[fit].max() < train["as_of"].iloc[scored].min()


def test_as_many_latest_cutoffs_as_there_are_times_leaves_nothing_to_train_on():
    table = rolling_table()
    with pytest.raises(DataError, match=r"test_latest: 4 .*order_by column 'as_of' has 4 distinct"):
        split_frame(table, "churn", order_by="as_of", test_latest=4)


def test_test_latest_needs_order_by_in_the_library_too():
    with pytest.raises(ValueError, match="test_latest needs order_by"):
        split_frame(rolling_table(), "churn", test_latest=1)


def test_partitioned_data_refuses_it_like_order_by():
    import dask.dataframe as dd

    frame = dd.from_pandas(rolling_table(), npartitions=2)
    with pytest.raises(DataError, match="partitioned: false"):
        split_frame(frame, "churn", order_by="as_of", test_latest=1)


CONFIG = """\
name: t
stages:
  raw: {kind: load, path: data.csv}
  split:
    kind: split
    inputs: [raw]
    target: churn
"""


def _issues(extra: str) -> list:
    with pytest.raises(ConfigError) as info:
        load_config(text=CONFIG + extra)
    return info.value.issues


def test_config_without_order_by_is_refused_naming_the_key():
    (issue,) = _issues("    test_latest: 1\n")
    assert issue.path.startswith("stages.split") and "test_latest" in issue.message and "order_by" in issue.message


def test_config_with_test_and_test_latest_is_refused():
    (issue,) = _issues("    order_by: as_of\n    test: 0.2\n    test_latest: 1\n")
    assert "test_latest" in issue.message and "test" in issue.message


@pytest.mark.parametrize("value", ["0", "-1", "1.5"])
def test_config_refuses_a_count_below_one(value):
    issues = _issues(f"    order_by: as_of\n    test_latest: {value}\n")
    assert any(i.path == "stages.split.test_latest" for i in issues)


def test_valid_up_to_one_is_allowed_with_test_latest_and_the_resolved_config_reloads():
    from pipeline.config.loader import dump_config

    config = load_config(text=CONFIG + "    order_by: as_of\n    test_latest: 2\n    valid: 0.9\n")
    spec = config.stages["split"]
    assert spec.test_latest == 2 and spec.test is None
    again = load_config(text=dump_config(config))
    assert again.stages["split"].test_latest == 2


def test_default_test_share_is_unchanged():
    config = load_config(text=CONFIG)
    assert config.stages["split"].test_share() == 0.2


def test_a_run_holds_out_the_latest_cutoff_and_records_it(tmp_path):
    table = rolling_table(seed=3)
    table.to_csv(tmp_path / "rolling.csv", index=False)
    (tmp_path / "c.yaml").write_text(f"""\
name: rolling
device: cpu
stages:
  raw: {{kind: load, path: {tmp_path / 'rolling.csv'}}}
  split: {{kind: split, inputs: [raw], target: churn, order_by: as_of, test_latest: 1, valid: 0.2}}
""")
    result = run_pipeline(tmp_path / "c.yaml", runs_dir=tmp_path / "runs")
    facts = read_manifest(result.run_dir).stages["split"].facts
    assert facts["test_latest"] == 1 and facts["rows"]["test"] == 70
    assert set(pd.to_datetime(result.outputs["split"].frames["test"]["as_of"])) == {CUTOFFS[3]}
