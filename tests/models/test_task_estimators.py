"""Every task on every registry model that serves it: the estimator of the task, scores in the
task's shape (``pipeline.core.problems``), model files that round-trip per task, and training on
partitioned data (xgboost.dask and external memory) per task on a real 2-worker cluster.

The ``backend`` fixture runs each case on the CPU and, where a GPU and RAPIDS are present, on
the GPU (those cases are marked ``gpu`` and skip cleanly elsewhere)."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import accuracy_score, r2_score, roc_auc_score

from pipeline.backends import get_backend, scores_for_task
from pipeline.core.errors import DataError
from pipeline.features.ops import Standardize
from pipeline.models import LINEAR_COEFFICIENTS, SKOPS, XGBOOST_JSON, get_model_spec
from pipeline.models.registry import models_for
from pipeline.stages import build_features, split_frame, train_model
from pipeline.core.problems import BINARY, REGRESSION, Task
from tests.conftest import script_module

TARGETS = {"binary": "churned", "multiclass": "plan", "regression": "spend"}
# Each task with the registry models a ``train`` stage fits for it.
CASES = [
    ("binary", "logistic_regression"), ("binary", "random_forest"), ("binary", "xgboost"),
    ("multiclass", "logistic_regression"), ("multiclass", "random_forest"), ("multiclass", "xgboost"),
    ("regression", "ridge"), ("regression", "random_forest"), ("regression", "xgboost"),
    *((task, model) for model in ("catboost", "extra_trees", "lightgbm", "linear") for task in (
        "binary", "multiclass", "regression")),
]
SMALL = {"random_forest": {"n_estimators": 30, "max_depth": 6}, "extra_trees": {"n_estimators": 30, "max_depth": 6}, "xgboost": {"n_estimators": 30, "max_depth": 3},
         "lightgbm": {"n_estimators": 30, "num_leaves": 8}, "catboost": {"iterations": 30, "depth": 4}}


def synthetic_frame(n: int = 900, seed: int = 0) -> pd.DataFrame:
    """Three numeric features and a target per task that they predict well."""
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({"a": rng.normal(size=n), "b": rng.normal(size=n), "c": rng.normal(size=n)})
    noise = rng.normal(scale=0.3, size=n)
    frame["churned"] = (frame["a"] + frame["b"] + noise > 0).astype("int64")
    frame["plan"] = np.array(["basic", "plus", "pro"])[np.digitize(frame["a"] + noise, [-0.5, 0.5])]
    frame["spend"] = 3 * frame["a"] - 2 * frame["b"] + 0.5 * frame["c"] + noise
    return frame


def task_data(task: str, frame: pd.DataFrame, **split) -> object:
    """``split_frame`` of ``frame`` for ``task``, the other tasks' targets dropped."""
    target = TARGETS[task]
    others = [column for column in TARGETS.values() if column != target]
    return split_frame(frame.drop(columns=others), target, task=task, test=0.25, seed=3, **split)


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    return synthetic_frame()


def features_for(task: str, frame: pd.DataFrame, backend) -> object:
    data = task_data(task, backend.from_pandas(frame), valid=0.15, backend=backend)
    return build_features(data, [Standardize(columns=["a", "b", "c"])])


def assert_task_scores(task: Task, scores: np.ndarray, y_true: np.ndarray) -> None:
    """The shape and dtype the task fixes, and scores that learned the synthetic target."""
    assert scores.dtype == np.float64 and scores.shape[0] == len(y_true)
    if task.kind == "binary":
        assert scores.ndim == 1 and ((scores >= 0) & (scores <= 1)).all()
        assert roc_auc_score(y_true, scores) > 0.9
    elif task.kind == "multiclass":
        assert scores.shape == (len(y_true), len(task.classes))
        np.testing.assert_allclose(scores.sum(axis=1), 1.0, rtol=1e-5)
        assert accuracy_score(y_true, scores.argmax(axis=1)) > 0.7
    else:
        assert scores.ndim == 1 and np.isfinite(scores).all()
        assert r2_score(y_true, scores) > 0.7


# ------------------------------------------------------------------ each task on each model
def test_the_cases_cover_every_model_that_serves_each_task():
    for task in TARGETS:
        assert sorted(model for kind, model in CASES if kind == task) == models_for(task), task


@pytest.mark.parametrize(("task", "model"), CASES, ids=[f"{t}-{m}" for t, m in CASES])
def test_each_model_trains_for_each_task_it_serves_and_scores_in_the_tasks_shape(task, model, frame, backend):
    features = features_for(task, frame, backend)
    assert features.task.kind == task
    trained = train_model(features, model, SMALL.get(model, {}), seed=1)
    spec = get_model_spec(model)
    expected = spec.class_path(backend.name, task=task).rpartition(":")[2]
    assert type(trained.estimator).__name__ == expected
    y_test = np.asarray(backend.to_host(features.y["test"]))
    assert_task_scores(features.task, trained.scores["test"], y_test)


