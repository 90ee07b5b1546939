"""The run report: ``report.html`` in the run folder, one self-contained page that opens offline.

``build_report(run_dir)`` (re)builds it from what the run recorded; ``ReportHook`` builds it
when a run ends (succeeded, failed or interrupted: a failed night's report shows where it
stopped). The page is derived from the record, so it is not among the run's checksummed
artifacts and can be rebuilt at any time (``pipeline report RUN``).
"""

from __future__ import annotations

from pipeline.report.build import ENV_REPORT, REPORT, build_comparison, build_report, report_enabled
from pipeline.report.report_section import ReportConfig, ReportHook
from pipeline.report.sources import RunSources, read_sources

__all__ = ["ENV_REPORT", "REPORT", "ReportConfig", "ReportHook", "RunSources", "build_comparison", "build_report", "read_sources", "report_enabled"]
