"""The report as a run hook: built when the run ends, whatever its status."""

from __future__ import annotations

import logging

from pipeline.hooks.protocol import RunEvent, RunHook
from pipeline.report.build import build_report

log = logging.getLogger("pipeline")


class ReportHook(RunHook):
    """Writes ``report.html`` into the run folder once the run record is final.

    A report that cannot be built is a warning (the hook list logs it), never a failed run.
    """

    def run_finished(self, event: RunEvent) -> None:
        path = build_report(event.run.run_dir)
        log.info("report: %s", path)
