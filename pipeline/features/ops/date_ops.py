"""Date feature ops: a date as numbers the models can read.

- ``date_parts``: calendar parts of each date column as ``<col>_<part>`` float32 columns
  (year, month, day, dayofweek with Monday 0, dayofyear, week: the ISO week, quarter, hour);
- ``date_diff``: the time from each date column to ``until`` as ``<col>_<unit>`` float64
  (days, weeks or hours, with fractions: until minus the date, so a past date is positive).

Both drop the date columns they read, learn nothing at fit (a date's parts do not depend on
the training split) and take datetime columns (a load's ``dates:``) or text holding dates,
parsed as the load parses a column without a format (``pipeline.backends.dates``): scoring
reads a flat CSV's dates as text and gets the same numbers. A missing date gives missing
numbers (NaN), for a ``fill_missing`` op after these. A timezone-aware column is refused:
its parts would depend on a zone the load would have converted to UTC.

``until`` is a date literal when it is written as an ISO date (``1997-12-31``, optionally
with a time: ``1997-12-31 18:00:00``), checked when the config loads; anything else names a
column of the data (checked at fit and at scoring, as other columns are).
"""

from __future__ import annotations

import re
from typing import Any, ClassVar, Literal

import pandas as pd
from pydantic import Field, field_validator

from pipeline.backends import Backend
from pipeline.backends.dates import to_dates
from pipeline.backends.headers import ColumnSet
from pipeline.core.dtypes import dtype_kind
from pipeline.core.errors import DataError
from pipeline.features.ops.op_base import FeatureOp, OpState
from pipeline.features.ops.op_registry import register_op
from pipeline.features.ops.op_support import replace_columns

DatePart = Literal["year", "month", "day", "dayofweek", "dayofyear", "week", "quarter", "hour"]
DEFAULT_PARTS: list[DatePart] = ["year", "month", "day", "dayofweek"]
UNIT_SECONDS = {"days": 86_400.0, "weeks": 604_800.0, "hours": 3_600.0}
# What makes ``until`` a date rather than a column name.
ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}(?:[ T]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?)?")


@register_op
class DateParts(FeatureOp):
    """Calendar parts of date columns as numbers (``pipeline.features.ops.date_ops``)."""

    op: ClassVar[str] = "date_parts"
    example: ClassVar[dict[str, Any]] = {"columns": ["when"], "parts": ["year", "month", "dayofweek", "week"]}

    parts: list[DatePart] = Field(
        default_factory=lambda: list(DEFAULT_PARTS), min_length=1,
        description="Parts to take: year, month, day, dayofweek (Monday 0), dayofyear, week (ISO), quarter, hour.")

    @field_validator("parts")
    @classmethod
    def _once_each(cls, parts: list[str]) -> list[str]:
        repeated = sorted({p for p in parts if parts.count(p) > 1})
        if repeated:
            raise ValueError(f"parts {repeated} are listed more than once")
        return parts

    def transform(self, frame: Any, backend: Backend, state: OpState) -> Any:
        self.check_columns(frame)
        new = {}
        for column in self.columns:
            series = op_dates(frame[column], backend, op=self.op, column=column)
            for which in self.parts:
                new[f"{column}_{which}"] = date_part(series, which)
        return replace_columns(frame, backend, new, list(self.columns))

    def output_columns(self, columns: list[str], state: OpState) -> list[str]:
        return [c for c in columns if c not in self.columns] + self.part_columns()

    def written_columns(self) -> set[str]:
        """The date columns (dropped) and their part columns."""
        return set(self.columns) | set(self.part_columns())

    def columns_after(self, columns: ColumnSet, why: str) -> ColumnSet:
        return columns.without(self.columns, why).plus(self.part_columns())

    def part_columns(self) -> list[str]:
        return [f"{column}_{which}" for column in self.columns for which in self.parts]


