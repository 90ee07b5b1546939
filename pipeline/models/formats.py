"""How an exported model's estimator is written to its folder and read back for scoring.

A format belongs to the registry entry (``ModelSpec.format``), so ``export`` and
``load_model`` never ask which model it is: the entry's format writes the files and the
``model.json`` keys that describe them, says which files a saved ``model.json`` names (the
ones ``predict`` verifies against the run's checksums before anything is deserialised) and
turns them back into a predictor. Plugin code adds a format by subclassing ``ModelFormat``.

Every built-in format loads without running code from the file: scikit-learn models through
skops (only the types of an allow-list), XGBoost through its own JSON, the MLP as a torch
``state_dict`` loaded with ``weights_only=True``. A run folder can be written by someone other
than the reader (a shared disk, a copied folder), and its checksums sit next to the files they
protect, so a format must be safe even for a file that was swapped on purpose. Pickles
(``model.joblib``, written before skops) are never loaded: a logistic regression still scores
from the coefficients its ``model.json`` keeps; anything else asks to be exported again.

Formats read folders that lack the newer ``files`` key, so older run folders still verify.
Heavy libraries (skops, XGBoost, PyTorch) are imported inside the methods: the registry
imports this module, and listing models must not load them.
"""

from __future__ import annotations

import pickle
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline.core.errors import DataError
from pipeline.core.problems import BINARY, Task
from pipeline.models.linear_tables import (LevelTable, fill_missing, log_columns, table_offsets, tables_from_json,
                                           tables_to_json)

if TYPE_CHECKING:
    from pipeline.backends import Backend

Predictor = Callable[[Any, Any], np.ndarray]      # (X, codes or None) -> host float64 scores

__all__ = [
    "JOBLIB", "LINEAR_COEFFICIENTS", "LINEAR_KINDS", "LinearCoefficientsFormat", "SKLEARN_TRUSTED_TYPES", "SKOPS", "TORCH_STATE_DICT", "XGBOOST_JSON", "ClassifierPredictor",
    "EstimatorPredictor", "JoblibFormat", "LinearPredictor", "ModelFormat", "PortablePredictor", "Predictor",
    "SkopsFormat", "TorchStateDictFormat", "XGBoostJsonFormat", "check_estimator_task", "task_of",
]

# Types a scikit-learn model file may name beyond those skops trusts by itself (scikit-learn's
# estimators, NumPy arrays and dtypes, Python builtins): the fitted trees of a forest, which
# skops rebuilds through its own loader. Anything else in a file refuses to load.
SKLEARN_TRUSTED_TYPES: tuple[str, ...] = ("sklearn.tree._tree.Tree",)


class ModelFormat:
    """Base class of model file formats: a plain object (no state beyond its settings) so
    registry entries pickle to Dask workers and compare by value.

    Subclasses implement ``save`` and ``load``; ``files`` reads the ``files`` key that
    ``export`` writes, or ``file`` in folders written before it existed. ``load`` must not run
    code from the files (no pickle), and should raise ``DataError`` for a file it cannot read.
    """

    name: str = "format"
    # Import names of the libraries ``load`` needs beyond NumPy and pandas: an MLflow pyfunc
    # model (``pipeline.tracking.mlflow_pyfunc``) pins their installed versions among its
    # requirements. A class attribute, so registry entries still compare by their settings.
    libraries: tuple[str, ...] = ()

    def save(self, estimator: Any, folder: Path, *, backend: Backend) -> tuple[list[Path], dict[str, Any]]:
        """Write ``estimator`` into ``folder`` atomically (``pipeline.runs.store`` helpers).

        Returns the files written and the keys to add to ``model.json`` (at least ``file``,
        the main model file, which older readers look for).
        """
        raise NotImplementedError

    def files(self, meta: dict[str, Any]) -> list[str]:
        """The model files a saved ``model.json`` says the folder has, relative to it."""
        names = meta.get("files") or self.legacy_files(meta)
        return [_relative(name) for name in names]

    def legacy_files(self, meta: dict[str, Any]) -> list[str]:
        """The files of a ``model.json`` written before the ``files`` key existed."""
        return [meta["file"]]

    def load(self, folder: Path, meta: dict[str, Any], *, backend: Backend | None) -> Predictor:
        """A predictor for the model saved in ``folder``; ``backend`` None: the data decides."""
        raise NotImplementedError

    def main_file(self, folder: Path, meta: dict[str, Any]) -> Path:
        return folder / self.files(meta)[0]

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and vars(other) == vars(self)

    def __hash__(self) -> int:
        return hash((type(self), tuple(sorted(vars(self).items()))))

    def __repr__(self) -> str:
        settings = ", ".join(f"{k}={v!r}" for k, v in sorted(vars(self).items()))
        return f"{type(self).__name__}({settings})"


