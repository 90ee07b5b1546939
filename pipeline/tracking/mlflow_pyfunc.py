"""An exported model folder as an MLflow pyfunc model, and the registry version of a run's best.

``log_pyfunc`` logs one exported model folder (``pipeline.scoring.model_folder``) to an MLflow
run as a pyfunc model, so that ``mlflow.pyfunc.load_model(uri).predict(frame)`` gives the table
``pipeline predict`` writes for the same rows (the id column when the input has it, ``score``
/ ``score_<class>`` / ``prediction``, ``model``; a binary model's threshold is the one the run's
evaluation recorded), and ``mlflow models serve`` answers ``/invocations`` with it.

Why "models from code" and not a pickled instance: MLflow runs ``pyfunc_entry.py`` (a file of
this package, copied into the model) to get the ``ExportedModel`` object, and that object reads
the model folder, logged as an artifact: JSON, and the model file in the project's own formats,
none of which runs code when loaded. A cloudpickled ``PythonModel`` would be unpickled, running
whatever the pickle says, on every load. The cost: the loading environment needs the
``pipeline`` package (the model's requirements pin it).

What is logged per model, with MLflow's client only (never its global tracking URI or active
run, so a user's own MLflow code in the process is not disturbed): a LoggedModel of the MLflow
run, whose artifacts are MLflow's model folder (``MLmodel``, the entry file, the requirements,
the input example) with the exported folder under ``artifacts/``; a signature whose inputs are
the feature workflow's input columns with the types they were fitted on (and the id column,
optional, of any type) and whose outputs are the table's columns; ``model_config`` holds the
model's name and threshold.

The input example is made from the fitted workflow (no training rows are kept anywhere a hook
can read them): a category or a number the workflow's fitted state holds for each column (the
first categories of an encoding, a mean or a median; from the first op that names the column),
else a neutral value of the column's type.
It is scored before it is logged; one that does not score is left out (the signature stays).

MLflow is imported at the top: only the MLflow hook and MLflow's own loading import this module.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.metadata
import logging
import math
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import mlflow
import pandas as pd
from mlflow.entities import LoggedModelOutput, LoggedModelStatus
from mlflow.exceptions import MlflowException
from mlflow.models import Model, ModelSignature
from mlflow.pyfunc import PythonModel
from mlflow.types.schema import AnyType, ColSpec, DataType, ParamSchema, ParamSpec, Schema

from pipeline.backends import backend_for
from pipeline.core.library_logs import adopt_library_loggers
from pipeline.core.dtypes import dtype_kind
from pipeline.scoring.model_folder import SavedModel, load_model, model_format_of, scores_table
from pipeline.version import __version__

log = logging.getLogger("pipeline")
adopt_library_loggers()        # MLflow's import gave its loggers a text handler of their own

# The file MLflow runs to get the model object (copied into every logged model).
ENTRY_FILE = Path(__file__).with_name("pyfunc_entry.py")
# The key of the exported model folder among the pyfunc model's artifacts.
MODEL_ARTIFACT = "model_folder"
EXAMPLE_ROWS = 3
# Libraries every model's scoring imports (pinned at their installed versions with the model's own).
_BASE_LIBRARIES = ("numpy", "pandas", "pyarrow")


class ExportedModel(PythonModel):
    """An exported model folder behind MLflow's pyfunc interface: raw rows in, the prediction
    table of ``pipeline predict`` out."""

    def __init__(self) -> None:
        self.saved: SavedModel | None = None
        self.name = ""
        self.threshold: float | None = None

    def load_context(self, context: Any) -> None:
        """Load the model folder the pyfunc model carries (``MODEL_ARTIFACT``), on the CPU
        (MLflow hands pandas frames; a model exported on a GPU scores on the CPU as with
        ``pipeline predict --device cpu``)."""
        config = dict(context.model_config or {})
        self.saved = load_model(context.artifacts[MODEL_ARTIFACT], device="cpu")
        self.name = str(config.get("model") or self.saved.name)
        threshold = config.get("threshold")
        self.threshold = float(threshold) if threshold is not None else None

    def predict(self, context: Any, model_input: pd.DataFrame, params: dict[str, Any] | None = None) -> pd.DataFrame:
        """The prediction table for ``model_input``'s rows (``scores_table``); a binary model's
        threshold is the logged one unless ``params`` gives ``threshold``."""
        if self.saved is None:
            raise MlflowException("the model was not loaded (load_context was not called)")
        saved = self.saved
        frame = as_scoring_frame(pd.DataFrame(model_input), saved)
        threshold = self.threshold
        if params and params.get("threshold") is not None and saved.task.kind == "binary":
            threshold = float(params["threshold"])
        id_column = saved.meta.get("id_column")
        if id_column and id_column not in frame:         # the id is optional: the table goes without it
            saved = dataclasses.replace(saved, meta={**saved.meta, "id_column": None})
        return scores_table(frame, saved, self.name, threshold, backend_for(frame))


def as_scoring_frame(frame: pd.DataFrame, saved: SavedModel) -> pd.DataFrame:
    """The rows as the workflow expects them: MLflow's schema check hands text as Python
    objects and an id of any type as objects; text columns become the ``str`` type ``pipeline
    predict`` reads, the id column its own type again (ints stay ints)."""
    frame = frame.copy()
    for column, dtype in saved.workflow.input_columns_.items():
        if column in frame and column_type(dtype) == DataType.string and frame[column].dtype == object:
            values = frame[column]
            frame[column] = values.astype("str").where(values.notna(), None)     # missing stays missing
    id_column = saved.meta.get("id_column")
    if id_column and id_column in frame and frame[id_column].dtype == object:
        frame[id_column] = frame[id_column].infer_objects()
    return frame.reset_index(drop=True)


# ------------------------------------------------------------------ signature and example
def column_type(dtype: str) -> DataType:
    """MLflow's type of a column the workflow was fitted on as ``dtype`` (a pandas dtype name):
    floats double (a float32 column accepts float64 rows, as ``pipeline predict`` does), ints
    long, booleans boolean, dates datetime, anything else text."""
    return _MLFLOW_TYPE.get(dtype_kind(dtype), DataType.string)


# MLflow's type of each kind of dtype (``pipeline.core.dtypes``); any other is text.
_MLFLOW_TYPE = {"bool": DataType.boolean, "integer": DataType.long, "float": DataType.double,
                "date": DataType.datetime}


def input_schema(saved: SavedModel) -> Schema:
    """The workflow's input columns with their fitted types, all required, and the id column
    (optional, any type: it is passed through to the output when given)."""
    columns = [ColSpec(column_type(dtype), column) for column, dtype in saved.workflow.input_columns_.items()]
    id_column = saved.meta.get("id_column")
    if id_column and id_column not in saved.workflow.input_columns_:
        columns.append(ColSpec(AnyType(), id_column, required=False))
    return Schema(columns)


def output_schema(table: pd.DataFrame, id_column: str | None) -> Schema:
    """The prediction table's columns as MLflow types (the id of any type, as at the input)."""
    import warnings

    from mlflow.types.utils import _infer_schema

    with warnings.catch_warnings():       # "integer columns cannot hold missing values": an output's can't
        warnings.simplefilter("ignore", UserWarning)
        inferred = _infer_schema(table.drop(columns=[id_column]) if id_column in table else table)
    columns = [ColSpec(AnyType(), id_column)] if id_column in table else []
    return Schema(columns + list(inferred.inputs))


