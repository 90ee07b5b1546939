"""Dates as timezone-naive datetimes, from text, integers (19970101) or timestamps.

One implementation for pandas and cuDF through the frame API: both spell these string and
datetime calls alike. The one step that differs, text to datetimes with a strptime format and
which values do not parse, is ``Backend.strptime`` (cuDF has no ``errors="coerce"``).

Rules (the load's ``dates:`` and the date feature ops share them):

- a format is a strptime format; none (or "") means the layout of the first value, as pandas
  guesses it (ISO 8601 gives ``%Y-%m-%d``, ``%Y-%m-%d %H:%M:%S%z``...), and every value must
  have that layout;
- integers are read as their digits (19970101 with ``%Y%m%d``);
- a value with a UTC offset (``-05:00``, ``+0100``, ``Z``) is converted to UTC and the zone
  dropped, so a column whose offsets change with daylight saving time is one naive column; the
  offset is split off as text and subtracted here, because cuDF parses no offsets;
- a missing value stays missing (NaT); a value that does not parse is a DataError naming the
  source, the column, the value and where it is (the line of a CSV file, else the row).
"""

from __future__ import annotations

import csv
import datetime as dt
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pandas as pd

from pipeline.core.dtypes import dtype_kind
from pipeline.core.errors import DataError

# Text parsed into dates comes out in this unit (pandas 3's and cuDF's own for text); a
# column that already holds datetimes keeps its unit.
DATE_UNIT = "datetime64[us]"
# A trailing UTC offset: "+05:00", "-0400" or "Z" (no groups: pandas warns on groups in contains).
ZONE = r"[+-][0-9][0-9]:?[0-9][0-9]$|Z$"
ZONE_PARTS = r"([+-])([0-9][0-9]):?([0-9][0-9])$"


class DateBackend(Protocol):
    """What parsing dates asks of a backend: every ``pipeline.backends.Backend`` is one. Named
    here, not imported, because the backend contract's readers call this module."""

    def is_numeric(self, series: Any) -> bool: ...

    def strptime(self, text: Any, fmt: str) -> tuple[Any, Any]: ...

    def to_host(self, x: Any) -> Any: ...


def check_date_format(fmt: str | None) -> str | None:
    """A config's format, validated: None for "" (the first value's layout), else a strptime
    format that can read back a date it wrote; a zone name (``%Z``) is refused and an offset
    (``%z``) must end the format, where ``to_dates`` splits it off."""
    if fmt is None or not fmt.strip():
        return None
    if "%Z" in fmt:
        raise ValueError(f"date format {fmt!r}: zone names (%Z) are not read; write offsets with %z")
    if "%z" in fmt and not fmt.endswith("%z"):
        raise ValueError(f"date format {fmt!r}: %z (the UTC offset) must come last")
    if "%" not in fmt:
        raise ValueError(f"date format {fmt!r} has no % directive (e.g. %Y-%m-%d, %Y%m%d)")
    sample = dt.datetime(2026, 11, 23, 10, 30, 15, 250000, tzinfo=dt.timezone.utc)
    try:
        dt.datetime.strptime(sample.strftime(fmt), fmt)
    except ValueError as exc:
        raise ValueError(f"date format {fmt!r} is not a strptime format that reads back what it writes: {exc}") from None
    return fmt


def missing_date_columns(columns: Sequence[Any], dates: Mapping[str, Any]) -> list[str]:
    """The ``dates`` columns a frame with ``columns`` lacks."""
    present = {str(c) for c in columns}
    return [c for c in dates if c not in present]


