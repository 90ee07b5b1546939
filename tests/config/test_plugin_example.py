"""The extension cost, shown end to end: one project outside the package adds a feature op
(clip_plugin), a stage kind and a model with its own file format (churn_plugin) and a run-level
output on by default (stamp_plugin), and one YAML uses all four through the real CLI: run,
validate, schema and predict. Nothing inside pipeline/ names any of them."""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.support.cli import run_cli as _pipeline
from pipeline.runs.record import read_manifest

from tests.conftest import TELCO

PLUGINS = Path(__file__).resolve().parents[1] / "plugin_example"
MODULES = ("churn_plugin", "clip_plugin", "stamp_plugin")
PACKAGE = Path(__file__).resolve().parents[2] / "pipeline"
NAMES = ("key_join", "centroid", "clip_outliers", "stamp")
ACCOUNT = ["customerID", "tenure", "Contract", "PaymentMethod", "MonthlyCharges", "TotalCharges", "Churn"]
PROFILE = ["customerID", "gender", "Partner", "Dependents", "SeniorCitizen"]

CONFIG = """\
name: extended
device: cpu
plugins: [churn_plugin, clip_plugin, stamp_plugin]
stamp: {note: nightly}
stages:
  accounts: {kind: load, path: accounts.csv, na_values: [" "]}
  profile: {kind: load, path: profile.csv}
  joined: {kind: key_join, inputs: [accounts, profile], key: customerID}
  split: {kind: split, inputs: [joined], target: Churn, positive: "Yes", test: 0.2, valid: 0.1}
  features:
    kind: features
    inputs: [split]
    id: customerID
    ops:
      - fill_missing: {columns: [TotalCharges], strategy: median}
      - clip_outliers: {columns: [MonthlyCharges, TotalCharges], quantile: 0.05}
      - one_hot: {columns: [Contract, PaymentMethod, gender, Partner, Dependents]}
      - standardize: {columns: [tenure, MonthlyCharges, TotalCharges]}
  centroid: {kind: train, inputs: [features], model: centroid, params: {temperature: 4.0}}
  evaluate: {kind: evaluate, inputs: [centroid]}
  export: {kind: export, inputs: [centroid]}
"""


def cli(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return _pipeline(*args, cwd=folder, unset=["PIPELINE_PLUGINS"])


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("extended-project")
    for module in MODULES:
        shutil.copy(PLUGINS / f"{module}.py", folder / f"{module}.py")
    telco = pd.read_csv(TELCO, dtype=str)
    telco[ACCOUNT].to_csv(folder / "accounts.csv", index=False)
    telco[PROFILE].sample(frac=1.0, random_state=1).to_csv(folder / "profile.csv", index=False)
    telco[[c for c in telco.columns if c in ACCOUNT + PROFILE and c != "Churn"]].to_csv(
        folder / "new_customers.csv", index=False)
    (folder / "config.yaml").write_text(CONFIG)
    return folder


def test_nothing_inside_the_package_names_the_extensions():
    """Zero changes inside pipeline/: no string of its code is one of the plugin example's names
    (docstrings that show how to write a plugin may mention them)."""
    found = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Constant) and node.value in NAMES:
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.value}")
    assert found == []


@pytest.mark.slow
def test_an_op_a_kind_a_model_and_a_hook_from_outside_run_together(project: Path):
    done = cli(project, "run", "config.yaml")
    assert done.returncode == 0, done.stderr
    run = project / "runs" / "extended" / "latest"
    manifest = read_manifest(run)
    assert manifest.status == "succeeded"
    assert manifest.stages["joined"].kind == "key_join"
    assert 0.6 < manifest.metrics["models"]["centroid"]["roc_auc"] < 1.0
    # The hook: on by default, its config key read from the YAML.
    stamp = json.loads((run / "stamp.json").read_text())
    assert stamp["status"] == "succeeded" and stamp["note"] == "nightly" and "features" in stamp["stages"]
    # The op: fitted, and saved with the model it feeds.
    workflow = json.loads((run / "export/models/centroid/workflow.json").read_text())
    assert "clip_outliers" in json.dumps(workflow)
    # The model: its own file format.
    assert json.loads((run / "export/models/centroid/model.json").read_text())["file"] == "centroids.json"

    scored = cli(project, "predict", "--run", "latest", "--model", "centroid", "--input", "new_customers.csv",
                 "--output", "scores.csv", "--na-values", " ")
    assert scored.returncode == 0, scored.stderr
    scores = pd.read_csv(project / "scores.csv").set_index("customerID")
    exported = pd.read_parquet(run / "export" / "predictions.parquet").set_index("customerID")
    np.testing.assert_allclose(scores.loc[exported.index, "score"], exported["score_centroid"], atol=1e-6)


