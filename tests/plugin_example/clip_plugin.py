"""A feature op as a user writes one, outside the package: ``clip_outliers`` limits numeric
columns to quantiles of the training split (winsorizing), so a customer with a freak value
scores like the most extreme ordinary one.

Importing it registers the op; a config lists the module under ``plugins:`` and uses
``- clip_outliers: {columns: [...], quantile: 0.01}`` in a ``features`` stage.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field, model_validator

from pipeline.core.errors import DataError
from pipeline.features import FeatureOp, OpState, register_op


class ClipState(OpState):
    """The low and high bound per column, as workflow.json holds them."""

    bounds: dict[str, tuple[float, float]]


@register_op
class ClipOutliers(FeatureOp):
    """Limit numeric columns to the training split's quantiles (values outside become the bound)."""

    op: ClassVar[str] = "clip_outliers"
    state_model: ClassVar[type[OpState]] = ClipState
    example: ClassVar[dict[str, Any]] = {"columns": ["num", "count"], "quantile": 0.1}
    frame_api: ClassVar[tuple[str, ...]] = ("Series.quantile", "Series.clip", "DataFrame.assign")

    quantile: float = Field(0.01, gt=0.0, lt=0.5, description="Lower quantile; the upper is 1 - quantile.")
    upper: bool = Field(True, description="Clip high values too (false: only low ones).")

    @model_validator(mode="after")
    def _sensible(self) -> ClipOutliers:
        if len(set(self.columns)) != len(self.columns):
            raise ValueError("columns are listed more than once")
        return self

    def statistics(self, frame: Any, backend: Any) -> dict[str, Any]:
        wanted = {}
        for column in self.columns:
            if not backend.is_numeric(frame[column]):
                raise DataError(f"clip_outliers: column '{column}' is {frame[column].dtype}, not numeric")
            wanted[f"{column}.low"] = frame[column].quantile(self.quantile)
            wanted[f"{column}.high"] = frame[column].quantile(1.0 - self.quantile)
        return wanted

    def fit_from(self, stats: dict[str, Any], backend: Any) -> ClipState:
        return ClipState(bounds={c: (float(stats[f"{c}.low"]), float(stats[f"{c}.high"])) for c in self.columns})

    def transform(self, frame: Any, backend: Any, state: ClipState) -> Any:
        self.check_columns(frame)
        clipped = {}
        for column in self.columns:
            low, high = state.bounds[column]
            clipped[column] = frame[column].astype("float64").clip(lower=low, upper=high if self.upper else None)
        return frame.assign(**clipped)
