"""Dates written in a config (a cut-off, a filter's value): one layout, read one way.

pandas reads "10/01/2024" month first and "13/01/2024" day first, so a config could hold both
readings of one layout; only ISO 8601 (a date, or a date and time, with an optional offset)
and YYYYMMDD are taken. Shared by the event stages' cut-offs and the load's date filters.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import pandas as pd

__all__ = ["ISO_DATE", "date_text", "parse_date_text"]

ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?)?(Z|[+-]\d{2}:?\d{2})?$|^\d{8}$")


def date_text(value: Any) -> str:
    """A date in a config as text (a date the YAML reader or a caller gave as a date, a number
    such as 19971231 as its digits), so a spec keeps what the user wrote."""
    if isinstance(value, pd.Timestamp):
        return value.isoformat()
    if isinstance(value, (dt.date, dt.datetime)):
        return value.isoformat()
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise ValueError(f"{value!r} is not a date: write it as text, such as \"1997-12-31\"")
    return str(value)


def parse_date_text(value: Any) -> pd.Timestamp:
    """``value`` as a Timestamp (with its offset, where it has one); a ValueError naming it when
    it is written in another layout or is no date."""
    text = date_text(value)
    if not ISO_DATE.match(text.strip()):
        raise ValueError(f"{text!r} is not a date written YYYY-MM-DD (or YYYY-MM-DD HH:MM:SS): other layouts "
                         "read day or month first depending on the values")
    try:
        stamp = pd.Timestamp(text)
    except (ValueError, TypeError, OverflowError):
        stamp = None
    if stamp is None or stamp is pd.NaT:
        raise ValueError(f"{text!r} is not a date (write it as YYYY-MM-DD)")
    return stamp
