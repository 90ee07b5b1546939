#!/usr/bin/env python
"""Is the pipeline's best model better than plain scikit-learn / XGBoost, beyond seed noise?

Runs a config once per seed (the seed draws the split, the models' seeds and the search), and
for each run trains the plain models of ``scripts/plain_baselines.py`` on that run's own
non-test rows. Prints, per seed, the best pipeline model's test metric and the best plain
model's, then the mean and standard deviation of each and of their paired difference. A gain
smaller than the spread of the difference is not a gain.

Which pipeline model counts: ``--model NAME`` fixes it before anything is measured (the fair
comparison: the best plain model is still picked on the test rows, which favours it); without
it, the model the run's ``evaluate`` ranked first on its test split.

    python scripts/seed_spread.py configs/churn_tuned.yaml --seeds 1 2 3 4 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from plain_baselines import MAIN_METRIC, baselines, best  # noqa: E402


def run_once(config: Path, seed: int, runs_dir: Path) -> Path:
    """``pipeline run`` with this seed; the run folder it wrote."""
    name = subprocess.run([sys.executable, "-c", "import yaml,sys; print(yaml.safe_load(open(sys.argv[1]))['name'])",
                           str(config)], check=True, capture_output=True, text=True).stdout.strip()
    subprocess.run([sys.executable, "-m", "pipeline", "run", str(config), "--set", f"seed={seed}",
                    "--runs-dir", str(runs_dir), "--no-cache", "-q"], check=True)
    return runs_dir / name / "latest"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", type=Path)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    parser.add_argument("--runs-dir", type=Path, default=None, help="default: a temporary folder")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    parser.add_argument("--model", default=None, help="the pipeline model to compare (default: the run's best)")
    parser.add_argument("--reuse", action="store_true",
                        help="score runs already in --runs-dir/<name>/<run-id> (one per seed, oldest first) instead of running")
    args = parser.parse_args(argv)
    runs_dir = args.runs_dir or Path(tempfile.mkdtemp(prefix="seed-spread-"))
    rows = []
    existing = sorted(p for p in runs_dir.glob("*/*") if p.is_dir() and p.name[:1].isdigit()) if args.reuse else []
    for index, seed in enumerate(args.seeds):
        run_dir = existing[index] if args.reuse else run_once(args.config, seed, runs_dir)
        result = baselines(run_dir.resolve(), seed=seed)
        metric, higher = MAIN_METRIC[result["task"]]
        if args.model:
            pipe_name, pipe_value = args.model, result["pipeline"][args.model][metric]
        else:
            pipe_name, pipe_value = best({k: v for k, v in result["pipeline"].items() if metric in v}, metric, higher)
        plain_name, plain_value = best(result["plain"], metric, higher)
        gain = (pipe_value - plain_value) * (1 if higher else -1)
        rows.append({"seed": seed, "metric": metric, "pipeline": pipe_name, "pipeline_value": pipe_value,
                     "plain": plain_name, "plain_value": plain_value, "gain": gain})
        print(f"seed {seed}: pipeline {pipe_name} {metric}={pipe_value:.4f}  plain {plain_name} "
              f"{metric}={plain_value:.4f}  gain {gain:+.4f}", flush=True)
    summary = {key: {"mean": statistics.mean(r[key] for r in rows),
                     "std": statistics.stdev(r[key] for r in rows) if len(rows) > 1 else 0.0}
               for key in ("pipeline_value", "plain_value", "gain")}
    print(f"{rows[0]['metric']} over {len(rows)} seeds: pipeline {summary['pipeline_value']['mean']:.4f} "
          f"± {summary['pipeline_value']['std']:.4f}; plain {summary['plain_value']['mean']:.4f} "
          f"± {summary['plain_value']['std']:.4f}; gain {summary['gain']['mean']:+.4f} ± {summary['gain']['std']:.4f} "
          "(mean ± standard deviation; gain > 0 means the pipeline is better)")
    if args.json:
        args.json.write_text(json.dumps({"config": str(args.config), "seeds": rows, "summary": summary}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
