"""How a run shows progress: a live view on a terminal, plain log lines everywhere else.

Scheduled jobs read the log lines (one per stage event, timestamped, no control characters);
people at a terminal get a spinner per stage and a summary table.
"""

from __future__ import annotations

import logging

from rich.console import Console

from pipeline.backends import DeviceChoice
from pipeline.runner import StageRecord

log = logging.getLogger("pipeline")


def _mib(value: int | None) -> str:
    return "-" if value is None else f"{value / 2**20:,.0f} MiB"


class LogReporter:
    """One log line per event, for cron, Kubernetes and CI logs."""

    def run_started(self, run_id: str, device: DeviceChoice, total: int) -> None:
        log.info("run %s started on %s (%s); %d stage(s)", run_id, device.device, device.reason, total)

    def stage_started(self, record: StageRecord, index: int, total: int) -> None:
        log.info("[%d/%d] %s (%s) started", index, total, record.name, record.kind)

    def stage_finished(self, record: StageRecord, index: int, total: int) -> None:
        if record.status == "failed":
            log.error("[%d/%d] %s (%s) failed after %.2fs: %s", index, total, record.name, record.kind,
                      record.seconds or 0, record.error)
        else:
            log.info("[%d/%d] %s (%s) done in %.2fs, peak RSS %s", index, total, record.name, record.kind,
                     record.seconds or 0, _mib(record.peak_rss_bytes))


class ConsoleReporter:
    """A spinner while a stage runs and a line with time and memory when it ends."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self._status = None

    def run_started(self, run_id: str, device: DeviceChoice, total: int) -> None:
        self.console.print(f"[bold]run[/] {run_id} on [bold]{device.device}[/] [dim]({device.reason})[/]")

    def stage_started(self, record: StageRecord, index: int, total: int) -> None:
        self._status = self.console.status(f"[{index}/{total}] {record.name} [dim]({record.kind})[/] running...")
        self._status.start()

    def stage_finished(self, record: StageRecord, index: int, total: int) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None
        mark = "[red]✗[/]" if record.status == "failed" else "[green]✓[/]"
        note = "" if record.selected else " [dim](needed by the selection)[/]"
        self.console.print(
            f"{mark} [{index}/{total}] {record.name} [dim]({record.kind})[/]  "
            f"{record.seconds or 0:.2f}s  peak RSS {_mib(record.peak_rss_bytes)}"
            + (f"  GPU {_mib(record.peak_device_bytes)}" if record.peak_device_bytes is not None else "")
            + note
        )
