"""``pipeline parity CONFIG``: the pipeline on the CPU and on the GPU, or on the CPU's two table
engines, compared (``pipeline.runs.parity``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import click
from rich.table import Table
from rich.text import Text

from pipeline.cli.options import config_argument, declare_outputs, handle_errors, print_wide, set_option, stdout
from pipeline.core.settings import environment


@click.command("parity")
@config_argument
@set_option
@click.option("--sample", type=click.IntRange(min=1), metavar="ROWS",
              help="Run both sides on a seeded random sample of ROWS rows of each in-memory input.")
@click.option("--runs-dir", type=click.Path(file_okay=False), help="Where run folders go (default: the config's).")
@click.option("--json", "as_json", is_flag=True, help="The comparison as JSON on stdout.")
@click.option("--against", type=click.Choice(["gpu", "pandas"]), default="gpu", show_default=True,
              help="gpu: a CPU run against a GPU run. pandas: a CPU run on the default table engine (Polars) "
                   "against one on the pandas reference engine, to 1e-9; needs no GPU.")
@handle_errors
def parity(config: str, overrides: tuple[str, ...], sample: int | None, runs_dir: str | None, as_json: bool,
           against: str) -> None:
    """Run CONFIG with device cpu and with device gpu and compare them: each model's metrics on
    every split against a tolerance band, the fitted feature workflow, and time per stage.
    With --against pandas, the two sides are the CPU's table engines instead.
    Exit 5 without a usable GPU (nothing is run), 10 when a metric is outside its band."""
    from pipeline.backends import resolve_backend
    from pipeline.cli.log_output import setup_logging
    from pipeline.config import load_config
    from pipeline.core.errors import BackendUnavailable, ParityError
    from pipeline.engine.runner import Runner
    from pipeline.hooks.progress import LogHook
    from pipeline.runs.parity import ENGINE_BANDS, GPU_BANDS, PARITY_FILE, compare_runs
    from pipeline.runs.store import atomic_write_json

    setup_logging(quiet=as_json, log_format="text")
    cfg = load_config(config, overrides=overrides)
    if against == "gpu":
        try:
            resolve_backend("gpu")
        except BackendUnavailable as exc:
            why = str(exc).split(" Run `pipeline doctor`")[0]     # not its advice to run on the CPU
            raise BackendUnavailable(f"pipeline parity compares a CPU run with a GPU run, and no GPU is usable here, "
                                     f"so neither side was run (--against pandas compares the CPU's table engines "
                                     f"and needs none). {why} Run `pipeline doctor` for details.") from None
    if sample is not None:                    # every stage that can sample its rows does (load)
        sampled = [f"stages.{name}.{key}={value}" for name, spec in cfg.stages.items()
                   for key, value in spec.sample_overrides(sample).items()]
        cfg = load_config(config, overrides=(*overrides, *sampled))
    declare_outputs(runs_dir or cfg.runs_dir)
    sides = ("cpu", "gpu") if against == "gpu" else ("pandas", "polars")
    # Runs on a sample are a check, not the pipeline's model: 'latest' stays where it was.
    results = {side: _run_side(side, lambda device: Runner(cfg, device=device, runs_dir=runs_dir, hooks=[LogHook()],
                                                           keep_outputs=False, config_path=config,
                                                           mark_latest=sample is None).run())
               for side in sides}
    first, second = sides
    found = compare_runs(results[first].run_dir, results[second].run_dir, GPU_BANDS if against == "gpu" else ENGINE_BANDS,
                         sides=sides)
    atomic_write_json(results[second].run_dir / PARITY_FILE, found)
    if as_json:
        click.echo(json.dumps(found, default=str))
    else:
        _print(found)
        stdout.print(Text(f"parity: {results[second].run_dir / PARITY_FILE}"))
    if not found["ok"]:
        outside = [f"{r['model']} {r['metric']} ({r['split']})" for r in found["metrics"]
                   if r["judged"] and not r["within"]]
        raise ParityError(f"{_SIDE_NAMES[first]} run {found[f'{first}_run']} and {_SIDE_NAMES[second]} run "
                          f"{found[f'{second}_run']} differ beyond the bands: " + ", ".join(outside))


_SIDE_NAMES = {"cpu": "CPU", "gpu": "GPU", "pandas": "pandas-engine", "polars": "Polars-engine"}


def _run_side(side: str, run: Callable[[str], Any]) -> Any:
    """One side's run: device gpu for ``gpu``, else the CPU with the side's table engine
    (``$PIPELINE_CPU_ENGINE`` for the run's length; Dask workers the run starts inherit it)."""
    if side in ("cpu", "gpu"):
        return run(side)
    with environment(cpu_engine=side):
        return run("cpu")


def _print(found: dict) -> None:
    first, second = found["sides"]
    table = Table(title=f"metrics: {second} - {first}", title_justify="left", box=None)
    for column in ("model", "split", "metric", first, second, "difference", "band", ""):
        table.add_column(column, justify="left" if column in ("model", "split", "metric", "") else "right")
    for row in found["metrics"]:
        table.add_row(row["model"], row["split"], row["metric"], _number(row[first]), _number(row[second]),
                      _number(row["difference"]), _number(row["band"]), _verdict(row))
    print_wide(table)
    if any(not row["judged"] and not row["within"] for row in found["metrics"]):
        stdout.print(Text("in-sample: outside its band on the training split, which does not decide (a GPU "
                          "algorithm fits the rows it learnt from more or less tightly by design); the held-out "
                          "splits do"))
    stages = Table(title="seconds per stage", title_justify="left", box=None)
    for column in ("stage", first, second):
        stages.add_column(column, justify="left" if column == "stage" else "right")
    for row in found["stages"]:
        stages.add_row(row["stage"], _number(row[f"{first}_seconds"]), _number(row[f"{second}_seconds"]))
    print_wide(stages)
    if found["workflow"]:
        stdout.print(Text(f"workflow: {len(found['workflow'])} fitted value(s) differ, e.g. "
                          + "; ".join(f"{w['model']} {w['key']}: {w[first]} vs {w[second]}"
                                      for w in found["workflow"][:3])))


def _verdict(row: dict) -> str:
    if row["within"]:
        return ""
    return "OUTSIDE" if row["judged"] else "in-sample"


def _number(value: object) -> str:
    return f"{value:.4f}" if isinstance(value, (int, float)) and not isinstance(value, bool) else "-"
