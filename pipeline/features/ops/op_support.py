"""What the built-in ops share: overflow-safe moments, category counts, host scalars, and
replacing columns in one concat. Plain functions on backend values, usable by plugin ops too."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np

from pipeline.backends import Backend, is_partitioned
from pipeline.core.errors import DataError

T = TypeVar("T")
R = TypeVar("R")

# A statistic that overflows float64 (values near 1e200 square to infinity) is taken again on
# the values times 2**-600: exact (a power of two moves only the exponent), and any float64
# times it squares and sums without overflow. Values below about 1e-143 become 0 there, which
# cannot matter next to a spread large enough to overflow.
SCALE = 2.0 ** -600


def moments(series: Any, names: tuple[str, ...], col: str) -> dict[str, Any]:
    """``mean`` and/or population ``std`` of ``series`` under ``<col>.<name>`` keys, plus the
    same of the scaled values (``<col>.<name>.scaled``): always when lazy (one pass takes
    both), in memory only when the plain one is not finite."""
    def stat(values: Any, name: str) -> Any:
        return values.mean() if name == "mean" else values.std(ddof=0)

    with np.errstate(over="ignore", invalid="ignore"):      # an overflow here is expected and handled
        wanted = {f"{col}.{name}": stat(series, name) for name in names}
        lazy = is_partitioned(series)
        for name in names:
            if lazy or not finite_number(wanted[f"{col}.{name}"]):
                wanted[f"{col}.{name}.scaled"] = stat(series * SCALE, name)
    return wanted


def finite_number(value: Any) -> bool:
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def stable(stats: dict[str, Any], key: str) -> float:
    """A statistic taken by ``moments``: the plain value, else the scaled one scaled back."""
    value = as_float(stats[key])
    if not math.isfinite(value) and f"{key}.scaled" in stats:
        value = as_float(stats[f"{key}.scaled"]) / SCALE
    return value


def as_float(value: Any) -> float:
    """A host statistic as a float; pandas' NA (the mean of a nullable column with no values) is NaN."""
    try:
        return float(plain(value))
    except (TypeError, ValueError):
        return math.nan


def require_numeric(op: str, col: str, series: Any, backend: Backend) -> Any:
    """``series``, or the DataError of every op that reads numbers given another column
    (``clip: column 'sex' is str, not numeric``)."""
    if not backend.is_numeric(series):
        raise DataError(f"{op}: column '{col}' is {series.dtype}, not numeric{not_numbers(series, backend)}")
    return series


def values_not_numbers(series: Any, backend: Backend) -> tuple[int, int, str | None]:
    """(values that do not read as numbers, values present, the first of the former) of a
    column on the host: what kept a column of numbers from reading as numbers ("12a", a header
    line repeated where two files were joined)."""
    import pandas as pd

    host = pd.Series(backend.to_host(series)).dropna()
    if host.empty or host.dtype == bool:
        return 0, 0, None
    text = host.astype(str)
    bad = text[pd.to_numeric(text.str.strip(), errors="coerce").isna()]
    return len(bad), len(text), (bad.iloc[0] if len(bad) else None)


def not_numbers(series: Any, backend: Backend) -> str:
    """The part of an error that says which values are not numbers, on the error's path only;
    empty for a column of words (every value), which its dtype says enough about."""
    bad, present, first = values_not_numbers(series, backend)
    if not bad and present:
        return (": every value is a number held as text (a Parquet file's text column, or a dtypes: str); set "
                "the column's dtype to float64 in the load's dtypes to read it as numbers")
    if not bad or bad == present:
        return ""
    return (f": {bad:,} of its {present:,} values are not numbers (the first: {first!r}); if they "
            "stand for missing, add them to the load's na_values, else fix them in the data")


