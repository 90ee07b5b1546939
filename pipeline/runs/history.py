"""Run history: find run folders, read their manifests, resolve a run reference, diff, prune.

Plain functions over the run folders ``<runs_dir>/<pipeline>/<run-id>/`` that ``pipeline run``
writes (see ``pipeline.runs.store``); ``pipeline.cli.runs_command`` only renders what they return.
Nothing here trusts a run folder to be whole: a manifest that ``pipeline.runs.record.read_manifest``
refuses is reported as the status "unreadable" with its reason, never raised, because one bad
folder must not hide the other runs; a "running" run that will never finish (its process died,
or its record could not be finished) is reported as "abandoned", with its pid, host and why.
Folder names and run ids are ``pipeline.runs.layout``'s.
"""

from __future__ import annotations

import math
import os
import secrets
import shutil
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pipeline.core.errors import ConfigError, ConfigIssue, DataError, StorageError, UsageError
from pipeline.runs.layout import ALIASES, CONFIG, DELETING_PREFIX, LATEST, LOCK_FILE, MANIFEST, is_run_id, started_from_run_id
from pipeline.runs.record import ManifestError, RunManifest, as_number, read_manifest
from pipeline.runs.store import LockState, host_name, not_a_link, probe_lock

FINISHED = ("succeeded", "failed", "interrupted")
UNREADABLE = "unreadable"
ABANDONED = "abandoned"             # shown for a "running" run that will never finish (``why_abandoned``)


@dataclass
class Run:
    """One run folder and what could be read from it (``manifest`` is None when unreadable)."""

    pipeline: str
    run_id: str
    path: Path
    manifest: RunManifest | None
    problem: str | None = None          # why the manifest could not be read
    latest: bool = False                # ``<pipeline>/latest`` points here
    aliases: tuple[str, ...] = ()       # every alias (``pipeline.runs.layout.ALIASES``) that points here

    @property
    def status(self) -> str:
        if self.manifest is None:
            return UNREADABLE
        return self.manifest.status

    @property
    def started(self) -> str | None:
        """The manifest's start time, else the one encoded in the run id (unreadable runs)."""
        if self.manifest is not None and self.manifest.started:
            return self.manifest.started
        return started_from_run_id(self.run_id)


@dataclass
class PrunePlan:
    """Which runs of one pipeline go and which stay, with the reason each one stays."""

    pipeline: str
    delete: list[Run] = field(default_factory=list)
    keep: list[tuple[Run, str]] = field(default_factory=list)


# ---------------------------------------------------------------------------- finding runs
def load_manifest(run_dir: Path) -> tuple[RunManifest | None, str | None]:
    """``(manifest, None)`` or ``(None, why)``: history commands list broken runs, not crash on them."""
    try:
        return read_manifest(run_dir), None
    except ManifestError as exc:
        return None, exc.reason


def latest_target(pipeline_dir: Path) -> str | None:
    """Name of the run folder ``latest`` points to, or None (no successful run yet)."""
    return alias_target(pipeline_dir, LATEST)


def alias_target(pipeline_dir: Path, alias: str) -> str | None:
    """Name of the run folder ``alias`` points to, or None (it was never set). Something that
    is there but is not a link (a file or folder someone put in its place) is a ``DataError``
    naming it: read as "not set", a promotion would replace it and lose what it held."""
    path = pipeline_dir / alias
    try:
        return Path(os.readlink(path)).name
    except OSError:
        if os.path.lexists(path):
            raise DataError(not_a_link(path)) from None
        return None


def check_aliases(pipeline_dir: Path) -> None:
    """A ``DataError`` naming the first alias of the pipeline that is there but is not a link
    (a plain file or folder in its place): the run it means cannot be told, so nothing that
    must spare that run (prune) may go on."""
    for alias in ALIASES:
        alias_target(pipeline_dir, alias)


