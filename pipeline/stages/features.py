"""``features``: fit the feature workflow on the training split, apply it to every split, and
hand the result to the models as one dense float32 matrix per split.

``to_matrix`` runs here once per split; every model reads that same buffer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from pipeline.backends import Backend
from pipeline.errors import DataError
from pipeline.features import FeatureWorkflow
from pipeline.features.ops import FeatureOp, OpStep, op_of_step
from pipeline.stages.base import StageContext, StageSpec, only_input, register_stage
from pipeline.stages.split import SplitData


@dataclass
class FeatureSet:
    """Model-ready data: X (n x d float32) and y (0/1) per split, on the run's device."""

    X: dict[str, Any]
    y: dict[str, Any]
    ids: dict[str, Any]               # host pandas Series per split, or None without an id column
    feature_names: list[str]
    workflow: FeatureWorkflow
    target: str
    id_column: str | None
    backend: Backend

    def rows(self) -> dict[str, int]:
        return {name: int(x.shape[0]) for name, x in self.X.items()}


class FeaturesSpec(StageSpec):
    kind: Literal["features"]
    id: str | None = Field(None, description="Id column: kept out of the features, written with predictions.")
    ops: list[OpStep] = Field(
        default_factory=list,
        description="Feature ops in order, each {op_name: {params}}; fitted on the training split only.",
    )
    accepts = ("split",)
    min_inputs = 1
    max_inputs = 1

    def build_ops(self) -> list[FeatureOp]:
        return [op_of_step(step) for step in self.ops]


def build_features(
    data: SplitData, ops: list[FeatureOp | dict[str, Any]], *, id_column: str | None = None
) -> FeatureSet:
    """Fit ``ops`` on ``data``'s training split and build the matrices for every split."""
    backend = data.backend
    workflow = FeatureWorkflow(ops, backend=backend)
    X, y, ids = {}, {}, {}
    for name, frame in data.frames.items():
        if id_column is not None and id_column not in frame.columns:
            raise DataError(f"id column '{id_column}' not in the data")
        ids[name] = backend.to_host(frame[id_column]) if id_column else None
        y[name] = backend.to_vector(frame[data.target], dtype="int32")
        drop = [data.target] + ([id_column] if id_column else [])
        features = frame.drop(columns=drop)
        out = workflow.fit_transform(features) if name == "train" else workflow.transform(features)
        X[name] = backend.to_matrix(out, dtype="float32")
        del out, features
    return FeatureSet(
        X=X, y=y, ids=ids, feature_names=list(workflow.output_columns_), workflow=workflow,
        target=data.target, id_column=id_column, backend=backend,
    )


@register_stage("features", FeaturesSpec)
def run_features(spec: FeaturesSpec, ctx: StageContext, inputs) -> FeatureSet:
    result = build_features(only_input(inputs), spec.build_ops(), id_column=spec.id)
    ctx.facts["rows"] = result.rows()
    ctx.facts["features"] = len(result.feature_names)
    return result
