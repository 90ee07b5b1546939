#!/usr/bin/env python
"""A fully cached rerun of configs/churn.yaml as a fraction of a cold run.

Each repeat runs ``pipeline run configs/churn.yaml`` as a subprocess in a fresh runs folder
(empty cache: the cold run), then the same command again in that folder (every stage is
unchanged: the cached rerun), and ``pipeline --version`` (bare process start, for
comparison). Wall times are medians over ``--repeats``; the cached rerun still verifies every
cache entry's checksums, hashes the input CSV, restores the artifacts into its run folder
and writes its manifest.

    python scripts/bench_cache.py --repeats 3

Exit status 0 when every run succeeded and every rerun took all stages from the cache.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def timed(command: list[str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    started = time.perf_counter()
    proc = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    return time.perf_counter() - started, proc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--config", default="configs/churn.yaml")
    args = parser.parse_args(argv)
    pipeline = str(Path(sys.executable).parent / "pipeline")
    cold, cached, start = [], [], []
    ok = True
    for repeat in range(args.repeats):
        with tempfile.TemporaryDirectory(prefix="bench-cache-") as runs:
            command = [pipeline, "run", args.config, "--runs-dir", runs, "--quiet", "--set", "device=cpu"]
            seconds, proc = timed(command)
            ok &= proc.returncode == 0
            cold.append(seconds)
            seconds, proc = timed(command)
            ok &= proc.returncode == 0
            cached.append(seconds)
            (pipeline_dir,) = [p for p in Path(runs).iterdir() if p.is_dir()]
            manifest = json.loads((pipeline_dir / "latest" / "manifest.json").read_text()) if proc.returncode == 0 else {}
            statuses = {r["status"] for r in manifest.get("stages", {}).values()}
            ok &= statuses == {"cached"}
        start.append(timed([pipeline, "--version"])[0])
        print(f"repeat {repeat + 1}: cold {cold[-1]:.2f} s, cached {cached[-1]:.2f} s, "
              f"process start {start[-1]:.2f} s", file=sys.stderr)
    c, r, s = statistics.median(cold), statistics.median(cached), statistics.median(start)
    print("| run | median wall (s) | fraction of cold |\n|---|--:|--:|")
    print(f"| cold (empty cache) | {c:.2f} | 1.00 |")
    print(f"| rerun, every stage cached | {r:.2f} | **{r / c:.3f}** |")
    print(f"| `pipeline --version` (process start) | {s:.2f} | {s / c:.3f} |")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