def test_the_estimator_is_the_tasks_class_for_a_kind_or_a_task():
    backend = get_backend("cpu")
    forest = get_model_spec("random_forest")
    assert type(backend.estimator(forest, {})).__name__ == "RandomForestClassifier"
    assert type(backend.estimator(forest, {}, task="multiclass")).__name__ == "RandomForestClassifier"
    assert type(backend.estimator(forest, {}, task="regression")).__name__ == "RandomForestRegressor"
    assert type(backend.estimator(forest, {}, task=REGRESSION)).__name__ == "RandomForestRegressor"
    assert backend.estimator_class_path(get_model_spec("xgboost"), distributed=True,
                                        task="regression") == "xgboost.dask:DaskXGBRegressor"


def test_a_model_that_cannot_serve_the_task_names_the_models_that_can():
    backend = get_backend("cpu")
    with pytest.raises(DataError, match="'ridge' cannot serve a binary task.*logistic_regression"):
        backend.estimator(get_model_spec("ridge"), {})
    with pytest.raises(DataError, match="'logistic_regression' cannot serve a regression task.*ridge"):
        backend.estimator_class_path(get_model_spec("logistic_regression"), task="regression")


def test_a_multiclass_model_that_never_saw_a_class_says_which_class(frame):
    """A training split without one class gives a model of fewer columns than the task has
    classes: scoring refuses it naming the class, rather than scoring misaligned columns."""
    from sklearn.linear_model import LogisticRegression

    task = Task("multiclass", classes=("basic", "plus", "pro"))
    X = frame[["a", "b"]].to_numpy("float32")
    codes = np.digitize(frame["a"], [-0.5, 0.5]).astype("int32")
    seen = codes != 1                                           # no row of 'plus'
    estimator = LogisticRegression().fit(X[seen], codes[seen])
    with pytest.raises(DataError, match=r"scores 2 classes but the task is multiclass \(3 classes.*no rows of 'plus'"):
        get_backend("cpu").predict_scores(estimator, X, task)
    with pytest.raises(DataError, match="lacked some of them"):       # nothing to read the classes from
        scores_for_task(np.zeros((4, 2)), task)


def test_binary_scores_are_the_positive_column_as_before():
    proba = np.array([[0.9, 0.1], [0.2, 0.8]], dtype="float32")
    np.testing.assert_array_equal(scores_for_task(proba, BINARY), [np.float32(0.1), np.float32(0.8)])
    assert scores_for_task(np.array([[1.5], [2.5]]), REGRESSION).shape == (2,)


class _Gives:
    """An estimator (a plugin's, say) whose predict and predict_proba give ``output`` whatever they are asked."""

    def __init__(self, output):
        self.output = np.asarray(output, dtype="float64")

    def predict(self, X):
        return self.output

    predict_proba = predict


@pytest.mark.parametrize(("task", "output", "words"), [
    (BINARY, [[0.5, 0.5], [np.nan, np.nan], [0.2, 0.8]], r"NaN or infinite scores for 1 of its 3 rows \(the first: row 1\)"),
    (REGRESSION, [1.0, 2.0, np.inf], r"for 1 of its 3 rows \(the first: row 2\)"),
    (BINARY, np.full((3, 3), 1 / 3), "gave 3 probability column"),
    (BINARY, [[2.0, -1.0], [0.5, 0.5], [0.5, 0.5]], r"probabilities outside 0\.\.1 \(from -1 to 0\.5\)"),
    (BINARY, [[0.5, 0.5], [0.5, 0.5]], "scored 2 rows of the 3 it was given"),
    (Task("multiclass", classes=("a", "b", "c")), [[0.9, 0.8, 0.7], [0.2, 0.3, 0.5], [0.1, 0.1, 0.8]],
     r"rows add up to 1 to 2\.4, not 1 \(one-vs-all scores\?\)"),
], ids=["nan", "inf", "three-columns", "out-of-range", "short", "rows-not-summing"])
def test_scores_a_metric_cannot_read_are_refused_naming_the_estimator(task, output, words):
    """A plugin model's NaN scores gave ROC AUC 0.53 and exit 0; a 3-column predict_proba on a
    binary task had its column 1 used; a short one failed in evaluate with a broadcast error."""
    with pytest.raises(DataError, match=words) as info:
        get_backend("cpu").predict_scores(_Gives(output), np.zeros((3, 2)), task)
    assert "(_Gives)" in str(info.value)
    good = {"binary": [[0.9, 0.1], [0.5, 0.5], [0.0, 1.0]], "regression": [1.0, -2.0, 3e300],
            "multiclass": [[0.2, 0.3, 0.5], [1.0, 0.0, 0.0], [0.1, 0.1, 0.8]]}[task.kind]
    assert len(get_backend("cpu").predict_scores(_Gives(good), np.zeros((3, 2)), task)) == 3


