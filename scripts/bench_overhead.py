#!/usr/bin/env python
"""Framework overhead: ``pipeline run`` against the same steps written by hand.

Generates a Telco-schema churn table (``--rows``, default 1M) once, then runs, alternately and
``--repeats`` times each:

  (a) ``python scripts/bench_churn_baseline.py`` (pandas + scikit-learn + XGBoost by hand),
  (b) ``pipeline run configs/bench_churn.yaml --set stages.raw.path=... --quiet``,

each as a child process, measuring its wall time and its own peak RSS (``ru_maxrss`` from
``os.wait4``). The pipeline runs cold (an empty stage cache, which it fills, as a nightly job on
new data does); what it wrote to the cache is reported too (files linked between entries
counted once). The order flips every repeat (AB, BA, AB, ...) so drift on a shared machine
falls on both sides. It reports the per-run numbers, the medians, the ratios
pipeline / baseline, checks that both computed the same model quality (ROC AUC within
``--auc-tolerance``), and prints a Markdown table for the README.

    python scripts/bench_overhead.py --rows 1000000 --repeats 3 --output bench-results.json

Exit status: 0 when the run succeeded and the metrics agree (whatever the ratios), 1 when a
child failed or the metrics disagree.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = REPO / "scripts"
TIME_TARGET = 0.10        # pipeline may take at most 10% more wall time ...
MEMORY_TARGET = 0.25      # ... and 25% more peak RSS than the hand-written script
MiB = 2**20


def pipeline_executable() -> list[str]:
    """The ``pipeline`` console script of this interpreter's environment."""
    beside = Path(sys.executable).parent / "pipeline"
    if beside.exists():
        return [str(beside)]
    found = shutil.which("pipeline")
    if found:
        return [found]
    raise SystemExit("cannot find the `pipeline` command (install the package: pip install -e .)")


