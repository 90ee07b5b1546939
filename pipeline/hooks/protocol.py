"""Run hooks: how anything that watches a run (terminal, JSON logs, a report, a tracker) attaches.

The runner calls each hook on run, stage, metric, artifact and error events, with structured
data: the run folder, the stage's spec and record, metrics as numbers. The terminal view and
the log lines are hooks (``pipeline.hooks.progress``); an HTML report or an MLflow tracker is one
more class with the methods it cares about, passed as ``Runner(hooks=[...])`` or registered with
the config section it owns (``pipeline.hooks.hook_registry``).

Besides watching, a hook may take part in the run's bookkeeping, at four points the runner
offers and names no feature at: ``preflight`` (before the run lock: refuse the run), a stage
recorded (fill its record before ``stage_finished``), the run finishing (fill the run record
before its final write) and the run recorded (after that write: sign it). Budgets, costs and
signatures are hooks at those points.

A hook that raises does not fail the run: the error is logged as a warning and the run goes
on. A report that cannot be drawn must not cost a night's training. Two exceptions: a
``preflight`` that raises refuses the run (that is what it is for), and a hook that sets
``critical = True`` fails the run with its error (a run that was to be signed must not end
unsigned).

Inside a stage, ``StageProgress`` carries what a long stage reports while it runs: lines (an
epoch summary), a bar over its steps (boosting rounds, tuning trials, folds, importances), and
per-step metrics (the torch stage's epochs), which the runner turns into ``MetricEvent``s. On a
terminal a bar is drawn; where none can be (a log file, a Dask worker) it becomes a line with
the elapsed time at most every ``STEP_LINE_SECONDS`` and one when it ends (``step_lines``). On
a Dask worker the same calls travel to the client as Dask events.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

from pipeline.core.errors import ConfigError, PipelineError, UsageError
from pipeline.core.settings import Settings, current_settings, register_check
from pipeline.runs.record import RunManifest, StageRecord

log = logging.getLogger("pipeline")

# Where no bar can be drawn (a log file, a Dask worker), a bar's line at most this often;
# $PIPELINE_PROGRESS_SECONDS sets another interval (0: a line per step).
STEP_LINE_SECONDS = 10.0
STEP_LINE_ENV = Settings.variable("progress_seconds")


class StageProgress(Protocol):
    """How a long stage reports from inside: lines, a bar over its steps, metrics per step."""

    def message(self, text: str) -> None: ...
    def bar(self, total: int, description: str) -> AbstractContextManager[Callable[[int], None]]: ...
    def metrics(self, step: int, values: Mapping[str, float]) -> None: ...


def elapsed(seconds: float) -> str:
    """``4.2s``, ``3m07s``, ``1h02m``: an elapsed time as a person reads it."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    return f"{minutes // 60}h{minutes % 60:02d}m"


def progress_seconds(settings: Settings | None = None) -> float:
    """``$PIPELINE_PROGRESS_SECONDS`` as a number of seconds >= 0 (unset: ``STEP_LINE_SECONDS``);
    anything else is refused (a run checks it as it starts)."""
    text = ((current_settings() if settings is None else settings).progress_seconds or "").strip()
    if not text:
        return STEP_LINE_SECONDS
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise ConfigError(f"${STEP_LINE_ENV} is {text!r}: use a number of seconds, 0 or more, between a bar's "
                          f"lines (0: a line per step), or unset it for {STEP_LINE_SECONDS:g}")
    return value


register_check("progress_seconds", check=progress_seconds)


def step_line_seconds() -> float:
    """The interval of a bar's lines: ``$PIPELINE_PROGRESS_SECONDS``, or the default where the
    value is unusable (outside a run, which refuses it as it starts, a bar's lines are no reason
    to fail)."""
    try:
        return progress_seconds()
    except ConfigError:
        return STEP_LINE_SECONDS


@contextmanager
def step_lines(emit: Callable[[str], None], total: int, description: str, *,
               every: float | None = None) -> Iterator[Callable[[int], None]]:
    """A bar as plain lines: ``description: 120/300, 10.0s elapsed`` at most every ``every``
    seconds (default ``step_line_seconds()``), and ``description: 300/300 in 24.1s`` when a bar
    that ran that long ends (not when the work raised: the error says it). A cron log gets a few
    lines for a long step and none for a short one (the stage's own lines and its "done" line say
    enough), never one per boosting round or per torch epoch's batches."""
    every = step_line_seconds() if every is None else every
    started = last = time.monotonic()
    done, shown = 0, False

    def advance(n: int = 1) -> None:
        nonlocal done, last, shown
        done += n
        now = time.monotonic()
        if now - last >= every and done < total:
            last, shown = now, True
            emit(f"{description}: {done}/{total}, {elapsed(now - started)} elapsed")

    yield advance
    took = time.monotonic() - started
    if shown or took >= every:
        emit(f"{description}: {done}/{total} in {elapsed(took)}")


class LogProgress:
    """Lines as log records, and a bar as a line now and then (``step_lines``; none with
    ``bars=False``, as ``--log-format json`` wants): for log files, scheduled jobs and library use."""

    def __init__(self, logger: logging.Logger, prefix: str = "", *, bars: bool = True) -> None:
        self.logger = logger
        self.prefix = prefix
        self.bars = bars

    def message(self, text: str) -> None:
        self.logger.info("%s%s", self.prefix, text)

    def bar(self, total: int, description: str) -> AbstractContextManager[Callable[[int], None]]:
        if not self.bars:
            return nullcontext(lambda n: None)
        return step_lines(self.message, total, description)

    def step_line(self, text: str) -> None:
        """A bar's line from where it ran (a Dask worker): shown as the bar would be."""
        if self.bars:
            self.message(text)

    def metrics(self, step: int, values: Mapping[str, float]) -> None:
        """Metrics are shown by the epoch line; hooks get them as events from the runner."""


class LineProgress:
    """Lines to ``emit`` (a print to stderr), and a bar as ``step_lines``: a run's progress
    where no logging is set up and no live display is wanted (``run_pipeline(progress=True)``)."""

    def __init__(self, emit: Callable[[str], None], prefix: str = "") -> None:
        self.emit = emit
        self.prefix = prefix

    def message(self, text: str) -> None:
        self.emit(f"{self.prefix}{text}")

    def bar(self, total: int, description: str) -> AbstractContextManager[Callable[[int], None]]:
        return step_lines(self.message, total, description)

    def step_line(self, text: str) -> None:
        self.message(text)

    def metrics(self, step: int, values: Mapping[str, float]) -> None:
        """Shown by the lines the stage writes; hooks get them as events from the runner."""


# ---------------------------------------------------------------------------- events
@dataclass(frozen=True)
class RunPlan:
    """A run about to start, before the run lock and the run folder: what ``preflight`` checks."""

    pipeline: str
    runs_dir: Path                    # the pipeline's runs are in <runs_dir>/<pipeline>/
    stages: tuple[str, ...]           # the planned stages in plan order (cached ones included)
    selected: frozenset[str]          # those the selection named (--only/--from/--until)
    config: Any = None                # the PipelineConfig


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
    """Base class of hooks: override the events you need; the rest do nothing.

    The events of one run, in order: ``preflight`` (before the lock), ``run_started``,
    ``cluster_started`` (on a cluster), per stage ``stage_started``, ``stage_recorded`` and
    ``stage_finished`` (a cached stage: the last two), ``metric`` whenever numbers come,
    ``error`` (a run that fails), then ``run_finishing``, the final write of the record,
    ``run_recorded``, ``artifact`` per file and ``run_finished``.
    """

    # True: an exception from this hook fails the run instead of being logged and skipped.
    critical: ClassVar[bool] = False

    def preflight(self, plan: RunPlan) -> None:
        """Before the run lock and the run folder: raise a ``PipelineError`` to refuse the run
        (always raised, whatever ``critical`` says)."""

    def run_started(self, run: RunInfo) -> None: ...
    def cluster_started(self, run: RunInfo, description: str) -> None: ...
    def stage_started(self, event: StageEvent) -> None: ...

    def stage_recorded(self, event: StageEvent) -> None:
        """A stage's outcome is in ``event.record`` (status, times, usage, facts, error): fill in
        what this hook derives from it (its cost, say) before every hook's ``stage_finished``."""

    def stage_finished(self, event: StageEvent) -> None: ...
    def metric(self, event: MetricEvent) -> None: ...
    def artifact(self, event: ArtifactEvent) -> None: ...
    def error(self, event: ErrorEvent) -> None: ...

    def run_finishing(self, event: RunEvent) -> None:
        """The run has its status, end and duration; fill in ``event.manifest`` (run totals,
        why a cap stopped it) before the record's final write."""

    def run_recorded(self, event: RunEvent) -> None:
        """The final record is written (manifest.json): act on the file (sign it)."""

    def run_finished(self, event: RunEvent) -> None: ...

    def stage_progress(self, event: StageEvent) -> StageProgress | None:
        """Where a running stage's lines go (None: this hook shows none)."""
        return None


# The events a hook answers: RunHook's public methods, the names HookList calls.
HOOK_EVENTS = frozenset(name for name, value in vars(RunHook).items() if callable(value) and not name.startswith("_"))
# A public method named like an event (these prefixes, or a name close to an event's) must be
# one: the runner looks events up by name, so a misspelt one would never be called. Other
# public methods (a hook's own helpers) are left alone, as pluggy leaves unprefixed ones.
EVENT_PREFIXES = ("run_", "stage_", "cluster_", "on_")


def unknown_events(hook: object) -> list[str]:
    """The public methods of ``hook``'s class (or of ``hook``, a class) named like an event that
    no event has, each with the event it most likely means."""
    import difflib

    cls = hook if isinstance(hook, type) else type(hook)
    found = []
    for name in sorted(dir(cls)):
        if name.startswith("_") or name in HOOK_EVENTS or not callable(getattr(cls, name, None)):
            continue
        close = difflib.get_close_matches(name, sorted(HOOK_EVENTS), n=1, cutoff=0.8)
        if close or name.startswith(EVENT_PREFIXES):
            found.append(f"'{name}'" + (f" (did you mean '{close[0]}'?)" if close else ""))
    return found


def check_hook(hook: object) -> None:
    """A ``TypeError`` naming each method of ``hook`` that looks like an event but is none."""
    unknown = unknown_events(hook)
    if unknown:
        name = (hook if isinstance(hook, type) else type(hook)).__name__
        raise TypeError(f"run hook {name}: {', '.join(unknown)} answer(s) no hook event, so the run "
                        f"would never call them; the events are {', '.join(sorted(HOOK_EVENTS))}")


class HookList(RunHook):
    """Calls every hook in order; a hook that raises is logged and skipped (unless ``critical``).
    A hook with a method named like an event that is none is refused here (``check_hook``)."""

    def __init__(self, hooks: Sequence[RunHook] = ()) -> None:
        self.hooks = list(hooks)
        for hook in self.hooks:
            try:
                check_hook(hook)
            except TypeError as exc:        # a usage error (exit 2), raised as the run is set up
                raise UsageError(str(exc)) from None

    def _each(self, method: str, *args: Any) -> None:
        for hook in self.hooks:
            call = getattr(hook, method, None)
            if call is None:             # a hook written to the protocol without the newer events
                continue
            if getattr(hook, "critical", False):
                call(*args)
                continue
            try:
                call(*args)
            except Exception as exc:  # noqa: BLE001 - a watcher never fails the run
                log.warning("run hook %s.%s failed: %s: %s", type(hook).__name__, method, type(exc).__name__, exc)

    def preflight(self, plan: RunPlan) -> None:
        """Every hook's check, in order; the first refusal (a ``PipelineError``) is raised. A
        check that fails otherwise (a hook's own bug) is logged and skipped as any hook's
        failure is, or, for a ``critical`` hook, refuses the run naming it (exit 2)."""
        for hook in self.hooks:
            check = getattr(hook, "preflight", None)
            if check is None:
                continue
            try:
                check(plan)
            except PipelineError:
                raise
            except Exception as exc:  # noqa: BLE001 - a hook's bug: named, not an internal error
                if getattr(hook, "critical", False):
                    raise ConfigError(f"run hook {type(hook).__name__}.preflight failed: {type(exc).__name__}: "
                                      f"{exc}; the hook is critical, so the run does not start") from exc
                log.warning("run hook %s.preflight failed: %s: %s", type(hook).__name__, type(exc).__name__, exc)

    def run_started(self, run: RunInfo) -> None:
        self._each("run_started", run)

    def cluster_started(self, run: RunInfo, description: str) -> None:
        self._each("cluster_started", run, description)

    def stage_started(self, event: StageEvent) -> None:
        self._each("stage_started", event)

    def stage_recorded(self, event: StageEvent) -> None:
        self._each("stage_recorded", event)

    def stage_finished(self, event: StageEvent) -> None:
        self._each("stage_finished", event)

    def metric(self, event: MetricEvent) -> None:
        self._each("metric", event)

    def artifact(self, event: ArtifactEvent) -> None:
        self._each("artifact", event)

    def error(self, event: ErrorEvent) -> None:
        self._each("error", event)

    def run_finishing(self, event: RunEvent) -> None:
        self._each("run_finishing", event)

    def run_recorded(self, event: RunEvent) -> None:
        self._each("run_recorded", event)

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

    def step_line(self, text: str) -> None:
        """A bar's line that a Dask worker sent: to the hooks that show bars (``step_line``), or
        as a line to those that have no such method."""
        for progress in self._shown:
            shown = getattr(progress, "step_line", None)
            (shown or progress.message)(text)

    def metrics(self, step: int, values: Mapping[str, float]) -> None:
        self._hooks.metric(MetricEvent(self._event.run, self._event.record.name, dict(values), step=step))
