"""What a command imports: `pipeline --help` and `validate` stay fast for people and for
scheduled checks because the heavy libraries load only where a command uses them. A fresh
interpreter each (what a process imports is the point), reporting ``sys.modules`` at exit."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

HEAVY = ("torch", "sklearn", "matplotlib", "xgboost", "lightgbm", "catboost", "distributed", "mlflow")

REPORT_MODULES = """\
import atexit, json, sys
atexit.register(lambda: sys.__stdout__.write("\\nMODULES " + json.dumps(sorted(m for m in sys.modules if "." not in m))))
sys.argv = ["pipeline", *sys.argv[1:]]
from pipeline.cli.app import main
main()
"""


def modules_after(*args: str, cwd: Path) -> set[str]:
    done = subprocess.run([sys.executable, "-c", REPORT_MODULES, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120)
    line = next(line for line in done.stdout.splitlines() if line.startswith("MODULES "))
    return set(json.loads(line.removeprefix("MODULES ")))


@pytest.mark.parametrize("args", [("--help",), ("validate", "configs/churn.yaml")], ids=["help", "validate"])
def test_help_and_validate_import_no_model_library(args):
    loaded = modules_after(*args, cwd=ROOT)
    assert "click" in loaded                               # the command did run
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))


def test_help_imports_neither_numpy_nor_pandas():
    loaded = modules_after("--help", cwd=ROOT)
    assert not loaded & {"numpy", "pandas", "pyarrow", "polars"}, sorted(loaded & {"numpy", "pandas"})
