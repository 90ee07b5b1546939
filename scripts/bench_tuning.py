#!/usr/bin/env python
"""Tuning speed: 40 XGBoost trials with early stopping on a 2-worker local Dask cluster vs in
one process.

Generates the Telco-schema churn table (``--rows``, default 1M; ``scripts/generate_churn.py``)
once, then runs the same pipeline twice with ``pipeline run``, each as a child process with its
own runs folder (so neither reads the other's cache):

  (a) in one process: trials one after another, XGBoost on every core;
  (b) ``--set cluster.n_workers=2 --set cluster.threads_per_worker=<cores / 2>``: the train stage
      runs on a worker and its trials run two at a time as Dask tasks, each XGBoost on its
      worker's share of the cores, on the features scattered once to both workers.

Both ask the sampler for trials in batches of 2 (``tune.parallel: 2``) with pruning off by
default, so they run the very same trials (the script checks it) and the times compare like
for like. The time compared is the search's own (``tuning.seconds`` in the stage's facts:
every trial, not the final refit); the stage's and the run's wall times are reported beside it.
It prints one JSON object: both times and the speed-up (in-process seconds / cluster seconds).

    python scripts/bench_tuning.py                        # 1M rows, 40 trials (minutes to hours)
    python scripts/bench_tuning.py --rows 20000 --trials 6  # a quick check that it works

Exit status: 0 when both runs succeeded (and, with pruning off, ran the same trials), 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_overhead import ensure_data, measure, pipeline_executable, warm_page_cache  # noqa: E402

STAGE = "xgb"
# The searched space: what a user tuning XGBoost writes first. n_estimators is a ceiling that
# early stopping (10 rounds without improvement on the valid split) cuts short; the ceiling and
# the learning rate's floor keep 40 trials on 1M rows within minutes on a 2-core machine.
SPACE = {
    "max_depth": {"int": [3, 10]},
    "learning_rate": {"float": [0.05, 0.3], "log": True},
    "subsample": {"float": [0.5, 1.0]},
    "colsample_bytree": {"float": [0.5, 1.0]},
    "min_child_weight": {"float": [1.0, 50.0], "log": True},
}
PARAMS = {"n_estimators": 300, "early_stopping_rounds": 10}


def config_text(data: Path, trials: int, parallel: int, pruning: bool) -> str:
    """configs/bench_churn.yaml's load, split and features, and one tuned XGBoost stage."""
    # Scored on the valid split, as when these timings were first taken: the bench compares where
    # trials run, not how they are scored (cross-validation would be k fits per trial on both sides).
    tune = {"trials": trials, "parallel": parallel, "pruning": pruning, "scoring": "valid", "space": SPACE}
    return f"""\
name: bench_tuning
device: cpu
seed: 42
stages:
  raw: {{kind: load, path: {json.dumps(str(data))}, na_values: [" "]}}
  split: {{kind: split, inputs: [raw], target: Churn, positive: "Yes", test: 0.2, valid: 0.1}}
  features:
    kind: features
    inputs: [split]
    id: customerID
    ops:
      - fill_missing: {{columns: [TotalCharges], strategy: median}}
      - log1p: {{columns: [TotalCharges]}}
      - one_hot:
          columns: [gender, Partner, Dependents, PhoneService, PaperlessBilling, MultipleLines,
                    InternetService, OnlineSecurity, OnlineBackup, DeviceProtection, TechSupport,
                    StreamingTV, StreamingMovies, Contract, PaymentMethod]
          drop_binary: true
      - standardize: {{columns: [tenure, MonthlyCharges, TotalCharges]}}
  {STAGE}:
    kind: train
    inputs: [features]
    model: xgboost
    params: {json.dumps(PARAMS)}
    tune: {json.dumps(tune)}
"""