def ensure_data(rows: int, seed: int, folder: Path, regenerate: bool) -> Path:
    path = folder / f"churn_{rows}_s{seed}.csv"
    if path.exists() and not regenerate:
        print(f"data: reusing {path.relative_to(REPO) if path.is_relative_to(REPO) else path}", file=sys.stderr)
        return path
    cmd = [sys.executable, str(SCRIPTS / "generate_churn.py"), "--rows", str(rows), "--seed", str(seed),
           "--output", str(path)]
    started = time.perf_counter()
    subprocess.run(cmd, check=True, cwd=REPO)
    print(f"data: generated in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return path


def warm_page_cache(path: Path) -> None:
    """Read the file once so neither side pays the first cold read."""
    with open(path, "rb") as fh:
        while fh.read(1 << 24):
            pass


def compile_package() -> None:
    """Compile the package's modules to bytecode once, as installing it does (pip writes the
    .pyc files). A checkout run in a shell with ``PYTHONDONTWRITEBYTECODE=1`` (this machine,
    many containers) would otherwise compile all ~160 of them from source in every timed run,
    about 0.5 CPU-s a user's install never pays; the libraries' .pyc files are already there."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "pipeline")], check=True,
                   stdout=subprocess.DEVNULL)


def measure(cmd: list[str], log_prefix: Path) -> dict[str, Any]:
    """Run ``cmd``; its wall time, peak RSS and CPU time, from its own rusage."""
    with open(f"{log_prefix}.out", "wb") as out, open(f"{log_prefix}.err", "wb") as err:
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=err)
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        except BaseException:          # Ctrl-C: do not leave the child running
            proc.kill()
            proc.wait()
            raise
        wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        tail = Path(f"{log_prefix}.err").read_text(errors="replace")[-3000:]
        raise SystemExit(f"command failed with exit status {proc.returncode}:\n  {shlex.join(cmd)}\n{tail}")
    return {
        "wall_s": round(wall, 3),
        "peak_rss_bytes": usage.ru_maxrss * 1024,          # KiB on Linux
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 3),
    }


def run_baseline(data: Path, work: Path, index: int) -> dict[str, Any]:
    out_dir = work / f"baseline-{index}"
    cmd = [sys.executable, str(SCRIPTS / "bench_churn_baseline.py"), "--data", str(data), "--output-dir", str(out_dir)]
    result = measure(cmd, work / f"baseline-{index}")
    result["metrics"] = json.loads((out_dir / "metrics.json").read_text())["models"]
    result["command"] = cmd
    return result


def run_pipeline(data: Path, work: Path, index: int, config: Path) -> dict[str, Any]:
    runs_dir = work / f"pipeline-{index}"
    cmd = [*pipeline_executable(), "run", str(config), "--set", f"stages.raw.path={data}",
           "--runs-dir", str(runs_dir), "--quiet"]
    result = measure(cmd, work / f"pipeline-{index}")
    manifests = list(runs_dir.glob("*/latest/manifest.json"))
    if len(manifests) != 1:
        raise SystemExit(f"expected one run under {runs_dir}, found {len(manifests)}")
    manifest = json.loads(manifests[0].read_text())
    result["metrics"] = manifest["metrics"]["models"]
    result["duration_s"] = manifest["duration_s"]
    result["stages"] = {name: {"seconds": s["seconds"], "peak_rss_bytes": s["peak_rss_bytes"]}
                        for name, s in manifest["stages"].items()}
    result["cache_bytes"] = disk_bytes(manifests[0].parent.parent / ".cache")
    result["command"] = cmd
    return result


def disk_bytes(folder: Path) -> int:
    """Bytes of the files under ``folder``, a file with several links counted once."""
    sizes: dict[tuple[int, int], int] = {}
    for path in folder.rglob("*") if folder.is_dir() else []:
        info = path.lstat()
        if path.is_file() and not path.is_symlink():
            sizes[(info.st_dev, info.st_ino)] = info.st_size
    return sum(sizes.values())


def compare_metrics(baseline: dict[str, Any], pipeline: dict[str, Any], tolerance: float) -> list[str]:
    problems = []
    if set(baseline) != set(pipeline):
        problems.append(f"different models: baseline {sorted(baseline)}, pipeline {sorted(pipeline)}")
    for model in sorted(set(baseline) & set(pipeline)):
        diff = abs(baseline[model]["roc_auc"] - pipeline[model]["roc_auc"])
        if not diff <= tolerance:
            problems.append(f"{model}: ROC AUC baseline {baseline[model]['roc_auc']:.4f} vs pipeline "
                            f"{pipeline[model]['roc_auc']:.4f} (differ by {diff:.4f} > {tolerance})")
    return problems


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    def med(side: str, key: str) -> float:
        return statistics.median(r[side][key] for r in runs)

    summary: dict[str, Any] = {"median": {}, "ratio": {}, "paired_ratio_median": {}}
    for key in ("wall_s", "peak_rss_bytes", "cpu_s"):
        b, p = med("baseline", key), med("pipeline", key)
        summary["median"][key] = {"baseline": b, "pipeline": p}
        summary["ratio"][key] = round(p / b, 4)
        summary["paired_ratio_median"][key] = round(
            statistics.median(r["pipeline"][key] / r["baseline"][key] for r in runs), 4)
    stages = runs[0]["pipeline"].get("stages", {})
    summary["pipeline_stages_median"] = {
        name: {
            "seconds": statistics.median(r["pipeline"]["stages"][name]["seconds"] for r in runs),
            "peak_rss_bytes": statistics.median(r["pipeline"]["stages"][name]["peak_rss_bytes"] for r in runs),
        }
        for name in stages
    }
    summary["cache_bytes_median"] = statistics.median(r["pipeline"].get("cache_bytes", 0) for r in runs)
    summary["time_overhead"] = round(summary["ratio"]["wall_s"] - 1, 4)
    summary["memory_overhead"] = round(summary["ratio"]["peak_rss_bytes"] - 1, 4)
    summary["time_target_met"] = summary["time_overhead"] <= TIME_TARGET
    summary["memory_target_met"] = summary["memory_overhead"] <= MEMORY_TARGET
    return summary


def markdown(runs: list[dict[str, Any]], summary: dict[str, Any], rows: int, command: str) -> str:
    def mib(n: float) -> str:
        return f"{n / MiB:,.0f}"

    lines = [
        f"Churn benchmark, {rows:,} rows, {len(runs)} runs each "
        f"({os.cpu_count()} CPUs, Python {platform.python_version()}):",
        "",
        "| run | order | baseline wall (s) | pipeline wall (s) | baseline peak RSS (MiB) "
        "| pipeline peak RSS (MiB) | baseline CPU (s) | pipeline CPU (s) |",
        "|---|---|--:|--:|--:|--:|--:|--:|",
    ]
    for r in runs:
        b, p = r["baseline"], r["pipeline"]
        lines.append(f"| {r['index'] + 1} | {r['order']} | {b['wall_s']:.1f} | {p['wall_s']:.1f} | "
                     f"{mib(b['peak_rss_bytes'])} | {mib(p['peak_rss_bytes'])} | {b['cpu_s']:.1f} | {p['cpu_s']:.1f} |")
    m = summary["median"]
    lines.append(f"| **median** | | **{m['wall_s']['baseline']:.1f}** | **{m['wall_s']['pipeline']:.1f}** | "
                 f"**{mib(m['peak_rss_bytes']['baseline'])}** | **{mib(m['peak_rss_bytes']['pipeline'])}** | "
                 f"**{m['cpu_s']['baseline']:.1f}** | **{m['cpu_s']['pipeline']:.1f}** |")
    ratio = summary["ratio"]
    ok = {True: "met", False: "**not met**"}
    lines += [
        "",
        "| pipeline / baseline (ratio of medians) | ratio | target | |",
        "|---|--:|--:|---|",
        f"| wall time | {ratio['wall_s']:.3f} | ≤ {1 + TIME_TARGET:.2f} | {ok[summary['time_target_met']]} |",
        f"| peak RSS | {ratio['peak_rss_bytes']:.3f} | ≤ {1 + MEMORY_TARGET:.2f} | {ok[summary['memory_target_met']]} |",
        f"| CPU time (user + sys) | {ratio['cpu_s']:.3f} | | |",
        "",
        f"The cold pipeline run wrote {mib(summary['cache_bytes_median'])} MiB to its stage cache.",
        "",
        f"Command: `{command}`",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows in the generated table (default 1,000,000)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each side (default 3)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the generated data (default 0)")
    parser.add_argument("--data-dir", type=Path, default=REPO / "bench-data",
                        help="where the generated table is kept (default bench-data/, git-ignored)")
    parser.add_argument("--regenerate", action="store_true", help="generate the table even if it exists")
    parser.add_argument("--config", type=Path, default=REPO / "configs" / "bench_churn.yaml")
    parser.add_argument("--auc-tolerance", type=float, default=0.005,
                        help="largest allowed ROC AUC difference per model (default 0.005)")
    parser.add_argument("--output", type=Path, help="also write the results as JSON here")
    parser.add_argument("--keep", action="store_true", help="keep the runs' outputs and logs (path printed)")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    # The command that reproduces the numbers (where the results are written does not matter).
    command = f"python scripts/bench_overhead.py --rows {args.rows} --repeats {args.repeats}"
    if args.seed != 0:
        command += f" --seed {args.seed}"
    if args.config.resolve() != (REPO / "configs" / "bench_churn.yaml").resolve():
        command += f" --config {shlex.quote(str(args.config))}"

    data = ensure_data(args.rows, args.seed, args.data_dir.resolve(), args.regenerate)
    warm_page_cache(data)
    compile_package()
    work = Path(tempfile.mkdtemp(prefix="bench_churn_"))
    runs: list[dict[str, Any]] = []
    problems: list[str] = []
    load_before = os.getloadavg()
    try:
        for i in range(args.repeats):
            order = ("baseline", "pipeline") if i % 2 == 0 else ("pipeline", "baseline")
            run: dict[str, Any] = {"index": i, "order": " → ".join(order)}
            for side in order:
                print(f"[{i + 1}/{args.repeats}] {side} ...", end=" ", flush=True, file=sys.stderr)
                result = (run_baseline(data, work, i) if side == "baseline"
                          else run_pipeline(data, work, i, args.config.resolve()))
                print(f"{result['wall_s']:.1f} s, peak RSS {result['peak_rss_bytes'] / MiB:,.0f} MiB, "
                      f"CPU {result['cpu_s']:.1f} s", file=sys.stderr)
                run[side] = result
            problems += [f"run {i + 1}: {p}" for p in
                         compare_metrics(run["baseline"]["metrics"], run["pipeline"]["metrics"], args.auc_tolerance)]
            runs.append(run)
    finally:
        if args.keep:
            print(f"outputs and logs kept in {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    load_after = os.getloadavg()

    summary = summarise(runs)
    table = markdown(runs, summary, args.rows, command)
    print()
    print("Pipeline stages (median over runs):")
    for name, s in summary["pipeline_stages_median"].items():
        print(f"  {name:<10} {s['seconds']:7.2f} s   peak RSS {s['peak_rss_bytes'] / MiB:7,.0f} MiB")
    print()
    print("Test-split ROC AUC (run 1):", ", ".join(
        f"{m}: baseline {runs[0]['baseline']['metrics'][m]['roc_auc']:.4f} / "
        f"pipeline {runs[0]['pipeline']['metrics'].get(m, {}).get('roc_auc', float('nan')):.4f}"
        for m in runs[0]["baseline"]["metrics"]))
    print("metrics agree" if not problems else "METRICS DISAGREE:\n  " + "\n  ".join(problems))
    print(f"load average before/after: {load_before[0]:.2f} / {load_after[0]:.2f} (1-minute)")
    print()
    print(table)

    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps({
            "rows": args.rows, "repeats": args.repeats, "seed": args.seed, "data": str(data),
            "config": str(args.config), "command": command,
            "host": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
                     "load_average_before": load_before, "load_average_after": load_after},
            "targets": {"time_overhead": TIME_TARGET, "memory_overhead": MEMORY_TARGET},
            "metrics_agree": not problems, "metric_problems": problems,
            "runs": runs, "summary": summary, "markdown": table,
        }, indent=2))
        print(f"\nresults written to {args.output}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
