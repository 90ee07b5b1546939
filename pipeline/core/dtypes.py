"""The one answer to "what kind of values does this dtype hold?", for every caller.

Column selectors and ``init``'s roles (``pipeline.features.column_types``), the events checks of
join keys, the server's request fields and the MLflow signature all ask it of a dtype and map
the answer to their own words; none of them asks pandas on its own, so a dtype cannot be a
number to one and text to another (a timedelta was both).

The answer looks at the dtype only, never at values. It takes NumPy dtypes, pandas' extension
dtypes (nullable, ``string``, ``category``, ``ArrowDtype``), cuDF's (NumPy's, or named alike:
its categorical, list, struct and decimal dtypes) and dtype names as a run records them
(``"int64"``, ``"datetime64[ns, UTC]"``):

- ``bool``: NumPy ``bool``, pandas ``boolean``, Arrow ``bool``;
- ``integer``: signed or unsigned, nullable or not;
- ``float``: floats, and decimals (a number with a fraction, as a model reads it);
- ``date``: datetimes with or without a zone, Arrow timestamps and dates;
- ``duration``: timedeltas, NumPy's or Arrow's (a length of time, not a number: it has a unit);
- ``text``: ``object``, ``string`` (Python or Arrow), NumPy's fixed-width strings;
- ``category``: pandas' or cuDF's ``category``, Arrow dictionaries (whatever their categories hold);
- ``other``: everything else (complex, period, interval, time of day, lists, structs) and a name
  pandas does not know.
"""

from __future__ import annotations

import functools

from typing import Any, Literal, get_args

import pandas as pd

DtypeKind = Literal["bool", "integer", "float", "date", "duration", "text", "category", "other"]
DTYPE_KINDS: tuple[str, ...] = get_args(DtypeKind)
NUMERIC_KINDS = frozenset({"integer", "float"})
_NUMBER_OR_BOOL = NUMERIC_KINDS | {"bool"}

__all__ = ["DTYPE_KINDS", "DtypeKind", "NUMERIC_KINDS", "dtype_kind", "is_number", "is_number_or_bool"]

_API = pd.api.types


def dtype_kind(dtype: Any) -> DtypeKind:
    """The kind of values ``dtype`` holds (a dtype object or its name; see the module).

    >>> dtype_kind("Int64"), dtype_kind("datetime64[ns, UTC]"), dtype_kind("timedelta64[ns]")
    ('integer', 'date', 'duration')
    """
    try:
        return _cached_kind(dtype)            # asked per column of every served request: once per dtype
    except TypeError:                         # an unhashable dtype object
        return _kind(dtype)


@functools.lru_cache(maxsize=1024)
def _cached_kind(dtype: Any) -> DtypeKind:
    return _kind(dtype)


def _kind(dtype: Any) -> DtypeKind:
    if isinstance(dtype, str):
        try:
            dtype = _API.pandas_dtype(dtype)
        except TypeError:
            return _by_name(dtype)
    if isinstance(dtype, pd.CategoricalDtype) or str(dtype) == "category":
        return "category"
    pyarrow_type = getattr(dtype, "pyarrow_dtype", None)
    if pyarrow_type is not None and type(pyarrow_type).__name__ == "DictionaryType":
        return "category"
    try:
        if _API.is_bool_dtype(dtype):
            return "bool"
        if _API.is_datetime64_any_dtype(dtype):
            return "date"
        if _API.is_timedelta64_dtype(dtype) or getattr(dtype, "kind", None) == "m":
            return "duration"
        if _API.is_integer_dtype(dtype):
            return "integer"
        if _API.is_float_dtype(dtype):
            return "float"
        if _API.is_numeric_dtype(dtype):                 # decimals; complex is no feature value
            return "other" if getattr(dtype, "kind", None) == "c" else "float"
        if _API.is_string_dtype(dtype) or _API.is_object_dtype(dtype):
            return "text"
    except TypeError:                                    # a dtype pandas does not know (a GPU library's own)
        pass
    return _by_name(str(dtype))


def _by_name(name: str) -> DtypeKind:
    """The kind of a dtype pandas does not know, by its name: cuDF's decimal32/64/128 are
    numbers; its lists and structs, and any other, are not."""
    return "float" if name.startswith("decimal") else "other"


def is_number(dtype: Any) -> bool:
    """Integers and floats (decimals included); not bools, dates or durations."""
    return dtype_kind(dtype) in NUMERIC_KINDS


def is_number_or_bool(dtype: Any) -> bool:
    """What an aggregation or a model reads as a number: a number, or a bool as 0/1."""
    return dtype_kind(dtype) in _NUMBER_OR_BOOL
