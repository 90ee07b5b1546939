"""A run's model that a plugin registers, scored from elsewhere: ``pipeline predict`` from another
folder finds the plugin beside the config the run was started with, ``load_model`` loads the
plugins ``predict`` would (the run's, and $PIPELINE_PLUGINS), and a plugin that is nowhere to be
found is one message naming the run's config, the folders looked in and what to do.

The plugin is tests/plugin_example/churn_plugin.py (its ``centroid`` model); the run is a small
one, made once per module through the real CLI."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipeline.core.errors import ExitCode
from tests.support.cli import run_cli, run_script

PLUGIN = Path(__file__).resolve().parents[1] / "plugin_example" / "churn_plugin.py"
ROWS = 400

CONFIG = """\
name: plugged
device: cpu
plugins: [churn_plugin]
stages:
  raw: {kind: load, path: accounts.csv}
  split: {kind: split, inputs: [raw], target: Churn, positive: "Yes", test: 0.2, valid: 0.0}
  features:
    kind: features
    inputs: [split]
    id: customerID
    ops: [{standardize: {columns: [tenure, monthly]}}]
  centroid: {kind: train, inputs: [features], model: centroid, params: {temperature: 4.0}}
  evaluate: {kind: evaluate, inputs: [centroid]}
  export: {kind: export, inputs: [centroid]}
"""


def accounts(rows: int = ROWS) -> pd.DataFrame:
    rng = np.random.default_rng(3)
    tenure = rng.integers(0, 72, rows)
    monthly = np.round(rng.normal(60, 15, rows), 2)
    churn = np.where(tenure / 24 - monthly / 40 + rng.normal(0, 1, rows) < 0, "Yes", "No")
    return pd.DataFrame({"customerID": [f"C{i:04d}" for i in range(rows)], "tenure": tenure, "monthly": monthly,
                         "Churn": churn})


def cli(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, cwd=cwd, env={"PYTHONPATH": "", **(env or {})}, unset=["PIPELINE_PLUGINS"])


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """p1/ holds the config, the plugin beside it and the run; p2/ is another folder."""
    root = tmp_path_factory.mktemp("run-plugins")
    folder = root / "p1"
    folder.mkdir()
    (root / "p2").mkdir()
    shutil.copy(PLUGIN, folder / PLUGIN.name)
    accounts().to_csv(folder / "accounts.csv", index=False)
    accounts(20).drop(columns="Churn").to_csv(root / "p2" / "new.csv", index=False)
    (folder / "config.yaml").write_text(CONFIG)
    done = cli("run", "config.yaml", cwd=folder)
    assert done.returncode == 0, done.stderr
    return folder


def test_predict_from_another_folder_finds_the_plugin_beside_the_runs_config(project: Path):
    elsewhere = project.parent / "p2"
    done = cli("predict", "--runs-dir", "../p1/runs", "--run", "latest", "--input", "new.csv", "--output", "s.csv",
               cwd=elsewhere)
    assert done.returncode == 0, done.stderr
    assert set(pd.read_csv(elsewhere / "s.csv")["model"]) == {"centroid"}


def test_a_runs_plugin_found_nowhere_names_the_run_the_folders_and_the_fix(project: Path, tmp_path: Path):
    elsewhere = tmp_path / "p3"
    shutil.copytree(project, elsewhere / "p1", symlinks=True)
    (elsewhere / "p1" / PLUGIN.name).unlink()
    shutil.copytree(project.parent / "p2", elsewhere / "p2")
    run = (elsewhere / "p1" / "runs" / "plugged" / "latest").resolve()
    done = cli("predict", "--runs-dir", "../p1/runs", "--run", "latest", "--input", "new.csv", "--output", "s.csv",
               cwd=elsewhere / "p2")
    assert done.returncode == ExitCode.CONFIG, done.stderr
    message = " ".join(done.stderr.split())
    assert "cannot import plugin module 'churn_plugin'" in message
    assert f"run {run.name}" in message and "config.yaml" in message        # whose plugin it is
    assert str(elsewhere / "p1") in message                                  # where it looked
    assert "PYTHONPATH" in message and "install" in message                   # what to do
    assert "Traceback" not in done.stderr


def load_model_script(folder: Path, tmp_path: Path) -> Path:
    script = tmp_path / "score.py"
    script.write_text(
        "import pandas as pd\n"
        "from pipeline.scoring.model_folder import load_model\n"
        f"model = load_model({str(folder)!r})\n"
        f"rows = pd.read_csv({str(tmp_path / 'rows.csv')!r})\n"
        "print(model.kind, len(model.score(rows)))\n")
    accounts(5).drop(columns="Churn").to_csv(tmp_path / "rows.csv", index=False)
    return script


def test_load_model_of_a_runs_plugin_model_loads_the_runs_plugins(project: Path, tmp_path: Path):
    """As ``pipeline predict`` does: the run's config names the plugin, found beside the config
    the run was started with, from any working folder and without $PIPELINE_PLUGINS."""
    folder = project / "runs" / "plugged" / "latest" / "export" / "models" / "centroid"
    done = run_script(load_model_script(folder, tmp_path), cwd=tmp_path, env={"PYTHONPATH": ""})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["centroid", "5"]


def test_load_model_of_a_copied_folder_loads_pipeline_plugins(project: Path, tmp_path: Path):
    folder = tmp_path / "centroid"
    shutil.copytree(project / "runs" / "plugged" / "latest" / "export" / "models" / "centroid", folder)
    script = load_model_script(folder, tmp_path)
    done = run_script(script, cwd=tmp_path, env={"PIPELINE_PLUGINS": "churn_plugin", "PYTHONPATH": str(project)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["centroid", "5"]
    without = run_script(script, cwd=tmp_path, env={"PIPELINE_PLUGINS": "", "PYTHONPATH": ""})
    assert without.returncode == 1
    assert "model 'centroid' is unknown here" in without.stderr and "PIPELINE_PLUGINS" in without.stderr


def test_scoring_with_plugin_code_edited_since_the_run_says_so(project: Path, tmp_path: Path):
    """predict scored with whatever plugin code was there, with no word: a run trained with an
    edited predict_proba, then restored, gave other scores than its own predictions."""
    from pipeline.runs.record import read_manifest

    copy = tmp_path / "p1"
    shutil.copytree(project, copy, symlinks=True)
    run = (copy / "runs" / "plugged" / "latest").resolve()
    recorded = read_manifest(run).plugins
    assert set(recorded) == {"churn_plugin"} and len(recorded["churn_plugin"]) == 32
    new = project.parent / "p2" / "new.csv"
    same = cli("predict", "--run", "latest", "--input", str(new), "--output", "a.csv", cwd=copy)
    assert same.returncode == 0 and "changed since run" not in same.stderr, same.stderr
    plugin = copy / PLUGIN.name
    plugin.write_text(plugin.read_text() + "\n# edited after the run\n")
    edited = cli("predict", "--run", "latest", "--input", str(new), "--output", "b.csv", cwd=copy)
    assert edited.returncode == 0, edited.stderr
    assert f"plugin module(s) churn_plugin changed since run {run.name} was trained" in edited.stderr
