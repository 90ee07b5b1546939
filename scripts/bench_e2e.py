#!/usr/bin/env python
"""End to end at 10M rows: ``pipeline run`` against the same work hand-written in Polars and in pandas.

Generates a Telco-schema churn table (``--rows``, default 10M; ``scripts/generate_churn.py``, kept
as ``bench-data/churn_<rows>_s<seed>.csv``, git-ignored) once, then runs ``--repeats`` rounds of
three sides, each as its own child process:

  polars    ``scripts/e2e_baselines.py --engine polars``: pl.read_csv, the features as Polars
            expressions, XGBoost, metrics, export (the reference every ratio is taken against);
  pandas    ``scripts/e2e_baselines.py --engine pandas``: the same with pandas
            (``scripts/bench_churn_baseline.py``'s functions);
  pipeline  ``pipeline run`` of configs/bench_churn.yaml without its logistic regression: load
            the CSV -> split -> feature ops -> XGBoost -> evaluate -> export, with the default
            config otherwise (the report and the importances on), cold (an empty stage cache).

The three do the same data work: the same stratified split (scikit-learn, seed 42: the same
rows), the same feature transforms, XGBoost with the same parameters on every core. The
pipeline does more on top by default: the HTML report, permutation importances, drift
references, the run record, the stage cache; that is the overhead this measures.

Per run: wall (the child's whole life), CPU (user + system seconds of the child and the
children it waited for, from ``os.wait4``) and peak RSS (the child's ``ru_maxrss``). The order
rotates every round (polars pandas pipeline / pandas pipeline polars / ...) so drift on a shared
machine falls on every side. It prints the medians, the ratios side / polars of the medians
(target for the pipeline: wall <= 1.05), and the test ROC AUC of each. The metrics must agree:
polars and pandas within ``--engine-tolerance`` (default 1e-4: the same rows and transforms; only
the float summation order of a mean or a standard deviation differs, which can move an XGBoost
histogram cut), the pipeline within ``--auc-tolerance`` of polars (default 0.005, as
bench_overhead.py: the same split, but its own XGBoost wrapper and evaluation code).

    python scripts/bench_e2e.py --rows 10000000 --repeats 3 --output bench-data/e2e-bench.json

Exit status: 0 when every run succeeded and the metrics agree (whatever the ratios), 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_overhead import (  # noqa: E402  (a sibling script: its data, timing and cache helpers)
    compile_package, disk_bytes, ensure_data, measure, pipeline_executable, warm_page_cache,
)

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = REPO / "scripts"
SOURCE_CONFIG = REPO / "configs" / "bench_churn.yaml"
SIDES = ("polars", "pandas", "pipeline")
REFERENCE = "polars"
TIME_TARGET = 1.05
MEMORY_TARGET = 1.25
MODEL = "xgb"
MiB = 2**20


def e2e_config(data: Path, folder: Path) -> Path:
    """configs/bench_churn.yaml reading ``data``, with its XGBoost model only (the hand-written
    sides train that one): one source for the parameters of all three sides."""
    config = yaml.safe_load(SOURCE_CONFIG.read_text(encoding="utf-8"))
    stages = config["stages"]
    models = [name for name, stage in stages.items() if stage.get("kind") == "train"]
    for name in models:
        if name != MODEL:
            del stages[name]
    for stage in stages.values():
        if stage.get("kind") in ("evaluate", "export"):
            stage["inputs"] = [MODEL]
    stages["raw"]["path"] = str(data)
    config["name"] = "bench_e2e"
    path = folder / "bench_e2e.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


def run_side(side: str, data: Path, work: Path, index: int, config: Path) -> dict[str, Any]:
    out = work / f"{side}-{index}"
    if side == "pipeline":
        cmd = [*pipeline_executable(), "run", str(config), "--runs-dir", str(out), "--quiet"]
    else:
        cmd = [sys.executable, str(SCRIPTS / "e2e_baselines.py"), "--engine", side, "--data", str(data),
               "--output-dir", str(out)]
    result = measure(cmd, work / f"{side}-{index}")
    result["command"] = cmd
    if side != "pipeline":
        metrics = json.loads((out / "metrics.json").read_text())
        result["roc_auc"] = metrics["models"][MODEL]["roc_auc"]
        result["fit_s"] = metrics["fit_seconds"]
        return result
    manifests = list(out.glob("*/latest/manifest.json"))
    if len(manifests) != 1:
        raise SystemExit(f"expected one run under {out}, found {len(manifests)}")
    manifest = json.loads(manifests[0].read_text())
    result["roc_auc"] = manifest["metrics"]["models"][MODEL]["roc_auc"]
    result["fit_s"] = manifest["stages"][MODEL]["facts"]["fit_seconds"]
    result["stages"] = {name: {"seconds": s["seconds"], "peak_rss_bytes": s["peak_rss_bytes"]}
                        for name, s in manifest["stages"].items()}
    result["cache_bytes"] = disk_bytes(manifests[0].parent.parent / ".cache")
    return result


def metric_problems(run: dict[str, Any], engine_tolerance: float, auc_tolerance: float) -> list[str]:
    """Where a side's test ROC AUC is further from the reference's than its tolerance."""
    reference = run[REFERENCE]["roc_auc"]
    problems = []
    for side in SIDES:
        if side == REFERENCE or side not in run:
            continue
        tolerance = auc_tolerance if side == "pipeline" else engine_tolerance
        diff = abs(run[side]["roc_auc"] - reference)
        if not diff <= tolerance:
            problems.append(f"{side}: test ROC AUC {run[side]['roc_auc']:.6f} vs {REFERENCE} {reference:.6f} "
                            f"(differ by {diff:.6f} > {tolerance})")
    return problems


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    summary: dict[str, Any] = {"median": {}, "ratio": {}}
    sides = [side for side in SIDES if side in runs[0]]
    for side in sides:
        summary["median"][side] = {key: statistics.median(r[side][key] for r in runs)
                                   for key in ("wall_s", "cpu_s", "peak_rss_bytes", "roc_auc")}
        # Everything but XGBoost's own fit, the same call with the same matrix on every side
        # and the noisiest part of a run: what each side's own code costs.
        summary["median"][side]["outside_fit_s"] = statistics.median(r[side]["wall_s"] - r[side]["fit_s"]
                                                                     for r in runs)
    for side in sides:
        summary["ratio"][side] = {key: round(summary["median"][side][key] / summary["median"][REFERENCE][key], 4)
                                  for key in ("wall_s", "cpu_s", "peak_rss_bytes", "outside_fit_s")}
    stages = runs[0]["pipeline"].get("stages", {})
    summary["pipeline_stages_median"] = {
        name: statistics.median(r["pipeline"]["stages"][name]["seconds"] for r in runs) for name in stages}
    pipeline = summary["ratio"]["pipeline"]
    summary["time_target_met"] = pipeline["wall_s"] <= TIME_TARGET
    summary["memory_target_met"] = pipeline["peak_rss_bytes"] <= MEMORY_TARGET
    return summary


def markdown(runs: list[dict[str, Any]], summary: dict[str, Any], rows: int, command: str) -> str:
    lines = [
        f"End to end, {rows:,} rows, {len(runs)} run(s) each ({os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}); medians, ratios against {REFERENCE}:",
        "",
        "| side | wall (s) | CPU (s) | peak RSS (MiB) | wall ratio | CPU ratio | peak ratio | wall outside the fit (s) "
        "| its ratio | test ROC AUC |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for side in summary["median"]:
        m, r = summary["median"][side], summary["ratio"][side]
        lines.append(f"| {side} | {m['wall_s']:.1f} | {m['cpu_s']:.1f} | {m['peak_rss_bytes'] / MiB:,.0f} | "
                     f"{r['wall_s']:.3f} | {r['cpu_s']:.3f} | {r['peak_rss_bytes']:.3f} | {m['outside_fit_s']:.1f} | "
                     f"{r['outside_fit_s']:.3f} | {m['roc_auc']:.4f} |")
    ok = {True: "met", False: "**not met**"}
    lines += [
        "",
        f"pipeline / {REFERENCE}: wall {summary['ratio']['pipeline']['wall_s']:.3f} (target ≤ {TIME_TARGET:.2f}, "
        f"{ok[summary['time_target_met']]}), peak RSS {summary['ratio']['pipeline']['peak_rss_bytes']:.3f} "
        f"(≤ {MEMORY_TARGET:.2f}, {ok[summary['memory_target_met']]}).",
        "",
        "Pipeline stages (median seconds): " + ", ".join(
            f"{name} {seconds:.1f}" for name, seconds in summary["pipeline_stages_median"].items()),
        "",
        f"Command: `{command}`",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_000_000, help="rows in the generated table (default 10,000,000)")
    parser.add_argument("--repeats", type=int, default=3, help="rounds of the three sides (default 3)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the generated data (default 0)")
    parser.add_argument("--data-dir", type=Path, default=REPO / "bench-data",
                        help="where the generated table is kept (default bench-data/, git-ignored)")
    parser.add_argument("--regenerate", action="store_true", help="generate the table even if it exists")
    parser.add_argument("--engine-tolerance", type=float, default=1e-4,
                        help="largest test ROC AUC difference pandas / polars (default 1e-4)")
    parser.add_argument("--auc-tolerance", type=float, default=0.005,
                        help="largest test ROC AUC difference pipeline / polars (default 0.005)")
    parser.add_argument("--output", type=Path, help="also write the results as JSON here")
    parser.add_argument("--keep", action="store_true", help="keep the runs' outputs and logs (path printed)")
    parser.add_argument("--skip-pandas", action="store_true",
                        help="run the Polars reference and the pipeline only (a 10M round in two thirds of the time)")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    sides = tuple(side for side in SIDES if not (args.skip_pandas and side == "pandas"))
    command = f"python scripts/bench_e2e.py --rows {args.rows} --repeats {args.repeats}"
    if args.skip_pandas:
        command += " --skip-pandas"
    if args.seed != 0:
        command += f" --seed {args.seed}"

    data = ensure_data(args.rows, args.seed, args.data_dir.resolve(), args.regenerate)
    warm_page_cache(data)
    compile_package()
    work = Path(tempfile.mkdtemp(prefix="bench_e2e_"))
    config = e2e_config(data, work)
    runs: list[dict[str, Any]] = []
    problems: list[str] = []
    load_before = os.getloadavg()
    try:
        for i in range(args.repeats):
            order = sides[i % len(sides):] + sides[:i % len(sides)]
            run: dict[str, Any] = {"index": i, "order": " → ".join(order)}
            for side in order:
                print(f"[{i + 1}/{args.repeats}] {side} ...", end=" ", flush=True, file=sys.stderr)
                run[side] = run_side(side, data, work, i, config)
                r = run[side]
                print(f"{r['wall_s']:.1f} s, CPU {r['cpu_s']:.1f} s, peak RSS {r['peak_rss_bytes'] / MiB:,.0f} MiB, "
                      f"test ROC AUC {r['roc_auc']:.4f}", file=sys.stderr)
            problems += [f"run {i + 1}: {p}" for p in metric_problems(run, args.engine_tolerance, args.auc_tolerance)]
            runs.append(run)
    finally:
        if args.keep:
            print(f"outputs and logs kept in {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    load_after = os.getloadavg()

    summary = summarise(runs)
    table = markdown(runs, summary, args.rows, command)
    print("metrics agree" if not problems else "METRICS DISAGREE:\n  " + "\n  ".join(problems))
    print(f"load average before/after: {load_before[0]:.2f} / {load_after[0]:.2f} (1-minute)")
    print()
    print(table)
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps({
            "rows": args.rows, "repeats": args.repeats, "seed": args.seed, "data": str(data), "command": command,
            "host": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
                     "load_average_before": load_before, "load_average_after": load_after},
            "targets": {"wall_ratio": TIME_TARGET, "peak_ratio": MEMORY_TARGET},
            "tolerances": {"engine": args.engine_tolerance, "pipeline": args.auc_tolerance},
            "metrics_agree": not problems, "metric_problems": problems,
            "runs": runs, "summary": summary, "markdown": table,
        }, indent=2))
        print(f"\nresults written to {args.output}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
