"""Missing-value markers in a sample: punctuation-only values in text columns, sentinels of
nines outside a numeric column's range; and which of them the load's ``na_values`` can take,
given that it reads them as missing in every column."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from pipeline.backends.contract import text_na_values
from pipeline.core.dtypes import is_number
from pipeline.features.column_roles import is_nested, is_text

# ---------------------------------------------------------------- reading the sample
# A text value made of punctuation alone ("?", "-", "--", "."), at least this share of a column's
# values: a missing-value marker, not a level.
MARKER_SHARE = 0.01
MARKER_TEXT = re.compile(r"^[^\w\s]{1,3}$")
# Numbers that exports write for "unknown": nines, negative or not, outside the column's other values.
SENTINELS = (-99999.0, -9999.0, -999.0, -99.0, 999.0, 9999.0, 99999.0, 999999.0)
# Words that spell "missing" (pandas already reads NA, N/A, n/a, NULL, null, NaN, nan, None as
# missing): with blanks and punctuation alone, the only markers taken from the target column.
MISSING_WORDS = frozenset({"na", "n/a", "n.a.", "n.a", "#n/a", "nan", "null", "none", "nil", "missing", "unknown",
                           "not available", "not applicable", "undefined", "empty"})


# A number with a bound or a range (``5+``, ``<1``, ``>= 65``, ``10-20``, ``65 and over``): the open
# level of an ordered category (household size 1, 2, ..., 5+), never a placeholder.
NUMBER_BOUND = re.compile(r"^(?:[<>]=?\s*\d+(?:[.,]\d+)?|\d+(?:[.,]\d+)?\s*(?:\+|or more|and (?:over|above|up|older))"
                          r"|\d+(?:[.,]\d+)?\s*-\s*\d+(?:[.,]\d+)?)$", re.IGNORECASE)


def is_missing_spelling(token: str) -> bool:
    """Whether ``token`` can only mean "missing": blank, punctuation alone, or a word of ``MISSING_WORDS``."""
    text = token.strip()
    return not text or bool(MARKER_TEXT.match(text)) or text.lower() in MISSING_WORDS


def missing_markers(frame: pd.DataFrame, target: str | None = None) -> dict[str, dict[str, float]]:
    """Values that mean "missing", each with the share of rows it holds per column:

    - blank or whitespace-only text anywhere;
    - in a text column, a value of punctuation alone (``?``, ``-``, ``--``) holding at least 1%
      of it, and the few non-numbers of a column that is otherwise at least 90% numbers
      (``n/a``), unless one of them is a bound or a range (``5+``, ``<1``, ``10-20``): those
      are the ordered levels of a category;
    - in a numeric column, a sentinel of nines (-999, 9999...) holding at least 1% of it, and
      outside the range of its other values (so a real 999 among values up to 5,000 stays).

    The ``target`` column's values are classes unless they spell "missing": of its few
    non-numbers only blanks, punctuation and the words of ``MISSING_WORDS`` (``0, 1, 2, 3+``:
    ``3+`` is the fourth class); its sentinels of nines as in any number column."""
    found: dict[str, dict[str, float]] = {}

    def add(token: str, column: Any, rows: int, *, sentinel: bool = False) -> None:
        if str(column) == target and not sentinel and not is_missing_spelling(token):
            return
        found.setdefault(token, {})[str(column)] = rows / max(len(frame), 1)

    for column in frame.columns:
        series = frame[column]
        if is_number(series.dtype):
            _numeric_sentinels(series, lambda token, rows, c=column: add(token, c, rows, sentinel=True))
            continue
        if not is_text(series) or is_nested(series):
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
        if share >= 0.9 and 0 < len(bad) <= 3 and all(len(b) <= 10 for b in bad) \
                and not any(NUMBER_BOUND.match(b.strip()) for b in bad):     # 1, 2, ..., 5+: levels
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


# ---------------------------------------------------------------- what the load can take
@dataclass
class Placeholders:
    """The markers the load's ``na_values`` takes (``tokens``), the rows each reads as missing
    per column (``read``: every column holding it, not only the one it was found in), and
    ``notes`` on the markers left out (``kept``: per column, those it was found in, and keeps as values)."""

    rows: int = 0
    tokens: list[str] = field(default_factory=list)
    read: dict[str, dict[str, int]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    kept: dict[str, dict[str, list[str]]] = field(default_factory=dict)

    def reason(self, column: str) -> str:
        """``read as missing: '?' (5% of rows), ' ' (<1% of rows: 2)`` for ``column``, and the
        markers it keeps as values (``'NA1' kept as a value: it is one of plan's``), or ""."""
        held = self.read.get(column, {})
        said = ["read as missing: " + ", ".join(f"{token!r} ({share_of_rows(n, self.rows)})"
                                                for token, n in held.items())] if held else []
        said += [f"{token!r} kept as a value: it is one of {' and '.join(others)}'s"
                 for token, others in self.kept.get(column, {}).items()]
        return "; ".join(said)


def share_of_rows(rows: int, total: int) -> str:
    """``5% of rows``; a share that would print as 0%, ``<1% of rows: 11`` (rows that are there are never 0%)."""
    shown = f"{rows / max(total, 1):.0%}"
    return f"<1% of rows: {rows:,}" if rows and shown == "0%" else f"{shown} of rows"


def placeholders(frame: pd.DataFrame, target: str | None = None) -> Placeholders:
    """The markers of ``missing_markers`` that the load's ``na_values`` can take. It has one list
    for every column, so a marker that is also a real value of another column (``NA1`` marking
    gaps in a number column and naming a plan in another; ``3+`` in the target) is left out, with
    a note; a spelling of "missing" (blank, punctuation, ``n/a``, ``unknown``) is read as missing
    wherever it is, and ``read`` names each column it is read in."""
    found = missing_markers(frame, target)
    out = Placeholders(rows=len(frame))
    for token, shares in sorted(found.items()):
        held = occurrences(frame, token)
        others = {c: n for c, n in held.items() if c not in shares}
        if others and not is_missing_spelling(token):
            where = ", ".join(f"{c} ({share_of_rows(round(shares[c] * len(frame)), len(frame))})" for c in shares)
            values = ", ".join(f"{'the target ' if c == target else ''}{c} ({share_of_rows(n, len(frame))})"
                               for c, n in others.items())
            kept = "keeps" if len(shares) == 1 else "keep"
            out.notes.append(f"{token!r} looks like a missing-value placeholder in {where} but is a value of "
                             f"{values}: it is not in the load's na_values, which apply to every column, so "
                             f"{', '.join(shares)} {kept} it as a value (read as text)")
            for column in shares:
                out.kept.setdefault(column, {})[token] = list(others)
            continue
        out.tokens.append(token)
        for column, n in held.items():
            out.read.setdefault(column, {})[token] = n
    return out


def occurrences(frame: pd.DataFrame, token: str) -> dict[str, int]:
    """Rows per column that the load's ``na_values: [token]`` reads as missing: the text equal to
    it, and in number columns the number it spells."""
    try:
        number: float | None = float(token)
    except ValueError:
        number = None
    held: dict[str, int] = {}
    for column in frame.columns:
        series = frame[column]
        if is_number(series.dtype):
            rows = int((series == number).sum()) if number is not None else 0
        elif is_text(series) and not is_nested(series):
            rows = int((series.dropna().astype(str) == token).sum())
        else:
            rows = 0
        if rows:
            held[str(column)] = rows
    return held


def numbers_behind_placeholders(frame: pd.DataFrame, tokens: list[str],
                                columns: set[str]) -> tuple[pd.DataFrame, dict[str, str]]:
    """``frame`` with ``tokens`` blanked in its text columns, as the load's ``na_values`` blank
    them in a Parquet file's text, and those of ``columns`` that hold only numbers then as
    float64; with the ``dtypes`` the load needs to read them so (a Parquet table written from
    pandas keeps a number column with a ``' '`` placeholder as text, which init took for an id)."""
    out = frame.copy()
    text_na_values(out, tokens)                 # as the load blanks them
    dtypes: dict[str, str] = {}
    for column in out.columns:
        values = out[column]
        if not is_number(values.dtype) and str(column) in columns and values.notna().any():
            numbers = pd.to_numeric(values, errors="coerce")
            if numbers.notna().sum() == values.notna().sum():
                out[column] = numbers.astype("float64")
                dtypes[str(column)] = "float64"
    return out, dtypes
