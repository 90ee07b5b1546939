"""The files a read names, before a reader reads them: their format from the name, their header
as the file holds it, the files of a Parquet folder or a glob, and the checks that refuse what
the readers would accept quietly (a repeated column name, a row wider than the header).
Readers' own errors are reported through ``read_errors`` and ``one_line``.
"""

from __future__ import annotations

import csv
import glob
import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.backends.compressed import plain_name, reading, text_reader
from pipeline.backends.csv_dialect import DEFAULT_DIALECT, CsvDialect, one_column_header, show
from pipeline.core.errors import DataError, input_not_found


def read_errors() -> tuple[type[BaseException], ...]:
    """What a reader raises on a file it cannot read (pyarrow's errors only when it imports;
    cuDF reports parse failures as RuntimeError). Evaluated only when something was raised."""
    errors: tuple[type[BaseException], ...] = (
        ValueError, KeyError, TypeError, OSError, OverflowError, RuntimeError, csv.Error)
    try:
        from pyarrow.lib import ArrowException
    except ImportError:
        return errors
    return (*errors, ArrowException)


def encoding_hint(exc: BaseException, dialect: CsvDialect) -> str:
    """For a UTF-8 read that met bytes that are not UTF-8 (anywhere in the file, not only its
    header): the encoding to set, as a clause to add to the message; "" otherwise."""
    found = exc if isinstance(exc, UnicodeDecodeError) else exc.__cause__ or exc.__context__
    if not isinstance(found, UnicodeDecodeError) or not dialect.utf8:
        return ""
    if found.object[:2] in (b"\xff\xfe", b"\xfe\xff"):
        return "; it starts with UTF-16's byte order mark: set encoding: utf-16 (--encoding utf-16 for predict)"
    if b"\x00" in bytes(found.object[:4096]):
        return ""
    return ("; if it was written by an older Windows program, give its encoding, cp1252 (or latin-1): encoding: on "
            "the load stage that reads it, --encoding for predict, charset= in the content type (or encoding= as a "
            "query parameter) for pipeline serve")


def one_line(exc: BaseException) -> str:
    """A library's message as one line (pandas ends its parser errors with a newline)."""
    return "; ".join(line.strip() for line in str(exc).splitlines() if line.strip()) or type(exc).__name__


def check_source(path: Path, fmt: str, dialect: CsvDialect = DEFAULT_DIALECT) -> None:
    """Refuse what the readers accept quietly or report without naming the file.

    A folder without data files reads as a table with no columns; a CSV header that names
    a column twice is renamed by pandas and cuDF alike (``tenure``, ``tenure.1``) and both
    would be trained on. Both readers get the same answer because it is decided here, from
    the raw header, before either reads.
    """
    if path.is_dir():
        if fmt != "parquet":
            raise DataError(f"{path} is a folder; a {fmt} input is one file (name the file, or read a folder "
                            f"of CSV files with partitioned: true and a glob such as {path}/*.csv)")
        files = parquet_files(path)
        if not files:
            csvs = sorted(p.name for p in path.glob("*.csv"))
            hint = (f"; it holds CSV files ({', '.join(csvs[:3])}): name one, or use partitioned: true with "
                    f"{path}/*.csv") if csvs else ""
            raise DataError(f"no .parquet files in {path}{hint}")
        path = files[0]
    names = read_header(path, fmt, dialect)
    if fmt == "csv":
        check_separator(path, names, dialect)
    check_header_names(path, names)


def check_separator(path: Path, names: Sequence[str], dialect: CsvDialect = DEFAULT_DIALECT, *,
                    option: str | None = None) -> None:
    """Refuse a header that ``dialect``'s separator left as one column holding another likely
    one (a ``;``-separated file read as comma-separated), naming the key to set (or, where rows
    are scored, ``option``: what to do, with ``{sep}`` for the separator), once, instead of every
    column the config names being reported missing."""
    found = one_column_header(list(names), dialect)
    if found is not None:
        shown = names[0] if len(names[0]) <= 80 else names[0][:77] + "..."
        fix = option.format(sep=show(found)) if option else f"set sep: {show(found)} on the load stage that reads it"
        raise DataError(f"{path}: the header reads as one column, {shown!r}, with the separator "
                        f"{show(dialect.sep)}; the file looks {show(found)}-separated: {fix}")


