"""The code part of a stage's cache key: the source of the modules the stage runs and of what
they import inside the package, not the whole package (``pipeline.core.import_graph``).

The runs here are real ``pipeline run`` subprocesses on a copy of the package in a temporary
folder, edited between two runs.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.support.cli import run_cli as _pipeline
from pipeline.core.fingerprints import code_fingerprint, defining_modules
from pipeline.core.import_graph import direct_imports, imported_closure, package_modules
from pipeline.runs.record import read_manifest
from pipeline.stages import STAGE_KINDS
from tests.conftest import small_config

PACKAGE = Path(__file__).resolve().parents[2] / "pipeline"


# ---------------------------------------------------------------------------- the import graph
def test_the_graph_holds_every_import_grimp_finds_and_only_module_names_beside():
    """grimp (a dev dependency only) reads the same imports; the ast graph adds the strings
    that name a module (lazy names, class paths), which grimp does not follow."""
    import grimp

    graph = grimp.build_graph("pipeline", exclude_type_checking_imports=True, cache_dir=None)
    missing, extra = {}, {}
    for module in package_modules():
        ours = direct_imports(module)
        theirs = {m for m in graph.find_modules_directly_imported_by(module) if m.startswith("pipeline")}
        if theirs - ours:
            missing[module] = sorted(theirs - ours)
        source = package_modules()[module].read_text()
        unquoted = [m for m in ours - theirs if f'"{m}' not in source and f"'{m}" not in source]
        if unquoted:
            extra[module] = unquoted
    assert missing == {} and extra == {}


def test_imports_under_type_checking_and_parent_packages_are_not_code_a_module_runs(tmp_path, monkeypatch):
    import pipeline.core.import_graph as graph

    root = tmp_path / "pipeline"
    for name in ("a", "b", "c", "d"):
        (root / "pkg").mkdir(parents=True, exist_ok=True)
        (root / "pkg" / f"{name}.py").write_text("")
    (root / "__init__.py").write_text("")
    (root / "pkg" / "__init__.py").write_text("from pipeline.pkg import d\n")
    (root / "pkg" / "a.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "from pipeline.pkg import b\n"
        "if TYPE_CHECKING:\n    from pipeline.pkg import c\n"
        "def later():\n    import importlib\n    return importlib.import_module('pipeline.pkg.d')\n")
    monkeypatch.setattr(graph, "PACKAGE_DIR", root)
    for cached in (graph.package_modules, graph.direct_imports, graph._closure):
        cached.cache_clear()
    try:
        assert graph.direct_imports("pipeline.pkg.a") == {"pipeline.pkg.b", "pipeline.pkg.d"}
        assert graph.imported_closure(["pipeline.pkg.b"]) == {"pipeline.pkg.b"}
    finally:
        for cached in (graph.package_modules, graph.direct_imports, graph._closure):
            cached.cache_clear()


# ---------------------------------------------------------------------------- what a stage runs
def stage_code(kind: str, **params) -> frozenset[str]:
    stage = STAGE_KINDS[kind]
    return imported_closure(stage.code_modules(stage.spec.model_validate({"kind": kind, **params})))


def test_no_stage_runs_the_report_the_cli_or_the_runner():
    for kind, stage in STAGE_KINDS.items():
        code = imported_closure(defining_modules(stage.run, stage.fingerprint))
        outside = sorted(m for m in code if m.startswith(("pipeline.report", "pipeline.cli", "pipeline.engine")))
        assert outside == [], kind


def test_a_features_stage_runs_its_ops_and_a_split_does_not():
    from pipeline.features import Standardize

    features = stage_code("features", inputs=["split"], ops=[{"standardize": {"columns": ["a"]}}])
    split = stage_code("split", inputs=["raw"], target="churn")
    assert Standardize.__module__ in features and Standardize.__module__ not in split
    assert "pipeline.stages.features" in features and "pipeline.stages.features" not in split


def test_a_train_stage_runs_its_models_registry_entry():
    from pipeline.models import get_model_spec

    spec = STAGE_KINDS["train"].spec.model_validate({"kind": "train", "inputs": ["f"], "model": "xgboost"})
    entry = get_model_spec("xgboost")
    assert {type(entry.format).__module__, entry.fit_steps.__module__} <= STAGE_KINDS["train"].code_modules(spec)


def test_a_registered_objects_own_module_counts_even_outside_the_package():
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class Entry:
        estimator: str
        format: object
        rule: object

    class PluginFormat:
        pass

    found = defining_modules(Entry("sklearn.linear_model:LogisticRegression", PluginFormat(), len))
    assert found == {__name__}                     # the test module: neither sklearn nor builtins
    assert defining_modules("pipeline.models.registry:ModelSpec") == {"pipeline.models.registry"}


def test_a_python_stage_runs_its_users_module_and_what_that_imports_of_the_package(tmp_path, monkeypatch):
    from pipeline.core.fingerprints import _source_path
    from pipeline.core.import_graph import file_imports

    (tmp_path / "user_steps.py").write_text(
        "from pipeline.metrics import task_metrics\nimport pipeline.features.ops\nfrom . import sibling\n\n"
        "def ratios(ctx, inputs):\n    return task_metrics\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = STAGE_KINDS["python"].spec.model_validate({"kind": "python", "function": "user_steps:ratios"})
    assert "user_steps" in STAGE_KINDS["python"].code_modules(spec)
    assert "user_steps" not in sys.modules                        # found, not imported
    assert file_imports(str(_source_path("user_steps"))) == {"pipeline.metrics", "pipeline.features.ops"}


def test_a_plugins_own_helper_modules_count_but_installed_libraries_do_not(tmp_path, monkeypatch):
    """A plugin stage that called helper_math.scale() was served from the cache after
    helper_math.py changed: only the plugin's own file and the package's modules counted."""
    from pipeline.core.fingerprints import local_modules

    (tmp_path / "helper_math.py").write_text("import numpy\nfrom helpers_deep import twice\n\n"
                                             "def scale(x):\n    return twice(x) * 1.0\n")
    (tmp_path / "helpers_deep.py").write_text("def twice(x):\n    return 2 * x\n")
    (tmp_path / "a_plugin.py").write_text("import json\nimport helper_math\nfrom pipeline.metrics import task_metrics\n\n"
                                          "def run(spec, ctx, inputs):\n    return helper_math.scale(1)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert local_modules(["a_plugin"]) == {"a_plugin", "helper_math", "helpers_deep"}   # not numpy, not json
    before = code_fingerprint(["a_plugin"])
    # In the same process, no cache cleared: a notebook or a Dask worker sees the edit.
    (tmp_path / "helpers_deep.py").write_text("def twice(x):\n    return 3 * x\n")
    assert code_fingerprint(["a_plugin"]) != before


def test_the_code_fingerprint_is_computed_once_per_set_of_modules():
    modules = ["pipeline.stages.load"]
    assert code_fingerprint(modules) is code_fingerprint(list(modules))
    assert code_fingerprint(modules) != code_fingerprint(["pipeline.stages.split"])


# ---------------------------------------------------------------------------- real runs
@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of the package (edited by the tests) and a small pipeline over a CSV."""
    shutil.copytree(PACKAGE, tmp_path / "src" / "pipeline", ignore=shutil.ignore_patterns("__pycache__"))
    rng = np.random.default_rng(0)
    rows = 300
    pd.DataFrame({"id": [f"c{i}" for i in range(rows)], "a": rng.random(rows), "b": rng.random(rows),
                  "churn": rng.choice(["yes", "no"], rows)}).to_csv(tmp_path / "data.csv", index=False)
    (tmp_path / "keys.yaml").write_text(small_config(
        "keys", tmp_path / "data.csv", after="  export:\n    kind: export\n    inputs: [logreg]\n"))
    return tmp_path