def example_rows(saved: SavedModel, rows: int = EXAMPLE_ROWS) -> pd.DataFrame:
    """A few rows of the model's input made from its fitted workflow (module docstring): for
    each column, values its fitted state holds, cycled, else a neutral value of its type."""
    seen = state_values(saved.workflow.to_dict().get("ops") or [], set(saved.workflow.input_columns_))
    data: dict[str, Any] = {}
    id_column = saved.meta.get("id_column")
    if id_column and id_column not in saved.workflow.input_columns_:
        data[id_column] = [f"example-{i}" for i in range(rows)]
    for column, dtype in saved.workflow.input_columns_.items():
        kind = column_type(dtype)
        values = [value for value in (_as_kind(v, kind) for v in seen.get(column, [])) if value is not None]
        if not values:
            values = [_NEUTRAL[kind]]
        series = pd.Series([values[i % len(values)] for i in range(rows)])
        data[column] = series.astype(_PANDAS_TYPE[kind]) if kind in _PANDAS_TYPE else series
    return pd.DataFrame(data)


_NEUTRAL: dict[DataType, Any] = {DataType.double: 0.0, DataType.long: 0, DataType.boolean: False,
                                 DataType.datetime: pd.Timestamp("2024-01-01"), DataType.string: "example"}
_PANDAS_TYPE = {DataType.double: "float64", DataType.long: "int64", DataType.boolean: "bool",
                DataType.datetime: "datetime64[ns]"}


