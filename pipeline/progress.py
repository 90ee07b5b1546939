"""How a run shows progress: a live view on a terminal, plain log lines everywhere else.

Scheduled jobs read the log lines (one per stage event, timestamped, no control characters);
people at a terminal get a spinner per stage and a summary table.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from pipeline.backends import DeviceChoice
from pipeline.runner import StageRecord
from pipeline.stages.base import LogProgress

log = logging.getLogger("pipeline")


def _mib(value: int | None) -> str:
    return "-" if value is None else f"{value / 2**20:,.0f} MiB"


class LogReporter:
    """One log line per event, for cron, Kubernetes and CI logs."""

    def run_started(self, run_id: str, device: DeviceChoice, total: int) -> None:
        log.info("run %s started on %s (%s); %d stage(s)", run_id, device.device, device.reason, total,
                 extra={"event": "run_started", "run_id": run_id, "device": device.device, "stages": total})

    def cluster_started(self, description: str) -> None:
        log.info("cluster: %s", description)

    def stage_started(self, record: StageRecord, index: int, total: int) -> None:
        log.info("[%d/%d] %s (%s) started", index, total, record.name, record.kind,
                 extra={"event": "stage_started", "stage": record.name, "kind": record.kind})

    def stage_progress(self, record: StageRecord) -> LogProgress:
        return LogProgress(log, prefix=f"{record.name}: ")

    def run_finished(self, run_id: str, status: str, manifest: dict) -> None:
        metrics = manifest.get("metrics") or {}
        log.info("run %s %s in %.2fs", run_id, status, manifest.get("duration_s") or 0,
                 extra={"event": "run_finished", "run_id": run_id, "status": status,
                        "seconds": manifest.get("duration_s"), "metrics": metrics.get("models"),
                        "best": metrics.get("best")})

    def stage_finished(self, record: StageRecord, index: int, total: int) -> None:
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

    def __init__(self, reporter: ConsoleReporter) -> None:
        self.reporter = reporter

    def message(self, text: str) -> None:
        self.reporter.console.print(f"    {text}", highlight=False)

    @contextmanager
    def bar(self, total: int, description: str) -> Iterator[Callable[[int], None]]:
        # rich shows one live display at a time: the spinner pauses while the bar runs.
        status = self.reporter._status
        if status is not None:
            status.stop()
        columns = (TextColumn("    {task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=self.reporter.console, transient=True) as bar:
            task = bar.add_task(description, total=total)
            yield lambda n: bar.advance(task, n)
        if status is not None:
            status.start()


class ConsoleReporter:
    """A spinner while a stage runs and a line with time and memory when it ends."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self._status = None
        self._running: dict[str, str] = {}     # stages running now (several at once on a cluster)

    def run_started(self, run_id: str, device: DeviceChoice, total: int) -> None:
        self.console.print(f"[bold]run[/] {run_id} on [bold]{device.device}[/] [dim]({device.reason})[/]")

    def cluster_started(self, description: str) -> None:
        self.console.print(f"[bold]cluster[/] {description}")

    def stage_started(self, record: StageRecord, index: int, total: int) -> None:
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

    def stage_progress(self, record: StageRecord) -> ConsoleProgress:
        return ConsoleProgress(self)

    def run_finished(self, run_id: str, status: str, manifest: dict) -> None:
        pass                                   # the CLI prints the metrics table and the run folder

    def stage_finished(self, record: StageRecord, index: int, total: int) -> None:
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
