"""``pipeline runs``: list, show, diff, promote and prune the run folders under a runs directory.

Only rendering lives here (rich tables, JSON); finding runs, resolving RUN, diffing and
choosing what prune deletes are in ``pipeline.runs.history``.
"""

from __future__ import annotations

import json
import math
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import click
from rich.table import Table
from rich.text import Text

from pipeline.runs import history
from pipeline.cli.cache_command import prune_unreferenced
from pipeline.cli.options import handle_errors, metric_cell, metrics_setting, print_wide, stderr, stdout
from pipeline.usage.costs import format_cost
from pipeline.core.errors import DataError, PipelineError, StorageError, UsageError
from pipeline.runs.record import RunManifest, StageRecord

STATUS_STYLE = {"succeeded": "green", "failed": "red", "interrupted": "yellow", "running": "cyan",
                "abandoned": "yellow", history.UNREADABLE: "magenta"}

runs_dir_option = click.option("--runs-dir", default="runs", show_default=True, type=click.Path(file_okay=False),
                               help="Folder holding <pipeline>/<run-id>/ (a config's runs_dir).")
pipeline_option = click.option("--pipeline", "pipeline_name", metavar="NAME",
                               help="Only this pipeline (the config's name).")
json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")


@click.group()
def runs() -> None:
    """Past runs: list, show, diff, compare, promote and prune run folders."""


@runs.command("list")
@runs_dir_option
@pipeline_option
@json_option
@click.option("--limit", type=click.IntRange(min=1), metavar="N", help="Only the N newest runs.")
@click.option("--since", type=click.DateTime(formats=["%Y-%m-%d", "%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S"]),
              metavar="DATE", help="Only runs started at or after DATE (UTC: 2026-11-01 or 2026-11-01T06:00); "
                                   "the costs of the runs listed are totalled.")
@handle_errors
def list_runs(runs_dir: str, pipeline_name: str | None, as_json: bool, limit: int | None,
              since: datetime | None) -> None:
    """One line per run, newest first; `latest` marks each pipeline's last successful run, `champion` the run that serves."""
    found = history.find_runs(runs_dir, pipeline_name)
    if since is not None:
        found = [run for run in found if history.started_since(run, since.replace(tzinfo=timezone.utc))]
    rows = [history.summary(run) for run in found[:limit]]
    if as_json:
        _echo_json(rows)                 # each row has its cost: a consumer adds them up
        return
    totals = history.cost_totals(rows)
    if not rows:
        stderr.print(Text(f"no runs under {runs_dir}" + (f" since {since:%Y-%m-%d %H:%M}" if since else "")))
        return
    table = Table(box=None, pad_edge=False)
    table.add_column("run id", no_wrap=True, min_width=27)
    table.add_column("pipeline")
    table.add_column("status")
    table.add_column("started (UTC)", no_wrap=True)
    table.add_column("duration", justify="right")
    table.add_column("device")
    table.add_column("headline")
    if totals:
        table.add_column("cost", justify="right")
    table.add_column("")
    for row in rows:
        cost = [Text(format_cost(row["cost"]) if row["cost"] else "")] if totals else []
        table.add_row(Text(row["run_id"]), Text(row["pipeline"]), _list_status(row),
                      Text(_time(row["started"])), Text(_duration(row["duration_s"])), Text(row["device"] or ""),
                      Text(_headline(row["headline"]) or _problem(row)), *cost,
                      Text(", ".join(row.get("aliases") or (["latest"] if row["latest"] else [])), style="bold"))
    print_wide(table)
    if totals:
        priced = sum(1 for row in rows if row["cost"])
        stdout.print(Text(f"total cost of {priced} priced run(s)" + (f" since {since:%Y-%m-%d %H:%M}" if since else "")
                          + ": " + ", ".join(format_cost({"total": total, "currency": currency})
                                             for currency, total in totals.items())))


def _list_status(row: dict[str, Any]) -> Text:
    """The status cell; an abandoned run also says which process on which host it was."""
    text = _status(row["status"])
    if row["abandoned"]:
        text.append(f" (pid {row['pid']} on {row['host']})")
    return text


