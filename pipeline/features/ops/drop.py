"""``drop``: columns the models should not see, removed."""

from __future__ import annotations

from typing import Any, ClassVar

from pipeline.backends import Backend
from pipeline.backends.headers import ColumnSet
from pipeline.features.ops.op_base import FeatureOp, OpState
from pipeline.features.ops.op_registry import register_op


@register_op
class Drop(FeatureOp):
    """Remove columns the models should not see."""

    op: ClassVar[str] = "drop"
    example: ClassVar[dict[str, Any]] = {"columns": ["cat"]}

    def transform(self, frame: Any, backend: Backend, state: OpState) -> Any:
        # Columns it drops are not required to score (``read_columns``), so they may be absent.
        return frame.drop(columns=[c for c in self.columns if c in frame.columns])

    def read_columns(self) -> set[str]:
        """None: a dropped column's values are never read."""
        return set()

    def output_columns(self, columns: list[str], state: OpState) -> list[str]:
        return [c for c in columns if c not in self.columns]

    def columns_after(self, columns: ColumnSet, why: str) -> ColumnSet:
        return columns.without(self.columns, why)
