"""Fitting a feature workflow on a partitioned (Dask) frame in as few passes as possible.

Ops run in order, and an op's statistics must be taken after the ops it depends on have
been applied. An op depends on an earlier one when it reads a column that one writes (or a
column not in the input at all, which only an earlier op can have made). Ops are grouped
into dependency phases; all statistics of one phase are computed in one ``dask.compute``,
which reads the data once (as NVTabular does). The four ops of configs/churn.yaml take
three passes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pipeline.backends import Backend
from pipeline.features.ops import FeatureOp, FillMissing, State


def written_columns(op: FeatureOp) -> set[str]:
    """Columns an op replaces, removes or adds under a name known before fitting."""
    columns = set(op.columns)
    if isinstance(op, FillMissing) and op.indicator:
        columns |= {f"{c}_missing" for c in op.columns}
    return columns


def op_phases(ops: Sequence[FeatureOp], input_columns: Sequence[str]) -> list[int]:
    """Phase number per op: 0 for ops on untouched input columns, else 1 + their deepest input."""
    present = set(input_columns)
    phases: list[int] = []
    for k, op in enumerate(ops):
        needs = set(op.columns)
        earlier = range(k)
        known = present.union(*(written_columns(ops[j]) for j in earlier))
        if needs - known:                         # made by an earlier op under a fitted name (one-hot)
            deps = list(earlier)
        else:
            deps = [j for j in earlier if written_columns(ops[j]) & needs]
        phases.append(1 + max((phases[j] for j in deps), default=-1))
    return phases


def apply_ops(frame: Any, ops: Sequence[FeatureOp], states: Sequence[State], backend: Backend) -> Any:
    """Transform one partition (or frame) with fitted ops, in order."""
    for op, state in zip(ops, states):
        frame = op.transform(frame, backend, state)
    return frame


def fit_partitioned(ops: Sequence[FeatureOp], frame: Any, backend: Backend) -> tuple[list[State], int]:
    """Fitted states for ``ops`` on the Dask frame ``frame``; returns (states, passes)."""
    from pipeline.backends import compute_lazy

    phases = op_phases(ops, [str(c) for c in frame.columns])
    states: list[State | None] = [None] * len(ops)
    for phase in sorted(set(phases)):
        members = [k for k, p in enumerate(phases) if p == phase]
        views, wanted = {}, {}
        for k in members:
            before = [j for j in range(k) if phases[j] < phase]
            view = frame
            if before:
                chosen = [ops[j] for j in before]
                fitted = [states[j] for j in before]
                view = frame.map_partitions(apply_ops, chosen, fitted, backend,
                                            meta=apply_ops(frame._meta, chosen, fitted, backend))
            ops[k].check_columns(view)
            views[k], wanted[k] = view, ops[k].statistics(view, backend)
        keys = [(k, name) for k in members for name in wanted[k]]
        values = compute_lazy(*[wanted[k][name] for k, name in keys]) if keys else ()
        stats: dict[int, dict[str, Any]] = {k: {} for k in members}
        for (k, name), value in zip(keys, values):
            stats[k][name] = backend.to_host(value)
        for k in members:
            states[k] = ops[k].fit_from(stats[k], views[k], backend)
    return [s if s is not None else {} for s in states], len(set(phases))

