"""An input file replaced between the moment the run hashed it for the load's cache key and
the moment the load read it: the rows read were cached under the old bytes' key, and every
later run on the old bytes got a model of the new ones (exit 0)."""

from __future__ import annotations

import pandas as pd
import pytest

from pipeline import run_pipeline
from pipeline.core.errors import DataError, ExitCode

SWAP = '''
from pathlib import Path


def swap(ctx, inputs):
    """Rename a new file into place, as a nightly export does, after the keys were made."""
    Path("next.csv").replace("data.csv")
'''

CONFIG = """\
name: race
device: cpu
stages:
  swap: {kind: python, function: 'swap_stage:swap'}
  raw: {kind: load, path: data.csv}
"""


def test_a_file_replaced_after_it_was_hashed_fails_the_load_and_is_not_cached(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "swap_stage.py").write_text(SWAP)
    (tmp_path / "race.yaml").write_text(CONFIG)
    pd.DataFrame({"a": [1, 2, 3]}).to_csv("data.csv", index=False)
    pd.DataFrame({"a": [7, 8, 9, 10]}).to_csv("next.csv", index=False)
    with pytest.raises(DataError) as info:
        run_pipeline("race.yaml", runs_dir="runs")
    assert "data.csv changed while this run read it" in str(info.value) and info.value.exit_code == ExitCode.DATA
    # The next run keys the bytes now in place and reads those; nothing of the race was kept.
    (tmp_path / "swap_stage.py").write_text(SWAP.replace('Path("next.csv").replace("data.csv")', "pass"))
    result = run_pipeline("race.yaml", runs_dir="runs")
    assert result.outputs["raw"]["a"].tolist() == [7, 8, 9, 10]
    assert result.manifest.stages["raw"].status == "succeeded"