# ------------------------------------------------------------------ model files per task
def _round_trip(model_format, estimator, task: Task, backend, tmp_path):
    files, extra = model_format.save(estimator, tmp_path, backend=backend)
    meta = {**extra, "files": [f.name for f in files], "format": model_format.name, "task": task.to_dict()}
    return model_format.load(tmp_path, meta, backend=backend), meta


LINEAR_CASES = [("binary", "logistic_regression"), ("multiclass", "logistic_regression"), ("regression", "ridge"),
                ("binary", "linear"), ("multiclass", "linear"), ("regression", "linear")]


@pytest.mark.parametrize(("task", "model"), LINEAR_CASES, ids=[t for t, _ in LINEAR_CASES])
def test_linear_coefficient_files_round_trip_to_the_same_scores(task, model, frame, backend, tmp_path):
    features = features_for(task, frame, backend)
    trained = train_model(features, model, seed=1)
    predictor, _ = _round_trip(LINEAR_COEFFICIENTS, trained.estimator, features.task, backend, tmp_path)
    body = json.loads((tmp_path / "coefficients.json").read_text())
    assert body.get("kind") == {"binary": None, "multiclass": "multinomial", "regression": "regression"}[task]
    scores = predictor(features.X["test"], None)
    if backend.name == "cpu":          # computed as scikit-learn computes them: the same numbers
        np.testing.assert_array_equal(scores, trained.scores["test"])
    else:                              # cuML's products on the device, NumPy's here
        np.testing.assert_allclose(scores, trained.scores["test"], rtol=1e-4, atol=1e-5)


def test_a_binary_coefficients_file_is_written_as_before_tasks(frame, tmp_path):
    features = features_for("binary", frame, get_backend("cpu"))
    trained = train_model(features, "logistic_regression", seed=1)
    _, meta = _round_trip(LINEAR_COEFFICIENTS, trained.estimator, BINARY, get_backend("cpu"), tmp_path)
    body = json.loads((tmp_path / "coefficients.json").read_text())
    assert list(body) == ["coef", "intercept", "dtype"] and len(body["coef"]) == 3 and len(body["intercept"]) == 1
    # A model.json from before tasks (no "task") loads it as binary.
    del meta["task"]
    scores = LINEAR_COEFFICIENTS.load(tmp_path, meta, backend=None)(features.X["test"], None)
    np.testing.assert_array_equal(scores, trained.scores["test"])


def test_a_binary_linear_model_of_a_two_class_multiclass_task_gives_both_columns(frame, tmp_path):
    from sklearn.linear_model import LogisticRegression

    task = Task("multiclass", classes=("no", "yes"))
    X = frame[["a", "b", "c"]].to_numpy("float32")
    estimator = LogisticRegression().fit(X, frame["churned"].to_numpy("int32"))
    predictor, _ = _round_trip(LINEAR_COEFFICIENTS, estimator, task, get_backend("cpu"), tmp_path)
    np.testing.assert_array_equal(predictor(X, None), get_backend("cpu").predict_scores(estimator, X, task))


SKOPS_CASES = [("multiclass", "random_forest"), ("regression", "random_forest")]
XGBOOST_CASES = [("binary", "xgboost"), ("multiclass", "xgboost"), ("regression", "xgboost")]


@pytest.mark.parametrize(("task", "model"), SKOPS_CASES + XGBOOST_CASES,
                         ids=[f"{m}-{t}" for t, m in SKOPS_CASES + XGBOOST_CASES])
def test_model_files_round_trip_per_task(task, model, frame, backend, tmp_path):
    features = features_for(task, frame, backend)
    trained = train_model(features, model, SMALL[model], seed=1)
    model_format = get_model_spec(model).format
    assert model_format == (SKOPS if model == "random_forest" else XGBOOST_JSON)
    predictor, _ = _round_trip(model_format, trained.estimator, features.task, backend, tmp_path)
    scores = predictor(features.X["test"], None)
    assert scores.shape == trained.scores["test"].shape
    if model == "xgboost" and task == "multiclass":
        assert predictor.estimator.n_classes_ == 3            # load_model restored it from num_class
    if model == "xgboost" and task == "regression":
        assert type(predictor.estimator).__name__ == "XGBRegressor"
    # The CPU reads back the very estimator; on the GPU the forest comes back as cuML's twin.
    tolerance = {"rtol": 1e-6} if backend.name == "cpu" else {"rtol": 1e-4, "atol": 1e-5}
    np.testing.assert_allclose(scores, trained.scores["test"], **tolerance)


