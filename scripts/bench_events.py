#!/usr/bin/env python
"""Events benchmark: aggregate + label + join on generated purchase logs, the pipeline's library
functions against the same work hand-written in pandas, Polars and DuckDB, and on a local Dask cluster.

For each size in ``--sizes`` (default 1M, 10M and 50M events; ``scripts/generate_events.py``, CDNOW-like,
kept under ``bench-data/events_<rows>_s<seed>/``, git-ignored) every engine does the same work:

  read the events folder (Parquet, one file per month and chunk) and the customer table;
  aggregate the events before the cut-off 1997-12-31 per customer over 4 windows (30d, 90d, 365d, all):
  orders (count), spend (sum of dollar_value), cds (mean of number_of_cds), recency_days, tenure_days,
  gap_days (mean days between purchases) -> 24 features;
  label churn = no purchase in the 180 days from the cut-off (int8);
  left-join the customer table (region, channel, age) on customer_id, many-to-one.

Engines, each run as its own child process (``--child``) so its peak memory is its own:

  pandas        the work hand-written in plain pandas, the way one writes it first (the baseline);
  pipeline      ``pipeline.events.aggregate_events``, ``pipeline.events.label_events`` and
                ``pipeline.stages.join.join_tables`` on the CPU backend: pandas frames in and out, the
                windows, horizon targets and join matching run by the CPU table engine (Polars lazy
                queries, every core; ``PIPELINE_CPU_ENGINE=pandas`` in the environment runs the pandas
                reference engine, one core);
  polars        one lazy query (a group-by with a filtered aggregate per window), collected;
  duckdb        one SQL query (``FILTER`` clauses per window), fetched as an Arrow table;
  pipeline-fast the same functions as ``pipeline`` with ``PIPELINE_REDUCTIONS=fast`` (Polars' own float sums,
                which differ in the last bits from run to run; ``pipeline`` adds floats exactly, the same bits
                every run): what the repeatable default costs; only asked for by name (``--engines``);
  pipeline-gpu  the same functions as ``pipeline`` on the GPU backend (cuDF group-bys and reindexes on the
                device), the result brought to the host; only asked for by name (``--engines``), since it
                needs a GPU with RAPIDS;
  pipeline-dask the pipeline's functions on a ``distributed.LocalCluster`` on 127.0.0.1 (``--dask-workers``
                worker processes, 1 thread each, ``memory_limit`` per worker from ``--dask-memory-limit``:
                by default 0.9 x the events' in-memory size shared by the workers, so they cannot hold the
                events), reading the events partitioned; the customer table is the lookup side of the
                join, one partition sent to every worker (the pipeline's partitioned join); the result is
                written as partitioned Parquet (it need not fit one process). Only at the sizes in
                ``--dask-sizes`` (default: the largest size), once per size; it reports whether the
                workers spilled to disk (their spill directory is under ``--data-dir``), how long any was
                paused (process memory above 80% of its limit: it runs no task then) and whether any was
                replaced (a worker the nanny restarted, e.g. past 95% of its limit). A run whose workers
                are all paused for ``--dask-stall`` seconds (default 300) cannot finish and is ended as
                failed, saying so.

Before timing, every engine runs once on the smallest size and its output is checked equal to the pandas
one (same columns and rows; numbers within ``--tolerance``, relative); at every size each engine must
return as many rows as pandas. Then, per size, ``--repeats`` rounds (default 2) of the in-process engines,
the order reversed every round (A B C D / D C B A / ...) so drift on a shared machine falls on every side,
then the Dask run. Per run:

  seconds  the work (read + compute), timed inside the child: imports and the cluster's start excluded;
  wall     the child's whole life; CPU: user + system seconds, its children included;
  peak     the child's own peak RSS: ``VmHWM`` of /proc/self/status at its end (since its exec; the
           ``ru_maxrss`` of ``os.wait4`` would also count the parent's pages it was forked with); for
           Dask the larger of that and the peak sum of the RSS of its process tree (client, scheduler and
           nannies in the child, the workers its children), sampled every ``--interval`` seconds.

The table gives the medians and, per size, the ratios engine / pandas of the median seconds and peak
(targets for the pipeline: time <= 1.10, peak <= 1.25). pandas uses one core; the pipeline, Polars and
DuckDB use every core (the CPU seconds show it): the pipeline's table work runs on Polars, its read and
its hand-offs between steps are pandas. The Dask workers run the same engine on each partition with
Polars' thread pool sized to the worker's one thread (``POLARS_MAX_THREADS``, set as the pipeline's own
local clusters set it).

    python scripts/bench_events.py --sizes 1M,10M,50M --repeats 2

writes ``bench-data/events-bench.json`` (``--output``) and prints the table. Exit status: 0 when every
run succeeded and the outputs agree, 1 otherwise (the failures are printed and written to the JSON).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = REPO / "scripts"
MiB = 2**20

AS_OF = "1997-12-31"
HORIZON_DAYS = 180
WINDOWS: dict[str, int | None] = {"30d": 30, "90d": 90, "365d": 365, "all": None}
FEATURES: dict[str, Any] = {
    "orders": "count",
    "spend": {"sum": "dollar_value"},
    "cds": {"mean": "number_of_cds"},
    "recency_days": "recency",
    "tenure_days": "tenure",
    "gap_days": "interval_mean",
}
ZERO_WHEN_EMPTY = ("orders", "spend")            # count and sum of an empty window are 0, the rest missing
TARGET = "churn"
ATTRIBUTES = ("region", "channel", "age")
GPU_ENGINE = "pipeline-gpu"                      # the same functions on cuDF: only where a GPU and RAPIDS are
FAST_ENGINE = "pipeline-fast"                    # the pipeline with Polars' own (not repeatable) float sums
IN_PROCESS = ("pandas", "pipeline", FAST_ENGINE, "polars", "duckdb", GPU_ENGINE)
DASK = "pipeline-dask"
ENGINES = (*IN_PROCESS, DASK)
DEFAULT_ENGINES = tuple(e for e in ENGINES if e not in (GPU_ENGINE, FAST_ENGINE))
BASELINE = "pandas"
TIME_TARGET = 1.10
MEMORY_TARGET = 1.25
DASK_DATA_SHARE = 0.9                            # the workers' total memory limit / the events' in-memory size
# A worker holds ~250 MiB after a shuffle whatever the data (its libraries, the allocators' cached pages:
# measured on 1M events) and pauses at 80% of its limit: at 350 MiB a 1M-event run crawled, then stalled.
DASK_MIN_WORKER_BYTES = 512 * MiB
DAY_US = 86_400_000_000


def feature_columns() -> list[str]:
    """Output feature names in the contract's order: each feature over every window."""
    return [f"{name}_{window}" for name in FEATURES for window in WINDOWS]


