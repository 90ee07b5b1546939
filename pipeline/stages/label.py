"""``label``: the entity table with a target column from the events in the horizon after each
cut-off (churn as no event, or an aggregate of future events as a regression target)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from pipeline.backends import is_partitioned
from pipeline.events import label_events, parse_duration, parse_target, plan_label
from pipeline.events.durations import normalize_duration
from pipeline.stages.aggregate import CutoffFields
from pipeline.backends.headers import HeaderReader
from pipeline.stages.spec import ColumnRef, KeyPath, Preview, StageContext, Table, register_stage

__all__ = ["LabelSpec", "label_events", "run_label"]


class LabelSpec(CutoffFields):
    kind: Literal["label"]
    horizon: str = Field(description=(
        "How far after the cut-off the label looks: <n>d, <n>w or <n>h. Events with "
        "as_of <= time < as_of + horizon make the label."))
    target: dict[str, str | dict[str, str]] = Field(description=(
        "One entry <name>: no_event | any_event | count, or <name>: {sum|mean|min|max|nunique: column}. "
        "no_event is 1 for an entity without events in the horizon (churn)."))
    input_roles: ClassVar[tuple[str, ...]] = ("events", "entities")
    min_inputs = 2
    max_inputs = 2

    @field_validator("horizon")
    @classmethod
    def _horizon(cls, horizon: str) -> str:
        parse_duration(horizon, allow_all=False)
        return normalize_duration(horizon, allow_all=False)

    @field_validator("target")
    @classmethod
    def _target(cls, target: dict[str, Any]) -> dict[str, Any]:
        parse_target(target)
        return target

    @model_validator(mode="after")
    def _names(self) -> LabelSpec:
        self._check_cutoff_column()
        name = parse_target(self.target).name
        if name in (*self.keys, self.cutoff_column):
            raise ValueError(f"the target '{name}' is also a key or the cut-off column; name it otherwise")
        return self

    def columns_read(self, inputs: Mapping[str, Preview], headers: HeaderReader) -> list[ColumnRef]:
        """The keys, the time column and the target's column in the events (input 0); the keys
        in the entity table (input 1)."""
        refs = self.key_refs()
        parsed = parse_target(self.target)
        if parsed.column is not None:
            refs.append(ColumnRef(("target", parsed.name, parsed.aggregate), parsed.column,
                                  f"{parsed.aggregate} column"))
        keys = [((), self.by)] if isinstance(self.by, str) else [((i,), k) for i, k in enumerate(self.by)]
        refs += [ColumnRef(("by", *where), key, "by key (the entity table's)", input=1) for where, key in keys]
        return refs

    def preview(self, stage: str, inputs: Mapping[str, Preview], headers: HeaderReader) -> Preview:
        """The entity table with the cut-off column and the target."""
        entities = inputs[self.inputs[1]].columns if len(self.inputs) == 2 else None
        if entities is None:
            return Preview()
        added = [self.cutoff_column, parse_target(self.target).name]
        return Preview(columns=entities.plus(added).renamed(f"the output of label '{stage}'"))

    def preview_problems(self, inputs: Mapping[str, Preview]) -> list[tuple[KeyPath, str]]:
        """A target or cut-off column the entity table already has: found at run time otherwise."""
        entities = inputs[self.inputs[1]].columns if len(self.inputs) == 2 and self.inputs[1] in inputs else None
        if entities is None:
            return []
        name = parse_target(self.target).name
        problems: list[tuple[KeyPath, str]] = []
        if name in entities.names:
            problems.append((("target",), f"the target '{name}' is already a column of the entity table "
                                          f"('{self.inputs[1]}'); name it otherwise"))
        return problems

    def scoring_passthrough(self) -> int:
        """At scoring time there is no future to label: the entity table (input 1) goes on."""
        return 1


@register_stage("label", LabelSpec, produces=Table, accepts=(Table,))
def run_label(spec: LabelSpec, ctx: StageContext, inputs) -> Any:
    events, entities = inputs.values()
    plan = plan_label(by=spec.by, time=spec.time, as_of=spec.as_of, horizon=spec.horizon, target=spec.target,
                      cutoff_column=spec.cutoff_column)
    facts: dict[str, Any] = {}
    out = label_events(events, entities, plan, backend=ctx.backend, facts=facts)
    ctx.facts["cutoffs"] = [c.isoformat() for c in plan.cutoffs]
    ctx.facts["columns"] = [plan.target.name]
    if is_partitioned(out):
        ctx.facts["partitions"] = int(out.npartitions)
        return out
    ctx.facts["rows"] = int(len(out))
    ctx.facts["rows_without_key"] = int(facts.get("rows_without_key", 0))
    ctx.facts["unlabeled"] = int(facts.get("unlabeled", 0))
    return out
