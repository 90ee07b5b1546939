"""Rebuild the table a run's model was trained from, out of new raw events at a new cut-off.

A model trained on customer features aggregated from an event log cannot score the log
itself: the nightly job has tonight's events and wants tonight's scores. ``pipeline predict
--as-of DATE`` therefore replays the run's own table stages (those upstream of the model whose
output is a table: load, aggregate, label, join...) with the definitions in the run's
config.yaml:

- the load that feeds the stages with a cut-off (the event source) reads ``--input`` instead of
  its path, with its own read options (dates, dtypes, missing-value strings);
- every stage with a cut-off runs at ``as_of`` (``StageSpec.at_cutoff``);
- a stage that looks past the cut-off (a label) passes its entity table on instead of running
  (``StageSpec.scoring_passthrough``): there is no future at scoring time;
- other loads (a customer table to join) read their paths as the run did;
- a stage whose output is known only when it runs (``python``) that reads tables only is
  replayed as one of them.

The table the model's split read comes out, and ``pipeline.predict.batch`` scores it as it scores
any input. Nothing here names a stage kind: kinds say what they do through their specs and
their registered output type.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from pipeline.core.dag import topological_order
from pipeline.core.errors import DataError, UsageError
from pipeline.stages import STAGE_KINDS, StageContext, StageSpec
from pipeline.stages.spec import Table

log = logging.getLogger("pipeline")


@dataclass(frozen=True)
class TablePlan:
    """What to replay: the table stages in order, the event source and the final table."""

    order: list[str]
    source: str
    final: str


def parse_as_of(text: str) -> str:
    """``--as-of`` as an ISO date(-time) text, read by the rule a config's ``as_of`` follows
    (``events.durations.parse_cutoff``); anything else is a usage error."""
    from pipeline.events.durations import parse_cutoff

    try:
        stamp = parse_cutoff(text)
    except ValueError as exc:
        raise UsageError(f"--as-of: {exc}") from None
    return stamp.isoformat()


def plan_tables(stages: Mapping[str, StageSpec], model_stage: str) -> TablePlan:
    """The table stages upstream of ``model_stage``, the event source among them, and the table
    the first non-table stage reads (the split's input)."""
    if model_stage not in stages:
        raise DataError(f"the run's config has no stage '{model_stage}' (the model's); cannot rebuild its input")
    upstream = _upstream(stages, model_stage)
    tables = _tables(stages, upstream)
    finals = sorted({i for name in upstream - tables for i in stages[name].inputs if i in tables})
    if len(finals) != 1:
        raise DataError(f"model '{model_stage}' reads {len(finals)} tables ({', '.join(finals) or 'none'}); "
                        "--as-of rebuilds a run whose model was trained from one table")
    needed = _upstream(stages, finals[0])
    with_cutoff = [name for name in needed if _has_cutoff(stages[name])]
    if not with_cutoff:
        raise UsageError(f"--as-of: the table model '{model_stage}' was trained on has no stage with a cut-off "
                         "(aggregate, label); score its rows directly without --as-of")
    sources = sorted({s for name in with_cutoff for s in _upstream(stages, name) if not stages[s].inputs})
    if len(sources) != 1:
        raise UsageError(f"--as-of: the run's cut-off stages read {len(sources)} sources ({', '.join(sources)}); "
                         "--input can stand for one event table only")
    graph = {name: [i for i in stages[name].inputs if i in needed] for name in stages if name in needed}
    return TablePlan(order=topological_order(graph), source=sources[0], final=finals[0])


def rebuild_table(stages: Mapping[str, StageSpec], model_stage: str, files: list[tuple[Path, str]], as_of: str,
                  backend: Any, *, seed: int = 0) -> Any:
    """The table ``model_stage`` was trained from, rebuilt from ``files`` (the new events) at
    ``as_of``. Stage failures are raised as they are (DataError naming the column...)."""
    plan = plan_tables(stages, model_stage)
    outputs: dict[str, Any] = {}
    for name in plan.order:
        spec = stages[name]
        kind = STAGE_KINDS[spec.kind]
        ctx = StageContext(backend=backend, seed=seed, stage=name, logger=log)
        inputs = {i: outputs[i] for i in spec.inputs}
        if name == plan.source:
            outputs[name] = _read_source(spec, kind, ctx, files)
            continue
        passthrough = spec.scoring_passthrough()
        if passthrough is not None:
            outputs[name] = list(inputs.values())[passthrough]
            continue
        outputs[name] = kind.run(spec.at_cutoff(as_of), ctx, inputs)
    return outputs[plan.final]


def _read_source(spec: StageSpec, kind: Any, ctx: StageContext, files: list[tuple[Path, str]]) -> Any:
    """Each input file read as the source stage read its own path (same options), then stacked."""
    frames = []
    for path, fmt in files:
        frames.append(kind.run(spec.reading(str(path), fmt), ctx, {}))
    if len(frames) == 1:
        return frames[0]
    return ctx.backend.frame.concat(frames, ignore_index=True)


def _upstream(stages: Mapping[str, StageSpec], stage: str) -> set[str]:
    seen, todo = set(), [stage]
    while todo:
        name = todo.pop()
        if name in seen or name not in stages:
            continue
        seen.add(name)
        todo += list(stages[name].inputs)
    return seen


def _tables(stages: Mapping[str, StageSpec], names: set[str]) -> set[str]:
    """The stages among ``names`` whose output is a table: those of a kind that produces one,
    and those of a kind whose output is known only when it runs (a ``python`` stage) reading
    tables only: a step between the table stages (clipping a column, dropping duplicate
    events) is part of the table the model was trained from, and is replayed with them."""
    graph = {name: [i for i in stages[name].inputs if i in names] for name in names}
    tables: set[str] = set()
    for name in topological_order(graph):
        kind = STAGE_KINDS.get(stages[name].kind)
        if kind is None:
            continue
        if isinstance(kind.produces, type) and issubclass(kind.produces, Table):
            tables.add(name)
        elif kind.produces is object and stages[name].inputs and all(i in tables for i in stages[name].inputs):
            tables.add(name)
    return tables


def _has_cutoff(spec: StageSpec) -> bool:
    """Whether the spec changes with the cut-off (its kind overrides ``at_cutoff``)."""
    return type(spec).at_cutoff is not StageSpec.at_cutoff