def output_columns() -> list[str]:
    return ["customer_id", "as_of", *feature_columns(), TARGET, *ATTRIBUTES]


# ---------------------------------------------------------------------------------------------
# the work, per engine (run in the child; each imports only its own libraries)


def pandas_work(events_path: Path, customers_path: Path, timer: dict[str, float]) -> Any:
    """The same work in plain pandas, written the obvious way: one group-by per window."""
    import pandas as pd

    events = pd.read_parquet(events_path)
    customers = pd.read_parquet(customers_path)
    timer["read_s"] = time.perf_counter() - timer["start"]
    cutoff = pd.Timestamp(AS_OF)
    day = pd.Timedelta(days=1)
    past = events[events["date"] < cutoff]
    per_window = {}
    for window, days in WINDOWS.items():
        rows = past if days is None else past[past["date"] >= cutoff - pd.Timedelta(days=days)]
        g = rows.groupby("customer_id").agg(orders=("date", "size"), spend=("dollar_value", "sum"),
                                            cds=("number_of_cds", "mean"), first=("date", "min"),
                                            last=("date", "max"))
        per_window[window] = pd.DataFrame({
            "orders": g["orders"], "spend": g["spend"], "cds": g["cds"],
            "recency_days": (cutoff - g["last"]) / day,
            "tenure_days": (cutoff - g["first"]) / day,
            "gap_days": ((g["last"] - g["first"]) / day / (g["orders"] - 1)).where(g["orders"] > 1),
        })
    index = per_window["all"].index              # every customer with a purchase before the cut-off
    table = pd.DataFrame(index=index)
    for name in FEATURES:
        for window in WINDOWS:
            column = per_window[window][name].reindex(index)
            if name in ZERO_WHEN_EMPTY:
                column = column.fillna(0).astype(per_window["all"][name].dtype)
            table[f"{name}_{window}"] = column
    future = events[(events["date"] >= cutoff) & (events["date"] < cutoff + pd.Timedelta(days=HORIZON_DAYS))]
    table[TARGET] = (~table.index.isin(future["customer_id"].unique())).astype("int8")
    table = table.reset_index()
    table.insert(1, "as_of", cutoff)
    return table.merge(customers, on="customer_id", how="left", validate="many_to_one")


def pipeline_work(events_path: Path, customers_path: Path, timer: dict[str, float]) -> Any:
    """The pipeline's library functions on the CPU backend."""
    from pipeline.backends import get_backend

    cpu = get_backend("cpu")
    events = cpu.read(events_path, format="parquet")
    customers = cpu.read(customers_path, format="parquet")
    timer["read_s"] = time.perf_counter() - timer["start"]
    return pipeline_steps(events, customers)


def pipeline_gpu_work(events_path: Path, customers_path: Path, timer: dict[str, float]) -> Any:
    """The pipeline's library functions on the GPU backend (cuDF); the result brought to the host,
    as every other engine returns a host table."""
    from pipeline.backends import get_backend

    gpu = get_backend("gpu")
    events = gpu.read(events_path, format="parquet")
    customers = gpu.read(customers_path, format="parquet")
    timer["read_s"] = time.perf_counter() - timer["start"]
    return gpu.to_host(pipeline_steps(events, customers))


def pipeline_steps(events: Any, customers: Any) -> Any:
    """aggregate -> label -> join, the same calls in memory and on Dask."""
    from pipeline.events import aggregate_events, label_events
    from pipeline.stages.join import join_tables

    features = aggregate_events(events, by="customer_id", time="date", as_of=AS_OF, features=FEATURES,
                                windows=tuple(WINDOWS), cutoff_column="as_of")
    labelled = label_events(events, features, by="customer_id", time="date", as_of=AS_OF,
                            horizon=f"{HORIZON_DAYS}d", target={TARGET: "no_event"}, cutoff_column="as_of")
    return join_tables(labelled, customers, on="customer_id", how="left", validate="many_to_one")


