"""The one fit driver of a feature workflow: statistics phase by phase, in memory or on Dask.

Ops run in order, and an op's statistics must be taken after the ops it depends on have
been applied. An op depends on an earlier one when it reads a column that one writes (or a
column not in the input at all, which only an earlier op can have made). Ops are grouped
into dependency phases, and the statistics of one phase are taken together:

- on a Dask frame they are lazy and computed in one ``dask.compute``, which reads the data
  once per phase (as NVTabular does); the four ops of configs/churn.yaml take three passes;
- on a pandas or cuDF frame they are plain values, computed as they are asked for.

Either way an op's statistics are taken on the frame after the earlier-phase ops before it
(a "view"), which holds the same values in the columns it reads as the frame after every op
before it: an op left out writes none of them, or the op would be in a later phase. Views
are built on the previous one when they extend it, so in memory each op is applied about
once during the fit, not once per later op.

An op that learns from the label (``uses_target``) is fitted with the training split's
``Target``, and the views are built with each op's ``transform_training``: the ops fitted after
it, and the model, see the values the training rows get (out of fold), not the ones scoring
computes from the whole split. Such an op fits in memory only.

An op's code runs inside ``blamed``: an error of its own that is not a ``PipelineError`` (a
plugin op's ``KeyError``) becomes a ``FeatureOpError`` naming the op and its position in the
list its user wrote (``feature ops[2] (clip_outliers): KeyError: 'nope'``); and each transform's
output is checked to be a frame of the rows it was given (``transformed``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, cast

from pipeline.backends import Backend, compute_lazy, is_partitioned
from pipeline.core.errors import ConfigError, DataError, PipelineError
from pipeline.features.ops import FeatureOp, OpState, fit_state
from pipeline.features.ops.op_base import Target, op_statistics


class FeatureOpError(Exception):
    """An op's fit or transform failed with an error that is not a ``PipelineError`` (a bug in
    the op, often a plugin's), or broke the workflow's contract (other rows than it was given):
    the message names the op and its position in the ops list, and the op's own error is the
    ``__cause__``. Not a ``PipelineError``: in a stage it is that stage's failure (exit 4), as
    the op's error was before it was named."""

    def __init__(self, position: int, op: str, detail: str) -> None:
        super().__init__(position, op, detail)          # the args pickle it (Dask sends it back from workers)
        self.position, self.op, self.detail = position, op, detail

    def __str__(self) -> str:
        return f"feature ops[{self.position}] ({self.op}): {self.detail}"


# What an op raises that goes on as it is: the package's errors (the built-in ops' messages name
# the op already), and those the CLI maps to exit codes of their own (out of memory, an OS error).
PASSED_THROUGH = (PipelineError, MemoryError, OSError)


@contextmanager
def blamed(op: FeatureOp, position: int) -> Iterator[None]:
    """Run ``op``'s own code (fit or transform); any other error it raises becomes a
    ``FeatureOpError`` naming it and its position, with that error as the cause."""
    try:
        yield
    except PASSED_THROUGH:
        raise
    except Exception as exc:  # noqa: BLE001 - an op's bug, whatever it is, is named, not swallowed
        detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        raise FeatureOpError(position, op.op, detail) from exc


def transformed(op: FeatureOp, position: int, frame: Any, backend: Backend, state: OpState,
                target: Target | None = None) -> Any:
    """``op.transform`` of ``frame`` (``transform_training`` given the labels), which must be a
    frame of as many rows: an op that adds or drops rows would leave the labels misaligned, and
    the model's fit would be the first to notice. ``len`` only: a cuDF frame knows it without a
    pass over the data (comparing indexes would be one)."""
    with blamed(op, position):
        if target is None:
            out = op.transform(frame, backend, state)
        else:
            out = op.transform_training(frame, backend, state, target)
    if not hasattr(out, "columns"):
        raise FeatureOpError(position, op.op, f"transform returned {'None' if out is None else type(out).__name__}, "
                                              "not a frame; return the frame with the op's columns changed")
    if len(out) != len(frame):
        raise FeatureOpError(position, op.op, f"transform returned {len(out)} rows for {len(frame)}; an op keeps "
                                              "the rows it is given (one row out per row in, in order), or the "
                                              "labels no longer line up with them")
    if len(set(out.columns)) != len(out.columns):
        # An op named a new column like one already there (fill_missing's "x_missing", one_hot's
        # "x=a"): every later op would read two columns under one name.
        repeated = sorted({str(c) for c in out.columns if list(out.columns).count(c) > 1})
        raise DataError(f"feature ops[{position}] ({op.op}) adds column(s) {repeated}, which the table already has; "
                        "rename or drop that input column (a load's columns: or a drop op before it), or leave the "
                        "op's new column out")
    return out


def op_phases(ops: Sequence[FeatureOp], input_columns: Sequence[str]) -> list[int]:
    """Phase number per op: 0 for ops on untouched input columns, else 1 + their deepest input."""
    present = set(input_columns)
    phases: list[int] = []
    for k, op in enumerate(ops):
        needs = set(op.columns)
        earlier = range(k)
        known = present.union(*(ops[j].written_columns() for j in earlier))
        if needs - known:                         # made by an earlier op under a fitted name (one-hot)
            deps = list(earlier)
        else:
            deps = [j for j in earlier if ops[j].written_columns() & needs]
        phases.append(1 + max((phases[j] for j in deps), default=-1))
    return phases


