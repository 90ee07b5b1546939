#!/usr/bin/env python
"""Do two checkouts of pipeline compute the same metrics? Every example config, run by each.

A refactoring that claims "behaviour unchanged" proves it here: each config in ``configs/``
(except the benchmark's, which needs generated data) runs once per checkout, cold (no stage
cache), on the CPU, each in a child process with that checkout first on ``PYTHONPATH``; then
every number in each run's ``manifest.json`` ``metrics`` is compared: equal, or within
``--rel-tol`` (default 1e-12, a few units in the last place). The tolerance is not slack for the
change under test: scikit-learn's random forest sums its trees' predictions on several threads
in whatever order they finish, so the same code run twice differs in the last bits of a forest's
metrics (``--before X --after X`` shows it). The report counts exact and near-equal values apart.

    git worktree add --detach ../before <commit>
    python scripts/same_metrics.py --before ../before --after . --output same-metrics.json

``--runs-dir DIR`` keeps the run folders; a side whose run of a config already succeeded there
is not run again, so the baseline's runs can be made once, ahead of time (``--sides before``).

Exit status: 0 when every config succeeded on both sides with identical metrics, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SKIP = {"bench_churn.yaml"}


def run_config(checkout: Path, config: Path, runs_dir: Path) -> tuple[dict[str, Any] | None, float, str]:
    """(the run's manifest, seconds, the last lines of its output) for one cold CPU run; the
    run already made in ``runs_dir``, if one succeeded there."""
    done = [json.loads(p.read_text()) for p in sorted(runs_dir.glob("*/*/manifest.json"))]
    done = [m for m in done if m.get("status") == "succeeded"]
    if done:
        return done[-1], float(done[-1].get("duration_s") or 0.0), "(an earlier run)"
    env = {**os.environ, "PYTHONPATH": str(checkout.resolve())}
    command = [sys.executable, "-m", "pipeline", "run", str(config), "--device", "cpu", "--no-cache",
               "--runs-dir", str(runs_dir), "--quiet"]
    started = time.perf_counter()
    proc = subprocess.run(command, cwd=checkout, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    manifests = sorted(runs_dir.glob("*/*/manifest.json"))
    manifest = json.loads(manifests[-1].read_text()) if proc.returncode == 0 and manifests else None
    return manifest, seconds, (proc.stdout + proc.stderr)[-600:]


def numbers(value: Any, prefix: str = "") -> dict[str, Any]:
    """Every leaf of a metrics tree, by its dotted path."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(numbers(item, f"{prefix}{key}."))
        return out
    if isinstance(value, list):
        out = {}
        for i, item in enumerate(value):
            out.update(numbers(item, f"{prefix}{i}."))
        return out
    return {prefix.rstrip("."): value}


def agree(a: Any, b: Any, rel_tol: float) -> bool:
    """Equal, or two floats within ``rel_tol`` of each other."""
    if a == b:
        return True
    numbers_ = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (a, b))
    return numbers_ and math.isclose(a, b, rel_tol=rel_tol, abs_tol=0.0)


def worst_relative(a: dict[str, Any], b: dict[str, Any]) -> float:
    """The largest relative difference between two metric trees' numbers (0 when all equal)."""
    worst = 0.0
    for key in set(a) & set(b):
        x, y = a[key], b[key]
        if isinstance(x, (int, float)) and isinstance(y, (int, float)) and x != y and max(abs(x), abs(y)) > 0:
            worst = max(worst, abs(x - y) / max(abs(x), abs(y)))
    return worst


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", type=Path, required=True, help="the checkout to compare against")
    parser.add_argument("--after", type=Path, default=Path("."), help="the checkout under test")
    parser.add_argument("--configs", nargs="*", help="config file names in configs/ (default: all)")
    parser.add_argument("--output", type=Path, help="write the comparison as JSON here")
    parser.add_argument("--runs-dir", type=Path, help="keep the run folders here (and reuse succeeded ones)")
    parser.add_argument("--sides", default="before,after", help="which sides to run (default: both)")
    parser.add_argument("--rel-tol", type=float, default=1e-12,
                        help="floats this close count as the same (default 1e-12; 0: exact)")
    args = parser.parse_args(argv)
    names = args.configs or sorted(p.name for p in (args.after / "configs").glob("*.yaml") if p.name not in SKIP)
    results, same = [], True
    sides = [(side, checkout) for side, checkout in (("before", args.before), ("after", args.after))
             if side in args.sides.split(",")]
    with tempfile.TemporaryDirectory(prefix="same-metrics-") as tmp:
        runs = (args.runs_dir or Path(tmp)).resolve()
        for name in names:
            row: dict[str, Any] = {"config": name, "before_seconds": None, "after_seconds": None}
            metrics = {}
            for side, checkout in sides:
                manifest, seconds, tail = run_config(checkout, Path("configs") / name, runs / side / name)
                row[f"{side}_seconds"] = round(seconds, 1)
                if manifest is None:
                    row[f"{side}_error"] = tail
                    continue
                metrics[side] = numbers(manifest.get("metrics") or {})
            if len(sides) == 1:
                print(f"{name}: {sides[0][0]} {'done' if metrics else 'FAILED'}", flush=True)
                for key in ("before_error", "after_error"):
                    if key in row:
                        print(f"  {key}: {row[key]}")
                same &= bool(metrics)
                continue
            if len(metrics) == 2:
                keys = set(metrics["before"]) | set(metrics["after"])
                differ = sorted(k for k in keys
                                if not agree(metrics["before"].get(k), metrics["after"].get(k), args.rel_tol))
                exact = sum(metrics["before"].get(k) == metrics["after"].get(k) for k in keys)
                row.update(values=len(metrics["after"]), exact=exact, differ=differ,
                           worst_relative=worst_relative(metrics["before"], metrics["after"]))
                ok = not differ and bool(metrics["after"])
            else:
                ok = False
            row["same"] = ok
            same &= ok
            results.append(row)
            print(f"{name}: {'same' if ok else 'DIFFERENT'} ({row.get('values', 0)} metric values, "
                  f"{row.get('exact', 0)} exactly equal, largest relative difference "
                  f"{row.get('worst_relative', 0.0):.1e})", flush=True)
            for key in ("before_error", "after_error"):
                if key in row:
                    print(f"  {key}: {row[key]}")
            for key in row.get("differ", [])[:10]:
                print(f"  {key}: {metrics['before'].get(key)!r} -> {metrics['after'].get(key)!r}")
    if args.output:
        args.output.write_text(json.dumps({"same": same, "configs": results}, indent=2) + "\n")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
