"""Reading rows to score as a run's model expects them: the files of an input, their columns
and types checked against those the feature workflow was fitted on, and read with the options
the run's load used (missing-value strings, dtypes, date formats).

Shared by ``pipeline predict`` and the ``promote`` stage's ``holdout:`` file, so a labelled
holdout is read exactly as new rows to score are: a schema problem names the file and every
offending column before anything is scored.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pipeline.backends.csv_dialect import DEFAULT_DIALECT, CsvDialect, dialect_of
from pipeline.backends.compressed import plain_name
from pipeline.backends.input_files import NAME_FORMATS, name_format
from pipeline.core.dtypes import is_number_or_bool
from pipeline.core.errors import DataError, input_not_found
from pipeline.runs import layout
from pipeline.runs.record import RunManifest

# What a file's suffix says it is: as a load reads it (.txt and .tsv are CSV in the run's dialect).
INPUT_SUFFIXES = NAME_FORMATS
# The files of a folder that are read: not .txt, which in a folder of parts is most often a note.
FOLDER_SUFFIXES = {suffix: fmt for suffix, fmt in INPUT_SUFFIXES.items() if suffix != ".txt"}

__all__ = [
    "INPUT_SUFFIXES", "check_finite", "check_headers", "check_types", "input_files",
    "read_input", "training_read_options",
]


def input_files(input: str | os.PathLike[str]) -> list[tuple[Path, str]]:
    """(file, format) pairs: the file itself, or a folder's CSV and Parquet files in name order
    (subfolders and other files are not read)."""
    path = Path(input)
    if path.is_dir():
        parts = sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith("."))
        files = [(p, fmt) for p in parts if (fmt := name_format(p)) and _folder_part(p)]
        if not files:
            raise DataError(f"input folder {path} holds no files named {', '.join(FOLDER_SUFFIXES)} (or those "
                            "names compressed: .csv.gz)")
        return files
    if not path.is_file():
        raise input_not_found(path)
    fmt = name_format(path)
    if fmt is None:
        raise DataError(f"input {path}: cannot tell the format from the name (expected {', '.join(INPUT_SUFFIXES)}, "
                        "or one of those compressed: .csv.gz)")
    return [(path, fmt)]


def _folder_part(path: Path) -> bool:
    """Whether a folder's file is a part to read: not a ``.txt``, most often a note there."""
    return not plain_name(path).lower().endswith(".txt")


def read_input(files: list[tuple[Path, str]], fitted: dict[str, str], backend: Any, *,
               id_column: str | None = None, na_values: Sequence[str] | None = None,
               dtypes: Mapping[str, str] | None = None, dates: Mapping[str, str | None] | None = None,
               dialect: CsvDialect = DEFAULT_DIALECT) -> Any:
    """Read and check every file, then concatenate them (in order).

    All headers are checked before any file is read in full, then each file's types, so a
    schema problem is reported before any scoring and names the file. Only the columns the
    workflow needs (and the id) are read; extra columns are ignored. ``dtypes``: the run's
    load dtypes (those of columns read here apply); ``dates``: the run's load date formats (the
    same: new rows' dates parse as the training rows' did); ``dialect``: how the CSV files are
    written (the run's load's, unless the caller was told otherwise).
    """
    needed = check_headers(files, fitted, id_column, dialect)
    text_columns = csv_text_columns(fitted, id_column, dtypes)
    run_dtypes = {c: t for c, t in (dtypes or {}).items() if c in needed}
    run_dates = {c: f for c, f in (dates or {}).items() if c in needed} or None
    frames = []
    for path, fmt in files:
        types = {**run_dtypes, **({c: "str" for c in text_columns} if fmt == "csv" else {})} or None
        frame = backend.read(path, format=fmt, columns=needed, dtypes=types,
                             na_values=list(na_values) if na_values else None, dates=run_dates, dialect=dialect)
        frames.append(check_types(frame, fitted, backend, source=path, fmt=fmt))
    if id_column in text_columns and id_column not in fitted:
        read_as_text = [f for f, (_, fmt) in zip(frames, files) if fmt == "csv"]
        if read_as_text and all(plain_integers(f[id_column]) for f in read_as_text):
            for f in read_as_text:
                f[id_column] = f[id_column].astype("int64")
    return frames[0] if len(frames) == 1 else backend.frame.concat(frames, ignore_index=True)


# An integer as int64 writes it back: no sign but a minus, no leading zero, at most 18 digits.
PLAIN_INTEGER = r"^(0|-?[1-9][0-9]{0,17})$"


def plain_integers(ids: Any) -> bool:
    """Whether ids read as text are integers that lose nothing as int64: every id present and
    written as int64 writes it back (``1800``, not ``0001800`` or ``+5``). Those become numbers
    again, as a reader infers them, so scores join to the run's own predictions; any other id
    stays as written. Every CSV file of one input is decided together: one type for all."""
    return bool(len(ids)) and not bool(ids.isna().any()) and bool(ids.str.match(PLAIN_INTEGER).all())


