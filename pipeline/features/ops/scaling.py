"""Numeric transforms: ``standardize`` (zero mean, unit variance) and ``log1p`` (log(1 + x))."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from pipeline.backends import Backend
from pipeline.core.errors import DataError, RowsError
from pipeline.features.ops.op_base import EmptyState, FeatureOp, OpState
from pipeline.features.ops.op_registry import register_op
from pipeline.features.ops.op_support import (
    merged, missing_value, moments, per_column, plain, replace_in_place, require_finite, require_numeric, stable,
)


class StandardizeState(OpState):
    mean_std: dict[str, tuple[float, float]]


@register_op
class Standardize(FeatureOp):
    """Zero mean, unit variance with the training split's statistics (population std)."""

    op: ClassVar[str] = "standardize"
    state_model: ClassVar[type[OpState]] = StandardizeState
    example: ClassVar[dict[str, Any]] = {"columns": ["num", "count"]}

    def statistics(self, frame: Any, backend: Backend) -> dict[str, Any]:
        def column_moments(col: str) -> dict[str, Any]:
            return moments(require_numeric("standardize", col, frame[col], backend), ("mean", "std"), col)

        return merged(per_column(backend, frame, column_moments, self.columns))

    def fit_from(self, stats: dict[str, Any], backend: Backend) -> StandardizeState:
        mean_std = {}
        for col in self.columns:
            mean = require_finite("standardize", col, "mean", stable(stats, f"{col}.mean"))
            std = require_finite("standardize", col, "standard deviation", stable(stats, f"{col}.std"))
            mean_std[col] = (mean, std if std > 0 else 1.0)
        return StandardizeState(mean_std=mean_std)

    def transform(self, frame: Any, backend: Backend, state: StandardizeState) -> Any:
        self.check_columns(frame)

        def scaled(col: str) -> Any:
            mean, std = state.mean_std[col]
            return (frame[col].astype("float64") - mean) / std

        new = dict(zip(self.columns, per_column(backend, frame, scaled, self.columns)))
        return replace_in_place(frame, new)


@register_op
class Log1p(FeatureOp):
    """log(1 + x) for skewed non-negative columns; values below -1 are an error at fit."""

    op: ClassVar[str] = "log1p"
    example: ClassVar[dict[str, Any]] = {"columns": ["count"]}

    def statistics(self, frame: Any, backend: Backend) -> dict[str, Any]:
        return {col: require_numeric("log1p", col, frame[col], backend).min() for col in self.columns}

    def fit_from(self, stats: dict[str, Any], backend: Backend) -> EmptyState:
        for col in self.columns:
            low = plain(stats[col])
            if not missing_value(low) and low <= -1:
                raise DataError(f"log1p: column '{col}' has values <= -1 (min {low})")
        return EmptyState()

    def transform(self, frame: Any, backend: Backend, state: OpState) -> Any:
        self.check_columns(frame)

        def logged(col: str) -> Any:
            values = frame[col].astype("float64")
            below = values <= -1
            if bool(backend.to_host(below.any())):
                # log1p gives -inf at -1 and NaN below it: name the cause and the first row (a
                # server names it as rows[i].col), not a missing value later.
                position = int(np.argmax(np.asarray(backend.to_host(below))))
                value = plain(np.asarray(backend.to_host(values))[position])
                raise RowsError(f"log1p: column '{col}' has values <= -1 (min {plain(backend.to_host(values.min()))}, "
                                f"first at row {position + 1}: {value}), outside the domain it was fitted on",
                                [(str(col), position, f"{value} is <= -1, outside log1p's domain (it was fitted on "
                                                      "values above -1)")])
            return np.log1p(values)

        new = dict(zip(self.columns, per_column(backend, frame, logged, self.columns)))
        return replace_in_place(frame, new)