def polars_work(events_path: Path, customers_path: Path, timer: dict[str, float]) -> Any:
    """One lazy Polars query: a group-by with a filtered aggregate per window, collected."""
    from datetime import datetime, timedelta

    import polars as pl

    cutoff = datetime.fromisoformat(AS_OF)
    events = pl.scan_parquet(str(events_path / "*.parquet"))
    aggregates, derived = [], []
    for window, days in WINDOWS.items():
        inside = None if days is None else pl.col("date") >= cutoff - timedelta(days=days)

        def within(name: str, inside: Any = inside) -> Any:
            return pl.col(name) if inside is None else pl.col(name).filter(inside)

        aggregates += [
            (pl.len() if inside is None else inside.sum()).alias(f"orders_{window}"),
            within("dollar_value").sum().alias(f"spend_{window}"),
            within("number_of_cds").mean().alias(f"cds_{window}"),
            within("date").min().alias(f"first_{window}"),
            within("date").max().alias(f"last_{window}"),
        ]
        first, last, orders = pl.col(f"first_{window}"), pl.col(f"last_{window}"), pl.col(f"orders_{window}")
        derived += [
            ((pl.lit(cutoff) - last).dt.total_microseconds() / DAY_US).alias(f"recency_days_{window}"),
            ((pl.lit(cutoff) - first).dt.total_microseconds() / DAY_US).alias(f"tenure_days_{window}"),
            pl.when(orders > 1).then((last - first).dt.total_microseconds() / DAY_US / (orders - 1))
            .alias(f"gap_days_{window}"),
        ]
    features = (events.filter(pl.col("date") < cutoff).group_by("customer_id").agg(aggregates)
                .with_columns(derived).with_columns(pl.lit(cutoff).alias("as_of")))
    active = (events.filter((pl.col("date") >= cutoff) & (pl.col("date") < cutoff + timedelta(days=HORIZON_DAYS)))
              .select("customer_id").unique().with_columns(pl.lit(0, dtype=pl.Int8).alias(TARGET)))
    customers = pl.scan_parquet(str(customers_path))
    query = (features.join(active, on="customer_id", how="left").with_columns(pl.col(TARGET).fill_null(1))
             .join(customers, on="customer_id", how="left").sort("customer_id")
             .select(output_columns()))
    return query.collect()


def duckdb_sql(events_path: Path, customers_path: Path) -> str:
    """One SQL query: the windows as ``FILTER`` clauses of one group-by."""
    cutoff = f"TIMESTAMP '{AS_OF}'"
    aggregates, derived = [], []
    for window, days in WINDOWS.items():
        inside = "TRUE" if days is None else f"date >= {cutoff} - INTERVAL {days} DAY"
        aggregates += [
            f"count(*) FILTER (WHERE {inside}) AS orders_{window}",
            f"coalesce(sum(dollar_value) FILTER (WHERE {inside}), 0) AS spend_{window}",
            f"avg(number_of_cds) FILTER (WHERE {inside}) AS cds_{window}",
            f"min(date) FILTER (WHERE {inside}) AS first_{window}",
            f"max(date) FILTER (WHERE {inside}) AS last_{window}",
        ]
    for name in FEATURES:
        for window in WINDOWS:
            first, last, orders = f"first_{window}", f"last_{window}", f"orders_{window}"
            derived.append({
                "recency_days": f"epoch({cutoff} - {last}) / 86400",
                "tenure_days": f"epoch({cutoff} - {first}) / 86400",
                "gap_days": f"CASE WHEN {orders} > 1 THEN epoch({last} - {first}) / 86400 / ({orders} - 1) END",
            }.get(name, f"{name}_{window}") + f" AS {name}_{window}")
    events = f"read_parquet('{events_path / '*.parquet'}')"
    return f"""
        WITH features AS (
            SELECT customer_id, {', '.join(aggregates)}
            FROM {events} WHERE date < {cutoff} GROUP BY customer_id),
        active AS (
            SELECT DISTINCT customer_id FROM {events}
            WHERE date >= {cutoff} AND date < {cutoff} + INTERVAL {HORIZON_DAYS} DAY)
        SELECT f.customer_id, {cutoff} AS as_of, {', '.join(derived)},
               CAST(a.customer_id IS NULL AS TINYINT) AS {TARGET}, {', '.join('c.' + a for a in ATTRIBUTES)}
        FROM features f
        LEFT JOIN active a ON f.customer_id = a.customer_id
        LEFT JOIN read_parquet('{customers_path}') c ON f.customer_id = c.customer_id
        ORDER BY f.customer_id"""


def duckdb_work(events_path: Path, customers_path: Path, timer: dict[str, float]) -> Any:
    import duckdb

    return duckdb.connect().sql(duckdb_sql(events_path, customers_path)).to_arrow_table()


# What each engine imports before its work is timed (a library's import is not the work). The
# pipeline's sides import ``pipeline`` first, as its command line does: it sets pyarrow's allocator
# before pandas loads pyarrow (pipeline.core.host_memory).
IMPORTS = {
    "pandas": ("pandas", "pyarrow.parquet"),
    "pipeline": ("pipeline", "pandas", "pyarrow.parquet", "polars", "pipeline.backends", "pipeline.events",
                 "pipeline.stages.join"),
    FAST_ENGINE: ("pipeline", "pandas", "pyarrow.parquet", "polars", "pipeline.backends", "pipeline.events",
                  "pipeline.stages.join"),
    "polars": ("polars",),
    "duckdb": ("duckdb", "pyarrow"),
    GPU_ENGINE: ("pipeline", "pandas", "pyarrow.parquet", "cudf", "pipeline.backends", "pipeline.events", "pipeline.stages.join"),
    DASK: ("pipeline", "pandas", "pyarrow.parquet", "polars", "distributed", "dask.dataframe", "pipeline.backends",
           "pipeline.events", "pipeline.stages.join"),
}
WORK = {"pandas": pandas_work, "pipeline": pipeline_work, FAST_ENGINE: pipeline_work, "polars": polars_work,
        "duckdb": duckdb_work, GPU_ENGINE: pipeline_gpu_work}


def save_result(result: Any, path: Path) -> None:
    """Write an engine's output as Parquet, for the equality check."""
    kind = type(result).__module__.split(".")[0]
    if kind == "polars":
        result.write_parquet(path)
    elif kind == "pyarrow":
        import pyarrow.parquet as pq

        pq.write_table(result, path)
    else:
        result.to_parquet(path, index=False)


