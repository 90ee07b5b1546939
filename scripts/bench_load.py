#!/usr/bin/env python
"""Loading benchmark: one generated CSV of mixed columns read by pandas' C parser (the reader the CPU
backend used before), by the pipeline's CPU backend (pyarrow's multi-threaded reader, giving the C
parser's frame) and by Polars.

The file (``--rows``, default 10M; kept under ``bench-data/load_<rows>_s<seed>.csv``, git-ignored) has
20 columns: 6 floats written with 4 decimals, 4 integers, 2 integers with 5% gaps (floats to pandas),
4 short words, a zero-padded id (an integer to pandas: "00001234" -> 1234), a True/False flag, an ISO
date (text: the load's ``dates`` parse it) and a float with 10% gaps written in full (17 digits).

Engines, each run as its own child process (``--child``) so its peak memory is its own:

  c-parser          ``pandas.read_csv(path)``: one core;
  pipeline          ``get_backend("cpu").read(path)``, as the ``load`` stage reads it;
  polars            ``polars.read_csv(path)``: every core, its own dtypes (no pandas frame);
  c-parser-columns  what the CPU backend did before for a read of some columns (``predict`` reads the
                    columns the model needs): pyarrow's row-width check, then ``pandas.read_csv`` with
                    ``usecols`` (``--columns``, default: half of them);
  pipeline-columns  ``get_backend("cpu").read(path, columns=...)``: one pyarrow read, which refuses a wide
                    row itself;
  parquet-one-thread  the same table as Parquet (written once next to the CSV, row groups of 1M rows):
                    ``pandas.read_parquet(path, use_threads=False)``;
  parquet           ``get_backend("cpu").read(path)`` of that file (``pandas.read_parquet``: pyarrow's
                    threads and pre-buffering, its defaults).

Before timing, the pipeline's frame of a 20,000-row file of the same kind is checked equal to the C
parser's with ``float_precision="round_trip"`` (dtypes and values, floats exactly). Then ``--repeats``
rounds (default 3), the engines' order reversed every round so drift on a shared machine falls on every
side. Per run: seconds and read CPU (the read's wall and user + system seconds, every thread, measured
inside the child: imports excluded), wall and CPU (the child's whole life), peak (the child's
``VmHWM``) and peak - start (``VmHWM`` less the RSS before the read: what the read itself holds). The
table gives the medians and the ratios against the C parser of the same invocation (the columns engines
against c-parser-columns, parquet against parquet-one-thread).

    python scripts/bench_load.py --rows 10M --repeats 3

writes ``bench-data/load-bench.json`` (``--output``) and prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
MiB = 2**20
ENGINES = ("c-parser", "pipeline", "polars", "c-parser-columns", "pipeline-columns", "parquet-one-thread",
           "parquet")
BASELINE = {"c-parser": "c-parser", "pipeline": "c-parser", "polars": "c-parser",
            "c-parser-columns": "c-parser-columns", "pipeline-columns": "c-parser-columns",
            "parquet-one-thread": "parquet-one-thread", "parquet": "parquet-one-thread"}
CHUNK_ROWS = 1_000_000


# ---------------------------------------------------------------------------------------------
# the file


def write_csv(path: Path, rows: int, seed: int) -> None:
    """The benchmark's CSV, written in chunks of a million rows (see the module's docstring)."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(seed)
    words = np.array(["alpha", "beta", "gamma", "delta", "epsilon x", "z"])
    start = pd.Timestamp("2020-01-01")
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", newline="") as fh:
        for first in range(0, rows, CHUNK_ROWS):
            n = min(CHUNK_ROWS, rows - first)
            cols: dict[str, Any] = {}
            for i in range(6):
                cols[f"f{i}"] = np.round(rng.normal(size=n) * 100, 4)
            for i in range(4):
                cols[f"i{i}"] = rng.integers(0, 10**6, n)
            for i in range(2):
                gapped = rng.integers(0, 1000, n).astype(float)
                gapped[rng.random(n) < 0.05] = np.nan
                cols[f"im{i}"] = gapped
            for i in range(4):
                cols[f"s{i}"] = rng.choice(words, n)
            cols["id"] = np.char.zfill(rng.integers(0, 10**7, n).astype(str), 8)
            cols["flag"] = rng.random(n) < 0.5
            cols["date"] = (start + pd.to_timedelta(rng.integers(0, 1000, n), unit="D")).strftime("%Y-%m-%d")
            full = rng.random(n)
            full[rng.random(n) < 0.1] = np.nan
            cols["fm"] = full
            pd.DataFrame(cols).to_csv(fh, index=False, header=first == 0)
    tmp.replace(path)


