"""Which features a model leans on: permutation importance for every model that scores in
memory, and XGBoost's own gain and SHAP contributions, on real fitted models."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pipeline.backends import get_backend
from pipeline.features import Categorify, Standardize
from pipeline.stages import SplitData, build_features, train_model, train_torch
from pipeline.stages.explain import SAMPLE, explain_models, shuffled, strided_sample


def frames(rows: int, seed: int) -> pd.DataFrame:
    """``signal`` decides the label (with a little noise), ``group`` a little, ``noise`` not at all."""
    rng = np.random.default_rng(seed)
    signal, noise = rng.normal(size=rows), rng.normal(size=rows)
    group = rng.choice(["a", "b", "c"], size=rows)
    logit = 3 * signal + np.where(group == "a", 1.0, 0.0) + rng.normal(scale=0.3, size=rows)
    return pd.DataFrame({"signal": signal, "noise": noise, "group": group, "y": (logit > 0).astype("int8")})


@pytest.fixture(scope="module")
def features():
    data = SplitData(frames={"train": frames(2000, 1), "valid": frames(300, 2), "test": frames(600, 3)},
                     target="y", positive=1, backend=get_backend("cpu"))
    return build_features(data, [Standardize(columns=["signal", "noise"]), Categorify(columns=["group"])])


@pytest.fixture(scope="module")
def models(features):
    return [train_model(features, "logistic_regression", seed=0, name="logreg"),
            train_model(features, "xgboost", {"n_estimators": 30, "max_depth": 3}, seed=0, name="xgb"),
            train_torch(features, name="mlp", epochs=10, batch_size=64, hidden=[16], seed=0)]


def test_every_model_is_measured_and_the_signal_comes_first(models):
    found = explain_models(models, split="test", metric="roc_auc", threshold=0.5, rows=400, repeats=2, seed=0)
    # every 2nd of the 600 test rows: the fewest spread rows that stay within 400
    assert found["rows"] == {"logreg": 300, "xgb": 300, "mlp": 300} and found["skipped"] == {}
    for name, entry in found["models"].items():
        permutation = entry["permutation"]
        assert list(permutation["mean"])[0] == "signal", name                 # most important first
        assert permutation["mean"]["signal"] > 0.2 > abs(permutation["mean"]["noise"]), name
        assert set(permutation["std"]) == {"signal", "noise", "group"}
        assert 0.9 < permutation["base"] <= 1.0                               # the unshuffled roc_auc
    xgb = found["models"]["xgb"]
    assert set(xgb) == {"permutation", "gain", "shap"}                        # its registry entry explains
    assert set(found["models"]["logreg"]) == {"permutation"}
    assert list(xgb["gain"])[0] == list(xgb["shap"])[0] == "signal"
    assert xgb["shap"]["signal"] > 5 * xgb["shap"]["noise"]


def test_a_lower_is_better_metric_still_counts_a_needed_feature_as_important(models):
    found = explain_models(models[:1], split="test", metric="log_loss", threshold=0.5, rows=400, repeats=1)
    assert found["models"]["logreg"]["permutation"]["mean"]["signal"] > 0.1


def test_a_shuffle_reorders_one_column_and_its_category_codes(features):
    sample = strided_sample(features, "test", 100)
    assert sample.rows() == {SAMPLE: 100}
    np.testing.assert_array_equal(sample.X[SAMPLE], features.X["test"][::6][:100])
    order = np.arange(100)[::-1]
    group = features.feature_names.index("group")
    stacked = shuffled(sample, [(group, order), (0, order)])
    x, codes = stacked.X[SAMPLE], stacked.codes[SAMPLE]
    assert x.shape == (200, len(features.feature_names)) and codes.shape == (200, 1)
    np.testing.assert_array_equal(x[:100, group], sample.X[SAMPLE][order, group])
    np.testing.assert_array_equal(codes[:100, 0], sample.codes[SAMPLE][order, 0])
    np.testing.assert_array_equal(np.delete(x[:100], group, axis=1), np.delete(sample.X[SAMPLE], group, axis=1))
    np.testing.assert_array_equal(x[100:, 0], sample.X[SAMPLE][order, 0])
    np.testing.assert_array_equal(codes[100:], sample.codes[SAMPLE])            # codes of another column: as they were


def test_an_ensemble_is_shuffled_through_its_members(models):
    from pipeline.stages.ensemble import fit_ensemble

    blend = fit_ensemble(models[:2], name="blend", weights={"logreg": 1, "xgb": 1})
    found = explain_models([blend], split="test", metric="roc_auc", threshold=0.5, rows=400, repeats=1)
    permutation = found["models"]["blend"]["permutation"]
    assert permutation["base"] == pytest.approx(found_base(blend, 400))
    assert list(permutation["mean"])[0] == "signal" and permutation["mean"]["signal"] > 0.2


def found_base(model, rows: int) -> float:
    """The unshuffled metric of ``model`` on the sample, from its own kept scores."""
    from pipeline.metrics import task_metrics

    labels = model.features.labels("test")
    step = -(-len(labels) // rows)
    return task_metrics(model.task, labels[::step], model.scores["test"][::step])["roc_auc"]


def test_a_bag_or_an_ensemble_gets_the_budget_divided_by_the_estimators_it_runs(features, models):
    """Scoring a bag of k fits runs k estimators: its sample shrinks k-fold, so its importance
    costs about what one model's does (an auto model of 35 fits otherwise cost as much as training)."""
    from pipeline.stages.ensemble import fit_ensemble
    from pipeline.stages.training.bagging import bag_model

    bagged = bag_model(features, "logistic_regression", k=4, seed=0, name="bag")
    blend = fit_ensemble([models[0], bagged], name="blend", weights={"logreg": 1, "bag": 1})
    unused = fit_ensemble([models[0], bagged], name="unused", weights={"logreg": 1, "bag": 0})
    assert (models[0].scoring_cost(), bagged.scoring_cost(), blend.scoring_cost(), unused.scoring_cost()) == (1, 4, 5, 1)
    budget = 4_000                      # rows x (3 features x 1 repeat + 1): all 600 test rows for one estimator
    found = explain_models([models[0], bagged, blend], split="test", metric="roc_auc", threshold=0.5, rows=600,
                           repeats=1, seed=0, budget=budget)
    assert found["model_budgets"] == {"bag": {"estimators": 4, "scored_rows": budget // 4},
                                      "blend": {"estimators": 5, "scored_rows": budget // 5}}
    assert found["rows"]["logreg"] == 600 and 200 <= found["rows"]["bag"] <= budget // 4 // 4
    assert found["scored_rows"]["bag"] <= budget // 4 and found["scored_rows"]["blend"] <= budget // 5
    assert list(found["models"]["bag"]["permutation"]["mean"])[0] == "signal"