def _problem(row: dict[str, Any]) -> str:
    """Why an unreadable run cannot be read (in the headline column, which it has none for)."""
    return str(row["error"] or "") if row["status"] == history.UNREADABLE else ""


@runs.command("show")
@click.argument("run")
@runs_dir_option
@pipeline_option
@json_option
@handle_errors
def show_run(run: str, runs_dir: str, pipeline_name: str | None, as_json: bool) -> None:
    """Status, times, device, versions, stages and metrics of RUN.

    RUN is a run id, a unique prefix of one, a path to a run folder, or `latest`.
    """
    found = history.resolve_run(run, runs_dir, pipeline_name)
    manifest = history.require_manifest(found)
    from pipeline.report.build import REPORT

    abandoned = history.run_abandoned(found)
    report = found.path / REPORT
    if as_json:
        _echo_json({**manifest.model_dump(mode="python"), "path": str(found.path), "latest": found.latest,
                    "abandoned": abandoned is not None, "abandoned_reason": abandoned,
                    "report": str(report) if report.is_file() else None})
        return
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()
    status = _status(found.status, abandoned is not None)
    if abandoned:
        status.append(f" ({abandoned})")
    if found.aliases:
        status.append(f"  ({', '.join(found.aliases)})")
    elif found.latest:
        status.append("  (latest)")
    for key, value in [
        ("run", Text(f"{found.pipeline}/{found.run_id}")),
        ("status", status),
        ("folder", Text(str(found.path))),
        ("report", Text(str(report)) if report.is_file() else
         Text(f"none written (pipeline report {found.run_id} writes one)", style="dim")),
        ("started", Text(_time(manifest.started))),
        ("ended", Text(_time(manifest.ended))),
        ("duration", Text(_duration(manifest.duration_s))),
        ("device", Text(_device(manifest))),
        ("host", Text(f"{manifest.host}, pid {manifest.pid}")),
        ("command", Text(" ".join(map(str, manifest.command)))),
        ("config", Text(manifest.config_file or "")),
        ("versions", Text(", ".join(f"{k} {v}" for k, v in manifest.versions.items()))),
    ]:
        grid.add_row(key, value)
    print_wide(grid)
    _print_stages(list(manifest.stages.values()))
    metrics = manifest.metrics or {}
    if isinstance(metrics.get("models"), dict) and metrics["models"]:
        _print_metrics(metrics)
    _print_promotions(list(manifest.stages.values()))
    if manifest.error:
        stdout.print(Text("error: ", style="bold red") + Text(manifest.error))


@runs.command("promote")
@click.argument("run")
@runs_dir_option
@pipeline_option
@handle_errors
def promote_run(run: str, runs_dir: str, pipeline_name: str | None) -> None:
    """Point the pipeline's `champion` at RUN by hand: a rollback, or a first champion.

    RUN is a run id, a unique prefix of one, a path to a run folder, or `latest`. It must have
    succeeded and exported a model, with its files matching its manifest (what `pipeline serve
    champion` and `pipeline predict --run champion` will load); prints where champion pointed
    before. A run with several models and no evaluation to choose the best is promoted too;
    predict and serve of champion then take --model.
    A run registered in MLflow (tracking.mlflow.register) also gets the registry's `champion`
    alias on its version; a registry that cannot be reached is a warning.
    """
    from pipeline.runs.layout import CHAMPION
    from pipeline.runs.store import RunStore
    from pipeline.scoring.run_models import choose_model, exported_models, read_manifest, run_metrics, verify_artifacts
    from pipeline.tracking.mlflow_hook import promote_version

    found = history.resolve_run(run, runs_dir, pipeline_name)
    history.require_manifest(found)
    manifest = read_manifest(found.path, use="promote")   # signed (with a key set) and succeeded
    models = exported_models(found.path, manifest)    # a DataError when it exported none
    try:
        best = choose_model(models, None, run_metrics(manifest), found.path)
    except UsageError:
        # No evaluation chose a best among several: every model is checked, and predict and
        # serve of champion then take --model, as for the run itself.
        best = None
    for model in [best] if best is not None else sorted(models):
        verify_artifacts(found.path, manifest.artifacts, models[model])
    shown = (f"model {best}" if best is not None else
             f"models {', '.join(sorted(models))}: no evaluation chose a best, so predict and serve take --model")
    pipeline_dir = found.path.parent
    before = history.alias_target(pipeline_dir, CHAMPION)
    name = f"{pipeline_dir.name}/{found.run_id}"
    if pipeline_dir.parent.resolve() != Path(runs_dir).resolve():
        # A folder path names its own runs folder: say which champion moves, not --runs-dir's.
        name += f" in {pipeline_dir.parent} (the run folder's own runs folder, not --runs-dir {runs_dir})"
    if before == found.run_id:
        stdout.print(Text(f"{CHAMPION} already points to {name} ({shown}); nothing moved"))
    else:
        RunStore(pipeline_dir.parent, pipeline_dir.name).mark_alias(found.path, CHAMPION)
        was = f"{pipeline_dir.name}/{before}" if before else "no run (it was not set)"
        stdout.print(Text(f"{CHAMPION} moved from {was} to {name} ({shown})"))
    # Also when the folder's pointer was already there: a registry that was down last time catches up.
    registry = promote_version(found.path, CHAMPION)
    if registry:
        stdout.print(Text(registry))