def check_header_names(path: Path, names: Sequence[str]) -> None:
    """Refuse a header that names a column twice (see ``check_source``)."""
    repeated = sorted(str(n) for n, count in Counter(names).items() if count > 1)
    if repeated:
        raise DataError(f"{path}: column name(s) {repeated} appear more than once in the header; rename them "
                        f"(pandas and cuDF would read the second '{repeated[0]}' as '{repeated[0]}.1')")


_WIDTH_ERROR = re.compile(r"Expected (\d+) columns, got (\d+): ?(.*)", re.S)


def check_row_widths(path: Path, dialect: CsvDialect = DEFAULT_DIALECT) -> None:
    """Refuse a CSV row with more or fewer fields than the header, naming its line.

    The readers accept both quietly: pandas and cuDF fill a short row (a line cut off, a field
    missing its separator) with missing values, which the features then fill as if the value
    were unknown; reading some columns (``usecols``: predict reads only what the model needs)
    they drop a wide row's extra fields; a separator at the end of every data line makes pandas
    take the first column as the index and shift every other. pyarrow's parser counts the
    fields of every row while converting one column, at about the cost of the read itself.
    Its other complaints are left to the reader of record, which decides what the file means.
    """
    import pyarrow as pa
    import pyarrow.csv as pacsv

    try:
        reader = pacsv.open_csv(path, read_options=pacsv.ReadOptions(autogenerate_column_names=True,
                                                                     block_size=1 << 24, encoding=dialect.encoding),
                                parse_options=pacsv.ParseOptions(delimiter=dialect.sep,
                                                                 newlines_in_values=True),
                                convert_options=pacsv.ConvertOptions(include_columns=["f0"],
                                                                     column_types={"f0": pa.string()}))
        for _ in reader:
            pass
    except (pa.ArrowInvalid, pa.ArrowKeyError, OSError, ValueError) as exc:
        ragged = row_width_error(path, exc, dialect)
        if ragged is not None:
            raise ragged from None


def row_width_error(path: Path, exc: BaseException, dialect: CsvDialect = DEFAULT_DIALECT) -> DataError | None:
    """The DataError for pyarrow's complaint ``exc`` when it is a row with more or fewer fields
    than the header (None for any other complaint, and for a line of blanks, which the readers
    take as no row): ``check_row_widths``'s message, from whichever pyarrow read found the row.
    The line is found again by Python's ``csv`` reader, which counts the lines a quoted value
    spans; it runs only on this error's path."""
    found = _WIDTH_ERROR.search(str(exc))
    if not found:
        return None
    expected, got, text = int(found.group(1)), int(found.group(2)), found.group(3)
    if got == expected or (got == 1 and not text.strip()):
        return None
    line, fields = _first_ragged_row(path, dialect, expected) or (None, [])
    where = f"line {line}" if line is not None else "a row"
    row = one_line(ValueError(text))[:120]
    if len(fields) == expected + 1 and not fields[-1].strip():
        hint = ("the row ends with the separator: remove the trailing one from every line, or add a name for "
                "the extra column to the header")
    elif got > expected:
        hint = "fix the row or quote the field that holds the separator"
    else:
        hint = ("fields are missing: a line cut short (an interrupted export?) or a value that holds a line break "
                "without quotes; fix or remove the row")
    return DataError(f"{path}: {where} has {got} fields where the header has {expected} (row: {row!r}); {hint}")