@register_op
class DateDiff(FeatureOp):
    """Time from date columns to a date or a date column (``pipeline.features.ops.date_ops``)."""

    op: ClassVar[str] = "date_diff"
    example: ClassVar[dict[str, Any]] = {"columns": ["when"], "until": "until", "unit": "weeks"}

    until: str = Field(
        min_length=1,
        description="End date: an ISO date (1997-12-31, or with a time) or the name of a date column.")
    unit: Literal["days", "weeks", "hours"] = Field("days", description="Unit of the difference (float64).")

    @field_validator("until")
    @classmethod
    def _date_or_column(cls, until: str) -> str:
        if ISO_DATE.fullmatch(until.strip()):
            try:
                pd.Timestamp(until.strip())
            except ValueError as exc:
                raise ValueError(f"until {until!r} is written as a date but is not one: {exc}") from None
            return until.strip()
        return until

    def until_date(self) -> pd.Timestamp | None:
        """``until`` as a date, or None when it names a column."""
        return pd.Timestamp(self.until) if ISO_DATE.fullmatch(self.until) else None

    def transform(self, frame: Any, backend: Backend, state: OpState) -> Any:
        self.check_columns(frame)
        end = self._end(frame, backend)
        new = {}
        for column in self.columns:
            series = op_dates(frame[column], backend, op=self.op, column=column)
            new[f"{column}_{self.unit}"] = time_to(end, series, self.unit)
        return replace_columns(frame, backend, new, list(self.columns))

    def _end(self, frame: Any, backend: Backend) -> Any:
        """The literal date, or the ``until`` column as dates."""
        literal = self.until_date()
        if literal is not None:
            return literal
        if self.until not in frame.columns:
            raise DataError(f"feature op '{self.op}': until {self.until!r} is neither a column of the data nor an "
                            "ISO date (write a date as YYYY-MM-DD)")
        return op_dates(frame[self.until], backend, op=self.op, column=self.until)

    def output_columns(self, columns: list[str], state: OpState) -> list[str]:
        return [c for c in columns if c not in self.columns] + self.diff_columns()

    def written_columns(self) -> set[str]:
        """The date columns (dropped) and their difference columns."""
        return set(self.columns) | set(self.diff_columns())

    def read_columns(self) -> set[str]:
        """The date columns and the ``until`` column when it names one (scoring needs it)."""
        return set(self.columns) | ({self.until} if self.until_date() is None else set())

    def columns_after(self, columns: ColumnSet, why: str) -> ColumnSet:
        return columns.without(self.columns, why).plus(self.diff_columns())

    def named_columns(self) -> list[tuple[tuple[str | int, ...], str]]:
        """The date columns, and ``until`` when it names a column rather than a date."""
        until = [(("until",), self.until)] if self.until_date() is None else []
        return [*super().named_columns(), *until]

    def diff_columns(self) -> list[str]:
        return [f"{column}_{self.unit}" for column in self.columns]


def op_dates(series: Any, backend: Backend, *, op: str, column: str) -> Any:
    """A date column for an op: naive datetimes as they are, text parsed (its first value's
    layout, offsets to UTC); numbers and timezone-aware columns are refused, naming the fix."""
    dtype = series.dtype
    if isinstance(dtype, pd.DatetimeTZDtype):
        raise DataError(f"feature op '{op}': column '{column}' is timezone-aware ({dtype}); parse it in the load "
                        f"(dates: {{{column}: null}}), which converts it to UTC and drops the zone")
    if dtype_kind(dtype) == "date":
        return series
    if dtype_kind(dtype) != "text":
        raise DataError(f"feature op '{op}': column '{column}' is {dtype}, not a date; read it as one in the load, "
                        f"e.g. dates: {{{column}: '%Y%m%d'}} for 19970101")
    return to_dates(backend, series, None, column=column, source=f"feature op '{op}'")


def date_part(series: Any, which: str) -> Any:
    """One calendar part of a datetime column as float32 (NaN where the date is missing).
    Spelled out, not looked up by name, so the GPU-API check sees each accessor."""
    if which == "year":
        values = series.dt.year
    elif which == "month":
        values = series.dt.month
    elif which == "day":
        values = series.dt.day
    elif which == "dayofweek":
        values = series.dt.dayofweek
    elif which == "dayofyear":
        values = series.dt.dayofyear
    elif which == "week":
        values = series.dt.isocalendar()["week"]
    elif which == "quarter":
        values = series.dt.quarter
    elif which == "hour":
        values = series.dt.hour
    else:
        raise ValueError(f"unknown date part {which!r}")
    return values.astype("float32")


def time_to(end: Any, series: Any, unit: str) -> Any:
    """``end`` (a date or a date column) minus ``series`` in ``unit``, float64 with fractions."""
    return (end - series).dt.total_seconds() / UNIT_SECONDS[unit]
