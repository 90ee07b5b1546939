"""A linear model's per-level terms: what its categorical columns add to the decision function.

A linear model fitted on its own encoding of the matrix (``pipeline.models.encoded_linear``:
numbers standardised, a categorical column one-hot or target encoded) is still additive in
the columns: a number adds ``coef * x`` (the standardisation folds into the coefficient and
the intercept), and a categorical column adds one fixed vector per level, whatever the
encoding was. So the exported model stays numbers only: coefficients, an intercept, the
values that fill a missing number, and one ``LevelTable`` per categorical column. Scoring it
needs neither scikit-learn nor the encoder.

A level the table does not hold (unseen in training, or not an integer code) adds the
table's ``unknown`` row: zeros for a one-hot column, the encoding of the training target's
mean for a target-encoded one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["LevelTable", "column_codes", "fill_missing", "log_columns", "table_offsets", "tables_from_json",
           "tables_to_json"]

# The code a missing value (NaN) is read as: a level of its own, like any other.
MISSING_CODE = -1


def column_codes(values: np.ndarray) -> np.ndarray:
    """A column of category codes (floats in the matrix) as int64; NaN as ``MISSING_CODE``."""
    finite = np.isfinite(values)
    return np.where(finite, np.rint(np.where(finite, values, 0.0)), MISSING_CODE).astype(np.int64)


@dataclass(frozen=True)
class LevelTable:
    """Column ``column``'s term: ``values[i]`` (one number per output of the decision function)
    for code ``codes[i]`` (sorted), ``unknown`` for any other value."""

    column: int
    codes: np.ndarray        # (L,) int64, strictly increasing
    values: np.ndarray       # (L, r) float64
    unknown: np.ndarray      # (r,) float64

    def terms(self, host: np.ndarray) -> np.ndarray:
        """(n, r): each row's term for this column of the host matrix ``host``."""
        raw = host[:, self.column]
        codes = column_codes(raw)
        at = np.clip(np.searchsorted(self.codes, codes), 0, len(self.codes) - 1)
        known = self.codes[at] == codes
        known &= ~np.isfinite(raw) | (codes == raw)          # 2.5 is no code: unknown
        return np.where(known[:, None], self.values[at], self.unknown[None, :])


def table_offsets(host: np.ndarray, tables: Sequence[LevelTable]) -> np.ndarray | None:
    """(n, r): the sum of every table's terms for ``host``'s rows; None without tables."""
    if not tables:
        return None
    total = tables[0].terms(host)
    for table in tables[1:]:
        total = total + table.terms(host)
    return total


def log_columns(host: np.ndarray, logged: np.ndarray | None) -> np.ndarray:
    """``host`` with the ``logged`` columns taken as ``log1p`` (a value below 0, which training
    did not have, as 0; a missing one stays missing); ``host`` itself when none is."""
    if logged is None or not len(logged):
        return host
    out = np.array(host, dtype="float64", copy=True)
    out[:, logged] = np.log1p(np.maximum(out[:, logged], 0.0))
    return out


def fill_missing(host: np.ndarray, fill: np.ndarray | None) -> np.ndarray:
    """``host`` with each NaN replaced by its column's ``fill`` value (a number's training mean:
    it then adds nothing, as it did standardised); ``host`` itself when nothing is missing."""
    if fill is None:
        return host
    missing = np.isnan(host)
    return np.where(missing, fill[None, :], host) if missing.any() else host


def tables_to_json(tables: Sequence[LevelTable]) -> list[dict[str, Any]]:
    return [{"column": int(t.column), "codes": t.codes.tolist(), "values": t.values.tolist(),
             "unknown": t.unknown.tolist()} for t in tables]


def tables_from_json(body: Any, *, columns: int, outputs: int) -> tuple[LevelTable, ...]:
    """The tables of a coefficients file, checked against the model's ``columns`` and
    ``outputs`` (r); a ValueError naming what is wrong otherwise."""
    if not isinstance(body, list):
        raise ValueError("tables must be a list")
    tables = []
    seen: set[int] = set()
    for i, entry in enumerate(body):
        if not isinstance(entry, dict) or set(entry) != {"column", "codes", "values", "unknown"}:
            raise ValueError(f"tables[{i}] must have exactly column, codes, values and unknown")
        column = entry["column"]
        if isinstance(column, bool) or not isinstance(column, int) or not 0 <= column < columns or column in seen:
            raise ValueError(f"tables[{i}].column must be a distinct column position below {columns}, not {column!r}")
        seen.add(column)
        codes = np.asarray(entry["codes"])
        if codes.ndim != 1 or not codes.size or codes.dtype.kind not in "iu" or np.any(np.diff(codes) <= 0):
            raise ValueError(f"tables[{i}].codes must be a non-empty list of increasing integers")
        values = np.asarray(entry["values"], dtype="float64")
        unknown = np.asarray(entry["unknown"], dtype="float64")
        if values.shape != (codes.size, outputs) or unknown.shape != (outputs,):
            raise ValueError(f"tables[{i}] must hold {outputs} number(s) per code and {outputs} for unknown levels")
        if not (np.isfinite(values).all() and np.isfinite(unknown).all()):
            raise ValueError(f"tables[{i}] holds numbers that are not finite")
        tables.append(LevelTable(column, codes.astype(np.int64), values, unknown))
    return tuple(tables)