def _relative(name: Any) -> str:
    """A file name from model.json, refused if it could point outside the model folder."""
    path = PurePosixPath(str(name))
    if not isinstance(name, str) or not name or path.is_absolute() or ".." in path.parts or "\\" in name:
        raise DataError(f"model.json names a model file outside its folder: {name!r}")
    return name


def task_of(folder: Path, meta: dict[str, Any]) -> Task:
    """The task model.json records (export writes it); none there: binary, as every model
    exported before tasks was."""
    try:
        return Task.from_dict(meta.get("task"))
    except (ValueError, TypeError, AttributeError) as exc:
        raise DataError(f"{folder / 'model.json'}: unreadable task {meta.get('task')!r} ({_first_line(exc)}); "
                        "export the model again") from None


def check_estimator_task(estimator: Any, task: Task, file: Path) -> None:
    """Refuse a loaded estimator that cannot give the task's scores (a regressor where
    model.json says classification, a classifier of another number of classes), now rather
    than when a nightly job scores."""
    classes = getattr(estimator, "classes_", None)
    n_classes = getattr(estimator, "n_classes_", None if classes is None else len(classes))
    expected = task.n_outputs if task.kind == "multiclass" else 2
    if task.kind == "regression":
        problem = "a classifier" if hasattr(estimator, "predict_proba") else None
    elif not hasattr(estimator, "predict_proba"):
        problem = "not a classifier"
    elif isinstance(n_classes, (int, np.integer)) and n_classes != expected:
        problem = f"a classifier of {int(n_classes)} classes"
    else:
        problem = None
    if problem is not None:
        raise DataError(f"{file}: holds {problem} ({type(estimator).__name__}) but model.json says the task is "
                        f"{task.describe()}; the file was replaced or model.json edited: export the model again")


# ---------------------------------------------------------------- predictors (picklable)
@dataclass
class EstimatorPredictor:
    """The task's scores (``predict_proba`` or ``predict``) through the backend of the data (or
    the one chosen at load)."""

    estimator: Any
    backend: Any = None
    task: Task = BINARY

    def __call__(self, X: Any, codes: Any) -> np.ndarray:
        from pipeline.backends import backend_for

        return backend_for(X, self.backend).predict_scores(self.estimator, X, self.task)


@dataclass
class PortablePredictor:
    """A scikit-learn estimator read from a model file, scored by the backend of the data: the
    backend makes its own estimator of it once per device (cuML's twin on the GPU)."""

    estimator: Any
    backend: Any = None
    task: Task = BINARY
    on_device: dict[str, Any] = field(default_factory=dict, repr=False)

    def __call__(self, X: Any, codes: Any) -> np.ndarray:
        from pipeline.backends import backend_for

        backend = backend_for(X, self.backend)
        return backend.predict_scores(self.for_backend(backend), X, self.task)

    def for_backend(self, backend: Backend) -> Any:
        if backend.name not in self.on_device:
            self.on_device[backend.name] = backend.from_portable_estimator(self.estimator)
        return self.on_device[backend.name]


# What a coefficients file holds (its ``kind``; absent: binary, as files written before
# tasks): a logistic model of one positive class, a multinomial (softmax) model with a row
# per class, a linear regression (ridge).
LINEAR_KINDS: tuple[str, ...] = ("binary", "multinomial", "regression")


