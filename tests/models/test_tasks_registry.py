"""Which registry model serves which task: the estimator classes per task, parameters that
only make sense for some tasks, ``train_model`` refusing a model that cannot serve the
features' task, and the same refusal at config validation when the split declares its task."""

from __future__ import annotations

import importlib

import numpy as np
import pandas as pd
import pytest

from pipeline.config import load_config
from pipeline.core.errors import ConfigError
from pipeline.models import MODELS, EstimatorClasses, ModelSpec, get_model_spec, models_for, register_model
from pipeline.stages import build_features, split_frame, train_model
from pipeline.core.problems import REGRESSION, Task

REGRESSORS = {"random_forest", "ridge", "xgboost"}


# ------------------------------------------------------------------ serves / models_for / class paths
def test_models_for_each_task():
    assert REGRESSORS <= set(models_for("regression"))
    assert "logistic_regression" not in models_for("regression")
    for task in ("binary", "multiclass"):
        assert {"logistic_regression", "random_forest", "xgboost"} <= set(models_for(task))
        assert "ridge" not in models_for(task)
    assert "mlp" not in models_for("regression")               # the torch stage trains it, not train
    assert get_model_spec("mlp").tasks == ("binary", "multiclass", "regression")


@pytest.mark.parametrize(("model", "device", "distributed", "expected"), [
    ("random_forest", "cpu", False, "sklearn.ensemble:RandomForestRegressor"),
    ("random_forest", "gpu", False, "cuml.ensemble:RandomForestRegressor"),
    ("random_forest", "gpu", True, "cuml.dask.ensemble:RandomForestRegressor"),
    ("random_forest", "cpu", True, None),
    ("xgboost", "cpu", False, "xgboost:XGBRegressor"),
    ("xgboost", "gpu", True, "xgboost.dask:DaskXGBRegressor"),
    ("ridge", "cpu", False, "sklearn.linear_model:Ridge"),
    ("ridge", "gpu", False, "cuml.linear_model:Ridge"),
    ("logistic_regression", "cpu", False, None),
])
def test_regression_class_paths(model, device, distributed, expected):
    assert get_model_spec(model).class_path(device, distributed=distributed, task="regression") == expected


def test_classification_class_paths_are_unchanged_and_ridge_has_none():
    forest = get_model_spec("random_forest")
    for task in ("binary", "multiclass"):
        assert forest.class_path("cpu", task=task) == "sklearn.ensemble:RandomForestClassifier"
        assert get_model_spec("xgboost").class_path("gpu", distributed=True, task=task) == "xgboost.dask:DaskXGBClassifier"
        assert get_model_spec("ridge").class_path("cpu", task=task) is None
    assert forest.class_path("cpu") == "sklearn.ensemble:RandomForestClassifier"     # binary by default


def test_unavailable_names_the_task_and_the_models_that_serve_it():
    message = get_model_spec("logistic_regression").unavailable("cpu", task="regression")
    assert "cannot serve a regression task" in message
    assert all(name in message for name in REGRESSORS)
    partitioned = get_model_spec("random_forest").unavailable("cpu", distributed=True, task="regression")
    assert "(xgboost)" in partitioned and "cuml.dask" in partitioned


def test_a_plugin_entry_is_a_classifier_unless_it_says_otherwise():
    plain = ModelSpec(name="plugin_plain", cpu_class="sklearn.linear_model:LogisticRegression")
    assert plain.serves("binary") and plain.serves("multiclass") and not plain.serves("regression")
    regressor_only = ModelSpec(name="plugin_lasso", tasks=("regression",),
                               regression=EstimatorClasses(cpu="sklearn.linear_model:Lasso"))
    assert regressor_only.trainable and regressor_only.class_path("cpu", task="regression") == "sklearn.linear_model:Lasso"
    previous = MODELS.get("plugin_lasso")
    register_model(regressor_only)
    try:
        assert "plugin_lasso" in models_for("regression") and "plugin_lasso" not in models_for("binary")
    finally:
        MODELS.pop("plugin_lasso") if previous is None else register_model(previous)


