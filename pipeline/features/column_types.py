"""A column's type for selectors and ``init``: ``numeric``, ``categorical``, ``date`` or ``bool``.

It is the one dtype rule of the package (``pipeline.core.dtypes.dtype_kind``) in a config's
words. Column selectors (``columns: {type: numeric}``) and ``pipeline init``'s roles both read it, so
"numeric" means the same thing in a config and in a drafted one. The rule looks at the dtype
only, never at values: it costs nothing on a large or partitioned frame, works the same on
pandas and cuDF (their dtypes are NumPy's, or named alike), and a column's type cannot change
with the rows a split happens to hold.

- ``bool``: a boolean dtype (NumPy ``bool``, pandas ``boolean``, Arrow ``bool``). A whole-number column that
  holds only 0 and 1 stays ``numeric``: it is already a number a model reads, and telling it
  apart would need a scan of the values.
- ``date``: a datetime dtype (naive or with a zone). Text that holds dates is ``categorical``
  until the load parses it (``dates:`` on the load stage).
- ``numeric``: integers, floats and decimals (timedeltas are not: they are ``categorical``).
- ``categorical``: everything else: text (``object``, ``string``), ``category`` (whatever its
  categories hold), durations.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

from pipeline.backends import Backend
from pipeline.core.dtypes import dtype_kind

ColumnType = Literal["numeric", "categorical", "date", "bool"]
COLUMN_TYPES: tuple[str, ...] = get_args(ColumnType)

__all__ = ["COLUMN_TYPES", "ColumnType", "column_type", "column_types"]

# The column type of each kind of dtype (``pipeline.core.dtypes``); every other kind is categorical.
_COLUMN_TYPE: dict[str, ColumnType] = {"bool": "bool", "date": "date", "integer": "numeric", "float": "numeric"}


def column_type(series: Any, backend: Backend | None = None) -> ColumnType:
    """The type of ``series`` (pandas, cuDF or Dask) from its dtype alone; ``backend`` is
    accepted for symmetry with the ops and is not needed: the checks are dtype checks."""
    return _COLUMN_TYPE.get(dtype_kind(series.dtype), "categorical")


def column_types(frame: Any, backend: Backend | None = None) -> dict[str, ColumnType]:
    """Each column's type, in the frame's column order."""
    return {str(name): column_type(frame[name], backend) for name in frame.columns}
