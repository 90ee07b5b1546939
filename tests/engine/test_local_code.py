"""A ``python`` stage's module in a process that runs many configs (a notebook, a service): the
stage runs the module beside the config being run, as it is now. A second project's
``stagefn`` ran the first project's, and an edited helper ran as first imported (exit 0)."""

from __future__ import annotations

from tests.support.cli import run_script

STAGE = 'from helper import tag\n\n\ndef fn(ctx, inputs, **params):\n    return {"project": "%s", "tag": tag()}\n'
HELPER = 'def tag():\n    return "%s"\n'
SCRIPT = '''\
import sys
from pathlib import Path

from pipeline import run_pipeline
from pipeline.runs.record import read_manifest


def step(project):
    result = run_pipeline(f"{project}/p.yaml", runs_dir=f"runs_{project}")
    status = read_manifest(result.run_dir).stages["step"].status
    print(project, result.outputs["step"]["project"], result.outputs["step"]["tag"], status)


step("a")
step("b")
step("a")
# The same size, within the same second: Python's bytecode check alone would load the old code.
Path("a/helper.py").write_text('def tag():\\n    return "a2"\\n')
step("a")
Path("a/stagefn.py").write_text(Path("a/stagefn.py").read_text().replace('"project": "a"', '"project": "A"'))
step("a")
path = [entry for entry in sys.path if entry.endswith(("/a", "/b"))]
print("path", *[Path(entry).name for entry in path])
'''


def test_each_config_runs_its_own_module_as_it_is_now(tmp_path):
    for project in "ab":
        (tmp_path / project).mkdir()
        (tmp_path / project / "stagefn.py").write_text(STAGE % project)
        (tmp_path / project / "helper.py").write_text(HELPER % f"{project}1")
        (tmp_path / project / "p.yaml").write_text(
            "name: p\ndevice: cpu\nstages:\n  step: {kind: python, function: 'stagefn:fn'}\n")
    (tmp_path / "notebook.py").write_text(SCRIPT)
    # In this process, as `python notebook.py` would run it: the state the script leaves (the
    # modules it imported, sys.path) is put back after it.
    proc = run_script(tmp_path / "notebook.py", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[:5] == ["a a a1 succeeded", "b b b1 succeeded", "a a a1 cached", "a a a2 succeeded",
                         "a A a2 succeeded"]
    assert lines[5] == "path a b"            # the config being run comes first of the configs' folders
