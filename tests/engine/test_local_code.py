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


PLUGIN = '''\
from typing import ClassVar

from pipeline.features import FeatureOp, register_op
from pipeline.hooks.hook_registry import register_hook
from pipeline.hooks.protocol import RunHook


@register_op
class Tag(FeatureOp):
    op: ClassVar[str] = "tagop"

    def transform(self, frame, backend, state):
        return frame.assign(**{c: frame[c] * 0 + %s for c in self.columns})


class Said(RunHook):
    def run_finished(self, event):
        print("hook of %s")


register_hook("said", lambda section, context: Said())
'''
CONFIG = '''\
name: %s
device: cpu
%sstages:
  raw: {kind: load, path: rows.csv}
  split: {kind: split, inputs: [raw], target: y, test: 0.25}
  features: {kind: features, inputs: [split], ops: [%s]}
'''
PLUGIN_SCRIPT = '''\
from pathlib import Path

from pipeline import run_pipeline


def step(project):
    result = run_pipeline(f"{project}/p.yaml", runs_dir=f"runs_{project}")
    features = result.outputs["features"]
    print(project, sorted({float(v) for v in features.X["train"][:, features.feature_names.index("x")]}))


step("a")
step("b")
step("c")
Path("a/tagmod.py").write_text(Path("a/tagmod.py").read_text().replace("+ 10.0", "+ 11.0"))
step("a")
'''


def test_each_config_gets_its_own_plugin_and_hooks_only_where_listed(tmp_path):
    """Two projects' plugins of the same module name in one process: the second project ran the
    first's op (its features all 10.0, not 20.0, exit 0), and a hook of the first project's
    plugin ran in every later run, also of a config that lists no plugin."""
    import pandas as pd

    pd.DataFrame({"x": range(40), "y": [0, 1] * 20}).to_csv(tmp_path / "rows.csv", index=False)
    for project, value in (("a", "10.0"), ("b", "20.0")):
        (tmp_path / project).mkdir()
        (tmp_path / project / "tagmod.py").write_text(PLUGIN % (value, project))
        (tmp_path / project / "p.yaml").write_text(CONFIG % (project, "plugins: [tagmod]\n",
                                                             "{tagop: {columns: [x]}}"))
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "p.yaml").write_text(CONFIG % ("c", "", "{standardize: {columns: [x]}}"))
    (tmp_path / "notebook.py").write_text(PLUGIN_SCRIPT)
    proc = run_script(tmp_path / "notebook.py", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stdout.splitlines()]
    assert lines[0:2] == ["hook of a", "a [10.0]"]
    assert lines[2:4] == ["hook of b", "b [20.0]"]
    assert lines[4].startswith("c [") and "hook of" not in proc.stdout.split("b [20.0]")[1].split("\nc [")[0]
    assert lines[5:7] == ["hook of a", "a [11.0]"]          # an edited plugin is imported again
