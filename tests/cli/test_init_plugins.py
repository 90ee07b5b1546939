"""``pipeline init`` with plugins: the plugins of $PIPELINE_PLUGINS load before the data is read,
a plugin's model that chooses itself for ``init`` (``init_choices``) is drafted beside the built-in
ones, and the config lists the plugin under ``plugins:`` so that it validates and runs in a shell
without the variable. A plugin that cannot be imported stops ``init`` with the import's message.

The plugin is tests/plugin_example/churn_plugin.py (its ``centroid`` model serves binary tasks)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from pipeline.core.errors import ExitCode
from tests.support.cli import run_cli

PLUGIN = Path(__file__).resolve().parents[1] / "plugin_example" / "churn_plugin.py"


def cli(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, cwd=cwd, env={"PYTHONPATH": "", "COLUMNS": "200", **(env or {})},
                   unset=["PIPELINE_PLUGINS"])


@pytest.fixture
def project(tmp_path: Path) -> Path:
    rng = np.random.default_rng(5)
    rows = 300
    tenure = rng.integers(0, 72, rows)
    monthly = np.round(rng.normal(60, 15, rows), 2)
    (tmp_path / "data").mkdir()
    pd.DataFrame({"customerID": [f"C{i:04d}" for i in range(rows)], "tenure": tenure, "monthly": monthly,
                  "contract": rng.choice(["month", "year"], rows),
                  "Churn": np.where(tenure / 24 - monthly / 40 + rng.normal(0, 1, rows) < 0, "Yes", "No")},
                 ).to_csv(tmp_path / "data" / "accounts.csv", index=False)
    shutil.copy(PLUGIN, tmp_path / PLUGIN.name)
    return tmp_path


def test_init_drafts_a_plugins_model_and_the_config_runs_without_the_variable(project: Path):
    made = cli("init", "data/accounts.csv", "--target", "Churn", "-o", "init.yaml", cwd=project,
               env={"PIPELINE_PLUGINS": "churn_plugin", "PYTHONPATH": "."})
    assert made.returncode == 0, made.stderr
    models = next(line for line in made.stdout.splitlines() if line.startswith("models: "))
    assert "centroid" in models.split(": ")[1].split(", "), made.stdout
    text = (project / "init.yaml").read_text()
    config = yaml.safe_load(text)
    assert config["plugins"] == ["churn_plugin"]
    assert config["stages"]["centroid"] == {"kind": "train", "inputs": ["features"], "model": "centroid",
                                            "params": {"temperature": 4.0}}
    assert "centroid" in config["stages"]["evaluate"]["inputs"] and "centroid" in config["stages"]["export"]["inputs"]
    lines = text.splitlines()
    at = lines.index("plugins: [churn_plugin]")
    why = " ".join(line for line in lines[at - 3:at] if line.startswith("#"))
    assert "centroid" in why and "$PIPELINE_PLUGINS" in why, why                  # the comment says why
    assert "plugins: churn_plugin (listed in the config" in made.stdout and "note: plugin" not in made.stdout

    checked = cli("validate", "init.yaml", cwd=project)                          # a shell without the variable
    assert checked.returncode == 0, checked.stderr
    ran = cli("run", "init.yaml", cwd=project)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert list((project / "runs" / "init").glob("*/export/models/centroid/model.json"))


def test_a_plugin_imported_from_another_folder_is_noted(project: Path):
    (project / "lib").mkdir()
    (project / PLUGIN.name).rename(project / "lib" / PLUGIN.name)
    made = cli("init", "data/accounts.csv", "--target", "Churn", "-o", "init.yaml", cwd=project,
               env={"PIPELINE_PLUGINS": "churn_plugin", "PYTHONPATH": "lib"})
    assert made.returncode == 0, made.stderr
    assert yaml.safe_load((project / "init.yaml").read_text())["plugins"] == ["churn_plugin"]
    note = " ".join(made.stdout.split()).split("note: plugin churn_plugin was imported from ")[1]
    assert note.startswith(f"{project / 'lib'}, not from beside init.yaml") and "PYTHONPATH" in note


def test_init_auto_lists_a_plugin_whose_model_is_in_autos_portfolio(project: Path):
    made = cli("init", "data/accounts.csv", "--target", "Churn", "--auto", "-o", "auto.yaml", cwd=project,
               env={"PIPELINE_PLUGINS": "churn_plugin"})
    assert made.returncode == 0, made.stderr
    text = (project / "auto.yaml").read_text()
    assert yaml.safe_load(text)["plugins"] == ["churn_plugin"]
    assert "centroid (in auto's portfolio)" in text


def test_without_a_plugin_model_the_config_lists_no_plugins(project: Path):
    made = cli("init", "data/accounts.csv", "--target", "tenure", "--task", "regression", "-o", "r.yaml",
               cwd=project, env={"PIPELINE_PLUGINS": "churn_plugin", "PYTHONPATH": "."})
    assert made.returncode == 0, made.stderr
    assert "plugins" not in yaml.safe_load((project / "r.yaml").read_text())      # centroid is binary only


def test_a_plugin_that_cannot_be_imported_stops_init_before_the_data_is_read(project: Path):
    done = cli("init", "data/no_such_file.csv", "--target", "Churn", "-o", "init.yaml", cwd=project,
               env={"PIPELINE_PLUGINS": "noisy_nonexistent"})
    assert done.returncode == ExitCode.CONFIG, done.stderr
    message = " ".join(done.stderr.split())
    assert "$PIPELINE_PLUGINS: cannot import plugin module 'noisy_nonexistent'" in message
    assert "no_such_file" not in message and "a bug in init" not in message
    assert not (project / "init.yaml").exists()