def dask_work(events_path: Path, customers_path: Path, timer: dict[str, float], *, workers: int,
              memory_limit: int, out: Path, save: Path | None, stall_s: float) -> dict[str, Any]:
    """The pipeline's functions on a local Dask cluster; the result written as partitioned Parquet."""
    import logging

    from distributed import Client, LocalCluster

    from pipeline.backends import get_backend
    from pipeline.backends.dask_collections import compute_lazy
    from pipeline.backends.clusters.startup import worker_environment, worker_preload
    from pipeline.backends.clusters.worker_memory import register_memory_release

    logging.getLogger("distributed.shuffle").setLevel(logging.ERROR)
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, memory_limit=memory_limit,
                      host="127.0.0.1", dashboard_address=":0", silence_logs=logging.ERROR,
                      local_directory=str(out.parent / "dask-worker-space"),
                      preload=worker_preload(), env=worker_environment(1)) as cluster, Client(cluster) as client:
        client.wait_for_workers(workers)
        register_memory_release(client)                 # as the pipeline's own local clusters do
        started_workers = set(client.scheduler_info()["workers"])
        watch = PauseWatch(client, stall_s, memory_limit, out.with_name(out.name + ".failure"))
        watch.start()
        timer["start"] = time.perf_counter()           # the work, not the cluster's start
        cpu = get_backend("cpu")
        events = cpu.read_partitioned(events_path, format="parquet")
        customers = cpu.read_partitioned(customers_path, format="parquet")
        result = pipeline_steps(events, customers)
        if save is not None:
            compute_lazy(result)[0].to_parquet(save, index=False)
        else:                                       # as the pipeline writes a partitioned table
            compute_lazy(result.to_parquet(out, write_index=False, compute=False))
        timer["end"] = time.perf_counter()
        watch.stop()
        spill = client.run(_worker_spill)
        final_workers = set(client.scheduler_info()["workers"])
        return {
            "workers": workers, "memory_limit_bytes": memory_limit, "partitions": int(events.npartitions),
            "spilled_bytes": int(sum(s["bytes"] for s in spill.values())),
            "spilled_count": int(sum(s["count"] for s in spill.values())),
            "spill_per_worker": spill,
            "paused_s": round(watch.paused_s, 1),
            "workers_replaced": len(started_workers - final_workers),
        }


class PauseWatch:
    """Ends the run when every worker has stayed paused for ``stall_s`` seconds, and adds up the time
    any worker was paused.

    A worker pauses when its process memory passes ``distributed.worker.memory.pause`` (80%) of its
    limit: it then runs no task until it falls back, which unmanaged memory (the libraries, an allocator
    holding freed pages) never does, so a run whose workers are all paused waits forever.
    """

    def __init__(self, client: Any, stall_s: float, memory_limit: int, report: Path, every: float = 2.0) -> None:
        import threading

        self.client, self.stall_s, self.memory_limit, self.every = client, stall_s, memory_limit, every
        self.report = report                     # the reason, for the parent (stderr ends with shutdown noise)
        self.paused_s = 0.0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pause-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._done.set()
        self._thread.join()

    def _run(self) -> None:
        all_paused_since: float | None = None
        last = time.perf_counter()
        while not self._done.wait(self.every):
            try:
                states = self.client.run(_worker_state)
            except Exception:  # noqa: BLE001 - a worker restarting; look again next time
                continue
            now = time.perf_counter()
            paused = [s for s in states.values() if s["status"] == "paused"]
            if paused:
                self.paused_s += now - last
            last = now
            if not (states and len(paused) == len(states)):
                all_paused_since = None
                continue
            all_paused_since = all_paused_since or now
            if now - all_paused_since >= self.stall_s:
                rss = ", ".join(f"{s['rss'] / MiB:,.0f}" for s in states.values())
                why = (f"every Dask worker paused for {now - all_paused_since:.0f} s (process memory {rss} MiB of "
                       f"{self.memory_limit / MiB:,.0f} MiB each: above the pause threshold); the run cannot finish: "
                       f"raise --dask-memory-limit")
                self.report.write_text(why)
                print(why, file=sys.stderr, flush=True)
                os._exit(3)


def _worker_state(dask_worker: Any) -> dict[str, Any]:
    """The worker's status (running / paused / ...) and its process memory."""
    return {"status": dask_worker.status.name, "rss": dask_worker.monitor.get_process_memory()}


def _worker_spill(dask_worker: Any) -> dict[str, float]:
    """What this worker's memory manager wrote to disk (pickled bytes, pieces) since it started."""
    metrics = getattr(dask_worker.data, "cumulative_metrics", {})
    return {"bytes": metrics.get(("disk-write", "bytes"), 0), "count": metrics.get(("disk-write", "count"), 0)}


def child_main(argv: list[str]) -> int:
    """One engine, one size: do the work, write what it measured as JSON (``--result``)."""
    parser = argparse.ArgumentParser(prog="bench_events.py --child")
    parser.add_argument("--child", choices=ENGINES, required=True)
    parser.add_argument("--events", type=Path, required=True)
    parser.add_argument("--customers", type=Path, required=True)
    parser.add_argument("--result", type=Path, required=True)
    parser.add_argument("--save", type=Path, help="also write the output here (Parquet), for the check")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--memory-limit", type=int, default=0)
    parser.add_argument("--stall", type=float, default=300)
    args = parser.parse_args(argv)
    if args.child == FAST_ENGINE:
        os.environ["PIPELINE_REDUCTIONS"] = "fast"
    for module in IMPORTS[args.child]:
        importlib.import_module(module)
    info: dict[str, Any] = {"engine": args.child, "rss_before_work_bytes": _rss_now()}
    timer = {"start": time.perf_counter()}
    if args.child == DASK:
        written = args.result.with_name(args.result.stem + "-output")
        info["dask"] = dask_work(args.events, args.customers, timer, workers=args.workers,
                                 memory_limit=args.memory_limit, out=written, save=args.save,
                                 stall_s=args.stall)
        import pyarrow.parquet as pq

        source = args.save or written
        info["rows_out"] = pq.ParquetDataset(source).read(columns=["customer_id"]).num_rows
        info["columns"] = pq.read_schema(source if source.is_file() else next(source.glob("*.parquet"))).names
    else:
        result = WORK[args.child](args.events, args.customers, timer)
        timer["end"] = time.perf_counter()
        info["rows_out"] = len(result)
        info["columns"] = [str(c) for c in result.columns]
        if args.save is not None:
            save_result(result, args.save)
    info["work_s"] = round(timer["end"] - timer["start"], 3)
    if "read_s" in timer:
        info["read_s"] = round(timer["read_s"], 3)
    info["vm_hwm_bytes"] = _vm_hwm()
    args.result.write_text(json.dumps(info, default=str))
    return 0