@runs.command("compare")
@click.argument("run_a")
@click.argument("run_b")
@runs_dir_option
@pipeline_option
@click.option("--output", type=click.Path(dir_okay=False), metavar="FILE",
              help="Where the page goes (default: compare-<A>-<B>.html here).")
@handle_errors
def compare_runs(run_a: str, run_b: str, runs_dir: str, pipeline_name: str | None, output: str | None) -> None:
    """An HTML page comparing RUN_A and RUN_B: what differs, metrics side by side, curves overlaid.

    The differences are those `runs diff` prints; the page opens offline like a run's report.
    `runs diff --json` gives the same comparison as data (for a script or a scheduled job).
    """
    from pipeline.report import build_comparison

    a = history.resolve_run(run_a, runs_dir, pipeline_name, argument="RUN_A")
    b = history.resolve_run(run_b, runs_dir, pipeline_name, argument="RUN_B")
    history.require_manifest(a)
    history.require_manifest(b)
    path = build_comparison(a, b, output or f"compare-{a.run_id}-{b.run_id}.html")
    stdout.print(Text(str(path)))


@runs.command("diff")
@click.argument("run_a")
@click.argument("run_b")
@runs_dir_option
@pipeline_option
@json_option
@handle_errors
def diff_runs(run_a: str, run_b: str, runs_dir: str, pipeline_name: str | None, as_json: bool) -> None:
    """What differs between RUN_A and RUN_B: status and device, resolved config, metrics (B-A).

    Exit 0 whether or not they differ.
    """
    a = history.resolve_run(run_a, runs_dir, pipeline_name, argument="RUN_A")
    b = history.resolve_run(run_b, runs_dir, pipeline_name, argument="RUN_B")
    diff = history.diff_runs(a, b)
    if as_json:
        _echo_json(diff)
        return
    for side, row in (("A", diff["a"]), ("B", diff["b"])):
        stdout.print(Text(f"{side}: {row['pipeline']}/{row['run_id']}  {row['status']}  {row['device'] or ''}  "
                          f"{_headline(row['headline'])}"))
    if diff["run"]:
        table = Table(title="run", title_justify="left")
        for name in ("field", "A", "B"):
            table.add_column(name)
        for row in diff["run"]:
            table.add_row(Text(row["key"]), Text(_value(row["a"])), Text(_value(row["b"])))
        print_wide(table)
    if diff["config"]:
        table = Table(title="config", title_justify="left")
        for name in ("key", "change", "A", "B"):
            table.add_column(name)
        for row in diff["config"]:
            table.add_row(Text(row["key"]), Text(row["change"]),
                          Text("(absent)" if row["change"] == "added" else _value(row["a"])),
                          Text("(absent)" if row["change"] == "removed" else _value(row["b"])))
        print_wide(table)
    else:
        stdout.print("config: identical")
    settings = {s["key"]: s for s in diff["metrics"]["settings"]}
    has_a, has_b = (any(row[side] is not None for row in diff["metrics"]["models"]) for side in ("a", "b"))
    if has_a and has_b:
        title = "metrics: " + ", ".join(f"{key} {_value(s['a'])}" if s["a"] == s["b"] else
                                       f"{key} {_value(s['a'])} -> {_value(s['b'])}" for key, s in settings.items())
        table = Table(title=title, title_justify="left")
        table.add_column("model")
        table.add_column("metric")
        for name in ("A", "B", "B-A"):
            table.add_column(name, justify="right")
        for row in diff["metrics"]["models"]:
            delta = row["delta"]
            table.add_row(Text(row["model"]), Text(row["metric"]), Text(metric_cell(row["a"])),
                          Text(metric_cell(row["b"])), Text("—" if delta is None else f"{delta:+.4f}"))
        print_wide(table)
    else:
        missing = " and ".join(side for side, has in (("A", has_a), ("B", has_b)) if not has)
        stdout.print(Text(f"metrics: {missing} {'has' if missing in 'AB' else 'have'} none"))


