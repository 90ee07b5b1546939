"""``features``: fit the feature workflow on the training split, apply it to every split, and
hand the result to the models as a ``FeatureSet``: one dense float32 matrix per split in
memory, or lazy partitioned frames (``pipeline.featuresets``).

With ``folds: k`` on the split, the features also carry a ``FoldSource``: each model stage
builds each fold's features from it, the workflow refitted on the fold's fit rows only.

``profile.json`` holds what the report's data section draws: rows per split, the target's
balance and each feature's histogram per split, from samples of a fixed size.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, create_model

from pipeline.backends.headers import ColumnSet, HeaderReader
from pipeline.features.ops import (
    BUILT_IN_OPS, FeatureOp, OpStep, describe_selector, op_of_step, op_step_union, ops_key,
)
from pipeline.featuresets import FeatureSet, build_feature_set
from pipeline.stages.spec import ColumnRef, KeyPath, Preview, StageContext, StageSpec, only_input, register_stage, split_facts
from pipeline.stages.split import SplitData

__all__ = ["FeatureSet", "FeaturesSpec", "build_features", "run_features"]


class FeaturesSpec(StageSpec):
    kind: Literal["features"]
    id: str | None = Field(None, description="Id column: kept out of the features, written with predictions.")
    ops: list[OpStep] = Field(
        default_factory=list,
        description="Feature ops in order, each {op_name: {params}}; fitted on the training split only.",
    )
    min_inputs = 1
    max_inputs = 1

    @classmethod
    def validating_model(cls) -> type[StageSpec]:
        """This class while the registered ops are the built-in ones (``ops`` was built over
        them); after a plugin registers one, a subclass whose ``ops`` items are a union over
        every op registered now (one class per registry state)."""
        key = ops_key()
        if key == BUILT_IN_OPS:
            return cls
        if (cls, key) not in _BY_OPS:
            field = cls.model_fields["ops"]
            _BY_OPS[cls, key] = create_model(
                cls.__name__, __base__=cls, __module__=cls.__module__, __doc__=cls.__doc__,
                ops=(list[op_step_union()], Field(default_factory=list, description=field.description)))
        return _BY_OPS[cls, key]

    def build_ops(self) -> list[FeatureOp]:
        return [op_of_step(step) for step in self.ops]

    def columns_read(self, inputs: Mapping[str, Preview], headers: HeaderReader) -> list[ColumnRef]:
        """``id`` in the split's table but not its target (a model whose id is the label cannot
        score rows without one), and each op's columns in the table the ops before it leave
        (the target and the id are not in it: the ops never see them)."""
        (split,) = inputs.values()
        refs = [id_column_ref(self.id, split)] if self.id is not None else []
        if split.columns is None:
            return refs
        columns = split.columns
        if split.target is not None:
            columns = columns.without([split.target], "is the split's target: the ops never see the label")
        if self.id is not None:
            columns = columns.without([self.id], "is the id column: kept out of the features")
        unseen = {name for name in (split.target, self.id) if name is not None}
        for k, op in enumerate(self.build_ops()):
            among = columns if op.selector is None else _except_among(columns, split.columns, unseen)
            refs += [ColumnRef(("ops", k, op.op, *where), column, f"{op.op} column", among=among)
                     for where, column in op.named_columns()]
            columns = op.known_columns_after(columns, f"is removed by ops[{k}] ({op.op}) before this op")
        return refs

    def plan_notes(self) -> list[tuple[KeyPath, str]]:
        """Each column selector in words: which names it takes is decided on the training
        split when the workflow is fitted (workflow.json records them)."""
        return [(("ops", k, op.op, "columns"), f"selects {describe_selector(op.selector)}")
                for k, op in enumerate(self.build_ops()) if op.selector is not None]

    def preview(self, stage: str, inputs: Mapping[str, Preview], headers: HeaderReader) -> Preview:
        (split,) = inputs.values()
        return split_facts(split, features=stage)


def _except_among(columns: ColumnSet, split: ColumnSet, unseen: set[str]) -> ColumnSet:
    """What a selector's ``except`` names may be: any column of the split's table or known at
    the op, the target and the id included (the ops never see them: leaving them out is
    harmless), but not one an earlier op removed (it would leave out nothing). An earlier
    selector op leaves the names open (which it takes is known only at fit), so they are
    checked against every name seen, open only where the split's table is."""
    gone = {name: why for name, why in columns.gone.items() if name not in unseen}
    names = [name for name in dict.fromkeys([*split.names, *columns.names]) if name not in gone]
    return replace(split, names=tuple(names), patterns=(*split.patterns, *columns.patterns), gone=gone)


_BY_OPS: dict[tuple[type[FeaturesSpec], tuple[tuple[str, int], ...]], type[FeaturesSpec]] = {}


def build_features(
    data: SplitData, ops: list[FeatureOp | dict[str, Any]], *, id_column: str | None = None,
    output_dir: Path | None = None,
) -> FeatureSet:
    """Fit ``ops`` on ``data``'s training split and build the features of every split.

    Partitioned (Dask) data is featurized lazily and, with ``output_dir``, written there as
    partitioned Parquet that the returned features read.

    Examples:
        >>> from pipeline.stages import build_features
        >>> features = build_features(data, [{"fill_missing": {"columns": ["TotalCharges"]}},
        ...                                   {"one_hot": {"columns": {"type": "categorical"}}}], id_column="customerID")
        >>> len(features.feature_names), "customerID" in features.feature_names, features.rows()["test"]
        (45, False, 1409)
    """
    return build_feature_set(data, ops, id_column=id_column, output_dir=output_dir)


def id_column_ref(id_column: str, split: Preview) -> ColumnRef:
    """The ``id`` key's column, in the split's table but not its target: a model whose id is
    the label cannot score rows without one (shared by every stage kind that takes an id)."""
    among = None                                # the split's table
    if split.target is not None:                # known even where the columns are not
        table = split.columns if split.columns is not None else ColumnSet((), "the split's table", open=True)
        among = table.plus([split.target]).without([split.target], "is the split's target: the label cannot be the id "
                                                   "(rows to score have no label); name a column that identifies a row")
    return ColumnRef(("id",), id_column, "id column", among=among)


@register_stage("features", FeaturesSpec, produces=FeatureSet, accepts=(SplitData,))
def run_features(spec: FeaturesSpec, ctx: StageContext, inputs) -> FeatureSet:
    output_dir = ctx.artifacts_dir / "partitions" if ctx.artifacts_dir is not None else None
    result = build_features(only_input(inputs), spec.build_ops(), id_column=spec.id, output_dir=output_dir)
    ctx.facts.update(result.facts())
    if result.fold_count():
        ctx.facts["folds"] = result.fold_count()
    if ctx.artifacts_dir is not None:
        from pipeline.runs.store import atomic_write_json

        atomic_write_json(ctx.artifact_path("profile.json"), result.profile())
    return result
