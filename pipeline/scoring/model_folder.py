"""Load an exported model folder and score new rows with it, on either device.

A folder written by the ``export`` stage holds ``model.json`` (what the model is),
``workflow.json`` (the fitted feature workflow) and the model file. ``load_model`` rebuilds
both halves, so raw rows go in and scores (or predictions) come out::

    from pipeline.scoring.model_folder import load_model
    model = load_model("runs/churn/latest/export/models/mlp")
    scores = model.score(pandas.read_csv("new_customers.csv"))
    labels = model.predict(pandas.read_csv("new_customers.csv"))

What the scores are depends on the model's task (``model.task``, from model.json; a folder
exported before tasks is binary): see ``pipeline.core.problems``.

A folder holds ``reference.json`` too when it was exported with drift profiles (model.json
lists it among its ``files``): ``model.reference`` is then the training features' profile and
``scores_with_counts`` bins the feature matrix of the scored rows against it
(``pipeline.metrics.drift``); it is None for folders exported before.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pipeline.backends import FEW_ROWS_MODULE, Backend, backend_for, get_backend, is_frame
from pipeline.scoring.columns import CLASS_COLUMNS_KEY, class_column_map, empty_scores, task_columns
from pipeline.core.errors import DataError, UsageError
from pipeline.features import FeatureWorkflow
from pipeline.runs.layout import REFERENCE_FILE
from pipeline.metrics.drift import Counts, bin_counts, check_profile
from pipeline.models import MODELS, ModelFormat, Predictor, get_model_spec
from pipeline.runs.signing import verify_model_folder
from pipeline.scoring.run_plugins import load_model_plugins, verify_recorded_files
from pipeline.core.problems import Task

__all__ = ["Predictor", "SavedModel", "load_model", "model_format_of", "scores_table", "scores_with_counts"]


@dataclass
class SavedModel:
    """An exported model: its metadata, feature workflow and a predictor for its matrices.

    Examples:
        >>> from pipeline.scoring.model_folder import load_model
        >>> saved = load_model(folder)              # the folder the page's setup saved
        >>> scores = saved.score(frame.head(3))     # raw rows in: the workflow runs first
        >>> scores.shape, bool(((scores >= 0) & (scores <= 1)).all()), saved.predict(frame.head(3)).shape
        ((3,), True, (3,))
    """

    name: str
    kind: str
    meta: dict[str, Any]
    workflow: FeatureWorkflow
    predictor: Predictor
    backend: Backend | None = None
    # The training features' drift profile (reference.json); None in folders exported before it.
    reference: dict[str, Any] | None = None

    @property
    def categorical_columns(self) -> list[str]:
        return list(self.meta.get("categorical_columns") or [])

    @property
    def task(self) -> Task:
        """What the model predicts (binary for a folder exported before tasks)."""
        try:
            return Task.from_dict(self.meta.get("task"))
        except (TypeError, ValueError, AttributeError) as exc:
            raise DataError(f"model '{self.name}': model.json has no valid task ({exc})") from None

    def score(self, frame: Any) -> np.ndarray:
        """Scores per row of ``frame`` (pandas or cuDF, raw columns), host float64, shaped by the
        task: binary the positive-class probability, multiclass an ``n x K`` matrix of class
        probabilities (``task.classes`` order), regression the predicted value. A column whose
        type is not its fit-time kind (text where a number was fitted) is a ``DataError`` naming
        it and both types, as ``pipeline predict`` says it; anything but a frame, a ``UsageError``."""
        return self.score_matrix(self.checked(frame))[0]

    def checked(self, frame: Any) -> Any:
        """``frame`` as ``score`` takes it: a pandas or cuDF frame whose input columns have their
        fit-time kinds (predict's ``check_types``; a column with no value is cast to its kind in
        a shallow copy, the caller's frame is left as it is); a missing column is left to the
        workflow, which names it."""
        from pipeline.scoring.input_rows import check_types

        if type(frame).__module__ == FEW_ROWS_MODULE:     # the server's NumPy columns, typed already
            return frame
        if not is_frame(frame):
            raise UsageError(f"score takes a DataFrame of raw rows (pandas, or cuDF on a GPU), got "
                             f"{type(frame).__name__}; build one first, e.g. pandas.DataFrame(rows) or "
                             "pandas.read_csv(path)")
        fitted = {column: dtype for column, dtype in self.workflow.input_columns_.items() if column in frame.columns}
        return check_types(frame.copy(deep=False), fitted, backend_for(frame, self.backend),
                           source=Path("the frame"), fmt="frame")

    def score_matrix(self, frame: Any) -> tuple[np.ndarray, Any]:
        """``score``'s scores and the feature matrix they came from (on the frame's device), so
        that drift counts read the matrix the model saw without running the workflow again."""
        backend = backend_for(frame, self.backend)
        out = self.workflow.transform(frame)
        X = backend.to_matrix(out, dtype="float32")
        codes = backend.to_matrix(out, columns=self.categorical_columns, dtype="int64") \
            if self.categorical_columns else None
        return self.predictor(X, codes), X

    def predict(self, frame: Any, *, threshold: float = 0.5) -> np.ndarray:
        """Predictions per row of ``frame``: binary 1 where the score is at least ``threshold``
        (else 0), multiclass the original class value of the top score, regression the value."""
        task = self.task
        scores = np.asarray(self.score(frame), dtype="float64")
        if task.kind == "regression":
            return scores
        if task.kind == "multiclass":
            return task.decode(scores.reshape(-1, task.n_outputs).argmax(axis=1))
        return (scores >= threshold).astype("int64")


def load_model(folder: str | os.PathLike[str], *, device: str | None = None,
               verify_signature: bool = True, files_checked: bool = False) -> SavedModel:
    """Load an exported model folder; ``device`` "cpu" or "gpu" (default: the data decides).

    The registry entry named in model.json says how its files are read (its format), so a
    model added by a plugin loads once the plugin has registered it: a model not registered
    yet gets the plugins ``pipeline predict`` would import first, those of $PIPELINE_PLUGINS
    and, for a folder inside a run folder, the run's own (``run_plugins.load_model_plugins``:
    its record and config checked first). ``verify_signature``
    False is for a folder of the run in progress only (the ``promote`` stage reading what this
    run's export just wrote): its manifest is signed when the run ends, so there is nothing to
    check it against yet. A folder inside a run is checked against the sha256 the run recorded
    for its files, as ``predict`` checks them; ``files_checked``: the caller did that already
    (``open_run``), so the files are not hashed twice.

    Examples:
        >>> from pipeline.scoring.model_folder import load_model
        >>> saved = load_model(folder)              # the folder the page's setup saved
        >>> saved.name, saved.kind, saved.task.kind, saved.workflow.output_columns_ == features.feature_names
        ('logistic_regression', 'logistic_regression', 'binary', True)
    """
    folder = Path(folder)
    meta_path = folder / "model.json"
    if not meta_path.is_file():
        raise DataError(f"{folder} is not an exported model folder (no model.json)")
    if verify_signature:
        verify_model_folder(folder)     # with a signing key set: a signed run's files, unchanged
        if not files_checked:           # inside a run: its files as the run recorded them
            verify_recorded_files(folder)
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        kind = meta["model"]
    except (ValueError, KeyError, TypeError) as exc:
        raise DataError(f"{meta_path}: not a model description ({exc})") from exc
    if isinstance(kind, str) and kind not in MODELS and verify_signature:   # a plugin's model: what predict imports
        load_model_plugins(folder)
    model_format = model_format_of(meta, meta_path)
    try:
        files = model_format.files(meta)
    except (KeyError, TypeError) as exc:
        raise DataError(f"{meta_path}: not a model description ({exc})") from exc
    for name in files:
        if not (folder / name).is_file():
            raise DataError(f"{folder}: model file '{name}' is missing")
    backend = get_backend(device) if device else None
    workflow = FeatureWorkflow.load(folder / "workflow.json", backend=backend)
    predictor = model_format.load(folder, meta, backend=backend)
    reference = None if REFERENCE_FILE not in files else read_reference(folder / REFERENCE_FILE,
                                                                           workflow.output_columns_)
    return SavedModel(name=meta.get("name", folder.name), kind=kind, meta=meta, workflow=workflow,
                      predictor=predictor, backend=backend, reference=reference)


def read_reference(path: Path, features: list[str]) -> dict[str, Any]:
    """The drift profile at ``path``, checked against the model's ``features`` (its workflow's
    output columns, the matrix's columns); a ``DataError`` when it is not one."""
    try:
        return check_profile(json.loads(path.read_text(encoding="utf-8")), features)
    except (OSError, ValueError, RecursionError) as exc:
        raise DataError(f"{path}: not a drift profile of this model's features ({exc})") from None


def model_format_of(meta: dict[str, Any], where: Path | str) -> ModelFormat:
    """The format of the model a model.json describes; a model not registered in this process
    is a DataError that says how to register it (its plugin is not loaded)."""
    name = meta.get("model")
    if not isinstance(name, str) or name not in MODELS:
        raise DataError(
            f"{where}: model '{name}' is unknown here (registered: {', '.join(sorted(MODELS))}); if a plugin "
            "registers it, load that plugin: list its module under plugins: in the config or in the "
            "PIPELINE_PLUGINS environment variable (comma-separated module names)")
    return get_model_spec(name).format


def scores_with_counts(frame: Any, saved: SavedModel, name: str, threshold: float | None,
                       backend: Any) -> tuple[pd.DataFrame, Counts | None]:
    """``scores_table``'s rows for ``frame`` and the drift counts of its feature matrix
    (``pipeline.metrics.drift.bin_counts``; None when the model has no reference profile), from
    one pass of the workflow: for a whole input, or one partition whose counts are then added."""
    values, counts = score_values(frame, saved, name, threshold, backend)
    return as_table(values, saved.task, name), counts


def score_values(frame: Any, saved: SavedModel, name: str, threshold: float | None,
                 backend: Any) -> tuple[dict[str, Any], Counts | None]:
    """``scores_with_counts`` without the frame: output column -> host values (what a server
    encodes as JSON straight away; no ``model`` column), and the drift counts."""
    if len(frame):
        scores, matrix = saved.score_matrix(frame)
    else:
        scores, matrix = empty_scores(saved.task), np.empty((0, len(saved.workflow.output_columns_)))
    values = score_columns(frame, saved, name, threshold, backend, scores=scores)
    return values, None if saved.reference is None else bin_counts(saved.reference, backend.to_host(matrix))


def scores_table(frame: Any, saved: Any, name: str, threshold: float | None, backend: Any, *,
                 scores: np.ndarray | None = None) -> pd.DataFrame:
    """The output rows for ``frame`` (a whole input, or one partition), in the frame's order:
    the id column when the model has one, the task's columns, then ``model``. ``scores``: the
    frame's scores when the caller has them (``scores_with_counts``), else computed here.

    binary: ``score`` and ``prediction`` (1 when score >= ``threshold``, else 0); multiclass:
    ``score_<class>`` per class and ``prediction`` (the original class value; names of class
    columns: ``pipeline.distributed.predictions``); regression: ``prediction``.
    """
    return as_table(score_columns(frame, saved, name, threshold, backend, scores=scores), saved.task, name)


def score_columns(frame: Any, saved: Any, name: str, threshold: float | None, backend: Any, *,
                  scores: np.ndarray | None = None) -> dict[str, Any]:
    """``scores_table``'s columns but ``model``, as host arrays (a Series for the id column)."""
    task = saved.task
    if scores is None:
        scores = saved.score(frame) if len(frame) else empty_scores(task)
    scores = np.asarray(scores, dtype="float64")
    id_column = saved.meta.get("id_column")
    table: dict[str, Any] = {}
    if id_column:
        table[id_column] = backend.to_host(frame[id_column]).reset_index(drop=True)
    table.update(task_columns(task, scores))
    if task.kind == "binary":
        table["prediction"] = (scores >= threshold).astype("int64")
    return table


def as_table(columns: dict[str, Any], task: Any, name: str) -> pd.DataFrame:
    """The scores table of ``score_columns``' columns, with ``model`` (``name``) last."""
    rows = len(next(iter(columns.values())))
    out = pd.DataFrame({**columns, "model": pd.Series([name] * rows, dtype="str")})
    if task.kind == "multiclass":          # Parquet keeps it: which class each score column is
        out.attrs[CLASS_COLUMNS_KEY] = class_column_map(task)
    return out