def state_values(ops: list[Any], columns: set[str]) -> dict[str, list[Any]]:
    """Column -> the plain values the first op whose fitted state names it holds for it: any
    state entry that maps column names to a value or a list of values (categories, a mean and a
    standard deviation, a fill value). The first op, because later ones see values already
    transformed (a mean after ``log1p``). Ops are not asked by name: the state is data."""
    found: dict[str, list[Any]] = {}
    for entry in ops:
        state = entry.get("state") if isinstance(entry, dict) else None
        this_op: dict[str, list[Any]] = {}
        for part in (state.values() if isinstance(state, dict) else ()):
            if not isinstance(part, dict):
                continue
            for column, value in part.items():
                if column in columns and column not in found:
                    this_op.setdefault(column, []).extend(_leaves(value))
        found.update({column: values for column, values in this_op.items() if values})
    return found


def _leaves(value: Any) -> Iterator[Any]:
    if isinstance(value, (list, tuple)):
        for item in value[:EXAMPLE_ROWS]:
            if isinstance(item, (str, int, float, bool)):
                yield item
    elif isinstance(value, (str, int, float, bool)):
        yield value


def _as_kind(value: Any, kind: DataType) -> Any:
    """``value`` as a value of ``kind``; None when it is not one (text for a number column)."""
    if kind == DataType.string:
        return value if isinstance(value, str) and value else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    if kind == DataType.double:
        return float(value)
    if kind == DataType.long:
        return int(round(value))
    return None


# ------------------------------------------------------------------ requirements
@functools.cache
def _owners() -> Mapping[str, list[str]]:
    """Import name -> the distributions that install it: once per process (reading every
    installed distribution's file list costs about a CPU second; each model needs it)."""
    return importlib.metadata.packages_distributions()


def requirements(saved: SavedModel) -> list[str]:
    """pip requirements of the logged model: this package and MLflow at their versions, and
    the installed distributions of the libraries scoring imports (the model format's
    ``libraries``), pinned, so ``mlflow models serve`` builds the environment that scored."""
    pins = [f"pipeline=={__version__}", f"mlflow=={mlflow.__version__}"]
    owners = _owners()
    libraries = [*_BASE_LIBRARIES, *model_format_of(saved.meta, saved.name).libraries]
    for module in dict.fromkeys(libraries):
        for distribution in owners.get(module, [])[:1]:
            try:
                pin = f"{distribution}=={importlib.metadata.version(distribution)}"
            except importlib.metadata.PackageNotFoundError:
                continue
            if pin not in pins:
                pins.append(pin)
    return pins