@dataclass
class LinearPredictor:
    """A linear model from its coefficients, computed as scikit-learn computes it (same dtype,
    same products), so the scores are the same numbers: ``expit(X @ coef.T + intercept)``
    (binary), ``softmax(X @ coef.T + intercept)`` (multinomial, coef K x d), ``X @ coef +
    intercept`` (regression). Scores come in the task's shape: a binary model serving a
    two-class multiclass task gives both columns, as ``predict_proba`` does."""

    coef: np.ndarray
    intercept: np.ndarray
    dtype: str = "float64"
    kind: str = "binary"
    task: Task = BINARY
    # A model fitted on its own encoding (``pipeline.models.linear_tables``): what fills a
    # missing value per column, and each categorical column's term per level.
    fill: np.ndarray | None = None
    tables: tuple[LevelTable, ...] = ()
    # Column positions taken as log1p before anything else (skewed non-negative numbers).
    logged: np.ndarray | None = None

    def __call__(self, X: Any, codes: Any) -> np.ndarray:
        from pipeline.backends import backend_for

        host = np.asarray(backend_for(X).to_host(X), dtype=self.dtype)
        host = fill_missing(log_columns(host, self.logged), self.fill)
        offsets = table_offsets(host, self.tables)
        if self.kind == "regression":
            values = host @ np.asarray(self.coef, dtype=self.dtype) + np.asarray(self.intercept[0], dtype=self.dtype)
            if offsets is not None:
                values = values + offsets[:, 0]
            return np.asarray(values, dtype="float64")
        if self.kind == "multinomial":
            return np.asarray(self._softmax(host, offsets), dtype="float64")
        return self._logistic(host, offsets)

    def _logistic(self, host: np.ndarray, offsets: np.ndarray | None = None) -> np.ndarray:
        from scipy.special import expit

        coef = np.asarray(self.coef, dtype=self.dtype).reshape(1, -1)
        decision = host @ coef.T + np.asarray(self.intercept, dtype=self.dtype)
        positive = expit((decision if offsets is None else decision + offsets).ravel())
        if self.task.kind == "multiclass":
            return np.asarray(np.stack([1 - positive, positive], axis=1), dtype="float64")
        return np.asarray(positive, dtype="float64")

    def _softmax(self, host: np.ndarray, offsets: np.ndarray | None = None) -> np.ndarray:
        """scikit-learn's ``softmax`` of the decision function: the row maximum subtracted
        before ``exp``, then each row divided by its sum, in place, in the model's dtype."""
        scores = host @ np.asarray(self.coef, dtype=self.dtype).T + np.asarray(self.intercept, dtype=self.dtype)
        if offsets is not None:
            scores = scores + offsets
        scores -= scores.max(axis=1).reshape(-1, 1)
        np.exp(scores, out=scores)
        scores /= scores.sum(axis=1).reshape(-1, 1)
        return scores


@dataclass
class ClassifierPredictor:
    """Scores of an estimator that takes ``(X, codes)`` (the MLP embeds the codes), in the
    task's shape: positive-class column of ``predict_proba`` (binary), the whole matrix
    (multiclass), ``predict`` (regression)."""

    classifier: Any
    task: Task = BINARY

    def __call__(self, X: Any, codes: Any) -> np.ndarray:
        if self.task.kind == "regression":
            return np.asarray(self.classifier.predict(X, codes), dtype="float64")
        proba = self.classifier.predict_proba(X, codes)
        return proba if self.task.kind == "multiclass" else proba[:, 1]


