"""The report page: one HTML file with its styles, its few lines of script and its figures inline.

The page makes no request: no font, script, style or image is fetched (a test opens it in a
headless browser and fails on any request or console error). HTML is built here with every
recorded text escaped in one place (``_e``); a template engine would add a dependency to
fill one fixed layout.

Numbers are printed from the record as they are (``_number``: up to 4 significant decimals),
so each one can be found in manifest.json or the file the section names.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from pipeline.report import figures
from pipeline.report.sources import Evaluation, RunSources

SPLITS = ("train", "valid", "test")
_BINARY_CURVES = (
    ("roc", "fpr", "tpr", "false positive rate", "true positive rate", "ROC curve", "chance", "roc_auc"),
    ("pr", "recall", "precision", "recall", "precision", "Precision-recall curve", None, "pr_auc"),
    ("gain", "fraction_rows", "fraction_positives", "fraction of rows, highest scores first",
     "fraction of positives found", "Cumulative gain", "chance", None),
    ("lift", "fraction_rows", "lift", "fraction of rows, highest scores first", "lift over the base rate",
     "Lift", "one", None),
)

STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;max-width:1180px;
padding:0 1.2rem 3rem;color:#222;line-height:1.4}
h1{margin:1.2rem 0 .2rem;font-size:1.6rem}h2{border-bottom:1px solid #ddd;padding-bottom:.2rem;margin-top:2rem}
h3{margin:1.2rem 0 .4rem;font-size:1.05rem}
table{border-collapse:collapse;margin:.4rem 0 1rem;font-size:.86rem}
th,td{border:1px solid #ddd;padding:.2rem .5rem;text-align:right;vertical-align:top}
th{background:#f4f6f8}td.text,th.text{text-align:left}
.best{font-weight:600;background:#eef7ee}
.figures{display:flex;flex-wrap:wrap;gap:.6rem}.figures figure{margin:0;border:1px solid #eee;padding:.2rem}
figure svg{display:block;max-width:100%;height:auto}
.status-succeeded{color:#1a7f37}.status-failed,.status-interrupted{color:#b42318}
.note{color:#666;font-size:.85rem}.switches label{margin-right:1rem;cursor:pointer}
pre{background:#f7f7f7;padding:.6rem;overflow:auto;font-size:.8rem;max-height:28rem}
nav a{margin-right:.8rem}.swatch{display:inline-block;width:.8rem;height:.8rem;margin-right:.25rem;vertical-align:-1px}
"""

# Show or hide a model in every figure: each of its artists has an id ending "--m<i>".
SCRIPT = """
document.querySelectorAll('.switches input').forEach(function (box) {
  box.addEventListener('change', function () {
    var suffix = '--m' + box.dataset.model;
    document.querySelectorAll('[id$="' + suffix + '"]').forEach(function (node) {
      node.style.display = box.checked ? '' : 'none';
    });
  });
});
"""


def render(sources: RunSources, *, generated: datetime, version: str) -> str:
    """The whole page for one run."""
    manifest = sources.manifest
    sections = [_summary(sources), _timeline(sources)]
    sections += [_evaluation(sources, evaluation) for evaluation in sources.evaluations]
    sections.append(_training(sources))
    title = f"{manifest.pipeline} · {manifest.run_id}"
    nav = "".join(f'<a href="#{anchor}">{_e(label)}</a>' for anchor, label, _ in sections if _)
    body = "".join(f'<section id="{anchor}"><h2>{_e(label)}</h2>{content}</section>'
                   for anchor, label, content in sections if content)
    changed = ""
    if sources.changed:
        changed = (f'<p class="note">Not shown: {_e(", ".join(sorted(set(sources.changed))))} changed since the run '
                   "(sha256 differs from manifest.json) or could not be read.</p>")
    return (
        "<!DOCTYPE html>\n"
        f'<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">'
        f"<title>{_e(title)}</title><style>{STYLE}</style></head><body>"
        f'<h1>{_e(manifest.pipeline)}</h1><p class="note">run {_e(manifest.run_id)} · '
        f'<span class="status-{_e(manifest.status)}">{_e(manifest.status)}</span></p>'
        f"<nav>{nav}</nav>{changed}{body}"
        f'<p class="note">Built {_e(generated.isoformat(timespec="seconds"))} by pipeline {_e(version)} from '
        "manifest.json and the files each section names.</p>"
        f"<script>{SCRIPT}</script></body></html>\n"
    )