def _rss_now() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _vm_hwm() -> int:
    """This process's peak RSS since its exec (``ru_maxrss`` would also count the parent's pages it was
    forked with)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


# ---------------------------------------------------------------------------------------------
# the parent: data, child runs, the check, the table


def parse_size(text: str) -> int:
    """'1M' -> 1000000, '50m' -> 50000000, '20000' -> 20000, '2.5M' -> 2500000."""
    s = text.strip().lower().replace("_", "").replace(",", "")
    scale = {"k": 10**3, "m": 10**6, "g": 10**9}.get(s[-1:], 1)
    try:
        value = float(s[:-1] if scale > 1 else s) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 1M, 50M, 20000)") from None
    if value < 1 or value != int(value):
        raise argparse.ArgumentTypeError(f"not a whole positive number of events: {text!r}")
    return int(value)


def size_list(text: str) -> list[int]:
    return sorted({parse_size(t) for t in text.split(",") if t.strip()})


def engine_list(text: str) -> list[str]:
    names = [t.strip() for t in text.split(",") if t.strip()]
    unknown = [n for n in names if n not in ENGINES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown engine(s) {unknown}; choose from {', '.join(ENGINES)}")
    return [e for e in ENGINES if e in names]


def label_size(rows: int) -> str:
    return f"{rows // 10**6}M" if rows % 10**6 == 0 else f"{rows:,}"


def rel(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def ensure_events(rows: int, seed: int, data_dir: Path, regenerate: bool) -> dict[str, Any]:
    """The generated events of ``rows`` rows (reused when complete); what ``_COMPLETE.json`` says."""
    folder = data_dir / f"events_{rows}_s{seed}"
    marker = folder / "_COMPLETE.json"
    if marker.exists() and not regenerate:
        from generate_events import VERSION

        info = json.loads(marker.read_text())
        if info.get("rows") == rows and info.get("seed") == seed and info.get("version") == VERSION:
            print(f"data: reusing {rel(folder)}", file=sys.stderr)
            return {**info, "folder": folder}
    cmd = [sys.executable, str(SCRIPTS / "generate_events.py"), "--rows", str(rows), "--seed", str(seed),
           "--output", str(folder)]
    started = time.perf_counter()
    subprocess.run(cmd, check=True, cwd=REPO)
    print(f"data: generated in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return {**json.loads(marker.read_text()), "folder": folder}


def warm_page_cache(folder: Path) -> None:
    """Read the files once so the first engine does not pay the cold read."""
    for path in sorted(folder.rglob("*.parquet")):
        with open(path, "rb") as fh:
            while fh.read(1 << 24):
                pass


def dask_memory_limit(data: dict[str, Any], workers: int, setting: str) -> int:
    """Bytes per worker: ``setting`` ('auto' or a size), auto = DASK_DATA_SHARE x in-memory events / workers."""
    if setting != "auto":
        from bench_scaleout import parse_bytes

        return parse_bytes(setting)
    share = int(data["events_memory_bytes"] * DASK_DATA_SHARE / workers)
    return max(share, DASK_MIN_WORKER_BYTES)


def run_child(engine: str, data: dict[str, Any], work: Path, tag: str, *, save: Path | None = None,
              workers: int = 2, memory_limit: int = 0, stall: float = 300, interval: float,
              timeout: float) -> dict[str, Any]:
    """One engine in a child process of its own group: wall time, peak RSS, CPU time and its own report."""
    from bench_scaleout import TreeSampler

    result_path = work / f"{tag}.json"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", engine,
           "--events", str(data["folder"] / "events"), "--customers", str(data["folder"] / "customers.parquet"),
           "--result", str(result_path)]
    if save is not None:
        cmd += ["--save", str(save)]
    if engine == DASK:
        cmd += ["--workers", str(workers), "--memory-limit", str(memory_limit), "--stall", str(stall)]
    with open(work / f"{tag}.out", "wb") as out, open(work / f"{tag}.err", "wb") as err:
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=err, start_new_session=True)
        sampler = TreeSampler(proc.pid)
        timed_out = False
        try:
            while True:
                pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
                if pid:
                    break
                sampler.sample()
                if time.perf_counter() - started > timeout and not timed_out:
                    timed_out = True
                    os.killpg(proc.pid, signal.SIGKILL)
                time.sleep(interval)
        except BaseException:              # Ctrl-C: do not leave the child's group running
            _kill_group(proc.pid)
            raise
        wall = time.perf_counter() - started
    _kill_group(proc.pid)                  # a worker the child left behind
    proc.returncode = os.waitstatus_to_exitcode(status)
    run: dict[str, Any] = {
        "engine": engine, "wall_s": round(wall, 3), "exit_status": proc.returncode, "timed_out": timed_out,
        "tree_peak_rss_bytes": sampler.peak_total, "cpu_s": round(usage.ru_utime + usage.ru_stime, 3),
        "samples": sampler.samples,
    }
    if proc.returncode == 0 and result_path.exists():
        run.update(json.loads(result_path.read_text()))
        run["succeeded"] = True
        # One process: its own high-water mark. Dask: the sampled peak of the tree's sum (workers included).
        run["peak_rss_bytes"] = max(run["vm_hwm_bytes"], sampler.peak_total if engine == DASK else 0)
    else:
        run["succeeded"] = False
        run["stderr_tail"] = (work / f"{tag}.err").read_text(errors="replace")[-3000:]
        why = "timed out" if timed_out else f"exit status {proc.returncode}"
        reason = work / f"{tag}-output.failure"
        detail = reason.read_text() if reason.exists() else _last_line(run["stderr_tail"])
        run["failure"] = f"{engine} on {data['rows']:,} events: {why}: {detail}"
    if engine == DASK:
        run["processes"] = [{"pid": p["pid"], "role": p["role"], "peak_rss_bytes": p["peak_rss_bytes"]}
                            for p in sampler.report([])]
    return run


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _last_line(text: str) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1][:500] if lines else "(no output)"


def compare_outputs(reference: Path, other: Path, tolerance: float) -> list[str]:
    """Differences between an engine's output and the pandas one: columns, rows, values."""
    import numpy as np
    import pandas as pd

    want = pd.read_parquet(reference).sort_values("customer_id", kind="stable").reset_index(drop=True)
    got = pd.read_parquet(other)
    if set(got.columns) != set(want.columns):
        return [f"columns differ: missing {sorted(set(want.columns) - set(got.columns))}, "
                f"extra {sorted(set(got.columns) - set(want.columns))}"]
    got = got[list(want.columns)].sort_values("customer_id", kind="stable").reset_index(drop=True)
    if len(got) != len(want):
        return [f"{len(got):,} rows where pandas has {len(want):,}"]
    problems = []
    for name in want.columns:
        a, b = want[name], got[name]
        if pd.api.types.is_datetime64_any_dtype(a):
            same = (a.astype("datetime64[us]").to_numpy() == pd.to_datetime(b).astype("datetime64[us]").to_numpy())
        elif pd.api.types.is_numeric_dtype(a) and pd.api.types.is_numeric_dtype(b):
            x, y = a.astype("float64").to_numpy(), b.astype("float64").to_numpy()
            same = np.isclose(x, y, rtol=tolerance, atol=tolerance, equal_nan=True)
        else:
            same = (a.isna().to_numpy() & b.isna().to_numpy()) | (a.astype(object) == b.astype(object)).to_numpy()
        if not same.all():
            i = int(np.flatnonzero(~same)[0])
            problems.append(f"{name}: {int((~same).sum()):,} value(s) differ, e.g. customer "
                            f"{want['customer_id'].iloc[i]}: pandas {a.iloc[i]!r}, this {b.iloc[i]!r}")
    return problems


