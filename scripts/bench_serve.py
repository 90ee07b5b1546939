#!/usr/bin/env python
"""Serving load test: ``pipeline serve`` with and without micro-batching, against a hand-written anchor.

Trains one XGBoost model on the bundled Telco churn table (configs/churn.yaml's load, split and
feature ops; a run in a temporary folder), then serves it three ways, one at a time, each a
server process on 127.0.0.1:

  batched     ``pipeline serve RUN`` with its defaults: requests that arrive together are scored
              in one model call (``--max-wait-ms`` / ``--max-batch-rows``);
  unbatched   ``pipeline serve RUN --max-batch-rows 1 --max-wait-ms 0``: one model call per request;
  anchor      ``scripts/serve_anchor.py``: the FastAPI app a user would write by hand, scoring each
              request's rows in their own call (the same model folder and loader);
  mlflow      ``mlflow models serve`` of the same model folder saved as an MLflow pyfunc model
              (``pipeline.tracking.mlflow_pyfunc.save_pyfunc``, what the MLflow hook logs), the
              server an MLflow user would pick: ``/invocations`` with ``dataframe_records``.

For each server and each ``--concurrency`` level, a client process (aiohttp on uvloop) keeps that
many requests in flight for ``--seconds`` (after ``--warmup`` seconds not counted), each request
one row (``--rows-per-request``) drawn from the table, and reports requests/s and the p50 / p99
latency of the requests that completed in the window (a request sent during the warm-up that
completes in the window counts, with its whole latency). Before the load, the same rows are scored
by every side one request at a time and compared (scores equal to 1e-6, or the script fails).

The client shares the machine's cores with the server: on a 2-core machine both compete, which
holds for every side alike. Ratios are taken against the anchor at the same concurrency.

    python scripts/bench_serve.py --concurrency 1,16,64 --seconds 10 --output bench-data/serve-bench.json

Exit status: 0 when every side served every request without an error and the scores agree.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
SIDES = ("batched", "unbatched", "anchor", "mlflow")
SCORE_TOLERANCE = 1e-6


# ---------------------------------------------------------------------------- the client
async def _drive(url: str, payloads: list[bytes], concurrency: int, seconds: float, warmup: float) -> dict[str, Any]:
    import aiohttp

    latencies: list[float] = []
    errors: dict[str, int] = {}
    # perf_counter, not loop.time(): uvloop's clock has millisecond steps, coarser than a request.
    clock = time.perf_counter
    start = clock()
    window = (start + warmup, start + warmup + seconds)
    headers = {"Content-Type": "application/json"}

    async def client(k: int, session: aiohttp.ClientSession) -> None:
        i = k
        while True:
            sent = clock()
            if sent >= window[1]:
                return
            try:
                async with session.post(url, data=payloads[i % len(payloads)], headers=headers) as response:
                    await response.read()
                    status = response.status
            except aiohttp.ClientError as exc:
                status = type(exc).__name__
            done = clock()
            if status != 200:
                errors[str(status)] = errors.get(str(status), 0) + 1
            elif window[0] <= done <= window[1]:
                latencies.append(done - sent)
            i += concurrency

    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        await asyncio.gather(*(client(k, session) for k in range(concurrency)))
    latencies.sort()

    def quantile(q: float) -> float:
        return latencies[min(len(latencies) - 1, math.ceil(q * len(latencies)) - 1)] * 1000 if latencies else math.nan

    return {"requests": len(latencies), "errors": errors, "seconds": seconds,
            "rps": len(latencies) / seconds, "p50_ms": quantile(0.50), "p99_ms": quantile(0.99),
            "mean_ms": 1000 * sum(latencies) / len(latencies) if latencies else math.nan}


def client_main(args: argparse.Namespace) -> None:
    payloads = [line.encode() for line in Path(args.payloads).read_text().splitlines() if line]
    try:
        import uvloop
        uvloop.install()
    except ImportError:          # the default loop measures the same, a little slower
        pass
    print(json.dumps(asyncio.run(_drive(args.client, payloads, args.concurrency, args.seconds, args.warmup))))


# ---------------------------------------------------------------------------- the model
def train(project: Path) -> tuple[Path, str]:
    """A run of configs/churn.yaml's data work with one XGBoost model; its folder and the model name."""
    config = yaml.safe_load((REPO / "configs" / "churn.yaml").read_text())
    stages = config["stages"]
    keep = {"raw", "split", "features", "xgb"}
    config["stages"] = {name: spec for name, spec in stages.items() if name in keep}
    config["stages"]["evaluate"] = {"kind": "evaluate", "inputs": ["xgb"]}
    config["stages"]["export"] = {"kind": "export", "inputs": ["xgb"]}
    config["name"] = "serve_bench"
    config["device"] = "cpu"
    data = project / "data"
    data.mkdir(parents=True)
    source = REPO / stages["raw"]["path"]
    shutil.copy(source, data / source.name)
    (project / "serve_bench.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    proc = subprocess.run([sys.executable, "-m", "pipeline", "run", "serve_bench.yaml", "--runs-dir", "runs", "-q"],
                          cwd=project, capture_output=True, text=True, env=_env())
    if proc.returncode != 0:
        raise SystemExit(f"training failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    run_dir = (project / "runs" / "serve_bench" / "latest").resolve()
    return run_dir, "xgb"


def payloads(run_dir: Path, model: str, rows: int, per_request: int, seed: int) -> list[bytes]:
    """JSON bodies of ``per_request`` rows each, drawn from the table, typed as the workflow reads them."""
    import pandas as pd

    folder = model_folder(run_dir, model)
    inputs = json.loads((folder / "workflow.json").read_text())["input_columns"]
    id_column = json.loads((folder / "model.json").read_text()).get("id_column")
    load = yaml.safe_load((run_dir / "config.yaml").read_text())["stages"]["raw"]
    table = pd.read_csv(REPO / load["path"], na_values=load.get("na_values"))
    columns = ([id_column] if id_column and id_column not in inputs else []) + list(inputs)
    sample = table[columns].sample(n=rows, random_state=seed, replace=rows > len(table))
    records = json.loads(sample.to_json(orient="records"))           # NaN -> null, numpy -> JSON numbers
    return [json.dumps({"rows": records[i:i + per_request]}).encode()
            for i in range(0, len(records) - per_request + 1, per_request)]


def model_folder(run_dir: Path, model: str) -> Path:
    """The exported folder of ``model`` in the run (``<stage>/models/<model>``)."""
    found = [p for p in run_dir.glob(f"*/models/{model}") if (p / "model.json").is_file()]
    if not found:
        raise SystemExit(f"run {run_dir} exported no model '{model}'")
    return found[0]


# ---------------------------------------------------------------------------- the servers
def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    # mlflow models serve starts `uvicorn` by name: this interpreter's scripts first on PATH.
    env["PATH"] = os.pathsep.join(filter(None, [str(Path(sys.executable).parent), env.get("PATH")]))
    return env


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start(side: str, run_dir: Path, model: str, port: int, logs: Path,
          device: str = "cpu") -> tuple[subprocess.Popen[bytes], str]:
    if side == "mlflow":
        command = [sys.executable, "-m", "mlflow", "models", "serve", "-m", str(mlflow_model(run_dir, model, logs)),
                   "--env-manager", "local", "--host", "127.0.0.1", "--port", str(port)]
        ready = "/ping"
    elif side == "anchor":
        command = [sys.executable, str(REPO / "scripts" / "serve_anchor.py"), str(model_folder(run_dir, model)), "--port", str(port)]
        ready = "/health"
    else:
        command = [sys.executable, "-m", "pipeline", "serve", str(run_dir), "--model", model, "--port", str(port),
                   "--device", device]
        if side == "unbatched":
            command += ["--max-batch-rows", "1", "--max-wait-ms", "0"]
        ready = "/ready"
    log = open(logs / f"{side}.log", "wb")           # noqa: SIM115 - closed with the process
    proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=_env())
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{side} server exited with {proc.returncode}: {(logs / f'{side}.log').read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(base + ready, timeout=2) as response:
                if response.status == 200:
                    return proc, base
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.2)
    proc.kill()
    raise SystemExit(f"{side} server was not ready within 120 s")