def aliases_of(pipeline_dir: Path) -> dict[str, str]:
    """Run id -> the aliases pointing to it, joined (one readlink per alias; an alias that is
    not a link points to no run here, and is refused where it is used)."""
    found: dict[str, list[str]] = {}
    for alias in ALIASES:
        try:
            target = alias_target(pipeline_dir, alias)
        except DataError:
            continue
        if target is not None:
            found.setdefault(target, []).append(alias)
    return {run_id: ",".join(names) for run_id, names in found.items()}


def pipeline_dirs(runs_dir: str | os.PathLike[str], pipeline: str | None = None) -> list[Path]:
    """Pipeline folders under ``runs_dir`` (one, when ``pipeline`` is named; an unknown name is an error).

    A missing ``runs_dir`` means no runs yet, not an error: listing and pruning in a fresh
    project (or a cron job before the first run) have nothing to do.
    """
    root = Path(runs_dir)
    if not root.is_dir():
        if pipeline is not None:
            raise ConfigError([ConfigIssue("--pipeline", f"no runs of pipeline '{pipeline}': "
                                                         f"runs folder '{root}' does not exist")])
        return []
    found = sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink() and not p.name.startswith("."))
    if pipeline is None:
        return found
    for folder in found:
        if folder.name == pipeline:
            return [folder]
    names = ", ".join(p.name for p in found) or "none"
    raise ConfigError([ConfigIssue("--pipeline", f"no runs of pipeline '{pipeline}' under '{root}' "
                                                 f"(pipelines there: {names})")])


def runs_in(pipeline_dir: Path) -> list[Run]:
    """Run folders of one pipeline, newest first.

    Only folders named like run ids count, so prune never touches anything else a user keeps
    there, and hidden folders (a deletion in progress, temporary files) are never runs.
    """
    pointed = aliases_of(pipeline_dir)
    runs = []
    for entry in pipeline_dir.iterdir():
        if entry.is_symlink() or not entry.is_dir() or not is_run_id(entry.name):
            continue
        manifest, problem = load_manifest(entry)
        names = tuple(pointed[entry.name].split(",")) if entry.name in pointed else ()
        runs.append(Run(pipeline_dir.name, entry.name, entry, manifest, problem, latest=LATEST in names,
                        aliases=names))
    runs.sort(key=lambda r: r.run_id, reverse=True)
    return runs


def find_runs(runs_dir: str | os.PathLike[str], pipeline: str | None = None) -> list[Run]:
    """Every run under ``runs_dir`` (or of one pipeline), newest first across pipelines."""
    runs = [run for folder in pipeline_dirs(runs_dir, pipeline) for run in runs_in(folder)]
    runs.sort(key=lambda r: (r.run_id, r.pipeline), reverse=True)
    return runs


# ---------------------------------------------------------------------------- resolving RUN
def resolve_run(ref: str, runs_dir: str | os.PathLike[str], pipeline: str | None = None,
                *, argument: str = "RUN") -> Run:
    """The run that ``ref`` names: a path to a run folder, "latest", a run id or a unique prefix of one.

    Anything that does not name exactly one run is a ConfigError (exit 2) that says what was
    looked for and lists the candidates, so the next attempt can be right.
    """
    path = Path(ref)
    if ref not in ALIASES and path.is_dir():
        found = _run_at(path, argument)
        if pipeline and found.pipeline != pipeline:
            # A path names its run whatever --pipeline says: a rollback must not move another
            # pipeline's champion because its folder was given.
            raise _not_found(argument, f"the run folder '{ref}' is of pipeline '{found.pipeline}', not "
                                       f"'{pipeline}' (--pipeline)")
        return found
    if os.sep in ref or (os.altsep and os.altsep in ref):
        raise _not_found(argument, f"no run folder at '{ref}'")
    if ref in ALIASES:
        return _alias_run(runs_dir, pipeline, argument, ref)
    runs = find_runs(runs_dir, pipeline)
    where = f"'{runs_dir}'" + (f" (pipeline '{pipeline}')" if pipeline else "")
    exact = [r for r in runs if r.run_id == ref]
    matches = exact or [r for r in runs if r.run_id.startswith(ref)]
    if len(matches) == 1:
        return matches[0]
    if len(exact) > 1:                      # the whole id, in several pipelines: more of it cannot help
        raise _not_found(argument, f"run id '{ref}' is in {len(exact)} pipelines under {where} "
                                   f"({', '.join(_label(r, exact) for r in exact)}); name one with --pipeline")
    if not matches:
        newest = ", ".join(_label(r, runs) for r in runs[:10]) or "none"
        more = f" and {len(runs) - 10} older" if len(runs) > 10 else ""
        raise _not_found(argument, f"no run id starting with '{ref}' under {where}; runs there, newest first: "
                                   f"{newest}{more}")
    listed = ", ".join(_label(r, runs) for r in matches[:20])
    more = f" and {len(matches) - 20} more" if len(matches) > 20 else ""
    raise _not_found(argument, f"run id prefix '{ref}' is ambiguous under {where}: it matches {len(matches)} runs "
                               f"({listed}{more}); give more of the id")


