"""A run's exported models, chosen and verified: which model a run serves and whether its files
are the ones the run recorded.

``pipeline predict``, ``pipeline serve`` and the ``promote`` stage all load a model from a past
run the same way: the run must have succeeded (its manifest's signature checked first when a
signing key is set), its config and the model's files must match the sha256 the manifest lists,
and without ``--model`` the run's best model serves. These steps live here, below the stages,
so the promotion gate checks a champion exactly as ``predict`` does rather than with a copy.
The run's config check and the import of its plugins are ``run_plugins``'s, which ``load_model``
shares for a folder inside a run.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.core.errors import DataError, UsageError
from pipeline.core.problems import Task
from pipeline.runs import layout, record
from pipeline.runs.record import RunManifest
from pipeline.runs.signing import verify_run
from pipeline.scoring.input_rows import training_read_options
from pipeline.scoring.model_folder import SavedModel, load_model, model_format_of
from pipeline.scoring.run_plugins import load_run_plugins, verify_file, verify_run_config

log = logging.getLogger("pipeline")

__all__ = [
    "DEFAULT_THRESHOLD", "OpenedRun", "best_exported", "choose_model", "decide_threshold", "exported_models",
    "exported_task", "load_run_plugins", "open_run", "read_manifest", "run_metrics", "verify_artifacts",
    "verify_run_config",
]


# A binary model's threshold when neither the caller nor the run's evaluation gives one.
DEFAULT_THRESHOLD = 0.5


@dataclass(frozen=True)
class OpenedRun:
    """A model of a past run, verified and loaded (``open_run``): what ``predict``, ``serve``
    and the promotion gate score with and report."""

    run_dir: Path
    manifest: RunManifest
    name: str                          # the model's name in the run
    folder: str                        # relative to the run folder, as the manifest lists it
    task: Task
    threshold: float | None            # None: not a binary model
    metrics: dict[str, Any]            # the run's reported evaluation
    read: dict[str, Any]               # how the run read its rows (``training_read_options``)
    backend: Any                       # the backend the model was loaded on
    saved: SavedModel

    @property
    def run_id(self) -> str:
        return self.run_dir.name


def open_run(run_dir: Path, *, model: str | None = None, device: str | None = None,
             threshold: float | None = None) -> OpenedRun:
    """Open ``model`` of the run at ``run_dir`` (None: its best) in one call: the run's record
    (its signature first, with a key set) and config checked, the plugins its config names
    imported, the model's files checked against the record and loaded on ``device`` (cpu, gpu
    or auto; None: auto), its task read and its threshold decided (``decide_threshold``)."""
    from pipeline.backends import resolve_backend

    manifest, name, folder = checked_run_model(
        run_dir, model=model, config_verified=lambda checked: load_run_plugins(run_dir, checked))
    metrics = run_metrics(manifest)
    task = exported_task(run_dir / folder)
    decided = decide_threshold(task, threshold, metrics, name)
    read = training_read_options(run_dir, manifest, name)
    backend, _ = resolve_backend(device or "auto")
    saved = load_model(run_dir / folder, device=backend.name, files_checked=True)    # checked_run_model did
    return OpenedRun(run_dir=run_dir, manifest=manifest, name=name, folder=folder, task=task, threshold=decided,
                     metrics=metrics, read=read, backend=backend, saved=saved)


def decide_threshold(task: Task, requested: float | None, metrics: dict[str, Any], name: str) -> float | None:
    """The threshold of a binary model: the requested one, else the run's evaluation's, else
    0.5. Other tasks have none: one given is a usage error (it would change nothing, and a
    cron line that passes it expects a binary model)."""
    if task.kind != "binary":
        if requested is not None:
            raise UsageError(f"--threshold applies to binary models only; model {name} is {task.describe()}: "
                             "leave --threshold out")
        return None
    if requested is not None:
        return requested
    recorded = metrics.get("threshold") if metrics else None
    return float(recorded) if recorded is not None else DEFAULT_THRESHOLD


def checked_run_model(run_dir: Path, *, model: str | None = None,
                      config_verified: Callable[[RunManifest], None] | None = None) -> tuple[RunManifest, str, str]:
    """The run's manifest, ``model``'s name (None: the run's best) and folder, after the checks
    ``predict`` makes before loading anything: the run succeeded, its config and the model's
    files match the manifest. ``config_verified`` runs once the config is known to be the
    run's own, before any model is looked up: where ``predict`` and ``serve`` import the
    plugins it names (a layer above this one)."""
    manifest = read_manifest(run_dir)
    verify_run_config(run_dir, manifest)
    if config_verified is not None:
        config_verified(manifest)
    models = exported_models(run_dir, manifest)
    name = choose_model(models, model, run_metrics(manifest), run_dir)
    verify_artifacts(run_dir, manifest.artifacts, models[name])
    return manifest, name, models[name]


def exported_task(folder: Path) -> Task:
    """The task of the exported model in ``folder`` (its model.json, verified by now)."""
    meta_path = folder / "model.json"
    try:
        return Task.from_dict(json.loads(meta_path.read_text(encoding="utf-8")).get("task"))
    except (OSError, ValueError, TypeError, AttributeError) as exc:
        raise DataError(f"{meta_path}: not a model description ({type(exc).__name__}: {exc})") from None


def read_manifest(run_dir: Path, *, use: str = "score") -> RunManifest:
    """The run record (``pipeline.runs.record``: a ManifestError, exit 3, when unreadable) of a
    succeeded run: a failed or running one may have a partial export and no complete checksums.

    With a signing key set (``pipeline.runs.signing``) the manifest's signature is checked first, so
    nothing in it (status, checksums, plugins) is believed before it is known to be the run's.
    ``use``: what the caller does with the run ("score", "promote"), for the message."""
    verify_run(run_dir)
    manifest = record.read_manifest(run_dir)
    if manifest.status != "succeeded":
        status = manifest.status
        if status == "running":
            from pipeline.runs.history import why_abandoned

            why = why_abandoned(manifest, run_id=run_dir.name)
            status = f"abandoned: {why}" if why else "still running"
        raise DataError(f"run {run_dir.name} did not succeed (status: {status}); {use} with a succeeded run")
    return manifest


def exported_models(run_dir: Path, manifest: RunManifest) -> dict[str, str]:
    """Model name -> folder relative to the run, as the run record declares them.

    Runs recorded before the manifest had ``models`` are read from their artifact list: a
    listed ``<stage>/models/<name>/model.json`` is an exported model (the first stage, by
    name, wins a name), so files that are not in the manifest are never offered.
    """
    models = dict(manifest.models)
    if not models:
        for key in sorted(manifest.artifacts):
            found = layout.exported_model_of(key)
            if found is not None:
                models.setdefault(found[1], layout.model_folder(*found))
    if not models:
        raise DataError(f"run {run_dir.name} exported no models (add an export stage with models: true)")
    return models


def run_metrics(manifest: RunManifest) -> dict[str, Any]:
    """The evaluation the run reported (threshold, best model...); empty when it has none."""
    return dict(manifest.metrics or {})


def choose_model(models: dict[str, str], requested: str | None, metrics: dict[str, Any], run_dir: Path) -> str:
    """The requested model, else the run's best (as its evaluation recorded it), else the best
    exported one by the evaluation's ranking metric, in that metric's direction (lower is
    better for losses and errors), else the only one."""
    available = ", ".join(sorted(models))
    if requested is not None:
        if requested not in models:
            raise UsageError(f"--model {requested}: run {run_dir.name} has no such exported model "
                              f"(available: {available})")
        return requested
    best = metrics.get("best")
    if best in models:
        return str(best)
    ranked = best_exported(models, metrics)
    if ranked is not None:
        log.warning("run %s: its best model %s was not exported; scoring with %s, the best exported one by %s",
                    run_dir.name, best, ranked, metrics.get("rank_by"))
        return ranked
    if len(models) == 1:
        return next(iter(models))
    raise UsageError(f"run {run_dir.name} names no best model; pass --model (available: {available})")


def best_exported(models: dict[str, str], metrics: dict[str, Any]) -> str | None:
    """The exported model with the best value of the evaluation's ``rank_by`` metric (None when
    the record does not say, or names a metric of unknown direction). Ties go to the first
    name in sorted order; a model with no finite value is never chosen
    (``pipeline.metrics.best_of``, which the MLflow registration uses too)."""
    from pipeline.metrics import best_of

    return best_of(metrics.get("models"), models, metrics.get("rank_by"))


def verify_artifacts(run_dir: Path, artifacts: Mapping[str, str], folder: str) -> None:
    """Every file of the model folder must match its sha256 in the run record (``artifacts``)
    before anything is loaded: a corrupt model file or state_dict is never deserialised."""
    prefix = folder.rstrip("/") + "/"
    listed = {key: digest for key, digest in artifacts.items() if key.startswith(prefix)}
    for required in ("model.json", "workflow.json"):
        if prefix + required not in listed:
            raise DataError(f"model artifact {run_dir / folder / required} is not in the run's manifest; "
                            "cannot verify it")
    for key, digest in sorted(listed.items()):
        verify_file(run_dir, key, digest, what="model")
    meta_path = run_dir / prefix / "model.json"
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        # The model's format says which files it has (model.json is verified by now).
        needed = model_format_of(meta, meta_path).files(meta)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise DataError(f"{run_dir / prefix / 'model.json'}: not a model description ({exc})") from exc
    unlisted = [name for name in needed if prefix + name not in listed]
    if unlisted:
        raise DataError(f"model file(s) {unlisted} of {run_dir / folder} are not in the run's manifest; "
                        "cannot verify them")
