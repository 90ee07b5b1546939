"""How a run shows progress, as run hooks: a live view on a terminal, log lines elsewhere.

Scheduled jobs read the log lines (one per stage event, timestamped, no control characters;
JSON with ``--log-format json``); people at a terminal get a spinner per stage and a summary
table. Both are ``RunHook``s (``pipeline.hooks.protocol``) like any report or tracker.

Inside a stage (boosting rounds, tuning trials, folds, importances, epochs) a terminal gets a
``rich`` bar with the elapsed time; a log gets the bar as a line now and then and one when it
ends (``pipeline.hooks.protocol.step_lines``); JSON logs get no bar lines (a log shipper indexes events,
not progress).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from pipeline.hooks.protocol import LogProgress, RunEvent, RunHook, RunInfo, StageEvent, step_lines

log = logging.getLogger("pipeline")


def _mib(value: int | None) -> str:
    return "-" if value is None else f"{value / 2**20:,.0f} MiB"


class LogHook(RunHook):
    """One log line per event, for cron, Kubernetes and CI logs; ``bars=False`` (JSON logs):
    no lines for the bars inside a stage."""

    def __init__(self, *, bars: bool = True) -> None:
        self.bars = bars

    def run_started(self, run: RunInfo) -> None:
        log.info("run %s started on %s (%s); %d stage(s)", run.run_id, run.device, run.device_reason, run.stages,
                 extra={"event": "run_started", "run_id": run.run_id, "device": run.device, "stages": run.stages})

    def cluster_started(self, run: RunInfo, description: str) -> None:
        log.info("cluster: %s", description)

    def stage_started(self, event: StageEvent) -> None:
        record, index, total = event.record, event.index, event.run.stages
        log.info("[%d/%d] %s (%s) started", index, total, record.name, record.kind,
                 extra={"event": "stage_started", "stage": record.name, "kind": record.kind})

    def stage_progress(self, event: StageEvent) -> LogProgress:
        return LogProgress(log, prefix=f"{event.record.name}: ", bars=self.bars)

    def run_finished(self, event: RunEvent) -> None:
        manifest = event.manifest
        metrics = manifest.metrics or {}
        log.info("run %s %s in %.2fs", manifest.run_id, event.status, manifest.duration_s or 0,
                 extra={"event": "run_finished", "run_id": manifest.run_id, "status": event.status,
                        "seconds": manifest.duration_s, "metrics": metrics.get("models"),
                        "best": metrics.get("best")})

    def stage_finished(self, event: StageEvent) -> None:
        record, index, total = event.record, event.index, event.run.stages
        extra = {"event": "stage_finished", "stage": record.name, "kind": record.kind, "status": record.status,
                 "seconds": record.seconds, "peak_rss_bytes": record.peak_rss_bytes, "worker": record.worker}
        if record.status == "cached":
            log.info("[%d/%d] %s (%s) unchanged: taken from the cache", index, total, record.name, record.kind,
                     extra=extra)
            return
        if record.status == "failed":
            log.error("[%d/%d] %s (%s) failed after %.2fs: %s", index, total, record.name, record.kind,
                      record.seconds or 0, record.error, extra={**extra, "error": record.error})
        else:
            log.info("[%d/%d] %s (%s) done in %.2fs, peak RSS %s%s", index, total, record.name, record.kind,
                     record.seconds or 0, _mib(record.peak_rss_bytes),
                     f" on {record.worker}" if record.worker else "", extra=extra)


class ConsoleProgress:
    """Epoch lines printed above the spinner, and a transient bar within each epoch."""

    def __init__(self, reporter: ConsoleHook, stage: str = "") -> None:
        self.reporter = reporter
        self.stage = stage

    def message(self, text: str) -> None:
        self.reporter.console.print(f"    {text}", highlight=False)

    def step_line(self, text: str) -> None:
        """A bar's line from a Dask worker (no bar can be drawn for it here)."""
        self.message(f"{self.stage}: {text}" if self.stage else text)

    @contextmanager
    def bar(self, total: int, description: str) -> Iterator[Callable[[int], None]]:
        # rich shows one live display at a time: the spinner pauses while the bar runs, and a
        # bar inside a bar (stages on several threads) is drawn as lines instead.
        if self.reporter._bar_open:
            with step_lines(self.step_line, total, description) as advance:
                yield advance
            return
        status = self.reporter._status
        if status is not None:
            status.stop()
        label = f"{self.stage}: {description}" if self.stage else description
        columns = (TextColumn("    {task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        self.reporter._bar_open = True
        try:
            with Progress(*columns, console=self.reporter.console, transient=True) as bar:
                task = bar.add_task(label, total=total)
                yield lambda n: bar.advance(task, n)
        finally:
            self.reporter._bar_open = False
            if status is not None and self.reporter._status is status:
                status.start()


class ConsoleHook(RunHook):
    """A spinner while a stage runs and a line with time and memory when it ends."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self._status = None
        self._running: dict[str, str] = {}     # stages running now (several at once on a cluster)
        self._bar_open = False

    def run_started(self, run: RunInfo) -> None:
        self.console.print(f"[bold]run[/] {run.run_id} on [bold]{run.device}[/] [dim]({run.device_reason})[/]")

    def cluster_started(self, run: RunInfo, description: str) -> None:
        self.console.print(f"[bold]cluster[/] {description}")

    def stage_started(self, event: StageEvent) -> None:
        record, index, total = event.record, event.index, event.run.stages
        self._running[record.name] = f"[{index}/{total}] {record.name} [dim]({record.kind})[/]"
        self._show_running()

    def _show_running(self) -> None:
        if not self._running:
            if self._status is not None:
                self._status.stop()
                self._status = None
            return
        text = ", ".join(self._running.values()) + " running..."
        if self._status is None:
            self._status = self.console.status(text)
            self._status.start()
        else:
            self._status.update(text)

    def stage_progress(self, event: StageEvent) -> ConsoleProgress:
        return ConsoleProgress(self, event.record.name)

    def run_finished(self, event: RunEvent) -> None:
        self._running.clear()                  # the CLI prints the metrics table and the run folder
        self._show_running()

    def stage_finished(self, event: StageEvent) -> None:
        record, index, total = event.record, event.index, event.run.stages
        self._running.pop(record.name, None)
        self._show_running()
        if record.status == "cached":
            self.console.print(f"[cyan]↺[/] [{index}/{total}] {record.name} [dim]({record.kind})[/]  "
                               "unchanged: taken from the cache")
            return
        mark = "[red]✗[/]" if record.status == "failed" else "[green]✓[/]"
        note = "" if record.selected else " [dim](needed by the selection)[/]"
        if record.worker:
            note += f" [dim]on {record.worker}[/]"
        self.console.print(
            f"{mark} [{index}/{total}] {record.name} [dim]({record.kind})[/]  "
            f"{record.seconds or 0:.2f}s  peak RSS {_mib(record.peak_rss_bytes)}"
            + (f"  GPU {_mib(record.peak_device_bytes)}" if record.peak_device_bytes is not None else "")
            + note
        )
