"""Each built-in stage used as a library function on data the caller already has."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import xgboost
from sklearn import metrics as skm

from pipeline.core.errors import DataError
from pipeline.features import FillMissing, OneHot, Standardize
from pipeline.stages import (
    binary_metrics, build_features, evaluate_models, load_table, predictions_frame, save_model,
    split_frame, train_model,
)
from tests.conftest import TELCO

OPS = [
    FillMissing(columns=["TotalCharges"]),
    OneHot(columns=["gender", "Partner", "Dependents", "PhoneService", "PaperlessBilling", "MultipleLines",
                    "InternetService", "OnlineSecurity", "OnlineBackup", "DeviceProtection", "TechSupport",
                    "StreamingTV", "StreamingMovies", "Contract", "PaymentMethod"], drop_binary=True),
    Standardize(columns=["tenure", "MonthlyCharges", "TotalCharges"]),
]


@pytest.fixture
def features(backend):
    frame = load_table(TELCO, backend=backend, na_values=[" "])
    data = split_frame(frame, "Churn", positive="Yes", test=0.2, valid=0.1, seed=42, backend=backend)
    return build_features(data, OPS, id_column="customerID")


def test_split_is_stratified_seeded_and_disjoint(backend):
    frame = load_table(TELCO, backend=backend, na_values=[" "])
    data = split_frame(frame, "Churn", positive="Yes", test=0.2, valid=0.1, seed=42, backend=backend)
    sizes = data.sizes()
    assert sum(sizes.values()) == 7043 and sizes["test"] == 1409 and abs(sizes["valid"] - 704) <= 1
    ids = {name: set(backend.to_host(f["customerID"])) for name, f in data.frames.items()}
    assert not (ids["train"] & ids["test"]) and not (ids["train"] & ids["valid"])
    for f in data.frames.values():
        rate = float(backend.to_host(f["Churn"]).mean())
        assert abs(rate - 1869 / 7043) < 0.01
    again = split_frame(frame, "Churn", positive="Yes", test=0.2, valid=0.1, seed=42, backend=backend)
    assert ids["test"] == set(backend.to_host(again.frames["test"]["customerID"]))
    other = split_frame(frame, "Churn", positive="Yes", test=0.2, valid=0.1, seed=1, backend=backend)
    assert ids["test"] != set(backend.to_host(other.frames["test"]["customerID"]))


def test_split_rejects_bad_targets():
    frame = pd.DataFrame({"y": ["a", "b", "c", "a"], "x": [1, 2, 3, 4]})
    with pytest.raises(DataError, match="set positive"):
        split_frame(frame.assign(y=["a", "b", "b", "a"]), "y")       # two values, neither 0/1
    with pytest.raises(DataError, match="'y'"):
        split_frame(frame, "y", task="binary")                        # three values, no positive
    with pytest.raises(DataError, match="'q' does not occur"):
        split_frame(frame, "y", positive="q")
    with pytest.raises(DataError, match="target column 'nope' not in the data"):
        split_frame(frame, "nope")


def test_positive_among_several_values_is_one_vs_rest():
    frame = pd.DataFrame({"y": ["NO", ">30", "<30", "NO", "<30", ">30"] * 20, "x": range(120)})
    data = split_frame(frame, "y", positive="<30", test=0.25, seed=3)
    every = pd.concat(data.frames.values()).sort_values("x")
    assert every["y"].tolist() == [int(v == "<30") for v in frame["y"]]


def test_features_are_float32_matrices_without_id_or_target(features):
    assert features.X["train"].dtype == np.float32
    assert features.X["train"].shape[1] == len(features.feature_names)
    assert "customerID" not in features.feature_names and "Churn" not in features.feature_names
    assert features.rows() == {name: x.shape[0] for name, x in features.X.items()}
    assert len(features.ids["test"]) == features.rows()["test"]


@pytest.mark.parametrize("model", ["logistic_regression", "random_forest", "xgboost"])
def test_each_model_trains_and_scores_every_split(features, model):
    trained = train_model(features, model, {"n_estimators": 20} if model != "logistic_regression" else {}, seed=0)
    for split, rows in features.rows().items():
        assert trained.scores[split].shape == (rows,)
        assert ((trained.scores[split] >= 0) & (trained.scores[split] <= 1)).all()
    auc = evaluate_models([trained]).metrics[trained.name]["roc_auc"]
    assert auc > 0.8


def test_metrics_match_scikit_learn_definitions():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 500)
    scores = np.clip(y * 0.3 + rng.random(500) * 0.7, 0, 1)
    m = binary_metrics(y, scores, threshold=0.6)
    predicted = scores >= 0.6
    assert m["roc_auc"] == pytest.approx(skm.roc_auc_score(y, scores))
    assert m["pr_auc"] == pytest.approx(skm.average_precision_score(y, scores))
    assert m["log_loss"] == pytest.approx(skm.log_loss(y, scores))
    assert m["precision"] == pytest.approx(skm.precision_score(y, predicted))
    assert m["recall"] == pytest.approx(skm.recall_score(y, predicted))
    assert m["f1"] == pytest.approx(skm.f1_score(y, predicted))
    assert m["accuracy"] == pytest.approx(skm.accuracy_score(y, predicted))


def test_best_model_by_rank_metric(features):
    good = train_model(features, "xgboost", {"n_estimators": 30}, name="good")
    weak = train_model(features, "xgboost", {"n_estimators": 1, "max_depth": 1}, name="weak")
    evaluation = evaluate_models([weak, good])
    assert evaluation.best == "good"
    assert evaluate_models([weak, good], rank_by="log_loss").best == "good"


def test_export_writes_predictions_with_ids_and_reloadable_models(features, tmp_path):
    xgb = train_model(features, "xgboost", {"n_estimators": 10}, name="xgb")
    lr = train_model(features, "logistic_regression", name="lr")
    table = predictions_frame([xgb, lr], "test")
    assert list(table.columns) == ["customerID", "split", "Churn", "score_xgb", "score_lr"]
    assert table["customerID"].is_unique and len(table) == features.rows()["test"]
    save_model(xgb, tmp_path / "xgb")
    save_model(lr, tmp_path / "lr")
    booster = xgboost.Booster(model_file=str(tmp_path / "xgb" / "model.xgb.json"))
    X = np.asarray(features.backend.to_host(features.X["test"]))
    reloaded = booster.inplace_predict(X)
    assert np.allclose(reloaded, xgb.scores["test"], atol=1e-6)
    meta = json.loads((tmp_path / "lr" / "model.json").read_text())
    logits = X @ np.asarray(meta["coef"]) + meta["intercept"][0]
    assert np.allclose(1 / (1 + np.exp(-logits)), lr.scores["test"], atol=1e-6)
    assert (tmp_path / "lr" / "workflow.json").exists()


def test_unknown_model_param_rejected(features):
    with pytest.raises(ValueError, match="did you mean 'max_depth'"):
        train_model(features, "xgboost", {"max_dept": 3})
