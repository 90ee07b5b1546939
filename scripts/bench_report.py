"""What the run report and the importances it draws cost: cold runs of a config, paired.

    python scripts/bench_report.py [configs/churn.yaml] [--repeats 3]

Each round runs ``pipeline run CONFIG --no-cache`` three times as child processes, into fresh
runs folders, in an order that rotates from round to round:

- ``bare``: the report off and every evaluate stage's ``importance`` off;
- ``importance``: the report off, importances on (the default evaluation);
- ``report``: the report on (the default run).

Then ``pipeline report`` on the run that has one (the page built again, alone, in a new
process). Reported: the median wall time of each, what the importances add to a bare run,
what the report adds to a run with importances, the rebuild's time against the default run,
and the page's size.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
from pathlib import Path

from cli_timing import timed

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = ("bare", "importance", "report")


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
    times: dict[str, list[float]] = {name: [] for name in (*SETTINGS, "rebuild")}
    size = 0
    work = Path(tempfile.mkdtemp(prefix="bench-report-"))
    try:
        for round_ in range(args.repeats):
            order = SETTINGS[round_ % 3:] + SETTINGS[:round_ % 3]
            for setting in order:
                runs = work / f"{setting}-{round_}"
                env = {**os.environ, "PIPELINE_REPORT": "on" if setting == "report" else "off"}
                extra = without_importance(args.config) if setting == "bare" else []
                times[setting].append(timed(["run", args.config, "--device", "cpu", "--no-cache", "--runs-dir",
                                             str(runs), *extra], env))
                if setting == "report":
                    report = next(runs.glob("*/latest")).resolve() / "report.html"
                    size = report.stat().st_size
                    times["rebuild"].append(timed(["report", str(report.parent)], env))
                print(f"round {round_ + 1}: {setting}: {times[setting][-1]:.2f} s", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    bare, importance, report, rebuild = (statistics.median(times[key]) for key in (*SETTINGS, "rebuild"))
    print(f"\n{args.config}, median of {args.repeats}, {os.cpu_count()} CPUs:\n")
    print("| cold run, bare | with importances | with importances and report | importances' share "
          "| report's share | `pipeline report` alone | page size |")
    print("|--:|--:|--:|--:|--:|--:|--:|")
    print(f"| {bare:.2f} s | {importance:.2f} s | {report:.2f} s | {(importance - bare) / bare:+.1%} "
          f"| {(report - importance) / importance:+.1%} | {rebuild:.2f} s ({rebuild / report:.1%} of the run) "
          f"| {size / 1024:,.0f} KiB |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