def csv_text_columns(fitted: Mapping[str, str], id_column: str | None,
                     dtypes: Mapping[str, str] | None = None) -> list[str]:
    """The columns new rows read as text from CSV: those text at fit (digits-only categories
    would otherwise become numbers and silently match no category) and the id, unless the run's
    load gave it a dtype. An id is a label, kept as written: read as a number, ``0001800``
    would come back as ``1800`` and a 19-digit id with a gap as ``1.2345678901234568e+18``, and
    the scores could not be joined back to their rows (``plain_integers`` makes plain integers
    numbers again)."""
    text = [c for c, dtype in fitted.items() if not is_number_or_bool(dtype)]
    if id_column and id_column not in fitted and id_column not in (dtypes or {}):
        text.append(id_column)
    return text


def check_headers(files: list[tuple[Path, str]], fitted: dict[str, str], id_column: str | None,
                  dialect: CsvDialect = DEFAULT_DIALECT) -> list[str]:
    """The columns to read; every file must have them (the first file missing any is named; a
    CSV header that ``dialect``'s separator leaves as one column says which separator to set)."""
    needed = list(fitted) + ([id_column] if id_column and id_column not in fitted else [])
    for path, fmt in files:
        present = set(_header(path, fmt, dialect))
        missing = [c for c in needed if c not in present]
        if missing:
            raise DataError(f"{path}: missing column(s) {missing} that the model needs"
                            + (f" (id column: {id_column})" if id_column in missing else ""))
        nested = _nested(path, fmt, list(fitted))
        if nested:
            shown = ", ".join(f"'{c}' ({t})" for c, t in nested.items())
            raise DataError(f"{path}: column(s) {shown} hold nested values (lists, structs or maps); the model was "
                            f"trained on {', '.join(f'{c} as {fitted[c]}' for c in nested)}: write each as one value")
    return needed


def _nested(path: Path, fmt: str, columns: list[str]) -> dict[str, str]:
    from pipeline.backends.input_files import nested_columns

    return nested_columns(path, columns) if fmt == "parquet" else {}


# How new rows' separator is set where they are scored (not the run's load stage).
SEP_FIX = ("pass --sep {sep} to pipeline predict (sep={sep} as a query parameter of pipeline serve; a promotion "
           "gate's holdout is read with the run's load sep)")


def _header(path: Path, fmt: str, dialect: CsvDialect = DEFAULT_DIALECT) -> list[str]:
    """The names as the file is read (a CSV header's empty name is ``Unnamed: <i>``, as at
    training; a repeated name is refused when the file is read)."""
    from pipeline.backends.headers import pandas_names
    from pipeline.backends.input_files import check_separator, read_header

    names = read_header(path, fmt, dialect)
    if fmt == "csv":
        check_separator(path, names, dialect, option=SEP_FIX)
        names = pandas_names(names)
    return names


def check_types(frame: Any, fitted: dict[str, str], backend: Any, *, source: Path, fmt: str) -> Any:
    """A column numeric at fit must be numeric now, and a text column text; a column with no
    values at all is accepted and cast to its fit-time kind."""
    from pipeline.features.ops.op_support import values_not_numbers

    problems, blanks, commas = [], False, False
    for column, fit_dtype in fitted.items():
        series = frame[column]
        numeric_now = backend.is_numeric(series)
        if int(backend.to_host(series.notna().sum())) == 0:
            # No values at all (an empty file, a column left blank): nothing can mismatch; give
            # it the fit-time kind so the ops see the type they were fitted on.
            frame[column] = series.astype("float64" if is_number_or_bool(fit_dtype) else "str")
        elif is_number_or_bool(fit_dtype):
            if numeric_now:
                continue
            bad, present, first = values_not_numbers(series, backend)
            if not bad and fmt == "csv":
                # Every value is a number, yet the reader kept text: integers past int64
                # (99999999999999999999), which it keeps as text; scored as the floats they are,
                # as the same value written 1e20 is (and as the server scores it).
                frame[column] = series.astype("float64")
                continue
            detail = (f": {bad:,} of its {present:,} values are not numbers (the first: {first!r})"
                      if bad and bad < present else
                      f": none of its values is a number (the first: {first!r})" if bad else "")
            problems.append(f"'{column}' is {series.dtype} now, {fit_dtype} at fit{detail}")
            blanks = blanks or (first is not None and not str(first).strip())
            commas = commas or (first is not None and re.fullmatch(r"[+-]?\d+,\d+", str(first).strip()) is not None)
        elif numeric_now:
            problems.append(f"'{column}' is {series.dtype} now, {fit_dtype} (text) at fit")
    if problems:
        hint = (" (a placeholder such as ' ' makes a numeric CSV column text: pass --na-values ' ')"
                if blanks and fmt == "csv" else
                " (numbers written with a decimal comma, 79,85: pass --decimal ',' to pipeline predict, "
                "decimal=, as a query parameter of pipeline serve)" if commas and fmt == "csv" else "")
        raise DataError(f"{source}: column type(s) differ from training: {'; '.join(problems)}{hint}")
    check_finite(frame, [c for c, dtype in fitted.items() if is_number_or_bool(dtype)], backend, source=source)
    return frame