def ensure_csv(rows: int, seed: int, data_dir: Path, *, parquet: bool = False) -> Path:
    """The CSV of ``rows`` rows (written once), and its Parquet twin beside it when asked."""
    path = data_dir / f"load_{rows}_s{seed}.csv"
    if not path.exists():
        data_dir.mkdir(parents=True, exist_ok=True)
        print(f"writing {path} ({rows:,} rows)...", flush=True)
        write_csv(path, rows, seed)
    twin = path.with_suffix(".parquet")
    if parquet and not twin.exists():
        import pyarrow.csv as pacsv
        import pyarrow.parquet as pq

        print(f"writing {twin}...", flush=True)
        table = pacsv.read_csv(path, convert_options=pacsv.ConvertOptions(column_types={"date": "string"}))
        pq.write_table(table, twin.with_suffix(".tmp"), row_group_size=1_000_000)
        twin.with_suffix(".tmp").replace(twin)
    return path


def header(path: Path) -> list[str]:
    with open(path) as fh:
        return fh.readline().rstrip("\n").split(",")


def check_parity(data_dir: Path, seed: int) -> list[str]:
    """The pipeline's frame of a small file of the same kind against the C parser's: the problems."""
    import pandas as pd

    sys.path.insert(0, str(REPO))
    from pipeline.backends import get_backend
    from pipeline.backends.csv_reader import read_with_c_parser

    path = ensure_csv(20_000, seed, data_dir)
    problems = []
    for columns in (None, header(path)[::2]):
        try:
            pd.testing.assert_frame_equal(get_backend("cpu").read(path, columns=columns),
                                          read_with_c_parser(path, columns=columns), check_exact=True)
        except AssertionError as exc:
            problems.append(f"columns={columns}: {' '.join(str(exc).split())[:300]}")
    return problems


# ---------------------------------------------------------------------------------------------
# the child: one engine, one read


def child_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench_load.py --child")
    parser.add_argument("--child", choices=ENGINES, required=True)
    parser.add_argument("--path", type=Path, required=True)
    parser.add_argument("--columns", default="")
    parser.add_argument("--result", type=Path, required=True)
    args = parser.parse_args(argv)
    columns = [c for c in args.columns.split(",") if c]
    if args.child == "polars":
        import polars as pl

        read = lambda: pl.read_csv(args.path)  # noqa: E731
    elif args.child == "parquet-one-thread":
        import pandas as pd

        read = lambda: pd.read_parquet(args.path.with_suffix(".parquet"), use_threads=False)  # noqa: E731
    elif args.child == "parquet":
        sys.path.insert(0, str(REPO))
        from pipeline.backends import get_backend

        backend = get_backend("cpu")
        read = lambda: backend.read(args.path.with_suffix(".parquet"))  # noqa: E731
    elif args.child.startswith("pipeline"):
        sys.path.insert(0, str(REPO))
        from pipeline.backends import get_backend

        backend = get_backend("cpu")
        read = lambda: backend.read(args.path, columns=columns or None)  # noqa: E731
    else:
        import pandas as pd

        sys.path.insert(0, str(REPO))
        from pipeline.backends.input_files import check_row_widths

        def read() -> Any:
            if columns:
                check_row_widths(args.path)
            return pd.read_csv(args.path, usecols=columns or None)
    rss_before = _rss_now()
    cpu_before = _cpu_seconds()
    start = time.perf_counter()
    frame = read()
    seconds = time.perf_counter() - start
    info = {"engine": args.child, "seconds": round(seconds, 3), "read_cpu_s": round(_cpu_seconds() - cpu_before, 3),
            "rows": len(frame), "columns": len(frame.columns), "rss_before_read_bytes": rss_before,
            "vm_hwm_bytes": _vm_hwm()}
    args.result.write_text(json.dumps(info))
    return 0


def _cpu_seconds() -> float:
    """User + system seconds of this process so far, every thread."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _rss_now() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _vm_hwm() -> int:
    """This process's peak RSS since its exec."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


# ---------------------------------------------------------------------------------------------
# the parent


def run_child(engine: str, path: Path, columns: list[str], work: Path, tag: str, timeout: float) -> dict[str, Any]:
    """One engine in a child process: wall time, CPU seconds (every thread) and its own report."""
    result = work / f"{tag}.json"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", engine, "--path", str(path),
           "--result", str(result)]
    if engine.endswith("-columns"):
        cmd += ["--columns", ",".join(columns)]
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = started + timeout
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.perf_counter() > deadline:
            proc.kill()
        time.sleep(0.05)
    run: dict[str, Any] = {"engine": engine, "wall_s": round(time.perf_counter() - started, 3),
                           "cpu_s": round(usage.ru_utime + usage.ru_stime, 3),
                           "exit_status": os.waitstatus_to_exitcode(status)}
    if run["exit_status"] == 0 and result.exists():
        run.update(json.loads(result.read_text()), succeeded=True)
    else:
        tail = proc.stderr.read().decode(errors="replace")[-2000:] if proc.stderr else ""
        run.update(succeeded=False, stderr_tail=tail)
    return run