def check_outputs(engines: list[str], data: dict[str, Any], work: Path, args: argparse.Namespace,
                  dask_limit: int) -> tuple[dict[str, Any], list[str]]:
    """Every engine once on ``data`` with its output saved; each compared with the pandas output."""
    saved: dict[str, Path] = {}
    report: dict[str, Any] = {"rows": data["rows"], "engines": {}}
    failures: list[str] = []
    for engine in [BASELINE, *[e for e in engines if e != BASELINE]]:
        print(f"check: {engine} on {data['rows']:,} events ...", file=sys.stderr, flush=True)
        path = work / f"check-{engine}.parquet"
        run = run_child(engine, data, work, f"check-{engine}", save=path, workers=args.dask_workers,
                        memory_limit=dask_limit, stall=args.dask_stall, interval=args.interval, timeout=args.timeout)
        if not run["succeeded"]:
            failures.append(f"check: {run['failure']}")
            report["engines"][engine] = {"succeeded": False, "problems": [run["failure"]]}
            continue
        saved[engine] = path
        problems = [] if engine == BASELINE else (
            compare_outputs(saved[BASELINE], path, args.tolerance) if BASELINE in saved
            else ["no pandas output to compare with"])
        report["engines"][engine] = {"succeeded": True, "rows_out": run["rows_out"], "problems": problems,
                                     "agrees": not problems}
        failures += [f"check: {engine} differs from pandas: {p}" for p in problems]
        print(f"  {'agrees with pandas' if not problems else 'DIFFERS: ' + '; '.join(problems)} "
              f"({run['rows_out']:,} rows)", file=sys.stderr)
    return report, failures


def summarise(runs: list[dict[str, Any]], engines: list[str], sizes: list[int]) -> list[dict[str, Any]]:
    """One row per (size, engine): medians over its successful runs and the ratios to pandas."""
    rows = []
    for size in sizes:
        base: dict[str, float] = {}
        for engine in engines:
            mine = [r for r in runs if r["size"] == size and r["engine"] == engine]
            if not mine:
                continue
            ok = [r for r in mine if r["succeeded"]]
            row: dict[str, Any] = {"size": size, "engine": engine, "runs": len(mine), "succeeded": len(ok)}
            if ok:
                row.update({
                    "seconds": statistics.median(r["work_s"] for r in ok),
                    "wall_s": statistics.median(r["wall_s"] for r in ok),
                    "cpu_s": statistics.median(r["cpu_s"] for r in ok),
                    "peak_rss_bytes": statistics.median(r["peak_rss_bytes"] for r in ok),
                    "rows_out": ok[0]["rows_out"],
                })
                if engine == DASK:
                    d = ok[0]["dask"]
                    row.update({"memory_limit_bytes": d["memory_limit_bytes"], "workers": d["workers"],
                                "spilled_bytes": d["spilled_bytes"], "spilled": d["spilled_bytes"] > 0,
                                "paused_s": d["paused_s"],
                                "workers_replaced": d["workers_replaced"]})
            if engine == BASELINE and ok:
                base = {"seconds": row["seconds"], "peak": row["peak_rss_bytes"]}
            if ok and base:
                row["time_ratio"] = round(row["seconds"] / base["seconds"], 3)
                row["memory_ratio"] = round(row["peak_rss_bytes"] / base["peak"], 3)
            rows.append(row)
    return rows


