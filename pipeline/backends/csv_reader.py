"""CSV files into pandas frames on every core.

pandas' C parser reads a CSV on one core. pyarrow's reader parses blocks of the file on every
core; its table becomes the frame the C parser gives (the same dtypes: int64, float64, bool,
text as pandas' ``str``; ints with a gap as float64; bool with a gap and a column with no value
as pandas has them; missing values as NaN), so what a stage computes does not depend on the
reader. Where pyarrow cannot give that frame, the C parser reads the file, as it did before,
and the debug log says why:

- pyarrow refuses the file (a line of blanks, bytes that are not UTF-8,
  a column named in ``columns`` that the file lacks): the C parser reads it or raises its own
  error, so a bad file's message is the one it always was;
- an option only the C parser has: a dtype other than ``str``, an ``na_values`` entry that is
  a number (pandas then also drops ``-999.0`` for ``-999``), an empty header name (pandas names
  it ``Unnamed: 1``);
- a value the two read differently: a NaN spelled other than pandas' missing strings (``NAN``:
  text to pandas), integers past int64 (uint64 or text to pandas), integers written ``+5``
  (pyarrow reads the column as floats), hexadecimal ``0x1F`` in the first block (an int to
  pyarrow, text to pandas).

Floats are read correctly rounded by both paths: pyarrow always, the C parser with
``float_precision="round_trip"``. pandas' default parser is not correctly rounded: it differs
in the last bit for about half the values written with 17 significant digits, 8% of those
written with 15, none with 6 decimals or fewer (see docs/benchmarks.md, Loading).

Differences left:

- a column whose type changes after the C parser's first chunk of rows (``low_memory``: about
  260,000 rows), ``007`` early and ``abc`` later: the C parser gives an object column of the
  numbers it read first (7) and the later text, with a DtypeWarning; this reader gives text
  throughout (``"007"``), as the C parser does with ``low_memory=False``;
- found only at the cost of a second pass over the file: a column whose first block (1 MiB)
  holds decimal integers and whose later rows hold a hexadecimal ``0x1F`` reads as integers
  here where pandas read text.
"""

from __future__ import annotations

import logging
import mmap
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from pipeline.backends.csv_dialect import DEFAULT_DIALECT, CsvDialect
from pipeline.backends.input_files import check_row_widths, one_line, read_header, row_width_error

log = logging.getLogger("pipeline")

# pandas' C parser's default true/false spellings and missing strings (``keep_default_na``).
TRUE_VALUES = ["True", "TRUE", "true"]
FALSE_VALUES = ["False", "FALSE", "false"]
try:
    from pandas._libs.parsers import STR_NA_VALUES as _PANDAS_NA
except ImportError:                                   # a pandas that moved it: the set it has had since 1.0
    _PANDAS_NA = {"", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN",
                  "<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null"}
PANDAS_NA_VALUES: list[str] = sorted(_PANDAS_NA)

# dtypes pyarrow reads as the C parser does; any other sends the file to the C parser.
TEXT_DTYPES = {"str": pa.string()}
# Text the C parser reads as an int64: sign, digits, blanks either side.
INT_TEXT = r"^\s*[+-]?[0-9]+\s*$"
HEX_TEXT = r"^\s*[+-]?0[xX]"
INT64_LIMIT = 2.0**63
TEMPORAL = (pa.types.is_date, pa.types.is_time, pa.types.is_timestamp)


class CParserNeeded(Exception):
    """pyarrow cannot give the frame the C parser gives; the message says why."""


def read_csv_frame(path: Path, *, columns: Sequence[str] | None = None, dtypes: Mapping[str, str] | None = None,
                   na_values: Sequence[str] | None = None, dialect: CsvDialect = DEFAULT_DIALECT) -> pd.DataFrame:
    """``path`` as the frame pandas' C parser gives (see the module's docstring), read by pyarrow
    on every core where it can give it. A row with more or fewer fields than the header is
    refused, naming its line (``input_files.row_width_error``); the C parser's own errors are
    raised as they are. A file
    of another dialect than the default (a separator, encoding, decimal mark or thousands
    separator of its own) is the C parser's: its options are the ones users know from pandas."""
    try:
        if not dialect.is_default:
            raise CParserNeeded(f"the CSV dialect ({dialect.describe()})")
        return read_with_arrow(path, columns=columns, dtypes=dtypes, na_values=na_values)
    except CParserNeeded as why:
        reason = str(why)
        check_row_widths(path, dialect)        # the C parser fills short rows and drops wide rows' extra fields
    except pa.ArrowException as exc:
        ragged = row_width_error(path, exc, dialect)
        if ragged is not None:
            raise ragged from None
        reason = f"pyarrow: {one_line(exc)}"
    log.debug("%s: read with pandas' C parser (%s)", path, reason)
    return read_with_c_parser(path, columns=columns, dtypes=dtypes, na_values=na_values, dialect=dialect)


