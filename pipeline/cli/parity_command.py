"""``pipeline parity CONFIG``: the pipeline on the CPU and on the GPU, compared (``pipeline.runs.parity``)."""

from __future__ import annotations

import json

import click
from rich.table import Table
from rich.text import Text

from pipeline.cli.options import config_argument, declare_outputs, handle_errors, print_wide, set_option, stdout


@click.command("parity")
@config_argument
@set_option
@click.option("--sample", type=click.IntRange(min=1), metavar="ROWS",
              help="Run both sides on a seeded random sample of ROWS rows of each in-memory input.")
@click.option("--runs-dir", type=click.Path(file_okay=False), help="Where run folders go (default: the config's).")
@click.option("--json", "as_json", is_flag=True, help="The comparison as JSON on stdout.")
@handle_errors
def parity(config: str, overrides: tuple[str, ...], sample: int | None, runs_dir: str | None, as_json: bool) -> None:
    """Run CONFIG with device cpu and with device gpu and compare them: each model's metrics on
    every split against a tolerance band, the fitted feature workflow, and time per stage.
    Exit 5 without a usable GPU (nothing is run), 10 when a metric is outside its band."""
    from pipeline.backends import resolve_backend
    from pipeline.config import load_config
    from pipeline.core.errors import BackendUnavailable, ParityError
    from pipeline.cli.log_output import setup_logging
    from pipeline.runs.parity import PARITY_FILE, compare_runs
    from pipeline.hooks.progress import LogHook
    from pipeline.engine.runner import Runner
    from pipeline.runs.store import atomic_write_json

    setup_logging(quiet=as_json, log_format="text")
    cfg = load_config(config, overrides=overrides)
    try:
        resolve_backend("gpu")
    except BackendUnavailable as exc:
        raise BackendUnavailable(f"pipeline parity compares a CPU run with a GPU run, and no GPU is usable here, so "
                                 f"neither side was run. {exc}") from None
    if sample is not None:                    # every stage that can sample its rows does (load)
        sampled = [f"stages.{name}.{key}={value}" for name, spec in cfg.stages.items()
                   for key, value in spec.sample_overrides(sample).items()]
        cfg = load_config(config, overrides=(*overrides, *sampled))
    declare_outputs(runs_dir or cfg.runs_dir)
    results = {device: Runner(cfg, device=device, runs_dir=runs_dir, hooks=[LogHook()], keep_outputs=False,
                              config_path=config).run() for device in ("cpu", "gpu")}
    found = compare_runs(results["cpu"].run_dir, results["gpu"].run_dir)
    atomic_write_json(results["gpu"].run_dir / PARITY_FILE, found)
    if as_json:
        click.echo(json.dumps(found, default=str))
    else:
        _print(found)
        stdout.print(Text(f"parity: {results['gpu'].run_dir / PARITY_FILE}"))
    if not found["ok"]:
        outside = [f"{r['model']} {r['metric']} ({r['split']})" for r in found["metrics"] if not r["within"]]
        raise ParityError(f"CPU run {found['cpu_run']} and GPU run {found['gpu_run']} differ beyond the bands: "
                          + ", ".join(outside))


def _print(found: dict) -> None:
    table = Table(title="metrics: GPU - CPU", title_justify="left", box=None)
    for column in ("model", "split", "metric", "cpu", "gpu", "difference", "band", ""):
        table.add_column(column, justify="left" if column in ("model", "split", "metric", "") else "right")
    for row in found["metrics"]:
        table.add_row(row["model"], row["split"], row["metric"], _number(row["cpu"]), _number(row["gpu"]),
                      _number(row["difference"]), _number(row["band"]), "" if row["within"] else "OUTSIDE")
    print_wide(table)
    stages = Table(title="seconds per stage", title_justify="left", box=None)
    for column in ("stage", "cpu", "gpu"):
        stages.add_column(column, justify="left" if column == "stage" else "right")
    for row in found["stages"]:
        stages.add_row(row["stage"], _number(row["cpu_seconds"]), _number(row["gpu_seconds"]))
    print_wide(stages)
    if found["workflow"]:
        stdout.print(Text(f"workflow: {len(found['workflow'])} fitted value(s) differ, e.g. "
                          + "; ".join(f"{w['model']} {w['key']}: {w['cpu']} vs {w['gpu']}" for w in found["workflow"][:3])))


def _number(value: object) -> str:
    return f"{value:.4f}" if isinstance(value, (int, float)) and not isinstance(value, bool) else "-"
