#!/usr/bin/env python
"""What evaluate's default explanations cost on a many-class table: ``pipeline run`` of a
generated multiclass table (default 20,000 rows, 7 classes), wall and CPU of the whole run and
of its evaluate stage.

The table has ``--numeric`` numeric columns whose means shift with the class and ``--categorical``
text columns of 5 values each (one-hot encoded: about 50 features at the defaults). The config
trains logistic regression, a random forest (300 trees) and XGBoost (300 rounds, depth 4) and
evaluates them with the defaults (permutation importance and SHAP on), as a user's first config
would. Each run is a child process (``os.wait4`` gives its CPU time and peak RSS), cold (no stage
cache). ``--checkout DIR`` runs another checkout of the package (``PYTHONPATH=DIR``), so a
change is measured before and after on the same table:

    python scripts/bench_explain.py --rows 20000 --classes 7
    python scripts/bench_explain.py --checkout ../before --output before.json

It prints, per run, the wall and CPU seconds of the run and of evaluate, evaluate's share, and
the rows each model's explanations used (importance.json).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent

CONFIG = """\
name: bench_explain
device: cpu
seed: 42

stages:
  raw:
    kind: load
    path: {data}

  split:
    kind: split
    inputs: [raw]
    target: label
    task: multiclass
    test: 0.2
    valid: 0.1

  features:
    kind: features
    inputs: [split]
    ops:
      - one_hot: {{columns: [{categorical}]}}
      - standardize: {{columns: [{numeric}]}}

  logreg:
    kind: train
    inputs: [features]
    model: logistic_regression

  forest:
    kind: train
    inputs: [features]
    model: random_forest
    params: {{n_estimators: 300, min_samples_leaf: 3}}

  xgb:
    kind: train
    inputs: [features]
    model: xgboost
    params: {{n_estimators: 300, learning_rate: 0.05, max_depth: 4, subsample: 0.8}}

  evaluate:
    kind: evaluate
    inputs: [logreg, forest, xgb]

  export:
    kind: export
    inputs: [logreg, forest, xgb]
"""


def generate(path: Path, rows: int, classes: int, numeric: int, categorical: int, seed: int) -> None:
    """A table whose class moves the numeric columns' means and the text columns' frequencies."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(seed)
    label = rng.integers(0, classes, size=rows)
    centres = rng.normal(scale=0.6, size=(classes, numeric))
    frame = pd.DataFrame(rng.normal(size=(rows, numeric)) + centres[label],
                         columns=[f"x{j}" for j in range(numeric)])
    for j in range(categorical):
        shift = rng.integers(0, 5, size=classes)
        values = (rng.integers(0, 3, size=rows) + shift[label]) % 5
        frame[f"c{j}"] = np.array(["a", "b", "c", "d", "e"])[values]
    frame["label"] = np.array([f"class_{k}" for k in range(classes)])[label]
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(path, index=False)


def run_once(checkout: Path, config: Path, runs_dir: Path) -> dict[str, Any]:
    """One cold ``pipeline run`` as a child: wall, CPU, peak RSS; evaluate's seconds and CPU; the
    rows importance.json says each model's explanations used."""
    env = {**os.environ, "PYTHONPATH": str(checkout.resolve())}
    cmd = [sys.executable, "-m", "pipeline", "run", str(config), "--no-cache", "--runs-dir", str(runs_dir), "--quiet"]
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=checkout, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    output = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"pipeline run failed:\n{output[-3000:]}")
    manifest_path = sorted(runs_dir.glob("*/latest/manifest.json"))[-1]
    manifest = json.loads(manifest_path.read_text())
    evaluate = manifest["stages"]["evaluate"]
    importance_file = manifest_path.parent / "evaluate" / "importance.json"
    importance = json.loads(importance_file.read_text()) if importance_file.exists() else {}
    return {
        "wall_s": round(wall, 2), "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
        "peak_rss_bytes": usage.ru_maxrss * 1024,
        "evaluate_s": evaluate["seconds"], "evaluate_cpu_s": (evaluate.get("usage") or {}).get("cpu_seconds"),
        "stages_s": {name: s["seconds"] for name, s in manifest["stages"].items()},
        "importance_rows": importance.get("rows"), "explained": (evaluate.get("facts") or {}).get("explained"),
        "metrics": manifest["metrics"]["models"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--classes", type=int, default=7)
    parser.add_argument("--numeric", type=int, default=30, help="numeric columns (default 30)")
    parser.add_argument("--categorical", type=int, default=4, help="text columns of 5 values (default 4)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--checkout", type=Path, default=REPO, help="the checkout whose package runs (default: this one)")
    parser.add_argument("--data-dir", type=Path, default=REPO / "bench-data")
    parser.add_argument("--output", type=Path, help="also write the results as JSON here")
    args = parser.parse_args(argv)

    data = (args.data_dir / f"multiclass_{args.rows}_k{args.classes}_n{args.numeric}_c{args.categorical}"
                            f"_s{args.seed}.csv").resolve()
    if not data.exists():
        generate(data, args.rows, args.classes, args.numeric, args.categorical, args.seed)
    work = Path(tempfile.mkdtemp(prefix="bench_explain_"))
    config = work / "bench_explain.yaml"
    config.write_text(CONFIG.format(data=data, numeric=", ".join(f"x{j}" for j in range(args.numeric)),
                                    categorical=", ".join(f"c{j}" for j in range(args.categorical))))
    runs = []
    for i in range(args.repeats):
        result = run_once(args.checkout, config, work / f"runs-{i}")
        runs.append(result)
        print(f"run {i + 1}: {result['wall_s']:.1f} s wall, {result['cpu_s']:.1f} CPU-s; evaluate "
              f"{result['evaluate_s']:.1f} s ({result['evaluate_s'] / result['wall_s']:.0%} of the run), "
              f"{result['evaluate_cpu_s']} CPU-s; explanation rows {result['importance_rows']}", flush=True)
    summary = {key: statistics.median(r[key] for r in runs) for key in ("wall_s", "cpu_s", "evaluate_s")}
    print(json.dumps({"rows": args.rows, "classes": args.classes, "checkout": str(args.checkout), **summary}))
    if args.output:
        args.output.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "runs": runs,
                                           "median": summary}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
