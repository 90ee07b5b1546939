"""The run record: ``manifest.json`` as a typed model, and the one reader of it.

The manifest is a public schema: ``pipeline runs``, ``pipeline predict``, scheduled jobs and
tests read it. Every reader goes through ``read_manifest``, so a missing, truncated or
hand-edited file is reported the same way everywhere (``ManifestError``, a ``DataError``).
Unknown keys are kept (``extra="allow"``): a manifest written by a newer version, or a key a
plugin stage added to the run record, still reads.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pipeline.errors import DataError
from pipeline.layout import MANIFEST

STATUSES = ("running", "succeeded", "failed", "interrupted")


class ManifestError(DataError):
    """A run's manifest.json is missing, unreadable or not a run record (exit 3)."""

    def __init__(self, path: Path, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")


class StageRecord(BaseModel):
    """One stage of a run: what ran, how long, how much memory, what it reported."""

    model_config = ConfigDict(extra="allow")

    name: str
    kind: str
    selected: bool = True
    status: str = "pending"            # pending | running | succeeded | failed | cached
    started: str | None = None
    ended: str | None = None
    seconds: float | None = None
    peak_rss_bytes: int | None = None
    # The peak of the device memory this process allocated while the stage ran, per allocator
    # (exact for PyTorch, and for RMM when the stage set a new high; else sampled every 10 ms),
    # added up; ``peak_device_source`` names them: "rmm", "torch", "cupy" joined by "+". Not
    # other processes, a pool's unused part or the CUDA context. None: no device allocator used.
    peak_device_bytes: int | None = None
    peak_device_source: str | None = None
    facts: dict[str, Any] = Field(default_factory=dict)
    error: str | None = None
    worker: str | None = None            # Dask worker address, on a cluster
    cache_key: str | None = None         # content key of the stage (None: not cacheable)


class DeviceRecord(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str
    requested: str | None = None
    reason: str | None = None


class RunManifest(BaseModel):
    """``manifest.json``: written when a run starts, after every stage and when it ends."""

    model_config = ConfigDict(extra="allow")

    pipeline: str
    run_id: str
    status: str
    started: str | None = None
    ended: str | None = None
    duration_s: float | None = None
    device: DeviceRecord | None = None
    host: str | None = None
    pid: int | None = None
    command: list[str] = Field(default_factory=list)
    config_file: str | None = None
    config_sha256: str | None = None
    selected: list[str] = Field(default_factory=list)
    versions: dict[str, str] = Field(default_factory=dict)
    stages: dict[str, StageRecord] = Field(default_factory=dict)
    # What stages added to the run record (declared by their kind): the evaluation that ranks
    # the models, and the exported models by name (folder relative to the run).
    metrics: dict[str, Any] | None = None
    models: dict[str, str] = Field(default_factory=dict)
    artifacts: dict[str, str] = Field(default_factory=dict)
    error: str | None = None
    cluster: dict[str, Any] | None = None

    def to_json(self) -> str:
        # json.dumps, not model_dump_json: NaN metrics stay NaN (as Python's json reads them).
        return json.dumps(self.model_dump(mode="python"), indent=2, default=_json_default)

    def headline(self) -> dict[str, Any] | None:
        """The ranking metric of the best model: one number to compare runs at a glance."""
        metrics = self.metrics or {}
        best, rank_by = metrics.get("best"), metrics.get("rank_by")
        models = metrics.get("models")
        if best is None or rank_by is None or not isinstance(models, dict):
            return None
        values = models.get(best)
        value = values.get(rank_by) if isinstance(values, dict) else None
        return {"metric": rank_by, "model": best, "value": as_number(value)}


def read_manifest(run_dir: str | os.PathLike[str]) -> RunManifest:
    """The run record in ``run_dir``; ManifestError (saying why) if it cannot be read."""
    path = Path(run_dir) / MANIFEST
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ManifestError(path, "no manifest.json") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ManifestError(path, f"cannot read manifest.json: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ManifestError(path, f"manifest.json is not valid JSON: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("status"), str):
        raise ManifestError(path, "manifest.json has no status")
    try:
        return RunManifest.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ManifestError(path, f"manifest.json is not a run record ({where}: {first['msg']})") from None


def as_number(value: Any) -> float | None:
    """A metric as a float, or None when missing or not finite."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _json_default(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, BaseModel):
        return value.model_dump(mode="python")
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "item"):  # NumPy scalars
        return value.item()
    return str(value)
