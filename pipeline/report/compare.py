"""The comparison page of two runs: what differs (run fields, versions, resolved config), the
metrics side by side with B - A, and the curves of both runs overlaid (A solid, B dashed).

The differences are ``history.diff_runs``'s, the same ones ``pipeline runs diff`` prints; the
curves are each run's recorded curves.json. Nothing is recomputed. A run whose curves.json is
missing or changed (``read_sources`` checks it against the manifest) leaves the other run's
curves drawn alone, and the page's top names the file, as a run's report does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from pipeline.runs.history import Run, diff_runs
from pipeline.report import figures
from pipeline.report.html import cell, document, duration, e, figure_row, number, plain, switches, table, text
from pipeline.report.sources import RunSources, read_sources

_CURVES = figures.BINARY_CURVES[:3]            # ROC, precision-recall, gain


def render_comparison(a: Run, b: Run, *, generated: datetime, version: str,
                      sources: Mapping[str, RunSources] | None = None) -> str:
    """The page; ``sources``: both runs' ``read_sources`` by side ("A", "B"), read here if not given."""
    diff = diff_runs(a, b)
    sources = sources or {"A": read_sources(a.path), "B": read_sources(b.path)}
    models = list(dict.fromkeys(m for side in sources.values() for m in side.models))
    curves = {side: _binary_curves(found) for side, found in sources.items()}
    sections = [("runs", "Runs", _runs(diff)), ("differences", "What differs", _differences(diff)),
                ("metrics", "Metrics", _metrics(diff)), ("curves", "Curves", _curves(curves, models))]
    heading = (f"<h1>{e(a.pipeline)}: {e(a.run_id)} against {e(b.run_id)}</h1>"
               '<p class="note">A is the first run named, B the second; B - A is B\'s value less A\'s.</p>')
    heading += "".join(f'<p class="warning">Not shown: {e(line)}.</p>' for line in unused_files(sources, a, b))
    drawn = [side for side in ("A", "B") if curves.get(side)]
    read = ("manifest.json, config.yaml and curves.json" if len(drawn) == 2 else
            f"manifest.json and config.yaml, and run {drawn[0]}'s curves.json" if drawn else
            "manifest.json and config.yaml")
    footer = f"Built {e(generated.isoformat(timespec='seconds'))} by pipeline {e(version)} from both runs' {read}."
    return document(f"{a.run_id} vs {b.run_id}", heading, sections, footer)


# The files of a run the page reads beyond its manifest and config: an evaluation's metrics.json
# (its models) and curves.json.
_READ = ("metrics.json", "curves.json")


def unused_files(sources: Mapping[str, RunSources], a: Run, b: Run) -> list[str]:
    """Per run, the files the page would read that are missing or changed, as lines that name
    the run, the files and why (what the page's top and ``runs compare``'s warnings say)."""
    lines = []
    for side, run in (("A", a), ("B", b)):
        found = sources[side]
        for files, why in ((found.missing, "missing from the run folder (manifest.json records it)"),
                           (found.changed, "changed since the run (sha256 differs from manifest.json) "
                                           "or could not be read")):
            named = sorted({f for f in files if f.rsplit("/", 1)[-1] in _READ})
            if named:
                lines.append(f"run {side} ({run.run_id}): {', '.join(named)} {why}")
    return lines


def _runs(diff: Mapping[str, Any]) -> str:
    header = ["", "run id", "pipeline", "status", "started", "duration", "device", "headline"]
    rows = []
    for side in ("a", "b"):
        row = diff[side]
        headline = row.get("headline") or {}
        shown = (f"{headline.get('model')}: {headline.get('metric')} {number(headline.get('value'))}"
                 if headline else "-")
        rows.append([text(side.upper()), text(row["run_id"]), text(row["pipeline"]), text(row["status"]),
                     text(row.get("started")), f"<td>{e(duration(row.get('duration_s')))}</td>",
                     text(row.get("device")), text(shown)])
    return table(header, rows)


def _differences(diff: Mapping[str, Any]) -> str:
    parts = []
    if diff["run"]:
        rows = [[text(r["key"]), text(plain(r["a"])), text(plain(r["b"]))] for r in diff["run"]]
        parts.append(f"<h3>Run and versions</h3>{table(['field', 'A', 'B'], rows)}")
    if diff["config"]:
        rows = [[text(r["key"]), text(r["change"]), text("(absent)" if r["change"] == "added" else plain(r["a"])),
                 text("(absent)" if r["change"] == "removed" else plain(r["b"]))] for r in diff["config"]]
        parts.append(f"<h3>Resolved config</h3>{table(['key', 'change', 'A', 'B'], rows)}")
    else:
        parts.append("<p>The resolved configs are identical.</p>")
    return "".join(parts)


def _metrics(diff: Mapping[str, Any]) -> str:
    rows = diff["metrics"]["models"]
    if not rows:
        return ""
    settings = ", ".join(f"{s['key']} {plain(s['a'])}" if s["a"] == s["b"] else
                         f"{s['key']} {plain(s['a'])} → {plain(s['b'])}" for s in diff["metrics"]["settings"])
    body = [[text(r["model"]), text(r["metric"]), cell(r["a"]), cell(r["b"]), cell(r["delta"])] for r in rows]
    return f'<p class="note">{e(settings)}</p>{table(["model", "metric", "A", "B", "B - A"], body)}'


def _curves(curves: Mapping[str, Mapping[str, Any]], models: Sequence[str]) -> str:
    """Both runs' curves overlaid; a run without binary curves (none recorded, or its curves.json
    missing or changed: the page's top says which) leaves the other's drawn alone."""
    drawn_sides = [side for side in ("A", "B") if curves.get(side)]
    if not drawn_sides:
        return ""
    drawn = []
    for axes in _CURVES:
        key, x, y = axes.key, axes.x, axes.y
        lines = []
        for side, style in (("A", "-"), ("B", "--")):
            for name, points in (curves.get(side) or {}).items():
                if key in points:
                    lines.append((f"{name} ({side})", points[key][x], points[key][y], models.index(name), style))
        drawn.append(figures.overlay(f"compare-{key}", lines, xlabel=axes.xlabel, ylabel=axes.ylabel,
                                     title=axes.title))
    note = "A solid, B dashed."
    if len(drawn_sides) == 1:
        (only,) = drawn_sides
        other = "B" if only == "A" else "A"
        note = (f"Run {only}'s curves only ({'solid' if only == 'A' else 'dashed'}): run {other} has no binary "
                "curves to draw (a missing or changed curves.json is named at the top).")
    shown = models if len(drawn_sides) == 2 else [m for m in models if m in curves[drawn_sides[0]]]
    return switches(shown, models) + figure_row(drawn) + f'<p class="note">{e(note)}</p>'


def _binary_curves(sources: RunSources) -> dict[str, Any]:
    """The first evaluation's binary curves by model (what both runs can be drawn from)."""
    for evaluation in sources.evaluations:
        found = evaluation.curves or {}
        if (found.get("task") or {}).get("kind") == "binary":
            return found.get("models", {})
    return {}