def read_with_c_parser(path: Path, *, columns: Sequence[str] | None = None, dtypes: Mapping[str, str] | None = None,
                       na_values: Sequence[str] | None = None,
                       dialect: CsvDialect = DEFAULT_DIALECT) -> pd.DataFrame:
    """pandas' C parser on one core, floats correctly rounded as pyarrow reads them."""
    return pd.read_csv(path, usecols=list(columns) if columns else None, dtype=dict(dtypes) if dtypes else None,
                       na_values=list(na_values) if na_values else None, float_precision="round_trip",
                       **dialect.reader_options())


def read_with_arrow(path: Path, *, columns: Sequence[str] | None = None, dtypes: Mapping[str, str] | None = None,
                    na_values: Sequence[str] | None = None) -> pd.DataFrame:
    """pyarrow's multi-threaded reader, its table checked and converted to the C parser's frame;
    ``CParserNeeded`` where it cannot be (pyarrow's own errors pass through)."""
    pinned = _pinned_types(dtypes, na_values)
    header = read_header(path, "csv")
    if any(not name for name in header):
        raise CParserNeeded("an empty column name, which pandas names 'Unnamed: N'")
    wanted = [c for c in header if c in set(columns)] if columns else None
    convert = dict(null_values=[*PANDAS_NA_VALUES, *(na_values or ())], strings_can_be_null=True,
                   true_values=TRUE_VALUES, false_values=FALSE_VALUES, include_columns=list(columns or ()))
    # A quoted value may span lines, as pandas allows; pyarrow then finds its blocks' ends more
    # slowly (about 20% of the read's CPU), so only a file that quotes anything pays for it.
    parse = pacsv.ParseOptions(newlines_in_values=_holds(path, b'"'))
    text, inferred = _first_block_types(path, parse, convert, pinned)
    table = _read_settled(path, parse, convert, _large_text({**inferred, **text, **pinned}), {**text, **pinned})
    later = {f.name: pa.string() for f in table.schema if _is_temporal(f.type)}
    if later:                                  # dates first seen after the first block: read them as text
        table = pacsv.read_csv(path, parse_options=parse, convert_options=pacsv.ConvertOptions(
            **convert, column_types={**text, **pinned, **later}))
    _check_values(path, table, parse)
    if wanted is not None:
        table = table.select(wanted)           # the file's order, as usecols gives it
    return _to_pandas(table)


def _large_text(types: dict[str, pa.DataType]) -> dict[str, pa.DataType]:
    """Text columns read as ``large_string``, the type pandas' ``str`` columns hold: read as
    ``string``, pandas casts each to it (a copy of every offset, on one core: 3 s of a 10M-row
    table's 14 s read)."""
    return {name: pa.large_string() if kind == pa.string() else kind for name, kind in types.items()}


def _read_settled(path: Path, parse: pacsv.ParseOptions, convert: dict, settled: dict[str, pa.DataType],
                  fixed: dict[str, pa.DataType]) -> pa.Table:
    """The file read with every column's type taken from the first block (``settled``); where a
    later value does not fit it (floats after integers, words after numbers), read again with only
    ``fixed`` given and pyarrow inferring the rest over every block.

    Inferring over every block keeps each block's raw text until its columns' types are settled:
    at 1M rows (a 150 MiB file) pyarrow's pool peaked at 398 MiB against 195 with the types given.
    """
    try:
        return pacsv.read_csv(path, parse_options=parse,
                              convert_options=pacsv.ConvertOptions(**convert, column_types=settled))
    except pa.ArrowInvalid as exc:
        if "conversion error" not in str(exc) or settled == fixed:
            raise
        log.debug("%s: %s; the types are inferred over every block", path, one_line(exc))
    return pacsv.read_csv(path, parse_options=parse,
                          convert_options=pacsv.ConvertOptions(**convert, column_types=fixed))


def _pinned_types(dtypes: Mapping[str, str] | None, na_values: Sequence[str] | None) -> dict[str, pa.DataType]:
    """The caller's dtypes as pyarrow types; ``CParserNeeded`` for what only the C parser reads alike."""
    names = {c: "str" if t is str else str(t) for c, t in (dtypes or {}).items()}
    other = {c: t for c, t in names.items() if t not in TEXT_DTYPES}
    if other:
        raise CParserNeeded(f"dtypes {other}")
    numeric = [v for v in na_values or () if _is_number(v)]
    if numeric:
        raise CParserNeeded(f"na_values {numeric} hold numbers, which pandas also matches as numbers")
    return {c: TEXT_DTYPES[t] for c, t in names.items()}


def _is_number(text: str) -> bool:
    try:
        float(text)
    except (TypeError, ValueError):
        return False
    return True


