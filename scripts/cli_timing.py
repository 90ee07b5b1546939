"""One timed ``pipeline`` command as a child process, for the benchmarks that pair whole runs
(bench_report.py, bench_sampling.py)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def timed(args: list[str], env: dict[str, str]) -> float:
    """Wall seconds of ``python -m pipeline ARGS`` run from the repository root; exits with its
    stderr's tail when it fails (a failed run's time means nothing)."""
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pipeline", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, stdin=subprocess.DEVNULL)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"pipeline {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return seconds
