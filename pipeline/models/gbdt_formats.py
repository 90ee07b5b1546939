"""LightGBM's and CatBoost's own model files, written by ``export`` and read by ``predict``.

- LightGBM: the booster's text model (``model.lgb.txt``, ``Booster.save_model``), read back
  with ``lightgbm.Booster(model_file=...)``: a parser of numbers and tree structure, no pickle.
  It keeps the trees of the best iteration when early stopping ran, and which features are
  categorical.
- CatBoost: its binary ``.cbm`` format (flatbuffers, CatBoost's own; no pickle), which keeps the
  categorical features and their statistics; a JSON export would not load back a model with
  categorical features.

Either format checks what it loaded against the task ``model.json`` records (the booster's
objective, CatBoost's loss function and classes), so a swapped file is refused when it is
loaded, and a file either library cannot read is a ``DataError`` naming it. ``model.json`` also
records the categorical feature positions (``categorical_features``); the CatBoost file must
agree with them. Without the library installed, loading is ``BackendUnavailable`` naming the
extra to install.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline.core.errors import BackendUnavailable, DataError
from pipeline.core.problems import BINARY, Task
from pipeline.models.formats import ModelFormat, Predictor, objective_serves, task_of

if TYPE_CHECKING:
    from pipeline.backends import Backend

__all__ = ["CATBOOST_CBM", "LIGHTGBM_TEXT", "CatBoostCbmFormat", "CatBoostPredictor", "LightGBMPredictor",
           "LightGBMTextFormat"]

# LightGBM objectives (their names in a saved model) that give class probabilities, and those
# that give a score per class that is not one (one-vs-all: each class's own sigmoid, rows that do
# not add up to 1; log loss and the blend read them as probabilities and rank such a model first).
_LIGHTGBM_BINARY = {"binary", "cross_entropy", "xentropy"}
_LIGHTGBM_MULTICLASS = {"multiclass", "softmax"}
_LIGHTGBM_SCORES = {"multiclassova", "ova", "multiclass_ova", "ovr"}
# CatBoost loss functions that give class probabilities, and the one-vs-all one that does not.
_CATBOOST_BINARY = {"Logloss", "CrossEntropy"}
_CATBOOST_MULTICLASS = {"MultiClass"}
_CATBOOST_SCORES = {"MultiClassOneVsAll"}


def _library(name: str, extra: str) -> Any:
    """The model's library, or ``BackendUnavailable`` naming the extra that installs it."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        raise BackendUnavailable(f"this model was saved by {name}, which is not installed here; install it with "
                                 f"pipeline's '{extra}' extra, in its checkout: pip install -e '.[{extra}]'") from exc


def _host_matrix(X: Any, backend: Any) -> np.ndarray:
    from pipeline.backends import backend_for

    return np.asarray(backend_for(X, backend).to_host(X))


def lightgbm_family(objective: str) -> str:
    """A LightGBM objective as ``objective_serves`` reads it: binary, multiclass or value."""
    return _family(objective, _LIGHTGBM_BINARY, _LIGHTGBM_MULTICLASS, _LIGHTGBM_SCORES)


def catboost_family(loss_function: str) -> str:
    """A CatBoost loss function (``MultiClass``, ``Logloss:border=0.5``) as ``objective_serves`` reads it."""
    return _family(loss_function.split(":")[0], _CATBOOST_BINARY, _CATBOOST_MULTICLASS, _CATBOOST_SCORES)


def _family(objective: str, binary: set[str] | frozenset[str], multiclass: set[str] | frozenset[str],
            scores: set[str] | frozenset[str] = frozenset()) -> str:
    """A library's objective name as ``objective_serves`` reads it ("scores": class scores that
    are not probabilities, which no task takes)."""
    if objective in scores:
        return "scores"
    return "binary" if objective in binary else "multiclass" if objective in multiclass else "value"


def _refuse_task(file: Path, held: str, task: Task) -> DataError:
    return DataError(f"{file}: holds {held} but model.json says the task is {task.describe()}; the file was replaced "
                     "or model.json edited: export the model again")


# ---------------------------------------------------------------- LightGBM
@dataclass
class LightGBMPredictor:
    """A LightGBM booster's scores in the task's shape: the positive class's probability
    (binary), one column per class (multiclass), the value (regression)."""

    booster: Any
    task: Task = BINARY
    backend: Any = None

    def __call__(self, X: Any, codes: Any) -> np.ndarray:
        scores = np.asarray(self.booster.predict(_host_matrix(X, self.backend)), dtype="float64")
        if self.task.kind == "multiclass" and scores.ndim == 1:        # a binary model of a two-class task
            return np.stack([1 - scores, scores], axis=1)
        return scores


