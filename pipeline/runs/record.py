"""The run record: ``manifest.json`` as a typed model, and the one reader of it.

The manifest is a public schema: ``pipeline runs``, ``pipeline predict``, scheduled jobs and
tests read it. Every reader goes through ``read_manifest``, so a missing, truncated or
hand-edited file is reported the same way everywhere (``ManifestError``, a ``DataError``).
Every value a reader uses is validated there, once: statuses, times, numbers (finite, not
negative, never text or booleans), and the evaluation keys of ``metrics`` — a wrong-typed
field makes the whole record unreadable with the key path in the reason, so no reader meets
a list where it expects a model name.
Unknown keys are kept (``extra="allow"``): a manifest written by a newer version, or a key a
plugin stage added to the run record, still reads.
"""

from __future__ import annotations

import dataclasses
import json
import math
import numbers
import os
from pathlib import Path
from typing import Any

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import PydanticCustomError

from pipeline.core.errors import DataError
from pipeline.runs.layout import MANIFEST

STATUSES = ("running", "succeeded", "failed", "interrupted")
# A stage that was going when its run was stopped (SIGTERM, another stage failing on a
# cluster, a failure of the runner itself) ends "interrupted"; it never stays "running".
STAGE_STATUSES = ("pending", "running", "succeeded", "failed", "cached", "interrupted")
# A manifest is a few kilobytes; anything this large is not one, and is not read into memory.
MAX_MANIFEST_BYTES = 64 * 2**20

# Numbers a manifest holds, as they must be: no text, no booleans, no NaN or infinity, none negative.
Seconds = Annotated[float, Field(strict=True, ge=0, allow_inf_nan=False)]
Bytes = Annotated[int, Field(strict=True, ge=0)]
ProcessId = Annotated[int, Field(strict=True, ge=1, le=2**31 - 1)]


def _iso_time(value: str | None) -> str | None:
    """A time the record holds must read back as a time (``runs`` sorts and shows them)."""
    if value is not None:
        try:
            datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise ValueError(f"'{value}' is not an ISO 8601 time") from None
    return value