def run(project: Path) -> dict[str, str]:
    # A process: the run must import the edited copy of the package, which this process cannot.
    proc = _pipeline("run", "keys.yaml", "--runs-dir", "runs", "-q", cwd=project,
                     env={"PYTHONPATH": str(project / "src")}, process=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    manifest = read_manifest(project / "runs" / "keys" / "latest")
    return {name: record.status for name, record in manifest.stages.items()}


def edit_docstring(path: Path) -> None:
    text = path.read_text()
    assert text.startswith('"""'), path
    path.write_text('"""Edited: nothing a stage runs changes. ' + text[3:])


@pytest.mark.slow
def test_editing_the_report_and_the_cli_leaves_every_stage_cached(project):
    assert set(run(project).values()) == {"succeeded"}
    copy = project / "src" / "pipeline"
    edited = sorted([*(copy / "report").glob("*.py"), *(copy / "cli").glob("*.py")])
    for path in edited:
        edit_docstring(path)
    assert len(edited) > 10
    assert run(project) == {"raw": "cached", "split": "cached", "features": "cached", "logreg": "cached",
                            "export": "cached"}


@pytest.mark.slow
def test_editing_a_feature_ops_module_reruns_features_and_what_follows(project):
    from pipeline.features import Standardize

    run(project)
    module = Path(sys.modules[Standardize.__module__].__file__).resolve().relative_to(PACKAGE)
    edit_docstring(project / "src" / "pipeline" / module)
    assert run(project) == {"raw": "cached", "split": "cached", "features": "succeeded", "logreg": "succeeded",
                            "export": "succeeded"}
