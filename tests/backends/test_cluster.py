"""Stages on a real Dask cluster: worker processes on 127.0.0.1, started by the run or by
the test (``dask scheduler`` + two ``dask worker`` processes), never mocked."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.cli import run_cli as _pipeline
from pipeline import run_pipeline
from pipeline.config import load_config
from pipeline.core.errors import ClusterUnavailable, ExitCode, StageError
from pipeline.runs.record import RunManifest, read_manifest
from tests.conftest import ROOT

pytestmark = pytest.mark.slow
BIN = Path(sys.executable).parent
FAST = ["stages.forest.params.n_estimators=20", "stages.xgb.params.n_estimators=20", "stages.mlp.epochs=3",
        "device=cpu"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def scheduler(tmp_path_factory):
    """`dask scheduler` and two `dask worker` processes, as an operator would start them."""
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    logs = tmp_path_factory.mktemp("dask-logs")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([str(BIN / "dask"), "scheduler", "--host", "127.0.0.1", "--port", str(port),
                               "--no-dashboard"], stdout=open(logs / "scheduler.log", "w"), stderr=subprocess.STDOUT,
                              env=env)]
    for i in range(2):
        procs.append(subprocess.Popen([str(BIN / "dask"), "worker", address, "--nthreads", "1", "--nworkers", "1",
                                       "--no-dashboard", "--memory-limit", "2GiB", "--name", f"w{i}"],
                                      stdout=open(logs / f"worker{i}.log", "w"), stderr=subprocess.STDOUT, env=env))
    from distributed import Client

    deadline = time.monotonic() + 60
    while True:
        try:
            with Client(address, timeout="2s") as client:
                client.wait_for_workers(2, timeout=30)
            break
        except (OSError, TimeoutError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    yield address
    for proc in reversed(procs):
        proc.terminate()
    for proc in procs:
        proc.wait(timeout=30)


def manifest_of(result) -> RunManifest:
    return read_manifest(result.run_dir)


def test_local_cluster_gives_the_in_process_results(in_project):
    here = run_pipeline("configs/churn.yaml", overrides=FAST)
    # force: the in-process run just filled the stage cache, which the cluster run would use.
    there = run_pipeline("configs/churn.yaml", overrides=[*FAST, "cluster.n_workers=2"], force=True)
    local, remote = manifest_of(here), manifest_of(there)
    assert remote.cluster["started_here"] and remote.cluster["workers"] == 2
    assert {r.worker for r in remote.stages.values()} - {None}, "stages ran on workers"
    for model, metrics in local.metrics["models"].items():
        for name, value in metrics.items():
            tolerance = 1e-4 if model == "mlp" else 1e-12     # the MLP: float reductions differ by thread count
            assert remote.metrics["models"][model][name] == pytest.approx(value, abs=tolerance), (model, name)
    # Every artifact the in-process run wrote, the cluster run wrote too.
    assert set(remote.artifacts) == set(local.artifacts)


PARALLEL = """\
name: par
device: cpu
stages:
  a: {kind: python, function: "slow_stages:nap", params: {seconds: 2}}
  b: {kind: python, function: "slow_stages:nap", params: {seconds: 2}}
