"""A stage kind and a model from a module outside the package, through the real CLI: run,
predict, schema and dag, with no edit to the package (tests/plugin_example/churn_plugin.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.support.cli import run_cli as _pipeline
from pipeline.core.errors import ExitCode
from pipeline.runs.record import read_manifest

from tests.conftest import TELCO

PLUGIN = Path(__file__).resolve().parents[1] / "plugin_example" / "churn_plugin.py"
ACCOUNT = ["customerID", "tenure", "Contract", "PaymentMethod", "MonthlyCharges", "TotalCharges", "Churn"]
PROFILE = ["customerID", "gender", "Partner", "Dependents", "SeniorCitizen"]

CONFIG = """\
name: joined
device: cpu
plugins: [churn_plugin]
stages:
  accounts: {kind: load, path: accounts.csv, na_values: [" "]}
  profile: {kind: load, path: profile.csv}
  joined:
    kind: key_join
    inputs: [accounts, profile]
    key: customerID
  split: {kind: split, inputs: [joined], target: Churn, positive: "Yes", test: 0.2, valid: 0.1}
  features:
    kind: features
    inputs: [split]
    id: customerID
    ops:
      - fill_missing: {columns: [TotalCharges], strategy: median}
      - one_hot: {columns: [Contract, PaymentMethod, gender, Partner, Dependents]}
      - standardize: {columns: [tenure, MonthlyCharges, TotalCharges]}
  centroid: {kind: train, inputs: [features], model: centroid, params: {temperature: 4.0}}
  logreg: {kind: train, inputs: [features], model: logistic_regression}
  evaluate: {kind: evaluate, inputs: [centroid, logreg]}
  export: {kind: export, inputs: [centroid, logreg]}
"""


def cli(folder: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return _pipeline(*args, cwd=folder, env=env, unset=["PIPELINE_PLUGINS"])


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("plugin-project")
    shutil.copy(PLUGIN, folder / PLUGIN.name)
    telco = pd.read_csv(TELCO, dtype=str)
    telco[ACCOUNT].to_csv(folder / "accounts.csv", index=False)
    telco[PROFILE].sample(frac=1.0, random_state=0).to_csv(folder / "profile.csv", index=False)
    telco[[c for c in telco.columns if c in ACCOUNT + PROFILE and c != "Churn"]].to_csv(
        folder / "new_customers.csv", index=False)
    (folder / "config.yaml").write_text(CONFIG)
    return folder


@pytest.fixture(scope="module")
def finished_run(project: Path) -> Path:
    done = cli(project, "run", "config.yaml")
    assert done.returncode == 0, done.stderr
    return project / "runs" / "joined" / "latest"


@pytest.mark.slow
def test_a_plugin_stage_kind_and_model_run_end_to_end(finished_run: Path):
    manifest = read_manifest(finished_run)
    assert manifest.status == "succeeded"
    assert manifest.stages["joined"].kind == "key_join" and manifest.stages["joined"].facts["rows"] == 7043
    assert set(manifest.metrics["models"]) == {"centroid", "logreg"}
    assert 0.6 < manifest.metrics["models"]["centroid"]["roc_auc"] < 1.0
    assert manifest.models["centroid"] == "export/models/centroid"
    assert "export/models/centroid/centroids.json" in manifest.artifacts
    meta = json.loads((finished_run / "export/models/centroid/model.json").read_text())
    assert meta["model"] == "centroid" and meta["file"] == "centroids.json"


@pytest.mark.slow
def test_predict_loads_the_plugin_model_from_the_run(project: Path, finished_run: Path):
    done = cli(project, "predict", "--run", "latest", "--model", "centroid", "--input", "new_customers.csv",
               "--output", "scores.csv", "--na-values", " ")
    assert done.returncode == 0, done.stderr
    scores = pd.read_csv(project / "scores.csv").set_index("customerID")
    exported = pd.read_parquet(finished_run / "export" / "predictions.parquet").set_index("customerID")
    assert len(scores) == 7043 and set(scores["model"]) == {"centroid"}
    np.testing.assert_allclose(scores.loc[exported.index, "score"], exported["score_centroid"], atol=1e-6)


@pytest.mark.slow
def test_schema_and_dag_show_the_plugin(project: Path):
    schema = cli(project, "schema", env={"PIPELINE_PLUGINS": "churn_plugin", "PYTHONPATH": str(project)})
    assert schema.returncode == 0, schema.stderr
    text = schema.stdout
    assert '"key_join"' in text and '"centroid"' in text and "Key column both inputs have." in text
    without = cli(project, "schema")
    assert '"key_join"' not in without.stdout            # only where the plugin is loaded
    dag = cli(project, "dag", "config.yaml")
    assert dag.returncode == 0 and "joined [key_join] <- accounts, profile" in dag.stdout


def test_a_plugin_kind_is_checked_by_the_types_it_accepts(project: Path):
    bad = CONFIG.replace("inputs: [accounts, profile]", "inputs: [accounts, split]").replace(
        "inputs: [joined], target", "inputs: [profile], target")
    (project / "bad.yaml").write_text(bad)
    done = cli(project, "validate", "bad.yaml")
    assert done.returncode == ExitCode.CONFIG
    assert "input 'split' is a 'split' stage; a 'key_join' stage reads 'load'" in done.stderr
    assert "'key_join' stages" in done.stderr


def test_a_plugin_that_cannot_be_imported_is_a_config_error(project: Path):
    (project / "missing.yaml").write_text(CONFIG.replace("plugins: [churn_plugin]", "plugins: [no_such_plugin]"))
    done = cli(project, "validate", "missing.yaml")
    assert done.returncode == ExitCode.CONFIG
    assert "plugins[0]" in done.stderr and "no_such_plugin" in done.stderr