def summarise(runs: list[dict[str, Any]], engines: list[str]) -> list[dict[str, Any]]:
    rows = []
    for engine in engines:
        mine = [r for r in runs if r["engine"] == engine and r["succeeded"]]
        if not mine:
            rows.append({"engine": engine, "failed": True})
            continue
        rows.append({"engine": engine, "runs": len(mine),
                     "seconds": statistics.median(r["seconds"] for r in mine),
                     "wall_s": statistics.median(r["wall_s"] for r in mine),
                     "cpu_s": statistics.median(r["cpu_s"] for r in mine),
                     "read_cpu_s": statistics.median(r["read_cpu_s"] for r in mine),
                     "read_peak_mib": statistics.median(r["vm_hwm_bytes"] - r["rss_before_read_bytes"]
                                                        for r in mine) / MiB,
                     "peak_mib": statistics.median(r["vm_hwm_bytes"] for r in mine) / MiB})
    by_engine = {r["engine"]: r for r in rows}
    for row in rows:
        base = by_engine.get(BASELINE[row["engine"]])
        if base and not base.get("failed") and not row.get("failed"):
            for key in ("seconds", "read_cpu_s", "peak_mib", "read_peak_mib"):
                row[f"{key}_ratio"] = row[key] / base[key]
    return rows


def markdown(rows: list[dict[str, Any]], path: Path, command: str) -> str:
    lines = [f"`{command}` ({path.name}, {path.stat().st_size / MiB:,.0f} MiB, {os.cpu_count()} cores)", "",
             "| engine | read s | read CPU s | wall s | CPU s | peak MiB | peak - start MiB | read / base "
             "| read CPU / base | peak / base | peak - start / base |",
             "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for r in rows:
        if r.get("failed"):
            lines.append(f"| {r['engine']} | failed |" + " |" * 9)
            continue
        ratios = " | ".join(f"{r[k]:.2f}" if k in r else "" for k in
                            ("seconds_ratio", "read_cpu_s_ratio", "peak_mib_ratio", "read_peak_mib_ratio"))
        lines.append(f"| {r['engine']} | {r['seconds']:.2f} | {r['read_cpu_s']:.2f} | {r['wall_s']:.2f} | "
                     f"{r['cpu_s']:.2f} | {r['peak_mib']:,.0f} | {r['read_peak_mib']:,.0f} | {ratios} |")
    return "\n".join(lines)


def parse_size(text: str) -> int:
    """'10M' -> 10000000, '2.5M' -> 2500000, '20000' -> 20000."""
    text = text.strip().upper()
    scale = {"K": 1_000, "M": 1_000_000}.get(text[-1:], 1)
    return int(float(text[:-1] if scale > 1 else text) * scale)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--child" in argv:
        return child_main(argv)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=parse_size, default=10_000_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--columns", default="", help="columns the *-columns engines read (default: every other)")
    parser.add_argument("--data-dir", type=Path, default=REPO / "bench-data")
    parser.add_argument("--output", type=Path, default=REPO / "bench-data" / "load-bench.json")
    parser.add_argument("--timeout", type=float, default=1800)
    args = parser.parse_args(argv)
    engines = [e for e in args.engines.split(",") if e]
    unknown = sorted(set(engines) - set(ENGINES))
    if unknown:
        parser.error(f"unknown engines {unknown} (known: {', '.join(ENGINES)})")
    problems = check_parity(args.data_dir, args.seed)
    for problem in problems:
        print(f"PARITY: {problem}", file=sys.stderr)
    path = ensure_csv(args.rows, args.seed, args.data_dir, parquet=any(e.startswith("parquet") for e in engines))
    columns = [c for c in args.columns.split(",") if c] or header(path)[::2]
    with open(path, "rb") as fh:                       # the page cache holds the file for every engine alike
        while fh.read(64 * MiB):
            pass
    work = args.data_dir / "load-bench-work"
    work.mkdir(parents=True, exist_ok=True)
    runs = []
    for round_ in range(args.repeats):
        order = engines if round_ % 2 == 0 else engines[::-1]
        for engine in order:
            run = run_child(engine, path, columns, work, f"{engine}-{round_}", args.timeout)
            runs.append(run)
            shown = (f"{run['seconds']:.2f} s read" if run["succeeded"]
                     else f"FAILED {run.get('stderr_tail', '')[-300:]}")
            print(f"round {round_ + 1} {engine:17} {shown}, wall {run['wall_s']:.2f} s, CPU {run['cpu_s']:.2f} s",
                  flush=True)
    rows = summarise(runs, engines)
    command = "python scripts/bench_load.py " + " ".join(argv)
    table = markdown(rows, path, command.strip())
    print(table)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps({"command": command, "rows": args.rows, "file_bytes": path.stat().st_size,
                                       "parity_problems": problems, "runs": runs, "summary": rows}, indent=1))
    failed = problems or any(not r["succeeded"] for r in runs)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
