"""The CLI for unattended jobs: every failure is a documented exit code and one paragraph,
--log-format json is JSON throughout, a scheduler address that is wrong, silent or not Dask
fails fast with exit 5, a script without the ``__main__`` guard fails at once, and ``doctor``
answers without importing torch."""

from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from tests.support.cli import run_cli as _pipeline
from pipeline.cli.options import PipelineGroup, failure_of, handle_errors
from pipeline.core.errors import ExitCode, StorageError
from pipeline.runs.record import read_manifest
from tests.conftest import ROOT

FAST = ["--set", "stages.forest.params.n_estimators=20", "--set", "stages.xgb.params.n_estimators=20",
        "--set", "stages.mlp.epochs=2", "--device", "cpu"]


def cli(*args: str, cwd: Path, columns: str = "200", timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return _pipeline(*args, cwd=cwd, env={"COLUMNS": columns, "PYTHONPATH": str(ROOT)}, timeout=timeout)


def one_paragraph(text: str) -> bool:
    lines = text.strip().splitlines()
    return bool(lines) and all(line.strip() for line in lines)


def run_dirs(project: Path) -> list[Path]:
    folder = project / "runs" / "churn"
    return [p for p in folder.iterdir() if p.name[0].isdigit()] if folder.is_dir() else []


# ------------------------------------------------------------------ click usage errors
@pytest.mark.parametrize(("args", "expected"), [
    (["run", "configs/churn.yaml", "--bogus"], "no such option '--bogus' (see '"),
    (["run"], "missing argument 'CONFIG' (see '"),
    (["run", "configs/churn.yaml", "--device", "tpu"], "invalid value for '--device'"),
    (["bogus"], "no such command 'bogus'"),
    (["runs", "list", "--limit", "0"], "invalid value for '--limit'"),
])
@pytest.mark.slow
def test_usage_errors_are_one_paragraph_with_exit_2(project, args, expected):
    proc = cli(*args, cwd=project)
    assert proc.returncode == ExitCode.CONFIG, proc.stderr
    assert proc.stderr.startswith("error: ") and expected in proc.stderr
    assert one_paragraph(proc.stderr) and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "Usage:" not in proc.stderr and "Try " not in proc.stderr


@pytest.mark.slow
def test_usage_error_is_a_json_line_in_json_mode(project):
    proc = cli("run", "configs/churn.yaml", "--bogus", "--log-format", "json", cwd=project)
    assert proc.returncode == ExitCode.CONFIG
    (line,) = proc.stderr.strip().splitlines()
    entry = json.loads(line)
    assert entry["event"] == "error" and entry["exit_code"] == 2 and "--bogus" in entry["message"]


# ------------------------------------------------------------------ the one mapping
def _group(exc: BaseException, *, decorated: bool) -> click.Group:
    """A root group like ``pipeline``'s with one command that raises ``exc``."""

    @click.group(cls=PipelineGroup)
    @click.option("--debug", is_flag=True)
    def root(debug: bool) -> None:
        pass

    def body(output: str | None) -> None:
        raise exc

    command = click.option("--output")(handle_errors(body) if decorated else body)
    root.command("boom")(command)
    return root


def _oserror(code: int, path: str) -> OSError:
    return OSError(code, os.strerror(code), path)


@pytest.mark.parametrize("decorated", [True, False], ids=["handle_errors", "group safety net"])
@pytest.mark.parametrize(("exc", "code", "words"), [
    (StorageError("cannot write x: disk full"), ExitCode.STORAGE, "cannot write x"),
    (_oserror(errno.ENOSPC, "/somewhere/file"), ExitCode.STORAGE, "cannot write /somewhere/file"),
    (_oserror(errno.EACCES, "out/scores.parquet"), ExitCode.STORAGE, "cannot write out/scores.parquet"),
    (_oserror(errno.EACCES, "out/.scores.parquet.tmp1"), ExitCode.STORAGE, "cannot write"),
    (_oserror(errno.EACCES, "data/input.csv"), ExitCode.DATA, "cannot read data/input.csv"),
    (ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused"), ExitCode.BACKEND, "network"),
    (MemoryError("Unable to allocate 3.07 EiB"), ExitCode.OUT_OF_MEMORY, "out of memory"),
    (RecursionError("maximum recursion depth exceeded"), ExitCode.INTERNAL, "internal error: RecursionError"),
    (ValueError("first line\n\n\nafter blank lines"), ExitCode.INTERNAL, "internal error: ValueError"),
])
def test_every_escaping_exception_maps_to_its_code_and_one_paragraph(exc, code, words, decorated):
    result = CliRunner().invoke(_group(exc, decorated=decorated), ["boom", "--output", "out/scores.parquet"])
    assert result.exit_code == code, result.output
    assert words in result.stderr and one_paragraph(result.stderr), result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_recursion_while_reading_a_config_is_exit_2(project):
    (project / "deep.yaml").write_text("name: x\nstages:\n  a: " + "[" * 3000 + "]" * 3000 + "\n")
    proc = cli("validate", "deep.yaml", cwd=project)
    assert proc.returncode == ExitCode.CONFIG, proc.stderr
    assert "deep.yaml" in proc.stderr and one_paragraph(proc.stderr)


def test_recursion_elsewhere_stays_a_bug():
    assert failure_of(RecursionError("deep")).exit_code == ExitCode.INTERNAL


# ------------------------------------------------------------------ scheduler addresses
@pytest.mark.slow
@pytest.mark.parametrize("address", ["not-an-address", "tcp://scheduler", "http://scheduler:8786",
                                     "tcp://scheduler:99999", "tcp://sched uler:8786"])
def test_a_malformed_scheduler_address_is_exit_2_before_anything_runs(project, address):
    proc = cli("run", "configs/churn.yaml", "--scheduler", address, "--device", "cpu", cwd=project)
    assert proc.returncode == ExitCode.CONFIG, proc.stderr
    assert "--scheduler" in proc.stderr and "tcp://scheduler:8786" in proc.stderr and one_paragraph(proc.stderr)
    assert "Exception ignored" not in proc.stderr and "Traceback" not in proc.stderr
    assert run_dirs(project) == []


@pytest.mark.slow
def test_a_malformed_cluster_address_in_the_config_is_exit_2(project):
    proc = cli("run", "configs/churn.yaml", "--set", "cluster.address=not-an-address", "--device", "cpu",
               cwd=project)
    assert proc.returncode == ExitCode.CONFIG, proc.stderr
    assert "cluster.address" in proc.stderr and "Exception ignored" not in proc.stderr


@pytest.fixture
def listener(request) -> Iterator[str]:
    """A TCP service on 127.0.0.1 that is not Dask: it answers like an HTTP server, or says nothing."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.2)
    stop = threading.Event()
    held: list[socket.socket] = []

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            if request.param == "http":
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                conn.close()
            else:
                held.append(conn)                 # silent: keeps the connection open, sends nothing

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"tcp://127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    server.close()


@pytest.mark.slow
@pytest.mark.parametrize("listener", ["http", "silent"], indirect=True)
def test_a_scheduler_address_that_is_not_dask_is_exit_5_naming_it(project, listener):
    proc = cli("run", "configs/churn.yaml", "--scheduler", listener, "--set", "cluster.connect_timeout=3",
               "--device", "cpu", cwd=project)
    assert proc.returncode == ExitCode.BACKEND, proc.stderr
    error = proc.stderr[proc.stderr.index("error: "):]
    assert listener in error and "Dask scheduler" in error and "another service" in error
    assert one_paragraph(error)
    assert "MemoryError" not in proc.stderr and "Exception ignored" not in proc.stderr
    assert "Traceback" not in proc.stderr
    (run_dir,) = run_dirs(project)
    manifest = read_manifest(run_dir)
    assert manifest.status == "failed" and listener in manifest.error


@pytest.mark.slow
def test_an_unreachable_scheduler_leaves_no_client_traceback_and_a_failed_run(project):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        address = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    proc = cli("run", "configs/churn.yaml", "--scheduler", address, "--set", "cluster.connect_timeout=2",
               "--device", "cpu", cwd=project)
    assert proc.returncode == ExitCode.BACKEND, proc.stderr
    assert f"cannot reach the Dask scheduler at {address} within 2 s" in proc.stderr
    assert "Exception ignored" not in proc.stderr and "Traceback" not in proc.stderr
    (run_dir,) = run_dirs(project)
    assert read_manifest(run_dir).status == "failed"


# ------------------------------------------------------------------ scripts without the guard
def _script(project: Path, body: str) -> subprocess.CompletedProcess[str]:
    (project / "snippet.py").write_text(textwrap.dedent(body))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "snippet.py"], cwd=project, env=env, capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL)


UNGUARDED_CALLS = {
    "call at top level": """
        from pipeline import run_pipeline
        run_pipeline("configs/churn.yaml", overrides=["cluster.n_workers=2", "device=cpu"], wait=120)
    """,
    "function called at top level": """
        from pipeline import run_pipeline

        def main():
            run_pipeline("configs/churn.yaml", overrides=["cluster.n_workers=2", "device=cpu"], wait=120)

        main()
    """,
    # Dask's fork start method needs no guard for its workers; the ranks are spawned all the same.
    "local ranks at top level under Dask's fork": """
        import dask
        from pipeline.distributed.local_ranks import run_local_ranks

        dask.config.set({"distributed.worker.multiprocessing-method": "fork"})
        run_local_ranks(print, [(), ()], stage="probe")
    """,
}


@pytest.mark.slow
@pytest.mark.parametrize("body", UNGUARDED_CALLS.values(), ids=UNGUARDED_CALLS.keys())
def test_a_script_without_the_main_guard_fails_at_once_naming_it(project, body):
    proc = _script(project, body)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("pipeline.core.errors.UsageError:"), proc.stderr
    assert 'if __name__ == "__main__":' in proc.stderr and "snippet.py, line" in proc.stderr
    assert "Nanny failed to start" not in proc.stderr


@pytest.mark.slow
def test_a_guarded_script_starts_its_local_cluster(project):
    proc = _script(project, """
        from pipeline import run_pipeline

        if __name__ == "__main__":
            result = run_pipeline("configs/churn.yaml", overrides=["cluster.n_workers=1", "device=cpu"],
                                  until=["split"], keep_outputs=False)
            print("STATUS", result.status, result.manifest.cluster["kind"])
    """)
    assert proc.returncode == 0, proc.stderr
    assert "STATUS succeeded LocalCluster" in proc.stdout


@pytest.mark.slow
def test_a_run_started_while_a_spawned_worker_imports_the_script_is_refused(tmp_path):
    """The worker side: multiprocessing's spawn bootstrap imports the parent's script as
    ``__mp_main__``; a run started then is refused instead of waiting on the parent's lock."""
    (tmp_path / "spawner.py").write_text(textwrap.dedent("""
        import multiprocessing

        if __name__ == "__mp_main__":          # only in the child, while it imports this script
            from pipeline.backends.clusters.main_guard import refuse_run_in_worker_bootstrap
            from pipeline.core.errors import UsageError
            try:
                refuse_run_in_worker_bootstrap()
            except UsageError as exc:
                print("REFUSED", exc, flush=True)

        def work():
            from pipeline.backends.clusters.main_guard import refuse_run_in_worker_bootstrap
            refuse_run_in_worker_bootstrap()    # after the bootstrap: allowed
            print("ALLOWED", flush=True)

        if __name__ == "__main__":
            process = multiprocessing.get_context("spawn").Process(target=work)
            process.start()
            process.join()
    """))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "spawner.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "REFUSED" in proc.stdout and 'if __name__ == "__main__":' in proc.stdout
    assert "ALLOWED" in proc.stdout


# ------------------------------------------------------------------ doctor
def _gpu_ready() -> bool:
    from pipeline.cli.doctor import collect

    return collect()["gpu_ready"]


@pytest.mark.slow
def test_doctor_require_gpu_without_one_says_why_on_stderr(project):
    if _gpu_ready():
        pytest.skip("this machine has a usable GPU")
    proc = cli("doctor", "--require-gpu", cwd=project)
    assert proc.returncode == ExitCode.BACKEND
    assert proc.stderr.startswith("error: --require-gpu: ") and one_paragraph(proc.stderr), proc.stderr
    assert "device: auto" in proc.stdout                    # the report is still on stdout


@pytest.mark.slow
def test_doctor_does_not_import_torch(project):
    code = ("import sys\nfrom pipeline.cli.app import main\n"
            "try:\n    main(['doctor', '--json'])\nexcept SystemExit:\n    pass\n"
            "print('TORCH-IMPORTED' if 'torch' in sys.modules else 'TORCH-NOT-IMPORTED')")
    proc = subprocess.run([sys.executable, "-c", code], cwd=project, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert "TORCH-NOT-IMPORTED" in proc.stdout, proc.stdout + proc.stderr
    report = json.loads(proc.stdout[:proc.stdout.rindex("TORCH-")])
    torch = next(m for m in report["modules"] if m["module"] == "torch")
    from importlib.metadata import version

    assert torch["version"] == version("torch") and "not imported" in torch["detail"]


# ------------------------------------------------------------------ output for logs
@pytest.mark.slow
def test_json_log_format_is_json_on_every_line_of_stdout_and_stderr(project):
    proc = cli("run", "configs/churn.yaml", *FAST, "--log-format", "json", cwd=project)
    assert proc.returncode == 0, proc.stderr
    out = [json.loads(line) for line in proc.stdout.splitlines()]
    err = [json.loads(line) for line in proc.stderr.splitlines()]
    events = {entry.get("event") for entry in out}
    assert {"metrics", "run_result"} <= events
    metrics = next(e for e in out if e.get("event") == "metrics")["metrics"]
    assert metrics["best"] in metrics["models"] and "roc_auc" in metrics["models"]["logreg"]
    result = next(e for e in out if e.get("event") == "run_result")
    assert result["status"] == "succeeded" and Path(result["run_dir"]).is_dir()
    assert any(e.get("event") == "run_finished" for e in err)


@pytest.mark.slow
def test_worker_processes_log_json_lines_in_json_mode(tmp_path):
    """Dask's local workers import ``distributed`` with the logging config the CLI passes them."""
    from pipeline.cli.log_output import WORKER_LOGGING_ENV, worker_json_logging

    code = ("import logging, warnings\nimport distributed\n"
            "logging.getLogger('distributed.worker').warning('worker warning')\n"
            "warnings.warn('a library warning')\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), WORKER_LOGGING_ENV: repr(worker_json_logging())}
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    entries = [json.loads(line) for line in proc.stderr.splitlines()]
    messages = " ".join(e["message"] for e in entries)
    assert "worker warning" in messages and "a library warning" in messages


@pytest.mark.slow
def test_metrics_table_keeps_its_headers_at_80_columns(tmp_path):
    """Cron logs: not a terminal and COLUMNS=80 (or unset); no header may be cut to ``log_lo…``."""
    metrics = {"split": "test", "threshold": 0.5, "rank_by": "roc_auc", "best": "logreg",
               "models": {name: dict.fromkeys(["roc_auc", "pr_auc", "log_loss", "accuracy", "precision",
                                               "recall", "f1"], 0.8123) for name in ("logreg", "random_forest_2")}}
    code = f"from pipeline.cli.app import _print_metrics\n_print_metrics({metrics!r})\n"
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COLUMNS": "80", "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    assert "…" not in proc.stdout
    for header in ("log_loss", "precision", "accuracy", "random_forest_2"):
        assert header in proc.stdout


def test_a_key_a_stage_finds_wrong_as_it_runs_gets_its_line_or_its_set(project):
    """Found only as the stage trained (it imports the model's library), the problem had no
    line ("stages.xgb.params: ..."), where validate's problems all have one."""
    config = project / "configs" / "churn.yaml"
    config.write_text(config.read_text().replace("learning_rate: 0.05", "learning_rate: fast"))
    line = next(i for i, text in enumerate(config.read_text().splitlines(), 1) if "learning_rate: fast" in text)
    proc = cli("run", "configs/churn.yaml", *FAST, "--until", "xgb", "-q", cwd=project)
    assert proc.returncode == ExitCode.CONFIG, proc.stderr
    assert "configs/churn.yaml: 1 config problem" in proc.stderr
    assert f"stages.xgb.params.learning_rate (line {line}): parameter 'learning_rate' of model 'xgboost'" in proc.stderr
    config.write_text(config.read_text().replace("learning_rate: fast", "learning_rate: 0.05"))
    proc = cli("run", "configs/churn.yaml", *FAST, "--until", "xgb", "-q", "--set", "stages.xgb.params.max_depth=deep",
               cwd=project)
    assert "stages.xgb.params.max_depth (--set): parameter 'max_depth'" in proc.stderr, proc.stderr