@pytest.mark.parametrize("model", ["random_forest", "xgboost", "logistic_regression"])
def test_a_model_file_of_another_task_than_model_json_says_is_refused(model, frame, tmp_path):
    """A file swapped for one of another task (or a model.json edited) fails at load, naming both."""
    backend = get_backend("cpu")
    task = "multiclass" if model == "logistic_regression" else "regression"
    features = features_for(task, frame, backend)
    trained = train_model(features, model, SMALL.get(model, {}), seed=1)
    model_format = get_model_spec(model).format
    _, meta = _round_trip(model_format, trained.estimator, features.task, backend, tmp_path)
    meta["task"] = BINARY.to_dict()
    with pytest.raises(DataError, match="task is binary"):
        model_format.load(tmp_path, meta, backend=backend)


# ------------------------------------------------------------------ partitioned data per task
@pytest.mark.slow
@pytest.mark.parametrize("task", ["multiclass", "regression"])
def test_partitioned_xgboost_trains_per_task_in_memory_and_from_parquet(task, frame, cluster_client, tmp_path):
    """xgboost.dask (held in the workers' memory) and external memory (each rank streams its
    Parquet files) train the task's objective and score in its shape; both see the same rows."""
    import dask.dataframe as dd

    data = task_data(task, dd.from_pandas(frame, npartitions=4), valid=0.15)
    ops = [Standardize(columns=["a", "b", "c"])]
    held = build_features(data, ops)
    streamed = build_features(data, ops, output_dir=tmp_path)
    y_test = np.asarray(held.y["test"].compute())
    by_path = {}
    for name, features, external in (("held", held, False), ("streamed", streamed, True)):
        assert features.task.kind == task
        trained = train_model(features, "xgboost", SMALL["xgboost"], seed=1, external_memory=external)
        assert type(trained.estimator).__name__ == ("DaskXGBRegressor" if task == "regression" else "DaskXGBClassifier")
        assert (trained.external_memory is not None) == external
        by_path[name] = trained.scores["test"]
        assert_task_scores(features.task, by_path[name], y_test)
    np.testing.assert_allclose(by_path["held"], by_path["streamed"], atol=0.05)


def test_external_memory_ranks_train_the_tasks_objective():
    """The ranks call xgboost.train themselves: the objective must be the task's, with one
    output per class of the task (not per class a rank's files hold)."""
    from xgboost.dask import DaskXGBClassifier, DaskXGBRegressor

    from pipeline.distributed.xgboost_external import booster_params

    task = Task("multiclass", classes=("basic", "plus", "pro"))
    params, rounds, _ = booster_params(DaskXGBClassifier(n_estimators=7), task)
    assert (params["objective"], params["num_class"], rounds) == ("multi:softprob", 3, 7)
    assert booster_params(DaskXGBClassifier(objective="multi:softmax"), task)[0]["objective"] == "multi:softprob"
    assert booster_params(DaskXGBClassifier(), BINARY)[0]["objective"] == "binary:logistic"
    assert "num_class" not in booster_params(DaskXGBClassifier(), BINARY)[0]
    assert booster_params(DaskXGBRegressor(), REGRESSION)[0]["objective"] == "reg:squarederror"
    chosen = booster_params(DaskXGBRegressor(objective="reg:absoluteerror"), REGRESSION)[0]
    assert chosen["objective"] == "reg:absoluteerror"


# ------------------------------------------------------------------ make check-gpu covers every task
def test_the_gpu_api_check_covers_every_tasks_estimator_with_its_scoring_method(capsys):
    """Item 5 of scripts/check_gpu_api.py checks each estimator class of each task (here the
    CPU half, which needs no RAPIDS): constructed with parameters valid for the task, and the
    method scoring calls (predict_proba, or predict for regression) binds."""
    with script_module("check_gpu_api") as check:
        report = check.Report()
        check.check_models(report, devices=("cpu",))
    out = capsys.readouterr().out
    assert report.failed == [], report.failed
    for task in TARGETS:
        method = "predict" if task == "regression" else "predict_proba"
        for model in models_for(task):
            path = re.escape(get_model_spec(model).class_path("cpu", task=task).replace(":", "."))
            assert re.search(rf"OK +{model} \[cpu, [a-z/]*{task}[a-z/]*\] {path}\.{method}\(<X>\)", out), (model, task)
            assert re.search(rf"OK +{model} \[cpu, [a-z/]*{task}[a-z/]*\] {path} constructed", out), (model, task)
    assert "RandomForestRegressor(n_jobs=-1, random_state=42, n_estimators=300, min_samples_leaf=5, " \
           "max_features=0.5, max_depth=12, criterion='squared_error') binds" in out
