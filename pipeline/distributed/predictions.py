"""Prediction tables: their columns per task, and those of partitioned features written
partition by partition on the cluster.

The columns a model's scores become are the same wherever predictions are written (export's
table, its partitioned folder, ``pipeline predict``), so they are named here, in the lowest
layer that writes them:

- binary: ``score`` (the positive class's probability);
- multiclass: ``score_<class>`` per class, in the task's class order, and ``prediction`` (the
  original class value of the highest score);
- regression: ``prediction`` (the predicted value).

A class value becomes part of a column name as its letters, digits and ``_``: every other run
of characters is one ``_``, and ``_`` at either end is dropped (``One year`` -> ``One_year``,
``<30`` -> ``30``; an empty result is ``class``). Values that end up with the same name each get
``_<code>``, their position in the task's classes (``<30``, ``>30`` -> ``30_0``, ``30_1``), and
should that make a name twice, every value gets its ``_<code>``.
``class_columns`` gives the names; tables written to Parquet carry the mapping in their metadata.

Gathering a split into one table is what the in-memory export does; at 5M test rows it put a
worker past its limit. Here each partition of the featurized split's Parquet files is scored
where it lies, by a per-partition scorer (an XGBoost booster's ``inplace_predict``), and
written as one Parquet file of a folder.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pipeline.backends import Backend, compute_lazy
from pipeline.distributed.training import PartitionedData
from pipeline.errors import DataError
from pipeline.tasks import BINARY, Task

# Parquet metadata key (``DataFrame.attrs``) of a table's class columns: column -> class value.
CLASS_COLUMNS_KEY = "class_columns"
_UNSAFE = re.compile(r"[^0-9A-Za-z_]+")


def class_columns(classes: Sequence[Any]) -> list[str]:
    """Column-safe names of class values, in ``classes`` order (the rule: module docstring)."""
    cleaned = [_UNSAFE.sub("_", str(value)).strip("_") or "class" for value in classes]
    repeated = {name for name in cleaned if cleaned.count(name) > 1}
    names = [f"{name}_{code}" if name in repeated else name for code, name in enumerate(cleaned)]
    if len(set(names)) < len(names):          # a suffixed name met a value spelt that way
        names = [f"{name}_{code}" for code, name in enumerate(cleaned)]
    return names


def class_column_map(task: Task, *, model: str | None = None) -> dict[str, Any]:
    """Column name -> original class value of a multiclass model's score columns (empty
    otherwise), for a table's metadata."""
    if task.kind != "multiclass":
        return {}
    values = task.to_dict()["classes"]                    # plain JSON values, not NumPy scalars
    return {_column("score", model, name): value for name, value in zip(class_columns(task.classes), values)}


def class_values(task: Task, codes: Any) -> pd.Series:
    """The original class values of multiclass codes, typed by the classes (not by the rows
    at hand), so every partition of a table gets the same column type."""
    values = pd.Series(task.decode(np.asarray(codes, dtype="int64")), dtype="object")
    if all(isinstance(value, str) for value in task.classes):
        return values.astype("str")
    numbers = [value for value in task.classes if isinstance(value, (int, float, np.number))
               and not isinstance(value, (bool, np.bool_))]
    if len(numbers) == len(task.classes):
        integral = all(isinstance(value, (int, np.integer)) for value in numbers)
        return values.astype("int64" if integral else "float64")
    return values


def true_values(task: Task, labels: Any) -> Any:
    """A split's labels as a predictions table writes them: binary 0/1, multiclass the
    original class values, regression the target's numbers."""
    if task.kind == "multiclass":
        return class_values(task, labels)
    return np.asarray(labels, dtype="float64" if task.kind == "regression" else "int64")


def task_columns(task: Task, scores: Any, *, model: str | None = None) -> dict[str, Any]:
    """One model's score and prediction columns (see the module docstring); with ``model``,
    each name gets ``_<model>`` after its first word (``score_<model>_<class>``)."""
    scores = np.asarray(scores, dtype="float64")
    if task.kind == "regression":
        return {_column("prediction", model): scores.reshape(-1)}
    if task.kind != "multiclass":
        return {_column("score", model): scores.reshape(-1)}
    scores = scores.reshape(-1, task.n_outputs)
    out: dict[str, Any] = {_column("score", model, name): scores[:, k]
                           for k, name in enumerate(class_columns(task.classes))}
    out[_column("prediction", model)] = class_values(task, scores.argmax(axis=1) if len(scores) else [])
    return out


def empty_scores(task: Task) -> np.ndarray:
    """The scores of no rows, shaped as the task's scores."""
    return np.empty((0, task.n_outputs) if task.kind == "multiclass" else 0, dtype="float64")


def _column(word: str, *parts: str | None) -> str:
    return "_".join([word, *(part for part in parts if part)])


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


def partition_scorer(estimator: Any, feature_names: Sequence[str], backend: Backend) -> BoosterScorer | None:
    """A per-partition scorer for an estimator trained on partitioned data, where there is one."""
    get_booster = getattr(estimator, "get_booster", None)
    if get_booster is None:
        return None
    return BoosterScorer(get_booster(), list(feature_names), backend)


def write_predictions(features: PartitionedData, models: Sequence[Any], split: str, path: Path) -> bool:
    """Predictions of ``models`` (each with a ``name`` and an ``estimator``) as a folder of
    Parquet files at ``path``, one per partition of the featurized split(s); their columns
    are those of the features' task.

    Returns False (nothing written) when a model has no per-partition scorer or the features
    were not written as Parquet: the caller then gathers the split as the in-memory path does.
    """
    import dask.dataframe as dd

    from pipeline.store import atomic_folder

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
