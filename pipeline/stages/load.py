"""``load``: read a CSV or Parquet file into a frame of the run's backend."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field, ValidationInfo, field_validator, model_validator

from pipeline.backends import FILTER_OPS, Backend, get_backend
from pipeline.backends.csv_dialect import (
    CsvDialect, checked_encoding, checked_mark, checked_separator, normalize_separator,
)
from pipeline.backends.dates import check_date_format
from pipeline.backends.filters import date_filter_problems
from pipeline.backends.streams import STDIN, STREAM_TIMEOUT, is_stream, spool
from pipeline.backends.table_read import TableRead
from pipeline.core.errors import DataError, UsageError
from pipeline.core.fingerprints import changed_since_hashed, files_fingerprint
from pipeline.backends.headers import ColumnSet, HeaderReader
from pipeline.stages.spec import ColumnRef, KeyPath, Preview, StageContext, StageSpec, Table, register_stage


class LoadSpec(StageSpec):
    kind: Literal["load"]
    path: str = Field(min_length=1, description="CSV or Parquet file (or Parquet folder), relative to the working directory.")
    format: Literal["csv", "parquet"] | None = Field(None, description="Default: from the file suffix.")
    columns: list[str] | None = Field(None, description="Read only these columns.")
    dtypes: dict[str, str] | None = Field(None, description="Column dtypes, e.g. {customerID: str}.")
    na_values: list[str] | None = Field(None, description='Extra strings read as missing, e.g. [" "].')
    sep: str = Field(",", description="CSV field separator: ',' (the default), ';', '|', or a tab (\"\\t\" or tab).")
    encoding: str = Field("utf-8", description="CSV text encoding (a Python codec name): utf-8 (the default; a byte "
                                               "order mark is skipped), cp1252, latin-1, utf-16...")
    decimal: str = Field(".", description="CSV decimal mark: '.' (the default) or ',' (12,5).")
    thousands: str | None = Field(None, description="CSV thousands separator in numbers, e.g. '.' for 1.234,5 "
                                                    "(with decimal: ','); default: none.")
    stream_timeout: float = Field(STREAM_TIMEOUT, gt=0, allow_inf_nan=False, description=(
        "path is a named pipe, /dev/fd/N or - (standard input): seconds it may stay silent, before its first "
        "byte or between two, before the stage fails naming it (its bytes are read once into the run)."))
    filters: list[tuple[str, str, Any]] | None = Field(
        None, description='Row filters [column, op, value], all must hold: [[tenure, ">", 0]].'
    )
    partitioned: bool = Field(
        False, description="Read as a Dask DataFrame (Parquet folder, CSV glob): for data larger than one process.")
    blocksize: str = Field("64MiB", pattern=r"(?i)^\s*\d+(\.\d+)?\s*([kmgtp]i?)?b?\s*$", description="CSV bytes per partition when partitioned.")
    dates: dict[str, str | None] | None = Field(
        None, description='Date columns and their strptime formats, e.g. {date: "%Y%m%d"}; null or "" reads the '
                          "first value's layout (ISO 8601). Offsets are converted to UTC and dropped.")
    sample: int | None = Field(None, gt=0, description="Keep a seeded random sample of this many rows (in file "
                                                       "order); in-memory reads only. pipeline parity --sample sets it.")
    max_inputs = 0

    @model_validator(mode="after")
    def _sample_in_memory(self) -> LoadSpec:
        if self.sample is not None and self.partitioned:
            raise ValueError("sample applies to in-memory reads; a partitioned read is not sampled")
        return self

    @field_validator("sep", mode="before")
    @classmethod
    def _one_separator(cls, value: object) -> object:
        return checked_separator(value) if isinstance(value, str) else value

    @field_validator("encoding")
    @classmethod
    def _known_encoding(cls, value: str) -> str:
        return checked_encoding(value)

    @field_validator("decimal", "thousands")
    @classmethod
    def _one_mark(cls, value: str | None, info: ValidationInfo) -> str | None:
        """One punctuation or space character, unlike the separator and each other (checked at
        the later key: a number could not be told from its neighbours)."""
        if value is None:
            return value
        return checked_mark(str(info.field_name), value, {k: info.data.get(k) for k in ("sep", "decimal")})

    @model_validator(mode="after")
    def _csv_options_on_csv(self) -> LoadSpec:
        fmt = self.format or ("parquet" if self.path.lower().endswith((".parquet", ".pq")) else None)
        if fmt == "parquet" and not self.dialect.is_default:
            keys = list(self.dialect.reader_options())
            raise ValueError(f"{', '.join(keys)} {'describe' if len(keys) > 1 else 'describes'} a CSV file; "
                             f"{self.path} is Parquet, which records its own types: remove "
                             f"{'them' if len(keys) > 1 else 'it'}")
        return self

    @property
    def dialect(self) -> CsvDialect:
        """How the CSV file is written (separator, encoding, decimal mark, thousands separator)."""
        return CsvDialect(sep=self.sep, encoding=self.encoding, decimal=self.decimal, thousands=self.thousands)

    @field_validator("dtypes")
    @classmethod
    def _known_dtypes(cls, dtypes: dict[str, str] | None) -> dict[str, str] | None:
        """A dtype pandas does not know is refused here, at its key, not by the reader mid-run."""
        import pandas as pd

        for column, dtype in (dtypes or {}).items():
            try:
                pd.api.types.pandas_dtype(dtype)
            except TypeError:
                raise ValueError(f"column '{column}': {dtype!r} is not a dtype (use e.g. str, int64, float64, "
                                 "category, bool)") from None
        return dtypes

    @field_validator("dates")
    @classmethod
    def _date_formats(cls, dates: dict[str, str | None] | None, info: ValidationInfo) -> dict[str, str | None] | None:
        if dates is None:
            return None
        columns = info.data.get("columns")
        unread = [c for c in dates if columns is not None and c not in columns]
        if unread:
            raise ValueError(f"dates names column(s) {unread} that columns does not read")
        return {column: check_date_format(fmt) for column, fmt in dates.items()}

    @field_validator("filters")
    @classmethod
    def _known_ops(cls, filters: list[tuple[str, str, Any]] | None) -> list[tuple[str, str, Any]] | None:
        for column, op, value in filters or []:
            if op not in FILTER_OPS:
                raise ValueError(f"unknown filter operator '{op}' on '{column}' (use one of {', '.join(FILTER_OPS)})")
            if op in ("in", "not in") and not isinstance(value, (list, tuple)):
                raise ValueError(f"filter '{column} {op}' needs a list value")
        return filters

    def preview_problems(self, inputs: Mapping[str, Preview]) -> list[tuple[KeyPath, str]]:
        """A filter value on a ``dates`` column that is no date in one layout (``01/07/2017`` read
        January 7th, ``13/07/2017`` July 13th, exit 0): refused before the data is read."""
        return [(("filters",), problem) for problem in date_filter_problems(self.filters, self.dates)]

    def sample_overrides(self, rows: int) -> dict[str, Any]:
        """``sample: rows`` when it reads in memory; a partitioned read is not sampled."""
        return {} if self.partitioned else {"sample": rows}

    def reading(self, path: str, format: str) -> LoadSpec:
        """The same read (dates, dtypes, missing-value strings, filters on other columns...) of
        ``path`` in ``format``, less what chose the training rows: ``sample`` (a random subset
        of tonight's events would score a random subset of customers) and a filter on a
        ``dates`` column (it bounds the training period; at scoring the cut-off bounds the
        events, and ``date < 1998-01-01`` would drop every event since)."""
        dates = set(self.dates or {})
        kept = [f for f in self.filters or [] if f[0] not in dates] if self.filters else self.filters
        return self.model_copy(update={"path": path, "format": format, "sample": None, "filters": kept or None})

    def source_columns(self, headers: HeaderReader) -> ColumnSet | None:
        """The columns of the file as its header or schema names them (None: unknown)."""
        return headers.columns(self.path, format=self.format, partitioned=self.partitioned, dialect=self.dialect)

    def preview(self, stage: str, inputs: Any, headers: HeaderReader) -> Preview:
        found = self.source_columns(headers)
        if found is None:
            return Preview()
        if self.columns is not None:       # one the file lacks is reported at columns[i], not downstream
            if found.open or found.patterns:
                return Preview(columns=ColumnSet(tuple(self.columns), source=found.source))
            wanted = set(self.columns)     # the file's order, as the reader gives them
            found = found.without([c for c in found.names if c not in wanted],
                                  f"is left out by stages.{stage}.columns (the load reads only the columns listed there)")
        return Preview(columns=found)

    def columns_read(self, inputs: Any, headers: HeaderReader) -> list[ColumnRef]:
        """``columns``, ``dtypes``, ``dates`` and ``filters`` name columns of the file."""
        found = self.source_columns(headers)
        if found is None:
            return []
        refs = [ColumnRef(("columns", i), c, among=found) for i, c in enumerate(self.columns or [])]
        refs += [ColumnRef(("dtypes", c), c, "dtypes column", among=found) for c in self.dtypes or {}]
        refs += [ColumnRef(("dates", c), c, "dates column", among=found) for c in self.dates or {}
                 if self.columns is None]           # with columns: the schema already ties dates to them
        refs += [ColumnRef(("filters", i, 0), f[0], "filter column", among=found)
                 for i, f in enumerate(self.filters or [])]
        return refs


def load_table(path: str | os.PathLike[str], *, backend: Backend | str = "cpu", sep: str = ",",
               encoding: str = "utf-8", decimal: str = ".", thousands: str | None = None, **read: Any) -> Any:
    """Read a table as a pandas (cpu) or cuDF (gpu) frame; ``dates`` columns as naive datetimes;
    a CSV file written with ``sep``, ``encoding``, ``decimal`` and ``thousands``. ``read``: the
    other fields of a ``TableRead`` by name (``format``, ``columns``, ``dtypes``, ``na_values``,
    ``filters``, ``dates``).

    Examples:
        >>> from pipeline.stages import load_table
        >>> frame = load_table("data/telco_customer_churn.csv", na_values=[" "])
        >>> frame.shape, str(frame["TotalCharges"].dtype)
        ((7043, 21), 'float64')
    """
    backend = get_backend(backend) if isinstance(backend, str) else backend
    _check_read_arguments(read)
    dialect = CsvDialect(sep=normalize_separator(sep), encoding=encoding, decimal=decimal, thousands=thousands)
    return backend.read(path, TableRead(dialect=dialect), **read)


# load_table's read options and what each takes (a str where a list goes was read letter by
# letter: dates="ts" named the columns 't' and 's'; a list where a mapping goes failed deep inside).
_READ_OPTIONS = {"format": str, "columns": list, "dtypes": dict, "na_values": list, "filters": list, "dates": dict,
                 "layouts": dict}
_READ_TAKES = {str: "a string", list: "a list", dict: "a mapping"}


def _check_read_arguments(read: dict[str, Any]) -> None:
    if isinstance(read.get("na_values"), str):          # one marker, as pandas takes it
        read["na_values"] = [read["na_values"]]
    for key, value in read.items():
        wanted = _READ_OPTIONS.get(key)
        if wanted is None:
            raise UsageError(f"load_table has no read option {key!r}; it takes sep, encoding, decimal, thousands "
                             f"and {', '.join(k for k in _READ_OPTIONS if k != 'layouts')}")
        fits = (isinstance(value, wanted) or (wanted is list and isinstance(value, tuple))
                or (wanted is dict and isinstance(value, Mapping)))
        if value is not None and not fits:
            example = " (dates={'ts': None} reads column ts as dates, its format guessed)" if key == "dates" else ""
            raise UsageError(f"load_table {key}= takes {_READ_TAKES[wanted]}, not {type(value).__name__} "
                             f"{value!r:.60}{example}")


def load_fingerprint(spec: LoadSpec) -> dict[str, Any] | None:
    """The bytes of every file read (not size and mtime: a file rewritten in place within the
    same second keeps both). Partitioned reads are never cached: their output is a lazy view;
    nor are pipes, whose bytes can be read only once (hashing them would consume them)."""
    return None if spec.partitioned or is_stream(spec.path) else {"files": files_fingerprint(spec.path)}


@register_stage("load", LoadSpec, produces=Table, fingerprint=load_fingerprint)
def run_load(spec: LoadSpec, ctx: StageContext, inputs) -> Any:
    if spec.partitioned and is_stream(spec.path):
        raise DataError(f"{spec.path} is a pipe, read once into memory; partitioned: true reads files (a glob or "
                        "a Parquet folder): write the data to files, or remove partitioned")
    if spec.partitioned:
        frame = ctx.backend.read_partitioned(
            spec.path, format=spec.format, columns=spec.columns, dtypes=spec.dtypes,
            na_values=spec.na_values, filters=spec.filters, blocksize=spec.blocksize, dates=spec.dates,
            dialect=spec.dialect,
        )
        # Lazy: counting rows would read everything once more; partitions are known now.
        ctx.facts["partitions"] = int(frame.npartitions)
        layouts = None
    else:
        layouts = {}
        frame = _load_stream(spec, ctx, layouts) if is_stream(spec.path) else load_table(
            spec.path, backend=ctx.backend, format=spec.format, columns=spec.columns,
            dtypes=spec.dtypes, na_values=spec.na_values, filters=spec.filters, dates=spec.dates,
            layouts=layouts, **spec.dialect.reader_options(),
        )
        if spec.sample is not None and len(frame) > spec.sample:
            rng = np.random.default_rng(ctx.seed)
            frame = ctx.backend.take(frame, np.sort(rng.choice(len(frame), spec.sample, replace=False)))
            ctx.facts["sampled"] = spec.sample
        changed = [] if is_stream(spec.path) else changed_since_hashed(spec.path)
        if changed:
            raise DataError(f"{', '.join(changed)} changed while this run read it: the rows read are not the bytes "
                            "the run's cache key was made from, so nothing is kept of them. Run again once the file "
                            "is complete (a job that writes it should write another name and rename it into place)")
        ctx.facts["rows"] = int(len(frame))
        if not len(frame):
            raise DataError(f"{spec.path}: no rows" + (f" left after the filters {spec.filters}" if spec.filters else ""))
        if ctx.artifacts_dir is not None:
            from pipeline.runs.store import atomic_write_json

            atomic_write_json(ctx.artifact_path("columns.json"), column_summary(frame, ctx.backend))
    ctx.facts["columns"] = int(len(frame.columns))
    ctx.facts["read_options"] = read_options(spec, layouts)
    return frame


def _load_stream(spec: LoadSpec, ctx: StageContext, layouts: dict[str, str | None]) -> Any:
    """A pipe, ``/dev/fd/N`` or standard input, read once: its bytes spooled into a file beside
    the stage's artifacts (a temporary folder without them), read as a file (CSV unless
    ``format`` or the name says Parquet), then deleted."""
    import shutil
    import tempfile

    folder = ctx.artifacts_dir if ctx.artifacts_dir is not None else Path(tempfile.mkdtemp(prefix="pipeline-stream-"))
    spooled = spool(spec.path, folder, timeout=spec.stream_timeout)
    fmt = spec.format or ("parquet" if spec.path.lower().endswith((".parquet", ".pq")) else "csv")
    try:
        return load_table(spooled, backend=ctx.backend, format=fmt, columns=spec.columns, dtypes=spec.dtypes,
                          na_values=spec.na_values, filters=spec.filters, dates=spec.dates, layouts=layouts,
                          **spec.dialect.reader_options())
    except DataError as exc:           # the spooled copy's name means nothing to the user: theirs does
        shown = "standard input" if spec.path == STDIN else spec.path
        raise DataError(str(exc).replace(str(spooled), shown).replace(spooled.name, shown)) from None
    finally:
        spooled.unlink(missing_ok=True)
        if ctx.artifacts_dir is None:
            shutil.rmtree(folder, ignore_errors=True)


def column_summary(frame: Any, backend: Backend) -> dict[str, Any]:
    """columns.json: each column's type and missing values, for the report's data section (a
    partitioned read is lazy and gets none: counting would read every file once more)."""
    missing = backend.to_host(frame.isna().sum())
    return {"rows": int(len(frame)),
            "columns": [{"name": str(name), "dtype": str(dtype), "missing": int(missing[name])}
                        for name, dtype in frame.dtypes.items()]}


def read_options(spec: LoadSpec, layouts: Mapping[str, str | None] | None = None) -> dict[str, Any]:
    """How this stage read its input, for the run record: ``pipeline predict`` reads new rows
    the same way (placeholders such as " " as missing, the same dtypes and date formats) unless
    told otherwise. ``layouts``: the date formats as parsed; a column given none is recorded
    with the layout its first value had, so new rows parse as the training rows did rather than
    by a fresh guess from their own first value (``03/04/2024`` is March or April)."""
    dates = {**spec.dates, **{c: f for c, f in (layouts or {}).items() if f}} if spec.dates else None
    options = {"na_values": spec.na_values, "dtypes": spec.dtypes, "columns": spec.columns, "dates": dates,
               **spec.dialect.reader_options()}
    return {key: value for key, value in options.items() if value is not None}
