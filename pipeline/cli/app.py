"""The ``pipeline`` command.

Every exception that escapes a command becomes a one-paragraph message on stderr and its
documented exit code (``commands.common.failure_of``; see ``errors.ExitCode``); click's usage
errors are one paragraph with exit 2; tracebacks appear only with ``--debug``. With
``--log-format json`` every line the command writes, on stdout and stderr, is a JSON object.
Nothing here prompts, so the same commands work at a terminal and in cron, systemd or
Kubernetes jobs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click
from rich.table import Table
from rich.text import Text

from pipeline.version import __version__
from pipeline.cli.commands import register as register_commands
from pipeline.cli.options import (
    JSON_ERRORS, PipelineGroup, config_argument, declare_outputs, handle_errors, metric_cell, metrics_setting,
    print_wide, report_failure, set_option, split_names, stderr, stdout,
)
from pipeline.core.errors import BackendUnavailable, ExitCode


@click.group(cls=PipelineGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="pipeline")
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
def main(debug: bool) -> None:
    """Run YAML-defined tabular ML pipelines on a GPU (cuDF, cuML) or a CPU (pandas, scikit-learn)."""


@main.command()
@config_argument
@set_option
@click.option("--device", type=click.Choice(["auto", "cpu", "gpu"]), help="Override the config's device.")
@click.option("--only", multiple=True, metavar="STAGES", help="Run only these stages (comma-separated; repeatable).")
@click.option("--from", "from_", multiple=True, metavar="STAGES", help="Run these stages and everything downstream.")
@click.option("--until", multiple=True, metavar="STAGES", help="Run these stages and everything upstream.")
@click.option("--runs-dir", type=click.Path(file_okay=False), help="Where run folders go (default: the config's runs_dir).")
@click.option("--scheduler", metavar="ADDRESS",
              help="Run the stages on the Dask cluster at ADDRESS (tcp://host:8786) instead of in this process.")
@click.option("--force", is_flag=False, flag_value="*", multiple=True, metavar="[STAGES]",
              help="Rerun stages even if cached: all (--force after CONFIG), or the named ones and what depends on them.")
@click.option("--no-cache", is_flag=True, help="Neither read nor write the stage cache.")
@click.option("--cache-max-size", metavar="SIZE",
              help="Stage cache budget for this run (5GiB, 500MB, 0, none); overrides $PIPELINE_CACHE_MAX_SIZE "
                   "and cache.max_size.")
@click.option("--wait", type=click.FloatRange(min=0), default=600, show_default=True, metavar="SECONDS",
              help="How long to wait for another run of this pipeline to finish (then exit 7).")
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="json: one JSON object per log line, for log shippers (no live display).")
@click.option("--quiet", "-q", is_flag=True, help="Only warnings and errors, and the metrics table.")
@click.option("--ignore-budget-estimate", is_flag=True,
              help="Start even when earlier runs suggest this one will pass a budget cap (the caps still apply).")
@handle_errors
def run(config: str, overrides: tuple[str, ...], device: str | None, only: tuple[str, ...],
        from_: tuple[str, ...], until: tuple[str, ...], runs_dir: str | None, scheduler: str | None,
        force: tuple[str, ...], no_cache: bool, cache_max_size: str | None, wait: float, log_format: str,
        quiet: bool, ignore_budget_estimate: bool) -> None:
    """Run the pipeline in CONFIG and write runs/<name>/<run-id>/."""
    from pipeline.backends.clusters.connect import check_scheduler_address
    from pipeline.config import load_config
    from pipeline.usage.costs import describe as describe_usage
    from pipeline.cli.log_output import setup_logging, stop_on_sigterm
    from pipeline.hooks.progress import ConsoleHook, LogHook
    from pipeline.engine.run_options import RunOptions
    from pipeline.engine.runner import Runner

    setup_logging(quiet=quiet, log_format=log_format)
    JSON_ERRORS["on"] = log_format == "json"
    stop_on_sigterm()
    if scheduler is not None:
        check_scheduler_address(scheduler, where="--scheduler")
    # Every column a stage names is checked against the files' headers before the first stage.
    cfg = load_config(config, overrides=overrides, check_data=True, before_run=True)
    declare_outputs(runs_dir or cfg.runs_dir)
    interactive = stderr.is_terminal and not quiet and log_format == "text"
    hooks = [ConsoleHook(stderr) if interactive else LogHook(bars=log_format == "text")]
    forced: bool | list[str] = True if "*" in force else split_names(force)
    options = RunOptions(device=device, runs_dir=runs_dir, overrides=overrides, only=split_names(only),
                         from_=split_names(from_), until=split_names(until), hooks=hooks, keep_outputs=False,
                         scheduler=scheduler, cache=not no_cache, force=forced, wait=wait,
                         cache_max_size=cache_max_size, check_budget_estimate=not ignore_budget_estimate)
    runner = Runner(cfg, options, config_path=config)
    try:
        result = runner.run()
    except (Exception, KeyboardInterrupt) as exc:       # a failure, or Ctrl-C / SIGTERM / a budget stop
        from pipeline.config.loader import located
        from pipeline.core.errors import ConfigError

        ended = getattr(exc, "run_result", None)
        if ended is None:
            raise
        # A key a stage found wrong as it ran gets its line in the file, as validate's problems do.
        shown = located(exc, config, overrides) if isinstance(exc, ConfigError) else exc
        # The error paragraph, then (as for a run that succeeded) the outcome and where to look:
        # the run's id and folder, whatever ended it.
        code = report_failure(shown, debug=bool(click.get_current_context().find_root().params.get("debug")),
                              ctx=click.get_current_context())
        if log_format == "json":
            _echo_result_json(ended)
        else:
            stdout.print(Text(outcome_line(ended)))
        sys.exit(code)
    if log_format == "json":
        _echo_result_json(result)
        return
    if result.manifest.metrics:
        _print_metrics(result.manifest.metrics)
    usage = describe_usage(result.manifest.usage, result.manifest.cost)
    if usage:
        stdout.print(Text(f"usage: {usage}"))
    stdout.print(Text(outcome_line(result)))


def report_of(run_dir: Any) -> Path | None:
    """The run's report, if it was written (off with report.enabled: false or $PIPELINE_REPORT)."""
    from pipeline.report.build import REPORT

    path = Path(run_dir) / REPORT
    return path if path.is_file() else None