def _one_of(value: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ValueError(f"'{value}' is not one of {', '.join(allowed)}")
    return value


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _field_problem(path: str, problem: str) -> PydanticCustomError:
    """A validation error whose message names the key path inside a free-form field (metrics.best)."""
    return PydanticCustomError("record_field", "{path}: {problem}", {"path": path, "problem": problem})


def check_metrics(metrics: dict[str, Any] | None) -> dict[str, Any] | None:
    """The evaluation keys every reader uses (``runs``, ``predict``) have the types they expect.

    Other keys (a plugin's) are kept as they are.
    """
    if metrics is None:
        return None
    for key in ("split", "rank_by", "best"):
        value = metrics.get(key)
        if value is not None and not isinstance(value, str):
            raise _field_problem(f"metrics.{key}", f"must be text, not {_type_name(value)}")
    threshold = metrics.get("threshold")
    if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, (int, float))
                                  or not math.isfinite(threshold)):
        raise _field_problem("metrics.threshold", f"must be a finite number, not {threshold!r}")
    models = metrics.get("models")
    if models is not None and not isinstance(models, dict):
        raise _field_problem("metrics.models", f"must be a mapping of model to metrics, not {_type_name(models)}")
    for name, values in (models or {}).items():
        if not isinstance(values, dict):
            raise _field_problem(f"metrics.models.{name}", f"must be a mapping of metric to value, "
                                                           f"not {_type_name(values)}")
        for metric, value in values.items():
            # A number (a NumPy one too, as a stage reports it), or null: an undefined metric (an
            # AUC on one class) is written as null.
            if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Real)):
                raise _field_problem(f"metrics.models.{name}.{metric}",
                                     f"must be a number or null, not {_type_name(value)}")
    return metrics


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
    status: str = "pending"            # one of STAGE_STATUSES
    started: str | None = None
    ended: str | None = None
    seconds: Seconds | None = None
    peak_rss_bytes: Bytes | None = None
    # The peak of the device memory this process allocated while the stage ran, per allocator
    # (exact for PyTorch, and for RMM when the stage set a new high; else sampled every 50 ms),
    # added up; ``peak_device_source`` names them: "rmm", "torch", "cupy" joined by "+". Not
    # other processes, a pool's unused part or the CUDA context. None: no device allocator used.
    peak_device_bytes: Bytes | None = None
    peak_device_source: str | None = None
    facts: dict[str, Any] = Field(default_factory=dict)
    error: str | None = None
    worker: str | None = None            # Dask worker address, on a cluster
    cache_key: str | None = None         # content key of the stage (None: not cacheable)
    # A cached stage: the seconds the run that computed its output took for it (what the
    # cache saved this run).
    computed_seconds: Seconds | None = None
    # What it used: ``cpu_seconds``, and ``gpus`` (per device: seconds, utilisation mean and
    # peak, peak memory, mean power, energy in Wh) where GPUs were measured; ``cost`` its
    # estimate at the config's rates (``pipeline.usage.costs``). Absent, not zero, where unknown.
    usage: dict[str, Any] | None = None
    cost: dict[str, Any] | None = None

    @field_validator("status")
    @classmethod
    def known_status(cls, value: str) -> str:
        return _one_of(value, STAGE_STATUSES)

    @field_validator("started", "ended")
    @classmethod
    def iso_time(cls, value: str | None) -> str | None:
        return _iso_time(value)


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
    duration_s: Seconds | None = None
    device: DeviceRecord | None = None
    host: str | None = None
    pid: ProcessId | None = None
    command: list[str] = Field(default_factory=list)
    config_file: str | None = None
    config_sha256: str | None = None
    selected: list[str] = Field(default_factory=list)
    versions: dict[str, str] = Field(default_factory=dict)
    # Each plugin module the run named (config plugins:, $PIPELINE_PLUGINS): a hash of its own
    # code (``pipeline.core.fingerprints.plugin_digest``), for scoring to tell it was edited since.
    plugins: dict[str, str] = Field(default_factory=dict)
    # The PIPELINE_* variables set when the run started (``pipeline.core.settings``), secrets
    # redacted: what shaped the run beside its config.
    settings: dict[str, str] = Field(default_factory=dict)
    stages: dict[str, StageRecord] = Field(default_factory=dict)
    # What stages added to the run record (declared by their kind): the evaluation that ranks
    # the models, and the exported models by name (folder relative to the run).
    metrics: dict[str, Any] | None = None
    models: dict[str, str] = Field(default_factory=dict)
    artifacts: dict[str, str] = Field(default_factory=dict)
    error: str | None = None
    cluster: dict[str, Any] | None = None
    # The stages' usage and cost added up (``pipeline.usage.costs``); None before the run ends.
    usage: dict[str, Any] | None = None
    cost: dict[str, Any] | None = None
    # The cap that stopped the run (``pipeline.usage.budget``): scope, cap, limit, reached.
    budget: dict[str, Any] | None = None

    @field_validator("status")
    @classmethod
    def known_status(cls, value: str) -> str:
        return _one_of(value, STATUSES)

    @field_validator("started", "ended")
    @classmethod
    def iso_time(cls, value: str | None) -> str | None:
        return _iso_time(value)

    @field_validator("metrics")
    @classmethod
    def evaluation_keys(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return check_metrics(value)

    def to_json(self) -> str:
        """The record as Python's json writes it (NaN stays NaN): for tools and tests. The run
        folder's manifest.json is written by ``pipeline.runs.store.RunDir.write_manifest``, as strict
        JSON (NaN as null), like every JSON file the project writes."""
        return json.dumps(self.model_dump(mode="python"), indent=2, default=_json_default)

    def headline(self) -> dict[str, Any] | None:
        """The ranking metric of the best model: one number to compare runs at a glance."""
        metrics = self.metrics or {}
        best, rank_by = metrics.get("best"), metrics.get("rank_by")
        models = metrics.get("models")
        if not isinstance(best, str) or not isinstance(rank_by, str) or not isinstance(models, dict):
            return None
        values = models.get(best)
        value = values.get(rank_by) if isinstance(values, dict) else None
        return {"metric": rank_by, "model": best, "value": as_number(value)}


def read_manifest(run_dir: str | os.PathLike[str]) -> RunManifest:
    """The run record in ``run_dir``; ManifestError (saying why) if it cannot be read."""
    path = Path(run_dir) / MANIFEST
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_MANIFEST_BYTES + 1)
    except FileNotFoundError:
        raise ManifestError(path, "no manifest.json") from None
    except OSError as exc:
        raise ManifestError(path, f"cannot read manifest.json: {exc.strerror or exc}") from None
    if len(raw) > MAX_MANIFEST_BYTES:
        raise ManifestError(path, f"manifest.json is larger than {MAX_MANIFEST_BYTES // 2**20} MiB, "
                                  "so not a run record")
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ManifestError(path, f"cannot read manifest.json: {exc}") from None
    except ValueError as exc:
        raise ManifestError(path, f"manifest.json is not valid JSON: {exc}") from None
    except RecursionError:
        raise ManifestError(path, "manifest.json is nested too deeply to be a run record") from None
    if not isinstance(data, dict) or not isinstance(data.get("status"), str):
        raise ManifestError(path, "manifest.json has no status")
    return _validated(path, data)


def _validated(path: Path, data: dict[str, Any]) -> RunManifest:
    try:
        return RunManifest.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        detail = first["msg"] if first["type"] == "record_field" else f"{where}: {first['msg']}"
        raise ManifestError(path, f"manifest.json is not a run record ({detail})") from None
    except RecursionError:
        raise ManifestError(path, "manifest.json is nested too deeply to be a run record") from None


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
