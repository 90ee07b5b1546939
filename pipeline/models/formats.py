"""How an exported model's estimator is written to its folder and read back for scoring.

A format belongs to the registry entry (``ModelSpec.format``), so ``export`` and
``load_model`` never ask which model it is: the entry's format writes the files and the
``model.json`` keys that describe them, says which files a saved ``model.json`` names (the
ones ``predict`` verifies against the run's checksums before anything is deserialised) and
turns them back into a predictor. Plugin code adds a format by subclassing ``ModelFormat``.

The three built-in formats write the same files and ``model.json`` keys as before formats
existed (``file``, and ``architecture`` for the MLP), and read folders that lack the newer
``files`` key, so older run folders still load.

Heavy libraries (joblib, XGBoost, PyTorch) are imported inside the methods: the registry
imports this module, and listing models must not load them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline.errors import DataError

if TYPE_CHECKING:
    from pipeline.backends import Backend

Predictor = Callable[[Any, Any], np.ndarray]      # (X, codes or None) -> host float64 scores

__all__ = [
    "JOBLIB", "TORCH_STATE_DICT", "XGBOOST_JSON", "ClassifierPredictor", "EstimatorPredictor", "JoblibFormat",
    "LinearPredictor",
    "ModelFormat", "Predictor", "TorchStateDictFormat", "XGBoostJsonFormat",
]


class ModelFormat:
    """Base class of model file formats: a plain object (no state beyond its settings) so
    registry entries pickle to Dask workers and compare by value.

    Subclasses implement ``save`` and ``load``; ``files`` reads the ``files`` key that
    ``export`` writes, or ``file`` in folders written before it existed.
    """

    name: str = "format"

    def save(self, estimator: Any, folder: Path, *, backend: Backend) -> tuple[list[Path], dict[str, Any]]:
        """Write ``estimator`` into ``folder`` atomically (``pipeline.store`` helpers).

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


# ---------------------------------------------------------------- predictors (picklable)
@dataclass
class EstimatorPredictor:
    """``predict_proba`` through the backend of the data (or the one chosen at load)."""

    estimator: Any
    backend: Any = None

    def __call__(self, X: Any, codes: Any) -> np.ndarray:
        from pipeline.backends import backend_for

        return backend_for(X, self.backend).predict_scores(self.estimator, X)


@dataclass
class LinearPredictor:
    """A logistic model from its coefficients alone: scores where its library is missing."""

    coef: np.ndarray
    intercept: np.ndarray

    def __call__(self, X: Any, codes: Any) -> np.ndarray:
        from pipeline.backends import backend_for

        host = np.asarray(backend_for(X).to_host(X), dtype="float64")
        return 1.0 / (1.0 + np.exp(-(host @ self.coef + self.intercept[0])))


@dataclass
class ClassifierPredictor:
    """Positive-class column of ``predict_proba(X, codes)`` (the MLP takes the codes)."""

    classifier: Any

    def __call__(self, X: Any, codes: Any) -> np.ndarray:
        return self.classifier.predict_proba(X, codes)[:, 1]


# ---------------------------------------------------------------- the built-in formats
class JoblibFormat(ModelFormat):
    """A joblib pickle. Linear models (``coef_``) also keep their coefficients in model.json
    as plain numbers, so one pickled by cuML scores on a machine without cuML."""

    name = "joblib"

    def __init__(self, filename: str = "model.joblib") -> None:
        self.filename = filename

    def save(self, estimator: Any, folder: Path, *, backend: Backend) -> tuple[list[Path], dict[str, Any]]:
        import joblib

        from pipeline.store import atomic_destination

        path = folder / self.filename
        with atomic_destination(path) as tmp:
            joblib.dump(estimator, tmp)
        extra: dict[str, Any] = {"file": path.name}
        if hasattr(estimator, "coef_"):
            extra["coef"] = np.asarray(backend.to_host(estimator.coef_)).ravel().tolist()
            extra["intercept"] = np.asarray(backend.to_host(estimator.intercept_)).ravel().tolist()
        return [path], extra

    def load(self, folder: Path, meta: dict[str, Any], *, backend: Backend | None) -> Predictor:
        import joblib

        file = self.main_file(folder, meta)
        try:
            estimator = joblib.load(file)
        except (ImportError, AttributeError) as exc:
            if "coef" in meta:
                # A linear model pickled by cuML, scored where cuML is missing: its coefficients
                # were saved as plain numbers for exactly this.
                return LinearPredictor(np.asarray(meta["coef"]), np.asarray(meta["intercept"]))
            raise DataError(f"{file}: cannot load this {meta.get('estimator', 'model')} here ({exc}); "
                            f"{_needs(meta)}") from exc
        return EstimatorPredictor(estimator, backend)


class XGBoostJsonFormat(ModelFormat):
    """XGBoost's own JSON (``save_raw``): no pickle, and it loads on either device."""

    name = "xgboost-json"

    def __init__(self, filename: str = "model.xgb.json") -> None:
        self.filename = filename

    def save(self, estimator: Any, folder: Path, *, backend: Backend) -> tuple[list[Path], dict[str, Any]]:
        from pipeline.store import atomic_write_bytes

        path = folder / self.filename
        atomic_write_bytes(path, bytes(estimator.get_booster().save_raw(raw_format="json")))
        return [path], {"file": path.name}

    def load(self, folder: Path, meta: dict[str, Any], *, backend: Backend | None) -> Predictor:
        import xgboost

        model = xgboost.XGBClassifier()
        model.load_model(str(self.main_file(folder, meta)))
        if backend is not None:
            model.set_params(device="cuda" if backend.name == "gpu" else "cpu")
        return EstimatorPredictor(model, backend)


class TorchStateDictFormat(ModelFormat):
    """``MLPClassifier``'s files: a ``state_dict`` of CPU tensors (loaded with
    ``weights_only=True``, so no pickled code runs) and ``architecture.json``."""

    name = "torch-state-dict"

    def save(self, estimator: Any, folder: Path, *, backend: Backend) -> tuple[list[Path], dict[str, Any]]:
        state, architecture = estimator.save(folder)      # atomic writes, CPU tensors
        return [state, architecture], {"file": state.name, "architecture": architecture.name}

    def legacy_files(self, meta: dict[str, Any]) -> list[str]:
        return [meta["file"]] + ([meta["architecture"]] if meta.get("architecture") else [])

    def load(self, folder: Path, meta: dict[str, Any], *, backend: Backend | None) -> Predictor:
        from pipeline.tensors.classifier import MLPClassifier

        # Weights are CPU tensors: they load anywhere and move to a GPU when there is one.
        device = "cuda" if backend is not None and backend.name == "gpu" else "cpu"
        return ClassifierPredictor(MLPClassifier.load(folder, device=device))


JOBLIB = JoblibFormat()
XGBOOST_JSON = XGBoostJsonFormat()
TORCH_STATE_DICT = TorchStateDictFormat()


def _needs(meta: dict[str, Any]) -> str:
    """Where a model that will not unpickle here can be scored: its device and library."""
    estimator = str(meta.get("estimator") or "")
    library = estimator.split(".")[0] or "the library it was trained with"
    if meta.get("device") == "gpu":
        return (f"it was trained on the GPU and needs {library}: score it on a machine with an NVIDIA GPU "
                f"and the RAPIDS stack installed (pip install -e '.[gpu]'), with device gpu")
    return f"it was trained on the {meta.get('device', 'unknown device')} and needs {library} installed"