def required_columns(ops: Sequence[FeatureOp], input_columns: Sequence[str]) -> list[str]:
    """The input columns scoring needs, in input order: those an op reads before any op
    replaces or removes them, and those no op touches (they reach the model as they are).
    A column that is only dropped (a label-side column, say) is not needed."""
    untouched, needed = set(input_columns), set()
    for op in ops:
        needed |= op.read_columns() & untouched
        untouched -= op.written_columns()
    needed |= untouched
    return [c for c in input_columns if c in needed]


def apply_ops(frame: Any, ops: Sequence[FeatureOp], states: Sequence[OpState], backend: Backend,
              positions: Sequence[int] | None = None) -> Any:
    """Transform one partition (or frame) with fitted ops, in order. ``positions``: each op's
    place in the list its user wrote, for messages (default: its index in ``ops``)."""
    for position, op, state in zip(positions or range(len(ops)), ops, states):
        frame = transformed(op, position, frame, backend, state)
    return frame


def apply_training_ops(frame: Any, ops: Sequence[FeatureOp], states: Sequence[OpState], backend: Backend,
                       target: Target, positions: Sequence[int] | None = None) -> Any:
    """The training frame through fitted ops, in order, as the model trains on it."""
    for position, op, state in zip(positions or range(len(ops)), ops, states):
        frame = transformed(op, position, frame, backend, state, target)
    return frame


@dataclass
class Views:
    """The input frame after a list of fitted ops (by position), built on the last view asked
    for when the new list extends it, else from the input again."""

    frame: Any
    backend: Backend
    applied: list[int] = field(default_factory=list)
    view: Any = None
    # The frame's labels: views are then built with ``transform_training`` (in memory only).
    target: Target | None = None
    # Each op's place in the list its user wrote, by index in the ops (for messages).
    positions: Sequence[int] | None = None

    def after(self, chosen: list[int], ops: Sequence[FeatureOp], states: Sequence[OpState | None]) -> Any:
        if self.view is None or chosen[:len(self.applied)] != self.applied:
            self.applied, self.view = [], self.frame
        extra = chosen[len(self.applied):]
        if extra:
            where = [self.positions[j] if self.positions is not None else j for j in extra]
            self.view = self._apply(self.view, [ops[j] for j in extra], [states[j] for j in extra], where)
            self.applied = list(chosen)
        return self.view

    def _apply(self, frame: Any, ops: list[FeatureOp], states: list[Any], positions: list[int]) -> Any:
        if self.target is not None:
            return apply_training_ops(frame, ops, states, self.backend, self.target, positions)
        if not is_partitioned(frame):
            return apply_ops(frame, ops, states, self.backend, positions)
        return frame.map_partitions(apply_ops, ops, states, self.backend, positions,
                                    meta=apply_ops(frame._meta, ops, states, self.backend, positions))


@dataclass
class FittedOps:
    """The fitted state of every op, the passes it took, and the views built on the way."""

    states: list[OpState]
    passes: int
    views: Views

    def transformed(self, ops: Sequence[FeatureOp]) -> Any:
        """The input frame after every op (in memory: mostly the fit's last view, extended)."""
        return self.views.after(list(range(len(ops))), ops, self.states)


def fit_ops(ops: Sequence[FeatureOp], frame: Any, backend: Backend, target: Target | None = None,
            positions: Sequence[int] | None = None) -> FittedOps:
    """Fit ``ops`` in order on ``frame`` (pandas, cuDF or Dask), one dependency phase at a time;
    ``target``: the frame's labels, read by the ops that ``uses_target``; ``positions``: each
    op's place in the list its user wrote, which an op's failure is named by (default: its
    index in ``ops``)."""
    where = list(positions) if positions is not None else list(range(len(ops)))
    phases = op_phases(ops, [str(c) for c in frame.columns])
    lazy = is_partitioned(frame)
    learners = [op.op for op in ops if op.uses_target]
    if lazy and learners:
        raise ConfigError(f"feature op '{learners[0]}' learns from the label and encodes the training rows out of "
                          "fold, which needs the training split in memory; partitioned features (Dask) cannot: "
                          "drop partitioning for this run, or use frequency_encode, hash_encode or categorify")
    states: list[OpState | None] = [None] * len(ops)
    views = Views(frame, backend, target=target if learners else None, positions=where)
    for phase in sorted(set(phases)):
        members = [k for k, p in enumerate(phases) if p == phase]
        wanted: dict[int, dict[str, Any]] = {}
        for k in members:
            view = views.after([j for j in range(k) if phases[j] < phase], ops, states)
            ops[k].check_columns(view)
            with blamed(ops[k], where[k]):
                wanted[k] = op_statistics(ops[k], view, backend, target)
        for k, stats in _host_values(wanted, backend, lazy=lazy).items():
            with blamed(ops[k], where[k]):
                states[k] = fit_state(ops[k], stats, backend)
    return FittedOps(cast(list[OpState], states), len(set(phases)), views)


def _host_values(wanted: dict[int, dict[str, Any]], backend: Backend, *, lazy: bool) -> dict[int, dict[str, Any]]:
    """Host values of one phase's statistics: lazy ones computed together (one pass over the
    data), plain ones as they are."""
    keys = [(k, name) for k, stats in wanted.items() for name in stats]
    values = [wanted[k][name] for k, name in keys]
    if lazy and values:
        values = list(compute_lazy(*values))
    out: dict[int, dict[str, Any]] = {k: {} for k in wanted}
    for (k, name), value in zip(keys, values):
        out[k][name] = backend.to_host(value)
    return out
