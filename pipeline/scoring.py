"""Load an exported model folder and score new rows with it, on either device.

A folder written by the ``export`` stage holds ``model.json`` (what the model is),
``workflow.json`` (the fitted feature workflow) and the model file. ``load_model`` rebuilds
both halves, so raw rows go in and positive-class probabilities come out::

    from pipeline.scoring import load_model
    model = load_model("runs/churn/latest/export/models/mlp")
    scores = model.score(pandas.read_csv("new_customers.csv"))
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.backends import Backend, backend_for, get_backend
from pipeline.errors import DataError
from pipeline.features import FeatureWorkflow

Predictor = Callable[[Any, Any], np.ndarray]      # (X, codes or None) -> host float64 scores


@dataclass
class SavedModel:
    """An exported model: its metadata, feature workflow and a predictor for its matrices."""

    name: str
    kind: str
    meta: dict[str, Any]
    workflow: FeatureWorkflow
    predictor: Predictor
    backend: Backend | None = None

    @property
    def categorical_columns(self) -> list[str]:
        return list(self.meta.get("categorical_columns") or [])

    def score(self, frame: Any) -> np.ndarray:
        """Positive-class probability per row of ``frame`` (pandas or cuDF, raw columns)."""
        backend = backend_for(frame, self.backend)
        out = self.workflow.transform(frame)
        X = backend.to_matrix(out, dtype="float32")
        codes = backend.to_matrix(out, columns=self.categorical_columns, dtype="int64") \
            if self.categorical_columns else None
        return self.predictor(X, codes)


def load_model(folder: str | os.PathLike[str], *, device: str | None = None) -> SavedModel:
    """Load an exported model folder; ``device`` "cpu" or "gpu" (default: the data decides)."""
    folder = Path(folder)
    meta_path = folder / "model.json"
    if not meta_path.is_file():
        raise DataError(f"{folder} is not an exported model folder (no model.json)")
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        kind, file = meta["model"], folder / meta["file"]
    except (ValueError, KeyError) as exc:
        raise DataError(f"{meta_path}: not a model description ({exc})") from exc
    if not file.is_file():
        raise DataError(f"{folder}: model file '{meta['file']}' is missing")
    backend = get_backend(device) if device else None
    workflow = FeatureWorkflow.load(folder / "workflow.json", backend=backend)
    loaders = {"mlp": _mlp_predictor, "xgboost": _xgboost_predictor}
    predictor = loaders.get(kind, _joblib_predictor)(file, meta, backend)
    return SavedModel(name=meta.get("name", folder.name), kind=kind, meta=meta, workflow=workflow,
                      predictor=predictor, backend=backend)


def _mlp_predictor(file: Path, meta: dict[str, Any], backend: Backend | None) -> Predictor:
    from pipeline.tensors.classifier import MLPClassifier

    # Weights are saved as CPU tensors: they load anywhere and move to a GPU when there is one.
    device = "cuda" if backend is not None and backend.name == "gpu" else "cpu"
    classifier = MLPClassifier.load(file.parent, device=device)
    return lambda X, codes: classifier.predict_proba(X, codes)[:, 1]


def _xgboost_predictor(file: Path, meta: dict[str, Any], backend: Backend | None) -> Predictor:
    import xgboost

    model = xgboost.XGBClassifier()
    model.load_model(str(file))
    if backend is not None:
        model.set_params(device="cuda" if backend.name == "gpu" else "cpu")
    return lambda X, codes: backend_for(X, backend).predict_scores(model, X)


def _joblib_predictor(file: Path, meta: dict[str, Any], backend: Backend | None) -> Predictor:
    import joblib

    try:
        estimator = joblib.load(file)
    except (ImportError, AttributeError) as exc:
        if "coef" in meta:
            # A linear model pickled by cuML, scored where cuML is missing: its coefficients
            # were saved as plain numbers for exactly this.
            return _linear_predictor(np.asarray(meta["coef"]), np.asarray(meta["intercept"]))
        raise DataError(f"{file}: cannot load this {meta.get('estimator', 'model')} here ({exc}); "
                        f"{_needs(meta)}") from exc
    return lambda X, codes: backend_for(X, backend).predict_scores(estimator, X)


def _needs(meta: dict[str, Any]) -> str:
    """Where a model that will not unpickle here can be scored: its device and library."""
    estimator = str(meta.get("estimator") or "")
    library = estimator.split(".")[0] or "the library it was trained with"
    if meta.get("device") == "gpu":
        return (f"it was trained on the GPU and needs {library}: score it on a machine with an NVIDIA GPU "
                f"and the RAPIDS stack installed (pip install -e '.[gpu]'), with device gpu")
    return f"it was trained on the {meta.get('device', 'unknown device')} and needs {library} installed"


def _linear_predictor(coef: np.ndarray, intercept: np.ndarray) -> Predictor:
    def predict(X: Any, codes: Any) -> np.ndarray:
        host = np.asarray(backend_for(X).to_host(X), dtype="float64")
        return 1.0 / (1.0 + np.exp(-(host @ coef + intercept[0])))

    return predict
