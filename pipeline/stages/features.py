"""``features``: fit the feature workflow on the training split, apply it to every split, and
hand the result to the models as one dense float32 matrix per split.

``to_matrix`` runs here once per split; every model reads that same buffer.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from pipeline.backends import Backend
from pipeline.errors import DataError
from pipeline.features import FeatureWorkflow
from pipeline.features.ops import FeatureOp, OpStep, op_of_step
from pipeline.stages.base import StageContext, StageSpec, only_input, register_stage
from pipeline.stages.split import SplitData
from pipeline.tensors.handoff import Handoff, matrix_handoff


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
    # Categorified columns (in ``feature_names`` order) and their int64 code matrix per split,
    # for embedding layers; empty without a categorify op.
    categorical_columns: list[str] = field(default_factory=list)
    codes: dict[str, Any] = field(default_factory=dict)
    # What each frame -> matrix conversion copied, for the manifest.
    handoffs: list[Handoff] = field(default_factory=list)
    # Identity that survives pickling (models trained on one FeatureSet on different Dask
    # workers hold different copies of it).
    uid: str = field(default_factory=lambda: uuid.uuid4().hex)
    # Partitioned data: X, y, ids are lazy Dask collections over Parquet; rows counted once.
    partitioned: bool = False
    row_counts: dict[str, int] = field(default_factory=dict)
    # Partitioned data written by the stage: the Parquet folder of each split (for training
    # that reads the files itself); empty when nothing was written.
    parquet_dirs: dict[str, str] = field(default_factory=dict)

    def rows(self) -> dict[str, int]:
        if self.partitioned:
            return dict(self.row_counts)
        return {name: int(x.shape[0]) for name, x in self.X.items()}

    def continuous_index(self) -> list[int]:
        """Positions in ``X`` of the columns that are not categorical codes."""
        categorical = set(self.categorical_columns)
        return [i for i, name in enumerate(self.feature_names) if name not in categorical]


class FeaturesSpec(StageSpec):
    kind: Literal["features"]
    id: str | None = Field(None, description="Id column: kept out of the features, written with predictions.")
    ops: list[OpStep] = Field(
        default_factory=list,
        description="Feature ops in order, each {op_name: {params}}; fitted on the training split only.",
    )
    min_inputs = 1
    max_inputs = 1

    def build_ops(self) -> list[FeatureOp]:
        return [op_of_step(step) for step in self.ops]


def build_features(
    data: SplitData, ops: list[FeatureOp | dict[str, Any]], *, id_column: str | None = None,
    output_dir: Path | None = None,
) -> FeatureSet:
    """Fit ``ops`` on ``data``'s training split and build the matrices for every split.

    Partitioned (Dask) data is featurized lazily and, with ``output_dir``, written there as
    partitioned Parquet that the returned FeatureSet reads.
    """
    backend = data.backend
    if data.partitioned:
        from pipeline.features.workflow import op_from_spec
        from pipeline.stages.partitioned import build_partitioned

        fields = build_partitioned(data, [op_from_spec(o) for o in ops], id_column=id_column, output_dir=output_dir)
        return FeatureSet(**fields, target=data.target, id_column=id_column, backend=backend, partitioned=True)
    workflow = FeatureWorkflow(ops, backend=backend)
    X, y, ids, codes, handoffs = {}, {}, {}, {}, []
    categorical: list[str] = []
    for name, frame in data.frames.items():
        if id_column is not None and id_column not in frame.columns:
            raise DataError(f"id column '{id_column}' not in the data")
        ids[name] = backend.to_host(frame[id_column]) if id_column else None
        y[name] = backend.to_vector(frame[data.target], dtype="int32")
        drop = [data.target] + ([id_column] if id_column else [])
        features = frame.drop(columns=drop)
        out = workflow.fit_transform(features) if name == "train" else workflow.transform(features)
        X[name] = backend.to_matrix(out, dtype="float32")
        handoffs.append(matrix_handoff(f"{name}.X", out, X[name], backend))
        if name == "train":
            sizes = workflow.categorical_cardinalities()
            categorical = [c for c in workflow.output_columns_ if c in sizes]
        if categorical:
            codes[name] = backend.to_matrix(out, columns=categorical, dtype="int64")
            handoffs.append(matrix_handoff(f"{name}.codes", out[categorical], codes[name], backend))
        del out, features
    return FeatureSet(
        X=X, y=y, ids=ids, feature_names=list(workflow.output_columns_), workflow=workflow,
        target=data.target, id_column=id_column, backend=backend,
        categorical_columns=categorical, codes=codes, handoffs=handoffs,
    )


@register_stage("features", FeaturesSpec, produces=FeatureSet, accepts=(SplitData,))
def run_features(spec: FeaturesSpec, ctx: StageContext, inputs) -> FeatureSet:
    data = only_input(inputs)
    output_dir = ctx.artifact_path("partitions", "x").parent if data.partitioned and ctx.artifacts_dir else None
    result = build_features(data, spec.build_ops(), id_column=spec.id, output_dir=output_dir)
    if result.partitioned:
        ctx.facts["passes"] = result.workflow.passes_
        ctx.facts["partitions"] = {s: int(x.npartitions) for s, x in result.X.items()}
    ctx.facts["rows"] = result.rows()
    ctx.facts["features"] = len(result.feature_names)
    if result.categorical_columns:
        ctx.facts["categorical"] = result.categorical_columns
    ctx.facts["handoffs"] = [h.to_dict() for h in result.handoffs]
    return result