def parse_dates(backend: DateBackend, frame: Any, dates: Mapping[str, str | None], *, source: str,
                csv_files: Sequence[Path] = (), layouts: dict[str, str | None] | None = None) -> Any:
    """``frame`` with each ``dates`` column as naive datetimes (one frame or one partition).
    ``layouts``, when given, gets each column's format as parsed: the one given, else the layout
    its first value had (None for a column of datetimes or of no value), so that a record of the
    read can say how later reads must parse (``predict`` on a batch whose first value is
    ``03/04/2024`` would otherwise guess again, and may guess the other way)."""
    missing = missing_date_columns(frame.columns, dates)
    if missing:
        raise DataError(f"{source}: dates names column(s) {missing} that the data does not have "
                        f"(columns: {', '.join(map(str, frame.columns))})")
    if not dates:
        return frame
    frame = frame.copy(deep=False)
    for column, fmt in dates.items():
        frame[column] = to_dates(backend, frame[column], fmt, column=column, source=source, csv_files=csv_files,
                                 layouts=layouts)
    return frame


def to_dates(backend: DateBackend, series: Any, fmt: str | None = None, *, column: str, source: str,
             csv_files: Sequence[Path] = (), layouts: dict[str, str | None] | None = None) -> Any:
    """``series`` as naive datetimes: datetimes as they are (an aware one converted to UTC),
    text and integers parsed with ``fmt`` (see the module's rules; ``layouts``: ``parse_dates``'s)."""
    dtype = series.dtype
    kind = dtype_kind(dtype)
    if layouts is not None:
        layouts[column] = fmt
    if kind == "date":
        return naive_utc(series)
    if kind == "bool":
        raise DataError(f"{source}: column '{column}' is {dtype}, not dates")
    if backend.is_numeric(series):
        text = integer_text(series)
    elif kind == "text":
        text = series if str(dtype) != "object" else series.astype("str")
    else:
        raise DataError(f"{source}: column '{column}' is {dtype}, not dates or text holding dates")
    return text_to_dates(backend, text, fmt, column=column, source=source, csv_files=csv_files, layouts=layouts)


def naive_utc(series: Any) -> Any:
    """A datetime column without a zone: an aware one converted to UTC first."""
    if isinstance(series.dtype, pd.DatetimeTZDtype):
        return series.dt.tz_convert(None)
    return series


def integer_text(series: Any) -> Any:
    """Whole numbers as their digits (19970101.0, a CSV integer column with a gap, included);
    a number with a fraction keeps its decimal text, which no date format reads."""
    present = series.notna()
    whole = series.fillna(0)
    digits = whole.astype("int64").astype("str")
    if dtype_kind(series.dtype) == "float":
        digits = digits.where(whole % 1 == 0, series.astype("str"))
    return digits.where(present)


def text_to_dates(backend: DateBackend, text: Any, fmt: str | None, *, column: str, source: str,
                  csv_files: Sequence[Path] = (), layouts: dict[str, str | None] | None = None) -> Any:
    """Text parsed with ``fmt`` (or the first value's layout); offsets converted to UTC."""
    first = first_value(backend, text)
    if first is None:                                   # no values: all missing, in the date unit
        return text.astype(DATE_UNIT)
    layout = fmt or _guessed_layout(first)
    if layout is None:
        raise DataError(f"{source}: column '{column}': cannot tell the date format from its first value {first!r}; "
                        f"give it, e.g. dates: {{{column}: '%d/%m/%Y'}}")
    if layouts is not None:
        layouts[column] = layout
    zoned = layout.endswith("%z")
    plain = text.str.replace(ZONE, "", regex=True) if zoned else text
    parsed, bad = backend.strptime(plain, layout.removesuffix("%z"))
    if zoned:                                           # an offset is part of this format
        bad = bad | (text.notna() & ~text.str.contains(ZONE, regex=True).fillna(False))
    if bool(backend.to_host(bad.any())):
        raise bad_date(backend, text, bad, layout=layout, inferred=not fmt, column=column, source=source,
                       csv_files=csv_files)
    swapped = _day_month_swapped(layout) if not fmt else None
    if swapped is not None and not bool(backend.to_host(backend.strptime(plain, swapped.removesuffix("%z"))[1].any())):
        # 01/06/1997, 02/06/1997, 05/07/1997: every value reads both ways, and the first value's
        # layout was pandas' guess; 13/06/1997 first would have read the same column the other way.
        raise DataError(f"{source}: column '{column}': its dates read day first and month first alike ({layout!r}, "
                        f"guessed from its first value {first!r}, and {swapped!r}): no value has a day past 12, so "
                        f"the layout cannot be told from the data; give it: dates: {{{column}: {layout!r}}} or "
                        f"{{{column}: {swapped!r}}}")
    if zoned:
        parsed = parsed - zone_offsets(text)
    return parsed.astype(DATE_UNIT)