def _label(run: Run, runs: Iterable[Run]) -> str:
    several = len({r.pipeline for r in runs}) > 1
    return f"{run.pipeline}/{run.run_id}" if several else run.run_id


def _not_found(argument: str, message: str) -> ConfigError:
    """A RUN argument that names no single run: a usage error (exit 2), one sentence that says
    which argument, not a "config problem" (no config is involved)."""
    return UsageError([ConfigIssue(argument, f"{argument}: {message}")])


def _run_at(path: Path, argument: str) -> Run:
    folder = path.resolve()
    looks_like_run = is_run_id(folder.name) or (folder / MANIFEST).exists() or (folder / CONFIG).exists()
    if not looks_like_run:
        raise _not_found(argument, f"'{path}' is a folder but not a run folder (no {MANIFEST} or {CONFIG})")
    manifest, problem = load_manifest(folder)
    pipeline = (manifest.pipeline if manifest else "") or folder.parent.name
    names = tuple(aliases_of(folder.parent).get(folder.name, "").split(",")) if folder.parent.is_dir() else ()
    names = tuple(name for name in names if name)
    return Run(pipeline, folder.name, folder, manifest, problem, latest=LATEST in names, aliases=names)


def _alias_run(runs_dir: str | os.PathLike[str], pipeline: str | None, argument: str, alias: str = LATEST) -> Run:
    """The run ``alias`` (``latest``, ``champion``) points to, in the one pipeline meant."""
    # What the alias means when it is missing: latest is set by the first succeeded run,
    # champion by the first promotion.
    unset = "no run has succeeded yet" if alias == LATEST else "no run has been promoted yet (a promote stage sets it)"
    folders = pipeline_dirs(runs_dir, pipeline)
    if not folders:
        raise _not_found(argument, f"no runs under '{runs_dir}' (the folder is missing or empty), so no {alias} run")
    if len(folders) > 1:
        pointed = [f.name for f in folders if alias_target(f, alias) is not None]
        if not pointed:
            names = ", ".join(f.name for f in folders)
            raise _not_found(argument, f"no {alias} run under '{runs_dir}': {unset} in any of its pipelines ({names})")
        others = [f.name for f in folders if alias_target(f, alias) is None]
        none_yet = "no succeeded run yet" if alias == LATEST else f"no {alias} yet"
        without = f" ({none_yet}: {', '.join(others)})" if others else ""
        which = (f"several pipelines with a {alias} run: {', '.join(pointed)}{without}" if len(pointed) > 1 else
                 f"several pipelines, and one of them has a {alias} run: {pointed[0]}{without}")
        raise _not_found(argument, f"'{alias}' needs --pipeline here: '{runs_dir}' holds {which}; pick one with "
                                   f"--pipeline NAME, e.g. --pipeline {pointed[0]}")
    folder = folders[0]
    target = alias_target(folder, alias)
    if target is None:
        raise _not_found(argument, f"pipeline '{folder.name}' has no {alias} run ({unset})")
    outside = _outside(folder, alias)
    if outside is not None:
        fix = ("the next run of every stage points it again" if alias == LATEST
               else "point it again with `pipeline runs promote RUN`")
        raise _not_found(argument, f"'{folder / alias}' points to '{outside}', outside the folder of pipeline "
                                   f"'{folder.name}' ({folder}); an alias names a run of its own pipeline: {fix}")
    run = next((r for r in runs_in(folder) if r.run_id == target), None)
    if run is None:
        what = "which is not a run folder" if (folder / target).exists() else "which is not there (deleted?)"
        raise _not_found(argument, f"'{folder / alias}' points to '{target}', {what}")
    return run


