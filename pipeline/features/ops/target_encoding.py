"""``target_encode``: each category replaced by the label's mean over the training rows that
hold it, smoothed toward the whole split's mean, and computed out of fold on the training rows.

The smoothed mean of a category with ``count`` training rows whose labels sum to ``sum`` is
``(sum + m * prior) / (count + m)`` (``m``: ``smoothing``; ``prior``: the training split's
mean label), so a category seen a few times stays near the prior. Missing and unseen values
get the prior. By task: binary, one column, the positive rate; regression, one column, the
mean value; multiclass, one column per class, ``<col>=te_<class>``, each class's share. With
``keep: true`` the category column stays as it was and its encoding is added after the other
columns (``<col>=te``, or the per-class columns), so a later op can also code the categories for
a model that reads them natively (the ``auto`` stage gives CatBoost the codes and the other
models the encoding).

A category's mean includes the label of every training row that holds it, so on the training
rows themselves it leaks their labels: a column of unique ids would predict the training
labels perfectly and nothing else. The training split is therefore encoded out of fold
(``transform_training``): its rows are dealt into ``folds`` folds (seeded, so the same rows land
in the same folds on every run and device), and each row gets the smoothed mean of its
category over the other folds' rows. Every other split, and scoring, get the means over the
whole training split, which the fitted state holds.

The sums are taken with ``bincount`` on the backend's arrays (NumPy or CuPy): exact for class
labels (sums of 0/1), while regression sums on a GPU may differ from the CPU's in the last bits.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field

from pipeline.backends import Backend
from pipeline.backends.headers import ColumnSet
from pipeline.core.errors import DataError
from pipeline.core.seeds import SEED_LIMIT
from pipeline.features.ops.op_base import FeatureOp, OpState, Scalar, Target
from pipeline.features.ops.op_registry import register_op
from pipeline.features.ops.op_support import (
    code_array, count_pairs, lookup, merged, per_column, plain, replace_columns, require_finite,
)


# More folds leave fewer rows of a category in each: at one each, the encoding leaks the label.
MOST_FOLDS = 20


class TargetEncodeState(OpState):
    """What scoring needs: the task's outputs, the prior and each category's smoothed means."""

    task: Literal["binary", "multiclass", "regression"]
    classes: list[Scalar] = Field(default_factory=list, description="multiclass: the class of each output column")
    prior: list[float]
    categories: dict[str, list[Scalar]]
    # Per column, per category (in ``categories`` order): one smoothed mean per output.
    means: dict[str, list[list[float]]]


@register_op
class TargetEncode(FeatureOp):
    """The smoothed mean label per category: the training rows out of fold (each from the other
    folds' rows), every other split and scoring from the whole training split."""

    op: ClassVar[str] = "target_encode"
    state_model: ClassVar[type[OpState]] = TargetEncodeState
    example: ClassVar[dict[str, Any]] = {"columns": ["cat", "flag"], "folds": 3, "smoothing": 2.0}
    uses_target: ClassVar[bool] = True
    smoothing: float = Field(10.0, ge=0, allow_inf_nan=False,
                             description="Weight m of the prior: a category's value is (sum + m*prior) / (count + m).")
    folds: int = Field(5, ge=2, le=MOST_FOLDS, description=(
        "Folds the training rows are encoded out of (each row by the others); at most 20: with one row of a "
        "category per fold the encoding orders that category's rows by their own labels (leave-one-out's leak)."))
    seed: int = Field(0, ge=0, lt=SEED_LIMIT, description="Seed of the assignment of training rows to folds.")
    keep: bool = Field(False, description="Keep each category column as it is and add its encoding after the "
                                          "other columns (<col>=te; multiclass <col>=te_<class>).")

    # ------------------------------------------------------------------ fitting
    def target_statistics(self, frame: Any, backend: Backend, target: Target) -> dict[str, Any]:
        if len(frame) == 0:
            raise DataError(f"target_encode on {self.columns}: the training split has no rows")
        labels = label_matrix(target, backend)
        stats: dict[str, Any] = {"task": target.task,
                                 "prior": backend.to_host(labels.mean(axis=0)).tolist()}

        def category_sums(col: str) -> dict[str, Any]:
            series = frame[col]
            cats = [v for v, _ in count_pairs(backend.to_host(series.value_counts(dropna=True)))]
            codes = code_array(series, cats, backend)
            sums, counts = group_sums(backend, codes, labels, len(cats) + 1)
            return {f"{col}.categories": cats, f"{col}.sums": backend.to_host(sums).tolist(),
                    f"{col}.counts": backend.to_host(counts).tolist()}

        return {**stats, **merged(per_column(backend, frame, category_sums, self.columns))}

    def fit_from(self, stats: dict[str, Any], backend: Backend) -> TargetEncodeState:
        task = stats["task"]
        prior = [require_finite("target_encode", str(self.columns), "mean label", float(p)) for p in stats["prior"]]
        cats, means = {}, {}
        for col in self.columns:
            cats[col] = stats[f"{col}.categories"]
            sums, counts = stats[f"{col}.sums"], stats[f"{col}.counts"]
            means[col] = [[(sums[i][k] + self.smoothing * p) / (counts[i] + self.smoothing) for k, p in enumerate(prior)]
                          for i in range(1, len(cats[col]) + 1)]
        return TargetEncodeState(task=task.kind, classes=[plain(c) for c in task.classes] if task.kind == "multiclass"
                                 else [], prior=prior, categories=cats, means=means)

    # ------------------------------------------------------------------ applying
    def transform(self, frame: Any, backend: Backend, state: TargetEncodeState) -> Any:
        """Every split but the training one, and scoring: the whole training split's means."""
        self.check_columns(frame)
        looked_up = per_column(backend, frame, lambda col: lookup(frame[col], state.categories[col],
                                                                  [state.prior, *state.means[col]], backend),
                               self.columns)
        values = dict(zip(self.columns, looked_up))
        return self._output(frame, backend, state, values)

    def transform_training(self, frame: Any, backend: Backend, state: TargetEncodeState, target: Target) -> Any:
        """The training split out of fold: each row by the rows of the other folds."""
        self.check_columns(frame)
        rows = len(frame)
        if len(target.values) != rows:
            raise DataError(f"target_encode: the target has {len(target.values)} labels for {rows} training rows")
        if self.folds > rows:
            raise DataError(f"target_encode: folds: {self.folds} needs at least {self.folds} training rows, and the "
                            f"training split has {rows}")
        xp = backend.array
        labels = label_matrix(target, backend)
        fold = backend.asarray(fold_of_rows(rows, self.folds, self.seed))
        prior = xp.asarray(np.asarray(state.prior, dtype="float64"))

        def out_of_fold(col: str) -> Any:
            size = len(state.categories[col]) + 1
            codes = code_array(frame[col], state.categories[col], backend)
            cell = fold * size + codes                          # (fold, category) of each row
            sums, counts = group_sums(backend, cell, labels, self.folds * size)
            sums, counts = sums.reshape(self.folds, size, -1), counts.reshape(self.folds, size, 1)
            other_sums = sums.sum(axis=0)[None] - sums          # every fold's rows but its own
            other_counts = counts.sum(axis=0)[None] - counts
            weight = other_counts + self.smoothing
            means = xp.where(weight > 0, (other_sums + self.smoothing * prior) / xp.where(weight > 0, weight, 1.0),
                             prior)
            means[:, 0, :] = prior                              # missing and unseen values
            return means[fold, codes]

        values = dict(zip(self.columns, per_column(backend, frame, out_of_fold, self.columns)))
        return self._output(frame, backend, state, values)

    def _output(self, frame: Any, backend: Backend, state: TargetEncodeState, values: dict[str, Any]) -> Any:
        new = {}
        for col, per_row in values.items():
            # A column of a row-major matrix is strided: each output column gets its own buffer.
            if state.task == "multiclass":
                for k, cls in enumerate(state.classes):
                    new[f"{col}=te_{cls}"] = backend.array.ascontiguousarray(per_row[:, k])
            else:
                new[f"{col}=te" if self.keep else col] = backend.array.ascontiguousarray(per_row[:, 0])
        out = replace_columns(frame, backend, new, [] if self.keep else list(self.columns))
        return out[self.output_columns([str(c) for c in frame.columns], state)]

    # ------------------------------------------------------------------ names
    def output_columns(self, columns: list[str], state: TargetEncodeState) -> list[str]:
        """Binary and regression: each column keeps its name and place; multiclass: it becomes
        ``<col>=te_<class>`` columns at the end. With ``keep``: every column stays and the
        encodings (``<col>=te``, or the per-class columns) follow them."""
        if state.task == "multiclass":
            encoded = [f"{col}=te_{cls}" for col in self.columns for cls in state.classes]
        elif self.keep:
            encoded = [f"{col}=te" for col in self.columns]
        else:
            return columns
        return [c for c in columns if self.keep or c not in self.columns] + encoded

    def columns_after(self, columns: ColumnSet, why: str) -> ColumnSet:
        """The columns stay (binary, regression) or become ``<col>=te_<class>`` (multiclass):
        which one is known from the task, when fitting. With ``keep`` they stay, and ``<col>=te``
        columns follow."""
        return columns.plus(patterns=[f"{c}=te" if self.keep else f"{c}=te_" for c in self.columns])


def label_matrix(target: Target, backend: Backend) -> Any:
    """The labels as an n x K float64 device array: K = 1 (binary 0/1, regression values), or
    one 0/1 column per class (multiclass)."""
    xp = backend.array
    values = target.values
    if target.task.kind == "multiclass":
        classes = xp.arange(len(target.task.classes))
        return (values[:, None] == classes[None, :]).astype("float64")
    return values.astype("float64")[:, None]


def group_sums(backend: Backend, groups: Any, labels: Any, size: int) -> tuple[Any, Any]:
    """Per group 0..size-1: the sum of each label column (size x K) and the row count (size)."""
    xp = backend.array
    sums = xp.stack([xp.bincount(groups, weights=labels[:, k], minlength=size) for k in range(labels.shape[1])],
                    axis=1)
    return sums, xp.bincount(groups, minlength=size).astype("float64")


def fold_of_rows(rows: int, folds: int, seed: int) -> np.ndarray:
    """The fold of each training row: a seeded shuffle dealt round-robin, so folds differ in
    size by at most one row and the same rows fall together on every device and run."""
    return (np.random.default_rng(seed).permutation(rows) % folds).astype("int64")
