#!/usr/bin/env python
"""Scale-out: ``pipeline run configs/churn_partitioned.yaml`` on data larger than the workers' memory,
1 worker against 2 on data that fits, and external-memory training against xgboost.dask's.

Generates (or reuses) Telco-schema churn tables as many CSV files: part ``i`` is written by its own
``scripts/generate_churn.py`` process with seed ``seed * 100000 + i`` (``--part-rows`` rows per
part, default 1M, so no process holds more than that; ``--jobs`` processes at a time), under
``bench-data/scaleout_<rows>_s<seed>/part-NNNN.csv`` (a ``_COMPLETE.json`` marks a finished table;
``--regenerate`` redoes it). Each run is a child process

    pipeline run configs/churn_partitioned.yaml --until xgb --runs-dir bench-data/scaleout-runs-.../
        --set device=cpu --set cluster.n_workers=N --set cluster.threads_per_worker=1
        --set cluster.memory_limit=M --set stages.raw.path=<folder>/part-*.csv --set stages.raw.blocksize=B

(``--until xgb``: ``evaluate`` and ``export`` are skipped), for

  (1) larger than memory: ``--rows`` rows (default 25M), N = ``--workers`` (default 2),
      M = ``--memory-limit`` (default 1GiB per worker), B = ``--blocksize`` (default 32MiB);
  (2) scaling: ``--fit-rows`` rows (default 1M, in ``--fit-parts`` files, default 4), N = 1 and
      N = 2, M = ``--fit-memory-limit`` (default 4GiB), alternately ``--repeats`` times each
      (1,2 / 2,1 / 1,2 ... so drift on a shared machine falls on both sides); it reports the
      median wall times, their ratio time(1 worker) / time(2 workers), and per-stage medians.

For each run it measures the wall time, reads the run's ``manifest.json`` (status; per stage:
seconds, peak RSS of the worker process that ran the stage's task, worker, facts) and samples,
every ``--interval`` seconds (default 0.25) with psutil, the RSS of the ``pipeline`` process (Dask
client, scheduler and nannies live in it) and of all its descendants (the LocalCluster worker
processes, started by the nannies through ``multiprocessing.spawn``, and the resource tracker),
keeping each process's peak, and the peak of their sum. A worker process is named by its address
when one of its listening ports is that of a worker in the manifest. Each run has its own process
group, ended on ``--timeout`` (default 3600 s per run) or Ctrl-C. Runs pass ``--no-cache`` (each
has a fresh runs folder anyway), so every stage computes. ``--dask-config KEY=VALUE`` passes Dask
configuration to the runs as ``DASK_*`` environment variables.

The in-memory size of a table is an ESTIMATE: ``part-0000.csv`` read with
``pandas.read_csv(na_values=[" "])`` (pandas 3: text columns are Arrow-backed ``str``), its
``memory_usage(deep=True).sum()`` divided by its rows, times the table's rows (= the part's size
times the number of parts, the parts having equal rows by default). Measured here (pandas 3.0.6,
pyarrow 26.0.1): 272 bytes per row in memory, 138 bytes per row of CSV; the default 25M rows are
3.22 GiB of CSV, 6.32 GiB in memory, 3.16 times the 2 x 1 GiB the two workers may use (the
target is at least 3). Customer ids are unique within a part, not across parts (a few thousand
of 25M collide); no stage needs them unique.

    python scripts/bench_scaleout.py --rows 25000000 --fit-rows 1000000 --repeats 2 \
        --output bench-data/scaleout-results.json

Training streams too: ``xgb`` trains through XGBoost's external memory by default (each worker
reads its share of the featurized Parquet files one at a time into an ExtMemQuantileDMatrix;
pipeline/distributed/xgboost_external.py), so the large run goes through ``xgb`` at 3x the workers'
memory. ``xgboost.dask`` (``external_memory: false``) instead fits each worker on all of its
partitions at once and, with 1 GiB workers, fails there: the nanny restarts the workers and the
stage fails naming one (the failure and the stderr tail are in the output).
``--large-until features`` measures only the stages before training.

  (3) training: on the table that fits, with 2 workers, the ``xgb`` stage with
      ``external_memory: true`` and ``false`` alternately ``--repeats`` times each; it reports
      the median stage seconds, their ratio and the workers' peak RSS.

Exit status: 0 when every run succeeded (exit status 0 and manifest status "succeeded"), 1 when
any run failed or timed out; the failures (the failing stage's error, the end of the run's
stderr) are printed and written to the JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psutil

# Run as `python scripts/bench_scaleout.py`: this folder is on sys.path, and the sibling
# benchmark already knows how to find the `pipeline` command of this environment.
from bench_overhead import pipeline_executable  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = REPO / "scripts"
DEFAULT_CONFIG = REPO / "configs" / "churn_partitioned.yaml"
RATIO_TARGET = 3.0          # in-memory data / total worker memory limit, for the large run
MiB = 2**20
GiB = 2**30
_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9,
          "t": 10**12, "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_bytes(text: str) -> int:
    """'1GiB' -> 1073741824, '4GB' -> 4000000000 (as Dask reads memory_limit)."""
    s = text.strip().lower().replace(" ", "")
    number = s.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = s[len(number):]
    if unit not in _UNITS or not number:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 1GiB, 512MiB, 4GB)")
    return int(float(number) * _UNITS[unit])


def size_arg(text: str) -> str:
    parse_bytes(text)
    return text


def rel(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


# ---------------------------------------------------------------------------------------------
# data


def ensure_parts(rows: int, part_rows: int, seed: int, folder: Path, regenerate: bool, jobs: int) -> dict[str, Any]:
    """``rows`` rows as ceil(rows / part_rows) CSV files in ``folder``; reused when complete.

    Part ``i`` is ``generate_churn.py --rows <part rows> --seed <seed * 100000 + i>``, so every
    generator process holds at most ``part_rows`` rows. A ``_COMPLETE.json`` written last marks a
    finished table (an interrupted generation is redone, not reused).
    """
    sizes = [min(part_rows, rows - start) for start in range(0, rows, part_rows)]
    marker = folder / "_COMPLETE.json"
    wanted = {"rows": rows, "part_rows": part_rows, "seed": seed, "parts": len(sizes)}
    paths = [folder / f"part-{i:04d}.csv" for i in range(len(sizes))]
    if marker.exists() and not regenerate:
        try:
            done = json.loads(marker.read_text())
        except ValueError:
            done = {}
        if all(done.get(k) == v for k, v in wanted.items()) and all(p.exists() for p in paths):
            print(f"data: reusing {rel(folder)} ({len(paths)} parts)", file=sys.stderr)
            return {"folder": folder, "paths": paths, "rows_per_part": sizes}
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    started = time.perf_counter()
    print(f"data: generating {rows:,} rows as {len(sizes)} CSV files in {rel(folder)} "
          f"({jobs} at a time) ...", file=sys.stderr)

    def one(i: int) -> None:
        cmd = [sys.executable, str(SCRIPTS / "generate_churn.py"), "--rows", str(sizes[i]),
               "--seed", str(seed * 100_000 + i), "--output", str(paths[i])]
        done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"{shlex.join(cmd)} failed ({done.returncode}):\n{done.stderr[-2000:]}")

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for n, _ in enumerate(pool.map(one, range(len(sizes))), 1):
            if n % 5 == 0 or n == len(sizes):
                print(f"data: {n}/{len(sizes)} parts, {time.perf_counter() - started:.0f} s", file=sys.stderr)
    marker.write_text(json.dumps(wanted))
    print(f"data: generated in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return {"folder": folder, "paths": paths, "rows_per_part": sizes}


def describe_data(data: dict[str, Any]) -> dict[str, Any]:
    """Bytes on disk (all parts) and the estimated in-memory size (from part 0, see the docstring)."""
    paths: list[Path] = data["paths"]
    disk = sum(p.stat().st_size for p in paths)
    # In a child process, so this one does not keep the part's memory while the runs are sampled.
    code = ("import json, sys, pandas as pd; f = pd.read_csv(sys.argv[1], na_values=[' ']); "
            "print(json.dumps([int(f.memory_usage(deep=True).sum()), len(f)]))")
    out = subprocess.run([sys.executable, "-c", code, str(paths[0])], check=True, capture_output=True, text=True)
    part_memory, part_rows = json.loads(out.stdout)
    rows = sum(data["rows_per_part"])
    return {
        "folder": rel(data["folder"]), "glob": str(data["folder"] / "part-*.csv"), "parts": len(paths),
        "rows": rows, "csv_bytes": disk,
        "memory_part0_bytes": part_memory, "memory_part0_rows": part_rows,
        "memory_bytes_per_row": round(part_memory / part_rows, 2),
        "memory_estimate_bytes": int(round(part_memory / part_rows * rows)),
        "memory_estimate_method": "pandas.read_csv(part-0000.csv, na_values=[' ']).memory_usage(deep=True).sum()"
                                  " / rows of that part * rows of the table (= x number of parts for equal parts)",
    }


def warm_page_cache(paths: list[Path]) -> None:
    """Read the files once so the first run does not pay the cold read (when they fit the cache)."""
    for path in paths:
        with open(path, "rb") as fh:
            while fh.read(1 << 24):
                pass


# ---------------------------------------------------------------------------------------------
# one pipeline run, with the process tree's RSS sampled


def _role(proc_info: dict[str, Any], root_pid: int) -> str:
    if proc_info["pid"] == root_pid:
        return "pipeline (client, scheduler, nannies)"
    cmd = proc_info["cmdline"]
    if "resource_tracker" in cmd:
        return "multiprocessing resource tracker"
    if "forkserver" in cmd:
        return "multiprocessing forkserver"
    if "spawn_main" in cmd or "multiprocessing-fork" in cmd or "distributed" in cmd:
        return "dask worker"
    return "other"


class TreeSampler:
    """Peak RSS per process of a process tree, sampled with psutil."""

    def __init__(self, root_pid: int) -> None:
        self.root_pid = root_pid
        self.procs: dict[tuple[int, float], psutil.Process] = {}
        self.info: dict[tuple[int, float], dict[str, Any]] = {}
        self.peak_total = 0
        self.samples = 0

    def sample(self) -> None:
        try:
            root = psutil.Process(self.root_pid)
            tree = [root, *root.children(recursive=True)]
        except psutil.Error:
            return
        total = 0
        for proc in tree:
            try:
                key = (proc.pid, proc.create_time())
                if key not in self.info:
                    cmdline = " ".join(proc.cmdline())
                    self.procs[key] = proc
                    self.info[key] = {"pid": proc.pid, "ppid": proc.ppid(), "cmdline": cmdline,
                                      "peak_rss_bytes": 0, "listen_ports": [], "samples": 0}
                    self.info[key]["role"] = _role(self.info[key], self.root_pid)
                rss = self.procs[key].memory_info().rss
                info = self.info[key]
                info["peak_rss_bytes"] = max(info["peak_rss_bytes"], rss)
                total += rss
                info["samples"] += 1
                if info["role"] == "dask worker" and info["samples"] <= 40:   # its ports, while it starts
                    info["listen_ports"] = sorted(set(info["listen_ports"]) | {
                        c.laddr.port for c in self.procs[key].net_connections(kind="tcp")
                        if c.status == psutil.CONN_LISTEN})
            except psutil.Error:        # exited between listing and reading
                continue
        self.peak_total = max(self.peak_total, total)
        self.samples += 1

    def report(self, worker_addresses: list[str]) -> list[dict[str, Any]]:
        by_port = {}
        for address in worker_addresses:
            try:
                by_port[int(address.rsplit(":", 1)[1])] = address
            except (IndexError, ValueError):
                pass
        out = []
        for info in self.info.values():
            entry = dict(info)
            entry["address"] = next((by_port[p] for p in info["listen_ports"] if p in by_port), None)
            summary = info["cmdline"]
            entry["cmdline_summary"] = summary if len(summary) <= 90 else summary[:87] + "..."
            out.append(entry)
        order = {"pipeline (client, scheduler, nannies)": 0, "dask worker": 1}
        return sorted(out, key=lambda e: (order.get(e["role"], 2), e["pid"]))


def find_manifest(runs_dir: Path) -> dict[str, Any] | None:
    found = [p for p in runs_dir.glob("*/*/manifest.json") if not p.parent.is_symlink()]
    if len(found) != 1:
        return None
    return json.loads(found[0].read_text())


def dask_env(settings: list[str]) -> dict[str, str]:
    """``optimization.tune.active=False`` -> ``{"DASK_OPTIMIZATION__TUNE__ACTIVE": "False"}`` (Dask reads
    ``DASK_*`` variables at import, so they reach the pipeline process and, through it, the workers)."""
    env = {}
    for item in settings:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"--dask-config {item!r}: use KEY=VALUE, e.g. optimization.tune.active=False")
        env["DASK_" + key.strip().upper().replace(".", "__").replace("-", "_")] = value.strip()
    return env


def run_pipeline(config: Path, glob: str, *, n_workers: int, memory_limit: str, blocksize: str, until: str,
                 runs_dir: Path, log_prefix: Path, interval: float, timeout: float, label: str,
                 env: dict[str, str], extra: dict[str, Any] | None = None) -> dict[str, Any]:
    shutil.rmtree(runs_dir, ignore_errors=True)
    sets = {
        "device": "cpu",
        "cluster.n_workers": n_workers,
        "cluster.threads_per_worker": 1,
        "cluster.memory_limit": memory_limit,
        "stages.raw.path": glob,
        "stages.raw.blocksize": blocksize,
        **(extra or {}),
    }
    # --no-cache: every stage computes (a fresh runs folder has no cache anyway; nothing is written to one).
    cmd = [*pipeline_executable(), "run", str(config), "--until", until, "--runs-dir", str(runs_dir), "--no-cache",
           "--quiet"]
    for key, value in sets.items():
        cmd += ["--set", f"{key}={value}"]
    print(f"{label} ...", end=" ", flush=True, file=sys.stderr)
    timed_out = False
    with open(f"{log_prefix}.out", "wb") as out, open(f"{log_prefix}.err", "wb") as err:
        started = time.perf_counter()
        # Own session: on a timeout or Ctrl-C the whole tree (workers included) is ended by its group id.
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=err, start_new_session=True,
                                env={**os.environ, **env})
        sampler = TreeSampler(proc.pid)
        try:
            while proc.poll() is None:
                sampler.sample()
                if time.perf_counter() - started > timeout:
                    timed_out = True
                    _kill_group(proc)
                    break
                time.sleep(interval)
            proc.wait()
        except BaseException:
            _kill_group(proc)
            raise
        wall = time.perf_counter() - started
    _kill_group(proc, quiet=True)       # strays a crashed run may have left (normally none)
    manifest = find_manifest(runs_dir)
    stages = {}
    failure = None
    if manifest:
        for name, s in manifest.get("stages", {}).items():
            stages[name] = {k: s.get(k) for k in ("status", "seconds", "peak_rss_bytes", "worker", "facts", "error")}
            if s.get("error") and failure is None:
                failure = f"stage {name}: {s['error']}"
    status = manifest.get("status") if manifest else None
    ok = proc.returncode == 0 and status == "succeeded" and not timed_out
    stderr_tail = Path(f"{log_prefix}.err").read_text(errors="replace")[-4000:]
    if not ok and failure is None:
        failure = ("timed out after %.0f s" % timeout) if timed_out else f"exit status {proc.returncode}"
    workers = sorted({s["worker"] for s in stages.values() if s.get("worker")})
    result = {
        "label": label, "until": until, "n_workers": n_workers, "memory_limit": memory_limit, "blocksize": blocksize,
        "command": cmd, "env": env, "exit_status": proc.returncode, "timed_out": timed_out, "manifest_status": status,
        "succeeded": ok, "failure": None if ok else failure, "wall_s": round(wall, 3),
        "duration_s": manifest.get("duration_s") if manifest else None,
        "stages": stages, "processes": sampler.report(workers),
        "peak_tree_rss_bytes": sampler.peak_total, "rss_samples": sampler.samples,
        "stderr_tail": None if ok else stderr_tail,
    }
    worker_peaks = [p["peak_rss_bytes"] for p in result["processes"] if p["role"] == "dask worker"]
    print(f"{'ok' if ok else 'FAILED'} in {wall:.1f} s; worker peak RSS "
          f"{', '.join(f'{b / MiB:,.0f}' for b in worker_peaks) or '-'} MiB"
          + ("" if ok else f"\n  {failure}"), file=sys.stderr)
    return result


def _kill_group(proc: subprocess.Popen, quiet: bool = False) -> None:
    """SIGTERM, then SIGKILL, the process group the run was started in (its id is the child's pid)."""
    for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            break                                   # the group is gone
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            proc.poll()                             # reap the child, else its zombie keeps the group
            try:
                os.killpg(proc.pid, 0)
            except (ProcessLookupError, PermissionError):
                break
            time.sleep(0.1)
        else:
            if not quiet or sig == signal.SIGKILL:
                print(f"process group {proc.pid} still alive after {sig.name}", file=sys.stderr)
            continue
        break
    if proc.poll() is None:
        proc.wait()


# ---------------------------------------------------------------------------------------------
# report


def _mib(n: float | None) -> str:
    return "-" if n is None else f"{n / MiB:,.0f}"


def _gib(n: float) -> str:
    return f"{n / GiB:,.2f} GiB"


def large_markdown(data: dict[str, Any], run: dict[str, Any], limit_bytes: int) -> list[str]:
    n = run["n_workers"]
    total = limit_bytes * n
    ratio = data["memory_estimate_bytes"] / total
    raw_facts = (run["stages"].get("raw") or {}).get("facts") or {}
    lines = [
        f"Larger than memory: {data['rows']:,} rows, {n} workers x {run['memory_limit']}, "
        f"blocksize {run['blocksize']}, `--until {run['until']}`:",
        "",
        "| | |",
        "|---|--:|",
        f"| rows (CSV files) | {data['rows']:,} ({data['parts']}) |",
        f"| on disk (CSV bytes) | {_gib(data['csv_bytes'])} |",
        f"| in memory, estimate ¹ | {_gib(data['memory_estimate_bytes'])} "
        f"({data['memory_bytes_per_row']:.0f} B/row) |",
        f"| worker memory limit | {n} x {_gib(limit_bytes)} = {_gib(total)} |",
        f"| in memory / total worker limit | **{ratio:.2f}** (target ≥ {RATIO_TARGET:g}) |",
        f"| partitions (raw) | {raw_facts.get('partitions', '-')} |",
        f"| wall time | {run['wall_s']:.1f} s |",
        f"| peak RSS, whole process tree (sum) | {_mib(run['peak_tree_rss_bytes'])} MiB |",
        f"| result | {'succeeded' if run['succeeded'] else '**FAILED**: ' + _one_line(run['failure'])} |",
        "",
        "| stage | seconds | peak RSS (MiB) ² | worker | facts |",
        "|---|--:|--:|---|---|",
    ]
    for name, s in run["stages"].items():
        facts = s.get("facts") or {}
        brief = ", ".join(f"{k}={v}" for k, v in facts.items()
                          if k in ("partitions", "passes", "rows", "fit_seconds", "external_memory"))
        seconds = "-" if s.get("seconds") is None else f"{s['seconds']:.1f}"
        lines.append(f"| {name} ({s.get('status')}) | {seconds} | {_mib(s.get('peak_rss_bytes'))} | "
                     f"{s.get('worker') or '-'} | {brief} |")
    lines += [
        "",
        f"| process (RSS sampled every {run.get('interval', 0.25):g} s) | pid | peak RSS (MiB) | limit (MiB) "
        "| command line |",
        "|---|--:|--:|--:|---|",
    ]
    for p in run["processes"]:
        name = p["role"] + (f" {p['address']}" if p.get("address") else "")
        limit = _mib(limit_bytes) if p["role"] == "dask worker" else ""
        cmd = p["cmdline_summary"].replace("|", "\\|")
        lines.append(f"| {name} | {p['pid']} | {_mib(p['peak_rss_bytes'])} | {limit} | `{cmd}` |")
    lines += [
        "",
        "¹ " + f"part-0000.csv ({data['memory_part0_rows']:,} rows) read with pandas `read_csv(na_values=[\" \"])`: "
        f"`memory_usage(deep=True).sum()` = {_mib(data['memory_part0_bytes'])} MiB, "
        f"x {data['rows']:,} / {data['memory_part0_rows']:,} rows.",
        "² From the manifest: the peak RSS of the worker process that ran the stage's task.",
    ]
    return lines


def _one_line(text: str | None, limit: int = 300) -> str:
    text = " ".join((text or "").split()).replace("|", "\\|")
    return text if len(text) <= limit else text[:limit - 3] + "..."


def scaling_summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    by = {1: [r["one"] for r in runs], 2: [r["two"] for r in runs]}
    summary: dict[str, Any] = {"median_wall_s": {}, "median_stage_seconds": {}}
    for n, results in by.items():
        ok = [r for r in results if r["succeeded"]]
        summary["median_wall_s"][n] = statistics.median(r["wall_s"] for r in ok) if ok else None
        stages: dict[str, float] = {}
        for name in (ok[0]["stages"] if ok else {}):
            values = [r["stages"][name]["seconds"] for r in ok if r["stages"].get(name, {}).get("seconds") is not None]
            if values:
                stages[name] = statistics.median(values)
        summary["median_stage_seconds"][n] = stages
    one, two = summary["median_wall_s"][1], summary["median_wall_s"][2]
    summary["speedup_1_over_2"] = round(one / two, 4) if one and two else None
    return summary


def scaling_markdown(data: dict[str, Any], runs: list[dict[str, Any]], summary: dict[str, Any],
                     memory_limit: str, blocksize: str, until: str) -> list[str]:
    def cell(r: dict[str, Any]) -> str:
        return f"{r['wall_s']:.1f}" if r["succeeded"] else f"FAILED ({r['wall_s']:.0f})"

    med = summary["median_wall_s"]
    lines = [
        f"Scaling: {data['rows']:,} rows ({data['parts']} CSV files, {_gib(data['csv_bytes'])}, "
        f"~{_gib(data['memory_estimate_bytes'])} in memory), memory limit {memory_limit} per worker, "
        f"1 thread per worker, blocksize {blocksize}, `--until {until}`, {len(runs)} run(s) each:",
        "",
        "| run | order | 1 worker wall (s) | 2 workers wall (s) |",
        "|---|---|--:|--:|",
    ]
    for r in runs:
        lines.append(f"| {r['index'] + 1} | {r['order']} | {cell(r['one'])} | {cell(r['two'])} |")
    fmt = lambda v: "-" if v is None else f"**{v:.1f}**"   # noqa: E731
    lines.append(f"| **median** | | {fmt(med[1])} | {fmt(med[2])} |")
    speedup = summary["speedup_1_over_2"]
    lines += ["", f"time(1 worker) / time(2 workers), ratio of the medians: **{speedup:.2f}**" if speedup
              else "time(1 worker) / time(2 workers): - (no successful run on one side)"]
    stages1, stages2 = summary["median_stage_seconds"][1], summary["median_stage_seconds"][2]
    if stages1 and stages2:
        lines += ["", "| stage (median s) | 1 worker | 2 workers | ratio |", "|---|--:|--:|--:|"]
        for name in stages1:
            a, b = stages1[name], stages2.get(name)
            ratio = f"{a / b:.2f}" if b else "-"
            lines.append(f"| {name} | {a:.1f} | {'-' if b is None else f'{b:.1f}'} | {ratio} |")
    return lines


def training_summary(runs: list[dict[str, Any]], stage: str) -> dict[str, Any]:
    """Medians of the training stage's seconds and of the wall time, streamed vs held in memory."""
    out: dict[str, Any] = {}
    for key in ("streamed", "held"):
        ok = [r[key] for r in runs if r[key]["succeeded"]]
        seconds = [r["stages"][stage]["seconds"] for r in ok if r["stages"].get(stage, {}).get("seconds")]
        peaks = [max((p["peak_rss_bytes"] for p in r["processes"] if p["role"] == "dask worker"), default=0)
                 for r in ok]
        out[key] = {"median_stage_s": statistics.median(seconds) if seconds else None,
                    "median_wall_s": statistics.median(r["wall_s"] for r in ok) if ok else None,
                    "median_worker_peak_rss_bytes": statistics.median(peaks) if peaks else None}
    a, b = out["streamed"]["median_stage_s"], out["held"]["median_stage_s"]
    out["stage_ratio_streamed_over_held"] = round(a / b, 4) if a and b else None
    return out


def training_markdown(data: dict[str, Any], runs: list[dict[str, Any]], summary: dict[str, Any],
                      stage: str, memory_limit: str) -> list[str]:
    def cell(r: dict[str, Any]) -> str:
        if not r["succeeded"]:
            return f"FAILED ({r['wall_s']:.0f})"
        return f"{r['stages'][stage]['seconds']:.1f}"

    lines = [
        f"Training from Parquet through external memory (`external_memory: true`, the default) against "
        f"xgboost.dask holding each worker's share (`false`): {data['rows']:,} rows, 2 workers x "
        f"{memory_limit}, `{stage}` stage seconds, {len(runs)} run(s) each:",
        "",
        "| run | order | external memory (s) | in memory (s) |",
        "|---|---|--:|--:|",
    ]
    for r in runs:
        lines.append(f"| {r['index'] + 1} | {r['order']} | {cell(r['streamed'])} | {cell(r['held'])} |")
    med = {k: summary[k]["median_stage_s"] for k in ("streamed", "held")}
    peaks = {k: summary[k]["median_worker_peak_rss_bytes"] for k in ("streamed", "held")}
    fmt = lambda v: "-" if v is None else f"**{v:.1f}**"   # noqa: E731
    lines += [f"| **median** | | {fmt(med['streamed'])} | {fmt(med['held'])} |",
              f"| largest worker peak RSS (MiB, median) | | {_mib(peaks['streamed'])} | {_mib(peaks['held'])} |"]
    ratio = summary["stage_ratio_streamed_over_held"]
    lines += ["", f"time(external memory) / time(in memory), ratio of the medians: **{ratio:.2f}**" if ratio
              else "time(external memory) / time(in memory): - (no successful run on one side)"]
    return lines


# ---------------------------------------------------------------------------------------------


def fit_table(args: argparse.Namespace, data_dir: Path) -> dict[str, Any]:
    """The table that fits (``--fit-rows`` in ``--fit-parts`` files), described and in the page cache."""
    part_rows = math.ceil(args.fit_rows / args.fit_parts)
    parts = ensure_parts(args.fit_rows, part_rows, args.seed,
                         data_dir / f"scaleout_fit_{args.fit_rows}_p{args.fit_parts}_s{args.seed}",
                         args.regenerate, args.jobs)
    warm_page_cache(parts["paths"])
    return describe_data(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=25_000_000,
                        help="rows of the larger-than-memory table (default 25,000,000: ~6.3 GiB in memory)")
    parser.add_argument("--part-rows", type=int, default=1_000_000,
                        help="rows per CSV file and per generator process (default 1,000,000)")
    parser.add_argument("--memory-limit", type=size_arg, default="1GiB",
                        help="cluster.memory_limit per worker of the large run (default 1GiB)")
    parser.add_argument("--workers", type=int, default=2, help="cluster.n_workers of the large run (default 2)")
    parser.add_argument("--blocksize", type=size_arg, default="32MiB",
                        help="stages.raw.blocksize: CSV bytes per partition (default 32MiB)")
    parser.add_argument("--fit-rows", type=int, default=1_000_000,
                        help="rows of the table for the 1-vs-2-worker runs (default 1,000,000)")
    parser.add_argument("--fit-parts", type=int, default=4, help="CSV files of that table (default 4)")
    parser.add_argument("--fit-memory-limit", type=size_arg, default="4GiB",
                        help="cluster.memory_limit per worker of the scaling runs (default 4GiB)")
    parser.add_argument("--repeats", type=int, default=2, help="scaling runs with each worker count (default 2)")
    parser.add_argument("--only", choices=("large", "scaling", "training"), help="run only one of the three parts")
    parser.add_argument("--until", default="xgb", help="last stage to run (default xgb)")
    parser.add_argument("--large-until", help="last stage of the larger-than-memory run (default: --until)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the generated data (default 0)")
    parser.add_argument("--jobs", type=int, default=2, help="generator processes at a time (default 2)")
    parser.add_argument("--data-dir", type=Path, default=REPO / "bench-data",
                        help="where tables and run folders go (default bench-data/, git-ignored)")
    parser.add_argument("--regenerate", action="store_true", help="generate the tables even if they exist")
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG)
    parser.add_argument("--interval", type=float, default=0.25, help="RSS sampling interval, seconds (default 0.25)")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per pipeline run before it is "
                        "killed and counted as failed (default 3600)")
    parser.add_argument("--dask-config", action="append", default=[], metavar="KEY=VALUE",
                        help="Dask config for the pipeline runs, as DASK_* environment variables (repeatable), "
                             "e.g. optimization.tune.active=False")
    parser.add_argument("--output", type=Path, help="also write the results as JSON here")
    parser.add_argument("--keep", action="store_true", help="keep the run folders and logs (path printed)")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    if min(args.rows, args.part_rows, args.fit_rows, args.fit_parts, args.workers, args.jobs) < 1:
        parser.error("--rows, --part-rows, --fit-rows, --fit-parts, --workers and --jobs must be positive")

    command = "python scripts/bench_scaleout.py " + " ".join(
        f"--{k.replace('_', '-')} {shlex.quote(str(v))}" for k, v in (
            ("rows", args.rows), ("fit_rows", args.fit_rows), ("repeats", args.repeats),
            ("memory_limit", args.memory_limit), ("blocksize", args.blocksize)))
    for flag, value, default in (
            ("--part-rows", args.part_rows, 1_000_000), ("--workers", args.workers, 2),
            ("--fit-parts", args.fit_parts, 4), ("--fit-memory-limit", args.fit_memory_limit, "4GiB"),
            ("--seed", args.seed, 0), ("--until", args.until, "xgb"), ("--large-until", args.large_until, None),
            ("--only", args.only, None)):
        if value != default:
            command += f" {flag} {shlex.quote(str(value))}"
    if args.config.resolve() != DEFAULT_CONFIG.resolve():
        command += f" --config {shlex.quote(str(args.config))}"
    for item in args.dask_config:
        command += f" --dask-config {shlex.quote(item)}"
    env = dask_env(args.dask_config)

    data_dir = args.data_dir.resolve()
    config = args.config.resolve()
    work = data_dir / f"scaleout-runs-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
    work.mkdir(parents=True)
    started_all = time.perf_counter()
    load_before = os.getloadavg()
    results: dict[str, Any] = {}
    md: list[str] = []
    failures: list[str] = []
    try:
        if args.only in (None, "large"):
            parts = ensure_parts(args.rows, args.part_rows, args.seed, data_dir / f"scaleout_{args.rows}_s{args.seed}",
                                 args.regenerate, args.jobs)
            large_data = describe_data(parts)
            limit = parse_bytes(args.memory_limit)
            ratio = large_data["memory_estimate_bytes"] / (limit * args.workers)
            print(f"large: {large_data['rows']:,} rows, {_gib(large_data['csv_bytes'])} CSV, "
                  f"~{_gib(large_data['memory_estimate_bytes'])} in memory = {ratio:.2f} x "
                  f"{args.workers} x {args.memory_limit}", file=sys.stderr)
            if ratio < RATIO_TARGET:
                print(f"warning: in-memory / worker limit {ratio:.2f} < {RATIO_TARGET:g}: raise --rows", file=sys.stderr)
            run = run_pipeline(config, large_data["glob"], n_workers=args.workers, memory_limit=args.memory_limit,
                               blocksize=args.blocksize, until=args.large_until or args.until,
                               runs_dir=work / "large",
                               log_prefix=work / "large", interval=args.interval, timeout=args.timeout,
                               label=f"large: {args.workers} workers x {args.memory_limit}", env=env)
            run["interval"] = args.interval
            if not run["succeeded"]:
                failures.append(f"large run: {run['failure']}")
            results["large"] = {"data": large_data, "run": run, "memory_limit_bytes": limit,
                                "total_memory_limit_bytes": limit * args.workers,
                                "memory_over_limit": round(ratio, 3), "ratio_target": RATIO_TARGET,
                                "ratio_target_met": ratio >= RATIO_TARGET}
            if not args.keep:
                shutil.rmtree(work / "large", ignore_errors=True)
            md += large_markdown(large_data, run, limit)

        if args.only in (None, "scaling"):
            fit_data = fit_table(args, data_dir)
            runs: list[dict[str, Any]] = []
            for i in range(args.repeats):
                order = (1, 2) if i % 2 == 0 else (2, 1)
                entry: dict[str, Any] = {"index": i, "order": " → ".join(f"{n}w" for n in order)}
                for n in order:
                    name = f"fit-{i}-{n}w"
                    r = run_pipeline(config, fit_data["glob"], n_workers=n, memory_limit=args.fit_memory_limit,
                                     blocksize=args.blocksize, until=args.until, runs_dir=work / name,
                                     log_prefix=work / name, interval=args.interval, timeout=args.timeout,
                                     label=f"scaling [{i + 1}/{args.repeats}] {n} worker(s)", env=env)
                    if not r["succeeded"]:
                        failures.append(f"scaling run {i + 1}, {n} worker(s): {r['failure']}")
                    if not args.keep:
                        shutil.rmtree(work / name, ignore_errors=True)
                    entry["one" if n == 1 else "two"] = r
                runs.append(entry)
            summary = scaling_summary(runs)
            results["scaling"] = {"data": fit_data, "memory_limit": args.fit_memory_limit, "runs": runs,
                                  "summary": summary}
            if md:
                md.append("")
            md += scaling_markdown(fit_data, runs, summary, args.fit_memory_limit, args.blocksize, args.until)

        if args.only in (None, "training"):
            fit_data = fit_table(args, data_dir)
            pairs: list[dict[str, Any]] = []
            for i in range(args.repeats):
                order = ("streamed", "held") if i % 2 == 0 else ("held", "streamed")
                entry = {"index": i, "order": " → ".join(order)}
                for key in order:
                    name = f"train-{i}-{key}"
                    r = run_pipeline(config, fit_data["glob"], n_workers=2, memory_limit=args.fit_memory_limit,
                                     blocksize=args.blocksize, until=args.until, runs_dir=work / name,
                                     log_prefix=work / name, interval=args.interval, timeout=args.timeout,
                                     label=f"training [{i + 1}/{args.repeats}] {key}", env=env,
                                     extra={f"stages.{args.until}.external_memory": key == "streamed"})
                    if not r["succeeded"]:
                        failures.append(f"training run {i + 1}, {key}: {r['failure']}")
                    if not args.keep:
                        shutil.rmtree(work / name, ignore_errors=True)
                    entry[key] = r
                pairs.append(entry)
            summary = training_summary(pairs, args.until)
            results["training"] = {"data": fit_data, "memory_limit": args.fit_memory_limit, "runs": pairs,
                                   "summary": summary}
            if md:
                md.append("")
            md += training_markdown(fit_data, pairs, summary, args.until, args.fit_memory_limit)
    finally:
        if args.keep:
            print(f"run folders and logs kept in {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    load_after = os.getloadavg()
    total_s = time.perf_counter() - started_all

    md += ["", f"{os.cpu_count()} CPUs, {_gib(psutil.virtual_memory().total)} RAM, Python "
           f"{platform.python_version()}; load average (1 min) before/after: {load_before[0]:.2f} / "
           f"{load_after[0]:.2f}; benchmark took {total_s / 60:.1f} min.", "", f"Command: `{command}`"]
    if env:
        md.append("Dask configuration of the runs (environment): " + ", ".join(f"`{k}={v}`" for k, v in env.items()))
    table = "\n".join(md)
    print()
    if failures:
        print("FAILURES:")
        for f in failures:
            print(f"  - {_one_line(f, 2000)}")
        for key, value in results.items():
            sides = ("streamed", "held") if key == "training" else ("one", "two")
            items = [value["run"]] if key == "large" else [r[s] for r in value["runs"] for s in sides]
            for r in items:
                if not r["succeeded"]:
                    print(f"\n--- end of stderr of {r['label']} ---\n{(r['stderr_tail'] or '')[-2500:]}")
        print()
    print(table)

    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps({
            "command": command, "config": str(args.config), "seed": args.seed, "blocksize": args.blocksize,
            "until": args.until, "large_until": args.large_until or args.until, "dask_env": env,
            "succeeded": not failures, "failures": failures, "total_s": round(total_s, 1),
            "host": {"cpus": os.cpu_count(), "memory_bytes": psutil.virtual_memory().total,
                     "python": platform.python_version(), "platform": platform.platform(),
                     "load_average_before": load_before, "load_average_after": load_after},
            **results, "markdown": table,
        }, indent=2, default=str))
        print(f"\nresults written to {args.output}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