def _outside(folder: Path, alias: str) -> str | None:
    """Where the link ``folder/alias`` leads when that is not a folder directly in ``folder``
    (a link into another runs folder), else None."""
    path = folder / alias
    try:
        link = os.readlink(path)
        leads_to = Path(os.path.realpath(path))
        here = Path(os.path.realpath(folder))
    except (OSError, ValueError):
        return None
    return None if leads_to.parent == here else link


def require_manifest(run: Run) -> RunManifest:
    """The manifest of a run that a command cannot show without one (DataError, exit 3, otherwise)."""
    if run.manifest is None:
        raise DataError(f"run {run.run_id}: {run.problem} in {run.path}")
    return run.manifest


def load_run_config(run: Run) -> dict[str, Any]:
    """The resolved config the run used (config.yaml), as plain data for diffing."""
    from pipeline.core.yaml_source import parse_yaml

    path = run.path / CONFIG
    try:
        data = parse_yaml(path.read_text(encoding="utf-8"), source=str(path)).data   # bounded, standard tags only
    except FileNotFoundError:
        raise DataError(f"run {run.run_id}: no {CONFIG} in {run.path}") from None
    except (OSError, UnicodeDecodeError, ConfigError) as exc:
        raise DataError(f"run {run.run_id}: cannot read {path}: {' '.join(str(exc).split())}") from None
    return data if isinstance(data, dict) else {"": data}


# ---------------------------------------------------------------------------- summaries
def why_abandoned(manifest: RunManifest, host: str | None = None, *, lock: LockState | None = None,
                  run_id: str | None = None) -> str | None:
    """Why a "running" run will never finish (so it is shown as abandoned and prune may delete
    it), or None while it may still be going. A running run holds its pipeline's lock from
    before its record is first written until after it is last written, and notes its run id
    in the lock; so it is over when:

    - it ran here and its process is gone (a pid now held by a process that started after the
      run did is a reused pid, not the run);
    - a later run of the pipeline has taken the lock since (from any host: runs of a pipeline
      are serialised, by the lock on one machine and by the scheduler across machines);
    - it ran here, the lock still names it and nobody holds it: its process let go of the lock
      without finishing the record (a library caller whose disk filled up, say).

    ``lock``: the pipeline's lock as ``pipeline.runs.store.probe_lock`` saw it; None to judge by
    the process alone. ``run_id``: the run folder's name (the manifest's run id by default).
    """
    if manifest.status != "running":
        return None
    run_id = run_id or manifest.run_id
    here = manifest.host == (host or host_name())
    if here:
        gone = _process_gone(manifest)
        if gone:
            return gone
    holder = lock.holder if lock is not None else {}
    owner = holder.get("run_id")
    if isinstance(owner, str) and owner != run_id and owner > run_id:
        return f"run {owner} has taken the pipeline's lock since"
    if here and lock is not None and lock.held is False and owner == run_id:
        return f"process {manifest.pid} let go of the run lock without finishing the record"
    return None


def is_abandoned(manifest: RunManifest, host: str | None = None, *, lock: LockState | None = None,
                 run_id: str | None = None) -> bool:
    """True for a "running" run that will never finish (see ``why_abandoned``)."""
    return why_abandoned(manifest, host, lock=lock, run_id=run_id) is not None


def run_abandoned(run: Run, host: str | None = None) -> str | None:
    """``why_abandoned`` for a run folder, with its pipeline's lock looked at (only for "running" runs)."""
    return folder_abandoned(run.path, run.manifest, host)