def _is_temporal(kind: pa.DataType) -> bool:
    return any(test(kind) for test in TEMPORAL)


def _first_block_types(path: Path, parse: pacsv.ParseOptions, convert: dict, pinned: dict[str, pa.DataType]
                       ) -> tuple[dict[str, pa.DataType], dict[str, pa.DataType]]:
    """The first block's types: (dates and times, read as text: the load's ``dates`` parse them,
    as after the C parser; the other columns with a value, as pyarrow infers them). A column of
    hexadecimal integers, which pyarrow reads as numbers and pandas as text, sends the file to
    the C parser."""
    one_thread = pacsv.ReadOptions(use_threads=False)     # threads would read ahead past the first block
    reader = pacsv.open_csv(path, read_options=one_thread, parse_options=parse,
                            convert_options=pacsv.ConvertOptions(**convert, column_types=pinned))
    schema = reader.schema
    reader.close()
    integers = [f.name for f in schema if pa.types.is_integer(f.type)]
    if integers:
        as_text = pacsv.ConvertOptions(**{**convert, "include_columns": integers},
                                       column_types={c: pa.string() for c in integers})
        reader = pacsv.open_csv(path, read_options=one_thread, parse_options=parse, convert_options=as_text)
        block = reader.read_next_batch()
        reader.close()
        hexadecimal = [c for c in integers if pc.any(pc.match_substring_regex(block.column(c), HEX_TEXT)).as_py()]
        if hexadecimal:
            raise CParserNeeded(f"column(s) {hexadecimal} hold hexadecimal integers, text to pandas")
    text = {f.name: pa.string() for f in schema if _is_temporal(f.type)}
    inferred = {f.name: f.type for f in schema if f.name not in text and not pa.types.is_null(f.type)}
    return text, inferred


def _check_values(path: Path, table: pa.Table, parse: pacsv.ParseOptions) -> None:
    """``CParserNeeded`` where a column holds what the C parser reads otherwise (the module's list)."""
    binary = [f.name for f in table.schema if pa.types.is_binary(f.type) or pa.types.is_large_binary(f.type)]
    if binary:
        raise CParserNeeded(f"column(s) {binary} hold bytes that are not UTF-8")
    whole: list[str] = []                      # float columns of whole numbers and no gap: maybe "+5"
    for field in table.schema:
        if not pa.types.is_floating(field.type):
            continue
        column = table.column(field.name)
        if pc.any(pc.is_nan(column)).as_py():
            raise CParserNeeded(f"column {field.name!r} holds a NaN spelled other than pandas' missing strings")
        if pc.any(pc.and_(pc.is_finite(column), pc.greater_equal(pc.abs(column), INT64_LIMIT))).as_py():
            raise CParserNeeded(f"column {field.name!r} holds numbers past int64 (uint64 or text to pandas "
                                f"when written as integers)")
        if column.null_count == 0 and len(column) and pc.all(pc.equal(pc.floor(column), column)).as_py():
            whole.append(field.name)
    if whole and _holds(path, b"+"):
        text = pacsv.read_csv(path, parse_options=parse, convert_options=pacsv.ConvertOptions(
            include_columns=whole, column_types={c: pa.string() for c in whole}, strings_can_be_null=False))
        integers = [c for c in whole if pc.all(pc.match_substring_regex(text.column(c), INT_TEXT)).as_py()]
        if integers:
            raise CParserNeeded(f"column(s) {integers} hold integers with a sign (+5), int64 to pandas")


def _holds(path: Path, needle: bytes) -> bool:
    """Whether the file holds ``needle`` (a single byte is a memchr over the mapped file)."""
    with open(path, "rb") as fh:
        if fh.seek(0, 2) == 0:
            return False
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            return mapped.find(needle) >= 0


def _to_pandas(table: pa.Table) -> pd.DataFrame:
    """The table as the C parser's frame: a column with no value is float64 NaN (object when
    the file has no rows, as pandas gives), bool with a gap is object True/False/NaN."""
    rows = table.num_rows
    if rows:
        nulls = [i for i, f in enumerate(table.schema) if pa.types.is_null(f.type)]
        for i in nulls:
            table = table.set_column(i, table.schema[i].name, pa.nulls(rows, pa.float64()))
    gapped_bools = [f.name for f in table.schema
                    if pa.types.is_boolean(f.type) and table.column(f.name).null_count]
    # One block per column: no copy to consolidate the columns (peak 571 MiB against 667 at 1M
    # rows x 20 columns); ``self_destruct`` saved 3 MiB more and is experimental in pyarrow.
    frame = table.to_pandas(split_blocks=True)
    for name in gapped_bools:
        values = frame[name].to_numpy(dtype=object, copy=True)
        values[pd.isna(values)] = np.nan
        frame[name] = values
    return frame
