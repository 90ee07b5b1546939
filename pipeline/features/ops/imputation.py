"""``fill_missing``: missing values replaced by a constant or a statistic of the training split."""

from __future__ import annotations

import math
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from pipeline.backends import Backend
from pipeline.backends.headers import ColumnSet
from pipeline.core.errors import DataError
from pipeline.features.ops.op_base import FeatureOp, OpState, Scalar
from pipeline.features.ops.op_registry import register_op
from pipeline.features.ops.op_support import (
    as_fillable, count_pairs, median, merged, missing_value, moments, not_numbers, per_column, plain, replace_columns,
    replace_in_place, require_finite, stable,
)


class FillMissingState(OpState):
    """Fill value per column. Its JSON type is part of the state: a float fill (mean and
    median always are) makes an integer column float64 on every device (see ``FillMissing``)."""

    fill: dict[str, Scalar]


@register_op
class FillMissing(FeatureOp):
    """Replace missing values with a constant or a statistic of the training split.

    A float fill (mean, median, a constant such as 0.5) turns an integer column into float64
    first, whether or not it has a gap: pandas already holds NumPy ints with a gap as float64,
    but pandas' nullable ``Int64`` and cuDF keep them integer and refuse a fill with a
    fraction. Deciding by the fitted value's type, not the data, gives one dtype on both
    devices and for every split and scoring batch. An integer fill keeps integer columns.
    """

    op: ClassVar[str] = "fill_missing"
    state_model: ClassVar[type[OpState]] = FillMissingState
    example: ClassVar[dict[str, Any]] = {"columns": ["num"], "strategy": "median", "indicator": True}
    strategy: Literal["constant", "median", "mean", "most_frequent"] = Field("median", description="Statistic of the training split, or a constant.")
    value: float | int | str | None = Field(None, description="Fill value for strategy: constant.")
    indicator: bool = Field(False, description="Add a <column>_missing 0/1 column before filling.")

    @model_validator(mode="after")
    def _constant_needs_value(self) -> FillMissing:
        if self.strategy == "constant" and self.value is None:
            raise ValueError("strategy 'constant' needs a 'value'")
        if isinstance(self.value, float) and not math.isfinite(self.value):
            raise ValueError(f"fill value must be a finite number, got {self.value}")
        return self

    def statistics(self, frame: Any, backend: Backend) -> dict[str, Any]:
        if self.strategy == "constant":
            return {}

        def column_statistics(col: str) -> dict[str, Any]:
            series = frame[col]
            if self.strategy == "most_frequent":
                return {col: series.value_counts(dropna=True)}
            if not backend.is_numeric(series):
                raise DataError(f"fill_missing: strategy '{self.strategy}' needs a numeric column; "
                                f"'{col}' is {series.dtype}{not_numbers(series, backend)}")
            if self.strategy == "median":
                return {col: median(series)}
            return moments(series, ("mean",), col)

        return merged(per_column(backend, frame, column_statistics, self.columns))

    def fit_from(self, stats: dict[str, Any], backend: Backend) -> FillMissingState:
        fills: dict[str, Any] = {}
        for col in self.columns:
            if self.strategy == "constant":
                fills[col] = self.value
            elif self.strategy == "most_frequent":
                counts = count_pairs(stats[col])
                fills[col] = counts[0][0] if counts else None
            else:
                stat = plain(stats[col]) if self.strategy == "median" else stable(stats, f"{col}.mean")
                fills[col] = None if missing_value(stat) else require_finite(
                    "fill_missing", col, self.strategy, float(stat))
            if fills[col] is None:
                raise DataError(f"fill_missing: column '{col}' has no non-missing value in the training split")
        return FillMissingState(fill=fills)

    def transform(self, frame: Any, backend: Backend, state: FillMissingState) -> Any:
        self.check_columns(frame)

        def filled(col: str) -> dict[str, Any]:
            new = {f"{col}_missing": frame[col].isna().astype("float32")} if self.indicator else {}
            new[col] = as_fillable(frame[col], state.fill[col], backend).fillna(state.fill[col])
            return new

        new = merged(per_column(backend, frame, filled, self.columns))
        if not self.indicator:
            return replace_in_place(frame, new)
        out = replace_columns(frame, backend, new, list(self.columns))
        return out[self.output_columns(list(frame.columns), state)]

    def output_columns(self, columns: list[str], state: OpState) -> list[str]:
        if not self.indicator:
            return columns
        out = []
        for c in columns:
            out.append(c)
            if c in self.columns:
                out.append(f"{c}_missing")
        return out

    def columns_after(self, columns: ColumnSet, why: str) -> ColumnSet:
        return columns.plus(f"{c}_missing" for c in self.columns) if self.indicator else columns

    def written_columns(self) -> set[str]:
        """The filled columns and, with ``indicator``, their ``<column>_missing`` columns."""
        written = set(self.columns)
        if self.indicator:
            written |= {f"{c}_missing" for c in self.columns}
        return written