@pytest.mark.slow
def test_the_extensions_are_validated_and_listed_like_built_ins(project: Path):
    (project / "bad.yaml").write_text(CONFIG.replace("quantile: 0.05", "quantile: 0.9")
                                      .replace("stamp: {note: nightly}", "stamp: {file: ../escape}"))
    done = cli(project, "validate", "bad.yaml")
    assert done.returncode == 2
    assert "clip_outliers.quantile" in done.stderr and "stamp.file" in done.stderr
    assert "line" in done.stderr and "Traceback" not in done.stderr
    schema = cli(project, "schema", *[arg for module in MODULES for arg in ("--plugin", module)])
    assert schema.returncode == 0, schema.stderr
    for name in NAMES:
        assert name in schema.stdout


def _load_plugins() -> tuple[dict[str, object], dict[str, dict[str, object]]]:
    """The example plugins imported under names of their own, as a plugin's test module does at
    collection, with every registry put back as it was afterwards: the modules, and what each
    registry gained (for the tests to register while they run)."""
    import importlib.util

    from pipeline.features import OPS
    from pipeline.hooks.hook_registry import HOOKS
    from pipeline.models import MODELS
    from pipeline.stages import STAGE_KINDS

    registries = {"OPS": OPS, "HOOKS": HOOKS, "MODELS": MODELS, "STAGE_KINDS": STAGE_KINDS}
    before = {name: dict(registry) for name, registry in registries.items()}
    loaded = {name: sys.modules.pop(name, None) for name in MODULES}
    modules = {}
    try:
        for name in MODULES:                 # under their own names: Dask pickles by reference
            spec = importlib.util.spec_from_file_location(name, PLUGINS / f"{name}.py")
            modules[name] = sys.modules[name] = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(modules[name])
        gained = {name: {key: value for key, value in registry.items() if before[name].get(key) is not value}
                  for name, registry in registries.items()}
    finally:
        for name, registry in registries.items():
            registry.clear()
            registry.update(before[name])
        for name, module in loaded.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
    return modules, gained


PLUGIN_MODULES, REGISTERED = _load_plugins()


def _example_checks() -> list:
    from pipeline.testing import hook_checks, model_checks, op_checks, stage_kind_checks

    return [*stage_kind_checks(REGISTERED["STAGE_KINDS"]["key_join"]),
            *model_checks(REGISTERED["MODELS"]["centroid"]),
            *op_checks(REGISTERED["OPS"]["clip_outliers"]),
            *hook_checks(PLUGIN_MODULES["stamp_plugin"].StampHook)]


@pytest.fixture
def plugins_registered(monkeypatch):
    """The example plugins' registrations in the registries while a test runs, as importing
    the plugins would leave them."""
    from pipeline.features import OPS
    from pipeline.hooks.hook_registry import HOOKS
    from pipeline.models import MODELS
    from pipeline.stages import STAGE_KINDS

    for name, registry in {"OPS": OPS, "HOOKS": HOOKS, "MODELS": MODELS, "STAGE_KINDS": STAGE_KINDS}.items():
        for key, value in REGISTERED[name].items():
            monkeypatch.setitem(registry, key, value)
    for name, module in PLUGIN_MODULES.items():
        monkeypatch.setitem(sys.modules, name, module)


def test_the_example_plugins_register_one_of_each() -> None:
    assert {name: sorted(gained) for name, gained in REGISTERED.items()} == {
        "OPS": ["clip_outliers"], "HOOKS": ["stamp"], "MODELS": ["centroid"], "STAGE_KINDS": ["key_join"]}


def _parametrize_with_checks(*args):
    from pipeline.testing import parametrize_with_checks

    return parametrize_with_checks(*args)


@_parametrize_with_checks(_example_checks())
def test_every_check_of_the_example_plugins_passes(check, plugins_registered) -> None:
    """Each check of each extension the plugin example adds, a test of its own, as a plugin's
    own test suite would run them."""
    check()
