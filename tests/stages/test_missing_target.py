"""``split``'s ``missing_target``: rows whose target is missing are refused (the default, the
message naming the option) or dropped and counted in the split stage's run-record facts."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.support.cli import run_cli as _pipeline
from pipeline.config import load_config
from pipeline.core.errors import ConfigError, DataError, ExitCode
from pipeline.runs.record import read_manifest
from pipeline.stages import split_frame


def frame_with_gaps(task: str) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    n = 60
    if task == "binary":
        target = pd.Series(["Yes", "No"] * (n // 2), dtype=object)
    elif task == "multiclass":
        target = pd.Series(["a", "b", "c"] * (n // 3), dtype=object)
    else:
        target = pd.Series(rng.normal(size=n))
    target[[3, 17, 40]] = None
    return pd.DataFrame({"x": rng.normal(size=n), "y": target})


@pytest.mark.parametrize("task,positive", [("binary", "Yes"), ("multiclass", None), ("regression", None)])
def test_the_default_refuses_and_names_the_option(task, positive):
    frame = frame_with_gaps(task)
    with pytest.raises(DataError, match="target column 'y' has 3 missing values; set missing_target: drop"):
        split_frame(frame, "y", positive=positive, task=task, seed=1)


@pytest.mark.parametrize("task,positive", [("binary", "Yes"), ("multiclass", None), ("regression", None)])
def test_drop_splits_the_other_rows_and_counts_the_dropped(task, positive):
    frame = frame_with_gaps(task)
    facts: dict = {}
    data = split_frame(frame, "y", positive=positive, task=task, seed=1, missing_target="drop", facts=facts)
    assert facts["dropped_missing_target"] == 3
    assert sum(data.sizes().values()) == 57
    kept = pd.concat([data.frames[name] for name in ("train", "valid", "test")])
    assert kept["y"].notna().all() and len(kept) == 57
    assert set(kept["x"].round(12)) == set(frame.loc[frame["y"].notna(), "x"].round(12))


def test_drop_with_every_target_missing_says_so_with_the_count():
    frame = frame_with_gaps("binary").assign(y=None)
    with pytest.raises(DataError, match="missing_target: drop left no row to split: the target 'y' is missing in "
                                        "all 60 rows of the input"):
        split_frame(frame, "y", positive="Yes", seed=1, missing_target="drop")


def test_drop_counts_zero_when_nothing_is_missing():
    frame = frame_with_gaps("binary").dropna()
    facts: dict = {}
    split_frame(frame, "y", positive="Yes", seed=1, missing_target="drop", facts=facts)
    assert facts["dropped_missing_target"] == 0


def test_drop_on_partitioned_data_leaves_the_rows_out_lazily():
    import dask.dataframe as dd

    frame = frame_with_gaps("regression")
    data = split_frame(dd.from_pandas(frame, npartitions=3), "y", task="regression", seed=1,
                       missing_target="drop")
    rows = sum(len(part.compute()) for part in data.frames.values())
    assert rows == 57
    with pytest.raises(DataError, match="set missing_target: drop"):
        parts = split_frame(dd.from_pandas(frame, npartitions=3), "y", task="regression", seed=1)
        for part in parts.frames.values():
            part.compute()


def test_the_option_is_validated_in_the_config():
    text = """\
name: t
stages:
  raw: {kind: load, path: data.csv}
  split: {kind: split, inputs: [raw], target: y, missing_target: skip}
"""
    with pytest.raises(ConfigError) as caught:
        load_config(text=text)
    (issue,) = caught.value.issues
    assert issue.path == "stages.split.missing_target" and issue.line == 4 and "'error' or 'drop'" in issue.message


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return _pipeline(*args, cwd=cwd, env={"COLUMNS": "200"})


CONFIG = """\
name: gaps
device: cpu
stages:
  raw:
    kind: load
    path: data.csv
  split:
    kind: split
    inputs: [raw]
    target: y
    positive: "Yes"
{option}
  features:
    kind: features
    inputs: [split]
    ops:
      - standardize: {{columns: [x]}}
  model:
    kind: train
    inputs: [features]
    model: logistic_regression
"""


def test_a_run_drops_and_records_or_refuses_naming_the_option(tmp_path):
    frame_with_gaps("binary").to_csv(tmp_path / "data.csv", index=False)
    (tmp_path / "refuse.yaml").write_text(CONFIG.format(option=""))
    proc = cli("run", "refuse.yaml", cwd=tmp_path)
    assert proc.returncode == ExitCode.DATA, proc.stderr
    assert "target column 'y' has 3 missing values; set missing_target: drop on the split stage" in proc.stderr
    assert "Traceback" not in proc.stderr

    (tmp_path / "drop.yaml").write_text(CONFIG.format(option="    missing_target: drop"))
    proc = cli("run", "drop.yaml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    facts = read_manifest(tmp_path / "runs" / "gaps" / "latest").stages["split"].facts
    assert facts["dropped_missing_target"] == 3
    assert sum(facts["rows"].values()) == 57
