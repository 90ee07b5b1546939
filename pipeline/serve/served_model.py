"""One exported model as the server holds it: checked and loaded by ``pipeline predict``'s own
code (``pipeline.predict.batch.open_model``), its request schema, and scoring of request rows.

A served score is computed by exactly the code ``pipeline predict`` runs
(``pipeline.scoring.model_folder.scores_with_counts`` on a frame typed as predict's reader types
it), so the numbers are the same; only the way rows arrive differs:

- JSON rows are validated against a schema built from the model's input columns and their
  fit-time types (``workflow.input_columns_``): numeric columns take JSON numbers, text columns
  JSON strings, and ``null`` anywhere, since a blank CSV cell is a missing value to predict too.
  NaN and infinity are refused (predict refuses infinity; NaN is not JSON), as is an unknown or
  missing field. The id column (when the model has one) is a field as well: it comes back with
  the scores.
- A column of whole numbers that was an integer column at fit is made ``int64`` again (a CSV
  reader would type it so); one with a missing value stays ``float64``, as in a CSV, and so
  does one with a number past int64 (``1e19``, ``-10**30``): a cast would wrap it to -2**63,
  and predict reads such a file column as numbers too (never as int64).
- A value that the feature ops cannot carry (a missing value no op fills, a number beyond the
  float32 range the models read) is a 422 naming its row and field as validation errors do
  (``rows[3].tenure``, 0-based), from the ``RowsError`` the workflow raises.
- Arrow and Parquet bodies are typed already and are checked like predict's input files
  (``check_types``, ``check_finite``).
- A CSV body is a file to predict: it is read by predict's own reader (``read_input``: the
  run's missing-value strings, dtypes and date formats, text columns as text) in the run's
  load's dialect, or the one the request gives (``?sep=;&decimal=,``, ``charset=``).
"""

from __future__ import annotations

import difflib
import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import Annotated, Any, Optional

from typing_extensions import TypedDict

import numpy as np
import pandas as pd
from pydantic import AllowInfNan, Field, Strict, TypeAdapter, ValidationError, with_config

from pipeline.backends import backend_for
from pipeline.backends.csv_dialect import CsvDialect, dialect_of
from pipeline.backends.few_rows import FEW_ROWS, ColumnFrame
from pipeline.core.dtypes import dtype_kind
from pipeline.core.errors import DataError, RowsError
from pipeline.metrics.drift import Counts
from pipeline.predict.batch import OpenedRun, check_types, open_model
from pipeline.scoring.input_rows import read_input
from pipeline.scoring.model_folder import score_values, scores_with_counts

log = logging.getLogger("pipeline")

# How a batch is scored (``ServedModel.path_for``).
FEW_ROWS_PATH, FRAME_PATH, DEVICE_PATH = "few_rows", "frame", "device"
# A device model scores batches of up to this many rows on its host copy, larger ones on the
# device. Measured on an H200 beside 16 cores (2026-12-04, the churn model's XGBoost and MLP,
# ``bench_serve.py --device gpu --calls``, wall time): the host copy's few-rows call took 1.7 to
# 1.9 ms at one row, 16 to 19 ms at 4,096 and 67 to 74 ms at 16,384; the device path 330 to
# 410 ms at every size. Its floor was cuDF aligning each new column of the one-hot op onto the
# frame's index (a merge per column, fixed since in ``GpuBackend.columns_frame`` and not yet
# measured again), so the host copy takes every batch up to the largest size measured.
DEVICE_FROM_ROWS = 16_384
# Batches the few-rows path may fail where pandas scores them before the model stops trying it.
FEW_ROWS_MISSES = 3

# The kind of a request field, from the column's fit-time dtype.
NUMBER, INTEGER, BOOLEAN, TEXT, DATETIME, ID = "number", "integer", "boolean", "text", "datetime", "id"
_MAX_REPORTED = 10          # errors listed in one 422 message (the count says how many more)


