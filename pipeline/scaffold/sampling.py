"""A bounded sample of a CSV or Parquet file, for ``pipeline init`` to infer a config from.

``pipeline init`` runs on files of any size, so it never reads a whole large file: at most
``SAMPLE_BYTES`` of a CSV file and ``SAMPLE_ROWS`` rows. A file that fits is read whole (the
sample is exact). A larger CSV file is read in ``WINDOWS`` windows spread over the file (its
head, and slices further on, each cut to whole lines) and a larger Parquet file by row groups
spread over it, because files are often sorted (by date, by id, by the target itself) and
the first rows alone would show one year, or one class. The sample is then thinned to
``SAMPLE_ROWS`` with a fixed seed, so the same file always gives the same config.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pipeline.backends.compressed import compression_of, plain_copy, read_head
from pipeline.backends.csv_dialect import (
    DEFAULT_DIALECT,
    SNIFF_BYTES,
    CsvDialect,
    sniff,
)
from pipeline.backends.input_files import (
    check_row_widths,
    check_source,
    decimal_columns,
    infer_format,
    one_line,
    parquet_files,
    read_errors,
    read_header,
)
from pipeline.core.errors import DataError

SAMPLE_ROWS = 20_000
SAMPLE_BYTES = 16 * 1024 * 1024
WINDOWS = 4
SEED = 0


@dataclass
class Sample:
    """Rows of a file and what is known of the whole: ``complete`` when every row was read
    (``total_rows`` is then exact), else ``total_rows`` is an estimate from the bytes or the
    Parquet metadata (exact for Parquet)."""

    frame: pd.DataFrame
    path: Path
    format: str
    total_rows: int
    complete: bool
    total_exact: bool = True
    notes: list[str] = field(default_factory=list)
    # How the CSV file is written, as sniffed from its first bytes (the default for Parquet).
    dialect: CsvDialect = DEFAULT_DIALECT

    def describe(self) -> str:
        """``all 7,043 rows`` or ``20,000 of about 1,200,000 rows``."""
        if self.complete:
            return f"all {self.total_rows:,} rows"
        about = "" if self.total_exact else "about "
        return f"{len(self.frame):,} of {about}{self.total_rows:,} rows"


def format_of(path: Path, given: str | None = None) -> str:
    """``given``, else the format the load stage infers from the name (a folder is Parquet)."""
    return given or infer_format(path, fix="pass --format csv or --format parquet")


def read_sample(path: str | Path, *, fmt: str | None = None, na_values: list[str] | None = None,
                max_rows: int = SAMPLE_ROWS, max_bytes: int = SAMPLE_BYTES,
                dialect: CsvDialect | None = None) -> Sample:
    """A seeded sample of at most ``max_rows`` rows, reading at most ``max_bytes`` of a CSV file,
    written in ``dialect`` (None: sniffed from its first bytes, the sample's ``notes`` say what)."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"{path}: no such file or folder (looked in {Path.cwd()})")
    fmt = format_of(path, fmt)
    kind = compression_of(path) if fmt == "csv" else None
    if kind is not None:               # the sampler seeks windows over a plain file, sized by its bytes
        with plain_copy(path) as plain:
            sample = read_sample(plain, fmt=fmt, na_values=na_values, max_rows=max_rows, max_bytes=max_bytes,
                                 dialect=dialect)
        return replace(sample, path=path, notes=[f"decompressed from {kind}", *sample.notes])
    notes: list[str] = []
    if dialect is None:
        dialect, notes = sniff_file(path) if fmt == "csv" else (DEFAULT_DIALECT, [])
    check_source(path, fmt, dialect)   # an empty folder, a header naming a column twice
    if fmt == "csv":
        try:
            sample = _csv_sample(path, na_values, max_rows, max_bytes, dialect)
        except DataError as exc:
            undecodable = exc.__cause__
            if not (dialect.utf8 and isinstance(undecodable, UnicodeDecodeError)):
                raise
            # Past the first bytes sniffed, a byte that is not UTF-8: cp1252, as sniff decides early.
            notes.append("the file is not UTF-8 (a byte past the first 64 KiB is not): read as cp1252")
            dialect = replace(dialect, encoding="cp1252")
            sample = _csv_sample(path, na_values, max_rows, max_bytes, dialect)
        sample.dialect, sample.notes = dialect, [*notes, *sample.notes]
    else:
        sample = _parquet_sample(path, max_rows)
    if not len(sample.frame.columns):
        raise DataError(f"{path} has no columns")
    if not len(sample.frame):
        has = "a header" if fmt == "csv" else "columns"
        raise DataError(f"{path} has {has} but no rows: there is nothing to learn from")
    if len(sample.frame) > max_rows:
        rng = np.random.default_rng(SEED)
        keep = np.sort(rng.choice(len(sample.frame), max_rows, replace=False))
        sample.frame = sample.frame.iloc[keep].reset_index(drop=True)
        sample.complete = False
    return sample


def sniff_file(path: Path) -> tuple[CsvDialect, list[str]]:
    """The dialect of a CSV file's first bytes (``csv_dialect.sniff``), and what was found."""
    try:
        head = read_head(path, SNIFF_BYTES)
    except OSError as exc:
        raise DataError(f"cannot read {path}: {exc.strerror or exc}") from exc
    return sniff(head)


def _csv_sample(path: Path, na_values: list[str] | None, max_rows: int, max_bytes: int,
                dialect: CsvDialect = DEFAULT_DIALECT) -> Sample:
    size = path.stat().st_size
    read_header(path, "csv", dialect)  # an empty file: "is empty: a CSV file needs a header line"
    if size <= max_bytes:
        # Read whole, it gets the load's row check too: a row cut short read as a row of gaps
        # (init then drafted missing_target: drop for it), and a separator ending every data
        # line shifted every column; the run refuses both, naming the line.
        check_row_widths(path, dialect)
        frame = _parse_csv(path, path, na_values, dialect=dialect)
        return Sample(frame, path, "csv", total_rows=len(frame), complete=True)
    data, parsed_bytes = _csv_windows(path, size, max_bytes)
    try:
        frame = _parse_csv(io.BytesIO(data), path, na_values, dialect=dialect)
    except DataError:
        # A window began inside a quoted field that spans lines: the head alone is whole lines.
        data, parsed_bytes = _csv_windows(path, size, max_bytes, windows=1)
        frame = _parse_csv(io.BytesIO(data), path, na_values, dialect=dialect)
    per_row = parsed_bytes / max(len(frame), 1)
    total = max(len(frame), int(round(size / per_row))) if per_row else len(frame)
    return Sample(frame, path, "csv", total_rows=total, complete=False, total_exact=False)


def _csv_windows(path: Path, size: int, max_bytes: int, *, windows: int = WINDOWS) -> tuple[bytes, int]:
    """The header and whole lines from ``windows`` slices of the file spread over it."""
    width = max_bytes // windows
    pieces: list[bytes] = []
    with open(path, "rb") as fh:
        for i in range(windows):
            offset = 0 if i == 0 else int(i * (size - width) / max(windows - 1, 1))
            fh.seek(offset)
            chunk = fh.read(width)
            if i:
                start = chunk.find(b"\n")
                chunk = chunk[start + 1:] if start >= 0 else b""
            end = chunk.rfind(b"\n")
            pieces.append(chunk[:end + 1] if end >= 0 else b"")
    data = b"".join(pieces)
    return data, len(data)


def _parse_csv(source: Any, path: Path, na_values: list[str] | None, nrows: int | None = None, *,
               dialect: CsvDialect = DEFAULT_DIALECT) -> pd.DataFrame:
    try:
        # low_memory=False: types from the whole (bounded) sample, without pandas' mixed-type warning.
        return pd.read_csv(source, na_values=list(na_values) if na_values else None, nrows=nrows, low_memory=False,
                           **dialect.reader_options())
    except read_errors() as exc:
        raise DataError(f"cannot read {path} as csv: {one_line(exc)}") from exc


def _parquet_sample(path: Path, max_rows: int) -> Sample:
    import pyarrow as pa
    import pyarrow.parquet as pq

    files = parquet_files(path) if path.is_dir() else [path]
    try:
        handles = [pq.ParquetFile(f) for f in files]
        groups = [(h, g, h.metadata.row_group(g).num_rows) for h in handles for g in range(h.num_row_groups)]
        total = sum(rows for _, _, rows in groups)
        if total <= max_rows:
            tables = [h.read() for h in handles]
            picked_all = True
        else:
            per_group = total / max(len(groups), 1)
            wanted = min(len(groups), max(1, math.ceil(max_rows / max(per_group, 1))))
            chosen = sorted(set(np.linspace(0, len(groups) - 1, wanted).round().astype(int).tolist()))
            tables = [groups[i][0].read_row_group(groups[i][1]) for i in chosen]
            picked_all = len(chosen) == len(groups)
        table = pa.concat_tables(tables, promote_options="default") if len(tables) > 1 else tables[0]
        frame = table.to_pandas()
        for name in decimal_columns(path, frame.columns):     # as the load reads them: floats, not Decimal text
            frame[name] = frame[name].astype("float64")
    except read_errors() as exc:
        raise DataError(f"cannot read {path} as parquet: {one_line(exc)}") from exc
    return Sample(frame, path, "parquet", total_rows=total, complete=picked_all and total <= max_rows)