# ------------------------------------------------------------------------- sections
def _summary(sources: RunSources) -> tuple[str, str, str]:
    m = sources.manifest
    rows = [("pipeline", m.pipeline), ("run id", m.run_id), ("status", m.status),
            ("device", f"{m.device.name} ({m.device.reason})" if m.device else None),
            ("started", m.started), ("ended", m.ended),
            ("duration", f"{_number(m.duration_s)} s" if m.duration_s is not None else None),
            ("host", m.host), ("command", " ".join(m.command) if m.command else None)]
    if m.error:
        rows.insert(3, ("error", m.error))
    if m.cluster:
        rows.append(("cluster", json.dumps(m.cluster, default=str)))
    table = _key_values(rows)
    versions = _key_values(sorted(m.versions.items()))
    config = (f"<details><summary>The resolved config (config.yaml)</summary><pre>{_e(sources.config_text)}</pre>"
              "</details>" if sources.config_text else "")
    return "summary", "Summary", f"{table}<h3>Versions</h3>{versions}{config}"


def _timeline(sources: RunSources) -> tuple[str, str, str]:
    stages = [record for record in sources.manifest.stages.values() if record.selected or record.status != "pending"]
    if not stages:
        return "stages", "Stages", ""
    begin = min((_time(r.started) for r in stages if r.started), default=None)
    bars = []
    for record in stages:
        start, end = _time(record.started), _time(record.ended)
        if begin is None or start is None:
            continue
        end = end if end is not None else start
        label = "cached" if record.status == "cached" else f"{_number(record.seconds)} s"
        bars.append({"name": record.name, "start": start - begin, "end": end - begin, "status": record.status,
                     "label": label})
    figure = f"<figure>{figures.timeline(bars)}</figure>" if bars else ""
    header = ["stage", "kind", "status", "seconds", "peak host memory", "peak GPU memory", "worker", "facts"]
    rows = []
    for record in stages:
        facts = {k: v for k, v in (record.facts or {}).items() if isinstance(v, (int, float, str)) and k != "tuning"}
        rows.append([_text(record.name), _text(record.kind), _text(record.status, f"status-{record.status}"),
                     _cell(record.seconds), _cell(_bytes(record.peak_rss_bytes)),
                     _cell(_bytes(record.peak_device_bytes)), _text(record.worker or "in process"),
                     _text(", ".join(f"{k}={_plain(v)}" for k, v in facts.items()))])
    note = '<p class="note">A cached stage took its output from the stage cache; its time is not counted.</p>'
    return "stages", "Stages", f'<div class="figures">{figure}</div>{_table(header, rows)}{note}'


