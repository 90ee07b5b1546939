#!/usr/bin/env python3
"""The GPU-against-CPU table from what drive.py brought back.

    python scripts/gpu_kit/summarize.py GPU_RESULTS.tar.gz [CPU_RESULTS.tar.gz] [--json OUT.json]

Reads each ``results.tar.gz`` (``drive.py``'s), takes the GPU runs (``bench_1m``, ``bench_10m``,
``auto``) from the first and the CPU runs (the background's ``cpu_1m``, ``cpu_10m``,
``auto_cpu``) from the second when given (a call whose CPU side ran on a quiet host), else from
the first. Prints, per table size, each stage's seconds on both sides and their ratio, the whole
run's, and the test metric of each model on both sides with the difference; ``--json`` writes
the same numbers.
"""

from __future__ import annotations

import argparse
import json
import sys
import tarfile
from pathlib import Path
from typing import Any


def read(archive: Path) -> dict[str, Any]:
    with tarfile.open(archive) as tar:
        state = json.load(tar.extractfile("results/drive.json"))
    return state


def record(state: dict[str, Any], name: str) -> dict[str, Any]:
    if name in state.get("steps", {}):
        return state["steps"][name].get("record") or {}
    return state.get("background", {}).get(name, {}).get("record") or {}


def compare(gpu: dict[str, Any], cpu: dict[str, Any], metric: str = "roc_auc") -> dict[str, Any]:
    stages = {name: {"cpu_s": cpu["stages"].get(name), "gpu_s": seconds,
                     "ratio": round(cpu["stages"][name] / seconds, 2) if cpu["stages"].get(name) and seconds else None}
              for name, seconds in gpu["stages"].items()}
    models = {}
    for model, values in gpu["metrics"]["models"].items():
        theirs = cpu["metrics"]["models"].get(model, {}).get(metric)
        models[model] = {"cpu": theirs, "gpu": values[metric],
                         "difference": None if theirs is None else values[metric] - theirs}
    return {"run": {"cpu_s": cpu["duration_s"], "gpu_s": gpu["duration_s"],
                    "ratio": round(cpu["duration_s"] / gpu["duration_s"], 2)},
            "stages": stages, "metric": metric, "models": models}


def table(name: str, result: dict[str, Any]) -> str:
    lines = [f"{name}", "", "| stage | CPU (s) | GPU (s) | CPU / GPU |", "|---|--:|--:|--:|"]
    for stage, row in result["stages"].items():
        lines.append(f"| {stage} | {row['cpu_s']:.2f} | {row['gpu_s']:.2f} | {row['ratio']:.2f} |")
    run = result["run"]
    lines.append(f"| **the run** | **{run['cpu_s']:.2f}** | **{run['gpu_s']:.2f}** | **{run['ratio']:.2f}** |")
    lines += ["", f"| model | test {result['metric']} CPU | GPU | difference |", "|---|--:|--:|--:|"]
    for model, row in result["models"].items():
        lines.append(f"| {model} | {row['cpu']:.6f} | {row['gpu']:.6f} | {row['difference']:+.1e} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("gpu", type=Path, help="results.tar.gz of the call that ran the GPU steps")
    parser.add_argument("cpu", type=Path, nargs="?", help="results.tar.gz whose CPU side to use (default: the first)")
    parser.add_argument("--json", type=Path, help="write the numbers here too")
    args = parser.parse_args(argv)
    gpu_state = read(args.gpu)
    cpu_state = read(args.cpu) if args.cpu else gpu_state
    found: dict[str, Any] = {}
    for label, gpu_step, cpu_step in (("1M rows", "bench_1m", "cpu_1m"), ("10M rows", "bench_10m", "cpu_10m"),
                                      ("auto, churn", "auto", "auto_cpu")):
        gpu, cpu = record(gpu_state, gpu_step), record(cpu_state, cpu_step)
        if not gpu or not cpu:
            print(f"{label}: not in the results (GPU {gpu_step}: {bool(gpu)}, CPU {cpu_step}: {bool(cpu)})\n")
            continue
        found[label] = compare(gpu, cpu)
        cpu_run = cpu_state.get("background", {}).get(cpu_step, {})
        found[label]["cpu_load"] = {k: cpu_run[k] for k in ("load_before", "load_after") if k in cpu_run}
        print(table(label, found[label]) + "\n")
    if args.json:
        args.json.write_text(json.dumps(found, indent=2) + "\n")
    return 0 if found else 1


if __name__ == "__main__":
    sys.exit(main())
