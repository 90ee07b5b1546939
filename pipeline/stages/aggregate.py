"""``aggregate``: one row per entity and cut-off, with features of its events before the
cut-off over trailing windows (the engine is ``pipeline.events``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, field_validator, model_validator

from pipeline.backends import is_partitioned
from pipeline.core.errors import DataError
from pipeline.events import (
    AggregationPlan, aggregate_events, check_feature_value, check_output_names, check_windows, parse_cutoffs,
    parse_features, plan_aggregation,
)
from pipeline.core.date_text import date_text
from pipeline.backends.headers import ColumnSet, HeaderReader
from pipeline.stages.spec import ColumnRef, Preview, StageContext, StageSpec, Table, only_input, register_stage

__all__ = ["AggregateSpec", "aggregate_events", "run_aggregate"]

FeatureValue = Annotated[str | dict[str, str | bool | list[str]], AfterValidator(check_feature_value)]


class CutoffFields(StageSpec):
    """Fields every stage with cut-offs shares: keys, time column, the cut-offs."""

    by: str | list[str] = Field(description="Entity key column(s): one output row per entity and cut-off.")
    time: str = Field(min_length=1, description=(
        "Datetime column of the events (read it as dates in the load stage: dates: {date: \"%Y%m%d\"})."))
    as_of: str | list[str] = Field(description=(
        "Cut-off date, or a list of them (rolling cut-offs, stacked with the cut-off as a column). "
        "Features see events strictly before it; labels events from it on."))
    cutoff_column: str = Field("as_of", min_length=1, description="Name of the cut-off column in the output.")

    @field_validator("by")
    @classmethod
    def _keys(cls, by: str | list[str]) -> str | list[str]:
        keys = [by] if isinstance(by, str) else by
        if not keys or any(not k for k in keys):
            raise ValueError("by names the entity key column(s): a name or a non-empty list of names")
        if len(set(keys)) != len(keys):
            raise ValueError(f"by lists a column twice: {keys}")
        return by

    @field_validator("as_of", mode="before")
    @classmethod
    def _as_text(cls, value: Any) -> Any:
        if isinstance(value, (list, tuple)):
            return [date_text(v) for v in value]
        return date_text(value)

    @field_validator("as_of")
    @classmethod
    def _dates(cls, value: str | list[str]) -> str | list[str]:
        parse_cutoffs(value)
        return value

    @property
    def keys(self) -> list[str]:
        return [self.by] if isinstance(self.by, str) else list(self.by)

    def key_refs(self, input: int = 0) -> list[ColumnRef]:
        """``by`` and ``time`` in the events table (input ``input``)."""
        keys = [((), self.by)] if isinstance(self.by, str) else [((i,), k) for i, k in enumerate(self.by)]
        return [*(ColumnRef(("by", *where), key, "by key", input=input) for where, key in keys),
                ColumnRef(("time",), self.time, "time column", input=input)]

    def _check_cutoff_column(self) -> None:
        if self.cutoff_column in self.keys or self.cutoff_column == self.time:
            raise ValueError(f"cutoff_column '{self.cutoff_column}' is also a key or the time column; name it otherwise")

    def at_cutoff(self, as_of: str) -> StageSpec:
        """A copy at the one cut-off ``as_of`` (scoring from raw events at that date)."""
        return self.model_copy(update={"as_of": [as_of]})


class AggregateSpec(CutoffFields):
    kind: Literal["aggregate"]
    windows: list[str] = Field(default_factory=lambda: ["all"], description=(
        "Trailing windows: <n>d days, <n>w weeks, <n>h hours, or all (every event before the cut-off). "
        "Window w at cut-off c holds events with c - w <= time < c."))
    features: dict[str, FeatureValue] = Field(description=(
        "Output name -> aggregate: count | recency | tenure | interval_mean, or {sum|mean|min|max|std|nunique|"
        "first|last: column}, optionally with its own windows: [...]. Columns are <name>_<window>."))
    min_inputs = 1
    max_inputs = 1

    @field_validator("windows")
    @classmethod
    def _windows(cls, windows: list[str]) -> list[str]:
        return check_windows(windows)

    @field_validator("features")
    @classmethod
    def _some_features(cls, features: dict[str, Any]) -> dict[str, Any]:
        if not features:
            raise ValueError("features is empty: name at least one, such as {orders: count}")
        return features

    @model_validator(mode="after")
    def _columns(self) -> AggregateSpec:
        self._check_cutoff_column()
        check_output_names(parse_features(self.features, self.windows), [*self.keys, self.cutoff_column])
        return self

    def columns_read(self, inputs: Mapping[str, Preview], headers: HeaderReader) -> list[ColumnRef]:
        """The keys, the time column and each feature's column in the events."""
        refs = self.key_refs()
        for feature in parse_features(self.features, self.windows):
            if feature.column is not None:
                refs.append(ColumnRef(("features", feature.name, feature.aggregate), feature.column,
                                      f"{feature.aggregate} column"))
        return refs

    def preview(self, stage: str, inputs: Mapping[str, Preview], headers: HeaderReader) -> Preview:
        """One row per key and cut-off: the keys, the cut-off column, the features' columns."""
        names = (*self.keys, self.cutoff_column, *self.plan().output_names)
        return Preview(columns=ColumnSet(names, source=f"the output of aggregate '{stage}'"))

    def plan(self) -> AggregationPlan:
        return plan_aggregation(by=self.by, time=self.time, as_of=self.as_of, features=self.features,
                                windows=self.windows, cutoff_column=self.cutoff_column)


@register_stage("aggregate", AggregateSpec, produces=Table, accepts=(Table,))
def run_aggregate(spec: AggregateSpec, ctx: StageContext, inputs) -> Any:
    events = only_input(inputs)
    plan = spec.plan()
    facts: dict[str, Any] = {}
    out = aggregate_events(events, plan, backend=ctx.backend, facts=facts)
    ctx.facts["cutoffs"] = [c.isoformat() for c in plan.cutoffs]
    ctx.facts["columns"] = plan.output_names
    if is_partitioned(out):
        ctx.facts["partitions"] = int(out.npartitions)      # lazy: counting rows would compute it all
        return out
    ctx.facts["rows"] = int(len(out))
    ctx.facts["rows_without_key"] = int(facts.get("rows_without_key", 0))
    if not len(out):
        raise DataError(f"no entity has an event before the cut-off(s) {', '.join(ctx.facts['cutoffs'])} "
                        f"(time column '{spec.time}'): check as_of against the dates in the events")
    if len(plan.cutoffs) > 1:
        warn_empty_cutoffs(out, plan.cutoffs, spec.cutoff_column, spec.time, ctx)
    return out


def warn_empty_cutoffs(out: Any, cutoffs: list[Any], column: str, time: str, ctx: StageContext) -> None:
    """A cut-off of a list before every event gives no rows: most likely a mistyped year, and
    the training rows it should have given are gone, so it is named (the other cut-offs stand)."""
    import pandas as pd

    present = {pd.Timestamp(v) for v in ctx.backend.to_host(out[column].unique()).tolist()}
    empty = [c.isoformat() for c in cutoffs if pd.Timestamp(c) not in present]
    ctx.facts["empty_cutoffs"] = empty
    if empty:
        ctx.logger.warning("cut-off(s) %s gave no rows: no entity has an event before them (time column '%s'); "
                           "check as_of against the dates in the events", ", ".join(empty), time)
