"""A ``join`` stage through the real ``pipeline`` command: two CSV files joined on ``on:``
(written unquoted, as YAML 1.1 would misread it), inputs by role, then split and a model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipeline.core.errors import ExitCode
from pipeline.runs.record import read_manifest
from tests.cli.test_end_to_end import cli

pytestmark = pytest.mark.slow

CONFIG = """\
name: joined
device: cpu
stages:
  accounts: {kind: load, path: accounts.csv}
  households: {kind: load, path: households.csv}
  joined:
    kind: join
    inputs: {left: accounts, right: households}
    on: household_id
    how: left
  split: {kind: split, inputs: [joined], target: churn, positive: "yes", test: 0.25}
  features:
    kind: features
    inputs: [split]
    id: account
    ops:
      - fill_missing: {columns: [size], strategy: median}
      - standardize: {columns: [spend, size]}
  logreg: {kind: train, inputs: [features], model: logistic_regression}
"""


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    rng = np.random.default_rng(4)
    n = 400
    accounts = pd.DataFrame({"account": np.arange(n), "household_id": rng.integers(0, 120, n),
                             "spend": rng.gamma(2.0, 50.0, n), "churn": rng.choice(["yes", "no"], n)})
    households = pd.DataFrame({"household_id": rng.permutation(150)[:100], "size": rng.integers(1, 6, 100)})
    accounts.to_csv(tmp_path / "accounts.csv", index=False)
    households.to_csv(tmp_path / "households.csv", index=False)
    (tmp_path / "config.yaml").write_text(CONFIG)
    return tmp_path


def test_a_run_joins_two_files_and_records_the_counts(folder: Path):
    done = cli("run", "config.yaml", cwd=folder)
    assert done.returncode == ExitCode.OK, done.stderr
    facts = read_manifest(folder / "runs" / "joined" / "latest").stages["joined"].facts
    accounts = pd.read_csv(folder / "accounts.csv")
    households = pd.read_csv(folder / "households.csv")
    unmatched = int((~accounts["household_id"].isin(households["household_id"])).sum())
    assert facts["rows"] == facts["left_rows"] == 400 and facts["right_rows"] == 100
    assert facts["unmatched_left_rows"] == unmatched > 0


def test_a_repeated_lookup_key_fails_the_run_naming_it(folder: Path):
    households = pd.read_csv(folder / "households.csv")
    pd.concat([households, households.iloc[:1]]).to_csv(folder / "households.csv", index=False)
    done = cli("run", "config.yaml", cwd=folder)
    assert done.returncode == ExitCode.DATA
    assert "key 'household_id' is not unique in the right table" in done.stderr and "Traceback" not in done.stderr


def test_validate_reads_on_as_the_key(folder: Path):
    bad = CONFIG.replace("on: household_id", "on: household_id\n    validate: many_to_many")
    (folder / "bad.yaml").write_text(bad)
    done = cli("validate", "bad.yaml", cwd=folder)
    assert done.returncode == ExitCode.CONFIG
    assert "stages.joined.validate" in done.stderr and "many-to-many join is refused" in done.stderr
    assert "'True'" not in done.stderr and "unknown key" not in done.stderr