def dask_note(row: dict[str, Any], events_bytes: int) -> str:
    """'2 x 558 MiB = 0.90 x the events; spilled 812 MiB; paused 40 s': the limit and what it did."""
    limit = row["workers"] * row["memory_limit_bytes"]
    parts = [f"{row['workers']} x {row['memory_limit_bytes'] / MiB:,.0f} MiB = {limit / events_bytes:.2f} x the events",
             f"spilled {row['spilled_bytes'] / MiB:,.0f} MiB" if row["spilled"] else "no spill"]
    if row["paused_s"]:
        parts.append(f"paused {row['paused_s']:.0f} s")
    if row["workers_replaced"]:
        parts.append(f"{row['workers_replaced']} worker(s) replaced")
    return "; ".join(parts)


def markdown(rows: list[dict[str, Any]], data: dict[int, dict[str, Any]], command: str, repeats: int) -> str:
    lines = [
        f"Events benchmark: aggregate (6 features x 4 windows) + label (churn, 180 d) + left join, "
        f"median of {repeats} run(s) (the Dask run: 1), {os.cpu_count()} CPUs, Python {platform.python_version()}:",
        "",
        "| events | engine | seconds | peak MiB | time / pandas | peak / pandas | CPU s | wall s |",
        "|--:|---|--:|--:|--:|--:|--:|--:|",
    ]
    for r in rows:
        name = r["engine"]
        if "seconds" not in r:
            lines.append(f"| {label_size(r['size'])} | {name} | FAILED | | | | | |")
            continue
        if name == DASK:
            name += f" ({dask_note(r, data[r['size']]['events_memory_bytes'])})"
        tr, mr = r.get("time_ratio"), r.get("memory_ratio")
        lines.append(f"| {label_size(r['size'])} | {name} | {r['seconds']:.2f} | {r['peak_rss_bytes'] / MiB:,.0f} | "
                     f"{'-' if tr is None else f'{tr:.2f}'} | {'-' if mr is None else f'{mr:.2f}'} | "
                     f"{r['cpu_s']:.1f} | {r['wall_s']:.1f} |")
    lines += ["", "Data: " + "; ".join(
        f"{label_size(n)}: {d['customers']:,} customers, {d['events_bytes'] / MiB:,.0f} MiB Parquet, "
        f"{d['events_memory_bytes'] / MiB:,.0f} MiB in memory" for n, d in sorted(data.items())),
        f"Targets for the pipeline: time / pandas <= {TIME_TARGET:.2f}, peak / pandas <= {MEMORY_TARGET:.2f}.",
        "", f"Command: `{command}`"]
    return "\n".join(lines)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=size_list, default=size_list("1M,10M,50M"),
                        help="events per table, comma-separated (default 1M,10M,50M)")
    parser.add_argument("--repeats", type=int, default=2, help="rounds of the in-process engines (default 2)")
    parser.add_argument("--engines", type=engine_list, default=list(DEFAULT_ENGINES),
                        help=f"engines to run (default {','.join(DEFAULT_ENGINES)}; {GPU_ENGINE}, the same "
                             f"functions on cuDF, needs a GPU with RAPIDS; {FAST_ENGINE}, the same with Polars' "
                             "own float sums)")
    parser.add_argument("--dask-sizes", type=size_list, help="sizes the Dask engine runs at (default: the largest)")
    parser.add_argument("--dask-workers", type=int, default=2, help="local Dask workers (default 2)")
    parser.add_argument("--dask-memory-limit", default="auto",
                        help=f"memory_limit per worker: a size (e.g. 600MiB) or auto = {DASK_DATA_SHARE:g} x the "
                             f"events' in-memory size / workers, at least {DASK_MIN_WORKER_BYTES // MiB} MiB "
                             f"(default auto)")
    parser.add_argument("--dask-stall", type=float, default=300,
                        help="end a Dask run whose workers have all been paused (memory above 80%% of their "
                             "limit) this many seconds (default 300)")
    parser.add_argument("--tolerance", type=float, default=1e-9,
                        help="relative (and absolute) tolerance of the output check (default 1e-9)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the generated data (default 0)")
    parser.add_argument("--data-dir", type=Path, default=REPO / "bench-data",
                        help="where the generated tables are kept (default bench-data/, git-ignored)")
    parser.add_argument("--regenerate", action="store_true", help="generate the tables even if they exist")
    parser.add_argument("--interval", type=float, default=0.1, help="RSS sampling interval, seconds (default 0.1)")
    parser.add_argument("--timeout", type=float, default=3600,
                        help="seconds per run before it is killed (default 3600)")
    parser.add_argument("--output", type=Path, default=REPO / "bench-data" / "events-bench.json",
                        help="the results as JSON (default bench-data/events-bench.json)")
    parser.add_argument("--keep", action="store_true", help="keep the runs' outputs and logs (path printed)")
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.dask_workers < 1:
        parser.error("--repeats and --dask-workers must be at least 1")
    if args.dask_memory_limit != "auto":
        from bench_scaleout import parse_bytes

        try:
            parse_bytes(args.dask_memory_limit)
        except argparse.ArgumentTypeError as exc:
            parser.error(f"--dask-memory-limit: {exc}")
    args.dask_sizes = args.dask_sizes or [max(args.sizes)]
    if not set(args.dask_sizes) <= set(args.sizes):
        parser.error(f"--dask-sizes {args.dask_sizes} must be among --sizes {args.sizes}")
    return args


