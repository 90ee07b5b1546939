#!/usr/bin/env python3
"""Run the GPU probes from the checkout and write one JSON result per probe plus a summary.

    python scripts/gpu_kit/probe.py --out DIR [--only NAME ...]

Each probe runs the project's own GPU code (the torch stage, the CuPy -> torch hand-off, the
pinned prefetch, XGBoost on cuda with external memory, a LocalCUDACluster with an RMM pool,
and the cuDF/cuML stages when RAPIDS is installed) in a process of its own, and writes
``DIR/<probe>.json``; ``DIR/summary.json`` collects them (at most 7 files in all). The GPU is
found through NVML, so this process never creates a CUDA context (Dask-CUDA's workers must
start from a process without one). With no GPU every probe is "skipped" with a reason
starting "no device" and the exit status is 0; a failed probe makes it 1.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.metadata
import importlib.util
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

KIT_PARENT = Path(__file__).resolve().parents[1]       # scripts/: makes `gpu_kit` importable
CHECKOUT = Path(__file__).resolve().parents[2]
if __package__ in (None, ""):
    sys.path.insert(0, str(KIT_PARENT))
if str(CHECKOUT) not in sys.path:
    sys.path.insert(1, str(CHECKOUT))                    # the project runs from the checkout

from gpu_kit.probes import PROBES, failed  # noqa: E402

SUMMARY = "summary.json"
REPORTED = ("torch", "cupy", "xgboost", "cudf", "cuml", "dask_cuda", "rmm", "dask", "numpy", "pandas")
DEVICE_NODES = (Path("/dev/nvidia0"), Path("/proc/driver/nvidia/gpus"))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for <probe>.json and summary.json")
    parser.add_argument("--only", action="append", default=[], metavar="NAME",
                        help=f"run only these probes (repeatable or comma-separated): {', '.join(PROBES)}")
    parser.add_argument("--timeout", type=float, default=900, help="seconds one probe may run (default 900)")
    parser.add_argument("--keep-work", action="store_true", help="keep the probes' data, configs and run folders")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    names = [n.strip() for item in args.only for n in item.split(",") if n.strip()] or list(PROBES)
    unknown = [n for n in names if n not in PROBES]
    if unknown:
        print(f"error: unknown probe(s) {', '.join(unknown)}; known: {', '.join(PROBES)}", file=sys.stderr)
        return 2
    started = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    device = detect_device()
    versions, distributions = library_versions()
    work_root = Path(tempfile.mkdtemp(prefix="gpu-kit-probe-"))
    results: dict[str, dict[str, Any]] = {}
    try:
        for name in names:
            result = decide(name, device) or run_in_process(name, work_root, args.timeout)
            result = {"probe": name, "title": PROBES[name].title, **result, "versions": versions}
            write_json(args.out / f"{name}.json", result)
            results[name] = result
            print(f"{result['status']:>7}  {name:<16} {result.get('seconds', 0):7.1f}s  {result['reason']}", flush=True)
    finally:
        if args.keep_work:
            print(f"work folders kept in {work_root}")
        else:
            shutil.rmtree(work_root, ignore_errors=True)
    summary = summarize(results, device, versions, distributions, time.perf_counter() - started)
    write_json(args.out / SUMMARY, summary)
    counts = summary["counts"]
    print(f"summary: passed {counts['passed']}, failed {counts['failed']}, skipped {counts['skipped']} "
          f"-> {args.out / SUMMARY}")
    return summary["exit_code"]


# ----------------------------------------------------------------------------- the device
def detect_device() -> dict[str, Any]:
    """What NVML says about the GPUs, without creating a CUDA context; and whether a GPU
    seems present even though NVML could not be asked (nvidia-ml-py not installed yet)."""
    from pipeline.backends.devices.detect import probe_nvml

    nvml = probe_nvml()
    nodes = [str(p) for p in DEVICE_NODES if p.exists() and (p.is_file() or p.is_char_device() or any(p.iterdir()))]
    return {"driver": nvml.driver, "cuda_driver": nvml.cuda, "nvml_error": nvml.error,
            "gpus": [vars(d) for d in nvml.devices], "device_nodes": nodes}


def decide(name: str, device: dict[str, Any]) -> dict[str, Any] | None:
    """A result without running the probe (no device, or what it needs is not installed)."""
    if not device["gpus"]:
        why = device["nvml_error"] or "NVML reports no GPU"
        if device["device_nodes"]:
            return failed(f"NVML found no GPU but {', '.join(device['device_nodes'])} exists: {why}")
        return {"status": "skipped", "reason": f"no device: {why}", "seconds": 0.0, "checks": [], "details": {}}
    missing = [m for m in PROBES[name].needs if importlib.util.find_spec(m) is None]
    if not missing:
        return None
    if name == "rapids_stages":
        return {"status": "skipped", "reason": f"RAPIDS not installed ({', '.join(missing)} missing)",
                "seconds": 0.0, "checks": [], "details": {}}
    return failed(f"not installed: {', '.join(missing)} (install the kit's base profile and put it on PYTHONPATH)")


# ----------------------------------------------------------------------------- running
def run_in_process(name: str, work_root: Path, timeout: float) -> dict[str, Any]:
    """Run one probe in a new process (session) of its own; kill its group on timeout."""
    work = work_root / name
    work.mkdir()
    result_file = work_root / f"{name}.result.json"
    log_file = work_root / f"{name}.log"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(KIT_PARENT), str(CHECKOUT), env.get("PYTHONPATH", "")) if p)
    command = [sys.executable, "-m", "gpu_kit.probes", name, "--work", str(work), "--result", str(result_file)]
    started = time.perf_counter()
    with open(log_file, "wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=work, env=env,
                                   start_new_session=True)
        try:
            returncode = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            returncode = None
    seconds = round(time.perf_counter() - started, 2)
    if result_file.is_file():
        result = json.loads(result_file.read_text())
    elif returncode is None:
        result = failed(f"timed out after {timeout:g} s (the probe's processes were killed)")
    else:
        result = failed(f"the probe process exited {returncode} without a result (crashed?)")
    log = log_file.read_text(errors="replace")
    if result["status"] == "failed" and log.strip():
        result["log_tail"] = log[-4000:]
    return {**result, "seconds": seconds}


# ----------------------------------------------------------------------------- reporting
def library_versions() -> tuple[dict[str, str | None], dict[str, list[str]]]:
    """Versions of the GPU libraries found (None: not installed), and which distribution and
    folder each comes from (the image's site-packages or the kit's folder)."""
    providers = importlib.metadata.packages_distributions()
    versions: dict[str, str | None] = {}
    where: dict[str, list[str]] = {}
    for module in REPORTED:
        found = []
        for dist_name in dict.fromkeys(providers.get(module, [])):
            try:
                dist = importlib.metadata.distribution(dist_name)
            except importlib.metadata.PackageNotFoundError:
                continue
            found.append(f"{dist_name} {dist.version} ({dist.locate_file('')})")
            versions.setdefault(module, dist.version)
        versions.setdefault(module, None)
        where[module] = found
    return versions, where


def summarize(results: dict[str, dict[str, Any]], device: dict[str, Any], versions: dict[str, Any],
              distributions: dict[str, list[str]], seconds: float) -> dict[str, Any]:
    counts = {s: sum(1 for r in results.values() if r["status"] == s) for s in ("passed", "failed", "skipped")}
    status = "failed" if counts["failed"] else "passed" if counts["passed"] else "skipped"
    return {
        "status": status, "exit_code": 1 if counts["failed"] else 0, "counts": counts,
        "probes": {n: {"status": r["status"], "reason": r["reason"], "seconds": r.get("seconds")} for n, r in results.items()},
        "device": device, "versions": versions, "distributions": distributions,
        "python": platform.python_version(), "platform": platform.platform(), "checkout": str(CHECKOUT),
        "pythonpath": os.environ.get("PYTHONPATH", ""), "ld_preload": os.environ.get("LD_PRELOAD", ""),
        "doctor": doctor_report() if device["gpus"] else None,
        "finished": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "seconds": round(seconds, 2),
    }


def doctor_report() -> dict[str, Any] | str:
    """``pipeline doctor --json`` (the project's own setup check), in a process of its own."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(CHECKOUT), env.get("PYTHONPATH", "")) if p)
    try:
        done = subprocess.run([sys.executable, "-m", "pipeline", "doctor", "--json"], capture_output=True,
                              text=True, timeout=300, env=env)
        return json.loads(done.stdout)
    except (subprocess.TimeoutExpired, json.JSONDecodeError) as exc:
        return f"pipeline doctor gave no report: {type(exc).__name__}"


def write_json(path: Path, data: Any) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(data, indent=1, default=str) + "\n")
    temporary.replace(path)


if __name__ == "__main__":
    sys.exit(main())