def check_parquet_types(files: Sequence[tuple[Path, str]], fitted: dict[str, str]) -> None:
    """Every Parquet file's schema against the fit-time kinds, before a partitioned read: Dask
    takes a column's type from the first file, so a later file whose column is text where numbers
    were failed mid-scoring with "could not convert string to float" and no file or column."""
    from pipeline.backends.input_files import parquet_column_types

    for path, fmt in files:
        if fmt != "parquet":
            continue
        problems = []
        for column, now in parquet_column_types(path, list(fitted)).items():
            was = fitted[column]
            if now != "object" and is_number_or_bool(was) != is_number_or_bool(now):
                problems.append(f"'{column}' is {now} now, {was} at fit")
            elif now == "object" and is_number_or_bool(was):
                problems.append(f"'{column}' is text now, {was} at fit")
        if problems:
            raise DataError(f"{path}: column type(s) differ from training: {'; '.join(problems)}")


def check_finite(frame: Any, columns: list[str], backend: Any, *, source: Path) -> None:
    """No infinity in a numeric column ("inf", "-Infinity" in a CSV read as numbers): training
    refused them too, and a model scores them as nonsense or not at all."""
    from pipeline.features.workflow import first_infinite_row, infinite_columns

    for column in infinite_columns(frame, columns, backend):
        row = first_infinite_row(frame[column], backend)
        raise DataError(f"{source}: column '{column}' holds infinite values (first at row {row}); the model was "
                        "trained on finite numbers: replace them, or leave them blank where the features fill "
                        "missing values")


def training_read_options(run_dir: Path, manifest: RunManifest, model: str) -> dict[str, Any]:
    """How the run read the rows ``model`` was trained on: the ``read_options`` its reading
    stages recorded (``na_values``, ``dtypes``), taken from the stages upstream of the model's
    in the run's config (every stage when that cannot be told), merged in name order. Values
    that are not the expected types are ignored: the manifest is data, not trusted code."""
    upstream = _upstream_stages(run_dir, model) or set(manifest.stages)
    na_values: list[str] = []
    dtypes: dict[str, str] = {}
    dates: dict[str, str | None] = {}
    dialects: set[CsvDialect] = set()
    for stage in sorted(upstream):
        record_ = manifest.stages.get(stage)
        options = record_.facts.get("read_options") if record_ is not None else None
        if not isinstance(options, dict):
            continue
        dialects.add(_recorded_dialect(options))
        values = options.get("na_values")
        na_values += [v for v in values if isinstance(v, str) and v not in na_values] if isinstance(values, list) else []
        types = options.get("dtypes")
        if isinstance(types, dict):
            dtypes.update({k: v for k, v in types.items() if isinstance(k, str) and isinstance(v, str)})
        formats = options.get("dates")
        if isinstance(formats, dict):
            dates.update({k: v for k, v in formats.items() if isinstance(k, str) and (v is None or isinstance(v, str))})
    # One CSV dialect among the reads upstream is the one new rows are read with; reads of
    # different dialects leave the default (the caller's options say which).
    dialect = dialects.pop() if len(dialects) == 1 else DEFAULT_DIALECT
    return {"na_values": na_values, "dtypes": dtypes, "dates": dates, "dialect": dialect}


def _recorded_dialect(options: Mapping[str, Any]) -> CsvDialect:
    """The CSV dialect a load recorded in its read options (keys left out: the default's); a
    record that does not check out is ignored, as the rest of a record of the wrong type."""
    given = {key: options[key] for key in ("sep", "encoding", "decimal", "thousands") if isinstance(options.get(key), str)}
    try:
        return dialect_of(given)
    except ValueError:
        return DEFAULT_DIALECT


def _upstream_stages(run_dir: Path, stage: str) -> set[str]:
    """``stage`` and every stage it reads from, directly or not, in the run's config.yaml;
    empty when the config cannot be read or does not name ``stage``."""
    import yaml

    try:
        data = yaml.safe_load((run_dir / layout.CONFIG).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return set()
    stages = data.get("stages") if isinstance(data, dict) else None
    if not isinstance(stages, dict) or stage not in stages:
        return set()
    seen, todo = set(), [stage]
    while todo:
        name = todo.pop()
        if name in seen or not isinstance(stages.get(name), dict):
            continue
        seen.add(name)
        inputs = stages[name].get("inputs")
        inputs = list(inputs.values()) if isinstance(inputs, dict) else inputs      # inputs by role
        todo += [i for i in inputs if isinstance(i, str)] if isinstance(inputs, list) else []
    return seen

