"""End-to-end: the ``pipeline`` command run as a subprocess, as users and cron jobs run it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import newest_run, run_cli as _pipeline
from pipeline.core.errors import ExitCode
from pipeline.runs.record import read_manifest

pytestmark = pytest.mark.slow


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return _pipeline(*args, cwd=cwd, env={"COLUMNS": "200"})


def test_run_shipped_config_reaches_target_auc(project):
    proc = cli("run", "configs/churn.yaml", "--device", "cpu", cwd=project)
    assert proc.returncode == 0, proc.stderr
    latest = project / "runs" / "churn" / "latest"
    metrics = read_manifest(latest).metrics
    best = metrics["models"][metrics["best"]]
    assert best["roc_auc"] >= 0.84, metrics
    assert "roc_auc" in proc.stdout and metrics["best"] in proc.stdout
    # Not a TTY: progress is plain log lines, one per stage event, no control characters.
    assert "[9/9] export (export) done" in proc.stderr and "\x1b[" not in proc.stderr
    predictions = latest / "export" / "predictions.parquet"
    import pandas as pd

    table = pd.read_parquet(predictions)
    assert {"customerID", "Churn", "score_logreg", "score_forest", "score_xgb", "score_mlp"} <= set(table.columns)
    assert len(table) == 1409
    assert metrics["models"]["mlp"]["roc_auc"] >= 0.83, metrics["models"]["mlp"]

    # Every exported model reloads in this process and scores raw rows as the run did.
    from pipeline.scoring.model_folder import load_model

    raw = pd.read_csv(project / "data" / "telco_customer_churn.csv", na_values=[" "])
    rows = raw.set_index("customerID").loc[table["customerID"]].reset_index()
    for name in ("logreg", "forest", "xgb", "mlp"):
        model = load_model(latest / "export" / "models" / name)
        assert abs(model.score(rows) - table[f"score_{name}"].to_numpy()).max() < 1e-5, name


def test_shipped_torch_stage_trains_zero_copy_and_keeps_its_curve(project):
    """The MLP of the shipped config: AUC target, Keras-style epoch lines, artifacts, no copies."""
    proc = cli("run", "configs/churn.yaml", "--until", "mlp", "--device", "cpu", cwd=project)
    assert proc.returncode == 0, proc.stderr
    latest = newest_run(project / "runs" / "churn")               # --until: 'latest' stays
    facts = read_manifest(latest).stages["mlp"].facts
    assert facts["bytes_copied"] == 0 and all(h["zero_copy"] for h in facts["handoffs"])
    assert {h["name"] for h in facts["handoffs"]} == {f"{s}.{t}" for s in ("train", "valid", "test") for t in "Xy"}
    import re

    lines = re.findall(r"mlp: (Epoch \d+/40 - \S+ - loss: [\d.]+ - val_loss: [\d.]+ - val_auc: [\d.]+)", proc.stderr)
    assert len(lines) == facts["epochs_run"] and lines[0].startswith("Epoch 1/40")
    history = (latest / "mlp" / "history.csv").read_text().splitlines()
    assert history[0] == "epoch,seconds,loss,val_loss,val_auc" and len(history) == facts["epochs_run"] + 1
    assert (latest / "mlp" / "learning_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_config_errors_exit_2_with_lines_and_no_traceback(project):
    bad = project / "configs" / "bad.yaml"
    bad.write_text("name: churn\ndevise: cpu\nstages:\n  raw:\n    kind: lod\n    path: x.csv\n")
    proc = cli("run", str(bad), cwd=project)
    assert proc.returncode == ExitCode.CONFIG
    assert "devise (line 2)" in proc.stderr and "did you mean 'device'" in proc.stderr
    assert "stages.raw.kind (line 5)" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (project / "runs").exists()


def test_debug_shows_the_traceback(project):
    proc = cli("--debug", "validate", "configs/missing.yaml", cwd=project)
    assert proc.returncode == ExitCode.CONFIG and "Traceback" in proc.stderr


def test_missing_data_file_exits_3_naming_the_file(project):
    proc = cli("run", "configs/churn.yaml", "--set", "stages.raw.path=data/nope.csv", cwd=project)
    assert proc.returncode == ExitCode.DATA
    assert "data/nope.csv" in proc.stderr and "stage 'raw'" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.skipif("gpu" in __import__("pipeline.backends", fromlist=["x"]).available_devices(),
                    reason="a GPU is available here")
def test_gpu_without_gpu_exits_5_never_runs_on_cpu(project):
    proc = cli("run", "configs/churn.yaml", "--device", "gpu", cwd=project)
    assert proc.returncode == ExitCode.BACKEND
    assert "device: gpu was requested" in proc.stderr
    assert not (project / "runs").exists()


def test_validate_show_dag_schema(project):
    assert cli("validate", "configs/churn.yaml", cwd=project).stdout.strip().endswith("valid (9 stages)")
    shown = cli("show", "configs/churn.yaml", "--set", "stages.forest.params.n_estimators=500", cwd=project)
    assert shown.returncode == 0 and "n_estimators: 500" in shown.stdout and "runs_dir: runs" in shown.stdout
    as_json = json.loads(cli("show", "configs/churn.yaml", "--format", "json", cwd=project).stdout)
    assert as_json["stages"]["split"]["valid"] == 0.1
    text = cli("dag", "configs/churn.yaml", cwd=project).stdout
    assert "evaluate [evaluate] <- logreg, forest, xgb, mlp" in text
    mermaid = cli("dag", "configs/churn.yaml", "--format", "mermaid", cwd=project).stdout
    assert mermaid.startswith("flowchart LR") and "s_features --> s_xgb" in mermaid
    schema = json.loads(cli("schema", cwd=project).stdout)
    assert schema["title"] == "pipeline config" and "stages" in schema["properties"]


def test_doctor_reports_what_auto_would_choose(project):
    proc = cli("doctor", "--json", cwd=project)
    assert proc.returncode == 0
    report = json.loads(proc.stdout)
    assert report["auto_device"] in ("cpu", "gpu") and report["auto_reason"]
    modules = {m["module"]: m for m in report["modules"]}
    assert set(modules) >= {"cudf", "cuml", "cupy", "dask_cuda", "torch"}
    assert modules["xgboost"]["importable"] is True
    if report["auto_device"] == "cpu":
        assert cli("doctor", "--require-gpu", cwd=project).returncode == ExitCode.BACKEND


def test_until_runs_a_prefix(project):
    proc = cli("run", "configs/churn.yaml", "--until", "features", "--device", "cpu", cwd=project)
    assert proc.returncode == 0, proc.stderr
    manifest = read_manifest(newest_run(project / "runs" / "churn"))
    assert list(manifest.stages) == ["raw", "split", "features"]


def test_terminal_gets_live_progress(project):
    """On a TTY the run shows a line per stage with its time and memory (rich), not log lines,
    and the torch stage a line per epoch with a bar within it."""
    import pty

    # A process: its stdout and stderr must be a terminal (a pty).
    leader, follower = pty.openpty()
    env = {**os.environ, "COLUMNS": "160", "TERM": "xterm"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipeline", "run", "configs/churn.yaml", "--only", "mlp", "--device", "cpu",
         "--set", "stages.mlp.epochs=3"],
        cwd=project, env=env, stdin=follower, stdout=follower, stderr=follower)
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 4096)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    assert proc.wait(timeout=120) == 0
    screen = b"".join(chunks).decode(errors="replace")
    assert "✓" in screen and "[3/4] features" in screen and "[4/4] mlp" in screen and "peak RSS" in screen
    assert "Epoch 1/3 - " in screen and "Epoch 3/3 - " in screen and "val_auc: " in screen
    assert "━" in screen                      # the within-epoch progress bar was drawn
    assert "INFO pipeline" not in screen


def test_unwritable_runs_dir_exits_6(project):
    (project / "blocked").write_text("a file where the runs folder should go")
    proc = cli("run", "configs/churn.yaml", "--runs-dir", "blocked/runs", "--device", "cpu", cwd=project)
    assert proc.returncode == ExitCode.STORAGE
    assert "cannot create" in proc.stderr and "blocked/runs" in proc.stderr and "Traceback" not in proc.stderr


def test_config_that_is_not_text_exits_2(project):
    (project / "configs" / "binary.yaml").write_bytes(b"\xff\xfe\x00bad")
    proc = cli("validate", "configs/binary.yaml", cwd=project)
    assert proc.returncode == ExitCode.CONFIG and "cannot read config file" in proc.stderr