def _evaluation(sources: RunSources, evaluation: Evaluation) -> tuple[str, str, str]:
    metrics = evaluation.metrics
    models = list(metrics.get("models", {}))
    everyone = sources.models
    index = {name: everyone.index(name) for name in models}
    task = (metrics.get("task") or {}).get("kind", "binary")
    parts = [_switches(models, index), _metric_table(metrics, models),
             f'<p class="note">From {_e(evaluation.stage)}/metrics.json; ranked by {_e(metrics.get("rank_by"))} '
             f'on the {_e(metrics.get("split"))} split; best: <b>{_e(metrics.get("best"))}</b>.</p>']
    curves = (evaluation.curves or {}).get("models", {})
    key = evaluation.stage
    if task == "binary" and curves:
        ordered = [name for name in everyone if name in curves]
        shown = []
        for name, x, y, xlabel, ylabel, title, diagonal, area in _BINARY_CURVES:
            legend = ({m: f"{m} ({area} {_number(metrics['models'][m].get(area))})" for m in ordered}
                      if area else None)
            shown.append(figures.curve_lines(f"{key}-{name}", _indexed(ordered, everyone), curves, key=name, x=x,
                                             y=y, xlabel=xlabel, ylabel=ylabel, title=title, legend=legend,
                                             diagonal=diagonal))
        shown.append(figures.calibration(f"{key}-calibration", _indexed(ordered, everyone), curves))
        best = metrics.get("best")
        if best in curves and "thresholds" in curves[best]:
            shown.append(figures.threshold_sweep(f"{key}-sweep", best, everyone.index(best),
                                                 curves[best]["thresholds"], float(metrics.get("threshold", 0.5))))
        parts.append(_figures(shown))
        parts.append(f'<p class="note">Curves from {_e(key)}/curves.json on the {_e(metrics.get("split"))} split.</p>')
    if task == "regression" and curves:
        ordered = _indexed([name for name in everyone if name in curves], everyone)
        parts.append(_figures([figures.predicted_vs_actual(f"{key}-scatter", ordered, curves),
                               figures.residuals(f"{key}-residuals", ordered, curves)]))
    parts.append(_confusions(metrics, models))
    parts.append(_per_class(metrics, models))
    parts.append(_cross_validation(metrics))
    return f"models-{key}", f"Models ({key})", "".join(parts)


def _training(sources: RunSources) -> tuple[str, str, str]:
    parts = []
    for stage, history in sources.histories.items():
        parts.append(f"<h3>{_e(stage)}: learning curve</h3>"
                     f"{_figures([figures.learning_curve(history, f'{stage} by epoch')])}"
                     f'<p class="note">From {_e(stage)}/history.csv.</p>')
    for name, record in sources.manifest.stages.items():
        tuning = (record.facts or {}).get("tuning")
        if not isinstance(tuning, dict) or not tuning.get("trials"):
            continue
        trials = tuning["trials"]
        values = [t.get("value") for t in trials]
        metric = str(tuning.get("metric", "value"))
        figure = figures.trials(values, metric, f"{name}: tuning trials ({tuning.get('direction', '')})")
        best = [("best trial", tuning.get("best_trial")), ("best value", _number(tuning.get("best_value"))),
                ("best params", json.dumps(tuning.get("best_params"), default=str)),
                ("scored on", tuning.get("scored_on")), ("trials", len(trials)),
                ("seconds", _number(tuning.get("seconds")))]
        parts.append(f"<h3>{_e(name)}: tuning</h3>{_figures([figure])}{_key_values(best)}")
    return "training", "Training", "".join(parts)


# --------------------------------------------------------------------------- pieces
def _metric_table(metrics: Mapping[str, Any], models: Sequence[str]) -> str:
    """A row per model and split (train, valid, test), the metrics across: a model far better
    on train than on test shows at a glance."""
    by_split = metrics.get("splits") or {metrics.get("split", "test"): metrics.get("models", {})}
    splits = [s for s in SPLITS if s in by_split]
    names = list(dict.fromkeys(k for m in models for k in (metrics["models"].get(m) or {})))
    best, ranked = metrics.get("best"), metrics.get("split")
    rows = []
    for model in models:
        for split in splits:
            values = by_split.get(split, {}).get(model)
            if values is None:
                continue
            css = "text best" if model == best and split == ranked else "text"
            rows.append([_text(model, css), _text(split, css), *(_cell(values.get(name)) for name in names)])
    return _table(["model", "split", *names], rows)