# ------------------------------------------------------------------ params per task and device
@pytest.mark.parametrize(("model", "task", "params", "message"), [
    ("random_forest", "regression", {"class_weight": "balanced"}, "class_weight applies to classification"),
    ("random_forest", "regression", {"criterion": "gini"}, "'gini' is not a regression criterion"),
    ("random_forest", "multiclass", {"criterion": "squared_error"}, "'squared_error' is not a multiclass criterion"),
    ("xgboost", "multiclass", {"scale_pos_weight": 3}, "scale_pos_weight weighs a binary task"),
    ("ridge", "binary", {}, "cannot serve a binary task; models that can: "),
])
def test_task_problems_name_the_parameter_and_the_way_out(model, task, params, message):
    problems = get_model_spec(model).task_problems(task, params)
    assert len(problems) == 1 and message in problems[0]


def test_task_problems_let_matching_params_through():
    forest = get_model_spec("random_forest")
    assert forest.task_problems("regression", {"criterion": "poisson", "n_estimators": 5}) == []
    assert forest.task_problems("binary", {"criterion": "entropy", "class_weight": "balanced"}) == []
    assert get_model_spec("xgboost").task_problems("binary", {"scale_pos_weight": 3}) == []


def test_forest_criteria_are_spelt_for_cuml():
    forest = get_model_spec("random_forest")
    assert forest.translate({"criterion": "squared_error"}, "gpu", seed=1)[0]["split_criterion"] == "mse"
    assert forest.translate({"criterion": "log_loss"}, "gpu", seed=1)[0]["split_criterion"] == "entropy"
    assert forest.translate({"criterion": "log_loss"}, "cpu", seed=1)[0]["criterion"] == "log_loss"
    with pytest.raises(ValueError, match="'absolute_error' has no cuML equivalent"):
        forest.translate({"criterion": "absolute_error"}, "gpu", seed=1)


def test_ridge_params_translate_per_device():
    ridge = get_model_spec("ridge")
    cpu, dropped = ridge.translate({"alpha": 2.0, "solver": "lsqr", "max_iter": 50, "tol": 1e-3}, "cpu", seed=7)
    assert cpu == {"alpha": 2.0, "solver": "lsqr", "max_iter": 50, "tol": 1e-3} and dropped == []
    gpu, _ = ridge.translate({"alpha": 2.0, "solver": "lsqr"}, "gpu", seed=7)
    assert gpu == {"alpha": 2.0, "solver": "lsmr", "output_type": "cupy"}            # no seed parameter
    assert ridge.translate({"solver": "cholesky"}, "gpu", seed=7)[0]["solver"] == "auto"
    assert "solver must be one of" in ridge.check_params({"solver": "lbfgs"})[0]


def test_cumls_ridge_takes_the_translated_names():
    """cuML 26.10's Ridge signature, read from its source where the GPU wheels are installed."""
    from pathlib import Path

    source = next(Path(__file__).resolve().parents[2].glob(".venv-gpu/lib/python3.*/site-packages/cuml/linear_model/ridge.pyx"), None)
    if source is None:
        pytest.skip("cuML's sources are not installed here (.venv-gpu)")
    text = source.read_text()
    signature = text[text.index("    def __init__("):].split("):", 1)[0]
    for name in get_model_spec("ridge").params:
        assert f"{name}=" in signature, name
    assert "'auto', 'eig', 'svd', 'lsmr'" in text


@pytest.mark.parametrize("model", sorted(REGRESSORS))
def test_every_regressor_constructs_on_cpu_with_translated_params(model):
    spec = get_model_spec(model)
    params, _ = spec.translate({}, "cpu", seed=3)
    module, _, cls = spec.class_path("cpu", task="regression").partition(":")
    estimator = getattr(importlib.import_module(module), cls)(**params)
    assert all(estimator.get_params()[k] == v for k, v in params.items())


# ------------------------------------------------------------------ train_model per task
def task_features(task: str):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 4))
    frame = pd.DataFrame(x, columns=["a", "b", "c", "d"])
    signal = x[:, 0] + 0.5 * x[:, 1]
    if task == "regression":
        frame["y"] = 3 * signal + rng.normal(scale=0.1, size=300)
    else:
        frame["y"] = np.where(signal > 0.5, "high", np.where(signal < -0.5, "low", "mid"))
    return build_features(split_frame(frame, "y", task=task, test=0.2, valid=0.1, seed=1), [])


