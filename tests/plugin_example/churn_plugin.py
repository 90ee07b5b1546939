"""A plugin as a user writes one, outside the package: a ``key_join`` stage kind over two tables
and a ``centroid`` model with its own file format (class centroids as JSON).

Importing it registers both; a config lists it under ``plugins:``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field

from pipeline import DataError
from pipeline.models import InitChoice, ModelSpec, PortfolioMember, register_model
from pipeline.models.formats import ModelFormat
from pipeline.stages import StageSpec, register_stage
from pipeline.stages.spec import Table
from pipeline.runs.store import atomic_write_text


class KeyJoinSpec(StageSpec):
    kind: Literal["key_join"]
    key: str = Field(description="Key column both inputs have.")
    how: Literal["inner", "left"] = Field("inner", description="Which rows to keep.")
    min_inputs = 2
    max_inputs = 2


@register_stage("key_join", KeyJoinSpec, produces=Table, accepts=(Table,))
def run_key_join(spec: KeyJoinSpec, ctx: Any, inputs: dict[str, Any]) -> Any:
    left, right = (inputs[name] for name in spec.inputs)
    joined = left.merge(right, on=spec.key, how=spec.how)
    ctx.facts["rows"] = int(len(joined))
    return joined


class CentroidClassifier:
    """Scores a row by its squared distances to the two class centroids (a softmax of them)."""

    def __init__(self, temperature: float = 1.0) -> None:
        self.temperature = temperature

    def fit(self, X: Any, y: Any) -> CentroidClassifier:
        X, y = np.asarray(X, dtype="float64"), np.asarray(y)
        self.centroids_ = np.stack([X[y == 0].mean(axis=0), X[y == 1].mean(axis=0)])
        return self

    def predict_proba(self, X: Any) -> np.ndarray:
        X = np.asarray(X, dtype="float64")
        distances = ((X[:, None, :] - self.centroids_[None]) ** 2).sum(axis=-1)
        logits = -distances / self.temperature
        logits -= logits.max(axis=1, keepdims=True)
        weights = np.exp(logits)
        return weights / weights.sum(axis=1, keepdims=True)


class CentroidScores:
    def __init__(self, model: CentroidClassifier) -> None:
        self.model = model

    def __call__(self, X: Any, codes: Any) -> np.ndarray:
        return self.model.predict_proba(X)[:, 1]


class CentroidJsonFormat(ModelFormat):
    """Centroids as plain JSON numbers: loads anywhere, runs no code."""

    name = "centroid-json"

    def save(self, estimator: Any, folder: Path, *, backend: Any) -> tuple[list[Path], dict[str, Any]]:
        path = folder / "centroids.json"
        atomic_write_text(path, json.dumps({"temperature": estimator.temperature,
                                            "centroids": estimator.centroids_.tolist()}))
        return [path], {"file": path.name}

    def load(self, folder: Path, meta: dict[str, Any], *, backend: Any) -> CentroidScores:
        file = folder / meta["file"]
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
            model = CentroidClassifier(float(data["temperature"]))
            model.centroids_ = np.asarray(data["centroids"], dtype="float64").reshape(2, -1)
        except (OSError, ValueError, TypeError, KeyError) as exc:       # predict reports a DataError cleanly
            raise DataError(f"{file}: not a readable centroid model ({type(exc).__name__}: {exc})") from None
        return CentroidScores(model)


register_model(ModelSpec(
    name="centroid",
    cpu_class="churn_plugin:CentroidClassifier",
    gpu_class="churn_plugin:CentroidClassifier",
    params={"temperature": ("temperature", "temperature")},
    seed_param=None,
    format=CentroidJsonFormat(),
    tasks=("binary",),                      # two centroids: a binary classifier only
    description="nearest class centroid (a test plugin)",
    # What the stages know of it, from this file alone: a cheap member of auto's portfolio, and
    # a model pipeline init writes for a binary target.
    portfolio=(PortfolioMember("centroid", {"*": {"temperature": 4.0}}, tasks=("binary",), cost=0.2, rank=50),),
    init_choices=(InitChoice(("binary",), {"temperature": 4.0}, "nearest class centroid: fast, a second yardstick",
                             rank=50),),
))
