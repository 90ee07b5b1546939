"""Row filters of a read, ``[column, op, value]`` in pyarrow's conjunctive form, and what a
``dates:`` column changes in a read: it is read as text (``text_dates``) and filtered after it
is parsed (``late_filters``) rather than by the Parquet reader (``pushed_filters``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from pipeline.backends.input_files import one_line
from pipeline.core.date_text import parse_date_text
from pipeline.core.dtypes import dtype_kind
from pipeline.core.errors import DataError

# Row filters, in the pyarrow form [column, op, value]; see ``apply_filters``.
Filter = tuple[str, str, Any]
FILTER_OPS = ("==", "!=", "<", "<=", ">", ">=", "in", "not in")


def text_dates(dtypes: Mapping[str, str] | None, dates: Mapping[str, Any] | None,
               header: Sequence[str] | None) -> dict[str, str] | None:
    """CSV dtypes with each ``dates`` column of ``header`` read as text unless ``dtypes`` names
    it: 19970101 keeps its digits (a gap would make it 19970101.0), and Dask does not guess a
    type from its first rows that a bad value further on contradicts. A column the header lacks
    is left to the check that names it."""
    types = {**{c: "str" for c in dates or {} if header is None or c in header}, **(dtypes or {})}
    return types or None


def pushed_filters(filters: Sequence[Filter] | None, dates: Mapping[str, Any] | None) -> list[Filter]:
    """The filters a Parquet reader can apply itself: those on columns not parsed as dates
    (a filter on a date column compares dates, which exist only after the parse)."""
    return [f for f in filters or () if f[0] not in (dates or {})]


def late_filters(filters: Sequence[Filter] | None, dates: Mapping[str, Any] | None) -> list[Filter]:
    """The filters on ``dates`` columns: applied after the parse."""
    return [f for f in filters or () if f[0] in (dates or {})]


def apply_filters(frame: Any, filters: Sequence[Filter], *, source: str = "") -> Any:
    """Keep rows matching every ``[column, op, value]`` filter (pyarrow's conjunctive form)."""
    mask = None
    for column, op, value in filters:
        if column not in frame.columns:
            raise DataError(f"{source}: filter on unknown column '{column}'")
        try:
            cond = _filter_condition(frame[column], op, value)
        except (TypeError, ValueError) as exc:       # a text column compared with a number...
            raise DataError(f"{source}: filter [{column!r}, {op!r}, {value!r}] cannot compare column '{column}' "
                            f"({frame[column].dtype}) with {value!r}: {one_line(exc)}") from exc
        mask = cond if mask is None else (mask & cond)
    return frame[mask.fillna(False)].reset_index(drop=True) if mask is not None else frame


def _filter_condition(col: Any, op: str, value: Any) -> Any:
    """The row mask of one ``[column, op, value]`` filter; on a date column the value is a
    date (``"1997-06-01"``, or 19970601 as its digits)."""
    if dtype_kind(col.dtype) == "date":
        value = [_as_date(v) for v in value] if op in ("in", "not in") else _as_date(value)
    if op == "in":
        return col.isin(list(value))
    if op == "not in":
        return ~col.isin(list(value))
    compare = _COMPARISONS.get(op)
    if compare is None:
        raise ValueError(f"unknown filter operator '{op}' (use one of {', '.join(FILTER_OPS)})")
    return compare(col, value)


def _as_date(value: Any) -> pd.Timestamp:
    """A filter value compared with a date column, as a date: ISO 8601 or YYYYMMDD only
    (``"01/07/2017"`` kept January 7th's rows and ``"13/07/2017"`` July 13th's); an integer is
    read as its digits (pandas would read 19970601 as nanoseconds since 1970); one with an
    offset is taken to UTC, as the load takes times with an offset."""
    stamp = parse_date_text(int(value) if isinstance(value, np.integer) else value)
    return stamp.tz_convert("UTC").tz_localize(None) if stamp.tzinfo is not None else stamp


def date_filter_problems(filters: Sequence[Filter] | None, dates: Mapping[str, Any] | None) -> list[str]:
    """Why each filter value on a ``dates`` column is no date as a filter reads one (for the
    config check: the value is the config's, not the data's)."""
    problems = []
    for column, op, value in late_filters(filters, dates):
        for one in (value if op in ("in", "not in") and isinstance(value, (list, tuple)) else [value]):
            try:
                _as_date(one)
            except ValueError as exc:
                problems.append(f"filter on '{column}': {exc}")
    return problems


_COMPARISONS: dict[str, Callable[[Any, Any], Any]] = {
    "==": lambda col, v: col == v, "!=": lambda col, v: col != v, "<": lambda col, v: col < v,
    "<=": lambda col, v: col <= v, ">": lambda col, v: col > v, ">=": lambda col, v: col >= v,
}
