"""What the run report costs: cold runs of a config with the report on and off, paired.

    python scripts/bench_report.py [configs/churn.yaml] [--repeats 3]

Each round runs ``pipeline run CONFIG --no-cache`` twice as child processes, into fresh runs
folders, with ``PIPELINE_REPORT=on`` and ``off`` (the order alternating from round to round),
then ``pipeline report`` on the run that has one (the page built again, alone, in a new
process). The run with the report off also turns off every evaluate stage's ``importance``
(the explanations the report draws), so the difference is all the report costs. Reported: the
median wall time of each, the report's share of a cold run ((on - off) / off), the rebuild's
time against the cold run, and the page's size.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def timed(args: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pipeline", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, stdin=subprocess.DEVNULL)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"pipeline {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return seconds


def without_importance(config: str) -> list[str]:
    """``--set`` options that turn off the importances of every evaluate stage of ``config``."""
    import yaml

    stages = (yaml.safe_load((ROOT / config).read_text()) or {}).get("stages") or {}
    return [option for name, stage in stages.items() if (stage or {}).get("kind") == "evaluate"
            for option in ("--set", f"stages.{name}.importance=false")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", nargs="?", default="configs/churn.yaml")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    times: dict[str, list[float]] = {"off": [], "on": [], "rebuild": []}
    size = 0
    work = Path(tempfile.mkdtemp(prefix="bench-report-"))
    try:
        for round_ in range(args.repeats):
            for setting in (("off", "on") if round_ % 2 == 0 else ("on", "off")):
                runs = work / f"{setting}-{round_}"
                env = {**os.environ, "PIPELINE_REPORT": setting}
                extra = without_importance(args.config) if setting == "off" else []
                times[setting].append(timed(["run", args.config, "--device", "cpu", "--no-cache", "--runs-dir",
                                             str(runs), *extra], env))
                if setting == "on":
                    report = next(runs.glob("*/latest")).resolve() / "report.html"
                    size = report.stat().st_size
                    times["rebuild"].append(timed(["report", str(report.parent)], env))
                print(f"round {round_ + 1}: report {setting}: {times[setting][-1]:.2f} s", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    off, on, rebuild = (statistics.median(times[key]) for key in ("off", "on", "rebuild"))
    print(f"\n{args.config}, median of {args.repeats}, {os.cpu_count()} CPUs:\n")
    print("| cold run, report and importances off | cold run, report on | report's share of the run | "
          "`pipeline report` alone | page size |")
    print("|--:|--:|--:|--:|--:|")
    print(f"| {off:.2f} s | {on:.2f} s | {(on - off) / off:+.1%} | {rebuild:.2f} s ({rebuild / off:.1%} of the run) "
          f"| {size / 1024:,.0f} KiB |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
