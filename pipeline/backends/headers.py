"""What a table's columns are before its rows are read: the header line of a CSV, the schema of
a Parquet file or dataset folder, and ``ColumnSet``, the columns a config knows a table has at
one point of the stage graph.

``pipeline validate`` (and ``pipeline run``, before the first stage) checks every column a
stage names against these (``pipeline.config.data_checks``); nothing here reads a data row,
so a check costs the same on a 100 GB file as on a small one.
"""

from __future__ import annotations

import difflib
import os
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from pipeline.backends.compressed import refuse_partitioned
from pipeline.backends.csv_dialect import DEFAULT_DIALECT, CsvDialect
from pipeline.backends.streams import STDIN
from pipeline.backends.input_files import (
    check_header_names, check_separator, infer_format, one_line, partitioned_sources, read_errors, read_header,
)
from pipeline.core.errors import DataError, input_not_found

__all__ = ["ColumnSet", "HeaderReader", "closest_column"]


@dataclass(frozen=True)
class ColumnSet:
    """The columns a table is known to have at one point of the stage graph.

    ``names`` exist for sure; a column whose name starts with one of ``patterns`` may exist
    (``one_hot`` makes ``<column>=<value>`` columns whose values are known only after fitting);
    with ``open`` any other column may exist too (a ``python`` stage's output), so nothing is
    reported missing. ``gone`` says why a column that was there is not any more (``removed by
    ops[2] (one_hot)``), for the message. ``source`` names where the names come from (a file,
    a stage) in messages.
    """

    names: tuple[str, ...]
    source: str
    patterns: tuple[str, ...] = ()
    open: bool = False
    gone: Mapping[str, str] = field(default_factory=dict)

    def may_have(self, name: str) -> bool:
        """Whether ``name`` can be a column here (when unsure: yes)."""
        return self.open or name in self.names or any(name.startswith(p) for p in self.patterns)

    def without(self, names: Iterable[str], why: str) -> ColumnSet:
        """These columns removed, each remembered with ``why``."""
        removed = [n for n in names if n in self.names]
        if not removed:
            return self
        return replace(self, names=tuple(n for n in self.names if n not in removed),
                       gone={**self.gone, **{n: why for n in removed}})

    def plus(self, names: Iterable[str] = (), *, patterns: Iterable[str] = ()) -> ColumnSet:
        """These columns (and columns starting with ``patterns``) added after the others."""
        added = [n for n in names if n not in self.names]
        gone = {k: v for k, v in self.gone.items() if k not in added}
        return replace(self, names=(*self.names, *added), patterns=(*self.patterns, *patterns), gone=gone)

    def opened(self) -> ColumnSet:
        """Unknown columns may follow: nothing is reported missing any more."""
        return replace(self, open=True)

    def renamed(self, source: str) -> ColumnSet:
        return replace(self, source=source)


def closest_column(name: str, names: Iterable[str]) -> str | None:
    """The real column a misspelt ``name`` most likely means: the same name in another case,
    else difflib's closest match."""
    names = [str(n) for n in names]
    same = [n for n in names if n.lower() == name.lower()]
    if same:
        return same[0]
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    return close[0] if close else None


class HeaderReader:
    """Reads the column names of the tables a config loads, each file once.

    Once matters: a named pipe gives its header to the first reader only. ``before_run=True``
    (``pipeline run``, whose load stages read the files for real afterwards) leaves anything
    that is not a regular file or a folder unread, and leaves a file that is missing or
    unreadable to its load stage, whose failure the run records: their columns are unknown
    and not checked.
    """

    def __init__(self, *, before_run: bool = False) -> None:
        self.before_run = before_run
        self._seen: dict[tuple[str, str | None, bool, CsvDialect], ColumnSet | None] = {}

    def columns(self, path: str, *, format: str | None = None, partitioned: bool = False,
                dialect: CsvDialect = DEFAULT_DIALECT) -> ColumnSet | None:
        """The columns the table at ``path`` has, as a load reads it (a CSV file with
        ``dialect``); None when they cannot be known without reading data (a remote URL, a pipe
        with ``before_run``). A file that is missing or unreadable is a ``DataError``, as it is
        when the load runs; so is a CSV header that ``dialect``'s separator leaves as one column
        holding another separator."""
        key = (path, format, partitioned, dialect)
        if key not in self._seen:
            try:
                self._seen[key] = self._read(path, format, partitioned, dialect)
            except DataError:
                if not self.before_run:
                    raise
                self._seen[key] = None
        return self._seen[key]

    def _read(self, path: str, format: str | None, partitioned: bool, dialect: CsvDialect) -> ColumnSet | None:
        if path == STDIN:                  # standard input is the run's to read: never a check's
            return None
        if partitioned:
            if "://" in path:
                return None
            first = partitioned_sources(path)[0]
            if (format or infer_format(first)).lower() == "csv":
                refuse_partitioned([first])        # as the run's read refuses it, before the run
        else:
            first = Path(path)
            if not first.exists():
                raise input_not_found(path)        # says where a relative path was looked for
        if not first.is_dir() and not stat.S_ISREG(os.stat(first).st_mode) and self.before_run:
            return None
        fmt = (format or infer_format(first)).lower()
        if fmt not in ("csv", "parquet"):
            raise DataError(f"{path}: unknown format '{fmt}' (expected csv or parquet)")
        if first.is_dir():
            names = _dataset_columns(first, fmt)
        else:
            names = read_header(first, fmt, dialect)
            if fmt == "csv":
                check_separator(first, names, dialect)
            check_header_names(first, names)
            if fmt == "csv":
                names = pandas_names(names)
        return ColumnSet(tuple(names), source=str(path))


def _dataset_columns(folder: Path, fmt: str) -> list[str]:
    """The columns of a Parquet dataset folder: the first file's schema plus hive partition
    keys (``year=2024/``), as pandas, cuDF and Dask read them; only footers are read."""
    from pipeline.backends.input_files import check_source

    check_source(folder, fmt)              # a CSV folder, an empty folder: the load's own message
    import pyarrow.dataset as ds

    try:
        return [str(n) for n in ds.dataset(folder, format="parquet", partitioning="hive").schema.names]
    except read_errors() as exc:
        raise DataError(f"cannot read {folder} as parquet: {one_line(exc)}") from exc


def pandas_names(names: list[str]) -> list[str]:
    """A CSV header as pandas and cuDF name its columns: an empty name is ``Unnamed: <i>``."""
    return [name if name != "" else f"Unnamed: {i}" for i, name in enumerate(names)]
