"""Runs in MLflow: a real local store (sqlite in a temporary folder), read back through MLflow's
own client; a tracking server that is down never fails the run."""

from __future__ import annotations

import json
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.cli import newest_run, run_cli as _pipeline

mlflow = pytest.importorskip("mlflow")

pytestmark = pytest.mark.slow


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return _pipeline(*args, cwd=cwd, env={"PIPELINE_REPORT": "on", "COLUMNS": "200"})


def test_a_run_is_logged_with_its_config_metrics_epochs_usage_and_artifacts(project):
    uri = f"sqlite:///{project / 'mlflow.db'}"
    proc = cli("run", "configs/churn.yaml", "--device", "cpu", "--set", "stages.mlp.epochs=3",
               "--set", "stages.forest.params.n_estimators=20", "--set", f"tracking.mlflow.uri={uri}",
               "--set", f"tracking.mlflow.artifact_location={(project / 'artifacts').as_uri()}", cwd=project)
    assert proc.returncode == 0, proc.stderr
    run_dir = (project / "runs" / "churn" / "latest").resolve()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    tracked = json.loads((run_dir / "tracking.json").read_text())["mlflow"]
    assert tracked["error"] is None and tracked["run_id"]
    assert tracked["warnings"] == [] and set(tracked["models"]) == set(manifest["models"])    # every model a pyfunc

    client = mlflow.tracking.MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("churn")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.run_id == tracked["run_id"] and run.info.status == "FINISHED"
    assert run.data.tags["pipeline.run_id"] == manifest["run_id"] and run.data.tags["pipeline.device"] == "cpu"
    assert run.data.params["stages.mlp.epochs"] == "3" and run.data.params["stages.forest.params.n_estimators"] == "20"
    for model, values in manifest["metrics"]["models"].items():
        for name, value in values.items():
            if value == value:                                   # NaN is not logged
                assert run.data.metrics[f"{model}.{name}"] == pytest.approx(value), (model, name)
    epochs = client.get_metric_history(run.info.run_id, "mlp.val_loss")
    steps = sorted(m.step for m in epochs)
    assert len(steps) == 3 and steps == list(range(steps[0], steps[0] + 3))    # one value per epoch
    assert run.data.metrics["run.cpu_seconds"] == pytest.approx(manifest["usage"]["cpu_seconds"])
    assert run.data.metrics["stage.xgb.seconds"] == pytest.approx(manifest["stages"]["xgb"]["seconds"])
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"report.html", "manifest.json", "config.yaml", "models"} <= artifacts
    models = {a.path for a in client.list_artifacts(run.info.run_id, "models")}
    assert {f"models/{name}" for name in manifest["models"]} == models


def test_a_tracking_server_that_is_down_never_fails_the_run(project):
    with socket.socket() as probe:                              # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = time.monotonic()
    proc = cli("run", "configs/churn.yaml", "--until", "features", "--device", "cpu",
               "--set", f"tracking.mlflow.uri=http://127.0.0.1:{port}", cwd=project)
    assert proc.returncode == 0, proc.stderr
    assert time.monotonic() - started < 120
    assert "tracking: MLflow at http://127.0.0.1" in proc.stderr and "the run goes on without it" in proc.stderr
    tracked = json.loads((newest_run(project / "runs" / "churn") / "tracking.json").read_text())["mlflow"]
    assert tracked["run_id"] is None and "could not" in tracked["error"]
    # The cause, whole, not cut off mid-way through urllib3's nested reprs.
    assert tracked["error"].endswith("ConnectionRefusedError: [Errno 111] Connection refused"), tracked["error"]
    assert "Connection refused; the run goes on without it" in proc.stderr


def test_tuning_trials_are_logged_with_the_trial_number_as_step(tmp_path):
    from pipeline.hooks.protocol import RunEvent, RunInfo, StageEvent
    from pipeline.runs.record import RunManifest, StageRecord
    from pipeline.tracking import MlflowHook

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    hook = MlflowHook(uri, "trials", artifact_location=(tmp_path / "artifacts").as_uri())
    info = RunInfo("20261124T000000.000Z-abcdef", tmp_path, "p", "cpu", "asked", 1)
    hook.run_started(info)
    trials = [{"number": 0, "value": 0.71}, {"number": 1, "value": None}, {"number": 2, "value": 0.74}]
    record = StageRecord(name="xgb", kind="train", status="succeeded", seconds=2.5,
                         facts={"tuning": {"metric": "roc_auc", "trials": trials}})
    hook.stage_finished(StageEvent(info, record, spec=None, index=1))
    hook.run_finished(RunEvent(info, "succeeded", RunManifest(pipeline="p", run_id=info.run_id, status="succeeded")))
    client = mlflow.tracking.MlflowClient(tracking_uri=uri)
    history = client.get_metric_history(hook.run_id, "xgb.trial.roc_auc")
    assert [(m.step, m.value) for m in sorted(history, key=lambda m: m.step)] == [(0, 0.71), (2, 0.74)]
    assert client.get_run(hook.run_id).data.metrics["stage.xgb.seconds"] == 2.5
    assert json.loads((tmp_path / "tracking.json").read_text())["mlflow"]["run_id"] == hook.run_id


