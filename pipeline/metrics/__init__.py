"""Metrics per task, with scikit-learn's definitions and a few vectors of memory.

One entry point, ``task_metrics(task, y_true, scores)``, reads the scores in the task's shape
(``pipeline.core.problems``: binary a P(positive) vector, multiclass an ``n x K`` matrix, regression
the predicted values) and returns that task's metrics, named by ``metric_names(kind)``.
Which way each metric is better is data (``HIGHER_IS_BETTER``), so ``evaluate``, tuning and
``predict``'s choice of the best model never guess it from a name. Each task's default (what
``evaluate`` ranks by unless told) is a proper scoring of the whole prediction rather than a
threshold count: ROC AUC (binary, as before), log loss (multiclass), RMSE (regression).

Hand-written rather than scikit-learn's functions because those validate, copy and re-sort
their inputs (670 MiB for the binary set on 5M rows; see ``binary``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from pipeline.metrics import multiclass, regression
from pipeline.metrics.binary import binary_confusion, binary_metrics
from pipeline.metrics.multiclass import confusion_counts, multiclass_metrics, per_class_metrics
from pipeline.metrics.regression import regression_metrics
from pipeline.core.problems import Task

__all__ = [
    "ALL_METRICS", "HIGHER_IS_BETTER", "METRIC_NAMES", "best_of", "binary_metrics", "class_table", "confusion_matrix",
    "default_metric", "is_better", "known_metric", "metric_names", "multiclass_metrics", "regression_metrics",
    "task_metrics",
]

METRIC_NAMES: dict[str, tuple[str, ...]] = {
    "binary": ("roc_auc", "pr_auc", "log_loss", "accuracy", "precision", "recall", "f1"),
    "multiclass": multiclass.NAMES,
    "regression": regression.NAMES,
}
ALL_METRICS: tuple[str, ...] = tuple(dict.fromkeys(name for names in METRIC_NAMES.values() for name in names))
HIGHER_IS_BETTER: dict[str, bool] = {
    "roc_auc": True, "pr_auc": True, "log_loss": False, "accuracy": True, "precision": True, "recall": True,
    "f1": True, "roc_auc_ovr_macro": True, "f1_macro": True, "f1_weighted": True,
    "rmse": False, "mae": False, "r2": True, "mape": False,
}
_DEFAULT = {"binary": "roc_auc", "multiclass": "log_loss", "regression": "rmse"}


def best_of(scored: Any, names: Iterable[str], metric: Any) -> str | None:
    """Of ``names``, the one whose value of ``metric`` in ``scored`` (a run record's
    ``metrics.models``: model -> metric -> value) is best in the metric's direction; None when
    ``metric`` is not one of known direction or no name has a finite value. Ties go to the first
    name in sorted order. The record is data, not trusted: anything but a finite number is
    skipped. ``predict`` and the MLflow registry choose a run's model with it."""
    if not isinstance(metric, str) or metric not in HIGHER_IS_BETTER or not isinstance(scored, dict):
        return None
    values = {}
    for name in sorted(names):
        record = scored.get(name)
        value = record.get(metric) if isinstance(record, dict) else None
        if not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value):
            values[name] = float(value)
    if not values:
        return None
    pick = max if HIGHER_IS_BETTER[metric] else min
    return pick(values, key=lambda name: values[name])


def known_metric(name: str | None) -> str | None:
    """``name`` when it is a metric of some task (None passes); else a ValueError that lists them
    and suggests the closest, for a config field's validator (evaluate's ``rank_by``, promote's
    ``metric``). Whether it fits the models' task is known only at run time."""
    if name is not None and name not in ALL_METRICS:
        import difflib

        close = difflib.get_close_matches(name, ALL_METRICS, n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise ValueError(f"unknown metric '{name}' (one of: {', '.join(ALL_METRICS)}){hint}")
    return name


def metric_task_problem(name: str | None, task_kind: str) -> str | None:
    """Why ``name`` cannot rank or compare models of a ``task_kind`` task (it is another task's
    metric), or None: for the ``task_problems`` of the stages that name a metric."""
    if name is None or name not in ALL_METRICS or name in METRIC_NAMES[task_kind]:
        return None
    return (f"'{name}' is not a metric of a {task_kind} task; its metrics are "
            f"{', '.join(METRIC_NAMES[task_kind])}")


def metric_names(task_kind: str) -> tuple[str, ...]:
    """The metrics ``task_metrics`` returns for a task kind, in table order."""
    return METRIC_NAMES[task_kind]


def default_metric(task_kind: str) -> str:
    """What ``evaluate`` and tuning rank by when the config names no metric."""
    return _DEFAULT[task_kind]


def is_better(metric: str, a: float, b: float) -> bool:
    """Whether ``a`` is strictly better than ``b`` by ``metric``; NaN is never better, and any
    number is better than NaN."""
    if math.isnan(a):
        return False
    if math.isnan(b):
        return True
    return a > b if HIGHER_IS_BETTER[metric] else a < b


def task_metrics(task: Task, y_true: Any, scores: Any, *, threshold: float = 0.5) -> dict[str, float]:
    """The task's metrics (``metric_names(task.kind)``); ``threshold`` applies to binary only."""
    if task.kind == "binary":
        return binary_metrics(y_true, scores, threshold=threshold)
    if task.kind == "multiclass":
        return multiclass_metrics(y_true, scores)
    return regression_metrics(y_true, scores)


def confusion_matrix(task: Task, y_true: Any, scores: Any, *, threshold: float = 0.5) -> list[list[int]]:
    """Counts, rows the true class and columns the predicted one, in class-code order (binary:
    0, 1 at ``threshold``; multiclass: ``task.classes``, predicted by argmax)."""
    if task.kind == "binary":
        return binary_confusion(y_true, scores, threshold=threshold)
    if task.kind == "multiclass":
        return confusion_counts(y_true, scores).tolist()
    raise ValueError("a confusion matrix needs a classification task, not regression")


def class_table(task: Task, confusion: list[list[int]]) -> dict[str, list[Any]]:
    """Multiclass: precision, recall, F1 and support per class from its ``confusion_matrix``,
    with the class values as ``labels`` (scikit-learn's ``precision_recall_fscore_support``)."""
    if task.kind != "multiclass":
        raise ValueError(f"a per-class table needs a multiclass task, not {task.kind}")
    return {"labels": task.to_dict()["classes"], **per_class_metrics(np.asarray(confusion))}
