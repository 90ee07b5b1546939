"""Prediction tables of partitioned features, written partition by partition on the cluster
(their columns per task: ``pipeline.scoring.columns``).

Gathering a split into one table is what the in-memory export does; at 5M test rows it put a
worker past its limit. Here each partition of the featurized split's Parquet files is scored
where it lies, by a per-partition scorer (an XGBoost booster's ``inplace_predict``), and
written as one Parquet file of a folder.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pipeline.backends import Backend, compute_lazy
from pipeline.distributed.dask_estimators import PartitionedData
from pipeline.core.errors import DataError
from pipeline.scoring.columns import empty_scores, task_columns, true_values
from pipeline.core.problems import BINARY, Task


@dataclass
class BoosterScorer:
    """One partition's scores from an XGBoost booster (the positive-class probability, the
    class probabilities or the predicted value, as its objective says), so predictions can be
    written partition by partition without gathering a split."""

    booster: Any
    features: list[str]
    backend: Backend

    def __call__(self, part: Any) -> np.ndarray:
        scores = self.booster.inplace_predict(part[self.features])
        return np.asarray(self.backend.to_host(scores), dtype="float64")


@dataclass
class MatrixScorer:
    """One partition's scores from an estimator that scores a feature matrix (``matrix_scores``:
    the tabular MLP), the partition's feature columns gathered into one matrix on its device."""

    estimator: Any
    features: list[str]
    backend: Backend

    def __call__(self, part: Any) -> np.ndarray:
        matrix = self.backend.to_matrix(part, columns=self.features, dtype="float32")
        return np.asarray(self.estimator.matrix_scores(matrix), dtype="float64")


def partition_scorer(estimator: Any, feature_names: Sequence[str], backend: Backend) -> Any:
    """A per-partition scorer for an estimator trained on partitioned data, where there is one."""
    if hasattr(estimator, "matrix_scores"):
        return MatrixScorer(estimator, list(feature_names), backend)
    get_booster = getattr(estimator, "get_booster", None)
    if get_booster is None:
        return None
    return BoosterScorer(get_booster(), list(feature_names), backend)


@dataclass
class PartitionScores:
    """A split's scores, partition by partition where each lies, from a per-partition scorer:
    host float64 in the task's shape, in row order. A class, so trained models pickle."""

    scorer: Any
    features: PartitionedData

    def __call__(self, split: str) -> np.ndarray:
        import dask

        from pipeline.backends import cluster_client

        scored = [dask.delayed(self.scorer)(part) for part in self.features.X[split].to_delayed()]
        with cluster_client():
            arrays = compute_lazy(*scored) if scored else ()
        task: Task = getattr(self.features, "task", BINARY)
        return np.concatenate(arrays) if arrays else empty_scores(task)


def write_predictions(features: PartitionedData, models: Sequence[Any], split: str, path: Path) -> bool:
    """Predictions of ``models`` (each with a ``name`` and an ``estimator``) as a folder of
    Parquet files at ``path``, one per partition of the featurized split(s); their columns
    are those of the features' task.

    Returns False (nothing written) when a model has no per-partition scorer or the features
    were not written as Parquet: the caller then gathers the split as the in-memory path does.
    """
    import dask.dataframe as dd

    from pipeline.runs.store import atomic_folder

    scorers = {m.name: partition_scorer(m.estimator, features.feature_names, features.backend) for m in models}
    if not features.parquet_dirs or any(s is None for s in scorers.values()):
        return False
    task: Task = getattr(features, "task", BINARY)
    names = list(features.parquet_dirs) if split == "all" else [split]
    keep = [features.id_column] if features.id_column else []
    parts = []
    for name in names:
        if not features.rows().get(name):
            continue
        frame = features.backend.read_partitioned(features.parquet_dirs[name], format="parquet")
        meta = _prediction_rows(frame._meta, name, keep, features.target, scorers, features.backend, task)
        parts.append(frame.map_partitions(_prediction_rows, name, keep, features.target, scorers,
                                          features.backend, task, meta=meta))
    if not parts:
        raise DataError(f"export: split '{split}' has no rows")
    table = parts[0] if len(parts) == 1 else dd.concat(parts)
    with atomic_folder(path) as folder:
        compute_lazy(table.to_parquet(str(folder), write_index=False, compute=False))
    return True


def _prediction_rows(part: Any, split: str, keep: list[str], target: str, scorers: dict[str, Any],
                     backend: Backend, task: Task = BINARY) -> pd.DataFrame:
    out = {c: backend.to_host(part[c]).reset_index(drop=True) for c in keep}
    out["split"] = pd.Series([split] * len(part), dtype="str")
    out[target] = true_values(task, backend.to_host(part[target]))
    for name, score in scorers.items():
        out.update(task_columns(task, score(part) if len(part) else empty_scores(task), model=name))
    return pd.DataFrame(out)