def outcome_line(result: Any) -> str:
    """The last line of ``pipeline run``: how the run ended, and where to look (its report, or
    its folder when no report was written)."""
    took = f" in {result.manifest.duration_s:.1f}s" if result.manifest.duration_s is not None else ""
    report = report_of(result.run_dir)
    where = f"report {report}" if report is not None else f"{result.run_dir} (no report written)"
    return f"run {result.run_id} {result.status}{took}: {where}"


def _print_metrics(metrics: dict[str, Any]) -> None:
    """The metrics table; headers are never cut (each column is at least its name's width, and
    off a terminal the table takes its full width whatever COLUMNS says)."""
    names = list(dict.fromkeys(name for values in metrics["models"].values() for name in values))  # the task's
    table = Table(title=f"{metrics['split']} split{metrics_setting(metrics)}", title_justify="left")
    table.add_column("model", min_width=len("model"))
    for name in names:
        table.add_column(name, justify="right", min_width=len(name))
    for model, values in metrics["models"].items():
        label = f"{model} *" if model == metrics["best"] else model
        table.add_row(Text(label), *(metric_cell(values.get(n)) for n in names))
    print_wide(table)
    stdout.print(Text(f"* best by {metrics['rank_by']}: {metrics['best']}"))


def _echo_result_json(result: Any) -> None:
    """--log-format json: the metrics and the run's outcome as JSON lines on stdout, where the
    table and the final line go in text mode."""
    from pipeline.cli.log_output import json_line

    metrics = result.manifest.metrics
    if metrics:
        click.echo(json_line(f"metrics: best by {metrics.get('rank_by')}: {metrics.get('best')}", event="metrics",
                             run_id=result.run_id, metrics=metrics))
    report = report_of(result.run_dir)
    click.echo(json_line(outcome_line(result), event="run_result",
                         run_id=result.run_id, status=result.status, run_dir=str(result.run_dir),
                         report=str(report) if report is not None else None,
                         usage=result.manifest.usage, cost=result.manifest.cost))