def _confusions(metrics: Mapping[str, Any], models: Sequence[str]) -> str:
    confusion = metrics.get("confusion") or {}
    parts = []
    for model in models:
        entry = confusion.get(model)
        if not entry:
            continue
        labels = [_plain(label) for label in entry["labels"]]
        header = ["true \\ predicted", *labels]
        rows = [[_text(label), *(_cell(v) for v in row)] for label, row in zip(labels, entry["matrix"])]
        parts.append(f"<div><h3>Confusion: {_e(model)}</h3>{_table(header, rows)}</div>")
    if not parts:
        return ""
    binary = (metrics.get("task") or {}).get("kind", "binary") == "binary"
    where = f" at threshold {_number(metrics.get('threshold'))}" if binary else ""
    return (f'<div class="figures">{"".join(parts)}</div><p class="note">Rows are the true class, columns the '
            f"predicted one{_e(where)}, on the {_e(metrics.get('split'))} split.</p>")


def _per_class(metrics: Mapping[str, Any], models: Sequence[str]) -> str:
    per_class = metrics.get("per_class") or {}
    parts = []
    for model in models:
        table = per_class.get(model)
        if not table:
            continue
        header = ["class", "precision", "recall", "f1", "support"]
        rows = [[_text(_plain(label)), *(_cell(table[key][i]) for key in header[1:])]
                for i, label in enumerate(table["labels"])]
        parts.append(f"<div><h3>Per class: {_e(model)}</h3>{_table(header, rows)}</div>")
    return f'<div class="figures">{"".join(parts)}</div>' if parts else ""


def _cross_validation(metrics: Mapping[str, Any]) -> str:
    cv = metrics.get("cv") or {}
    if not cv:
        return ""
    names = list(dict.fromkeys(k for entry in cv.values() for k in entry.get("mean", {})))
    header = ["model", "folds", *names]
    rows = [[_text(model), _cell(len(entry.get("folds", []))),
             *(_text(f"{_number(entry['mean'].get(n))} ± {_number(entry.get('std', {}).get(n))}") for n in names)]
            for model, entry in cv.items()]
    return f"<h3>Cross-validation (mean ± std over folds)</h3>{_table(header, rows)}"


def _switches(models: Sequence[str], index: Mapping[str, int]) -> str:
    boxes = "".join(
        f'<label><input type="checkbox" checked data-model="{index[m]}">'
        f'<span class="swatch" style="background:{figures.colour(index[m])}"></span>{_e(m)}</label>' for m in models)
    return f'<p class="switches">Show: {boxes}</p>'


def _indexed(names: Sequence[str], everyone: Sequence[str]) -> list[str]:
    """``names`` padded so that position i holds model i of the report (its colour and id)."""
    return [name if name in names else "" for name in everyone]


def _figures(svgs: Iterable[str]) -> str:
    return '<div class="figures">' + "".join(f"<figure>{svg}</figure>" for svg in svgs) + "</div>"


def _key_values(rows: Iterable[tuple[str, Any]]) -> str:
    body = "".join(f'<tr><th class="text">{_e(k)}</th><td class="text">{_e(_plain(v))}</td></tr>'
                   for k, v in rows if v is not None)
    return f"<table>{body}</table>"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A table whose headings align as their column's first cells do (text left, numbers right)."""
    text = [i == 0 or bool(rows) and i < len(rows[0]) and rows[0][i].startswith('<td class="text')
            for i in range(len(header))]
    head = "".join(f'<th class="text">{_e(h)}</th>' if text[i] else f"<th>{_e(h)}</th>" for i, h in enumerate(header))
    body = "".join("<tr>" + "".join(row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _cell(value: Any) -> str:
    return f"<td>{_e(_number(value))}</td>"


def _text(value: Any, css: str = "text") -> str:
    return f'<td class="{css}">{_e(value)}</td>'


def _number(value: Any) -> str:
    """A recorded number as shown: integers whole, floats to 4 decimals, NaN as NaN, None as -."""
    if value is None:
        return "-"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if math.isnan(value):
        return "NaN"
    return f"{value:.4f}"


def _bytes(value: int | None) -> str | None:
    return None if value is None else f"{value / 2**20:,.0f} MiB"


def _plain(value: Any) -> str:
    return json.dumps(value) if isinstance(value, (list, dict)) else str(value)


def _time(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)
