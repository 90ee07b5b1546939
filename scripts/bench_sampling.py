"""What sampling a stage's usage costs: cold runs of a config with sampling on and off, paired.

    python scripts/bench_sampling.py [configs/churn.yaml] [--repeats 5]

Each round runs ``pipeline run CONFIG --no-cache`` twice as child processes, into fresh runs
folders, with ``PIPELINE_SAMPLING=on`` (RSS and device memory every 10 ms, the GPUs through
NVML every 100 ms where there are any, CPU time) and ``off`` (the same read once as each stage
starts and ends), the order alternating from round to round. Reported: the median wall time of
each and their ratio (on / off).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
from pathlib import Path

from cli_timing import timed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", nargs="?", default="configs/churn.yaml")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    times: dict[str, list[float]] = {"on": [], "off": []}
    work = Path(tempfile.mkdtemp(prefix="bench-sampling-"))
    try:
        for round_ in range(args.repeats):
            for setting in (("off", "on") if round_ % 2 == 0 else ("on", "off")):
                env = {**os.environ, "PIPELINE_SAMPLING": setting, "PIPELINE_REPORT": "off"}
                times[setting].append(timed(["run", args.config, "--no-cache", "--runs-dir",
                                             str(work / f"{setting}-{round_}")], env))
                print(f"round {round_ + 1}: sampling {setting}: {times[setting][-1]:.2f} s", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    on, off = statistics.median(times["on"]), statistics.median(times["off"])
    print(f"\n{args.config}, median of {args.repeats}, {os.cpu_count()} CPUs:\n")
    print("| cold run, sampling off | sampling on | on / off |")
    print("|--:|--:|--:|")
    print(f"| {off:.2f} s | {on:.2f} s | {on / off:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
