"""What a model predicts: a binary label, one of several classes, or a number.

A ``Task`` is decided once, by the ``split`` stage (declared with ``task:`` or inferred from
the target), and travels with the data: ``SplitData`` → ``FeatureSet`` → every trained model
→ ``model.json``. Everything that differs by task reads it from there (the labels' dtype, the
estimator class, the loss, the metrics, the shape of the scores, the columns ``predict``
writes), so no stage guesses it again from the values it happens to see.

Scores by task (host float64, one row per scored row):

- binary: a vector, the probability of the positive class;
- multiclass: an ``n x K`` matrix, one column per class in ``classes`` order;
- regression: a vector, the predicted value.

Labels by task: binary 0/1 and multiclass codes ``0..K-1`` as int32 (``classes[code]`` is the
original value); regression float32.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:                  # NumPy is imported where it is used: `pipeline --help` needs none
    import numpy as np

TaskKind = Literal["binary", "multiclass", "regression"]
TASK_KINDS: tuple[str, ...] = ("binary", "multiclass", "regression")
# Beyond this many distinct values a text target is almost surely an id or free text, not
# classes; a user who means it says ``task: multiclass`` and gets a limit they chose to cross.
MAX_INFERRED_CLASSES = 100


@dataclass(frozen=True)
class Task:
    """The task and what decoding its outputs needs (JSON-safe, compared by value)."""

    kind: TaskKind = "binary"
    # multiclass: the original target values, in the order of the label codes and score columns.
    classes: tuple[Any, ...] = ()
    # binary: the target value that means 1 (every other value is 0); None: the target is 0/1.
    positive: Any = None

    def __post_init__(self) -> None:
        if self.kind not in TASK_KINDS:
            raise ValueError(f"task must be one of {', '.join(TASK_KINDS)}, not {self.kind!r}")
        if self.kind == "multiclass" and len(self.classes) < 2:
            raise ValueError(f"a multiclass task needs at least 2 classes (got {list(self.classes)})")

    @property
    def is_classification(self) -> bool:
        return self.kind != "regression"

    @property
    def n_outputs(self) -> int:
        """Score columns per row: K for multiclass, 1 otherwise."""
        return len(self.classes) if self.kind == "multiclass" else 1

    @property
    def label_dtype(self) -> str:
        return "float64" if self.kind == "regression" else "int32"

    def decode(self, codes: Any) -> np.ndarray:
        """Original target values of multiclass codes (or of binary 0/1: ``positive`` for 1)."""
        import numpy as np

        codes = np.asarray(codes)
        if self.kind == "multiclass":
            return np.asarray(self.classes, dtype=object)[codes.astype("int64")]
        return codes

    def describe(self) -> str:
        """For logs and messages: ``multiclass (3 classes: 'NO', '<30', '>30')``."""
        if self.kind == "multiclass":
            shown = ", ".join(repr(c) for c in self.classes[:10]) + (", ..." if len(self.classes) > 10 else "")
            return f"multiclass ({len(self.classes)} classes: {shown})"
        if self.kind == "binary" and self.positive is not None:
            return f"binary (positive: {self.positive!r} vs the rest)"
        return self.kind

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind}
        if self.classes:
            out["classes"] = [_plain(c) for c in self.classes]
        if self.positive is not None:
            out["positive"] = _plain(self.positive)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Task:
        """The task a ``to_dict`` wrote; None (a model.json from before tasks) is binary."""
        if not data:
            return BINARY
        return cls(kind=data.get("kind", "binary"), classes=tuple(data.get("classes") or ()),
                   positive=data.get("positive"))


def _plain(value: Any) -> Any:
    """A NumPy scalar as the Python value JSON writes."""
    numpy = sys.modules.get("numpy")                  # no NumPy loaded: no NumPy scalar either
    return value.item() if numpy is not None and isinstance(value, numpy.generic) else value


BINARY = Task("binary")
REGRESSION = Task("regression")