def mlflow_model(run_dir: Path, model: str, work: Path) -> Path:
    """The model folder saved as an MLflow pyfunc model (once), with the run's threshold."""
    from pipeline.predict.batch import open_model
    from pipeline.tracking.mlflow_pyfunc import save_pyfunc

    path = work / "mlflow-model"
    if not path.exists():
        threshold = open_model(run_dir, model=model, argument="RUN").threshold
        save_pyfunc(model_folder(run_dir, model), path, name=model, threshold=threshold)
    return path


def endpoint(side: str) -> str:
    return "/invocations" if side == "mlflow" else "/predict"


def body_for(side: str, body: bytes) -> bytes:
    """The same rows in the side's request format (MLflow's scoring protocol: dataframe_records)."""
    if side != "mlflow":
        return body
    return json.dumps({"dataframe_records": json.loads(body)["rows"]}).encode()


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def scores_of(base: str, bodies: list[bytes], side: str = "batched") -> list[float]:
    """The score of each body's rows, one request at a time (binary: ``score``)."""
    out = []
    for body in bodies:
        request = urllib.request.Request(base + endpoint(side), data=body_for(side, body),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            answer = json.loads(response.read())
        out.extend(float(row["score"]) for row in answer["predictions"])
    return out


def drive(base: str, body_file: Path, concurrency: int, seconds: float, warmup: float,
          side: str = "batched") -> dict[str, Any]:
    if side == "mlflow":
        converted = body_file.with_name(f"{body_file.stem}-{side}.jsonl")
        if not converted.exists():
            converted.write_text("\n".join(body_for(side, line.encode()).decode()
                                           for line in body_file.read_text().splitlines() if line) + "\n")
        body_file = converted
    proc = subprocess.run([sys.executable, __file__, "--client", base + endpoint(side), "--payloads", str(body_file),
                           "--concurrency", str(concurrency), "--seconds", str(seconds), "--warmup", str(warmup)],
                          capture_output=True, text=True, env=_env())
    if proc.returncode != 0:
        raise SystemExit(f"the load client failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout)


# ---------------------------------------------------------------------------- the table
def report(results: dict[str, dict[int, dict[str, Any]]], levels: list[int]) -> str:
    lines = ["| clients | side | requests/s | / anchor | / mlflow | p50 ms | p99 ms | errors |",
             "|--:|---|--:|--:|--:|--:|--:|--:|"]
    for level in levels:
        bases = {name: results.get(name, {}).get(level, {}).get("rps") for name in ("anchor", "mlflow")}
        for side in results:
            r = results[side][level]
            ratios = [f"{r['rps'] / base:.2f}" if base else "-" for base in bases.values()]
            lines.append(f"| {level} | {side} | {r['rps']:.0f} | {' | '.join(ratios)} | {r['p50_ms']:.1f} | "
                         f"{r['p99_ms']:.1f} | {sum(r['errors'].values())} |")
    return "\n".join(lines)


def call_costs(run_dir: Path, model: str, sizes: list[int], repeats: int = 20,
               device: str = "cpu") -> list[dict[str, Any]]:
    """Milliseconds of one model call (the server's ``score_values``: feature workflow, model,
    the answer's columns) per batch size, best of ``repeats``, in this process
    (``OMP_NUM_THREADS`` as set), on each path: ``frame`` (pandas) and ``few_rows`` (NumPy
    columns) on the host, and ``device`` when the model is served on a GPU. CPU time on the
    CPU (the client shares the cores); wall time for every path of a device model, since its
    device's work is not this process's CPU and the question there is which answers sooner.
    Where the paths cross is what ``FEW_ROWS`` (host) and ``DEVICE_FROM_ROWS`` (device) are set
    from."""
    from pipeline.serve.served_model import load_served_model

    served = load_served_model(run_dir, model=model, device=device)
    host = served.host or served.opened
    paths: dict[str, Any] = {}
    if host.backend.name == "cpu":
        paths["frame"] = lambda columns: served.score_values(served.pandas_frame(columns), host)
        paths["few_rows"] = lambda columns: served.score_values(served.few_rows_frame(columns), host)
    if served.opened.backend.name != "cpu":
        paths["device"] = lambda columns: served.score_values(served.frame_of(columns))
    body = b"".join(payloads(run_dir, model, max(sizes), max(sizes), 0))
    rows = json.loads(body)["rows"]
    out = []
    for size in sizes:
        columns = {name: [row[name] for row in rows[:size]] for name in served.fields}
        row: dict[str, Any] = {"rows": size, "served_by": served.path_for(size)}
        for path, call in paths.items():
            clock = time.perf_counter if "device" in paths else time.process_time
            best = math.inf
            for _ in range(repeats):
                started = clock()
                call(columns)
                best = min(best, clock() - started)
            row[f"{path}_ms"] = round(1000 * best, 3)
        out.append(row)
        print(f"  model call, {size:>5} rows: " + "   ".join(f"{path} {row[f'{path}_ms']:7.2f} ms" for path in paths)
              + f"   (served by {row['served_by']})", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", default="1,16,64", help="client counts, comma-separated")
    parser.add_argument("--seconds", type=float, default=10.0, help="measured seconds per level")
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds of load before the measured window")
    parser.add_argument("--rows-per-request", type=int, default=1)
    parser.add_argument("--sides", default=",".join(SIDES), help=f"which servers ({', '.join(SIDES)})")
    parser.add_argument("--run", help="serve this run folder instead of training one")
    parser.add_argument("--model", default="xgb")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", help="write the results as JSON here")
    parser.add_argument("--device", default="cpu", choices=("cpu", "gpu"),
                        help="where pipeline serve scores (gpu: also the device path's cost in --calls)")
    parser.add_argument("--calls", default="1,8,64,256,1024",
                        help="batch sizes whose model call's CPU is measured on both paths ('' for none)")
    # The client process (the script runs itself with these).
    parser.add_argument("--client", help=argparse.SUPPRESS)
    parser.add_argument("--payloads", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client:
        args.concurrency = int(args.concurrency)
        client_main(args)
        return

    levels = [int(x) for x in args.concurrency.split(",")]
    sides = [s for s in args.sides.split(",") if s]
    unknown = set(sides) - set(SIDES)
    if unknown:
        raise SystemExit(f"--sides: unknown {', '.join(sorted(unknown))} (known: {', '.join(SIDES)})")
    with tempfile.TemporaryDirectory(prefix="serve-bench-") as tmp:
        work = Path(tmp)
        if args.run:
            run_dir, model = Path(args.run).resolve(), args.model
        else:
            print("training the model (configs/churn.yaml's features, XGBoost)...", flush=True)
            run_dir, model = train(work / "project")
        sizes = [int(x) for x in args.calls.split(",") if x]
        calls = call_costs(run_dir, model, sizes, device=args.device) if sizes else []
        bodies = payloads(run_dir, model, 2000, args.rows_per_request, args.seed)
        body_file = work / "bodies.jsonl"
        body_file.write_text("\n".join(b.decode() for b in bodies) + "\n")
        check = bodies[:50]
        reference: list[float] | None = None
        results: dict[str, dict[int, dict[str, Any]]] = {}
        failed = False
        for side in sides:
            proc, base = start(side, run_dir, model, free_port(), work, args.device)
            try:
                scores = scores_of(base, check, side)
                if reference is None:
                    reference = scores
                else:
                    worst = max(abs(a - b) for a, b in zip(reference, scores, strict=True))
                    if worst > SCORE_TOLERANCE:
                        print(f"{side}: scores differ from {sides[0]}'s by up to {worst:.2e}", file=sys.stderr)
                        failed = True
                results[side] = {}
                for level in levels:
                    r = drive(base, body_file, level, args.seconds, args.warmup, side)
                    results[side][level] = r
                    failed |= bool(r["errors"])
                    print(f"{side:>9} {level:>4} clients: {r['rps']:8.0f} req/s  p50 {r['p50_ms']:6.1f} ms  "
                          f"p99 {r['p99_ms']:6.1f} ms  errors {r['errors'] or 0}", flush=True)
            finally:
                stop(proc)
    table = report(results, levels)
    print(table)
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(json.dumps({
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
            "settings": {"seconds": args.seconds, "warmup": args.warmup, "rows_per_request": args.rows_per_request,
                         "concurrency": levels},
            "results": {side: {str(k): v for k, v in r.items()} for side, r in results.items()},
            "model_calls": calls,
            "table": table}, indent=2))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
