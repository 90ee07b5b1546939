"""What a person reads during and after a run: progress inside long stages (boosting rounds,
tuning trials, cross-validation folds, permutation importances) with elapsed times, on a
terminal, in plain logs, not in JSON logs, from Dask workers and in library runs; the last
line of ``pipeline run``; ``runs show`` naming the report; a missing relative input naming the
folder it was looked for in; ``--run latest`` among several pipelines as a usage error."""

from __future__ import annotations

import json
import logging
import re
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.support.cli import run_cli as _pipeline
from pipeline.hooks.protocol import HookList, LineProgress, LogProgress, step_lines
from pipeline.hooks.progress import LogHook

ROWS = 240
# A bar's lines for every step: by default a bar shorter than 10 s leaves no line, and these
# runs take a second.
EVERY_STEP = {"PIPELINE_PROGRESS_SECONDS": "0"}


def write_table(folder: Path, rows: int = ROWS) -> Path:
    rng = np.random.default_rng(3)
    a, b, c = rng.normal(size=rows), rng.normal(size=rows), rng.normal(size=rows)
    churn = np.where(2 * a - b + rng.normal(scale=0.5, size=rows) > 0, "yes", "no")
    path = folder / "data.csv"
    pd.DataFrame({"id": np.arange(rows), "a": a.round(4), "b": b.round(4), "c": c.round(4),
                  "churn": churn}).to_csv(path, index=False)
    return path


def config(name: str, data: str, *, folds: bool = True) -> str:
    """xgboost tuned over 2 trials on 3 folds, then fitted (20 rounds), then evaluated."""
    split = "folds: 3" if folds else "valid: 0.2"
    return f"""\
name: {name}
device: cpu
stages:
  raw: {{kind: load, path: {data}}}
  split: {{kind: split, inputs: [raw], target: churn, positive: "yes", test: 0.25, {split}}}
  features:
    kind: features
    inputs: [split]
    id: id
    ops: [{{standardize: {{columns: [a, b, c]}}}}]
  xgb:
    kind: train
    inputs: [features]
    model: xgboost
    params: {{n_estimators: 20, max_depth: 2, n_jobs: 1}}
    tune:
      trials: 2
      space: {{learning_rate: {{float: [0.05, 0.3]}}}}
  evaluate: {{kind: evaluate, inputs: [xgb]}}
"""


def cli(*args: str, cwd: Path, report: str = "off") -> subprocess.CompletedProcess[str]:
    """The CLI off a terminal; ``report``: PIPELINE_REPORT (the tests' default is off: it is slow)."""
    return _pipeline(*args, cwd=cwd, env={"COLUMNS": "200", "PIPELINE_REPORT": report, **EVERY_STEP})


@pytest.fixture(scope="module")
def plain_run(tmp_path_factory):
    """One run off a terminal (text logs), shared by the tests that read its output."""
    folder = tmp_path_factory.mktemp("plain")
    write_table(folder)
    (folder / "p.yaml").write_text(config("p", "data.csv"))
    proc = cli("run", "p.yaml", cwd=folder, report="on")
    assert proc.returncode == 0, proc.stderr
    return folder, proc


def test_plain_logs_show_each_long_step_with_its_elapsed_time(plain_run):
    _, proc = plain_run
    err = proc.stderr
    assert re.search(r"xgb: tuning trials: 2/2 in \d+\.\ds", err), err
    assert re.search(r"xgb: trial 2/2: .* \(\d+\.\ds elapsed\)", err)
    assert re.search(r"xgb: cross-validation folds: 3/3 in \d+\.\ds", err)
    assert re.search(r"xgb: fold 3/3 - .*elapsed\)", err)
    assert re.search(r"xgb: boosting rounds: 20/20 in \d+\.\ds", err)
    assert re.search(r"evaluate: permutation importance of xgb \(3 features x 3\): 9/9 in \d+\.\ds", err)
    assert "\x1b[" not in err                         # no control characters in a log


def test_the_last_line_is_the_outcome_and_the_report(plain_run):
    folder, proc = plain_run
    last = proc.stdout.strip().splitlines()[-1]
    match = re.fullmatch(r"run (\S+) succeeded in \d+\.\ds: report (\S+report\.html)", last)
    assert match, last
    report = folder / match.group(2)
    assert report.is_file() and report.parent.name == match.group(1)