# ---------------------------------------------------------------- the built-in formats
class SkopsFormat(ModelFormat):
    """scikit-learn estimators in skops' format, which loads without running code from the file.

    ``save`` stores the backend's portable form of the estimator (cuML's as its scikit-learn
    twin), so a model trained on a GPU scores on a machine without one, and refuses an
    estimator that holds types outside ``trusted`` (checked now, not when a nightly job scores).
    ``load`` checks the file's types against the same allow-list before skops builds anything.
    Linear models (``coef_``) also keep their coefficients in model.json as plain numbers.
    """

    name = "skops"
    libraries = ("sklearn", "skops")

    def __init__(self, filename: str = "model.skops", trusted: Sequence[str] = SKLEARN_TRUSTED_TYPES) -> None:
        self.filename = filename
        self.trusted = tuple(sorted(trusted))

    def save(self, estimator: Any, folder: Path, *, backend: Backend) -> tuple[list[Path], dict[str, Any]]:
        import skops.io as sio

        from pipeline.runs.store import atomic_destination

        portable = backend.to_portable_estimator(estimator)
        path = folder / self.filename
        with atomic_destination(path) as tmp:
            sio.dump(portable, tmp)
            refused = self.untrusted(sio.get_untrusted_types(file=tmp))
            if refused:
                raise DataError(f"export: {type(estimator).__name__} holds types that the skops format does not "
                                f"trust ({', '.join(refused)}); if they are safe to load, list them in "
                                "SkopsFormat(trusted=[...]) of its registry entry")
        extra: dict[str, Any] = {"file": path.name}
        if hasattr(portable, "coef_"):
            extra["coef"] = np.asarray(portable.coef_, dtype="float64").ravel().tolist()
            extra["intercept"] = np.asarray(portable.intercept_, dtype="float64").ravel().tolist()
        return [path], extra

    def untrusted(self, types: Sequence[str]) -> list[str]:
        """The types of a file that are not on this format's allow-list."""
        return sorted(set(types) - set(self.trusted))

    def load(self, folder: Path, meta: dict[str, Any], *, backend: Backend | None) -> Predictor:
        file = self.main_file(folder, meta)
        # Decided by the content, not by model.json's word: a pickle is never handed to a loader.
        if not zipfile.is_zipfile(file):
            if "format" in meta:            # written since formats name themselves: damaged or swapped
                raise DataError(f"{file} is not a skops model file; it was not loaded (it was damaged or replaced "
                                "after export: export the model again)")
            return _pickled_model(file, meta)
        task = task_of(folder, meta)
        estimator = self.read(file)
        check_estimator_task(estimator, task, file)
        predictor = PortablePredictor(estimator, backend, task)
        if backend is not None:
            predictor.for_backend(backend)          # a model that cannot move to the device says so now
        return predictor

    def read(self, file: Path) -> Any:
        """The estimator in ``file``, after every type it names passed the allow-list."""
        import skops.io as sio

        try:
            found = sio.get_untrusted_types(file=file)
        except Exception as exc:  # noqa: BLE001 - a damaged archive fails in many ways
            raise DataError(f"{file}: not a readable skops model file ({type(exc).__name__}: {exc})") from None
        refused = self.untrusted(found)
        if refused:
            raise DataError(f"{file}: model file contains untrusted types {', '.join(refused)}; it was not loaded "
                            "(export it again with this version of pipeline, or list the types in the "
                            "format's trusted= if they are safe)")
        try:
            return sio.load(file, trusted=found)
        except Exception as exc:  # noqa: BLE001 - only allow-listed types are built; their errors vary
            raise DataError(f"{file}: cannot load this model ({type(exc).__name__}: {exc})") from None


def _pickled_model(file: Path, meta: dict[str, Any]) -> Predictor:
    """A model file written before skops (a joblib pickle): never unpickled, since a pickle runs
    code of its choosing. A linear model still scores from the coefficients in model.json."""
    if "coef" in meta and "intercept" in meta:
        try:
            coef = np.asarray(meta["coef"], dtype="float64")
            intercept = np.asarray(meta["intercept"], dtype="float64").ravel()
        except (TypeError, ValueError) as exc:
            raise DataError(f"{file.parent / 'model.json'}: coef/intercept are not numbers ({exc})") from None
        if coef.ndim == 1 and intercept.shape == (1,):
            return LinearPredictor(coef, intercept)
    raise DataError(f"{file} is not in a safe model format (it is probably a pickle written by an older version "
                    "of pipeline); pickles are never loaded because loading one can run any code. Run the "
                    "pipeline that trained it again to export the model in the skops format")


# The names before skops: plugin code that named them still imports, and gets the safe format.
JoblibFormat = SkopsFormat


class XGBoostJsonFormat(ModelFormat):
    """XGBoost's own JSON (``save_raw``): no pickle, and it loads on either device."""

    name = "xgboost-json"
    libraries = ("xgboost",)

    def __init__(self, filename: str = "model.xgb.json") -> None:
        self.filename = filename

    def save(self, estimator: Any, folder: Path, *, backend: Backend) -> tuple[list[Path], dict[str, Any]]:
        from pipeline.runs.store import atomic_write_bytes

        path = folder / self.filename
        atomic_write_bytes(path, bytes(estimator.get_booster().save_raw(raw_format="json")))
        return [path], {"file": path.name}

    def load(self, folder: Path, meta: dict[str, Any], *, backend: Backend | None) -> Predictor:
        import xgboost

        file = self.main_file(folder, meta)
        task = task_of(folder, meta)
        # XGBClassifier.load_model restores n_classes_ from the booster's num_class (2 for a
        # binary booster); a regressor's file loads into XGBRegressor, whose predict is the value.
        model = xgboost.XGBRegressor() if task.kind == "regression" else xgboost.XGBClassifier()
        try:
            model.load_model(str(file))
        except (xgboost.core.XGBoostError, ValueError, TypeError) as exc:
            raise DataError(f"{file}: not a readable XGBoost model ({_first_line(exc)})") from None
        _check_xgboost_objective(model, task, file)
        if backend is not None:
            model.set_params(device="cuda" if backend.name == "gpu" else "cpu")
        return EstimatorPredictor(model, backend, task)


