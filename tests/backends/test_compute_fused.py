"""Dask collections computed by the pipeline run each partition's chain of steps as one task,
and a step that several collections share runs once."""

from __future__ import annotations

import dask
import dask.dataframe as dd
import pandas as pd
from dask.callbacks import Callback

from pipeline.backends.dask_collections import compute_lazy


class _Tasks(Callback):
    """Every task key the local scheduler runs."""

    def __init__(self) -> None:
        super().__init__()
        self.keys: list[object] = []

    def _pretask(self, key: object, dsk: object, state: object) -> None:
        self.keys.append(key)


def _names(keys: list[object]) -> set[str]:
    return {(k[0] if isinstance(k, tuple) else str(k)).rsplit("-", 1)[0] for k in keys}


def _add_one(part: pd.DataFrame) -> pd.DataFrame:
    return part + 1


def _double(part: pd.DataFrame) -> pd.DataFrame:
    return part * 2


def _triple(part: pd.DataFrame) -> pd.DataFrame:
    return part * 3


def _frame(path) -> dd.DataFrame:
    pd.DataFrame({"a": range(400)}).to_parquet(path / "a.parquet")
    pd.DataFrame({"a": range(400, 800)}).to_parquet(path / "b.parquet")
    return dd.read_parquet(str(path))


def test_a_chain_of_partition_steps_runs_as_one_task_per_partition(tmp_path):
    chain = _frame(tmp_path).map_partitions(_add_one).map_partitions(_double)
    with dask.config.set(scheduler="sync"), _Tasks() as tasks:
        (result,) = compute_lazy(chain)
    pd.testing.assert_frame_equal(result.reset_index(drop=True), pd.DataFrame({"a": [(i + 1) * 2 for i in range(800)]}))
    # No task of its own for _add_one or _double: both ran inside the read's fused task.
    per_step = {name for name in _names(tasks.keys) if name in ("_add_one", "_double", "read_parquet")}
    assert per_step == set(), _names(tasks.keys)
    assert len(tasks.keys) == chain.npartitions + 1      # a task per partition and the final concat


def test_a_step_that_collections_share_runs_once(tmp_path):
    calls = []

    def shared(part: pd.DataFrame) -> pd.DataFrame:
        calls.append(len(part))
        return part + 1

    base = _frame(tmp_path).map_partitions(shared, meta={"a": "int64"})
    doubled, tripled = base.map_partitions(_double), base.map_partitions(_triple)
    with dask.config.set(scheduler="sync"):
        twice, thrice, rows = compute_lazy(doubled, tripled, doubled.shape[0])
    assert rows == 800
    assert twice["a"].tolist() == [(i + 1) * 2 for i in range(800)]
    assert thrice["a"].tolist() == [(i + 1) * 3 for i in range(800)]
    assert sorted(calls) == [400, 400]                   # once per partition, not once per collection


def test_collections_other_than_frames_pass_unchanged():
    value = dask.delayed(sum)([1, 2, 3])
    with dask.config.set(scheduler="sync"):
        assert compute_lazy(value) == (6,)
