"""Batch-job behaviour: the stage cache, resume after SIGKILL, locks, SIGTERM, JSON logs.

Every run here is a real ``pipeline run`` or ``run_pipeline`` on the bundled data; the runs that
are killed, signalled or locked out are processes of their own, and kills are real signals.
"""

from __future__ import annotations

import json
import math
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from tests.support.bad_inputs import Launch, cli_env, run_processes
from tests.support.cli import run_cli
from pipeline import run_pipeline
from pipeline.backends import get_backend
from pipeline.core.errors import ExitCode
from pipeline.runs.locks import RunLock
from pipeline.runs.record import read_manifest
from pipeline.runs.store import sha256_file

pytestmark = pytest.mark.slow
# One forest thread: scikit-learn adds its trees' probabilities in thread-completion order
# (n_jobs=-1), so two runs can differ in the last bit, which turns tied scores into untied
# ones and moves ROC AUC by ~1e-6; seen once in a full parallel suite on two cores.
FAST = ["device=cpu", "stages.forest.params.n_estimators=20", "stages.forest.params.n_jobs=1",
        "stages.xgb.params.n_estimators=30", "stages.mlp.epochs=3"]


def statuses(result) -> dict[str, str]:
    return {name: record.status for name, record in read_manifest(result.run_dir).stages.items()}


def cli(project: Path, *args: str, process: bool = False) -> subprocess.CompletedProcess:
    """``pipeline run configs/churn.yaml`` with the fast settings (in process unless ``process``)."""
    return run_cli("run", "configs/churn.yaml", *[a for s in FAST for a in ("--set", s)], *args, cwd=project,
                   process=process)


def test_rerun_with_nothing_changed_runs_no_stage(in_project):
    first = run_pipeline("configs/churn.yaml", overrides=FAST)
    second = run_pipeline("configs/churn.yaml", overrides=FAST)
    assert set(statuses(first).values()) == {"succeeded"}
    assert set(statuses(second).values()) == {"cached"}
    assert second.manifest.metrics == first.manifest.metrics
    a = read_manifest(first.run_dir).artifacts
    b = read_manifest(second.run_dir).artifacts
    assert {k: v for k, v in a.items() if k != "config.yaml"} == {k: v for k, v in b.items() if k != "config.yaml"}
    assert second.outputs["xgb"].scores["test"].tolist() == first.outputs["xgb"].scores["test"].tolist()


def test_one_param_change_reruns_exactly_that_stage_and_its_dependents(in_project):
    run_pipeline("configs/churn.yaml", overrides=FAST)
    changed = run_pipeline("configs/churn.yaml", overrides=[*FAST, "stages.xgb.params.max_depth=3"])
    ran = {name for name, status in statuses(changed).items() if status == "succeeded"}
    assert ran == {"xgb", "evaluate", "export"}
    forced = run_pipeline("configs/churn.yaml", overrides=FAST, force=["features"])
    ran = {name for name, status in statuses(forced).items() if status == "succeeded"}
    assert ran == {"features", "logreg", "forest", "xgb", "mlp", "evaluate", "export"}
    everything = run_pipeline("configs/churn.yaml", overrides=FAST, force=True)
    assert set(statuses(everything).values()) == {"succeeded"}


