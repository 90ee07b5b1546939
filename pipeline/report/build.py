"""Building the page: where it goes, whether a run writes one, and the build itself."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pipeline.core.errors import ConfigError, ConfigIssue
from pipeline.core.settings import Settings, current_settings, register_check
from pipeline.report.sources import read_sources

REPORT = "report.html"
ENV_REPORT = Settings.variable("report")
_ON, _OFF = ("1", "true", "yes", "on"), ("0", "false", "no", "off")
log = logging.getLogger("pipeline")


def report_enabled(configured: bool, settings: Settings | None = None) -> bool:
    """Whether a run writes its report: ``$PIPELINE_REPORT`` (on/off) when set, else the config's
    ``report.enabled``. A nightly job can turn it off (or on) without editing the config."""
    settings = current_settings() if settings is None else settings
    value = (settings.report or "").strip().lower()
    if not value:
        return configured
    if value in _ON or value in _OFF:
        return value in _ON
    raise ConfigError([ConfigIssue(f"${ENV_REPORT}", f"must be on or off (1/0, true/false, yes/no), not {value!r}")])


register_check("report", check=lambda settings: report_enabled(True, settings))


def build_report(run_dir: str | Path, output: str | Path | None = None) -> Path:
    """Write the report of the run at ``run_dir`` (to ``run_dir/report.html`` unless ``output``)
    atomically, and return its path."""
    from pipeline.report.page import render

    sources = read_sources(Path(run_dir))
    path = _write(Path(output) if output is not None else sources.run_dir / REPORT,
                  lambda generated, version: render(sources, generated=generated, version=version))
    # The page names them at its top too; a person running `pipeline report` should not have to
    # open it to learn that part of the record is gone.
    for files, why in ((sources.missing, "missing from the run folder (manifest.json records it)"),
                       (sources.changed, "changed since the run (sha256 differs from manifest.json) or unreadable")):
        if files:
            log.warning("report: not shown: %s %s", ", ".join(sorted(set(files))), why)
    return path


def build_comparison(run_a: Any, run_b: Any, output: str | Path) -> Path:
    """Write the comparison page of two runs (``history.Run``s) to ``output``, atomically."""
    from pipeline.report.compare import render_comparison, unused_files

    sources = {"A": read_sources(run_a.path), "B": read_sources(run_b.path)}
    path = _write(Path(output), lambda generated, version: render_comparison(
        run_a, run_b, generated=generated, version=version, sources=sources))
    for line in unused_files(sources, run_a, run_b):     # named at the page's top too
        log.warning("compare: not shown: %s", line)
    return path


def _write(path: Path, render: Callable[[datetime, str], str]) -> Path:
    """``render(generated, version)`` written to ``path`` atomically."""
    from pipeline.runs.store import atomic_write_text
    from pipeline.version import __version__

    atomic_write_text(path, render(datetime.now(timezone.utc), __version__))
    return path
