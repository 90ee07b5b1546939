"""Where one served model's call spends its time on each path: cProfile of the server's
``score_values`` (feature workflow, model, the answer's columns) per batch size.

    PYTHONPATH=.:/opt/gpu-kit-site python scripts/gpu_kit/profile_serve.py --run RUN --model xgb --device gpu

The bench (``bench_serve.py --calls``) says how long a call takes; this says where, for the
path whose time is out of line (on the H200 the device path took 330 ms for one row and for
16,384 alike). Each path is warmed with three calls, then ``--repeats`` calls are profiled and
the top functions by cumulative time printed.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_serve import payloads  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, required=True)
    parser.add_argument("--model", default="xgb")
    parser.add_argument("--device", default="gpu", choices=("cpu", "gpu"))
    parser.add_argument("--rows", default="1,4096", help="batch sizes, comma-separated")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args(argv)
    from pipeline.serve.served_model import load_served_model

    served = load_served_model(args.run, model=args.model, device=args.device)
    host = served.host or served.opened
    paths = {"few_rows": lambda columns: served.score_values(served.few_rows_frame(columns), host)}
    if served.opened.backend.name != "cpu":
        paths["device"] = lambda columns: served.score_values(served.frame_of(columns))
    sizes = [int(x) for x in args.rows.split(",") if x]
    rows = json.loads(b"".join(payloads(args.run, args.model, max(sizes), max(sizes), 0)))["rows"]
    for size in sizes:
        columns = {name: [row[name] for row in rows[:size]] for name in served.fields}
        for path, call in paths.items():
            for _ in range(3):
                call(columns)
            profile = cProfile.Profile()
            started = time.perf_counter()
            profile.enable()
            for _ in range(args.repeats):
                call(columns)
            profile.disable()
            per_call = (time.perf_counter() - started) / args.repeats
            text = io.StringIO()
            pstats.Stats(profile, stream=text).sort_stats("cumulative").print_stats(args.top)
            print(f"=== {path}, {size} rows: {1000 * per_call:.1f} ms a call (profiled)", flush=True)
            print("\n".join(line[:200] for line in text.getvalue().splitlines() if line.strip())[-12000:], flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
