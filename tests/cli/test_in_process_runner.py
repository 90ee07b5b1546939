"""The suite's one way to run the CLI (tests/support/cli.py): in process it gives what a real
process gives, and one call leaves nothing behind for the next."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.cli import run_cli, run_script

BAD_CONFIG = """\
name: bad
stages:
  raw: {kind: load, path: nowhere.csv}
  model: {kind: train, inputs: [raw], model: no_such_model}
"""

STAGE_MODULE = """\
from pathlib import Path


def rows(ctx, inputs):
    Path("seen.txt").write_text("{value}")
    return {value}
"""

CONFIG = """\
name: same_module
device: cpu
stages:
  made: {kind: python, function: "made_here:rows"}
"""


def test_in_process_and_in_a_process_give_the_same_code_stdout_and_stderr(tmp_path: Path):
    # One real process on purpose: the comparison is the point of the test.
    (tmp_path / "bad.yaml").write_text(BAD_CONFIG)
    for args in (("validate", "bad.yaml"), ("--version",), ("run", "missing.yaml"), ("run", "--bogus")):
        here = run_cli(*args, cwd=tmp_path, env={"COLUMNS": "120"})
        there = run_cli(*args, cwd=tmp_path, env={"COLUMNS": "120"}, process=True)
        # `python -m pipeline` names itself so in usage errors; in process it is `pipeline`, as the
        # console script is.
        there_err = there.stderr.replace("python -m pipeline", "pipeline")
        assert (here.returncode, here.stdout, here.stderr) == (there.returncode, there.stdout, there_err), args
    assert here.returncode == 2 and "--bogus" in here.stderr


def test_a_module_a_run_imported_is_gone_before_the_next_run(tmp_path: Path):
    for value in (1, 2):
        folder = tmp_path / f"project{value}"
        folder.mkdir()
        (folder / "made_here.py").write_text(STAGE_MODULE.format(value=value))
        (folder / "p.yaml").write_text(CONFIG)
        done = run_cli("run", "p.yaml", "--no-cache", cwd=folder)
        assert done.returncode == 0, done.stderr
        assert (folder / "seen.txt").read_text() == str(value)       # its own module, not the first's
    assert "made_here" not in sys.modules
    assert str(tmp_path / "project1") not in sys.path and str(tmp_path / "project2") not in sys.path


def test_the_environment_and_working_directory_come_back_as_they_were(tmp_path: Path):
    before_env, before_cwd = dict(os.environ), os.getcwd()
    done = run_cli("validate", "nothing.yaml", cwd=tmp_path, env={"PIPELINE_TEST_ONLY": "1"},
                   unset=["HOME"])
    assert done.returncode != 0
    assert dict(os.environ) == before_env and os.getcwd() == before_cwd


SCRIPT = """\
import sys
from pathlib import Path

import helper_here

print(__name__, Path.cwd().name, sys.argv[0].endswith("example.py"), helper_here.VALUE)
print("to stderr", file=sys.stderr)
raise ValueError("the example failed")
"""


def test_a_script_runs_as_python_would_run_it_and_its_failure_is_exit_1_with_its_traceback(tmp_path: Path):
    # One real process on purpose: the comparison is the point of the test.
    (tmp_path / "example.py").write_text(SCRIPT)
    (tmp_path / "helper_here.py").write_text("VALUE = 7\n")
    here = run_script(tmp_path / "example.py", cwd=tmp_path)
    there = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, capture_output=True, text=True)
    assert here.returncode == there.returncode == 1
    assert here.stdout == there.stdout == f"__main__ {tmp_path.name} True 7\n"
    assert here.stderr.startswith("to stderr\nTraceback") and here.stderr.endswith("ValueError: the example failed\n")
    assert there.stderr.endswith("ValueError: the example failed\n")
    assert "helper_here" not in sys.modules and Path.cwd() != tmp_path     # nothing left for the next call


PROBE = """\
from pathlib import Path


def probe(ctx, inputs):
    from pipeline.backends.dask_collections import has_cluster

    Path("cluster.txt").write_text(str(has_cluster()))
    return 1
"""


def test_a_default_dask_client_of_the_test_is_not_the_commands(tmp_path: Path):
    """A new process has no Dask client: a test's own (a module's cluster fixture) must not
    become the command's, or a stage would run its ranks on it."""
    from distributed import Client, get_client

    (tmp_path / "probe_stage.py").write_text(PROBE)
    (tmp_path / "probe.yaml").write_text("name: probe\ndevice: cpu\nstages:\n"
                                         "  p: {kind: python, function: 'probe_stage:probe'}\n")
    with Client(processes=False, n_workers=1, threads_per_worker=1, dashboard_address=None) as client:
        done = run_cli("run", "probe.yaml", "--runs-dir", "runs", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert get_client() is client                       # the test's client is back after the call
    assert (tmp_path / "cluster.txt").read_text() == "False"