@runs.command("prune")
@click.option("--keep", type=click.IntRange(min=0), required=True, metavar="N",
              help="Finished runs to keep per pipeline, newest first.")
@runs_dir_option
@pipeline_option
@click.option("--dry-run", is_flag=True, help="Print what would be deleted; delete nothing.")
@handle_errors
def prune_runs(keep: int, runs_dir: str, pipeline_name: str | None, dry_run: bool) -> None:
    """Delete all but the newest N finished runs of each pipeline.

    Never deletes the runs `latest` and `champion` point to, a run that is still running (a
    "running" run whose process is gone from this host is abandoned and may go), or a run whose
    manifest cannot be read; a pipeline whose alias is not a link (which run it means cannot be
    told) is left whole, and the command fails (exit 3). Then drops the stage-cache entries that
    no kept run uses (not while a run of the pipeline is going: it may still add references).
    Every failure is reported; the summary counts what was deleted.
    """
    failures: list[PipelineError] = []
    verb = "would delete" if dry_run else "deleted"
    folders = history.pipeline_dirs(runs_dir, pipeline_name)
    if not folders:
        stderr.print(Text(f"no runs under {runs_dir}"))
        return
    for folder in folders:
        try:
            history.check_aliases(folder)
        except DataError as exc:
            failures.append(DataError(f"{folder.name}: no run deleted: {exc}"))
            stdout.print(Text(f"{folder.name}: every run kept: an alias is not a link"))
            continue
        for leftover in history.leftovers(folder):
            if not dry_run:
                try:
                    history.remove_leftover(leftover)
                except StorageError as exc:
                    failures.append(exc)
                    continue
            stdout.print(Text(f"{verb} {leftover} (left by an interrupted prune)"))
        plan = history.plan_prune(history.runs_in(folder), keep)
        for run, reason in plan.keep:
            if not reason.startswith("one of the"):
                stdout.print(Text(f"kept {folder.name}/{run.run_id}: {reason}"))
        deleted, kept = 0, [run for run, _ in plan.keep]
        for run in reversed(plan.delete):                 # oldest first
            if not dry_run:
                try:
                    history.delete_run(run)
                except (StorageError, DataError) as exc:
                    failures.append(exc)
                    kept.append(run)                      # still there: its cache entries stay too
                    continue
            deleted += 1
            stdout.print(Text(f"{verb} {folder.name}/{run.run_id} ({run.status}, started {_time(run.started)})"))
        left = len(plan.delete) - deleted
        stdout.print(Text(f"{folder.name}: {len(plan.keep)} kept, {deleted} {verb}"
                          + (f", {left} could not be deleted" if left else "") + (" (dry run)" if dry_run else "")))
        failures += [StorageError(text) for text in prune_unreferenced(folder, kept, dry_run)]
    if failures:
        kind = StorageError if any(isinstance(exc, StorageError) for exc in failures) else DataError
        raise kind(f"runs prune: {len(failures)} problem{'s' if len(failures) > 1 else ''}: "
                   + "; ".join(str(exc) for exc in failures))