def _day_month_swapped(layout: str) -> str | None:
    """``layout`` with its day and month swapped where both come before the year (``%d/%m/%Y``,
    ``%m-%d-%Y %H:%M``), the layouts read either way; None for any other (ISO's ``%Y-%m-%d``
    is year, month, day by convention)."""
    day, month, year = layout.find("%d"), layout.find("%m"), layout.find("%Y")
    if min(day, month) < 0 or (0 <= year < max(day, month)):
        return None
    return layout.replace("%d", "\0").replace("%m", "%d").replace("\0", "%m")


def _guessed_layout(first: str) -> str | None:
    """pandas' guess of ``first``'s layout. Its warning on a day-first guess ("Pass
    `dayfirst=True`...") is about an argument of its own parser that is not the user's to pass:
    the layout is recorded and named in any error, so the warning is left out of the output."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return pd.tseries.api.guess_datetime_format(first)


def first_value(backend: DateBackend, text: Any) -> str | None:
    """The first present value as host text, or None when the column has none."""
    head = backend.to_host(text.dropna().head(1))
    return str(head.iloc[0]) if len(head) else None


def zone_offsets(text: Any) -> Any:
    """Each value's UTC offset as a duration (0 for ``Z`` and for values without one)."""
    parts = text.str.extract(ZONE_PARTS)
    minutes = (parts[1].astype("float64") * 60 + parts[2].astype("float64")).fillna(0)
    minutes = minutes.where(parts[0].fillna("+") != "-", -minutes)
    return (minutes * 60).astype("int64").astype("timedelta64[s]")


def bad_date(backend: DateBackend, text: Any, bad: Any, *, layout: str, inferred: bool, column: str, source: str,
             csv_files: Sequence[Path]) -> DataError:
    """The error for the first value of ``text`` that ``bad`` marks, with where it is."""
    marks = backend.to_host(bad)
    position = int(np.flatnonzero(marks.fillna(False).to_numpy(dtype=bool))[0])
    value = str(backend.to_host(text.iloc[position:position + 1]).iloc[0])
    found = csv_line_of_value(csv_files, column, value) if csv_files else None
    if found is not None:
        file, line = found
        where = f"line {line}" + (f" of {file}" if len(csv_files) > 1 else "")
    else:
        where = f"row {position + 1}"
    how = (f"the format {layout!r}, inferred from its first value (give the column's format: "
           f"dates: {{{column}: '...'}})") if inferred else f"the format {layout!r}"
    return DataError(f"{source}: column '{column}' holds {value!r} at {where}, which is not a date in {how}")


def csv_line_of_value(files: Sequence[Path], column: str, value: str) -> tuple[Path, int] | None:
    """(file, line) of the first record whose ``column`` field is ``value``, or None.

    Only read when a value failed: the first record holding the same text is the first bad
    one, in a whole file or in any partition of it.
    """
    for path in files:
        try:
            with open(path, newline="", encoding="utf-8-sig") as fh:
                reader = csv.reader(fh)
                index = None
                line = reader.line_num + 1
                for record in reader:
                    if index is None:
                        if record:
                            if column not in record:
                                break
                            index = record.index(column)
                    elif index < len(record) and record[index] == value:
                        return path, line
                    line = reader.line_num + 1
        except (OSError, UnicodeDecodeError, csv.Error):
            continue
    return None


def partition_dates(partition: Any, backend: DateBackend, dates: Mapping[str, str | None], *, source: str,
                    csv_files: Sequence[Path] = ()) -> Any:
    """``parse_dates`` with the partition first, as ``map_partitions`` calls it."""
    return parse_dates(backend, partition, dates, source=source, csv_files=csv_files)