def reproducing_command(args: argparse.Namespace) -> str:
    """The command that reproduces the numbers (where results and data go does not matter)."""
    command = (f"python scripts/bench_events.py --sizes {','.join(label_size(n).replace(',', '') for n in args.sizes)}"
               f" --repeats {args.repeats}")
    for flag, value, default in (("--engines", ",".join(args.engines), ",".join(DEFAULT_ENGINES)),
                                 ("--dask-sizes", ",".join(map(str, args.dask_sizes)), str(max(args.sizes))),
                                 ("--dask-workers", args.dask_workers, 2),
                                 ("--dask-memory-limit", args.dask_memory_limit, "auto"),
                                 ("--dask-stall", f"{args.dask_stall:g}", "300"), ("--seed", args.seed, 0)):
        if str(value) != str(default):
            command += f" {flag} {value}"
    return command


def time_size(size: int, data: dict[str, Any], work: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The timed runs at one size: ``--repeats`` rounds of the in-process engines (order reversed every
    round), then the Dask run when this size is one of ``--dask-sizes``."""
    runs = []
    in_process = [e for e in args.engines if e in IN_PROCESS]
    warm_page_cache(data["folder"])
    for i in range(args.repeats):
        for engine in in_process if i % 2 == 0 else in_process[::-1]:
            print(f"{label_size(size)} [{i + 1}/{args.repeats}] {engine} ...", end=" ", flush=True, file=sys.stderr)
            run = run_child(engine, data, work, f"{size}-{i}-{engine}", interval=args.interval, timeout=args.timeout)
            runs.append({"size": size, "repeat": i, **run})
            _print_run(run)
    if DASK in args.engines and size in args.dask_sizes:
        limit = dask_memory_limit(data, args.dask_workers, args.dask_memory_limit)
        print(f"{label_size(size)} {DASK} ({args.dask_workers} x {limit / MiB:,.0f} MiB) ...", end=" ",
              flush=True, file=sys.stderr)
        run = run_child(DASK, data, work, f"{size}-dask", workers=args.dask_workers, memory_limit=limit,
                        stall=args.dask_stall, interval=args.interval, timeout=args.timeout)
        runs.append({"size": size, "repeat": 0, **run})
        _print_run(run)
    return runs


def check_verdict(check: dict[str, Any]) -> str:
    checked = check["engines"].values()
    if all(e.get("agrees") for e in checked):
        return "outputs agree with pandas"
    if any(e["succeeded"] and e.get("problems") for e in checked):
        return "OUTPUTS DIFFER"
    return "OUTPUT CHECK INCOMPLETE (an engine failed)"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--child" in argv:
        return child_main(argv)
    args = parse_args(argv)
    command = reproducing_command(args)
    data_dir = args.data_dir.resolve()
    data = {n: ensure_events(n, args.seed, data_dir, args.regenerate) for n in args.sizes}
    work = data_dir / f"events-runs-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"   # Dask spills here
    work.mkdir(parents=True)
    failures: list[str] = []
    runs: list[dict[str, Any]] = []
    load_before = os.getloadavg()
    started_all = time.perf_counter()
    try:
        smallest = data[min(args.sizes)]
        warm_page_cache(smallest["folder"])
        check, problems = check_outputs(args.engines, smallest, work, args,
                                        dask_memory_limit(smallest, args.dask_workers, args.dask_memory_limit))
        failures += problems
        for size in args.sizes:
            timed = time_size(size, data[size], work, args)
            runs += timed
            failures += [r["failure"] for r in timed if not r["succeeded"]]
            failures += _row_count_mismatches(timed, size)
    finally:
        if args.keep:
            print(f"outputs and logs kept in {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    load_after = os.getloadavg()

    rows = summarise(runs, args.engines, args.sizes)
    table = markdown(rows, data, command, args.repeats)
    print()
    if failures:
        print("FAILURES:\n  " + "\n  ".join(failures) + "\n")
    print(check_verdict(check))
    print(f"load average before/after: {load_before[0]:.2f} / {load_after[0]:.2f} (1-minute); "
          f"took {(time.perf_counter() - started_all) / 60:.1f} min")
    print()
    print(table)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps({
        "command": command, "sizes": args.sizes, "repeats": args.repeats, "engines": args.engines,
        "seed": args.seed, "dask_sizes": args.dask_sizes,
        "work": {"as_of": AS_OF, "windows": list(WINDOWS), "features": FEATURES, "horizon_days": HORIZON_DAYS,
                 "target": TARGET, "join": list(ATTRIBUTES)},
        "targets": {"time_ratio": TIME_TARGET, "memory_ratio": MEMORY_TARGET},
        "data": {str(n): {k: v for k, v in d.items() if k != "folder"} | {"folder": rel(d["folder"])}
                 for n, d in data.items()},
        "host": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
                 "load_average_before": load_before, "load_average_after": load_after},
        "succeeded": not failures, "failures": failures, "check": check,
        "table": rows, "runs": runs, "markdown": table,
    }, indent=2, default=str))
    print(f"\nresults written to {args.output}", file=sys.stderr)
    return 1 if failures else 0


def _print_run(run: dict[str, Any]) -> None:
    if run["succeeded"]:
        print(f"{run['work_s']:.2f} s, peak {run['peak_rss_bytes'] / MiB:,.0f} MiB, CPU {run['cpu_s']:.1f} s",
              file=sys.stderr)
    else:
        print("FAILED", file=sys.stderr)


def _row_count_mismatches(runs: list[dict[str, Any]], size: int) -> list[str]:
    """Every engine must return as many rows as pandas at every size, not only where outputs are compared."""
    counts = {r["engine"]: r["rows_out"] for r in runs if r["size"] == size and r["succeeded"]}
    base = counts.get(BASELINE)
    return [f"{engine} returned {n:,} rows on {size:,} events where pandas returned {base:,}"
            for engine, n in counts.items() if base is not None and n != base]


if __name__ == "__main__":
    sys.path.insert(0, str(SCRIPTS))
    sys.exit(main())