def test_json_logs_stay_json_with_mlflow_and_its_own_loggers_say_only_warnings(tmp_path):
    """MLflow gives its loggers (mlflow, alembic) a plain-text handler of their own at import:
    with --log-format json every stderr line is still JSON, and their INFO chatter (creating
    the store's tables, validating a model's input example) is not part of the run's log."""
    from tests.conftest import small_config

    lines = ["id,a,b,churn"] + [f"{i},{i % 7 / 7:.4f},{i % 5 / 5:.4f},{'yes' if i % 3 == 0 else 'no'}"
                                for i in range(80)]
    (tmp_path / "data.csv").write_text("\n".join(lines) + "\n")
    after = ("  evaluate:\n    kind: evaluate\n    inputs: [logreg]\n"
             "  export:\n    kind: export\n    inputs: [logreg]\n")
    (tmp_path / "p.yaml").write_text(small_config("p", tmp_path / "data.csv", after=after))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    proc = _pipeline("run", "p.yaml", "--log-format", "json", "--set", f"tracking.mlflow.uri={uri}",
                     "--set", "tracking.mlflow.register=p", cwd=tmp_path, env={"PIPELINE_REPORT": "off"})
    assert proc.returncode == 0, proc.stderr
    records = []
    for line in proc.stderr.splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            pytest.fail(f"not a JSON line on stderr: {line!r}\n{proc.stderr}")
    assert any(r.get("event") == "run_finished" or r["logger"] == "pipeline" for r in records)
    chatter = [r for r in records if r["logger"].split(".")[0] in ("mlflow", "alembic", "sqlalchemy", "huey")
               and r["level"] in ("debug", "info")]
    assert chatter == [], chatter
    tracked = json.loads((newest_run(tmp_path / "runs" / "p") / "tracking.json").read_text())["mlflow"]
    assert tracked["error"] is None and tracked["run_id"]
    assert tracked["models"] and tracked["registered"]          # a pyfunc model logged (an input example validated)
    assert tracked["experiment"] == "p"                         # the pipeline's name when none is set


def test_an_unusable_database_store_is_one_quick_warning_not_minutes_of_retries(tmp_path, caplog):
    """MLflow's SQLAlchemy store tries to open its database ten times over about 100 s: a sqlite
    file that cannot be created (/proc) or is not a database fails once, at once, and the run
    goes on without tracking, as with a server that is down."""
    from pipeline.hooks.protocol import RunEvent, RunInfo
    from pipeline.runs.record import RunManifest
    from pipeline.tracking import MlflowHook

    (tmp_path / "notes.db").write_text("not a database\n")
    for uri, why in (("sqlite:////proc/pipeline-tracking.db", "unable to open database file"),
                     (f"sqlite:///{tmp_path / 'notes.db'}", "not a database")):
        caplog.clear()
        info = RunInfo("20261124T000000.000Z-abcdef", tmp_path, "p", "cpu", "asked", 1)
        hook = MlflowHook(uri, "unusable")
        started = time.monotonic()
        hook.run_started(info)
        hook.run_finished(RunEvent(info, "succeeded", RunManifest(pipeline="p", run_id=info.run_id,
                                                                  status="succeeded")))
        assert time.monotonic() - started < 30, uri                   # no retries (they take ~100 s)
        tracked = json.loads((tmp_path / "tracking.json").read_text())["mlflow"]
        assert tracked["run_id"] is None and why in tracked["error"], tracked
        warned = [r.getMessage() for r in caplog.records if r.name == "pipeline" and "tracking:" in r.getMessage()]
        assert len(warned) == 1 and why in warned[0] and "the run goes on without it" in warned[0], warned


def test_a_server_that_accepts_and_never_answers_costs_one_timeout(project):
    """The HTTP timeout (and no retries) bound a server that takes the connection and never
    answers: one call times out, the rest are skipped, the run succeeds and says why."""
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []

    def accept() -> None:
        try:
            while True:
                held.append(server.accept()[0])                  # read nothing, answer nothing
        except OSError:
            return

    threading.Thread(target=accept, daemon=True).start()
    try:
        proc = _pipeline("run", "configs/churn.yaml", "--until", "features", "--device", "cpu",
                         "--set", f"tracking.mlflow.uri=http://127.0.0.1:{server.getsockname()[1]}", cwd=project,
                         env={"PIPELINE_REPORT": "off", "MLFLOW_HTTP_REQUEST_TIMEOUT": "2"})
    finally:
        server.close()
        for connection in held:
            connection.close()
    assert proc.returncode == 0, proc.stderr
    tracked = json.loads((newest_run(project / "runs" / "churn") / "tracking.json").read_text())["mlflow"]
    assert tracked["run_id"] is None and "timed out" in tracked["error"], tracked
    assert proc.stderr.count("the run goes on without it") == 1, proc.stderr