class LightGBMTextFormat(ModelFormat):
    """LightGBM's text model file (see the module docstring)."""

    name = "lightgbm-text"
    libraries = ("lightgbm",)

    def __init__(self, filename: str = "model.lgb.txt") -> None:
        self.filename = filename

    def save(self, estimator: Any, folder: Path, *, backend: Backend) -> tuple[list[Path], dict[str, Any]]:
        from pipeline.runs.store import atomic_write_text

        booster = estimator.booster_
        path = folder / self.filename
        # The best iteration's trees when early stopping ran (what the estimator predicts with).
        best = getattr(estimator, "best_iteration_", None) or None
        text = booster.model_to_string(num_iteration=best)
        atomic_write_text(path, text)
        return [path], {"file": path.name, "categorical_features": _lightgbm_categorical(text)}

    def load(self, folder: Path, meta: dict[str, Any], *, backend: Backend | None) -> Predictor:
        lightgbm = _library("lightgbm", "lightgbm")
        file = self.main_file(folder, meta)
        task = task_of(folder, meta)
        try:
            text = file.read_text(encoding="utf-8")
            if not text.startswith("tree\n"):
                raise ValueError("it does not begin as a LightGBM model does ('tree')")
            booster = lightgbm.Booster(model_str=text)
        except (OSError, UnicodeDecodeError, ValueError, lightgbm.basic.LightGBMError) as exc:
            raise DataError(f"{file}: not a readable LightGBM model ({_first_line(exc)}); export the model "
                            "again") from None
        _check_lightgbm_objective(booster, task, file)
        return LightGBMPredictor(booster, task, backend)


def _lightgbm_categorical(text: str) -> list[int]:
    """Positions of the categorical features, read from a saved model's parameters."""
    for line in text.splitlines():
        if line.startswith("[categorical_feature: "):
            listed = line[len("[categorical_feature: "):-1]
            return [int(i) for i in listed.split(",") if i.strip()]
    return []


def _check_lightgbm_objective(booster: Any, task: Task, file: Path) -> None:
    """The booster's objective must give the task's scores (see ``_check_xgboost_objective``)."""
    objective = str(booster.params.get("objective") or "").split(" ")[0]
    classes = booster.num_model_per_iteration()
    family = _family(objective, _LIGHTGBM_BINARY, _LIGHTGBM_MULTICLASS)
    if not objective_serves(task, family, classes):
        of = f" of {classes} classes" if objective in _LIGHTGBM_MULTICLASS else ""
        raise _refuse_task(file, f"a LightGBM model with objective {objective!r}{of}", task)


# ---------------------------------------------------------------- CatBoost
@dataclass
class CatBoostPredictor:
    """A CatBoost model's scores in the task's shape; categorical columns are handed to it as
    integers (``pipeline.models.catboost_estimators``)."""

    model: Any
    task: Task = BINARY
    backend: Any = None

    def __call__(self, X: Any, codes: Any) -> np.ndarray:
        matrix = _host_matrix(X, self.backend)
        if self.task.kind == "regression":
            return np.asarray(self.model.predict(matrix), dtype="float64").reshape(-1)
        proba = np.asarray(self.model.predict_proba(matrix), dtype="float64")
        return proba if self.task.kind == "multiclass" else proba[:, 1]


class CatBoostCbmFormat(ModelFormat):
    """CatBoost's own binary model file (see the module docstring)."""

    name = "catboost-cbm"
    libraries = ("catboost",)

    def __init__(self, filename: str = "model.cbm") -> None:
        self.filename = filename

    def save(self, estimator: Any, folder: Path, *, backend: Backend) -> tuple[list[Path], dict[str, Any]]:
        from pipeline.runs.store import atomic_destination

        path = folder / self.filename
        with atomic_destination(path) as tmp:
            estimator.save_model(str(tmp), format="cbm")
        categorical = [int(i) for i in estimator.get_cat_feature_indices()]
        return [path], {"file": path.name, "categorical_features": categorical}

    def load(self, folder: Path, meta: dict[str, Any], *, backend: Backend | None) -> Predictor:
        catboost = _library("catboost", "catboost")
        from pipeline.models.catboost_estimators import CatBoostClassifier, CatBoostRegressor

        file = self.main_file(folder, meta)
        task = task_of(folder, meta)
        model = CatBoostRegressor() if task.kind == "regression" else CatBoostClassifier()
        try:
            model.load_model(str(file), format="cbm")
            loss = str(model.get_all_params().get("loss_function") or "").split(":")[0]
        except (OSError, catboost.CatBoostError, ValueError, TypeError) as exc:
            raise DataError(f"{file}: not a readable CatBoost model ({_first_line(exc)}); export the model "
                            "again") from None
        _check_catboost_loss(model, loss, task, file)
        declared = meta.get("categorical_features")
        found = [int(i) for i in model.get_cat_feature_indices()]
        if declared is not None and list(declared) != found:
            raise DataError(f"{file}: treats features {found} as categorical but model.json says {declared}; the file "
                            "was replaced or model.json edited: export the model again")
        return CatBoostPredictor(model, task, backend)


def _check_catboost_loss(model: Any, loss: str, task: Task, file: Path) -> None:
    classes = len(model.classes_) if loss in _CATBOOST_MULTICLASS | _CATBOOST_BINARY else 0
    if not objective_serves(task, _family(loss, _CATBOOST_BINARY, _CATBOOST_MULTICLASS), classes):
        of = f" of {classes} classes" if loss in _CATBOOST_MULTICLASS else ""
        raise _refuse_task(file, f"a CatBoost model with loss function {loss!r}{of}", task)


LIGHTGBM_TEXT = LightGBMTextFormat()
CATBOOST_CBM = CatBoostCbmFormat()


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