def test_a_failed_run_ends_with_its_outcome_and_report_after_the_error(tmp_path):
    write_table(tmp_path)
    (tmp_path / "broken_stage.py").write_text("def fail(ctx, inputs):\n    raise ValueError('no such thing')\n")
    (tmp_path / "f.yaml").write_text(config("f", "data.csv", folds=False)
                                     + "  broken: {kind: python, inputs: [evaluate], function: 'broken_stage:fail'}\n")
    proc = cli("run", "f.yaml", cwd=tmp_path, report="on")
    assert proc.returncode == 4, proc.stderr                      # a stage failed
    assert "stage 'broken'" in proc.stderr and "no such thing" in proc.stderr
    last = proc.stdout.strip().splitlines()[-1]
    match = re.fullmatch(r"run (\S+) failed in \d+\.\ds: report (\S+report\.html)", last)
    assert match, proc.stdout
    assert (tmp_path / match.group(2)).is_file()


def test_runs_show_names_the_report(plain_run):
    folder, _ = plain_run
    shown = cli("runs", "show", "latest", cwd=folder)
    assert shown.returncode == 0, shown.stderr
    (line,) = [line for line in shown.stdout.splitlines() if line.startswith("report")]
    assert line.split()[-1].endswith("report.html") and (folder / line.split()[-1]).is_file()
    as_json = json.loads(cli("runs", "show", "latest", "--json", cwd=folder).stdout)
    assert as_json["report"].endswith("report.html")


def test_json_logs_carry_no_progress_lines(tmp_path):
    write_table(tmp_path)
    (tmp_path / "p.yaml").write_text(config("p", "data.csv", folds=False))
    proc = cli("run", "p.yaml", "--log-format", "json", cwd=tmp_path, report="on")
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    messages = [line["message"] for line in lines]
    assert not [m for m in messages if "boosting rounds" in m or "tuning trials:" in m or "permutation importance of"
                in m], messages
    result = [line for line in lines if line.get("event") == "run_result"][-1]
    assert result["report"].endswith("report.html") and result["status"] == "succeeded"


def test_a_relative_input_not_found_names_the_folder_it_was_read_from(tmp_path):
    write_table(tmp_path)
    (tmp_path / "p.yaml").write_text(config("p", "data.csv", folds=False))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = cli("run", str(tmp_path / "p.yaml"), "--runs-dir", str(tmp_path / "runs"), cwd=elsewhere)
    assert proc.returncode == 3, proc.stderr
    assert "input file not found: data.csv" in proc.stderr
    assert f"working directory {elsewhere}" in proc.stderr and str(elsewhere / "data.csv") in proc.stderr
    assert "Traceback" not in proc.stderr