def objective_serves(task: Task, family: str, classes: int) -> bool:
    """Whether a model whose objective is of ``family`` ("binary": one class's probability,
    "multiclass": each of ``classes`` classes', anything else: a value) gives ``task``'s scores.
    Every boosting format checks a loaded file's objective against model.json's task by it."""
    if family == "scores":                  # class scores that are not probabilities: no task's
        return False
    if task.kind == "regression":
        return family not in ("binary", "multiclass")
    if task.kind == "multiclass":
        return (family == "multiclass" and classes == task.n_outputs) or (family == "binary" and task.n_outputs == 2)
    return family == "binary"


# XGBoost classification objectives whose predict_proba is no probability: raw margins
# (binary:logitraw) and hard 0/1 (binary:hinge).
XGBOOST_SCORES = {"binary:logitraw", "binary:hinge"}


def xgboost_family(objective: str) -> str:
    """An XGBoost objective (``binary:logistic``, ``multi:softprob``, ``reg:squarederror``) as
    ``objective_serves`` reads it: binary, multiclass, value, or scores (no probabilities)."""
    if objective in XGBOOST_SCORES:
        return "scores"
    return {"binary": "binary", "multi": "multiclass"}.get(objective.split(":")[0], "value")


def _check_xgboost_objective(model: Any, task: Task, file: Path) -> None:
    """The booster's objective must give the task's scores: probabilities of one class
    (``binary:``) or of each class of the task (``multi:``), a value for regression."""
    objective = str(model.objective or "")
    family = xgboost_family(objective)
    if not objective_serves(task, family, model.n_classes_ if family == "multiclass" else 0):
        classes = f" of {model.n_classes_} classes" if family == "multiclass" else ""
        raise DataError(f"{file}: holds an XGBoost model with objective {objective!r}{classes} but model.json says "
                        f"the task is {task.describe()}; the file was replaced or model.json edited: export the "
                        "model again")


class TorchStateDictFormat(ModelFormat):
    """``MLPClassifier``'s files: a ``state_dict`` of CPU tensors (loaded with
    ``weights_only=True``, so no pickled code runs) and ``architecture.json``."""

    name = "torch-state-dict"
    libraries = ("torch",)

    def save(self, estimator: Any, folder: Path, *, backend: Backend) -> tuple[list[Path], dict[str, Any]]:
        state, architecture = estimator.save(folder)      # atomic writes, CPU tensors
        return [state, architecture], {"file": state.name, "architecture": architecture.name}

    def legacy_files(self, meta: dict[str, Any]) -> list[str]:
        return [meta["file"]] + ([meta["architecture"]] if meta.get("architecture") else [])

    def load(self, folder: Path, meta: dict[str, Any], *, backend: Backend | None) -> Predictor:
        """The task comes from ``architecture.json`` (it shaped the network; none there: binary);
        ``model.json``'s task, where export wrote one, must agree with it."""
        from pipeline.tensors.classifier import MLPClassifier

        # Weights are CPU tensors: they load anywhere and move to a GPU when there is one.
        device = "cuda" if backend is not None and backend.name == "gpu" else "cpu"
        try:
            classifier = MLPClassifier.load(folder, device=device)
        except (pickle.UnpicklingError, RuntimeError, ValueError, TypeError, KeyError, IndexError, EOFError) as exc:
            # weights_only=True refuses anything but tensors and plain containers (UnpicklingError);
            # a text file in place of model.pt empties the unpickler's stack (IndexError).
            raise DataError(f"{folder}: not a readable MLP model ({type(exc).__name__}: {_first_line(exc)})") from None
        declared = task_of(folder, meta) if meta.get("task") else classifier.task
        if declared.kind != classifier.task.kind or declared.n_outputs != classifier.task.n_outputs:
            raise DataError(f"{folder}: model.json says the task is {declared.describe()} but architecture.json "
                            f"holds a {classifier.task.describe()} network; export the model again")
        return ClassifierPredictor(classifier, classifier.task)