def test_train_model_refuses_a_model_that_cannot_serve_the_task():
    features = task_features("regression")
    with pytest.raises(ConfigError) as caught:
        train_model(features, "logistic_regression", name="logreg")
    message = str(caught.value)
    assert "stages.logreg" in message and "cannot serve a regression task" in message
    assert all(name in message for name in REGRESSORS)
    with pytest.raises(ConfigError, match="class_weight applies to classification"):
        train_model(features, "random_forest", {"class_weight": "balanced"})


@pytest.mark.parametrize("model", sorted(REGRESSORS))
def test_each_regressor_trains_and_predicts_numbers(model):
    features = task_features("regression")
    params = {"n_estimators": 20} if model != "ridge" else {}
    trained = train_model(features, model, params, seed=1)
    assert trained.task == REGRESSION
    scores, truth = trained.scores["test"], features.labels("test")
    assert scores.shape == truth.shape and scores.dtype == np.float64
    assert np.corrcoef(scores, truth)[0, 1] > 0.8


@pytest.mark.parametrize("model", ["logistic_regression", "random_forest", "xgboost"])
def test_each_classifier_trains_on_three_classes(model):
    features = task_features("multiclass")
    assert features.task == Task("multiclass", classes=("high", "low", "mid"))
    trained = train_model(features, model, {"n_estimators": 20} if model != "logistic_regression" else {}, seed=1)
    scores = trained.scores["test"]
    assert scores.shape == (features.rows()["test"], 3)
    np.testing.assert_allclose(scores.sum(axis=1), 1.0, atol=1e-5)
    assert (scores.argmax(axis=1) == features.labels("test")).mean() > 0.6


# ------------------------------------------------------------------ at config validation
def config_text(task: str | None, model: str, *, params: str = "", positive: str | None = None) -> str:
    split = "    target: y\n" + (f"    task: {task}\n" if task else "") + (f"    positive: {positive}\n" if positive else "")
    return ("name: t\nstages:\n  raw:\n    kind: load\n    path: data.csv\n"
            f"  split:\n    kind: split\n    inputs: [raw]\n{split}"
            "  features:\n    kind: features\n    inputs: [split]\n    ops: []\n"
            f"  fit:\n    kind: train\n    inputs: [features]\n    model: {model}\n{params}")


def config_issues(text: str, overrides: tuple[str, ...] = ()) -> dict[str, object]:
    with pytest.raises(ConfigError) as caught:
        load_config(text=text, overrides=overrides)
    return {issue.path: issue for issue in caught.value.issues}


def test_a_declared_task_the_model_cannot_serve_fails_validation_with_the_models_that_can():
    issues = config_issues(config_text("regression", "logistic_regression"))
    issue = issues["stages.fit.model"]
    assert issue.line == 18 and "cannot serve a regression task" in issue.message
    assert all(name in issue.message for name in REGRESSORS)


def test_positive_declares_binary_for_the_check():
    issues = config_issues(config_text(None, "ridge", positive='"yes"'))
    assert "cannot serve a binary task" in issues["stages.fit.model"].message


def test_a_classifier_parameter_under_a_regression_split_points_at_params():
    text = config_text("regression", "random_forest", params="    params:\n      class_weight: balanced\n")
    assert "class_weight applies to classification" in config_issues(text)["stages.fit.params"].message


def test_a_task_set_on_the_command_line_is_checked_too():
    issue = config_issues(config_text(None, "ridge"), ("stages.split.task=multiclass",))["stages.fit.model"]
    assert issue.line == 17 and "cannot serve a multiclass task" in issue.message        # the file's model line


def test_matching_and_inferred_tasks_validate():
    assert load_config(text=config_text("regression", "ridge")).stages["split"].task == "regression"
    assert load_config(text=config_text("multiclass", "xgboost")).stages["fit"].model == "xgboost"
    assert load_config(text=config_text(None, "ridge")).stages["split"].task is None     # known at run time


def test_positive_with_a_regression_task_is_a_config_error_at_the_split():
    issues = config_issues(config_text("regression", "ridge", positive="1"))
    assert "positive: applies to task: binary" in issues["stages.split"].message
