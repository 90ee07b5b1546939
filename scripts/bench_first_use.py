#!/usr/bin/env python
"""What the split and features stages pay once per process, and once per machine, on a device.

On an H200 the GPU features stage took 15.25 s on 7k rows in the first run on a fresh machine
(14.97 CPU-s, the GPU 0.7% busy), then 1.28 s on the same rows and 2.4 s at 1M and at 10M rows:
the time does not follow the rows. CuPy compiles each elementwise kernel with NVRTC the first time
any process on the machine needs it (cuDF's ufuncs and division fix-ups, the matrix fill, the
profile's strided copies) and keeps the result in its kernel cache (``CUPY_CACHE_DIR``, by default
``~/.cupy/kernel_cache``); every process still loads each cached kernel and pays cuDF's per-call
overhead. This script runs both stages' code several times in one process, counts the kernels
compiled into the cache on each pass and profiles the first features pass, so the split between
"compiled on this machine", "first use in this process" and "the work itself" is measured:

    CUPY_CACHE_DIR=$(mktemp -d) python scripts/bench_first_use.py --device gpu   # a fresh machine
    python scripts/bench_first_use.py --device gpu                               # a warm cache
    python scripts/bench_first_use.py --device cpu                               # the reference

``--data`` takes a bigger table (``scripts/generate_churn.py``) of the same schema.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def cached_kernels() -> int:
    """Files in CuPy's kernel cache (each one a kernel compiled on this machine)."""
    folder = Path(os.environ.get("CUPY_CACHE_DIR", Path.home() / ".cupy" / "kernel_cache"))
    return sum(1 for _ in folder.glob("*")) if folder.is_dir() else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "gpu"], default="gpu")
    parser.add_argument("--config", default="configs/bench_churn.yaml")
    parser.add_argument("--data", default="data/telco_customer_churn.csv")
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--top", type=int, default=30, help="profile rows shown for the first features pass")
    args = parser.parse_args()

    import yaml

    from pipeline.backends import get_backend
    from pipeline.stages.features import FeaturesSpec, build_features
    from pipeline.stages.split import split_frame

    stages = yaml.safe_load((ROOT / args.config).read_text())["stages"]
    raw, split, features = stages["raw"], stages["split"], stages["features"]
    spec = FeaturesSpec(kind="features", inputs=["split"],
                        **{k: v for k, v in features.items() if k not in ("kind", "inputs")})
    backend = get_backend(args.device)
    start = time.perf_counter()
    frame = backend.read(args.data, na_values=raw.get("na_values"))
    print(f"{args.device}: {len(frame):,} rows read in {time.perf_counter() - start:.2f} s")
    print(f"{'pass':>4} {'split s':>8} {'features s':>11} {'kernels compiled':>17}")
    for number in range(1, args.passes + 1):
        before = cached_kernels()
        start = time.perf_counter()
        data = split_frame(frame, split["target"], positive=split.get("positive"), test=split.get("test", 0.2),
                           valid=split.get("valid", 0.0), seed=42, backend=backend)
        split_seconds = time.perf_counter() - start
        profiler = cProfile.Profile() if number == 1 else None
        start = time.perf_counter()
        if profiler:
            profiler.enable()
        built = build_features(data, spec.build_ops(), id_column=spec.id)
        built.profile()                                   # what the stage writes as profile.json
        if profiler:
            profiler.disable()
        features_seconds = time.perf_counter() - start
        print(f"{number:>4} {split_seconds:>8.2f} {features_seconds:>11.2f} {cached_kernels() - before:>17}")
        if profiler:
            text = io.StringIO()
            pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(args.top)
            first_profile = text.getvalue()
    print("\nfirst features pass, by own time:\n" + first_profile)


if __name__ == "__main__":
    main()
