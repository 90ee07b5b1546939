"""Run hooks: how anything that watches a run (terminal, JSON logs, a report, a tracker) attaches.

The runner calls each hook on run, stage, metric, artifact and error events, with structured
data: the run folder, the stage's spec and record, metrics as numbers. The terminal view and
the log lines are hooks (``pipeline.progress``); an HTML report or an MLflow tracker is one
more class with the methods it cares about, passed as ``Runner(hooks=[...])``.

A hook that raises does not fail the run: the error is logged as a warning and the run goes
on. A report that cannot be drawn must not cost a night's training.

Inside a stage, ``StageProgress`` carries what a long stage reports while it runs: lines (an
epoch summary), a bar within a step, and per-step metrics (the torch stage's epochs), which
the runner turns into ``MetricEvent``s. On a Dask worker the same calls travel to the client
as Dask events.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pipeline.record import RunManifest, StageRecord

log = logging.getLogger("pipeline")


class StageProgress(Protocol):
    """How a long stage reports from inside: lines, a bar within a step, metrics per step."""

    def message(self, text: str) -> None: ...
    def bar(self, total: int, description: str) -> AbstractContextManager[Callable[[int], None]]: ...
    def metrics(self, step: int, values: Mapping[str, float]) -> None: ...


class LogProgress:
    """Lines as log records and no bar: for log files, scheduled jobs and library use."""

    def __init__(self, logger: logging.Logger, prefix: str = "") -> None:
        self.logger = logger
        self.prefix = prefix

    def message(self, text: str) -> None:
        self.logger.info("%s%s", self.prefix, text)

    def bar(self, total: int, description: str) -> AbstractContextManager[Callable[[int], None]]:
        return nullcontext(lambda n: None)

    def metrics(self, step: int, values: Mapping[str, float]) -> None:
        """Metrics are shown by the epoch line; hooks get them as events from the runner."""


# ---------------------------------------------------------------------------- events
@dataclass(frozen=True)
class RunInfo:
    """The run every event belongs to."""

    run_id: str
    run_dir: Path
    pipeline: str
    device: str                       # "cpu" | "gpu"
    device_reason: str
    stages: int                       # how many stages the run plans (cached ones included)
    config: Any = None                # the PipelineConfig


@dataclass(frozen=True)
class StageEvent:
    """A stage started or finished (``record.status``: running, succeeded, failed or cached)."""

    run: RunInfo
    record: StageRecord
    spec: Any                         # the stage's params model
    index: int                        # 1-based position in the run's plan
    artifacts_dir: Path | None = None


@dataclass(frozen=True)
class MetricEvent:
    """Numbers a stage measured: per step (an epoch) while it runs, or its final values."""

    run: RunInfo
    stage: str
    values: Mapping[str, float]
    step: int | None = None
    model: str | None = None          # set for an evaluation's per-model metrics


@dataclass(frozen=True)
class ArtifactEvent:
    """A file a stage wrote into the run folder (path relative to it, with its sha256)."""

    run: RunInfo
    stage: str
    path: str
    sha256: str


@dataclass(frozen=True)
class ErrorEvent:
    run: RunInfo
    error: BaseException
    stage: str | None = None


@dataclass(frozen=True)
class RunEvent:
    """The run finished (``status``: succeeded, failed, interrupted) with its record."""

    run: RunInfo
    status: str
    manifest: RunManifest
    extra: dict[str, Any] = field(default_factory=dict)


class RunHook:
    """Base class of hooks: override the events you need; the rest do nothing."""

    def run_started(self, run: RunInfo) -> None: ...
    def cluster_started(self, run: RunInfo, description: str) -> None: ...
    def stage_started(self, event: StageEvent) -> None: ...
    def stage_finished(self, event: StageEvent) -> None: ...
    def metric(self, event: MetricEvent) -> None: ...
    def artifact(self, event: ArtifactEvent) -> None: ...
    def error(self, event: ErrorEvent) -> None: ...
    def run_finished(self, event: RunEvent) -> None: ...

    def stage_progress(self, event: StageEvent) -> StageProgress | None:
        """Where a running stage's lines go (None: this hook shows none)."""
        return None


class HookList(RunHook):
    """Calls every hook in order; a hook that raises is logged and skipped."""

    def __init__(self, hooks: Sequence[RunHook] = ()) -> None:
        self.hooks = list(hooks)

    def _each(self, method: str, *args: Any) -> None:
        for hook in self.hooks:
            try:
                getattr(hook, method)(*args)
            except Exception as exc:  # noqa: BLE001 - a watcher never fails the run
                log.warning("run hook %s.%s failed: %s: %s", type(hook).__name__, method, type(exc).__name__, exc)

    def run_started(self, run: RunInfo) -> None:
        self._each("run_started", run)

    def cluster_started(self, run: RunInfo, description: str) -> None:
        self._each("cluster_started", run, description)

    def stage_started(self, event: StageEvent) -> None:
        self._each("stage_started", event)

    def stage_finished(self, event: StageEvent) -> None:
        self._each("stage_finished", event)

    def metric(self, event: MetricEvent) -> None:
        self._each("metric", event)

    def artifact(self, event: ArtifactEvent) -> None:
        self._each("artifact", event)

    def error(self, event: ErrorEvent) -> None:
        self._each("error", event)

    def run_finished(self, event: RunEvent) -> None:
        self._each("run_finished", event)

    def stage_progress(self, event: StageEvent) -> StageProgress:
        """One progress for the stage: lines to every hook that shows them, metrics as events."""
        shown = []
        for hook in self.hooks:
            try:
                progress = hook.stage_progress(event)
            except Exception as exc:  # noqa: BLE001
                log.warning("run hook %s.stage_progress failed: %s", type(hook).__name__, exc)
                continue
            if progress is not None:
                shown.append(progress)
        return HookProgress(self, event, shown)


class HookProgress:
    """A stage's progress fanned out: lines and bars to the hooks that show them, metrics to
    every hook as ``MetricEvent``s. Only one bar is drawn (the first hook's that has one)."""

    def __init__(self, hooks: HookList, event: StageEvent, shown: list[StageProgress]) -> None:
        self._hooks = hooks
        self._event = event
        self._shown = shown

    def message(self, text: str) -> None:
        for progress in self._shown:
            progress.message(text)

    def bar(self, total: int, description: str) -> AbstractContextManager[Callable[[int], None]]:
        if not self._shown:
            return nullcontext(lambda n: None)
        return self._shown[0].bar(total, description)

    def metrics(self, step: int, values: Mapping[str, float]) -> None:
        self._hooks.metric(MetricEvent(self._event.run, self._event.record.name, dict(values), step=step))