"""

SLOW_STAGES = '''\
import os, time

def nap(ctx, inputs, seconds):
    start = time.time()
    time.sleep(seconds)
    return {"pid": os.getpid(), "start": start, "end": time.time()}

def die_once(ctx, inputs, marker):
    # First attempt: take the worker process down, as the OOM killer would.
    if not os.path.exists(marker):
        open(marker, "w").close()
        os.kill(os.getpid(), 9)
    return {"pid": os.getpid()}

def always_die(ctx, inputs):
    os.kill(os.getpid(), 9)
'''


def test_independent_stages_run_at_once_on_different_workers(in_project, scheduler):
    (in_project / "configs" / "slow_stages.py").write_text(SLOW_STAGES)
    (in_project / "configs" / "par.yaml").write_text(PARALLEL)
    result = run_pipeline("configs/par.yaml", scheduler=scheduler)
    a, b = result.outputs["a"], result.outputs["b"]
    assert a["pid"] != b["pid"] and a["pid"] != os.getpid()
    assert a["start"] < b["end"] and b["start"] < a["end"], "the two stages overlapped in time"
    manifest = manifest_of(result)
    assert manifest.cluster["started_here"] is False and manifest.cluster["address"] == scheduler
    # Usage is gathered from every worker over the run, beside each stage's from its own worker.
    workers = manifest.usage["workers"]
    assert len(workers) == 2 and all(w["seconds"] > 0 and w["cpu_seconds"] >= 0 for w in workers.values())
    assert all(manifest.stages[name].usage["cpu_seconds"] >= 0 for name in ("a", "b"))


def test_the_cli_runs_on_an_existing_cluster_and_leaves_it_running(in_project, scheduler):
    proc = _pipeline("run", "configs/churn.yaml", "--scheduler", scheduler, *[a for s in FAST for a in ("--set", s)],
                     cwd=in_project)
    assert proc.returncode == 0, proc.stderr
    assert f"existing cluster at {scheduler}" in proc.stderr and "mlp: Epoch 1/3" in proc.stderr
    from distributed import Client

    from pipeline.backends.clusters.startup import cluster_workers

    with Client(scheduler, timeout="5s") as client:          # still up, both workers still there
        assert len(cluster_workers(client)) == 2


def test_a_worker_lost_once_is_retried_by_dask(in_project, scheduler):
    (in_project / "configs" / "slow_stages.py").write_text(SLOW_STAGES)
    marker = in_project / "died-once"
    (in_project / "configs" / "once.yaml").write_text(
        f'name: once\ndevice: cpu\nstages:\n  flaky: {{kind: python, function: "slow_stages:die_once", '
        f'params: {{marker: "{marker}"}}}}\n')
    result = run_pipeline("configs/once.yaml", scheduler=scheduler)
    assert marker.exists() and result.status == "succeeded"
    _wait_for_workers(scheduler, 2)


def test_a_stage_that_keeps_killing_workers_fails_naming_stage_and_worker(in_project):
    (in_project / "configs" / "slow_stages.py").write_text(SLOW_STAGES)
    (in_project / "configs" / "doom.yaml").write_text(
        'name: doom\ndevice: cpu\ncluster: {n_workers: 2}\nstages:\n'
        '  ok: {kind: python, function: "slow_stages:nap", params: {seconds: 0}}\n'
        '  doomed: {kind: python, inputs: [ok], function: "slow_stages:always_die"}\n')
    with pytest.raises(StageError) as info:
        run_pipeline("configs/doom.yaml")
    message = str(info.value)
    assert "stage 'doomed'" in message and "worker running it died (tcp://127.0.0.1:" in message
    runs = in_project / "runs" / "doom"
    (run_dir,) = [p for p in runs.iterdir() if p.name[0].isdigit()]
    manifest = read_manifest(run_dir)
    assert manifest.status == "failed" and manifest.stages["doomed"].status == "failed"
    assert manifest.stages["ok"].status == "succeeded"
    assert not (runs / "latest").exists()


def test_unreachable_scheduler_is_exit_5_within_the_timeout(project):
    address = f"tcp://127.0.0.1:{free_port()}"
    started = time.monotonic()
    proc = _pipeline("run", "configs/churn.yaml", "--scheduler", address, "--set", "cluster.connect_timeout=2",
                     cwd=project)
    assert proc.returncode == ExitCode.BACKEND
    assert f"cannot reach the Dask scheduler at {address} within 2 s" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert time.monotonic() - started < 60


def test_cluster_section_is_validated():
    text = (ROOT / "configs" / "churn.yaml").read_text() + "cluster: {n_worker: 2}\n"
    from pipeline.core.errors import ConfigError

    with pytest.raises(ConfigError, match="did you mean 'n_workers'"):
        load_config(text=text)


def test_library_error_type_for_unreachable_scheduler(in_project):
    with pytest.raises(ClusterUnavailable):
        run_pipeline("configs/churn.yaml", overrides=["cluster.connect_timeout=1"],
                     scheduler=f"tcp://127.0.0.1:{free_port()}")


def _wait_for_workers(address: str, n: int) -> None:
    from distributed import Client

    with Client(address, timeout="5s") as client:
        client.wait_for_workers(n, timeout=60)