def require_finite(op: str, col: str, what: str, value: float) -> float:
    """``value``, or a DataError naming the op and the column saying why it is not a number."""
    if math.isfinite(value):
        return value
    reason = ("the column has no values there" if math.isnan(value)
              else "its values include infinity, or are too large for float64 arithmetic")
    raise DataError(f"{op}: the {what} of column '{col}' in the training split is {value}, not a finite "
                    f"number; {reason}")


def count_pairs(counts: Any) -> list[tuple[Any, int]]:
    """(value, count) pairs of a host ``value_counts``, most frequent first, ties by value:
    deterministic on both devices and for any partitioning. A missing value is no category,
    whichever way the backend counted it (cuDF may count a NaN that is not a null)."""
    pairs = [(plain(v), int(c)) for v, c in counts.items() if not missing_value(plain(v))]
    pairs.sort(key=lambda vc: (-vc[1], str(vc[0])))
    return pairs


def median(series: Any) -> Any:
    # Dask has no exact distributed median; its approximate one is documented as such.
    return series.median_approximate() if hasattr(series, "median_approximate") else series.median()


def missing_value(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def plain(value: Any) -> Any:
    """NumPy scalars to Python scalars so the state serialises as JSON."""
    return value.item() if isinstance(value, np.generic) else value


def as_fillable(series: Any, fill: Any, backend: Backend) -> Any:
    """``series`` as float64 when ``fill`` is a float and the column is integer or boolean."""
    if isinstance(fill, float) and backend.is_integral(series):
        return series.astype("float64")
    return series


def replace_columns(frame: Any, backend: Backend, new: dict[str, Any], drop: list[str]) -> Any:
    """Drop ``drop`` and append ``new`` columns in one concat (no per-column fragmentation)."""
    kept = frame.drop(columns=drop) if drop else frame
    if not new:
        return kept
    added = backend.columns_frame(new, frame.index)
    return backend.frame.concat([kept, added], axis=1)


def replace_in_place(frame: Any, new: dict[str, Any]) -> Any:
    """``frame`` with the values of columns ``new`` names replaced, every column where it was:
    a shallow copy and one assignment per column. Dropping the columns, appending the new ones
    and restoring the order took three whole-frame operations, each about a millisecond on a
    few served rows; with copy-on-write nothing of ``frame`` is copied or changed."""
    out = frame.copy(deep=False)
    for name, values in new.items():
        out[name] = values
    return out


# Below this many rows a column's work takes microseconds and handing it to a pool thread
# (a queue, a wake-up, a result) costs more than it saves: a served request of a few rows
# scored serially took a third of the time it took on the threads.
THREADED_ROWS = 32_768


def per_column(backend: Backend, frame: Any, fn: Callable[[T], R], columns: Sequence[T]) -> list[R]:
    """``[fn(c) for c in columns]``: on the backend's threads (every core on the CPU) for a
    frame in memory of ``THREADED_ROWS`` or more, serially for a smaller one and for a
    partitioned one, whose statistics are lazy expressions computed later in one pass. Results
    in order, so states and frames are the same either way."""
    if is_partitioned(frame) or len(frame) < THREADED_ROWS:
        return [fn(c) for c in columns]
    return backend.map_columns(fn, list(columns))


def merged(parts: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per-column dicts (statistics, new columns) as one, in column order."""
    out: dict[str, Any] = {}
    for part in parts:
        out.update(part)
    return out


def code_array(series: Any, categories: list[Any], backend: Backend) -> Any:
    """int64 codes of ``series`` against ``categories`` as a 1-D array on the device: 1..n for
    the listed values, 0 for missing and any other value (``Backend.category_codes``)."""
    return backend.to_vector(backend.category_codes(series, categories), dtype="int64")


def lookup(series: Any, categories: list[Any], table: Any, backend: Backend) -> Any:
    """Per row of ``series``, the row of ``table`` (host, one row per code: row 0 for missing
    and unlisted values, then one per category) for its code: a 1-D or 2-D device array."""
    return backend.asarray(np.asarray(table, dtype="float64"))[code_array(series, categories, backend)]
