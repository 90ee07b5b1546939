"""How plugin modules are named and found (``pipeline.core.plugins``): a malformed name is one
problem, said the same way from a config and from $PIPELINE_PLUGINS, while the good names still
import; a module that is not found is one message saying where it looked and what to do.

The plugin is tests/plugin_example/churn_plugin.py (a ``key_join`` stage kind, a ``centroid``
model)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.core.errors import ConfigError, ExitCode
from pipeline.core.plugins import load_plugins
from tests.support.cli import run_cli

PLUGIN = Path(__file__).resolve().parents[1] / "plugin_example" / "churn_plugin.py"
NOT_A_MODULE = "'bad-name' is not a module name (dotted Python identifiers"

CONFIG = """\
name: joined
plugins: {plugins}
stages:
  accounts: {{kind: load, path: accounts.csv}}
  profile: {{kind: load, path: profile.csv}}
  joined: {{kind: key_join, inputs: [accounts, profile], key: customerID}}
  split: {{kind: split, inputs: [joined], target: Churn, positive: "Yes"}}
  features: {{kind: features, inputs: [split], ops: [{{standardize: {{columns: [tenure]}}}}]}}
  centroid: {{kind: train, inputs: [features], model: centroid}}
"""


def cli(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, cwd=cwd, env={"PYTHONPATH": "", **(env or {})}, unset=["PIPELINE_PLUGINS"])


@pytest.fixture
def project(tmp_path: Path) -> Path:
    shutil.copy(PLUGIN, tmp_path / PLUGIN.name)
    (tmp_path / "accounts.csv").write_text("customerID,tenure,Churn\nA,1,Yes\nB,2,No\n")
    (tmp_path / "profile.csv").write_text("customerID,gender\nA,F\nB,M\n")
    return tmp_path


def problems(stderr: str) -> list[str]:
    return [line.strip() for line in stderr.splitlines() if line.strip().startswith("- ")]


def test_a_malformed_entry_is_one_problem_and_the_other_plugins_still_import(project: Path):
    (project / "config.yaml").write_text(CONFIG.format(plugins='[churn_plugin, "bad-name"]'))
    done = cli("validate", "config.yaml", cwd=project)
    assert done.returncode == ExitCode.CONFIG
    found = problems(done.stderr)
    assert len(found) == 1, done.stderr                     # not also key_join and centroid unknown
    assert found[0].startswith("- plugins[1] (line 2): " + NOT_A_MODULE), found


def test_plugins_that_are_not_a_list_still_leave_pipeline_plugins_loaded(project: Path):
    (project / "config.yaml").write_text(CONFIG.format(plugins="churn_plugin"))
    done = cli("validate", "config.yaml", cwd=project, env={"PIPELINE_PLUGINS": "churn_plugin"})
    assert done.returncode == ExitCode.CONFIG
    found = problems(done.stderr)
    assert len(found) == 1 and found[0].startswith("- plugins (line 2): "), done.stderr


def test_pipeline_plugins_with_a_malformed_name_says_so_as_a_config_does(project: Path):
    done = cli("schema", cwd=project, env={"PIPELINE_PLUGINS": "bad-name"})
    assert done.returncode == ExitCode.CONFIG
    assert problems(done.stderr) == ["- $PIPELINE_PLUGINS: " + NOT_A_MODULE
                                     + ", e.g. my_stages or company.pipeline_plugins)"], done.stderr
    (project / "config.yaml").write_text(CONFIG.format(plugins="[]"))
    both = cli("validate", "config.yaml", cwd=project, env={"PIPELINE_PLUGINS": "churn_plugin, bad-name"})
    assert both.returncode == ExitCode.CONFIG
    assert len(problems(both.stderr)) == 1 and NOT_A_MODULE in both.stderr, both.stderr   # churn_plugin imported


def test_load_plugins_reports_each_malformed_name_and_imports_the_others(monkeypatch):
    monkeypatch.delenv("PIPELINE_PLUGINS", raising=False)
    with pytest.raises(ConfigError) as caught:
        load_plugins(["bad-name", "json", "a..b"], where="--plugin")
    assert [(i.path, i.message.split(" (")[0]) for i in caught.value.issues] == [
        ("--plugin[0]", "'bad-name' is not a module name"), ("--plugin[2]", "'a..b' is not a module name")]


# ------------------------------------------------------------------ not found
def console_script(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The installed ``pipeline`` command itself, not ``python -m pipeline``: what it finds on
    its own is the point (``-m`` puts the working folder on sys.path, the console script does not)."""
    command = Path(sys.executable).parent / "pipeline"
    if not command.is_file():
        pytest.skip("no pipeline console script next to this interpreter")
    environment = {k: v for k, v in os.environ.items() if k not in ("PIPELINE_PLUGINS", "PYTHONPATH")}
    return subprocess.run([str(command), *args], cwd=cwd, env={**environment, **env}, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("how", ["env", "option"])
def test_a_plugin_in_the_working_folder_is_not_searched_and_the_message_says_how_to_load_it(project: Path,
                                                                                              how: str):
    env, args = ({"PIPELINE_PLUGINS": "churn_plugin"}, []) if how == "env" else ({}, ["--plugin", "churn_plugin"])
    done = console_script("schema", *args, cwd=project, env=env)
    assert done.returncode == ExitCode.CONFIG, done.stderr
    message = " ".join(done.stderr.split())
    assert ("$PIPELINE_PLUGINS" if how == "env" else "--plugin[0]") in message
    assert "cannot import plugin module 'churn_plugin'" in message
    assert f"{project / PLUGIN.name} is in the working folder" in message
    assert "PYTHONPATH=." in message and "install" in message
    assert "Traceback" not in done.stderr
    found = console_script("schema", *args, cwd=project, env={**env, "PYTHONPATH": "."})
    assert found.returncode == 0 and '"centroid"' in found.stdout, found.stderr


def test_a_module_found_nowhere_says_where_it_looked(project: Path):
    done = cli("schema", cwd=project, env={"PIPELINE_PLUGINS": "no_such_plugin", "PYTHONPATH": str(project)})
    assert done.returncode == ExitCode.CONFIG
    message = " ".join(done.stderr.split())
    assert "$PIPELINE_PLUGINS: cannot import plugin module 'no_such_plugin'" in message
    assert str(project) in message and "installed packages" in message and "PYTHONPATH" in message


def test_a_plugin_that_fails_on_import_keeps_its_own_error(project: Path):
    (project / "broken_plugin.py").write_text("import no_such_dependency\n")
    (project / "config.yaml").write_text(CONFIG.format(plugins="[broken_plugin]"))
    done = cli("validate", "config.yaml", cwd=project)
    assert done.returncode == ExitCode.CONFIG
    assert ("cannot import plugin module 'broken_plugin': ModuleNotFoundError: No module named "
            "'no_such_dependency'") in " ".join(done.stderr.split())
