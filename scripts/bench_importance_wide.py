"""What evaluate's importances cost on a wide table: time and peak memory at 10,000 columns.

    python scripts/bench_importance_wide.py [--rows 300] [--columns 10000] [--timeout 300]
    python scripts/bench_importance_wide.py --explain-module /tmp/explain_before.py   # an older version

The table is ``--rows`` rows of ``--columns`` numeric features (a binary label that depends on
five of them), split 80/20 as ``split: {test: 0.2}`` would, so importances are measured on the
test split's rows. XGBoost (50 rounds, depth 4) and logistic regression are trained on it, then
``explain_models`` (what ``evaluate`` runs for importance.json) is timed in a child process
of its own, so the peak resident memory is that of one measurement. A child still running at
``--timeout`` is killed and reported as such, with the peak it had reached.

``--explain-module`` loads another version of ``pipeline/stages/explain.py`` (for example the one
before the wide-table bounds: ``git show COMMIT:pipeline/stages/explain.py > /tmp/explain_before.py``).
The result is printed as JSON (and written to ``--output``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def measure(args: argparse.Namespace) -> dict:
    """Inside the child: train, then time the importances."""
    import resource

    import numpy as np
    import pandas as pd

    from pipeline.backends import get_backend
    from pipeline.stages import SplitData, build_features, train_model

    explain = _explain_module(args.explain_module)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(args.rows, args.columns)).astype("float32")
    logit = x[:, :5] @ np.array([2.0, -1.5, 1.0, 0.8, -0.5]) + rng.normal(scale=0.5, size=args.rows)
    frame = pd.DataFrame(x, columns=[f"x{i}" for i in range(args.columns)])
    frame["y"] = (logit > 0).astype("int8")
    test = max(1, args.rows // 5)
    data = SplitData(frames={"train": frame.iloc[test:].reset_index(drop=True),
                             "test": frame.iloc[:test].reset_index(drop=True)},
                     target="y", positive=1, backend=get_backend("cpu"))
    features = build_features(data, [])
    models = [train_model(features, "xgboost", {"n_estimators": 50, "max_depth": 4}, seed=0, name="xgb"),
              train_model(features, "logistic_regression", {"max_iter": 200}, seed=0, name="logreg")]
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    started = time.perf_counter()
    found = explain.explain_models(models, split="test", metric="roc_auc", threshold=0.5, seed=0)
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"finished": True, "seconds": round(seconds, 2), "peak_rss_bytes": peak,
            "rss_before_importance_bytes": before, "rows_measured": found["rows"],
            "permuted": found.get("permuted", {}),
            "features_with_permutation": {m: len(e.get("permutation", {}).get("mean", {}))
                                          for m, e in found["models"].items()}}


def _explain_module(path: str | None):
    if path is None:
        from pipeline.stages import explain

        return explain
    spec = importlib.util.spec_from_file_location("explain_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _peak_of(pid: int) -> int | None:
    """VmHWM (the peak resident set) of a running process, in bytes."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def run_child(args: argparse.Namespace) -> dict:
    command = [sys.executable, __file__, "--child", "--rows", str(args.rows), "--columns", str(args.columns)]
    if args.explain_module:
        command += ["--explain-module", args.explain_module]
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    started = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    peak = 0
    while child.poll() is None:
        peak = max(peak, _peak_of(child.pid) or 0)
        if time.perf_counter() - started > args.timeout:
            child.kill()
            child.wait()
            return {"finished": False, "killed_after_s": args.timeout, "peak_rss_bytes": peak,
                    "note": "killed at --timeout (training included in the time)"}
        time.sleep(0.2)
    out, err = child.communicate()
    if child.returncode != 0:
        return {"finished": False, "exit_code": child.returncode, "stderr": err[-2000:]}
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=300)
    parser.add_argument("--columns", type=int, default=10_000)
    parser.add_argument("--timeout", type=float, default=300.0, help="Kill a measurement after this many seconds.")
    parser.add_argument("--explain-module", help="Path of another pipeline/stages/explain.py to measure.")
    parser.add_argument("--output", type=Path, help="Also write the JSON result here.")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args)))
        return
    result = {"rows": args.rows, "columns": args.columns, "explain_module": args.explain_module or "pipeline",
              "cpus": os.cpu_count(), **run_child(args)}
    text = json.dumps(result, indent=2)
    print(text)
    if args.output:
        args.output.write_text(text + "\n")


if __name__ == "__main__":
    main()