def folder_abandoned(path: Path, manifest: RunManifest | None, host: str | None = None) -> str | None:
    """``run_abandoned`` for the run folder at ``path`` with its ``manifest`` read already (the
    report's)."""
    if manifest is None or manifest.status != "running":
        return None
    return why_abandoned(manifest, host, lock=probe_lock(path.parent / LOCK_FILE), run_id=path.name)


def _process_gone(manifest: RunManifest) -> str | None:
    """Why the process of a run that ran on this host is not running it any more, or None."""
    pid = manifest.pid
    if pid is None or pid <= 0:
        return None
    import psutil

    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return f"process {pid} has exited"
        created = process.create_time()
    except psutil.NoSuchProcess:
        return f"process {pid} is gone"
    except (psutil.Error, OverflowError, ValueError):
        return None                      # exists, but we may not look at it: assume it is the run
    started = _parse_time(manifest.started)
    if started is not None and created > started.timestamp() + 1.0:
        return f"process {pid} is gone (the pid now belongs to a newer process)"
    return None


def _parse_time(value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        parsed = parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)
        parsed.timestamp()
    except (ValueError, OverflowError):
        return None
    return parsed


def summary(run: Run) -> dict[str, Any]:
    """One row of ``runs list`` as plain data (the --json form).

    ``status`` is the manifest's, except "abandoned" for a run that will never finish and
    "unreadable" for a folder whose manifest cannot be read; ``error`` says why for both.
    """
    manifest = run.manifest
    abandoned = run_abandoned(run)
    error = manifest.error if manifest is not None else run.problem
    return {
        "run_id": run.run_id,
        "pipeline": run.pipeline,
        "status": ABANDONED if abandoned else run.status,
        "abandoned": abandoned is not None,
        "latest": run.latest,
        "aliases": list(run.aliases),
        "started": run.started,
        "ended": manifest.ended if manifest else None,
        "duration_s": manifest.duration_s if manifest else None,
        "device": manifest.device.name if manifest and manifest.device else None,
        "host": manifest.host if manifest else None,
        "pid": manifest.pid if manifest else None,
        "headline": manifest.headline() if manifest else None,
        "cost": manifest.cost if manifest else None,
        "error": f"abandoned: {abandoned}" if abandoned else error,
        "path": str(run.path),
    }


def recent_spend(runs_dir: str | Path, pipeline: str, count: int) -> dict[str, float]:
    """The median wall seconds (``max_wall``), cost (``max_cost``) and GPU-hours
    (``max_gpu_hours``) of the newest ``count`` succeeded runs of ``pipeline``, and ``runs``:
    how many; a figure no run recorded is left out (an empty dict without runs)."""
    import statistics

    try:
        found = find_runs(runs_dir, pipeline)
    except ConfigError:                      # no runs folder, or none of this pipeline yet
        return {}
    done = [run.manifest for run in found if run.manifest is not None and run.status == "succeeded"][:count]
    if not done:
        return {}
    figures: dict[str, list[float]] = {"max_wall": [], "max_cost": [], "max_gpu_hours": []}
    for manifest in done:
        if manifest.duration_s is not None:
            figures["max_wall"].append(manifest.duration_s)
        if manifest.cost and isinstance(manifest.cost.get("total"), (int, float)):
            figures["max_cost"].append(float(manifest.cost["total"]))
        gpus = (manifest.usage or {}).get("gpus") or {}
        if gpus:
            figures["max_gpu_hours"].append(sum(d.get("seconds", 0.0) for d in gpus.values()) / 3600)
    out: dict[str, float] = {cap: statistics.median(values) for cap, values in figures.items() if values}
    out["runs"] = len(done)
    return out


def started_since(run: Run, since: datetime) -> bool:
    """Whether ``run`` started at or after ``since`` (a run with no start time: no)."""
    started = _parse_time(run.started)
    return started is not None and started >= since


