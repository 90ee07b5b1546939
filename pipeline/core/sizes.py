"""Sizes and durations written as text (``5GiB``, ``500MB``; ``90s``, ``1h30m``): one reader
each for the config, the environment and the command line. Kept apart from the config schema
so that the cache and the CLI can read a size without importing pydantic models and every
stage kind."""

from __future__ import annotations

import math
import re

DEFAULT_CACHE_SIZE = "5GiB"        # the stage cache's default budget (README: Stage cache size)

SIZE_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9,
              "t": 10**12, "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
NO_LIMIT = ("none", "unlimited")


def parse_size(value: object) -> int | None:
    """Bytes from ``5GiB``, ``500MB``, ``1.5G`` or ``1048576``; None for ``none`` (no limit).

    Units as Dask reads them: K/M/G/T and KB/MB/GB/TB are powers of 1000, KiB/MiB/GiB/TiB of 1024.
    """
    if value is None or (isinstance(value, str) and value.strip().lower() in NO_LIMIT):
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str):
        match = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*([A-Za-z]*)\s*", value)
        if match and match.group(2).lower() in SIZE_UNITS:
            size = float(match.group(1)) * SIZE_UNITS[match.group(2).lower()]
            if math.isfinite(size):
                return int(size)
    raise ValueError(f"{value!r} is not a size: give bytes or a number with a unit (500MB, 5GiB), 0, or none")


_DURATION_PART = r"(\d+(?:\.\d*)?)\s*(hours?|h|minutes?|mins?|m|seconds?|secs?|s)\s*"
_DURATION = re.compile(rf"(?:{_DURATION_PART})+", re.IGNORECASE)
_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0}


def parse_duration(value: object) -> float:
    """Seconds from ``90``, ``"90s"``, ``"10m"``, ``"1h"`` or ``"1h30m"``."""
    text = value.strip() if isinstance(value, str) else None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    elif text and re.fullmatch(r"\d+(?:\.\d*)?", text):
        seconds = float(text)
    elif text and _DURATION.fullmatch(text):
        seconds = sum(float(number) * _UNIT_SECONDS[unit[0].lower()]
                      for number, unit in re.findall(_DURATION_PART, text, re.IGNORECASE))
    else:
        raise ValueError(f"{value!r} is not a duration: give seconds or a number with a unit (90s, 10m, 1h)")
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"a duration must be more than 0 seconds, not {value!r}")
    return seconds