class LinearCoefficientsFormat(ModelFormat):
    """A linear model as its coefficients in JSON (``coefficients.json``): nothing to
    deserialise but numbers, it scores on any device, and it needs neither scikit-learn's nor
    skops' import (skops enumerates every scikit-learn estimator when imported: seconds per
    export and per ``predict``).

    It holds a binary logistic model (``coef``: d numbers, one intercept; the file has no
    ``kind``, exactly as before tasks), a multinomial one (``"kind": "multinomial"``, ``coef``:
    K rows of d, K intercepts) or a linear regression such as ridge (``"kind": "regression"``,
    d numbers and one intercept). Which one is read from the estimator: a classifier (it has
    ``classes_``) with one row of coefficients is binary, with K rows multinomial; a model
    without classes is a regression.
    """

    name = "linear-coefficients"
    libraries = ("scipy",)

    def __init__(self, filename: str = "coefficients.json") -> None:
        self.filename = filename

    def save(self, estimator: Any, folder: Path, *, backend: Backend) -> tuple[list[Path], dict[str, Any]]:
        from pipeline.runs.store import atomic_write_json

        native = np.asarray(backend.to_host(estimator.coef_))
        dtype = "float32" if native.dtype == np.float32 else "float64"     # scores are computed in it
        coef = native.astype("float64")
        intercept = np.asarray(backend.to_host(estimator.intercept_), dtype="float64").ravel()
        kind = _linear_kind(estimator, coef, intercept)
        if not np.isfinite(coef).all() or not np.isfinite(intercept).all():
            raise DataError(f"export: {type(estimator).__name__} has coefficients that are not finite numbers "
                            "(the fit diverged); it is not exported")
        path = folder / self.filename
        values = coef.tolist() if kind == "multinomial" else coef.ravel().tolist()
        body: dict[str, Any] = {"coef": values, "intercept": intercept.tolist(), "dtype": dtype}
        if kind != "binary":
            body = {"kind": kind, **body}
        meta = {"file": path.name, **body}
        tables = getattr(estimator, "tables_", None)
        if tables is not None:        # fitted on its own encoding: its fill values and level terms
            body["fill"] = np.asarray(estimator.fill_, dtype="float64").tolist()
            body["tables"] = tables_to_json(tables)
            logged = getattr(estimator, "logged_", None)
            if logged is not None and len(logged):
                body["log1p"] = [int(i) for i in logged]      # columns taken as log1p before the rest
            meta["tables"] = len(tables)      # model.json names them; the levels stay in the file
        atomic_write_json(path, body)
        return [path], meta

    def load(self, folder: Path, meta: dict[str, Any], *, backend: Backend | None) -> Predictor:
        import json

        if meta.get("file", self.filename) != self.filename and "coef" in meta:
            # A folder exported before formats named themselves (model.joblib, a pickle): its
            # model.json kept the coefficients as plain numbers, so the pickle is never opened.
            return LinearPredictor(np.asarray(meta["coef"], dtype="float64"),
                                   np.asarray(meta["intercept"], dtype="float64"))
        file = self.main_file(folder, meta)
        try:
            body = json.loads(file.read_text(encoding="utf-8"))
            coef = np.asarray(body["coef"], dtype="float64")
            intercept = np.asarray(body["intercept"], dtype="float64")
            dtype = str(body.get("dtype", "float64"))
            kind = str(body.get("kind", "binary"))
            if dtype not in ("float32", "float64"):
                raise ValueError(f"dtype {dtype!r}")
            if kind not in LINEAR_KINDS:
                raise ValueError(f"kind {kind!r} (known: {', '.join(LINEAR_KINDS)})")
        except (OSError, ValueError, TypeError, KeyError) as exc:
            raise DataError(f"{file}: not a readable coefficients file ({type(exc).__name__}: {exc})") from None
        _check_coefficients(file, kind, coef, intercept)
        task = task_of(folder, meta)
        _check_linear_task(file, kind, coef, task)
        fill, tables, logged = _encoding(file, body, kind, coef)
        return LinearPredictor(coef, intercept, dtype, kind, task, fill, tables, logged)