def cost_totals(rows: list[dict[str, Any]]) -> dict[str, float]:
    """The ``runs list`` rows' costs added up per currency (rows without a cost count nothing)."""
    totals: dict[str, float] = {}
    for row in rows:
        cost = row.get("cost")
        if isinstance(cost, dict) and isinstance(cost.get("total"), (int, float)):
            currency = str(cost.get("currency") or "")
            totals[currency] = totals.get(currency, 0.0) + float(cost["total"])
    return totals


def json_safe(value: Any) -> Any:
    """NaN and infinities as null: manifests may hold NaN metrics, which strict JSON readers reject."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


# ---------------------------------------------------------------------------- diff
def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted key paths to leaf values, lists by index: the same paths ``--set`` takes.

    Empty dicts and lists are leaves, so "became empty" is a visible change.
    """
    if isinstance(value, dict) and value:
        items: Iterable[tuple[Any, Any]] = value.items()
    elif isinstance(value, list) and value:
        items = enumerate(value)
    else:
        return {prefix: value}
    out: dict[str, Any] = {}
    for key, item in items:
        out.update(flatten(item, f"{prefix}.{key}" if prefix else str(key)))
    return out


def diff_flat(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    """Keys whose values differ: ``{key, change: changed|added|removed, a, b}``, by key ("added" = only in B)."""
    rows = []
    for key in sorted(set(a) | set(b)):
        if key not in a:
            rows.append({"key": key, "change": "added", "a": None, "b": b[key]})
        elif key not in b:
            rows.append({"key": key, "change": "removed", "a": a[key], "b": None})
        elif a[key] != b[key] or type(a[key]) is not type(b[key]):
            rows.append({"key": key, "change": "changed", "a": a[key], "b": b[key]})
    return rows


def diff_metrics(a: dict[str, Any] | None, b: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Per model and metric: A, B and B-A (None where a side has no number), in A's order then B's."""
    models_a = _models(a)
    models_b = _models(b)
    rows = []
    for model in list(models_a) + [m for m in models_b if m not in models_a]:
        values_a, values_b = models_a.get(model, {}), models_b.get(model, {})
        for metric in list(values_a) + [m for m in values_b if m not in values_a]:
            va, vb = as_number(values_a.get(metric)), as_number(values_b.get(metric))
            delta = vb - va if va is not None and vb is not None else None
            rows.append({"model": model, "metric": metric, "a": va, "b": vb, "delta": delta})
    return rows


def _models(metrics: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    models = (metrics or {}).get("models")
    if not isinstance(models, dict):
        return {}
    return {name: values for name, values in models.items() if isinstance(values, dict)}


# Manifest fields that explain why two runs differ besides the config: outcome, device, software.
RUN_FIELDS = ("pipeline", "status", "device.name", "device.requested", "device.reason", "host", "error")


def run_field(manifest: RunManifest, key: str) -> Any:
    """A RUN_FIELDS value by its dotted name (None where a part is absent, e.g. no device)."""
    value: Any = manifest
    for part in key.split("."):
        value = getattr(value, part, None)
    return value


def diff_runs(a: Run, b: Run) -> dict[str, Any]:
    """Everything ``runs diff`` reports: run fields, versions, resolved config, metrics."""
    manifest_a, manifest_b = require_manifest(a), require_manifest(b)
    run_rows = [{"key": key, "a": run_field(manifest_a, key), "b": run_field(manifest_b, key)}
                for key in RUN_FIELDS if run_field(manifest_a, key) != run_field(manifest_b, key)]
    versions = diff_flat(flatten(manifest_a.versions, "versions"), flatten(manifest_b.versions, "versions"))
    metrics_a, metrics_b = manifest_a.metrics, manifest_b.metrics
    settings = [{"key": key, "a": (metrics_a or {}).get(key), "b": (metrics_b or {}).get(key)}
                for key in ("split", "threshold", "rank_by", "best")]
    return {
        "a": summary(a),
        "b": summary(b),
        "run": run_rows + [{"key": r["key"], "a": r["a"], "b": r["b"]} for r in versions],
        "config": diff_flat(flatten(load_run_config(a)), flatten(load_run_config(b))),
        "metrics": {"settings": settings, "models": diff_metrics(metrics_a, metrics_b)},
    }


# ---------------------------------------------------------------------------- prune
def plan_prune(runs: list[Run], keep: int, *, host: str | None = None) -> PrunePlan:
    """Choose what ``prune --keep N`` deletes in one pipeline (``runs`` newest first).

    Kept: the N newest finished runs (an abandoned run counts as finished: it ended, just not
    cleanly, and may be the evidence of a crash), the runs ``latest`` and ``champion`` point to wherever they are,
    every run still running, and every run whose manifest cannot be read (its state is
    unknown: it may be a run that has only just created its folder). The rest are deleted.
    """
    if keep < 0:
        raise ConfigError([ConfigIssue("--keep", f"must be 0 or more, got {keep}")])
    plan = PrunePlan(runs[0].pipeline if runs else "")
    finished = 0
    for run in runs:
        if run.manifest is None:
            plan.keep.append((run, f"manifest unreadable ({run.problem}); remove it by hand if it is junk"))
            continue
        running = run.status not in FINISHED
        if running and run_abandoned(run, host) is None:
            plan.keep.append((run, f"{run.status} (pid {run.manifest.pid} on {run.manifest.host})"))
            continue
        finished += 1
        if finished <= keep:
            plan.keep.append((run, f"one of the {keep} newest"))
        elif run.aliases:
            plan.keep.append((run, " and ".join(run.aliases)))
        else:
            plan.delete.append(run)
    return plan


def delete_run(run: Run) -> None:
    """Delete a run folder: first rename it to a hidden name beside it, then remove that.

    The rename is atomic, so a reader sees the whole run or no run; if the removal stops half
    way (a crash, a permission) what is left is hidden and ``remove_leftover`` finishes it.
    Refuses a run that an alias (``latest``, ``champion``) has come to point at since the plan was
    made, and any run while an alias is not a link (``DataError``: which run it means cannot be told).
    """
    check_aliases(run.path.parent)            # an alias that is not a link may mean this run: DataError
    pointing = aliases_of(run.path.parent).get(run.run_id)
    if pointing:
        names = " and ".join(f"'{name}'" for name in pointing.split(","))
        raise StorageError(f"not deleting {run.path}: {names} points to it")
    hidden = run.path.with_name(f"{DELETING_PREFIX}{run.run_id}.{secrets.token_hex(3)}")
    try:
        os.rename(run.path, hidden)
    except OSError as exc:
        raise StorageError(f"cannot delete {run.path}: {exc.strerror or exc}") from exc
    try:
        shutil.rmtree(hidden)
    except OSError as exc:
        raise StorageError(f"{run.path} was hidden as {hidden.name} but removing it failed: "
                           f"{exc.strerror or exc}; the next prune retries") from exc


def leftovers(pipeline_dir: Path) -> list[Path]:
    """Hidden remains of deletions that were interrupted (see ``delete_run``)."""
    return sorted(p for p in pipeline_dir.iterdir()
                  if p.name.startswith(DELETING_PREFIX) and p.is_dir() and not p.is_symlink())


def remove_leftover(path: Path) -> None:
    """Finish an interrupted deletion (a hidden ``.deleting-`` folder)."""
    try:
        shutil.rmtree(path)
    except OSError as exc:
        raise StorageError(f"cannot remove {path}: {exc.strerror or exc}") from exc


def cache_keys(runs: Iterable[Run]) -> dict[str, list[str]]:
    """Stage-cache key -> ids of the runs whose manifest names it (``stages[*].cache_key``)."""
    used: dict[str, list[str]] = {}
    for run in runs:
        if run.manifest is None:
            continue
        for key in dict.fromkeys(s.cache_key for s in run.manifest.stages.values() if isinstance(s.cache_key, str)):
            used.setdefault(key, []).append(run.run_id)
    return used
