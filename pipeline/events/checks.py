"""Data checks on event and entity tables, each a DataError naming the column and the fix.

They read dtypes only (known without computing on a Dask frame), except ``count_missing``,
which counts values and runs on data in memory (one partition at a time on Dask).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import pandas as pd

from pipeline.core.dtypes import dtype_kind, is_number_or_bool
from pipeline.core.errors import DataError


def check_has_columns(frame: Any, columns: Iterable[str], *, table: str, role: str) -> None:
    """Every column of ``columns`` is in ``frame`` (``role`` says what it is for in the message)."""
    have = list(frame.columns)
    missing = [c for c in columns if c not in have]
    if missing:
        shown = ", ".join(map(str, have[:20])) + (", ..." if len(have) > 20 else "")
        raise DataError(f"the {table} have no column {missing[0]!r} ({role}); their columns: {shown}")


def check_time_column(frame: Any, time: str, *, table: str = "events") -> None:
    """``time`` is a timezone-naive datetime column."""
    check_has_columns(frame, [time], table=table, role="time")
    dtype = frame[time].dtype if hasattr(frame, "dtypes") else None
    if isinstance(dtype, pd.DatetimeTZDtype):
        raise DataError(f"time column {time!r} has a time zone ({dtype}); cut-offs are timezone-naive: convert the "
                        "times to UTC and drop the zone (a load stage with dates: does this)")
    if dtype_kind(dtype) != "date":
        raise DataError(f"time column {time!r} is {dtype}, not a date-time: add `dates: {{{time}: FORMAT}}` to the "
                        f"load stage that reads the {table} (for example dates: {{{time}: \"%Y%m%d\"}}; "
                        "an empty format reads ISO 8601)")


def check_value_columns(frame: Any, uses: Sequence[tuple[str, str, str]], *, numeric: Iterable[str],
                        what: str = "feature") -> None:
    """Each ``(name, aggregate, column)`` reads a column the frame has; aggregates in ``numeric``
    need numbers."""
    numeric = set(numeric)
    have = set(frame.columns)
    for name, aggregate, column in uses:
        if column not in have:
            raise DataError(f"{what} {name!r} reads column {column!r} ({aggregate}), which the events do not have")
        dtype = frame[column].dtype
        if aggregate in numeric and not is_number_or_bool(dtype):
            raise DataError(f"{what} {name!r} takes the {aggregate} of column {column!r}, which holds {dtype}, not "
                            "numbers (give the load stage dtypes: for it, or use min/max/first/last/nunique)")


def check_key_kinds(left: Any, right: Any, keys: Sequence[str], *, left_name: str, right_name: str) -> None:
    """A key whose values are text on one side and numbers (or dates) on the other never
    matches: say so instead of labelling every row as if it had no events."""
    for key in keys:
        a, b = left[key].dtype, right[key].dtype
        if key_kind(a) != key_kind(b):
            raise DataError(f"key {key!r} is {a} in the {left_name} and {b} in the {right_name}; give both loads the "
                            f"same dtypes: for it (for example dtypes: {{{key}: str}})")


def key_kind(dtype: Any) -> str:
    """What a key holds, for telling keys that can match from keys that cannot: number, text,
    date, duration, bool (a category counts as what its categories hold)."""
    kind = dtype_kind(dtype)
    categories = getattr(dtype, "categories", None)
    if kind == "category" and categories is not None:
        return key_kind(categories.dtype)
    return _KEY_KIND.get(kind, str(dtype))


# What a key holds, by the kind of its dtype (``pipeline.core.dtypes``); any other is its dtype's name.
_KEY_KIND = {"bool": "bool", "date": "date", "duration": "duration", "integer": "number", "float": "number",
             "text": "text"}


def count_missing(series: Any) -> int:
    """Missing values in a column held in memory."""
    return int(series.isna().sum())


def check_no_missing_times(frame: Any, time: str, *, table: str = "events") -> None:
    missing = count_missing(frame[time])
    if missing:
        raise DataError(f"time column {time!r} has {missing} missing value(s) in the {table}: every event needs a "
                        "time (drop those rows with the load stage's filters, or fix the source)")