def _linear_kind(estimator: Any, coef: np.ndarray, intercept: np.ndarray) -> str:
    """binary, multinomial or regression: what ``estimator``'s coefficients are (see the format)."""
    name = type(estimator).__name__
    if getattr(estimator, "classes_", None) is None:
        if coef.ndim > 2 or (coef.ndim == 2 and coef.shape[0] != 1) or intercept.size != 1:
            raise DataError(f"export: {name} predicts {coef.shape[0]} targets; the linear-coefficients format holds "
                            "a regression of one target")
        return "regression"
    rows = coef.shape[0] if coef.ndim == 2 else 0
    if rows == 1 and intercept.size == 1:
        return "binary"
    if rows >= 2 and intercept.size == rows:
        return "multinomial"
    raise DataError(f"export: {name} has coefficients of shape {coef.shape} and {intercept.size} intercept(s); the "
                    "linear-coefficients format holds a binary model (1 row) or a multinomial one (a row per class)")


def _encoding(file: Path, body: dict[str, Any], kind: str,
              coef: np.ndarray) -> tuple[np.ndarray | None, tuple[LevelTable, ...], np.ndarray | None]:
    """A file's ``fill`` values, level ``tables`` and ``log1p`` columns (a model fitted on its
    own encoding), checked against its coefficients; (None, (), None) for a plain linear model."""
    if "fill" not in body and "tables" not in body:
        return None, (), None
    columns = coef.shape[-1]
    outputs = coef.shape[0] if kind == "multinomial" else 1
    try:
        fill = np.asarray(body.get("fill"), dtype="float64")
        if fill.shape != (columns,) or not np.isfinite(fill).all():
            raise ValueError(f"fill must be {columns} finite numbers, one per column")
        tables = tables_from_json(body.get("tables", []), columns=columns, outputs=outputs)
        logged = body.get("log1p", [])
        if not isinstance(logged, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in logged) \
                or len(set(logged)) != len(logged) or any(not 0 <= i < columns for i in logged) \
                or set(logged) & {t.column for t in tables}:
            raise ValueError(f"log1p must list distinct number-column positions below {columns}")
    except (ValueError, TypeError) as exc:
        raise DataError(f"{file}: not a readable coefficients file ({exc})") from None
    return fill, tables, np.asarray(logged, dtype=np.int64) if logged else None


def _check_coefficients(file: Path, kind: str, coef: np.ndarray, intercept: np.ndarray) -> None:
    """The shapes a coefficients file of ``kind`` must have, and finite numbers throughout."""
    if kind == "multinomial":
        shaped = coef.ndim == 2 and coef.shape[0] >= 2 and intercept.shape == (coef.shape[0],)
        expected = "a row of finite numbers per class and one intercept per class"
    else:
        shaped = coef.ndim == 1 and intercept.shape == (1,)
        expected = "a list of finite numbers and one intercept"
    if not shaped or not np.isfinite(coef).all() or not np.isfinite(intercept).all():
        raise DataError(f"{file}: coefficients must be {expected}")


def _check_linear_task(file: Path, kind: str, coef: np.ndarray, task: Task) -> None:
    """The model must give the task's scores: a regression for regression, a binary model for
    binary (or two classes), a row per class of a multiclass task."""
    if kind == "regression":
        fits = task.kind == "regression"
    elif kind == "binary":
        fits = task.kind == "binary" or (task.kind == "multiclass" and task.n_outputs == 2)
    else:
        fits = task.kind == "multiclass" and task.n_outputs == coef.shape[0]
    if not fits:
        held = f"{kind} model" + (f" of {coef.shape[0]} classes" if kind == "multinomial" else "")
        raise DataError(f"{file}: holds a {held} but model.json says the task is {task.describe()}; the file was "
                        "replaced or model.json edited: export the model again")


SKOPS = SkopsFormat()
LINEAR_COEFFICIENTS = LinearCoefficientsFormat()
JOBLIB = SKOPS
XGBOOST_JSON = XGBoostJsonFormat()
TORCH_STATE_DICT = TorchStateDictFormat()


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
