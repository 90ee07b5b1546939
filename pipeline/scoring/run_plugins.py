"""A past run's plugins, imported so that its models load: the run's config checked against its
record first, then the modules its ``plugins:`` names, with the folder of the config the run was
started with searched (modules beside that config import as they did for the run).

``pipeline predict``, ``serve`` and the promotion gate (``run_models.open_run``) and
``load_model`` of a folder inside a run folder (``model_folder``) import them this one way.

The record holds the config's path as the run was given it (``config_file``); a relative one is
relative to the folder the run was started in, which the record does not hold. It is looked for
from here and from the folder that holds the run's ``runs_dir`` (a run is
``<that folder>/<runs_dir>/<name>/<run id>``), so ``pipeline predict --runs-dir ../p1/runs`` from
another folder finds the plugin beside ``../p1/config.yaml``; a folder is searched only where the
config is found.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pipeline.core.errors import DataError
from pipeline.core.plugins import load_plugins
from pipeline.runs import layout, record
from pipeline.runs.record import RunManifest
from pipeline.runs.signing import signing_key, verify_run

__all__ = ["config_folders", "load_model_plugins", "load_run_plugins", "verify_file", "verify_run_config"]


def load_run_plugins(run_dir: str | os.PathLike[str], manifest: RunManifest) -> list[str]:
    """Import the plugins a finished run used (its resolved ``config.yaml``), so its models load.

    The run's record (``manifest``, read and checked by the caller) says where the run's config
    was (``config_file``): modules beside it import as they did for the run
    (``config_folders``); and what each plugin's code was (``plugins``), so code edited since is
    warned of. A module that is not found is a ConfigError naming the run's config and the
    folders looked in.
    """
    import yaml

    run_dir, config_file = Path(run_dir), manifest.config_file
    try:
        data = yaml.safe_load(layout.RunLayout(run_dir).config.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        data = None
    data = data if isinstance(data, dict) else {}
    modules = data.get("plugins")
    modules = [m for m in modules if isinstance(m, str)] if isinstance(modules, list) else []
    found, looked = config_folders(run_dir, config_file, data.get("runs_dir"))
    note = None
    if config_file and not found:
        places = " nor ".join(str(p) for p in looked) or "any path from here"
        note = (f"the config the run was started with, {config_file}, is at {'neither ' if len(looked) > 1 else ''}"
                f"{places}, so no folder beside it was searched")
    imported = load_plugins(modules, search_path=found, where="plugins", note=note,
                            source=f"run {run_dir.resolve().name}: {run_dir / layout.CONFIG}")
    _warn_edited_plugins(run_dir, manifest.plugins)
    return imported


def _warn_edited_plugins(run_dir: Path, recorded: dict[str, str]) -> None:
    """A warning for each plugin whose code differs from the code the run recorded (its hash in
    the manifest's ``plugins``): the models score with the code installed now, so scores may
    differ from the run's own. A run recorded before plugins were hashed says nothing."""
    import logging

    from pipeline.core.fingerprints import plugin_digest

    edited = sorted(module for module, digest in recorded.items() if plugin_digest(module) != digest)
    if edited:
        logging.getLogger("pipeline").warning(
            "plugin module(s) %s changed since run %s was trained: its models score with the code here now, so "
            "scores may differ from the run's own; score with the code the run used to get them",
            ", ".join(edited), run_dir.resolve().name)


def config_folders(run_dir: Path, config_file: str | None, runs_dir: Any = None) -> tuple[list[Path], list[Path]]:
    """The folders the config ``run_dir`` was started with is in (``config_file``, as its record
    holds it), and the paths it was looked for at: an absolute path as it is; a relative one from
    here and from the folder the run was started in when its place under ``runs_dir`` (the run's
    resolved ``runs_dir``, default ``runs``) says which one that was."""
    if not config_file:
        return [], []
    given = Path(config_file)
    looked = [given] if given.is_absolute() else [Path.cwd() / given]
    started = None if given.is_absolute() else _started_in(run_dir, runs_dir)
    if started is not None:
        looked.append(started / given)
    looked = list(dict.fromkeys(Path(os.path.normpath(p)) for p in looked))
    found = list(dict.fromkeys(p.parent.resolve() for p in looked if p.is_file()))
    return found, looked


def _started_in(run_dir: Path, runs_dir: Any) -> Path | None:
    """The folder a run at ``run_dir`` was started in, when ``runs_dir`` (relative) is the tail of
    the folder that holds its pipeline folder; None when it cannot be told."""
    runs = Path(os.path.normpath(runs_dir if isinstance(runs_dir, str) and runs_dir else "runs"))
    if runs.is_absolute() or ".." in runs.parts:
        return None
    runs_folder = Path(run_dir).resolve().parent.parent
    parts = runs.parts
    if parts and runs_folder.parts[-len(parts):] != parts:
        return None
    return Path(*runs_folder.parts[:len(runs_folder.parts) - len(parts)])


def load_model_plugins(folder: Path) -> None:
    """For a model folder whose model is not registered here: the plugins ``pipeline predict``
    imports before it loads a run's model. Those of $PIPELINE_PLUGINS (and the installed ones)
    always; when the folder lies inside a run folder, the plugins the run's config names, once
    its record (signed, with a key set) and its config are known to be the run's."""
    run_dir = next((p for p in Path(folder).resolve().parents if (p / layout.MANIFEST).is_file()), None)
    if run_dir is None:
        load_plugins()
        return
    verify_run(run_dir)
    manifest = record.read_manifest(run_dir)
    verify_run_config(run_dir, manifest)
    load_run_plugins(run_dir, manifest)


def verify_run_config(run_dir: Path, manifest: RunManifest) -> None:
    """The run's config.yaml against its checksum before the plugins it names are imported.
    One the manifest does not list is accepted (older runs), unless runs must be signed."""
    digest = manifest.artifacts.get(layout.CONFIG)
    if digest is not None:
        verify_file(run_dir, layout.CONFIG, digest, what="run config")
    elif signing_key() is not None and (run_dir / layout.CONFIG).exists():
        raise DataError(f"{run_dir / layout.CONFIG} is not in run {run_dir.name}'s signed manifest; "
                        "its plugins were not imported")


def verify_recorded_files(folder: Path) -> None:
    """The files of a model folder inside a run folder against the sha256 the run's manifest
    lists for them, as ``predict`` checks them: ``load_model`` scored an edited coefficients
    file that ``predict`` refused as corrupt. A folder outside any run, a run whose manifest
    cannot be read (``runs show`` says why), or files the manifest does not list (an older
    run, a folder written later) load as they are."""
    folder = Path(folder).resolve()
    run_dir = next((p for p in folder.parents if (p / layout.MANIFEST).is_file()), None)
    if run_dir is None:
        return
    try:
        artifacts = record.read_manifest(run_dir).artifacts
    except record.ManifestError:             # no record to check against
        return
    prefix = folder.relative_to(run_dir).as_posix().rstrip("/") + "/"
    for key, digest in sorted(artifacts.items()):
        if key.startswith(prefix):
            verify_file(run_dir, key, digest, what="model")


def verify_file(run_dir: Path, key: str, digest: str, *, what: str) -> None:
    """The file ``key`` of the run against its sha256 in the run record (``digest``)."""
    from pipeline.runs.store import sha256_file

    path = run_dir / key
    if not path.is_file():
        raise DataError(f"{what} artifact {path} is missing (the run's manifest lists it); "
                        "the run folder is incomplete or corrupt")
    if sha256_file(path) != digest:
        raise DataError(f"{what} artifact {path} is corrupt: its sha256 does not match the run's manifest; "
                        "it was not loaded")
