"""The two event-table example configs on the bundled real data, run as a user runs them, and
the bundled data files checked against the hashes their SOURCE notes give."""

from __future__ import annotations

import hashlib
import json
import math
import re
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from tests.support.cli import run_cli as _pipeline
from tests.conftest import ROOT, script_module

DATA = ROOT / "data"
SOURCE = DATA / "SOURCE.md"
EVENT_CONFIGS = {"cdnow_churn": "configs/cdnow_churn.yaml", "completejourney": "configs/completejourney.yaml"}


def source_hashes() -> dict[str, str]:
    """file name -> SHA-256, from data/SOURCE.md: each hash belongs to the data file named
    last before it in its section (a section's heading names its files)."""
    names = [p.name for p in DATA.iterdir() if p.is_file() and p.name != SOURCE.name]
    pattern = re.compile("|".join(re.escape(n) for n in sorted(names, key=len, reverse=True)) + r"|\b[0-9a-f]{64}\b")
    hashes: dict[str, str] = {}
    for section in SOURCE.read_text(encoding="utf-8").split("\n## ")[1:]:
        named = None
        for match in pattern.finditer(section):
            token = match.group(0)
            if token in names:
                named = token
            else:
                assert named is not None, f"a hash before any file name in SOURCE.md: {token}"
                hashes[named] = token
    return hashes


def test_every_bundled_data_file_matches_its_source_hash():
    hashes = source_hashes()
    files = sorted(p.name for p in DATA.iterdir() if p.is_file() and p.name != SOURCE.name)
    assert {"cdnow_transactions.csv", "completejourney_transactions_sample.csv",
            "completejourney_demographics.csv", "telco_customer_churn.csv"} <= set(files)
    assert sorted(hashes) == files, "every file in data/ has a SHA-256 in data/SOURCE.md"
    for name in files:
        assert hashlib.sha256((DATA / name).read_bytes()).hexdigest() == hashes[name], name


def test_configs_read_only_the_bundled_data():
    """The project never reads the shared datasets folder at run time."""
    for config in EVENT_CONFIGS.values():
        paths = re.findall(r"^\s*path:\s*(\S+)", (ROOT / config).read_text(encoding="utf-8"), flags=re.M)
        assert paths and all(p.startswith("data/") and (ROOT / p).is_file() for p in paths), (config, paths)


def pipeline_run(config: str, runs_dir: Path) -> subprocess.CompletedProcess[str]:
    return _pipeline("run", config, "--device", "cpu", "--runs-dir", runs_dir, "--no-cache", cwd=ROOT,
                     env={"COLUMNS": "200"})


@pytest.fixture(scope="module")
def event_runs(tmp_path_factory) -> Path:
    """Both configs run once through the CLI, from the project folder as the README says."""
    runs_dir = tmp_path_factory.mktemp("event-runs")
    for config in EVENT_CONFIGS.values():
        proc = pipeline_run(config, runs_dir)
        assert proc.returncode == 0, f"{config}:\n{proc.stderr[-4000:]}"
    return runs_dir


def manifest(runs_dir: Path, name: str) -> dict:
    return json.loads((runs_dir / name / "latest" / "manifest.json").read_text(encoding="utf-8"))


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(EVENT_CONFIGS))
def test_event_config_runs_end_to_end_with_a_finite_test_metric(event_runs, name):
    record = manifest(event_runs, name)
    assert record["status"] == "succeeded"
    metrics = record["metrics"]
    assert metrics["split"] == "test" and set(metrics["models"]) == {"logreg", "xgb"}
    for model, values in metrics["models"].items():
        assert math.isfinite(values["roc_auc"]) and 0.5 < values["roc_auc"] <= 1.0, (model, values)
    predictions = pd.read_parquet(event_runs / name / "latest" / "export" / "predictions.parquet")
    assert len(predictions) > 0 and predictions["churn"].isin([0, 1]).all()


@pytest.mark.slow
def test_cdnow_tests_on_the_latest_cutoff_only(event_runs):
    """test_latest: 1 holds out every customer at 1997-12-31, and only them."""
    predictions = pd.read_parquet(event_runs / "cdnow_churn" / "latest" / "export" / "predictions.parquet")
    test = predictions[predictions["split"] == "test"] if "split" in predictions else predictions
    events = pd.read_csv(DATA / "cdnow_transactions.csv", dtype={"customer_id": str})
    before = events.loc[events["date"] < 19971231, "customer_id"]
    assert len(test) == before.nunique() and set(test["customer_id"]) == set(before)


@pytest.mark.slow
def test_completejourney_keeps_households_without_demographics(event_runs):
    """The left join keeps the households that have no demographics row."""
    predictions = pd.read_parquet(event_runs / "completejourney" / "latest" / "export" / "predictions.parquet")
    demographics = pd.read_csv(DATA / "completejourney_demographics.csv")
    without = ~predictions["household_id"].isin(demographics["household_id"])
    assert without.any() and (~without).any()


@pytest.mark.slow
def test_hand_written_baselines_score_the_same_split(event_runs):
    """scripts/events_baselines.py rebuilds each table in plain pandas, splits it as the run
    did (it refuses a CDNOW run whose test rows are not the latest cut-off's) and trains the
    same XGBoost: its test AUC lands next to the pipeline's."""
    with script_module("events_baselines") as baselines:
        results = baselines.run_all(ROOT, event_runs)
    assert [r["config"] for r in results] == list(EVENT_CONFIGS.values())
    for result in results:
        assert math.isfinite(result["baseline_roc_auc"]) and math.isfinite(result["pipeline_roc_auc"])
        assert abs(result["baseline_roc_auc"] - result["pipeline_roc_auc"]) < 0.01, result


@pytest.mark.slow
def test_cdnow_scored_from_raw_events_equals_the_runs_test_scores(event_runs, tmp_path):
    """The nightly job: `pipeline predict --as-of` on the raw purchase log rebuilds the customer
    table at the test cut-off with the run's definitions and gives the run's own test scores."""
    out = tmp_path / "scores.parquet"
    proc = _pipeline("predict", "--run", "latest", "--runs-dir", event_runs, "--pipeline", "cdnow_churn",
                     "--input", "data/cdnow_transactions.csv", "--as-of", "1997-12-31", "--model", "xgb",
                     "--output", out, "--device", "cpu", cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    scored = pd.read_parquet(out)
    exported = pd.read_parquet(event_runs / "cdnow_churn" / "latest" / "export" / "predictions.parquet")
    both = exported.merge(scored, on="customer_id", validate="one_to_one")
    assert len(both) == len(exported) == len(scored)
    assert (both["score_xgb"] - both["score"]).abs().max() < 1e-6
