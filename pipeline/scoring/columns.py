"""The columns a model's scores become in a prediction table, per task.

They are the same wherever predictions are written (export's table, its partitioned folder,
``pipeline predict``):

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
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from pipeline.core.problems import Task

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