def run(config: Path, work: Path, side: str, overrides: list[str]) -> dict[str, Any]:
    """One ``pipeline run``; its wall time, peak RSS and the tuned stage's record."""
    runs_dir = work / f"runs-{side}"
    cmd = [*pipeline_executable(), "run", str(config), "--runs-dir", str(runs_dir), "--quiet"]
    for override in overrides:
        cmd += ["--set", override]
    result = measure(cmd, work / side)
    (manifest_path,) = runs_dir.glob("*/latest/manifest.json")
    manifest = json.loads(manifest_path.read_text())
    stage = manifest["stages"][STAGE]
    tuning = stage["facts"]["tuning"]
    return {
        "tune_seconds": tuning["seconds"],
        "stage_seconds": stage["seconds"],
        "run_wall_seconds": result["wall_s"],
        "peak_rss_bytes": result["peak_rss_bytes"],
        "where": tuning["where"],
        "trials": tuning["counts"],
        "best_value": tuning["best_value"],
        "best_params": tuning["best_params"],
        "mean_trial_seconds": round(sum(t["seconds"] for t in tuning["trials"]) / len(tuning["trials"]), 3),
        "_trials": [(t["params"], t["value"], t["state"]) for t in tuning["trials"]],
        "command": cmd,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows in the generated table (default 1,000,000)")
    parser.add_argument("--trials", type=int, default=40, help="trials per search (default 40)")
    parser.add_argument("--workers", type=int, default=2, help="local Dask workers (default 2)")
    parser.add_argument("--threads-per-worker", type=int, default=None,
                        help="threads of each worker (default: the machine's cores / workers)")
    parser.add_argument("--pruning", action="store_true",
                        help="prune in the in-process run (the cluster's trials are never pruned, so the two "
                             "runs then do different work)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the generated data (default 0)")
    parser.add_argument("--data-dir", type=Path, default=REPO / "bench-data",
                        help="where the generated table is kept (default bench-data/, git-ignored)")
    parser.add_argument("--regenerate", action="store_true", help="generate the table even if it exists")
    parser.add_argument("--output", type=Path, help="also write the JSON here")
    parser.add_argument("--keep", action="store_true", help="keep the runs' outputs and logs (path printed)")
    args = parser.parse_args(argv)
    if args.trials < 1 or args.workers < 1:
        parser.error("--trials and --workers must be at least 1")
    cores = os.cpu_count() or 1
    threads = args.threads_per_worker or max(1, cores // args.workers)

    data = ensure_data(args.rows, args.seed, args.data_dir.resolve(), args.regenerate)
    warm_page_cache(data)
    work = Path(tempfile.mkdtemp(prefix="bench_tuning_"))
    config = work / "bench_tuning.yaml"
    config.write_text(config_text(data, args.trials, args.workers, args.pruning))
    try:
        print(f"in one process: {args.trials} trials ...", file=sys.stderr, flush=True)
        here = run(config, work, "in_process", [])
        print(f"  {here['tune_seconds']:.1f} s", file=sys.stderr)
        print(f"on {args.workers} local workers x {threads} threads ...", file=sys.stderr, flush=True)
        there = run(config, work, "cluster", [f"cluster.n_workers={args.workers}",
                                              f"cluster.threads_per_worker={threads}"])
        print(f"  {there['tune_seconds']:.1f} s", file=sys.stderr)
    finally:
        if args.keep:
            print(f"outputs and logs kept in {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)

    same = here.pop("_trials") == there.pop("_trials")
    result = {
        "rows": args.rows, "trials": args.trials, "workers": args.workers, "threads_per_worker": threads,
        "pruning": args.pruning, "params": PARAMS, "space": SPACE,
        "in_process": here, "cluster": there,
        "speedup": round(here["tune_seconds"] / there["tune_seconds"], 3) if there["tune_seconds"] else None,
        "same_trials": same,
        "host": {"cpus": cores, "python": platform.python_version(), "platform": platform.platform(),
                 "load_average": os.getloadavg()},
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text + "\n")
    return 0 if same or args.pruning else 1


if __name__ == "__main__":
    sys.exit(main())