def _first_ragged_row(path: Path, dialect: CsvDialect, expected: int) -> tuple[int, list[str]] | None:
    """The line number and fields of the first record whose field count is not ``expected``
    (a line of blanks skipped, as the readers skip it); None when it cannot be told."""
    try:
        with open(path, newline="", encoding=dialect.text_encoding, errors="replace") as fh:
            reader = csv.reader(fh, delimiter=dialect.sep)
            start = 1
            for i, record in enumerate(reader):
                if i and record and len(record) != expected and not (len(record) == 1 and not record[0].strip()):
                    return start, record
                start = reader.line_num + 1
    except (OSError, csv.Error):
        return None
    return None


def parquet_files(folder: Path) -> list[Path]:
    """The Parquet files of a dataset folder as pyarrow lists them (hidden ``.``/``_`` names
    skipped, partition subfolders included)."""
    return sorted(p for p in folder.rglob("*")
                  if p.suffix.lower() in (".parquet", ".pq") and p.is_file()
                  and not any(part.startswith((".", "_")) for part in p.relative_to(folder).parts))


def read_header(path: Path, fmt: str, dialect: CsvDialect = DEFAULT_DIALECT) -> list[str]:
    """Column names exactly as the file holds them (pandas renames a repeated name; this does
    not): the first non-blank line of a CSV (read with ``dialect``'s separator and encoding,
    through a decompressing stream when the file is compressed), the schema of a Parquet file."""
    if fmt == "parquet":
        return [str(n) for n in parquet_schema(path).names]
    try:
        with reading(path), text_reader(path, dialect.text_encoding) as fh:
            row = next((r for r in csv.reader(fh, delimiter=dialect.sep) if r), None)
    except (csv.Error, UnicodeError) as exc:         # UnicodeError: a UTF-16 file without its byte order mark
        raise DataError(f"{path} is not a text CSV file in {dialect.encoding} ({one_line(exc)})"
                        f"{encoding_hint(exc, dialect)}") from exc
    except OSError as exc:
        raise DataError(f"cannot read {path}: {exc.strerror or exc}") from exc
    if row is None:
        raise DataError(f"{path} is empty: a CSV file needs a header line")
    return row


def parquet_schema(path: Path) -> Any:
    """A Parquet file's schema (its footer only; no rows read), or a DataError naming it."""
    import pyarrow.parquet as pq

    try:
        return pq.read_schema(path)
    except read_errors() as exc:
        raise DataError(f"cannot read {path} as parquet: {one_line(exc)}") from exc


def check_parts(files: Sequence[Path], fmt: str, dialect: CsvDialect = DEFAULT_DIALECT) -> None:
    """Every part of a partitioned read against the first, from headers and footers only: a part
    that cannot be read (an empty file), that lacks a column the first has or has one it lacks,
    or (Parquet) holds text where the first holds numbers. Dask takes the columns and types
    from the first part, so such a part failed later in another stage ("KeyError: ['tenure']
    not in index", "Parquet file size is 0 bytes") and named neither the file nor the column."""
    if len(files) < 2:
        return
    first = files[0]
    names, kinds = _part_columns(first, fmt, dialect)
    for path in files[1:]:
        other, other_kinds = _part_columns(path, fmt, dialect)
        missing, extra = [c for c in names if c not in other], [c for c in other if c not in names]
        if missing or extra:
            said = "; ".join(filter(None, [f"it lacks {missing}" if missing else "",
                                           f"it has {extra}, which the first does not" if extra else ""]))
            raise DataError(f"{path}: its columns differ from those of {first}, the first part of the partitioned "
                            f"read: {said}; every part must have the same columns")
        for column, kind in other_kinds.items():
            if column in kinds and kinds[column] != kind:
                raise DataError(f"{path}: column '{column}' holds {kind} here and {kinds[column]} in {first}, the "
                                "first part of the partitioned read; every part must hold the same type")


def _part_columns(path: Path, fmt: str, dialect: CsvDialect) -> tuple[list[str], dict[str, str]]:
    """A part's column names and, for Parquet (one footer read), each column as numbers or text
    (other types left out; CSV parts are typed as they are read)."""
    if fmt != "parquet":
        return read_header(path, fmt, dialect), {}
    import pyarrow as pa

    schema = parquet_schema(path)
    kinds = {}
    for field in schema:
        kind = field.type
        if pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_decimal(kind):
            kinds[field.name] = "numbers"
        elif pa.types.is_string(kind) or pa.types.is_large_string(kind):
            kinds[field.name] = "text"
    return [str(n) for n in schema.names], kinds


