"""A run's exported models, chosen and verified: which model a run serves and whether its files
are the ones the run recorded.

``pipeline predict``, ``pipeline serve`` and the ``promote`` stage all load a model from a past
run the same way: the run must have succeeded (its manifest's signature checked first when a
signing key is set), its config and the model's files must match the sha256 the manifest lists,
and without ``--model`` the run's best model serves. These steps live here, below the stages,
so the promotion gate checks a champion exactly as ``predict`` does rather than with a copy.
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
from pipeline.runs.signing import signing_key, verify_run
from pipeline.scoring.model_folder import SavedModel, load_model, model_format_of

log = logging.getLogger("pipeline")

__all__ = [
    "RunModel", "best_exported", "choose_model", "exported_models", "exported_task", "open_run_model",
    "read_manifest", "run_metrics", "verify_artifacts", "verify_run_config",
]


@dataclass(frozen=True)
class RunModel:
    """A model of a past run, verified and loaded: what a caller scores with and reports."""

    run_dir: Path
    manifest: RunManifest
    name: str
    folder: str                 # relative to the run folder, as the manifest lists it
    saved: SavedModel

    @property
    def run_id(self) -> str:
        return self.run_dir.name


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


def open_run_model(run_dir: Path, *, model: str | None = None, device: str | None = None) -> RunModel:
    """The run's ``model`` (None: its best), checked (``checked_run_model``) and loaded.
    The run's plugins are the caller's to import (``pipeline.config.plugins``) before this."""
    manifest, name, folder = checked_run_model(run_dir, model=model)
    saved = load_model(run_dir / folder, device=device)
    return RunModel(run_dir=run_dir, manifest=manifest, name=name, folder=folder, saved=saved)


def exported_task(folder: Path) -> Task:
    """The task of the exported model in ``folder`` (its model.json, verified by now)."""
    meta_path = folder / "model.json"
    try:
        return Task.from_dict(json.loads(meta_path.read_text(encoding="utf-8")).get("task"))
    except (OSError, ValueError, TypeError, AttributeError) as exc:
        raise DataError(f"{meta_path}: not a model description ({type(exc).__name__}: {exc})") from None


def read_manifest(run_dir: Path) -> RunManifest:
    """The run record (``pipeline.runs.record``: a ManifestError, exit 3, when unreadable) of a
    succeeded run: a failed or running one may have a partial export and no complete checksums.

    With a signing key set (``pipeline.runs.signing``) the manifest's signature is checked first, so
    nothing in it (status, checksums, plugins) is believed before it is known to be the run's."""
    verify_run(run_dir)
    manifest = record.read_manifest(run_dir)
    if manifest.status != "succeeded":
        raise DataError(f"run {run_dir.name} did not succeed (status: {manifest.status}); "
                        "score with a succeeded run")
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


def verify_run_config(run_dir: Path, manifest: RunManifest) -> None:
    """The run's config.yaml against its checksum before the plugins it names are imported.
    One the manifest does not list is accepted (older runs), unless runs must be signed."""
    digest = manifest.artifacts.get(layout.CONFIG)
    if digest is not None:
        _verify_file(run_dir, layout.CONFIG, digest, what="run config")
    elif signing_key() is not None and (run_dir / layout.CONFIG).exists():
        raise DataError(f"{run_dir / layout.CONFIG} is not in run {run_dir.name}'s signed manifest; "
                        "its plugins were not imported")


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
        _verify_file(run_dir, key, digest, what="model")
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


def _verify_file(run_dir: Path, key: str, digest: str, *, what: str) -> None:
    from pipeline.runs.store import sha256_file

    path = run_dir / key
    if not path.is_file():
        raise DataError(f"{what} artifact {path} is missing (the run's manifest lists it); "
                        "the run folder is incomplete or corrupt")
    if sha256_file(path) != digest:
        raise DataError(f"{what} artifact {path} is corrupt: its sha256 does not match the run's manifest; "
                        "it was not loaded")
