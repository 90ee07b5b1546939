"""Durations (``30d``, ``4w``, ``12h``, ``all``) and cut-off dates as configs write them.

Configs keep dates and durations as text; these functions turn them into pandas values and
raise ``ValueError`` with a message naming the value, which the config loader reports with
the key and its line. Months and years are refused: they have no fixed length, and a window
that silently means 28 days in one snapshot and 31 in the next would make rolling cut-offs
disagree with each other.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import pandas as pd

from pipeline.core.date_text import date_text, parse_date_text

ALL = "all"
DAY = pd.Timedelta(days=1)

_DURATION = re.compile(r"^(\d+)\s*([a-z]+)$")
_UNITS = {"d": "days", "w": "weeks", "h": "hours"}
_NOT_FIXED = ("m", "mo", "mon", "month", "months", "y", "yr", "year", "years")


def normalize_duration(text: Any, *, allow_all: bool = True) -> str:
    """``text`` as the canonical spelling used in output column names (``30D`` -> ``30d``);
    ValueError naming the value when it is not a duration."""
    parse_duration(text, allow_all=allow_all)
    return re.sub(r"\s+", "", str(text).strip().lower())


def parse_duration(text: Any, *, allow_all: bool = True) -> pd.Timedelta | None:
    """``"<n>d"`` days, ``"<n>w"`` weeks, ``"<n>h"`` hours as a Timedelta; ``all`` as None (no
    lower bound) where ``allow_all``."""
    if not isinstance(text, str):
        raise ValueError(f"{text!r} is not a duration: write it as text such as 30d, 4w or 12h")
    value = text.strip().lower()
    if value == ALL:
        if not allow_all:
            raise ValueError("'all' is not a length here: write a duration such as 180d")
        return None
    found = _DURATION.match(value)
    if found is None:
        raise ValueError(f"{text!r} is not a duration: write <n>d (days), <n>w (weeks) or <n>h (hours)"
                         + (", or all" if allow_all else ""))
    count, unit = int(found.group(1)), found.group(2)
    if unit in _NOT_FIXED:
        raise ValueError(f"{text!r}: months and years are not a fixed length; write 30d / 365d")
    if unit not in _UNITS:
        raise ValueError(f"{text!r}: unknown unit '{unit}' (use d, w or h)")
    if count == 0:
        raise ValueError(f"{text!r} is empty: a duration must be longer than zero")
    return pd.Timedelta(**{_UNITS[unit]: count})


def check_windows(windows: Iterable[Any]) -> list[str]:
    """Windows in canonical spelling; ValueError on a bad one or one listed twice (``7d`` and
    ``1w`` are the same window)."""
    seen: dict[pd.Timedelta | None, str] = {}
    out = []
    for window in windows:
        name = normalize_duration(window)
        length = parse_duration(name)
        if length in seen:
            same = f"'{seen[length]}' and '{name}' are the same window" if seen[length] != name else \
                f"'{name}' is listed twice"
            raise ValueError(f"windows: {same}")
        seen[length] = name
        out.append(name)
    if not out:
        raise ValueError("windows is empty: list at least one, such as [all]")
    return out


def parse_cutoff(value: Any) -> pd.Timestamp:
    """One cut-off as a timezone-naive Timestamp; ValueError naming the value otherwise."""
    stamp = parse_date_text(value)
    if stamp.tzinfo is not None:
        raise ValueError(f"{date_text(value)!r} has a time zone; write cut-offs without one, as the event times are "
                         "(a load converts times with an offset to UTC)")
    return stamp


def parse_cutoffs(value: Any) -> list[pd.Timestamp]:
    """One date or a list of dates, in the order given; a date listed twice is refused."""
    values = value if isinstance(value, (list, tuple)) else [value]
    if not values:
        raise ValueError("as_of is empty: give one date or a list of dates")
    stamps = [parse_cutoff(v) for v in values]
    seen: set[pd.Timestamp] = set()
    for text, stamp in zip(values, stamps):
        if stamp in seen:
            raise ValueError(f"as_of lists {date_text(text)!r} twice")
        seen.add(stamp)
    return stamps