# ------------------------------------------------------------------ logging and the registry
def log_pyfunc(client: Any, *, experiment_id: str, run_id: str, folder: Path, name: str,
               threshold: float | None, tags: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Log the exported model ``folder`` to MLflow run ``run_id`` as a pyfunc model named
    ``name``; returns ``{"model_id", "uri", "location"}`` (``models:/<model_id>``, and where its
    artifacts are). ``threshold``: the
    binary model's (None for other tasks). Raises what MLflow raises (the hook catches it)."""
    logged = client.create_logged_model(experiment_id, name=name, source_run_id=run_id,
                                        tags={"pipeline.model": name, **dict(tags or {})}, model_type="pipeline")
    try:
        with tempfile.TemporaryDirectory(prefix="pipeline-pyfunc-") as tmp:
            local = Path(tmp) / "model"
            described = Model(artifact_path=logged.artifact_location, model_uuid=logged.model_id, run_id=run_id,
                              model_id=logged.model_id)
            save_pyfunc(folder, local, name=name, threshold=threshold, mlflow_model=described)
            client.log_model_artifacts(logged.model_id, str(local))
        client.finalize_logged_model(logged.model_id, LoggedModelStatus.READY)
    except BaseException:
        try:
            client.finalize_logged_model(logged.model_id, LoggedModelStatus.FAILED)
        except Exception:  # noqa: BLE001 - the first error is the one to report
            pass
        raise
    client.log_outputs(run_id, [LoggedModelOutput(logged.model_id, step=0)])
    return {"model_id": logged.model_id, "uri": f"models:/{logged.model_id}", "location": logged.artifact_location}


def save_pyfunc(folder: Path, path: Path, *, name: str, threshold: float | None,
                mlflow_model: Model | None = None) -> None:
    """The exported model ``folder`` as an MLflow pyfunc model folder at ``path`` (what
    ``log_pyfunc`` logs, and what ``mlflow models serve -m PATH`` serves), with its signature
    and, where it scores, a generated input example."""
    saved = load_model(folder, device="cpu")
    threshold = threshold if saved.task.kind == "binary" else None
    example: pd.DataFrame | None = example_rows(saved)
    try:
        output = scores_table(as_scoring_frame(example, saved), saved, name, threshold, backend_for(example))
    except Exception as exc:  # noqa: BLE001 - the example is a convenience; the model is logged without it
        log.info("tracking: model %s: the generated input example does not score (%s: %s); logged without one",
                 name, type(exc).__name__, exc)
        example, output = None, None
    id_column = saved.meta.get("id_column")
    # A binary model's threshold is a parameter of predict (its default the run's).
    params = ParamSchema([ParamSpec("threshold", DataType.double, threshold)]) if threshold is not None else None
    signature = ModelSignature(inputs=input_schema(saved),
                               outputs=None if output is None else output_schema(output, id_column), params=params)
    mlflow.pyfunc.save_model(str(path), python_model=str(ENTRY_FILE), artifacts={MODEL_ARTIFACT: str(folder)},
                             signature=signature, input_example=example, pip_requirements=requirements(saved),
                             model_config={"model": name, "threshold": threshold}, mlflow_model=mlflow_model)


def register_version(client: Any, registered: str, *, model_id: str, location: str, run_id: str,
                     tags: Mapping[str, str] | None = None) -> str:
    """A new version of registered model ``registered`` (created if new) from the logged model
    ``model_id`` whose artifacts are at ``location``; returns the version number.

    The source is the artifact location, not ``models:/<model_id>``: MLflow's database store
    looks a ``models:/`` source up through the process's global tracking URI, which is not the
    hook's (the hook's client names its own)."""
    try:
        client.create_registered_model(registered)
    except MlflowException as exc:
        if exc.error_code not in ("RESOURCE_ALREADY_EXISTS", "ALREADY_EXISTS"):
            raise
    version = client.create_model_version(registered, source=location, run_id=run_id,
                                          tags=dict(tags or {}), model_id=model_id)
    return str(version.version)

