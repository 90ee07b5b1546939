"""Each ``auto`` portfolio member's first fit on a GPU run, relative to the first member's: what
``PortfolioMember.device_cost`` is set from.

    PYTHONPATH=.:/opt/gpu-kit-site python scripts/gpu_kit/probe_members.py --out members.json

The auto stage projects a member's first fit as its relative cost times the seconds per unit
measured so far. On the CPU the costs are LightGBM multiples measured on the CPU; on a GPU run
the members with CUDA builds (XGBoost, CatBoost, the MLP, cuML's forest and linear model) fit
on the device while LightGBM stays on the host, so their multiples differ. This fits every
member once, exactly as the stage's screen does (``_Run._screen``: fold 0 of five, the stage's
parameters, views and trainers, the clock exempt), on generated tables typed by ``default_ops``:

- ``binary``: numbers with gaps, two categoricals of few levels and one of 300;
- ``multiclass``: 7 classes of numbers, the shape boosters pay per class for.

First a warm-up pass of every member on 2,000 rows pays each library's first use (CUDA context,
kernel compiles; recorded as ``warmup``), then the timed fits, on ``--backends`` in order (gpu,
then the host's cores for the speed-up). Fits that would start past ``--budget`` seconds are
recorded as not run. Prints a table and writes JSON: seconds per member, its multiple of the
first member's on the same table and backend, and its holdout metric.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

TABLES = {"binary": 100_000, "multiclass": 20_000}
WARMUP_ROWS = 2_000


def table(kind: str, rows: int, seed: int = 0) -> pd.DataFrame:
    """A generated table of ``kind`` (binary or multiclass) with a signal in every column kind."""
    rng = np.random.default_rng(seed)
    numbers = rng.normal(size=(rows, 20))
    frame = pd.DataFrame(numbers, columns=[f"x{i}" for i in range(20)])
    frame.loc[rng.random(rows) < 0.05, "x3"] = np.nan
    signal = numbers[:, 0] + 0.7 * numbers[:, 1] * numbers[:, 2] - 0.5 * np.abs(numbers[:, 3])
    if kind == "binary":
        frame["plan"] = rng.choice(["basic", "plus", "pro"], rows)
        frame["region"] = rng.choice([f"r{i}" for i in range(12)], rows)
        levels = rng.integers(0, 300, rows)
        frame["shop"] = [f"s{i}" for i in levels]
        signal = signal + 0.8 * (frame.plan == "pro").to_numpy() + np.sin(levels / 20.0)
        frame["target"] = (signal + rng.normal(scale=0.8, size=rows) > 0.3).astype(int)
    else:
        cuts = np.quantile(signal, np.linspace(0, 1, 8)[1:-1])
        frame["target"] = np.digitize(signal + rng.normal(scale=0.5, size=rows), cuts)
    return frame


def features_on(frame: pd.DataFrame, kind: str, backend_name: str) -> Any:
    """The auto stage's matrix of ``frame`` on ``backend_name``: split, then ``default_ops``."""
    from pipeline.backends import get_backend
    from pipeline.features.auto_ops import default_ops
    from pipeline.stages import build_features, split_frame

    backend = get_backend(backend_name)
    data = split_frame(backend.from_pandas(frame), "target", test=0.2, backend=backend, task=kind, seed=0)
    return build_features(data, default_ops(kind))


def screen(features: Any, deadline: float) -> list[dict[str, Any]]:
    """Every non-extra member's first fit on ``features`` as the stage's screen fits it."""
    from pipeline.stages.auto import _Run, portfolio_for

    members = [m for m in portfolio_for(features.task.kind, "auto") if not m.extra]
    run = _Run(features, members, time_limit=24 * 3600.0, seed=0, name="auto", log=lambda _: None,
               started=time.perf_counter())
    out = []
    for member in members:
        if time.perf_counter() > deadline:
            out.append({"member": member.label, "status": "not run: past the probe's budget"})
            continue
        bag = run._screen(member, [], 0.0, first=True)
        record, step = run.board[-1], run.plan[-1]
        out.append({"member": member.label, "status": record.status, "reason": record.reason,
                    "seconds": step.seconds, "holdout": record.holdout if bag is not None else None,
                    "cost_cpu": member.cost, "device_cost": member.device_cost})
    return out


def with_multiples(fits: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each fit's seconds as a multiple of the first timed member's (the plan's unit)."""
    first = next((f["seconds"] for f in fits if f.get("seconds")), None)
    for fit in fits:
        if first and fit.get("seconds"):
            fit["multiple"] = round(fit["seconds"] / first, 3)
    return fits


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="gpu,cpu", help="comma-separated, in order")
    parser.add_argument("--tables", default=",".join(f"{k}:{v}" for k, v in TABLES.items()),
                        help="kind:rows, comma-separated")
    parser.add_argument("--budget", type=float, default=240.0, help="seconds after which no fit starts")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    from pipeline.backends.devices.detect import probe_nvml

    deadline = time.perf_counter() + args.budget
    tables = [(kind, int(rows)) for kind, rows in (item.split(":") for item in args.tables.split(",") if item)]
    report: dict[str, Any] = {"cpus": os.cpu_count(), "gpus": [vars(d) for d in probe_nvml().devices], "results": []}
    for backend in (b for b in args.backends.split(",") if b):
        started = time.perf_counter()
        warm = screen(features_on(table("binary", WARMUP_ROWS, seed=1), "binary", backend), deadline)
        report["results"].append({"backend": backend, "table": "warmup", "rows": WARMUP_ROWS, "fits": warm,
                                  "seconds": round(time.perf_counter() - started, 2)})
        for kind, rows in tables:
            started = time.perf_counter()
            fits = with_multiples(screen(features_on(table(kind, rows), kind, backend), deadline))
            report["results"].append({"backend": backend, "table": kind, "rows": rows, "fits": fits,
                                      "seconds": round(time.perf_counter() - started, 2)})
            if args.out:                      # after every table: a probe stopped later keeps what ran
                args.out.write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
            print(f"{backend} {kind} {rows:,} rows:", flush=True)
            for fit in fits:
                print(f"  {fit['member']:<14} {fit['status']:<8} {fit.get('seconds') or 0:8.2f} s  "
                      f"x{fit.get('multiple', float('nan')):6.2f}  holdout {fit.get('holdout')}", flush=True)
    if args.out:
        args.out.write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
