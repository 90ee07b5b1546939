"""``load_model(...).score`` on what a caller may hand it: a frame of the wrong kind or a
column of the wrong type is a typed error naming it, as ``pipeline predict`` names it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipeline.core.errors import DataError, UsageError
from pipeline.scoring.model_folder import load_model
from pipeline.stages import build_features, load_table, save_model, split_frame, train_model

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    frame = load_table(ROOT / "data" / "telco_customer_churn.csv", na_values=[" "])
    data = split_frame(frame, "Churn", positive="Yes", seed=0)
    features = build_features(data, [{"fill_missing": {"columns": ["TotalCharges"]}},
                                     {"one_hot": {"columns": {"type": "categorical"}}}], id_column="customerID")
    folder = tmp_path_factory.mktemp("model")
    save_model(train_model(features, "logistic_regression", {"max_iter": 1000}), folder)
    return load_model(folder), frame.head(5).copy()


@pytest.mark.parametrize("rows", [{"tenure": [1]}, [{"tenure": 1}], np.zeros((2, 3)), "new_customers.csv", None])
def test_score_takes_a_frame_and_says_so(saved, rows):
    model, _ = saved
    with pytest.raises(UsageError, match=r"score takes a DataFrame .*got"):
        model.score(rows)
    with pytest.raises(UsageError, match="got"):
        model.predict(rows)


@pytest.mark.parametrize("column, value, fitted", [("tenure", "x", "int64"), ("gender", 3, "(text)")])
def test_a_column_of_the_wrong_type_is_named_with_both_types(saved, column, value, fitted):
    model, rows = saved
    before = rows.copy()
    with pytest.raises(DataError, match=rf"column type\(s\) differ from training: '{column}' is .* now, .*{fitted}"):
        model.score(rows.assign(**{column: value}))
    pd.testing.assert_frame_equal(rows, before)
    assert model.score(rows).shape == (5,)


def test_a_column_left_blank_still_scores_and_the_callers_frame_is_untouched(saved):
    model, rows = saved
    blank = rows.assign(TotalCharges=None)          # object column of None: no value, so no mismatch
    scores = model.score(blank)
    assert scores.shape == (5,) and blank["TotalCharges"].dtype == object


def test_a_model_folder_of_a_run_is_checked_against_the_runs_record_as_predict_checks_it(tmp_path):
    """An edited coefficients file of a run's export: ``pipeline predict`` refused it as corrupt,
    ``load_model`` scored with it. A folder outside any run still loads as it is."""
    import json
    import shutil

    from pipeline import run_pipeline

    shutil.copytree(ROOT / "configs", tmp_path / "configs")
    (tmp_path / "data").mkdir()
    shutil.copy(ROOT / "data" / "telco_customer_churn.csv", tmp_path / "data")
    result = run_pipeline(str(tmp_path / "configs" / "churn.yaml"), runs_dir=str(tmp_path / "runs"),
                          overrides=["device=cpu", "stages.forest.params.n_estimators=10",
                                     "stages.xgb.params.n_estimators=10", "stages.mlp.epochs=1"],
                          only=["raw", "split", "features", "logreg", "export"])
    folder = next(result.run_dir.glob("*/models/logreg"))
    rows = pd.read_csv(ROOT / "data" / "telco_customer_churn.csv", na_values=[" "]).head(5)
    before = load_model(folder).score(rows)
    loose = tmp_path / "loose"
    shutil.copytree(folder, loose)
    coefficients = folder / "coefficients.json"
    edited = json.loads(coefficients.read_text())
    edited["intercept"] = [5.0]
    coefficients.write_text(json.dumps(edited))
    with pytest.raises(DataError, match="coefficients.json is corrupt: its sha256 does not match the run's manifest"):
        load_model(folder)
    (loose / "coefficients.json").write_text(json.dumps(edited))        # outside a run: nothing to check against
    assert not np.allclose(load_model(loose).score(rows), before)
