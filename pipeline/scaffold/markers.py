"""Missing-value markers in a sample: punctuation-only values in text columns, sentinels of
nines outside a numeric column's range."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from pipeline.core.dtypes import is_number
from pipeline.features.column_roles import is_text

# ---------------------------------------------------------------- reading the sample
# A text value made of punctuation alone ("?", "-", "--", "."), at least this share of a column's
# values: a missing-value marker, not a level.
MARKER_SHARE = 0.01
MARKER_TEXT = re.compile(r"^[^\w\s]{1,3}$")
# Numbers that exports write for "unknown": nines, negative or not, outside the column's other values.
SENTINELS = (-99999.0, -9999.0, -999.0, -99.0, 999.0, 9999.0, 99999.0, 999999.0)


def missing_markers(frame: pd.DataFrame) -> dict[str, dict[str, float]]:
    """Values that mean "missing", each with the share of rows it holds per column:

    - blank or whitespace-only text anywhere;
    - in a text column, a value of punctuation alone (``?``, ``-``, ``--``) holding at least 1%
      of it, and the few non-numbers of a column that is otherwise at least 90% numbers
      (``n/a``);
    - in a numeric column, a sentinel of nines (-999, 9999...) holding at least 1% of it, and
      outside the range of its other values (so a real 999 among values up to 5,000 stays)."""
    found: dict[str, dict[str, float]] = {}

    def add(token: str, column: Any, rows: int) -> None:
        found.setdefault(token, {})[str(column)] = rows / max(len(frame), 1)

    for column in frame.columns:
        series = frame[column]
        if is_number(series.dtype):
            _numeric_sentinels(series, lambda token, rows, c=column: add(token, c, rows))
            continue
        if not is_text(series):
            continue
        counts = series.dropna().astype(str).value_counts()      # each distinct value once
        if counts.empty:
            continue
        blank = counts.index.str.strip() == ""
        for token in counts.index[blank]:
            add(token, column, int(counts[token]))
        rest = counts[~blank]
        numbers = pd.to_numeric(pd.Series(rest.index), errors="coerce").to_numpy()
        bad = rest.index[np.isnan(numbers)].tolist()
        share = float(rest[~np.isnan(numbers)].sum() / max(rest.sum(), 1))
        if share >= 0.9 and 0 < len(bad) <= 3 and all(len(b) <= 10 for b in bad):
            for token in bad:
                add(token, column, int(rest[token]))
        total = int(counts.sum())
        for token in rest.index:
            if MARKER_TEXT.match(token.strip()) and rest[token] >= MARKER_SHARE * total:   # " ?" after ", "
                add(token, column, int(rest[token]))
    return found


def _numeric_sentinels(series: pd.Series, add: Callable[[str, int], None]) -> None:
    values = series.dropna().to_numpy(dtype="float64")
    if not values.size:
        return
    for sentinel in SENTINELS:
        hits = int(np.count_nonzero(values == sentinel))
        if not hits or hits < MARKER_SHARE * values.size:
            continue
        others = values[values != sentinel]
        outside = not others.size or (sentinel < others.min() if sentinel < 0 else sentinel > 10 * max(others.max(), 1))
        if outside:
            add(f"{sentinel:g}", hits)


def missing_tokens(frame: pd.DataFrame) -> list[str]:
    """The strings ``missing_markers`` finds, as the load's ``na_values``."""
    return sorted(missing_markers(frame))


