"""Where a pipeline's files are: the one module that knows the run-folder layout and run ids.

::

    <runs_dir>/<pipeline>/
        <run-id>/                   one run, never reused
            config.yaml             the resolved config
            manifest.json           the run record (pipeline.runs.record)
            <stage>/...             each stage's artifacts
            <stage>/models/<name>/  an exported model (model.json, workflow.json, reference.json, model files)
        latest -> <run-id>          the newest succeeded run
        champion -> <run-id>        the run a promotion gate last promoted (``promote``)
        .cache/<key>/               stage cache entries (pipeline.cache)
        .lock                       the run lock (pipeline.runs.locks)

A run id is the UTC start time with milliseconds, then random hex
(``20261122T101500.123Z-a1b2c3``): run ids sort by start time as text.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath

RUN_ID = re.compile(r"^(\d{8}T\d{6}\.\d{3})Z-[0-9a-f]+$")
LATEST = "latest"
# The run whose model serves: moved only by a promotion gate (pipeline.stages.promote), so a
# nightly retrain that is not better leaves it where it was. ``pipeline serve champion`` follows it.
CHAMPION = "champion"
# Every name a pipeline folder may hold as a pointer to one of its runs: ``RUN`` arguments
# accept them, prune keeps what they point to.
ALIASES = (LATEST, CHAMPION)
CACHE_DIR = ".cache"
LOCK_FILE = ".lock"
MANIFEST = "manifest.json"
CONFIG = "config.yaml"
MODELS_DIR = "models"
MODEL_DESCRIPTION = "model.json"
# An exported model's drift reference: the profile of its training features (pipeline.metrics.drift).
REFERENCE_FILE = "reference.json"
# Prefix of a run folder being deleted: hidden, so a half-deleted run is never listed as a run.
DELETING_PREFIX = ".deleting-"


def format_run_id(started: datetime, token: str | None = None) -> str:
    """The run id of a run started at ``started`` (UTC, millisecond resolution)."""
    stamp = started.astimezone(timezone.utc).strftime("%Y%m%dT%H%M%S.") + f"{started.microsecond // 1000:03d}Z"
    return f"{stamp}-{token or secrets.token_hex(3)}"


def started_from_run_id(run_id: str) -> str | None:
    """ISO start time from a run id, so even a run without a manifest has a place in time."""
    match = RUN_ID.match(run_id)
    if not match:
        return None
    stamp = datetime.strptime(match.group(1), "%Y%m%dT%H%M%S.%f").replace(tzinfo=timezone.utc)
    return stamp.isoformat(timespec="milliseconds")


def is_run_id(name: str) -> bool:
    return RUN_ID.match(name) is not None


@dataclass(frozen=True)
class PipelineLayout:
    """The folder of one pipeline under ``runs_dir``."""

    runs_dir: Path
    name: str

    @property
    def path(self) -> Path:
        return self.runs_dir / self.name

    @property
    def cache_dir(self) -> Path:
        return self.path / CACHE_DIR

    @property
    def lock_path(self) -> Path:
        return self.path / LOCK_FILE

    @property
    def latest_link(self) -> Path:
        return self.path / LATEST

    def alias_link(self, alias: str) -> Path:
        """The pointer ``alias`` (one of ``ALIASES``) of this pipeline."""
        if alias not in ALIASES:
            raise ValueError(f"unknown run alias {alias!r} (known: {', '.join(ALIASES)})")
        return self.path / alias

    def run(self, run_id: str) -> RunLayout:
        return RunLayout(self.path / run_id)


@dataclass(frozen=True)
class RunLayout:
    """The files of one run folder."""

    path: Path

    @property
    def run_id(self) -> str:
        return self.path.name

    @property
    def manifest(self) -> Path:
        return self.path / MANIFEST

    @property
    def config(self) -> Path:
        return self.path / CONFIG

    def stage_dir(self, stage: str) -> Path:
        return self.path / stage


def model_folder(stage: str, model: str) -> str:
    """An exported model's folder, relative to the run folder (as the manifest lists it)."""
    return f"{stage}/{MODELS_DIR}/{model}"


def exported_model_of(artifact: str) -> tuple[str, str] | None:
    """``(stage, model)`` when ``artifact`` (a manifest key) is an exported model's description."""
    parts = PurePosixPath(artifact).parts
    if len(parts) == 4 and parts[1] == MODELS_DIR and parts[3] == MODEL_DESCRIPTION:
        return parts[0], parts[2]
    return None