@main.command()
@config_argument
@set_option
@handle_errors
def validate(config: str, overrides: tuple[str, ...]) -> None:
    """Check CONFIG (schema, stage graph, model parameters, and every column a stage names
    against the headers of the files it loads) without running anything or reading a data row."""
    from pipeline.config import load_config

    from pipeline.core.yaml_source import format_path

    cfg = load_config(config, overrides=overrides, check_data=True)
    stdout.print(f"{config}: valid ({len(cfg.stages)} stages)")
    # What is decided only once data is read (column selectors resolve on the training split).
    for name, stage in cfg.stages.items():
        for where, note in stage.plan_notes():
            stdout.print(f"  {format_path(('stages', name, *where))}: {note} (resolved on the training split)")


@main.command()
@config_argument
@set_option
@click.option("--format", "fmt", type=click.Choice(["yaml", "json"]), default="yaml", show_default=True)
@handle_errors
def show(config: str, overrides: tuple[str, ...], fmt: str) -> None:
    """Print the resolved CONFIG: defaults filled in, overrides applied."""
    from pipeline.config import dump_config, load_config

    cfg = load_config(config, overrides=overrides)
    if fmt == "json":
        click.echo(json.dumps(cfg.model_dump(mode="json", exclude_none=True), indent=2))
    else:
        click.echo(dump_config(cfg), nl=False)


@main.command()
@click.option("--output", "-o", type=click.Path(dir_okay=False), help="Write to a file instead of stdout.")
@click.option("--plugin", "plugins", multiple=True, metavar="MODULE",
              help="Import MODULE first, so the stage kinds, models and hook sections it registers are in the schema "
                   "(repeatable; $PIPELINE_PLUGINS and installed plugins are always loaded).")
@handle_errors
def schema(output: str | None, plugins: tuple[str, ...]) -> None:
    """Print the JSON Schema of config files, for editor completion and checks."""
    from pipeline.config import json_schema
    from pipeline.core.plugins import load_plugins
    from pipeline.runs.store import atomic_write_text, json_text

    load_plugins(plugins, where="--plugin")

    text = json_text(json_schema())
    if output:
        atomic_write_text(output, text + "\n")
    else:
        click.echo(text)


@main.command()
@config_argument
@set_option
@click.option("--format", "fmt", type=click.Choice(["text", "mermaid"]), default="text", show_default=True)
@handle_errors
def dag(config: str, overrides: tuple[str, ...], fmt: str) -> None:
    """Print the stage graph of CONFIG (text, or Mermaid for Markdown)."""
    from pipeline.core import dag as dag_module
    from pipeline.config import load_config

    cfg = load_config(config, overrides=overrides)
    graph = cfg.inputs_of()
    kinds = {name: stage.kind for name, stage in cfg.stages.items()}
    render = dag_module.to_mermaid if fmt == "mermaid" else dag_module.to_text
    click.echo(render(graph, kinds))


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--require-gpu", is_flag=True, help=f"Exit {ExitCode.BACKEND} unless device: auto would pick the GPU and the GPU wheels fit the driver and each other.")
@handle_errors
def doctor(as_json: bool, require_gpu: bool) -> None:
    """Report driver, CUDA, GPUs, GPU libraries and what device: auto would choose."""
    from pipeline.cli.doctor import collect, not_ready_reason, render

    report = collect()
    if as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        render(report, stdout)
    if require_gpu and not report["gpu_ready"]:
        raise BackendUnavailable(f"--require-gpu: {not_ready_reason(report)}")


register_commands(main)        # `runs`, `predict`... (pipeline/cli/commands.py); run as `python -m pipeline`
