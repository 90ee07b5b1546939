"""Numeric columns cut at the training split's quantiles: ``clip`` (winsorising: values beyond
two quantiles set to them) and ``quantile_bin`` (integer bin codes between quantiles).

Quantiles interpolate linearly between the training values, as pandas and cuDF do by
default; on partitioned (Dask) data they are Dask's approximate quantiles.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field, model_validator

from pipeline.backends import Backend
from pipeline.features.ops.encoding import code_dtype
from pipeline.features.ops.op_base import FeatureOp, OpState
from pipeline.features.ops.op_registry import register_op
from pipeline.features.ops.op_support import (
    as_float, merged, per_column, replace_in_place, require_finite, require_numeric,
)


def numeric_quantiles(op: str, frame: Any, columns: list[str], quantiles: list[float], backend: Backend) -> dict[str, Any]:
    """``<col>.q<i>``: the ``quantiles[i]`` quantile of each column (a DataError for a column
    that is not numeric)."""
    def column_quantiles(col: str) -> dict[str, Any]:
        values = require_numeric(op, col, frame[col], backend).astype("float64")
        return {f"{col}.q{i}": values.quantile(q) for i, q in enumerate(quantiles)}

    return merged(per_column(backend, frame, column_quantiles, columns))


def fitted_quantile(op: str, stats: dict[str, Any], col: str, i: int, q: float) -> float:
    return require_finite(op, col, f"{q:g} quantile", as_float(stats[f"{col}.q{i}"]))


class ClipState(OpState):
    bounds: dict[str, tuple[float, float]]


@register_op
class Clip(FeatureOp):
    """Winsorising: values below the training split's ``lower`` quantile set to it, values above
    its ``upper`` quantile set to that (``lower: 0``, ``upper: 1``: the training minimum and
    maximum). The column becomes float64 on every device; missing values stay missing."""

    op: ClassVar[str] = "clip"
    state_model: ClassVar[type[OpState]] = ClipState
    example: ClassVar[dict[str, Any]] = {"columns": ["num", "count"], "lower": 0.1, "upper": 0.9}
    lower: float = Field(0.01, ge=0, le=1, description="Quantile of the training split values are raised to.")
    upper: float = Field(0.99, ge=0, le=1, description="Quantile of the training split values are lowered to.")

    @model_validator(mode="after")
    def _ordered(self) -> Clip:
        if self.lower >= self.upper:
            raise ValueError(f"lower ({self.lower}) must be below upper ({self.upper})")
        return self

    def statistics(self, frame: Any, backend: Backend) -> dict[str, Any]:
        return numeric_quantiles("clip", frame, self.columns, [self.lower, self.upper], backend)

    def fit_from(self, stats: dict[str, Any], backend: Backend) -> ClipState:
        return ClipState(bounds={col: (fitted_quantile("clip", stats, col, 0, self.lower),
                                       fitted_quantile("clip", stats, col, 1, self.upper)) for col in self.columns})

    def transform(self, frame: Any, backend: Backend, state: ClipState) -> Any:
        self.check_columns(frame)
        def clipped(col: str) -> Any:
            low, high = state.bounds[col]
            return frame[col].astype("float64").clip(lower=low, upper=high)

        new = dict(zip(self.columns, per_column(backend, frame, clipped, self.columns)))
        return replace_in_place(frame, new)


class QuantileBinState(OpState):
    # Per column, the inner bin edges (ascending, distinct): bin k holds edges[k-1] <= x < edges[k].
    edges: dict[str, list[float]]


@register_op
class QuantileBin(FeatureOp):
    """Integer bin codes at the training split's quantiles: ``bins`` bins of about equal rows.

    The inner edges are the 1/bins .. (bins-1)/bins quantiles, deduplicated (a column with many
    equal values has fewer bins). Codes run 1..(edges + 1), by ``edges[k-1] <= x < edges[k]``;
    0 is a missing value. The column keeps its name as a categorical (``categorical_cardinalities``:
    bins + 1, for embeddings) whose codes are also ordered, so trees can split on them.
    """

    op: ClassVar[str] = "quantile_bin"
    state_model: ClassVar[type[OpState]] = QuantileBinState
    example: ClassVar[dict[str, Any]] = {"columns": ["num", "count"], "bins": 4}
    bins: int = Field(10, ge=2, le=1000, description="Bins at the training split's quantiles (fewer when edges coincide).")

    def statistics(self, frame: Any, backend: Backend) -> dict[str, Any]:
        return numeric_quantiles("quantile_bin", frame, self.columns,
                                 [k / self.bins for k in range(1, self.bins)], backend)

    def fit_from(self, stats: dict[str, Any], backend: Backend) -> QuantileBinState:
        edges = {}
        for col in self.columns:
            cuts = [fitted_quantile("quantile_bin", stats, col, k - 1, k / self.bins) for k in range(1, self.bins)]
            edges[col] = sorted(set(cuts))
        return QuantileBinState(edges=edges)

    def transform(self, frame: Any, backend: Backend, state: QuantileBinState) -> Any:
        self.check_columns(frame)
        def binned(col: str) -> Any:
            values = frame[col].astype("float64")
            codes = values.notna().astype("int32")
            for edge in state.edges[col]:
                codes = codes + (values >= edge).fillna(False).astype("int32")
            return codes.astype(code_dtype(len(state.edges[col]) + 1))

        new = dict(zip(self.columns, per_column(backend, frame, binned, self.columns)))
        return replace_in_place(frame, new)

    def categorical_cardinalities(self, state: QuantileBinState) -> dict[str, int]:
        """Bins plus the 0 code of missing values."""
        return {c: len(e) + 2 for c, e in state.edges.items()}