class RequestError(Exception):
    """A request the model cannot score: ``status`` (4xx) and a message naming the field and row."""

    def __init__(self, status: int, message: str, errors: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.errors = errors or []


@dataclass
class ServedModel:
    """A loaded, warmed model with what the server needs to validate and score rows for it."""

    opened: OpenedRun
    fields: dict[str, str]                       # request field -> kind (input columns, then the id)
    body_adapter: TypeAdapter
    request_schema: dict[str, Any]               # JSON schema of the request body (for OpenAPI)
    output_columns: list[str]                    # predictions' keys: predict's columns less `model`
    loaded_at: float = field(default_factory=time.time)
    few_rows_misses: int = 0                     # batches the few-rows path failed and pandas scored
    host: OpenedRun | None = None                # a device model's copy on the CPU, for batches of a few rows
    last_path: str = ""                          # how the last batch was scored (``path_for``)

    @property
    def run_id(self) -> str:
        return self.opened.run_dir.name

    @property
    def name(self) -> str:
        return self.opened.name

    @property
    def task(self) -> str:
        return self.opened.task.kind

    @property
    def id_column(self) -> str | None:
        return self.opened.saved.meta.get("id_column")

    @property
    def input_columns(self) -> dict[str, str]:
        return dict(self.opened.saved.workflow.input_columns_)

    # ------------------------------------------------------------------ requests
    def parse_json(self, body: bytes) -> tuple[dict[str, list[Any]], int, str]:
        """The columns of a JSON body (field -> values), its row count and orientation
        (``records`` or ``columns``); a ``RequestError`` naming every bad field and row."""
        try:
            data = self.body_adapter.validate_json(body)
        except ValidationError as exc:
            raise request_error(exc, self.fields) from None
        if ("rows" in data) == ("columns" in data):
            raise RequestError(422, "the body must have exactly one of 'rows' (a list of records) or 'columns' "
                                    "(a column name -> list of values)")
        if "rows" in data:
            rows = data["rows"]
            return {name: [row[name] for row in rows] for name in self.fields}, len(rows), "records"
        columns = data["columns"]
        lengths = {name: len(values) for name, values in columns.items()}
        n = lengths[next(iter(self.fields))]
        uneven = [name for name, length in lengths.items() if length != n]
        if uneven:
            raise RequestError(422, f"columns: every column needs the same number of values; {uneven} "
                                    f"differ from {next(iter(self.fields))}'s {n}")
        if n == 0:
            raise RequestError(422, "columns: an empty batch (no rows to score)")
        return columns, n, "columns"

    def frame_of(self, columns: Mapping[str, Sequence[Any]]) -> Any:
        """The backend frame of validated request columns, typed as predict's reader types a CSV."""
        frame = self.pandas_frame(columns)
        backend = self.opened.backend
        return frame if backend.name == "cpu" else backend.from_pandas(frame)

    def pandas_frame(self, columns: Mapping[str, Sequence[Any]]) -> pd.DataFrame:
        """``frame_of`` on the host: a pandas frame, whatever the model's device."""
        return pd.DataFrame(self._typed(columns, few_rows=False), copy=False)

    def few_rows_frame(self, columns: Mapping[str, Sequence[Any]]) -> ColumnFrame:
        """The same columns, typed the same way, as NumPy arrays (``backends.few_rows``): what
        a batch of at most ``FEW_ROWS`` rows is scored from on the CPU."""
        return ColumnFrame(self._typed(columns, few_rows=True))

    def _typed(self, columns: Mapping[str, Sequence[Any]], *, few_rows: bool) -> dict[str, Any]:
        """Each field's values in the dtype predict's reader gives its column: text as text
        (an object array of str and None on the few-rows path), numbers as float64 (int64 where
        the column was an integer column and every value is whole), booleans as bool (float64
        with NaN where one is missing), dates parsed in the run's format, the id as it came."""
        data: dict[str, Any] = {}
        for name, kind in self.fields.items():
            values = columns[name]
            if kind == TEXT:
                data[name] = np.array(values, dtype=object) if few_rows else pd.array(values, dtype="str")
            elif kind in (NUMBER, INTEGER):
                numbers = np.array(values, dtype="float64")          # null -> NaN
                if kind == INTEGER and whole_int64(numbers):
                    numbers = numbers.astype("int64")
                data[name] = numbers
            elif kind == BOOLEAN:
                flags = pd.Series(values, dtype="bool" if None not in values else "float64")
                data[name] = flags.to_numpy() if few_rows else flags
            elif kind == DATETIME:
                fmt = self.opened.read["dates"].get(name)
                try:
                    dates = pd.to_datetime(pd.Series(values, dtype="object"), format=fmt)
                except (ValueError, TypeError) as exc:
                    raise RequestError(422, f"{name}: not a date{f' in format {fmt}' if fmt else ''} ({exc})") from None
                data[name] = dates.to_numpy() if few_rows else dates
            else:                                # the id: echoed back as it came
                data[name] = np.array(values, dtype=object) if few_rows else pd.Series(values, dtype="object")
        return data

    def frame_of_table(self, frame: pd.DataFrame, *, source: str) -> Any:
        """A decoded Arrow/Parquet body's columns the model needs, checked as predict checks a file."""
        missing = [name for name in self.fields if name not in frame.columns]
        if missing:
            raise RequestError(422, f"{source}: missing column(s) {missing} that model {self.name} needs")
        if frame.empty:
            raise RequestError(422, f"{source}: an empty batch (no rows to score)")
        frame = frame[list(self.fields)].reset_index(drop=True)
        backend = self.opened.backend
        if backend.name != "cpu":
            frame = backend.from_pandas(frame)
        try:
            return check_types(frame, self.opened.saved.workflow.input_columns_, backend, source=Path(source),
                               fmt="table")
        except DataError as exc:
            raise RequestError(422, str(exc)) from None

    def csv_dialect(self, options: Mapping[str, str]) -> CsvDialect:
        """The run's CSV dialect with the request's ``sep``, ``encoding``, ``decimal`` and
        ``thousands`` (query parameters; the encoding also from the content type's charset); a
        400 naming the parameter when one is not a valid value or not one of those."""
        try:
            return dialect_of(dict(options), self.opened.read["dialect"])
        except ValueError as exc:
            raise RequestError(400, f"query parameter {exc}") from None

    def frame_of_csv(self, body: bytes, dialect: CsvDialect) -> Any:
        """A CSV body's columns the model needs, read and checked as ``pipeline predict`` reads
        a CSV file (through a temporary file: the same reader, on either engine)."""
        import tempfile

        if not body:
            raise RequestError(400, "the csv body is empty")
        read = self.opened.read
        with tempfile.TemporaryDirectory(prefix="pipeline-serve-") as folder:
            path = Path(folder) / "body.csv"
            path.write_bytes(body)
            try:
                frame = read_input([(path, "csv")], self.input_columns, self.opened.backend,
                                   id_column=self.id_column, na_values=read["na_values"] or None,
                                   dtypes=read["dtypes"], dates=read["dates"], dialect=dialect)
            except (DataError, ValueError, UnicodeError) as exc:
                message = str(exc).replace(str(path), "the csv body")
                raise RequestError(422, f"{message} (as {dialect.describe()})") from None
        if len(frame) == 0:
            raise RequestError(422, "the csv body: an empty batch (no rows to score)")
        return frame[list(self.fields)].reset_index(drop=True)

    # ------------------------------------------------------------------ scoring
    def score_frame(self, frame: Any) -> tuple[pd.DataFrame, Counts | None]:
        """predict's scores table (with ``model``) and the drift counts of ``frame``'s rows."""
        opened = self.opened
        self.last_path = FRAME_PATH if opened.backend.name == "cpu" else DEVICE_PATH
        return scores_with_counts(frame, opened.saved, opened.name, opened.threshold,
                                  backend_for(frame, opened.backend))

    def score_values(self, frame: Any, opened: OpenedRun | None = None) -> tuple[dict[str, Any], Counts | None]:
        """``score_frame``'s columns (no ``model``) as host arrays, without building a table;
        ``opened``: the model to score with (default the served one; the host copy for a few
        rows of a device model)."""
        opened = opened or self.opened
        return score_values(frame, opened.saved, opened.name, opened.threshold, backend_for(frame, opened.backend))

    def path_for(self, rows: int) -> str:
        """How a batch of ``rows`` is scored: ``few_rows`` (NumPy columns on the host, the CPU
        model or a device model's host copy), ``frame`` (pandas, a CPU model) or ``device``
        (the device's frame library and model)."""
        on_cpu = self.opened.backend.name == "cpu"
        host = on_cpu or self.host is not None
        if host and self.few_rows_misses < FEW_ROWS_MISSES and rows <= (FEW_ROWS if on_cpu else DEVICE_FROM_ROWS):
            return FEW_ROWS_PATH
        return FRAME_PATH if on_cpu else DEVICE_PATH

    def score_merged(self, columns: Mapping[str, Sequence[Any]], rows: int) -> tuple[dict[str, Any], Counts | None]:
        """Scores of validated request columns by ``path_for``'s path (``last_path`` says
        which): a few rows on NumPy columns on the host (the same ops and model, without a frame
        library's cost per call), more through the frame on the model's device. Where the
        few-rows path fails, pandas on the host scores the batch, so an error is the one it has
        always been, and a plugin op the NumPy columns cannot run still scores; after
        ``FEW_ROWS_MISSES`` such batches (not one odd request) pandas scores them all (logged)."""
        path = self.last_path = self.path_for(rows)
        host = self.host or self.opened
        if path == DEVICE_PATH:
            return self.score_values(self.frame_of(columns))
        if path == FRAME_PATH:
            return self.score_values(self.pandas_frame(columns), host)
        try:
            return self.score_values(self.few_rows_frame(columns), host)
        except Exception as exc:                  # noqa: BLE001 - pandas decides
            reason = exc
        scored = self.score_values(self.pandas_frame(columns), host)
        self.few_rows_misses += 1
        self.last_path = FRAME_PATH
        if self.few_rows_misses == FEW_ROWS_MISSES:
            log.warning("serve: model %s of run %s scores few rows through pandas from now on: the few-rows path "
                        "failed %d times where pandas did not (last: %s: %s)", self.name, self.run_id,
                        FEW_ROWS_MISSES, type(reason).__name__, reason)
        return scored

    def score_columns(self, parts: Sequence[Mapping[str, Sequence[Any]]]) -> tuple[list[dict[str, list[Any]]],
                                                                                   Counts | None]:
        """Score several requests' columns in ONE model call and split the results back: per
        part, output column -> values (the ``model`` column left out: it is the response's)."""
        if len(parts) == 1:
            merged = parts[0]
        else:
            merged = {name: list(chain.from_iterable(part[name] for part in parts)) for name in self.fields}
        scored, counts = self.score_merged(merged, sum(len(part[next(iter(self.fields))]) for part in parts))
        values = {name: scored[name].tolist() for name in self.output_columns}
        out, start = [], 0
        for part in parts:
            stop = start + len(part[next(iter(self.fields))])
            out.append({name: column[start:stop] for name, column in values.items()})
            start = stop
        return out, counts

    def warm(self) -> None:
        """Score one row, so the first request pays no lazy initialisation: zeros and empty text
        first, then all missing; a model that scores neither is served anyway (with a warning)."""
        for filler in ({NUMBER: 0.0, INTEGER: 0, BOOLEAN: False, TEXT: "", DATETIME: None, ID: "warm-up"},
                       {kind: None for kind in (NUMBER, INTEGER, BOOLEAN, TEXT, DATETIME, ID)}):
            try:
                row = {name: [filler[kind]] for name, kind in self.fields.items()}
                self.score_frame(self.frame_of(row))           # both paths: a large batch pays nothing first
                self.score_columns([row])
                return
            except Exception as exc:              # noqa: BLE001 - a warm-up row is no request
                reason = exc
        log.warning("serve: model %s of run %s could not score a warm-up row (%s); serving it anyway",
                    self.name, self.run_id, reason)

    def metadata(self) -> dict[str, Any]:
        """What /metadata reports about the model."""
        opened = self.opened
        return {
            "run_id": self.run_id, "model": self.name, "task": self.task, "threshold": opened.threshold,
            "id_column": self.id_column, "device": opened.backend.name,
            "input_columns": {name: {"dtype": dtype, "kind": self.fields[name]}
                              for name, dtype in self.input_columns.items()},
            "feature_columns": list(opened.saved.workflow.output_columns_),
            "output_columns": self.output_columns,
            "classes": opened.task.to_dict().get("classes") if self.task == "multiclass" else None,
            "metrics": (opened.metrics.get("models") or {}).get(self.name),
            "drift_reference": opened.saved.reference is not None,
            "loaded_at": self.loaded_at,
        }


def whole_int64(numbers: np.ndarray) -> bool:
    """Whether float64 ``numbers`` can be made int64 unchanged: no missing value, every one whole
    and within int64 (2**63 and past it would wrap to -2**63 in the cast)."""
    with np.errstate(invalid="ignore"):
        return bool(((numbers == np.floor(numbers)) & (numbers >= -INT64_LIMIT) & (numbers < INT64_LIMIT)).all())


INT64_LIMIT = 2.0 ** 63


def rows_request_error(exc: RowsError, orientation: str, fields: Mapping[str, str]) -> RequestError:
    """A 422 for values the features refused (``RowsError``), in the shape of the validation
    errors: ``rows[3].tenure: ...`` (``columns.tenure[3]`` for a body of columns), 0-based, with
    ``errors`` (``loc``, ``msg``, ``type``); a feature column that is not a field is named in
    the message at its row."""
    lines, detail = [], []
    for column, position, what in exc.rows:
        field_name = column if column in fields else None
        if orientation == "columns" and field_name is not None:
            where, loc = f"columns.{column}[{position}]", ["columns", column, position]
        else:
            where = f"rows[{position}]" + (f".{column}" if field_name is not None else "")
            loc = ["rows", position, *([column] if field_name is not None else [])]
        message = f"field '{column}': {what}" if field_name is not None else f"feature column '{column}': {what}"
        lines.append(f"{where}: {message}")
        detail.append({"loc": loc, "msg": message, "type": "value_error"})
    if not lines:                                 # rebuilt from its message (another process): as it was
        return RequestError(422, str(exc))
    more = f" (and {len(lines) - _MAX_REPORTED} more)" if len(lines) > _MAX_REPORTED else ""
    return RequestError(422, "; ".join(lines[:_MAX_REPORTED]) + more, detail)


def load_served_model(run: str | Path, *, runs_dir: str | Path = "runs", pipeline: str | None = None,
                      model: str | None = None, device: str | None = None,
                      threshold: float | None = None, warm: bool = True) -> ServedModel:
    """Check and load ``run``'s model as ``pipeline predict`` does, build its request schema and
    warm it by scoring one row."""
    opened = open_model(run, model=model, runs_dir=runs_dir, pipeline=pipeline, device=device, threshold=threshold,
                        argument="RUN")
    fields = request_fields(opened.saved.workflow.input_columns_, opened.saved.meta.get("id_column"))
    adapter, schema = body_schema(fields, title=f"{opened.name} rows")
    served = ServedModel(opened=opened, fields=fields, body_adapter=adapter, request_schema=schema,
                         output_columns=[], host=host_copy(opened))
    empty = served.frame_of({name: [] for name in fields})
    table, _ = served.score_frame(empty)
    served.output_columns = [c for c in table.columns if c != "model"]
    if warm:
        served.warm()
    return served


def host_copy(opened: OpenedRun) -> OpenedRun | None:
    """A device model's copy loaded on the CPU (None for a CPU model, or where the model's
    files do not load on the CPU: every batch then goes to the device)."""
    if opened.backend.name == "cpu":
        return None
    from pipeline.scoring.run_models import open_run     # as predict opens it (imported here: it reads configs)

    try:
        return open_run(opened.run_dir, model=opened.name, device="cpu", threshold=opened.threshold)
    except Exception as exc:  # noqa: BLE001 - the device serves every batch then
        log.warning("serve: model %s of run %s has no CPU copy for small batches (%s: %s); every batch goes to "
                    "the %s", opened.name, opened.run_id, type(exc).__name__, exc, opened.backend.name)
        return None


# ------------------------------------------------------------------ the schema
def request_fields(fitted: Mapping[str, str], id_column: str | None) -> dict[str, str]:
    """Field -> kind: the workflow's input columns in their order, then the id column."""
    fields = {name: field_kind(dtype) for name, dtype in fitted.items()}
    if id_column and id_column not in fields:
        fields[id_column] = ID
    return fields


def field_kind(dtype: str) -> str:
    """The request field's kind of a column fitted as ``dtype`` (the package's one dtype rule,
    ``pipeline.core.dtypes``): anything that is not a bool, number or date is sent as text."""
    return _FIELD_KIND.get(dtype_kind(dtype), TEXT)


_FIELD_KIND = {"bool": BOOLEAN, "integer": INTEGER, "float": NUMBER, "date": DATETIME}


_FINITE = Annotated[float, Strict(), AllowInfNan(False)]
_TYPES: dict[str, Any] = {
    NUMBER: Optional[_FINITE], INTEGER: Optional[_FINITE], BOOLEAN: Optional[Annotated[bool, Strict()]],
    TEXT: Optional[Annotated[str, Strict()]], DATETIME: Optional[Annotated[str, Strict()]],
    ID: Optional[Annotated[str, Strict()] | Annotated[int, Strict()]],
}


def body_schema(fields: Mapping[str, str], *, title: str) -> tuple[TypeAdapter, dict[str, Any]]:
    """The pydantic validator of a /predict body and its JSON schema: ``{"rows": [record, ...]}``
    or ``{"columns": {field: [values]}}``, every field required, unknown ones refused."""
    forbid = with_config({"extra": "forbid", "title": title})
    row = forbid(TypedDict("Row", {name: _TYPES[kind] for name, kind in fields.items()}))       # type: ignore[misc]
    columns = forbid(TypedDict("Columns", {name: list[_TYPES[kind]]                                # type: ignore[misc]
                                           for name, kind in fields.items()}))
    body = with_config({"extra": "forbid"})(TypedDict("PredictRequest", {                          # type: ignore[misc]
        "rows": Annotated[list[row], Field(min_length=1)], "columns": columns}, total=False))
    adapter = TypeAdapter(body)
    return adapter, adapter.json_schema(ref_template="#/components/schemas/{model}")


def request_error(exc: ValidationError, fields: Mapping[str, str]) -> RequestError:
    """A 422 (400 for a body that is not JSON) whose message names each bad field and row."""
    errors = exc.errors(include_url=False, include_context=False)
    if any(e["type"] == "json_invalid" for e in errors):
        return RequestError(400, f"the body is not JSON ({errors[0]['msg']})")
    if errors and not errors[0]["loc"] and errors[0]["type"] in ("dict_type", "model_type"):
        return RequestError(422, "the body must be a JSON object with 'rows' or 'columns'")
    top = {e["loc"][0] for e in errors if len(e["loc"]) == 1 and e["type"] == "extra_forbidden"}
    if top and top <= set(fields) | {"id"} and all(len(e["loc"]) == 1 for e in errors):
        # A record sent as the body itself: not one "extra input" per field it has.
        return RequestError(422, "the body is one record; the body must have exactly one of 'rows' (a list of "
                                 "records: {\"rows\": [{...}]}) or 'columns' (a column name -> list of values)")
    lines, detail, seen = [], [], set()
    # Unknown and mistyped fields first (a misspelt name is also a missing one: the cause first).
    for error in sorted(errors, key=lambda e: e["type"] == "missing"):
        where, message = describe_error(error, fields)
        if (where, message) in seen:                 # one line per field of an id's str | int union
            continue
        seen.add((where, message))
        detail.append({"loc": list(error["loc"]), "msg": message, "type": error["type"]})
        lines.append(f"{where}: {message}")
    more = f" (and {len(lines) - _MAX_REPORTED} more)" if len(lines) > _MAX_REPORTED else ""
    return RequestError(422, "; ".join(lines[:_MAX_REPORTED]) + more, detail)


def describe_error(error: Mapping[str, Any], fields: Mapping[str, str]) -> tuple[str, str]:
    """Where (``rows[3].tenure``, ``columns.tenure[2]``) and what, in the schema's words."""
    loc = list(error["loc"])
    position = {"rows": 2, "columns": 1}.get(loc[0] if loc else None)
    if position is not None and len(loc) > position + 1 and loc[-1] in ("str", "int"):
        loc = loc[:-1]                                   # the branch of the id's union
    where = "".join(f"[{part}]" if isinstance(part, int) else (f".{part}" if i else str(part))
                    for i, part in enumerate(loc))
    field_name = loc[position] if position is not None and len(loc) > position else None
    kind = error["type"]
    if kind == "extra_forbidden" and field_name is not None:
        close = difflib.get_close_matches(field_name, list(fields), n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        return where, f"unknown field '{field_name}' (not an input column of the model){hint}"
    if kind == "missing" and field_name is not None:
        return where, f"field '{field_name}' is missing (send null for a missing value)"
    if kind == "too_short" and loc == ["rows"]:
        return where, "an empty batch (no rows to score)"
    if field_name in fields and kind in ("finite_number", "float_type", "bool_type", "string_type", "int_type"):
        expected = {NUMBER: "a finite number or null", INTEGER: "a finite number or null",
                    BOOLEAN: "true, false or null", TEXT: "a string or null", DATETIME: "a date string or null", ID: "a string, an integer or null"}
        got = json.dumps(error.get("input"), default=str)[:40]
        return where, f"field '{field_name}' must be {expected[fields[field_name]]}, got {got}"
    return where, str(error["msg"])
