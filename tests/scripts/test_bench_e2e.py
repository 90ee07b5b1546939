"""The end-to-end benchmark: its hand-written sides and the script itself on a tiny table.

No timing thresholds: the checks are that the three sides ran, that they hold out the same rows
and reach the test ROC AUC the script says they must, and that the table and the JSON say so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from tests.conftest import ROOT, script_module

ROWS = 3000


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("e2e") / f"churn_{ROWS}_s0.csv"
    with script_module("generate_churn") as gen:
        gen.write(gen.generate(gen.read_source(gen.DEFAULT_SOURCE), ROWS, 0), path)
    return path


def test_the_polars_split_holds_out_the_rows_of_the_pandas_script(table):
    with script_module("e2e_baselines") as e2e:
        frame = pd.read_csv(table, na_values=[" "])
        positions = e2e.split_positions((frame["Churn"] == "Yes").to_numpy().astype("int8"))
        splits = e2e.plain.split(frame)
    for name, rows in positions.items():
        assert splits[name]["customerID"].tolist() == frame["customerID"].to_numpy()[rows].tolist()


def test_polars_and_pandas_build_the_same_features_and_model(table, tmp_path, monkeypatch):
    with script_module("e2e_baselines") as e2e:
        # One XGBoost thread: OpenMP threads spin-waiting on a busy shared machine cost more
        # than 300 trees on 2,100 rows; the model's result does not depend on it ("hist").
        monkeypatch.setattr(e2e, "xgboost_model", lambda: e2e.plain.models()["xgb"].set_params(n_jobs=1))
        X_polars, y_polars, ids_polars, names_polars = e2e.polars_matrices(table)
        X_pandas, y_pandas, ids_pandas, names_pandas = e2e.pandas_matrices(table)
        assert names_polars == names_pandas
        for split in ("train", "valid", "test"):
            assert X_polars[split].flags.c_contiguous and X_polars[split].dtype == np.float32
            np.testing.assert_allclose(X_polars[split], X_pandas[split], rtol=1e-6, atol=1e-6)
            assert np.array_equal(y_polars[split], y_pandas[split])
        assert list(ids_polars) == list(ids_pandas)
        results = {engine: e2e.run(engine, table, tmp_path / engine) for engine in e2e.ENGINES}
    assert results["polars"]["xgb"]["roc_auc"] == pytest.approx(results["pandas"]["xgb"]["roc_auc"], abs=1e-4)
    for engine in e2e.ENGINES:
        written = json.loads((tmp_path / engine / "metrics.json").read_text())
        assert written["rows"] == {"train": 2100, "valid": 300, "test": 600}
        assert set(written["importances"]["xgb"]) <= set(names_polars)
        assert len(pd.read_parquet(tmp_path / engine / "predictions.parquet")) == 600


def test_the_pipeline_config_is_bench_churn_with_its_xgboost_model_only(tmp_path):
    with script_module("bench_e2e") as bench:
        path = bench.e2e_config(Path("/data/churn.csv"), tmp_path)
    config = yaml.safe_load(path.read_text())
    source = yaml.safe_load((ROOT / "configs" / "bench_churn.yaml").read_text())
    kinds = {name: stage["kind"] for name, stage in config["stages"].items()}
    assert [n for n, k in kinds.items() if k == "train"] == ["xgb"]
    assert config["stages"]["xgb"] == source["stages"]["xgb"]
    assert config["stages"]["features"] == source["stages"]["features"]
    assert config["stages"]["evaluate"]["inputs"] == config["stages"]["export"]["inputs"] == ["xgb"]
    assert config["stages"]["raw"]["path"] == "/data/churn.csv" and config["device"] == "cpu"


def test_the_script_runs_the_three_sides_and_reports_ratios_against_polars(table, tmp_path):
    output = tmp_path / "e2e.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "bench_e2e.py"), "--rows", str(ROWS), "--repeats", "1",
         "--data-dir", str(table.parent), "--output", str(output)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1"})      # see the test above
    assert done.returncode == 0, done.stdout + done.stderr
    assert "metrics agree" in done.stdout and "| pipeline |" in done.stdout
    result = json.loads(output.read_text())
    assert result["metrics_agree"] and result["summary"]["ratio"]["polars"]["wall_s"] == 1.0
    run = result["runs"][0]
    assert set(run) >= {"polars", "pandas", "pipeline"}
    for side in ("polars", "pandas", "pipeline"):
        assert run[side]["wall_s"] > 0 and run[side]["cpu_s"] > 0 and run[side]["peak_rss_bytes"] > 0
        assert 0 < run[side]["fit_s"] < run[side]["wall_s"]
    assert {"raw", "features", "xgb", "evaluate", "export"} <= set(run["pipeline"]["stages"])


def test_without_the_pandas_side_the_ratios_are_the_pipelines_against_polars():
    def side(wall: float, auc: float) -> dict:
        return {"wall_s": wall, "cpu_s": wall * 2, "peak_rss_bytes": 100 * wall, "roc_auc": auc,
                "fit_s": wall - 4.0, "stages": {"raw": {"seconds": 1.0}}}

    runs = [{"polars": side(10.0, 0.88), "pipeline": side(12.0, 0.881)}]
    with script_module("bench_e2e") as bench:
        summary = bench.summarise(runs)
        assert set(summary["median"]) == {"polars", "pipeline"}
        assert summary["ratio"]["pipeline"]["wall_s"] == 1.2 and not summary["time_target_met"]
        assert summary["median"]["pipeline"]["outside_fit_s"] == 4.0 == summary["median"]["polars"]["outside_fit_s"]
        assert summary["ratio"]["pipeline"]["outside_fit_s"] == 1.0
        table = bench.markdown(runs, summary, 1000, "cmd")
        assert "| pipeline | 12.0 |" in table and "| pandas |" not in table
        assert bench.metric_problems(runs[0], 1e-4, 0.005) == []
