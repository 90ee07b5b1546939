#!/usr/bin/env python
"""Do two checkouts of pipeline compute the same metrics? Every example config, run by each.

A refactoring that claims "behaviour unchanged" proves it here: each config in ``configs/``
(except the benchmark's, which needs generated data) runs once per checkout, cold (no stage
cache), on the CPU, each in a child process with that checkout first on ``PYTHONPATH``; then
every number in each run's ``manifest.json`` ``metrics`` is compared exactly.

    git worktree add --detach ../before <commit>
    python scripts/same_metrics.py --before ../before --after . --output same-metrics.json

Exit status: 0 when every config succeeded on both sides with identical metrics, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SKIP = {"bench_churn.yaml"}


def run_config(checkout: Path, config: Path, runs_dir: Path) -> tuple[dict[str, Any] | None, float, str]:
    """(the run's manifest, seconds, the last lines of its output) for one cold CPU run."""
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", type=Path, required=True, help="the checkout to compare against")
    parser.add_argument("--after", type=Path, default=Path("."), help="the checkout under test")
    parser.add_argument("--configs", nargs="*", help="config file names in configs/ (default: all)")
    parser.add_argument("--output", type=Path, help="write the comparison as JSON here")
    args = parser.parse_args(argv)
    names = args.configs or sorted(p.name for p in (args.after / "configs").glob("*.yaml") if p.name not in SKIP)
    results, same = [], True
    with tempfile.TemporaryDirectory(prefix="same-metrics-") as tmp:
        for name in names:
            row: dict[str, Any] = {"config": name}
            metrics = {}
            for side, checkout in (("before", args.before), ("after", args.after)):
                manifest, seconds, tail = run_config(checkout, Path("configs") / name, Path(tmp) / side / name)
                row[f"{side}_seconds"] = round(seconds, 1)
                if manifest is None:
                    row[f"{side}_error"] = tail
                    continue
                metrics[side] = numbers(manifest.get("metrics") or {})
            if len(metrics) == 2:
                differ = sorted(k for k in set(metrics["before"]) | set(metrics["after"])
                                if metrics["before"].get(k) != metrics["after"].get(k))
                row.update(values=len(metrics["after"]), differ=differ)
                ok = not differ and bool(metrics["after"])
            else:
                ok = False
            row["same"] = ok
            same &= ok
            results.append(row)
            print(f"{name}: {'same' if ok else 'DIFFERENT'} ({row.get('values', 0)} metric values; "
                  f"{row['before_seconds']} s before, {row['after_seconds']} s after)", flush=True)
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