def test_input_rewritten_in_place_with_same_size_and_mtime_is_noticed(in_project):
    run_pipeline("configs/churn.yaml", overrides=FAST)
    data = in_project / "data" / "telco_customer_churn.csv"
    stat = data.stat()
    text = data.read_text()
    data.write_text(text.replace("Female", "Femal_", 1))     # same size, different content
    os.utime(data, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert data.stat().st_size == stat.st_size and data.stat().st_mtime_ns == stat.st_mtime_ns
    again = run_pipeline("configs/churn.yaml", overrides=FAST)
    assert statuses(again)["raw"] == "succeeded"


def test_a_truncated_cache_entry_is_recomputed_never_loaded(in_project, caplog):
    first = run_pipeline("configs/churn.yaml", overrides=FAST)
    key = read_manifest(first.run_dir).stages["features"].cache_key
    pickle_file = in_project / "runs" / "churn" / ".cache" / key / "output.pkl"
    pickle_file.write_bytes(pickle_file.read_bytes()[:100])
    with caplog.at_level("WARNING", logger="pipeline"):
        second = run_pipeline("configs/churn.yaml", overrides=FAST)
    assert "failed verification" in caplog.text
    assert statuses(second)["features"] == "succeeded" and statuses(second)["xgb"] == "cached"
    assert second.manifest.metrics == first.manifest.metrics


def test_sigkill_at_random_moments_then_rerun_gives_the_uninterrupted_result(project, tmp_path):
    reference = cli(project, "--runs-dir", "reference")
    assert reference.returncode == 0, reference.stderr
    expected = _result_of(project / "reference" / "churn" / "latest")
    length = read_manifest(project / "reference" / "churn" / "latest").duration_s   # the run, not the imports
    rng = random.Random(1234)
    # Seven runs, each a process killed by SIGKILL at a random moment in its own seventh of the
    # run's length, two at a time. They are forks of a process that imported the package (the
    # bad-input sweep's launcher), so the moments fall in the run, not in the interpreter's start.
    args = ["run", "configs/churn.yaml", *[a for s in FAST for a in ("--set", s)]]
    trials = {f"trial{t}": Launch([*args, "--runs-dir", f"trial{t}"], project, cli_env(), timeout=300,
                                  signal=signal.SIGKILL, trigger=(t + rng.random()) / 7 * length) for t in range(7)}
    killed = run_processes(trials, tmp_path, workers=2)
    assert any(k.returncode == -signal.SIGKILL for k in killed.values())
    for runs, proc in killed.items():
        assert proc.returncode in (0, -signal.SIGKILL), (runs, proc.stderr[-2000:])   # 0: it ended first
        rerun = cli(project, "--runs-dir", runs, "--wait", "5")
        assert rerun.returncode == 0, (runs, rerun.stderr)
        _assert_same_result(_result_of(project / runs / "churn" / "latest"), expected, runs)
        leftovers = [p.name for p in (project / runs / "churn" / ".cache").iterdir() if p.name.startswith(".")]
        assert all(name.startswith(".tmp-") for name in leftovers)   # half-written entries stay hidden


def _result_of(run_dir: Path) -> tuple[dict, pd.DataFrame]:
    """Every metric (flattened) and the exported predictions, after checking each artifact is whole."""
    manifest = read_manifest(run_dir)
    for file, digest in manifest.artifacts.items():
        assert sha256_file(run_dir / file) == digest, file
    return _flat(manifest.metrics), pd.read_parquet(run_dir / "export" / "predictions.parquet")


def _assert_same_result(got: tuple[dict, pd.DataFrame], expected: tuple[dict, pd.DataFrame], runs: str) -> None:
    """Equal to float32's precision, not to the bit: a stage cached by the killed run trained in a
    forked process, where torch's CPU kernels add in another order than the reference's (the MLP's
    log loss moved by ~4e-9 once). A half-written or wrong artifact is off by far more than 1e-6."""
    metrics, predictions = got
    assert metrics.keys() == expected[0].keys(), runs
    differ = {key: (value, expected[0][key]) for key, value in metrics.items()
              if not _close(value, expected[0][key])}
    assert not differ, (runs, differ)
    pd.testing.assert_frame_equal(predictions, expected[1], rtol=1e-6, atol=1e-9)


def _close(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9) or (math.isnan(a) and math.isnan(b))
    return a == b


def _flat(value: dict, prefix: str = "") -> dict:
    flat = {}
    for key, item in value.items():
        if isinstance(item, dict):
            flat.update(_flat(item, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = item
    return flat


def test_a_second_run_waits_then_exits_7_naming_the_holder(project):
    with RunLock(project / "runs" / "churn" / ".lock", wait=0) as lock:
        lock.note(run_id="the-holder")
        started = time.monotonic()
        # A process: the lock is held by this one, and the waiting run must be another.
        proc = cli(project, "--wait", "1", process=True)
        waited = time.monotonic() - started
    assert proc.returncode == ExitCode.LOCKED
    assert f"pid {os.getpid()}" in proc.stderr and "the-holder" in proc.stderr and "waited 1 s" in proc.stderr
    assert waited >= 1
    # While it waits, the log says so once (a cron log went quiet for the whole wait).
    assert proc.stderr.count("waiting up to 1 s for") == 1, proc.stderr


def test_a_lock_left_by_a_dead_process_is_taken_over(project):
    lock_file = project / "runs" / "churn" / ".lock"
    lock_file.parent.mkdir(parents=True)
    lock_file.write_text(json.dumps({"pid": 999999, "host": "gone", "since": "2020-01-01T00:00:00Z"}))
    proc = cli(project, "--wait", "2")
    assert proc.returncode == 0, proc.stderr


def test_two_concurrent_runs_never_interleave(project):
    procs = [subprocess.Popen([sys.executable, "-m", "pipeline", "run", "configs/churn.yaml", "--no-cache",
                               *[a for s in FAST for a in ("--set", s)]],
                              cwd=project, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    for proc in procs:
        assert proc.wait(timeout=600) == 0, proc.stderr.read()
    runs = sorted(p for p in (project / "runs" / "churn").iterdir() if p.name[0].isdigit())
    manifests = [read_manifest(r) for r in runs]
    assert len(manifests) == 2
    first, second = sorted(manifests, key=lambda m: m.started)
    assert first.ended <= second.started, "the second run started only after the first ended"
    for run_dir, manifest in zip(runs, manifests):
        for file, digest in manifest.artifacts.items():
            assert sha256_file(run_dir / file) == digest


def _a_stage_finished(folders: set[Path]) -> bool:
    for folder in folders:
        try:
            stages = json.loads((folder / "manifest.json").read_text())["stages"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if any(stage.get("status") == "succeeded" for stage in stages.values()):
            return True
    return False


def test_sigterm_records_an_interrupted_run_and_exits_143(project):
    ok = cli(project, "--until", "raw")
    assert ok.returncode == 0
    proc = subprocess.Popen([sys.executable, "-m", "pipeline", "run", "configs/churn.yaml", "--no-cache",
                             *[a for s in FAST for a in ("--set", s)]],
                            cwd=project, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    runs = project / "runs" / "churn"
    before = set(runs.iterdir())
    # Signalled once a stage of the new run has finished (a fixed sleep raced the interpreter's
    # start on a busy host).
    deadline = time.monotonic() + 120
    while not _a_stage_finished(set(runs.iterdir()) - before) and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == ExitCode.TERMINATED
    newest = max(p for p in runs.iterdir() if p.name[0].isdigit())
    manifest = read_manifest(newest)
    assert manifest.status == "interrupted" and manifest.error == "terminated (SIGTERM)"
    assert not os.path.lexists(runs / "latest")          # its one succeeded run ran some stages
    # Its last line names the run, as a finished run's does (it used to end at "terminated").
    assert f"run {manifest.run_id} interrupted" in proc.stdout.read()


def test_json_logs_are_one_object_per_line(project):
    proc = cli(project, "--log-format", "json")
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stderr.splitlines() if line.strip()]
    finished = {e["stage"]: e for e in events if e.get("event") == "stage_finished"}
    assert set(finished) == {"raw", "split", "features", "logreg", "forest", "xgb", "mlp", "evaluate", "export"}
    assert all(isinstance(e["seconds"], float) for e in finished.values())
    (done,) = [e for e in events if e.get("event") == "run_finished"]
    assert done["status"] == "succeeded" and done["metrics"]["xgb"]["roc_auc"] > 0.8
    bad = cli(project, "--log-format", "json", "--set", "stages.raw.path=data/nope.csv")
    (error,) = [json.loads(line) for line in bad.stderr.splitlines() if '"event": "error"' in line]
    assert bad.returncode == ExitCode.DATA and error["exit_code"] == ExitCode.DATA and "nope.csv" in error["message"]
    # A run that started and then stopped still says where it is: run_result on stdout.
    stopped = cli(project, "--log-format", "json", "--no-cache", "--set", "budget.max_wall=0.5s",
                  "--ignore-budget-estimate")
    assert stopped.returncode == ExitCode.BUDGET, stopped.stderr
    (result,) = [e for e in map(json.loads, stopped.stdout.splitlines()) if e.get("event") == "run_result"]
    assert result["status"] == "interrupted" and Path(result["run_dir"]).is_dir()


def test_a_cached_run_loads_only_what_it_reports(in_project):
    """The CLI keeps no outputs: a fully cached run must not unpickle models (that imports
    PyTorch and costs seconds). The metrics table comes from the run record the evaluate stage
    cached with its output, so no output at all is unpickled."""
    from pipeline.config import load_config
    from pipeline.engine.runner import Runner

    run_pipeline("configs/churn.yaml", overrides=FAST)
    runner = Runner(load_config("configs/churn.yaml", overrides=FAST), keep_outputs=False)
    result = runner.run()
    assert set(statuses(result).values()) == {"cached"}
    assert result.outputs == {} and result.manifest.metrics["best"]


def test_a_stage_whose_input_could_not_be_loaded_fails_instead_of_running_on_nothing(tmp_path):
    from pipeline.config import load_config
    from pipeline.core.errors import StageError
    from pipeline.engine.executors import StageOutcome, StageTask, run_on_worker

    spec = load_config("configs/churn.yaml").stages["split"]
    task = StageTask(name="split", spec=spec, backend=get_backend("cpu"), seed=42, artifacts_dir=tmp_path)
    lost = StageOutcome("raw", "failed", error=StageError("raw", "its cache entry disappeared"))
    outcome = run_on_worker(task, {"raw": lost})
    assert outcome.status == "failed" and "input 'raw' is unavailable" in str(outcome.error)


SWALLOWS_SIGTERM = '''\
import os, signal

def wrapped(ctx, inputs):
    # A library that catches the interrupt inside its own loop and raises its own error
    # (XGBoost does this from inside a training callback).
    try:
        os.kill(os.getpid(), signal.SIGTERM)
    except KeyboardInterrupt as exc:
        raise RuntimeError("library: training aborted") from exc
    return {}
'''


def test_sigterm_that_a_library_turns_into_its_own_error_still_exits_143(tmp_path):
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "swallow.py").write_text(SWALLOWS_SIGTERM)
    (tmp_path / "configs" / "p.yaml").write_text(
        'name: p\ndevice: cpu\nstages:\n  s: {kind: python, function: "swallow:wrapped"}\n')
    proc = subprocess.run([sys.executable, "-m", "pipeline", "run", "configs/p.yaml"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == ExitCode.TERMINATED, proc.stderr
    manifest = read_manifest(max(p for p in (tmp_path / "runs" / "p").iterdir() if p.name[0].isdigit()))
    assert manifest.status == "interrupted" and manifest.error == "terminated (SIGTERM)"