def test_latest_among_several_pipelines_is_a_usage_error_that_names_them(tmp_path, plain_run):
    import shutil

    folder, _ = plain_run
    shutil.copytree(folder / "runs" / "p", tmp_path / "runs" / "p", symlinks=True)
    shutil.copytree(folder / "runs" / "p", tmp_path / "runs" / "q", symlinks=True)
    (tmp_path / "rows.csv").write_text("id,a,b,c\n1,0.1,0.2,0.3\n")
    proc = cli("predict", "--run", "latest", "--input", "rows.csv", "--output", "out.csv", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "config problem" not in proc.stderr
    assert "p, q" in proc.stderr and "--pipeline NAME" in proc.stderr and "--run" in proc.stderr
    picked = cli("predict", "--run", "latest", "--pipeline", "q", "--input", "rows.csv", "--output", "out.csv",
                 cwd=tmp_path)
    # --pipeline picks the run; this config exports no model, which is what predict says next
    assert picked.returncode == 3 and "exported no models" in picked.stderr, picked.stderr
    # One of them without the alias: not "several pipelines with a latest run: p".
    (tmp_path / "runs" / "q" / "latest").unlink()
    one = cli("predict", "--run", "latest", "--input", "rows.csv", "--output", "out.csv", cwd=tmp_path)
    assert one.returncode == 2 and "one of them has a latest run: p (no succeeded run yet: q)" in one.stderr, one.stderr


# ------------------------------------------------------------------ library runs
def test_a_library_run_prints_nothing_unless_asked(tmp_path, capfd, monkeypatch, caplog):
    from pipeline import run_pipeline

    monkeypatch.setenv(*next(iter(EVERY_STEP.items())))

    data = write_table(tmp_path)
    (tmp_path / "p.yaml").write_text(config("p", str(data), folds=False))
    with caplog.at_level(logging.INFO, logger="pipeline"):
        run_pipeline(tmp_path / "p.yaml", runs_dir=tmp_path / "runs", overrides=["report.enabled=false"])
    quiet = capfd.readouterr()
    assert quiet.out == "" and quiet.err == ""
    # The stage lines go to the "pipeline" logger, for the caller's logging to show.
    assert "[4/5] xgb (train) started" in caplog.text and re.search(r"run \S+ succeeded in ", caplog.text)
    result = run_pipeline(tmp_path / "p.yaml", runs_dir=tmp_path / "runs", cache=False, progress=True,
                          overrides=["report.enabled=false"])
    shown = capfd.readouterr().err
    assert "[4/5] xgb (train) started" in shown
    assert re.search(r"xgb: boosting rounds: 20/20 in \d+\.\ds", shown)
    assert re.search(r"xgb: tuning trials: 2/2 in", shown)
    assert shown.strip().splitlines()[-1].startswith(f"run {result.run_id} succeeded in ")


# ------------------------------------------------------------------ the bar as lines
def test_a_bar_as_lines_says_the_count_and_the_elapsed_time():
    lines: list[str] = []
    with step_lines(lines.append, 5, "rounds", every=0.0) as advance:
        for _ in range(5):
            advance(1)
    assert lines[:4] == [line for line in lines[:4] if re.fullmatch(r"rounds: [1-4]/5, \d+\.\ds elapsed", line)]
    assert len(lines) == 5 and re.fullmatch(r"rounds: 5/5 in \d+\.\ds", lines[-1])
    quiet: list[str] = []
    with step_lines(quiet.append, 300, "rounds", every=10.0) as advance:   # the default: every 10 s at most
        for _ in range(300):
            advance(1)
    assert quiet == []                        # a short bar leaves no line: the stage's own say enough


def test_bar_lines_from_a_worker_are_shown_where_bars_are(caplog):
    from pipeline.hooks.protocol import RunInfo, StageEvent
    from pipeline.runs.record import StageRecord

    run = RunInfo("r", Path("."), "p", "cpu", "test", 1)
    event = StageEvent(run, StageRecord(name="xgb", kind="train", status="running"), None, 1)
    with caplog.at_level(logging.INFO, logger="pipeline"):
        HookList([LogHook(bars=False)]).stage_progress(event).step_line("boosting rounds: 20/20 in 1.0s")
        HookList([LogHook()]).stage_progress(event).step_line("boosting rounds: 20/20 in 2.0s")
    assert [r.getMessage() for r in caplog.records] == ["xgb: boosting rounds: 20/20 in 2.0s"]
    emitted: list[str] = []
    LineProgress(emitted.append, "xgb: ").step_line("x")
    assert emitted == ["xgb: x"]
    with caplog.at_level(logging.INFO, logger="pipeline"):
        caplog.clear()
        with LogProgress(logging.getLogger("pipeline"), bars=False).bar(3, "rounds") as advance:
            advance(3)
    assert caplog.records == []


def test_progress_crosses_from_a_dask_worker(cluster_client):
    """A bar on a worker arrives at the client as lines on the progress topic, marked as a bar's."""
    from pipeline.distributed.worker_progress import PROGRESS_TOPIC, WorkerProgress

    received: list[dict] = []
    cluster_client.subscribe_topic(PROGRESS_TOPIC, lambda event: received.append(event[1]))

    def on_worker() -> int:
        import os

        os.environ["PIPELINE_PROGRESS_SECONDS"] = "0"         # this worker process: a line per step
        try:
            with WorkerProgress("xgb").bar(4, "boosting rounds") as advance:
                for _ in range(4):
                    advance(1)
        finally:
            del os.environ["PIPELINE_PROGRESS_SECONDS"]
        return 4

    assert cluster_client.submit(on_worker, pure=False).result() == 4
    import time

    deadline = time.monotonic() + 30
    while not received and time.monotonic() < deadline:
        time.sleep(0.1)
    cluster_client.unsubscribe_topic(PROGRESS_TOPIC)
    assert received and received[-1]["stage"] == "xgb" and received[-1]["step_line"] is True
    assert re.fullmatch(r"boosting rounds: 4/4 in \d+\.\ds", received[-1]["text"])
