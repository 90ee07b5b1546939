"""What a report is drawn from: the run folder's record and the files its stages wrote.

Only recorded numbers are read (manifest.json, and the JSON/CSV artifacts listed in it), so a
report rebuilt a month later shows what the run measured. A file whose sha256 no longer
matches the manifest is not read: its section says so instead of showing changed numbers,
and one the manifest lists that is no longer there is named as missing (a page without its
curves must say why, not look like a run that drew none).
Which file a section reads is decided by the file's name (``metrics.json``, ``curves.json``,
``importance.json``, ``columns.json``, ``profile.json``, ``history.csv``, ``eval_history.csv``)
and the stage's recorded facts, never by a stage kind.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.runs.history import folder_abandoned
from pipeline.runs.layout import CONFIG, MANIFEST
from pipeline.runs.record import RunManifest, read_manifest


@dataclass
class Evaluation:
    """One evaluating stage's files: metrics.json, and curves.json and importance.json where
    it wrote them. ``metrics`` is empty when metrics.json changed since the run or is missing
    (``unshown`` names it): the stage's intact files are still shown."""

    stage: str
    metrics: dict[str, Any]
    curves: dict[str, Any] | None = None
    importance: dict[str, Any] | None = None
    unshown: str | None = None          # metrics.json, when it changed since the run or is missing


@dataclass
class RunSources:
    run_dir: Path
    manifest: RunManifest
    config_text: str | None
    evaluations: list[Evaluation] = field(default_factory=list)
    histories: dict[str, list[dict[str, float]]] = field(default_factory=dict)   # stage -> epochs
    rounds: dict[str, list[dict[str, float]]] = field(default_factory=dict)      # stage -> boosting rounds
    columns: dict[str, dict[str, Any]] = field(default_factory=dict)     # stage -> columns.json (a read table)
    profiles: dict[str, dict[str, Any]] = field(default_factory=dict)    # stage -> profile.json (features)
    changed: list[str] = field(default_factory=list)        # artifacts whose sha256 no longer matches
    missing: list[str] = field(default_factory=list)        # artifacts the manifest lists that are gone
    abandoned: str | None = None        # why a "running" run will never finish (its process is gone)

    @property
    def status(self) -> str:
        """The run's status as ``pipeline runs list`` shows it: ``abandoned`` for a run whose
        manifest says running while no process runs it any more."""
        return "abandoned" if self.abandoned else self.manifest.status

    @property
    def models(self) -> list[str]:
        """Every evaluated model, in the order evaluation listed them (fixes each one's colour);
        an evaluation whose metrics.json is not shown adds its importances' models."""
        names: dict[str, None] = {}
        for evaluation in self.evaluations:
            names.update(dict.fromkeys(evaluation.metrics.get("models", {})))
        for evaluation in self.evaluations:
            if evaluation.unshown:
                names.update(dict.fromkeys((evaluation.importance or {}).get("models") or {}))
        return list(names)

    def facts(self) -> list[dict[str, Any]]:
        """Every stage's recorded facts, in the run's stage order."""
        return [record.facts for record in self.manifest.stages.values() if isinstance(record.facts, dict)]

    def source_columns(self) -> list[str]:
        """The column names of every table the run read (its columns.json files)."""
        return [str(c.get("name")) for found in self.columns.values() for c in found.get("columns") or []
                if isinstance(c, dict)]


def read_sources(run_dir: Path) -> RunSources:
    """The run at ``run_dir`` (a ManifestError when it has no readable manifest)."""
    run_dir = Path(run_dir)
    manifest = read_manifest(run_dir)
    config = run_dir / CONFIG
    sources = RunSources(run_dir=run_dir, manifest=manifest,
                         config_text=config.read_text(encoding="utf-8") if config.is_file() else None)
    # Killed (SIGKILL, a lost machine), a run's record says "running" forever.
    sources.abandoned = folder_abandoned(run_dir, manifest)
    for name in manifest.stages:
        metrics = _json(sources, f"{name}/metrics.json")
        if isinstance(metrics, dict) and isinstance(metrics.get("models"), dict):
            curves, importance = (_json(sources, f"{name}/{file}") for file in ("curves.json", "importance.json"))
            sources.evaluations.append(Evaluation(name, metrics, curves if isinstance(curves, dict) else None,
                                                  importance if isinstance(importance, dict) else None))
        elif f"{name}/metrics.json" in sources.changed + sources.missing:
            # The evaluation's numbers are not shown; its importances, measured apart, still are
            # (its curves need the metrics: which models, which threshold).
            importance = _json(sources, f"{name}/importance.json")
            sources.evaluations.append(Evaluation(name, {}, None, importance if isinstance(importance, dict) else None,
                                                  unshown=f"{name}/metrics.json"))
        for file, found in (("columns.json", sources.columns), ("profile.json", sources.profiles)):
            content = _json(sources, f"{name}/{file}")
            if isinstance(content, dict):
                found[name] = content
        history = _history(sources, f"{name}/history.csv")
        if history:
            sources.histories[name] = history
        rounds = _history(sources, f"{name}/eval_history.csv")
        if rounds:
            sources.rounds[name] = rounds
    return sources


def _verified_text(sources: RunSources, relative: str) -> str | None:
    """The artifact's text, read once, if it exists and still has the sha256 the manifest
    recorded for it (a file the manifest does not list is read as it is). A listed file that
    is not there is counted as missing."""
    path = sources.run_dir / relative
    if relative == MANIFEST:
        return None
    if not path.is_file():
        if relative in sources.manifest.artifacts:
            sources.missing.append(relative)
        return None
    try:
        data = path.read_bytes()
        recorded = sources.manifest.artifacts.get(relative)
        if recorded is not None and hashlib.sha256(data).hexdigest() != recorded:
            raise ValueError("changed since the run")
        return data.decode("utf-8")
    except (OSError, ValueError):           # UnicodeDecodeError is a ValueError
        sources.changed.append(relative)
        return None


def _json(sources: RunSources, relative: str) -> Any:
    content = _verified_text(sources, relative)
    if content is None:
        return None
    try:
        return json.loads(content)
    except ValueError:
        sources.changed.append(relative)
        return None


def _history(sources: RunSources, relative: str) -> list[dict[str, float]]:
    """A per-epoch or per-round CSV as rows of numbers (a row that is not numbers is skipped)."""
    content = _verified_text(sources, relative)
    rows = []
    for row in csv.DictReader(io.StringIO(content or "")):
        try:
            rows.append({key: float(value) for key, value in row.items() if value not in ("", None)})
        except ValueError:
            continue
    return rows