# ---------------------------------------------------------------------------- rendering helpers
def _echo_json(value: Any) -> None:
    click.echo(json.dumps(history.json_safe(value), indent=2, default=str))


def _status(status: str, abandoned: bool = False) -> Text:
    shown = "abandoned" if abandoned else status
    return Text(shown, style=STATUS_STYLE.get(shown, ""))


def _time(value: str | None) -> str:
    """``2026-11-21 22:40:12`` from an ISO UTC time (the manifest keeps the full value)."""
    if not value:
        return "—"
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).strftime("%Y-%m-%d %H:%M:%S")
    except ValueError:
        return str(value)


def _duration(seconds: float | None) -> str:
    """The progress lines' elapsed-time form (``pipeline.hooks.protocol.elapsed``); ``—`` when unknown."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds):
        return "—"
    from pipeline.hooks.protocol import elapsed

    return elapsed(seconds)


def _headline(value: dict[str, Any] | None) -> str:
    if not value:
        return ""
    return f"{value['metric']} {metric_cell(value['value'])} ({value['model']})"


def _value(value: Any) -> str:
    """Config values as YAML would spell them in a --set: strings bare, the rest as JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, default=str)


def _device(manifest: RunManifest) -> str:
    device = manifest.device
    if device is None:
        return "—"
    return f"{device.name} (requested {device.requested}): {device.reason}"


def _print_stages(records: list[StageRecord]) -> None:
    if not records:
        return
    has_worker = any(r.worker for r in records)
    has_device = any(r.peak_device_bytes for r in records)
    table = Table(title="stages", title_justify="left")
    for name in ("stage", "kind", "status"):
        table.add_column(name)
    table.add_column("seconds", justify="right")
    table.add_column("peak RSS MiB", justify="right")
    if has_device:
        table.add_column("peak GPU MiB", justify="right")
    if has_worker:
        table.add_column("worker")
    for record in records:
        seconds = record.seconds
        cells = [Text(record.name), Text(record.kind), _status(record.status),
                 Text("—" if seconds is None else f"{seconds:.2f}"), Text(_mib(record.peak_rss_bytes))]
        if has_device:
            cells.append(Text(_mib(record.peak_device_bytes)))
        if has_worker:
            cells.append(Text(record.worker or ""))
        table.add_row(*cells)
    print_wide(table)
    for record in records:
        if record.error:
            stdout.print(Text(f"stage {record.name}: ", style="bold red") + Text(record.error))


def _print_promotions(records: list[StageRecord]) -> None:
    """A promotion gate's decision, from the ``promotion`` fact its stage recorded."""
    for record in records:
        decided = record.facts.get("promotion") if isinstance(record.facts, dict) else None
        if isinstance(decided, dict) and isinstance(decided.get("decision"), str):
            style = "bold green" if decided["decision"] == "promoted" else "bold yellow"
            stdout.print(Text(f"{record.name}: ", style="bold") + Text(decided["decision"], style=style)
                         + Text(f": {decided.get('reason', '')}"))


def _mib(value: int | None) -> str:
    return "—" if value is None else f"{value / 2**20:,.0f}"


def _print_metrics(metrics: dict[str, Any]) -> None:
    models = {name: values for name, values in metrics["models"].items() if isinstance(values, dict)}
    names = list(dict.fromkeys(metric for values in models.values() for metric in values))
    table = Table(title=f"metrics: {metrics.get('split')} split{metrics_setting(metrics)}",
                  title_justify="left")
    table.add_column("model")
    for name in names:
        table.add_column(name, justify="right")
    for model, values in models.items():
        label = f"{model} *" if model == metrics.get("best") else model
        table.add_row(Text(label), *(Text(metric_cell(values.get(n))) for n in names))
    print_wide(table)
    stdout.print(Text(f"* best by {metrics.get('rank_by')}: {metrics.get('best')}"))
