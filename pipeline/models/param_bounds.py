"""The values a model parameter takes, where its library checks none before it fits.

XGBoost fits a constant model for ``n_estimators: 0`` (or ``-3``) or ``learning_rate: 0``, and
CatBoost an inverted one for ``learning_rate: -0.1``: exit 0, ROC AUC 0.5 or 0.08. LightGBM
and CatBoost refuse other values only as a C++ check naming a source file. An entry declares
each parameter's range here (``ModelSpec.bounds``) and validation refuses a value outside it
at its key, before anything runs. The ranges are pydantic's constraints (``Field(ge=1)``), so
a message reads as the config's other type errors do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import Field, TypeAdapter, ValidationError


@dataclass(frozen=True)
class Bound:
    """A parameter's range: ``kind`` (int or float) and pydantic's ``ge``/``gt``/``le``. Plain
    data, so an entry still pickles to a Dask worker and compares by value."""

    kind: type = float
    ge: float | None = None
    gt: float | None = None
    le: float | None = None

    def problem(self, value: Any) -> str | None:
        """Why ``value`` is outside the range (pydantic's words), or None; None (the library's
        default) and values of another type (the estimator's annotations report those) pass."""
        if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        try:
            TypeAdapter(Annotated[self.kind, Field(ge=self.ge, gt=self.gt, le=self.le)]).validate_python(value)
        except ValidationError as exc:
            return "; ".join(error["msg"].lower() for error in exc.errors())
        return None


# The shapes the boosters' parameters take.
COUNT = Bound(int, ge=1)                  # trees, rounds, parallel trees
SIZE = Bound(int, ge=0)                   # a depth or a leaf count where 0 means no limit
POSITIVE = Bound(float, gt=0)             # a learning rate, a class weight
NON_NEGATIVE = Bound(float, ge=0)         # a penalty, a minimum gain or weight
FRACTION = Bound(float, gt=0, le=1)       # a share of rows or columns sampled


def at_least(low: int) -> Bound:
    """An integer of at least ``low`` (``max_bin``: 2; ``num_leaves``: 2)."""
    return Bound(int, ge=low)


def between(low: int, high: int) -> Bound:
    """An integer from ``low`` to ``high`` (CatBoost's ``depth``: 1 to 16)."""
    return Bound(int, ge=low, le=high)
