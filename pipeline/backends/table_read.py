"""What a read of a table asks for besides its path, as one object: the format, the columns and
their types, the missing-value markers, the filters, the dates and the CSV dialect.

The load stage, ``predict``'s input, the serve batch endpoint and the partitioned readers all
describe a read this way, so ``Backend.read`` and ``Backend.read_partitioned`` take one
``TableRead`` (or its fields by name) instead of nine arguments each.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

from pipeline.backends.csv_dialect import DEFAULT_DIALECT, CsvDialect
from pipeline.backends.filters import Filter
from pipeline.core.option_objects import Options


@dataclass(frozen=True)
class TableRead(Options):
    """How to read a table: ``format`` (csv or parquet; None: from the suffix), ``columns`` (None:
    all), ``dtypes`` (column -> dtype), ``na_values`` (extra missing-value markers), ``filters``
    (``(column, op, value)`` rows to keep), ``dates`` (column -> strptime format, None: the
    first value's layout) and ``dialect`` (how a CSV file is written).

    Examples:
        >>> from pipeline.backends.table_read import TableRead
        >>> TableRead(columns=["a", "b"]).replace(format="csv").format
        'csv'
    """

    format: str | None = None
    columns: Sequence[str] | None = None
    dtypes: Mapping[str, str] | None = None
    na_values: Sequence[str] | None = None
    filters: Sequence[Filter] | None = None
    dates: Mapping[str, str | None] | None = None
    dialect: CsvDialect = DEFAULT_DIALECT

    what: ClassVar[str] = "read option"


__all__ = ["TableRead"]