def nested_columns(path: Path, columns: Sequence[str]) -> dict[str, str]:
    """Those of ``columns`` that a Parquet file holds as lists, structs or maps, with their
    types: the readers give them as Python objects, which no op or model reads as a value."""
    import pyarrow as pa

    wanted = set(columns)
    return {f.name: str(f.type) for f in parquet_schema(path) if f.name in wanted and pa.types.is_nested(f.type)}


def parquet_column_types(path: Path, columns: Sequence[str]) -> dict[str, str]:
    """The pandas dtype each of ``columns`` has as the readers give it from a Parquet file's
    schema (decimals as float64: ``decimal_columns``), without reading its rows (a column the
    file lacks is left out)."""
    wanted = set(columns)
    types: dict[str, str] = {}
    for field in parquet_schema(path):
        if field.name not in wanted:
            continue
        try:
            types[field.name] = "float64" if _is_decimal(field) else np.dtype(field.type.to_pandas_dtype()).name
        except (NotImplementedError, TypeError):         # no NumPy dtype of its own (nested, ...)
            types[field.name] = "object"
    return types


def decimal_columns(path: Path, columns: Sequence[str]) -> list[str]:
    """Those of ``columns`` a Parquet file (or a folder's first file) holds as decimals (a
    warehouse's NUMERIC(10, 2) prices), which are read as float64, as a model reads them:
    pandas gives Python ``Decimal`` objects, which every type check takes for text, and cuDF
    its own decimal type. The schema says which; no rows are read."""
    first = parquet_files(path)[:1] if path.is_dir() else [path]
    wanted = {str(c) for c in columns}
    return [f.name for f in parquet_schema(first[0]) if f.name in wanted and _is_decimal(f)] if first else []


def _is_decimal(field: Any) -> bool:
    import pyarrow as pa

    return pa.types.is_decimal(field.type)


def partitioned_sources(text: str | list[str]) -> list[Path]:
    """The files a partitioned read names (globs expanded, in name order); nothing matching is
    an error naming the pattern. Remote URLs pass through unchecked."""
    found: list[Path] = []
    for item in [text] if isinstance(text, str) else text:
        if "://" in item:
            found.append(Path(item.split("://", 1)[1]))
        elif any(ch in item for ch in "*?["):
            matched = sorted(glob.glob(item))
            if not matched:
                raise DataError(f"no files match {item}")
            found += [Path(m) for m in matched]
        elif not Path(item).exists():
            raise input_not_found(item)
        else:
            found.append(Path(item))
    if not found:
        raise DataError("no input files given")
    return found


# What a file's suffix says it is (.txt and .tsv are CSV in the reader's dialect).
NAME_FORMATS = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv", ".tsv": "csv", ".txt": "csv"}


def name_format(path: Path) -> str | None:
    """The format a file's last suffix says, a compression suffix passed over (``rows.csv.gz``
    is CSV); None when it says none."""
    return NAME_FORMATS.get(Path(plain_name(path)).suffix.lower())


def infer_format(path: Path, *, fix: str = "set format: csv or parquet") -> str:
    """The format a file's name says (a folder is Parquet): its last suffix, or any of its
    suffixes (``rows.csv.2024``); ``fix`` is how the caller's user names one when the name
    says nothing."""
    if path.is_dir():
        return "parquet"
    fmt = name_format(path)
    if fmt is not None:
        return fmt
    suffixes = [s.lower() for s in path.suffixes]
    if ".parquet" in suffixes or ".pq" in suffixes:
        return "parquet"
    if ".csv" in suffixes or ".txt" in suffixes or ".tsv" in suffixes:
        return "csv"
    raise DataError(f"{path}: cannot tell the format from the file name (.csv, .tsv, .txt, .parquet or .pq); {fix}")
