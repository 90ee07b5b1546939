"""The report as a run hook: built when the run ends, whatever its status, and the ``report:``
section of the config that turns it off (``$PIPELINE_REPORT`` overrides it)."""

from __future__ import annotations

import logging

from pydantic import BaseModel, ConfigDict, Field

from pipeline.hooks.protocol import RunEvent, RunHook
from pipeline.hooks.hook_registry import HookContext, register_hook
from pipeline.report.build import build_report, report_enabled

log = logging.getLogger("pipeline")


class ReportConfig(BaseModel):
    """The run report (``pipeline.report``): report.html in every run folder."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(True, description="Write report.html into the run folder when the run ends "
                                            "(`pipeline report RUN` builds it later either way).")


class ReportHook(RunHook):
    """Writes ``report.html`` into the run folder once the run record is final.

    A report that cannot be built is a warning (the hook list logs it), never a failed run.
    """

    def run_finished(self, event: RunEvent) -> None:
        path = build_report(event.run.run_dir)
        log.info("report: %s", path)


def report_hook(section: ReportConfig, context: HookContext) -> ReportHook | None:
    """On unless ``report.enabled`` (or ``$PIPELINE_REPORT``) says off, or the caller passed one."""
    if not report_enabled(section.enabled) or any(isinstance(hook, ReportHook) for hook in context.hooks):
        return None
    return ReportHook()


# After the other hooks: it reads the record they saw finished.
register_hook("report", report_hook, config_key="report", section=ReportConfig, default=True, order=100,
              description="The HTML report of each run.")
