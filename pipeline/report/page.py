"""The report page: one HTML file with its styles, its few lines of script and its figures inline.

The page makes no request: no font, script, style or image is fetched (a test opens it in a
headless browser and fails on any request or console error). HTML is built with the pieces of
``report.html`` (every recorded text escaped in one place); a template engine would add a
dependency to fill one fixed layout.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from pipeline.usage.costs import describe as describe_usage
from pipeline.usage.costs import format_cost
from pipeline.metrics import HIGHER_IS_BETTER, per_class_metrics
from pipeline.report import figures
from pipeline.report.html import (cell, document, duration, e, figure_row, grouped_table, key_values, number, plain,
                                  switches, table, text)
from pipeline.report.labels import class_namer, feature_namer
from pipeline.report.sources import Evaluation, RunSources

_BINARY_CURVES = figures.BINARY_CURVES


# Features whose distributions the data section draws, and bars per importance figure.
TOP_DISTRIBUTIONS = 6
TOP_IMPORTANCES = 15
# (figure title, axis label) per kind of importance a model records.
_IMPORTANCE_LABELS = {
    "permutation": ("Permutation importance", ""),
    "gain": ("Gain", "average loss reduction of the splits on the feature"),
    "shap": ("SHAP contributions", "mean |contribution| to the raw score"),
}


def render(sources: RunSources, *, generated: datetime, version: str) -> str:
    """The whole page for one run, the answer first: the best model, every model's metrics by
    split and the headline figure; then the models, the data, the explanations and the
    training; how the run ran (stages, metadata, versions) last."""
    manifest = sources.manifest
    shown = [ev for ev in sources.evaluations if not ev.unshown]     # metrics.json changed or missing: not these
    headline = next((ev for ev in shown if ev.metrics.get("best") is not None), shown[0] if shown else None)
    sections = [_answer(sources, headline)]
    sections += [_evaluation(sources, evaluation, evaluation is headline) for evaluation in shown]
    sections.append(_data(sources))
    sections += [_explanations(sources, evaluation) for evaluation in sources.evaluations]
    sections += [_training(sources), _timeline(sources), _summary(sources)]
    facts = [f'<span class="status-{e(sources.status)}">{e(sources.status)}</span>', f"run {e(manifest.run_id)}"]
    if manifest.ended or manifest.started:
        facts.append(e(_when(manifest.ended or manifest.started)))
    if manifest.duration_s is not None:
        facts.append(f"took {e(duration(manifest.duration_s))}")
    if manifest.device:
        facts.append(f"on {e(manifest.device.name)}")
    heading = f'<h1>{e(manifest.pipeline)}</h1><p class="note">{" · ".join(facts)}</p>'
    if sources.missing:
        heading += (f'<p class="warning">Not shown: {e(", ".join(sorted(set(sources.missing))))} missing from the '
                    "run folder (manifest.json records it).</p>")
    if sources.changed:
        heading += (f'<p class="warning">Not shown: {e(", ".join(sorted(set(sources.changed))))} changed since the '
                    "run (sha256 differs from manifest.json) or could not be read.</p>")
    footer = (f"Built {e(generated.isoformat(timespec='seconds'))} by pipeline {e(version)} from manifest.json "
              "and the files each section names.")
    return document(f"{manifest.pipeline} · {manifest.run_id}", heading, sections, footer)


# ------------------------------------------------------------------------- sections
def _answer(sources: RunSources, evaluation: Evaluation | None) -> tuple[str, str, str]:
    """The first screen: which model is best by the evaluation's ranking metric, every model's
    metrics by split (one row per model), and the headline figure of the task (ROC for binary,
    the best model's confusion matrix for multiclass, predicted against actual for regression)."""
    manifest = sources.manifest
    parts = []
    if sources.abandoned:
        parts.append(f'<p class="warning"><b>The run was abandoned:</b> its record says running, but '
                     f"{e(sources.abandoned)}, so it will never finish; the sections below show what it recorded "
                     "before it stopped.</p>")
    elif manifest.error:
        happened = {"interrupted": "was interrupted", "running": "is still running"}.get(manifest.status,
                                                                                         manifest.status)
        parts.append(f'<p class="warning"><b>The run {e(happened)}:</b> {e(manifest.error)}</p>')
    for unshown in (ev.unshown for ev in sources.evaluations if ev.unshown):
        why = ("is missing from the run folder" if unshown in sources.missing else
               "changed since the run (sha256 differs from manifest.json) or could not be read")
        parts.append(f'<p class="warning">The evaluation {e(unshown)} {why}, so its best model and metrics are '
                     "not shown; the sections below show what the run's intact files record.</p>")
    if evaluation is None:
        if not parts and sources.status in ("succeeded", "running"):
            parts.append('<p class="note">This run recorded no evaluation (no evaluate stage ran), so there is '
                         "no best model to show; the sections below show what it did record.</p>")
        elif not parts:
            parts.append(f'<p class="note">This run ended ({e(sources.status)}) before an evaluation, so there is '
                         "no best model to show; the sections below show what it did record.</p>")
        return "result", "Result", "".join(parts)
    metrics, key = evaluation.metrics, evaluation.stage
    models, everyone = list(metrics.get("models", {})), sources.models
    best, rank_by, split = metrics.get("best"), metrics.get("rank_by"), metrics.get("split", "test")
    task = _task(sources, metrics)
    if best is not None:
        value = (metrics["models"].get(best) or {}).get(rank_by)
        better = {True: "higher is better", False: "lower is better"}.get(HIGHER_IS_BETTER.get(str(rank_by)))
        parts.append(f'<p class="lead">Best model: <b class="name" id="best-model">{e(best)}</b> · {e(rank_by)} '
                     f"<b>{e(number(value))}</b> on the {e(split)} split <span class=\"note\">(ranked by "
                     f"{e(rank_by)}{', ' + e(better) if better else ''}, of {len(models)} "
                     f"model{'s' if len(models) != 1 else ''})</span></p>")
    parts += _promotions(manifest)
    parts.append(f'<div class="scroll">{_split_table(metrics, models, rank_by)}</div>')
    positive = (f"; the positive class is {e(plain(task.get('positive')))}" if task.get("kind") == "binary"
                and task.get("positive") is not None else "")
    parts.append(f'<p class="note">One row per model, each metric on the train, valid and test splits; from '
                 f"{e(key)}/metrics.json{positive}.{_sampled_note(metrics)}</p>")
    shown = _headline_figures(sources, evaluation)
    if shown:
        per_model = any("--m" in svg for svg in shown)          # a figure the model switches act on
        parts.append((switches([m for m in models if m in everyone], everyone) if per_model else "")
                     + figure_row(shown))
    return "result", "Result", "".join(parts)


def _promotions(manifest: Any) -> list[str]:
    """A promotion gate's decision under the best model: whether this run's model became the
    champion, against which numbers (the ``promotion`` fact its stage recorded; data, escaped)."""
    parts = []
    for record in manifest.stages.values():
        decided = record.facts.get("promotion") if isinstance(record.facts, dict) else None
        if not isinstance(decided, dict) or not isinstance(decided.get("decision"), str):
            continue
        new, champion = decided.get("new") or {}, decided.get("champion") or {}
        numbers = f"{e(decided.get('metric'))} {e(number(new.get('value')))}"
        if champion:
            numbers += (f" against champion {e(champion.get('model'))} of run {e(champion.get('run_id'))}: "
                        f"{e(number(champion.get('value')))}")
        parts.append(f'<p>Promotion gate <b>{e(record.name)}</b>: <b>{e(decided["decision"])}</b> · {numbers} on '
                     f'{e(decided.get("rows"))} rows <span class="note">({e(decided.get("reason"))}; '
                     f'{e(record.name)}/promotion.json)</span></p>')
    return parts


def _headline_figures(sources: RunSources, evaluation: Evaluation) -> list[str]:
    metrics, key, everyone = evaluation.metrics, evaluation.stage, sources.models
    task = _task(sources, metrics).get("kind", "binary")
    curves = (evaluation.curves or {}).get("models", {})
    best = metrics.get("best")
    namer = class_namer(_task(sources, metrics), sources.facts())
    shown = []
    if task == "binary" and curves:
        axes = _BINARY_CURVES[0]
        legend = {m: f"{m} ({axes.area} {number((metrics['models'].get(m) or {}).get(axes.area))})"
                  for m in everyone}
        shown.append(figures.curve_lines(f"{key}-{axes.key}", everyone, curves, axes,
                                         title=f"{axes.title} ({metrics.get('split', 'test')} split)", legend=legend))
    if task == "regression" and curves:
        shown.append(figures.predicted_vs_actual(f"{key}-scatter", everyone, curves))
    confusion = (metrics.get("confusion") or {}).get(best)
    if task != "regression" and confusion:
        where = f" at threshold {plain(metrics.get('threshold'))}" if task == "binary" else ""
        shown.append(figures.confusion(confusion["labels"], confusion["matrix"], namer,
                                       title=f"{best}: confusion on {metrics.get('split', 'test')}{where}"))
    return shown


def _summary(sources: RunSources) -> tuple[str, str, str]:
    m = sources.manifest
    status = f"{sources.status} ({sources.abandoned})" if sources.abandoned else m.status
    rows = [("pipeline", m.pipeline), ("run id", m.run_id), ("status", status),
            ("device", f"{m.device.name} ({m.device.reason})" if m.device else None),
            ("started", m.started), ("ended", m.ended),
            ("duration", duration(m.duration_s) if m.duration_s is not None else None),
            ("usage", describe_usage(m.usage, None)), ("cost", format_cost(m.cost) if m.cost else None),
            ("host", m.host), ("command", " ".join(m.command) if m.command else None)]
    if m.error:
        rows.insert(3, ("error", m.error))
    if m.cluster:
        rows.append(("cluster", json.dumps(m.cluster, default=str)))
    fields = key_values(rows)
    versions = key_values(sorted(m.versions.items()))
    settings = (key_values(sorted(m.settings.items())) if m.settings
                else "<p>No <code>PIPELINE_*</code> variable was set.</p>")
    config = (f"<details><summary>The resolved config (config.yaml)</summary><pre>{e(sources.config_text)}</pre>"
              "</details>" if sources.config_text else "")
    return ("summary", "Run details",
            f"<details><summary>Run, host and command</summary>{fields}</details>"
            f"<details><summary>Versions</summary>{versions}</details>"
            f"<details><summary>Settings (the PIPELINE_* environment)</summary>{settings}</details>{config}")


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
        label = duration(record.seconds)
        if record.status == "cached":
            label = "cached" + (f" (computed in {duration(record.computed_seconds)})"
                                if record.computed_seconds is not None else "")
        bars.append({"name": record.name, "start": start - begin, "end": end - begin, "status": record.status,
                     "label": label})
    figure = f'<figure class="wide">{figures.timeline(bars)}</figure>' if bars else ""
    gpus = any((r.usage or {}).get("gpus") for r in stages)
    priced = any(r.cost for r in stages)
    # Which worker ran a stage says something only on a cluster; in one process it is noise.
    workers = bool(sources.manifest.cluster) or any(r.worker for r in stages)
    header = ["stage", "kind", "status", "time", "CPU time", "peak host memory", "peak GPU memory",
              *(["GPUs (mean utilisation, energy)"] if gpus else []), *(["cost"] if priced else []),
              *(["worker"] if workers else []), "facts"]
    rows = []
    for record in stages:
        facts = {k: duration(v) if k.endswith("seconds") and isinstance(v, (int, float)) else v
                 for k, v in (record.facts or {}).items() if isinstance(v, (int, float, str)) and k != "tuning"}
        usage = record.usage or {}
        extra = [text(_gpu_use(usage))] if gpus else []
        extra += [text(format_cost(record.cost) if record.cost else None)] if priced else []
        extra += [text(record.worker or "in process")] if workers else []
        took = duration(record.seconds)
        if record.status == "cached" and record.computed_seconds is not None:
            took += f" (computed in {duration(record.computed_seconds)})"
        rows.append([text(record.name), text(record.kind), text(record.status, f"text status-{record.status}"),
                     f"<td>{e(took)}</td>", _seconds(usage.get("cpu_seconds")),
                     cell(_bytes(record.peak_rss_bytes)), cell(_bytes(record.peak_device_bytes)), *extra,
                     text(", ".join(f"{k}={plain(v)}" for k, v in facts.items()))])
    cached = [r for r in stages if r.status == "cached"]
    note = ('<p class="note">A cached stage took its output from the stage cache; its time is not counted'
            + (", and the time its output took to compute in the run that stored it is shown beside it"
               if any(r.computed_seconds is not None for r in cached) else "") + ".</p>" if cached else "")
    return "stages", "Stages", f'<div class="figures">{figure}</div>{table(header, rows)}{note}'


def _evaluation(sources: RunSources, evaluation: Evaluation, headline: bool = False) -> tuple[str, str, str]:
    """A model section: what the answer did not already show (the split table and the ROC curve
    when this is the headline evaluation)."""
    metrics = evaluation.metrics
    models = list(metrics.get("models", {}))
    everyone = sources.models
    task = _task(sources, metrics).get("kind", "binary")
    namer = class_namer(_task(sources, metrics), sources.facts())
    parts = [switches(models, everyone)]
    if not headline:
        parts.append(f'<div class="scroll">{_split_table(metrics, models, metrics.get("rank_by"))}</div>')
    parts.append(f'<p class="note">From {e(evaluation.stage)}/metrics.json; ranked by {e(metrics.get("rank_by"))} '
                 f'on the {e(metrics.get("split"))} split; best: <b>{e(metrics.get("best"))}</b>.'
                 f'{_sampled_note(metrics)}</p>')
    curves = (evaluation.curves or {}).get("models", {})
    key = evaluation.stage
    if task == "binary" and curves:
        shown = []
        for axes in _BINARY_CURVES[1 if headline else 0:]:
            legend = ({m: f"{m} ({axes.area} {number(metrics['models'][m].get(axes.area))})" for m in models}
                      if axes.area else None)
            shown.append(figures.curve_lines(f"{key}-{axes.key}", everyone, curves, axes, legend=legend))
        shown.append(figures.calibration(f"{key}-calibration", everyone, curves))
        best = metrics.get("best")
        if best in curves and "thresholds" in curves[best]:
            shown.append(figures.threshold_sweep(f"{key}-sweep", best, everyone.index(best),
                                                 curves[best]["thresholds"], float(metrics.get("threshold", 0.5))))
        parts.append(figure_row(shown))
        parts.append(f'<p class="note">Curves from {e(key)}/curves.json on the {e(metrics.get("split"))} split'
                     f'{"; the ROC curve is in the result above" if headline else ""}.</p>')
    if task == "regression" and curves:
        parts.append(figure_row(([] if headline else [figures.predicted_vs_actual(f"{key}-scatter", everyone, curves)])
                                + [figures.residuals(f"{key}-residuals", everyone, curves)]))
    parts.append(_confusions(metrics, models, namer))
    parts.append(_per_class(metrics, models, namer))
    parts.append(_cross_validation(metrics, key, everyone))
    return f"models-{key}", f"Models ({key})", "".join(parts)


def _data(sources: RunSources) -> tuple[str, str, str]:
    """Rows and columns per stage, each read table's missing values, and per features stage
    the split sizes, the target's balance and the most important features' distributions."""
    header = ["stage", "kind", "rows", "columns"]
    rows = []
    for name, record in sources.manifest.stages.items():
        facts = record.facts or {}
        count, width = facts.get("rows"), facts.get("columns", facts.get("features"))
        if count is None and width is None:
            continue
        shown = (text(" · ".join(f"{split} {number(n)}" for split, n in count.items()))
                 if isinstance(count, dict) else cell(count))
        rows.append([text(name), text(record.kind), shown, cell(width if isinstance(width, int) else None)])
    parts = [table(header, rows)] if rows else []
    for stage, columns in sources.columns.items():
        parts.append(_missing(stage, columns))
    for stage, profile in sources.profiles.items():
        parts.append(_profile(sources, stage, profile))
    return "data", "Data", "".join(parts)


def _missing(stage: str, columns: Mapping[str, Any]) -> str:
    total = columns.get("rows") or 0
    entries = columns.get("columns") or []
    gaps = sorted((c for c in entries if c.get("missing")), key=lambda c: -c["missing"])
    rows = [[text(c["name"]), text(c["dtype"]), cell(c["missing"]),
             text(f"{100 * c['missing'] / total:.2f}%" if total else "")] for c in gaps]
    found = (table(["column", "type", "missing", "of rows"], rows) if rows
             else '<p class="note">No missing values in any column.</p>')
    every = table(["column", "type", "missing"], [[text(c["name"]), text(c["dtype"]), cell(c["missing"])]
                                                   for c in entries])
    return (f"<h3>{e(stage)}: missing values ({number(total)} rows, {len(entries)} columns)</h3>{found}"
            f"<details><summary>Every column's type</summary>{every}</details>"
            f'<p class="note">From {e(stage)}/columns.json, counted on the table as read.</p>')


def _profile(sources: RunSources, stage: str, profile: Mapping[str, Any]) -> str:
    sizes = profile.get("rows") or {}
    total = sum(sizes.values()) or 1
    sampled = profile.get("sample_rows") or {}
    parts = [f"<h3>{e(stage)}: splits</h3>",
             table(["split", "rows", "share", "rows profiled"],
                   [[text(split), cell(n), text(f"{100 * n / total:.1f}%"), cell(sampled.get(split))]
                    for split, n in sizes.items()])]
    balance = profile.get("balance") or {}
    counts = balance.get("counts") or {}
    if balance.get("kind") == "classes" and counts:
        namer = class_namer(profile.get("task"), sources.facts())
        classes = [namer(c) for c in balance.get("classes", [])]
        shares = {split: [n / (sum(values) or 1) for n in values] for split, values in counts.items()}
        parts.append(f"<h3>{e(stage)}: target balance ({e(profile.get('target'))})</h3>")
        parts.append(table(["split", *classes], [[text(split), *(cell(n) for n in values)]
                                                for split, values in counts.items()]))
        parts.append(figure_row([figures.split_bars(classes, shares, title=f"{profile.get('target')} by split")]))
    elif balance.get("kind") == "values" and counts:
        summary = balance.get("summary") or {}
        parts.append(f"<h3>{e(stage)}: target ({e(profile.get('target'))})</h3>")
        parts.append(table(["split", "mean", "std", "min", "max"],
                           [[text(split), *(cell(values.get(k)) for k in ("mean", "std", "min", "max"))]
                            for split, values in summary.items()]))
        shares = {split: [n / (sum(values) or 1) for n in values] for split, values in counts.items()}
        parts.append(figure_row([figures.split_histogram(balance["edges"], shares,
                                                         title=f"{profile.get('target')} by split")]))
    histograms = profile.get("histograms") or {}
    ranked_by, importance = _ranking(sources)
    shown_as = feature_namer(sources.source_columns())
    top = sorted(histograms, key=lambda name: -(importance.get(name) or 0.0))[:TOP_DISTRIBUTIONS]
    shown = []
    for name in top:
        entry = histograms[name]
        if "values" in entry:
            shown.append(figures.split_bars([plain(v) for v in entry["values"]], entry["shares"],
                                            title=shown_as(name)))
        else:
            shown.append(figures.split_histogram(entry["edges"], entry["shares"], title=shown_as(name)))
    if shown:
        parts.append(f"<h3>{e(stage)}: the most important features</h3>{figure_row(shown)}")
        parts.append(f'<p class="note">Values as the models see them (after the feature ops), on the training '
                     f"split's bins; from {e(stage)}/profile.json. Ranked by {e(ranked_by)}.</p>")
    return "".join(parts)


def _ranking(sources: RunSources) -> tuple[str, Mapping[str, float]]:
    """What the data section ranks features by, and the importances: the best model's of the
    first evaluation that has any, SHAP where it has them, else permutation, else any kind;
    without importances, the features' own order (a stable sort by nothing)."""
    for evaluation in sources.evaluations:
        found = (evaluation.importance or {}).get("models", {})
        best = evaluation.metrics.get("best")
        model = best if best in found else next(iter(found), None)
        if model is None:
            continue
        for kind in ("shap", "permutation", *found[model]):
            values = found[model].get(kind)
            if isinstance(values, dict):
                return f"{model}'s {kind} importance", values.get("mean", values)
    return "the features' order (no importances were recorded)", {}


def _defined(values: Any) -> dict[str, float]:
    """A feature -> number mapping without its nulls (and without anything not a number)."""
    if not isinstance(values, dict):
        return {}
    return {f: float(v) for f, v in values.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def _no_importances(sources: RunSources, key: str) -> str:
    """Why a section has no importances: its file changed since the run (named at the top of the
    page, and not drawn), or none were recorded. The second alone advised a config change to a
    run that had written them."""
    name = f"{key}/importance.json"
    if name in sources.changed or name in sources.missing:
        return (f'<p class="note">{e(name)} changed since the run or could not be read, so its importances are '
                "not drawn (see the top of the page).</p>")
    return '<p class="note">No importances were recorded (evaluate with importance: true writes them).</p>'


def _explanations(sources: RunSources, evaluation: Evaluation) -> tuple[str, str, str]:
    key, importance = evaluation.stage, evaluation.importance or {}
    found = importance.get("models") or {}
    everyone = sources.models
    models = [m for m in everyone if m in found]
    parts = [switches(models, everyone)] if models else []
    kinds = list(dict.fromkeys(kind for entry in found.values() for kind in entry))
    shown_as = feature_namer(sources.source_columns())
    shown = []
    for kind in kinds:
        # A null is an importance the metric could not give (one class in the rows scored:
        # ROC AUC undefined); it is left out of the bars, and a model with nothing else is too.
        means = {m: _defined(found[m][kind].get("mean", found[m][kind])) for m in models
                 if isinstance(found[m].get(kind), dict)}
        having = [m for m in models if means.get(m)]
        means = {m: means[m] for m in having}
        errors = {m: _defined(found[m][kind]["std"]) for m in having if isinstance(found[m][kind].get("std"), dict)}
        if not having:
            continue
        strongest: dict[str, float] = {}
        for values in means.values():
            for feature, value in values.items():
                strongest[feature] = max(strongest.get(feature, float("-inf")), value or 0.0)
        top = sorted(strongest, key=lambda f: -strongest[f])[:TOP_IMPORTANCES]
        label, axis = _IMPORTANCE_LABELS.get(kind, (kind, kind))
        if kind == "permutation":
            axis = f"{importance.get('metric')} lost when the feature is shuffled"
        title = f"{label}: {having[0]}" if len(having) == 1 else label
        drawn = top[:max(TOP_IMPORTANCES * 2 // (len(having) + 1), 8)]
        shown.append(figures.importances(f"{key}-{kind}", having, everyone, means,
                                         {feature: shown_as(feature) for feature in drawn}, title=title,
                                         xlabel=axis, errors=errors or None))
    if shown:
        parts.append(figure_row(shown))
    rows = importance.get("rows") or {}
    parts.append(f'<p class="note">Measured on {e(", ".join(f"{m}: {number(n)}" for m, n in rows.items()))} rows '
                 f"of the {e(importance.get('split'))} split ({e(importance.get('repeats'))} shuffles per feature "
                 f"for permutation importance; bars show their mean, whiskers their spread){_sample_note(importance)}"
                 f"; from {e(key)}/importance.json.</p>" if found else _no_importances(sources, key))
    for model, reason in (importance.get("skipped") or {}).items():
        parts.append(f'<p class="note">{e(model)}: no permutation importance: {e(reason)}.</p>')
    for model, chosen in (importance.get("permuted") or {}).items():     # too wide, or too slow, to permute all
        if "ranked_by" in chosen:
            why = f" ({chosen['reason']})" if chosen.get("reason") else ""
            parts.append(f'<p class="note">{e(model)}: permutation importance of {e(chosen.get("features"))} of '
                         f'{e(chosen.get("of"))} features, those ranked first by {e(chosen.get("ranked_by"))}; '
                         f'the others were not permuted{e(why)}.</p>')
        if "time" in chosen:
            parts.append(f'<p class="note">{e(model)}: permutation importance held to {e(chosen["time"])} '
                         "(a share of the model's fit).</p>")
    return f"explanations-{key}", f"Explanations ({key})", "".join(parts)


def _sample_note(importance: Mapping[str, Any]) -> str:
    """What bounded the samples (runs recorded before the budgets say nothing): SHAP's rows, and
    the rows permutation importance scored against its budget."""
    native = importance.get("native_rows") or {}
    scored = importance.get("scored_rows") or {}
    budgets = importance.get("budgets") or {}
    if not (native or scored):
        return ""
    text = ""
    if native:
        text += f"; own importances (SHAP) on {', '.join(f'{m}: {number(n)}' for m, n in native.items())} rows"
    if scored:
        text += (f"; rows x classes scored for permutation importance: "
                 f"{', '.join(f'{m}: {number(n)}' for m, n in scored.items())}")
        if budgets.get("scored_rows"):
            text += f" (budget {number(budgets['scored_rows'])} per model, evaluate's importance_budget"
            shares = importance.get("model_budgets") or {}
            if shares:
                text += "; divided by the estimators a model runs: " + ", ".join(
                    f"{m}: {number(b.get('scored_rows'))} ({number(b.get('estimators'))} estimators)"
                    for m, b in shares.items() if isinstance(b, Mapping))
            text += ")"
    return e(text)


def _training(sources: RunSources) -> tuple[str, str, str]:
    parts = []
    for stage, history in sources.histories.items():
        facts = sources.manifest.stages[stage].facts or {}
        parts.append(f"<h3>{e(stage)}: learning curve</h3>"
                     f"{figure_row([figures.learning_curve(history, f'{stage} by epoch', int(facts.get('best_epoch') or 0))])}"
                     f'<p class="note">From {e(stage)}/history.csv.{_data_parallel(facts.get("distributed"))}</p>')
    for stage, rounds in sources.rounds.items():
        parts.append(f"<h3>{e(stage)}: evaluation rounds</h3>"
                     f"{figure_row([figures.boosting_rounds(rounds, f'{stage} by boosting round')])}"
                     f'<p class="note">From {e(stage)}/eval_history.csv ({len(rounds)} rounds).</p>')
    for name, record in sources.manifest.stages.items():
        tuning = (record.facts or {}).get("tuning")
        if not isinstance(tuning, dict) or not tuning.get("trials"):
            continue
        trials = tuning["trials"]
        numbers = [t.get("number", i) for i, t in enumerate(trials)]
        metric = str(tuning.get("metric", "value"))
        figure = figures.trials(numbers, [t.get("value") for t in trials], metric,
                                f"{name}: tuning trials ({tuning.get('direction', '')})")
        best = [("best trial", tuning.get("best_trial")), ("best value", number(tuning.get("best_value"))),
                ("best params", json.dumps(tuning.get("best_params"), default=str)),
                ("scored on", tuning.get("scored_on")), ("trials", len(trials)),
                ("time", duration(tuning.get("seconds")))]
        baseline = tuning.get("baseline")
        if isinstance(baseline, dict):        # trial 0 (the stage's own params) and what was trained
            best += [("trial 0 (own params)", number(baseline.get("value"))),
                     ("gain over trial 0", number(tuning.get("gain"))),
                     ("spread (standard error)", number(tuning.get("spread"))),
                     ("trained", "the stage's own params (gain within the spread)" if tuning.get("kept_defaults")
                      else f"trial {tuning.get('chosen_trial')}")]
        parts.append(f"<h3>{e(name)}: tuning</h3>{figure_row([figure])}{key_values(best)}")
    for name, record in sources.manifest.stages.items():
        board = (record.facts or {}).get("leaderboard")
        if isinstance(board, dict) and isinstance(board.get("members"), list):
            parts.append(_leaderboard(name, board))
    return "training", "Training", "".join(parts)


def _leaderboard(stage: str, board: Mapping[str, Any]) -> str:
    """A stage's members best first (status, folds fitted, holdout, out-of-fold and valid score,
    weight in the blend, time), then the plan's decisions with their projected and actual time."""
    metric = str(board.get("metric", "score"))
    rows = [[text(m.get("model")), text(m.get("status")), cell(m.get("folds")), cell(m.get("holdout")),
             cell(m.get("oof")), cell(m.get("valid")), cell(m.get("weight")), text(duration(m.get("seconds"))),
             text(m.get("reason", ""))]
            for m in board["members"] if isinstance(m, Mapping)]
    note = (f"Scored {e(board.get('scored_on', ''))}; {e(duration(board.get('seconds')))} of a "
            f"{e(duration(board.get('time_limit')))} limit. A member stopped, skipped or of weight 0 is not in "
            "the model.")
    out = (f"<h3>{e(stage)}: leaderboard</h3>"
           + table(["model", "status", "folds", f"{metric} holdout", f"{metric} out of fold", f"{metric} valid",
                    "weight", "time", "note"], rows)
           + f'<p class="note">{note}</p>')
    plan = [[text(p.get("step")), text(p.get("model")), text(p.get("decision")),
             text(duration(p.get("projected_seconds"))), text(duration(p.get("seconds")))]
            for p in board.get("plan") or [] if isinstance(p, Mapping)]
    if plan:
        out += f"<h3>{e(stage)}: the plan</h3>" + table(["step", "model", "decision", "projected", "took"], plan)
    return out


# --------------------------------------------------------------------------- pieces
def _split_table(metrics: Mapping[str, Any], models: Sequence[str], rank_by: Any) -> str:
    """One row per model; per metric (the ranking one first) its value on each split, train,
    valid, test, side by side: a model far better on train than on test shows at a glance,
    and the ranked split's column is shaded."""
    # evaluate records the splits in train, valid, test order
    by_split = metrics.get("splits") or {metrics.get("split", "test"): metrics.get("models", {})}
    names = list(dict.fromkeys(k for m in models for k in (metrics["models"].get(m) or {})))
    names.sort(key=lambda name: name != rank_by)
    best, ranked = metrics.get("best"), metrics.get("split")
    splits = list(by_split)
    rows = []
    for model in models:
        css = "best" if model == best else ""
        row = [text(model, f"text {css}".strip())]
        for name in names:
            for split in splits:
                value = (by_split[split].get(model) or {}).get(name) if by_split[split].get(model) else None
                classes = " ".join(c for c in (css, f"split-{split}" if split == ranked else "split-other") if c)
                row.append(f'<td class="{classes}">{e(number(value))}</td>' if classes else cell(value))
        rows.append(row)
    return grouped_table("model", [(name, splits) for name in names], rows, css="metrics")


def _sampled_note(metrics: Mapping[str, Any]) -> str:
    """A sentence per sampled split (evaluate's ``sampled``: the training split past
    ``train_rows``), so nobody reads a sample's metrics as the whole split's."""
    notes = []
    for split, per_model in (metrics.get("sampled") or {}).items():
        sizes = {(v.get("rows"), v.get("of")) for v in per_model.values() if isinstance(v, Mapping)}
        for rows, of in sorted(sizes, key=str):
            notes.append(f" The {e(split)} metrics are of {e(number(rows))} of its {e(number(of))} rows (every "
                         f"k-th row; evaluate's train_rows).")
    return "".join(notes)


def _task(sources: RunSources, metrics: Mapping[str, Any]) -> dict[str, Any]:
    """The evaluated task: metrics.json's (which records it for multiclass and regression); a
    binary evaluation's positive value is the split's, as profile.json and the split stage's
    facts record it."""
    task = metrics.get("task")
    if isinstance(task, dict):
        return task
    recorded = [p.get("task") for p in sources.profiles.values()] + [f.get("task") for f in sources.facts()]
    return next((t for t in recorded if isinstance(t, dict) and t.get("kind") == "binary"), {"kind": "binary"})


def _seconds(value: Any) -> str:
    return f"<td>{e(duration(value))}</td>"


def _confusions(metrics: Mapping[str, Any], models: Sequence[str], namer: Callable[[Any], str] = plain) -> str:
    def matrix(entry: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
        labels = [namer(label) for label in entry["labels"]]
        return (["true \\ predicted", *labels],
                [[text(label), *(cell(v) for v in row)] for label, row in zip(labels, entry["matrix"])])

    tables = _per_model(metrics.get("confusion"), models, "Confusion", matrix)
    if not tables:
        return ""
    binary = (metrics.get("task") or {}).get("kind", "binary") == "binary"
    where = f" at threshold {number(metrics.get('threshold'))}" if binary else ""
    return (f"{tables}<p class=\"note\">Rows are the true class, columns the predicted one{e(where)}, on the "
            f"{e(metrics.get('split'))} split.</p>")


def _per_class(metrics: Mapping[str, Any], models: Sequence[str], namer: Callable[[Any], str] = plain) -> str:
    """Precision, recall, F1 and support per class: multiclass metrics.json records them; a
    binary one's are those of its confusion matrix at the threshold, by the same arithmetic
    (``per_class_metrics``), for both classes."""
    header = ["class", "precision", "recall", "f1", "support"]

    def classes(entry: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
        return header, [[text(namer(label)), *(cell(entry[key][i]) for key in header[1:])]
                        for i, label in enumerate(entry["labels"])]

    tables = metrics.get("per_class")
    binary = (metrics.get("task") or {}).get("kind", "binary") == "binary"
    if not tables and binary:
        tables = {model: {"labels": entry["labels"], **per_class_metrics(entry["matrix"])}
                  for model, entry in (metrics.get("confusion") or {}).items()
                  if isinstance(entry, Mapping) and entry.get("labels") and entry.get("matrix")}
    found = _per_model(tables, models, "Per class", classes)
    if not found or not binary:
        return found
    return (f"{found}<p class=\"note\">Per class at threshold {e(number(metrics.get('threshold')))} on the "
            f"{e(metrics.get('split'))} split, from each model's confusion matrix above.</p>")


def _per_model(entries: Mapping[str, Any] | None, models: Sequence[str], heading: str,
               build: Callable[[Mapping[str, Any]], tuple[list[str], list[list[str]]]]) -> str:
    """A table per model that ``entries`` holds one for, side by side ("" when none does)."""
    parts = [f"<div><h3>{heading}: {e(model)}</h3>{table(*build(entries[model]))}</div>"
             for model in models if (entries or {}).get(model)]
    return f'<div class="figures">{"".join(parts)}</div>' if parts else ""


def _cross_validation(metrics: Mapping[str, Any], key: str, everyone: Sequence[str]) -> str:
    cv = metrics.get("cv") or {}
    if not cv:
        return ""
    names = list(dict.fromkeys(k for entry in cv.values() for k in entry.get("mean", {})))
    header = ["model", "folds", *names]
    rows = [[text(model), cell(_fold_count(entry.get("folds"))),
             *(text(f"{number(entry['mean'].get(n))} ± {number(entry.get('std', {}).get(n))}") for n in names)]
            for model, entry in cv.items()]
    metric = metrics.get("rank_by")
    folds = {model: [fold.get(metric) for fold in entry["per_fold"]] for model, entry in cv.items()
             if isinstance(entry.get("per_fold"), list)}
    spread = (figure_row([figures.fold_spread(f"{key}-folds", list(folds), everyone, folds, str(metric))])
              if folds else "")
    return f"<h3>Cross-validation (mean ± std over folds)</h3>{table(header, rows)}{spread}"


def _fold_count(folds: Any) -> int | None:
    """How many folds: the cross-validation's ``folds`` is their number, or a list of them."""
    if isinstance(folds, bool):
        return None
    if isinstance(folds, int):
        return folds
    return len(folds) if isinstance(folds, list) else None


def _gpu_use(usage: Mapping[str, Any]) -> str | None:
    """``GPU 0: 45%, 3.2 Wh`` per device a stage held; idle ones marked."""
    idle = set(usage.get("idle_gpus") or [])
    shown = [f"GPU {d.get('index')}: {number(d.get('utilisation_mean'))}%"
             + (f", {number(d.get('energy_wh'))} Wh" if d.get("energy_wh") is not None else "")
             + (" (idle)" if d.get("index") in idle else "") for d in usage.get("gpus") or []]
    return "; ".join(shown) or None


def _data_parallel(facts: Any) -> str:
    """A sentence on how a DDP training ran (ranks, where, steps, bytes per rank); "" in one process."""
    if not isinstance(facts, dict):
        return ""
    sent = (facts.get("communication") or {}).get("gradient_bytes_per_epoch")
    return (f" Trained data-parallel on {e(facts.get('ranks'))} ranks ({e(facts.get('launch'))}, "
            f"{e(facts.get('backend'))}): {number(facts.get('steps_per_epoch'))} steps per epoch of "
            f"{number(facts.get('batch_per_rank'))} rows per rank"
            + (f"; each rank all-reduced {sent / 2**20:,.1f} MiB of gradients per epoch." if sent else "."))


def _bytes(value: int | None) -> str | None:
    return None if value is None else f"{value / 2**20:,.0f} MiB"


def _when(text: str) -> str:
    """An ISO time to the minute (``2026-11-27 01:13 UTC``); the run details keep it whole."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return text
    offset = moment.utcoffset()
    zone = "" if offset is None else " UTC" if not offset else moment.strftime(" %z")
    return moment.strftime("%Y-%m-%d %H:%M") + zone


def _time(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


