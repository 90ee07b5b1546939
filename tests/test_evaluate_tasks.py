"""``evaluate`` per task: the task's metrics, ranking in each metric's direction, ``rank_by``
checked against every metric at config time and against the task's at run time, the
multiclass confusion matrix and per-class table, cross-validation results, one task per run."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from sklearn import metrics as skm

from pipeline.backends import get_backend
from pipeline.config import load_config
from pipeline.errors import ConfigError, DataError
from pipeline.featuresets import InMemoryFeatures
from pipeline.metrics import metric_names
from pipeline.stages.base import StageContext
from pipeline.stages.evaluate import EvaluateSpec, evaluate_models, run_evaluate
from pipeline.stages.train import TrainedModel
from pipeline.tasks import BINARY, REGRESSION, Task

CONTRACT = Task("multiclass", classes=("Month-to-month", "One year", "Two year"))


def features(task: Task, labels: np.ndarray) -> InMemoryFeatures:
    n = len(labels)
    return InMemoryFeatures(X={"test": np.zeros((n, 1), dtype="float32")}, y={"test": labels}, ids={},
                            feature_names=["x"], workflow=None, target="y", id_column=None,
                            backend=get_backend("cpu"), task=task)


def model(name: str, task: Task, labels: np.ndarray, scores: np.ndarray, cv: dict | None = None) -> TrainedModel:
    return TrainedModel(name=name, model="ridge", estimator=None, features=features(task, labels),
                        scores={"test": scores}, params={}, cv=cv)


@pytest.fixture
def regression_models() -> list[TrainedModel]:
    rng = np.random.default_rng(0)
    y = (rng.normal(size=300) * 10 + 70).astype("float32")
    return [model("close", REGRESSION, y, y + rng.normal(size=300)),
            model("far", REGRESSION, y, y + rng.normal(size=300) * 8)]


@pytest.fixture
def multiclass_models() -> list[TrainedModel]:
    rng = np.random.default_rng(1)
    y = rng.integers(0, 3, 400).astype("int32")

    def proba(strength: float) -> np.ndarray:
        logits = rng.normal(size=(400, 3))
        logits[np.arange(400), y] += strength
        p = np.exp(logits)
        return p / p.sum(axis=1, keepdims=True)

    return [model("weak", CONTRACT, y, proba(0.2)), model("strong", CONTRACT, y, proba(3.0))]


def test_regression_ranks_by_rmse_lowest_first(regression_models):
    evaluation = evaluate_models(regression_models)
    assert evaluation.rank_by == "rmse" and evaluation.best == "close"
    assert set(evaluation.metrics["close"]) == set(metric_names("regression"))
    assert evaluation.to_dict()["task"] == {"kind": "regression"}
    assert evaluate_models(regression_models, rank_by="r2").best == "close"       # higher is better
    assert evaluate_models(regression_models[::-1], rank_by="mae").best == "close"


def test_multiclass_ranks_by_log_loss_and_reports_the_confusion_matrix(multiclass_models):
    evaluation = evaluate_models(multiclass_models)
    assert evaluation.rank_by == "log_loss" and evaluation.best == "strong"
    assert evaluate_models(multiclass_models, rank_by="f1_macro").best == "strong"
    weak = multiclass_models[0]
    y, p = weak.features.labels("test"), weak.scores["test"]
    data = evaluation.to_dict()
    assert data["confusion"]["weak"]["labels"] == list(CONTRACT.classes)
    assert data["confusion"]["weak"]["matrix"] == skm.confusion_matrix(y, p.argmax(axis=1)).tolist()
    assert data["per_class"]["weak"]["labels"] == list(CONTRACT.classes)
    assert data["per_class"]["weak"]["recall"] == pytest.approx(
        skm.recall_score(y, p.argmax(axis=1), average=None).tolist())
    assert all(isinstance(v, float) for v in data["models"]["weak"].values())     # numbers only
    assert "confusion" not in evaluation.record() and "per_class" not in evaluation.record()
    json.dumps(data)                                                              # JSON-safe


def test_a_nan_metric_never_wins(regression_models):
    regression_models[0].scores["test"][:] = np.nan
    assert evaluate_models(regression_models).best == "far"


def test_models_of_different_tasks_are_refused_by_name(regression_models, multiclass_models):
    with pytest.raises(DataError, match="'close': regression.*'strong': multiclass"):
        evaluate_models([regression_models[0], multiclass_models[1]])


def test_another_tasks_metric_is_a_config_error_naming_the_tasks_metrics(regression_models):
    with pytest.raises(ConfigError, match="'roc_auc' does not apply to a regression task.*rmse, mae, r2, mape"):
        evaluate_models(regression_models, rank_by="roc_auc")


def test_run_evaluate_names_the_stage_key_and_writes_metrics_json(regression_models, multiclass_models, tmp_path):
    ctx = StageContext(backend=get_backend("cpu"), seed=0, stage="ev", artifacts_dir=tmp_path)
    spec = EvaluateSpec(kind="evaluate", inputs=["a", "b"], rank_by="pr_auc")
    with pytest.raises(ConfigError) as info:
        run_evaluate(spec, ctx, {m.name: m for m in regression_models})
    assert info.value.issues[0].path == "stages.ev.rank_by"
    spec = EvaluateSpec(kind="evaluate", inputs=["a", "b"])
    evaluation = run_evaluate(spec, ctx, {m.name: m for m in multiclass_models})
    written = json.loads((tmp_path / "metrics.json").read_text())
    assert written["best"] == "strong" and written["rank_by"] == "log_loss" and "confusion" in written
    assert ctx.run_record["metrics"] == evaluation.record() and ctx.facts["best"] == "strong"


def test_unknown_rank_by_is_a_config_error_listing_every_metric():
    text = """\
name: t
stages:
  raw: {kind: load, path: data.csv}
  split: {kind: split, inputs: [raw], target: y}
  feats: {kind: features, inputs: [split]}
  m: {kind: train, inputs: [feats], model: xgboost}
  ev: {kind: evaluate, inputs: [m], rank_by: rsme}
"""
    with pytest.raises(ConfigError) as info:
        load_config(text=text)
    (issue,) = [i for i in info.value.issues if i.path.endswith("rank_by")]
    assert "unknown metric 'rsme'" in issue.message and "did you mean 'rmse'" in issue.message
    for name in ("roc_auc", "f1_macro", "roc_auc_ovr_macro", "mape"):
        assert name in issue.message
    ok = load_config(text=text.replace("rsme", "rmse"))            # any task's metric passes here
    assert ok.stages["ev"].rank_by == "rmse"


def test_binary_keeps_its_keys_and_default():
    rng = np.random.default_rng(2)
    y = rng.integers(0, 2, 200).astype("int32")
    models = [model("a", BINARY, y, rng.random(200)),
              model("b", BINARY, y, np.clip(y * 0.6 + rng.random(200) * 0.4, 0, 1))]
    evaluation = evaluate_models(models)
    assert evaluation.rank_by == "roc_auc" and evaluation.best == "b"
    assert set(evaluation.to_dict()) == {"split", "threshold", "rank_by", "best", "models"}
    assert evaluation.record() == evaluation.to_dict()
    assert evaluate_models(models, rank_by="log_loss").best == "b"


def test_cross_validation_results_travel_with_the_evaluation(regression_models):
    cv = {"mean": {"rmse": 1.1, "r2": 0.9}, "std": {"rmse": 0.1, "r2": 0.01},
          "folds": [{"rmse": 1.0}, {"rmse": 1.2}], "oof": np.zeros(3)}
    regression_models[0].cv = cv
    data = evaluate_models(regression_models).to_dict()
    assert data["cv"] == {"close": {"mean": cv["mean"], "std": cv["std"], "folds": cv["folds"]}}
    assert math.isfinite(data["models"]["close"]["rmse"])


def test_the_run_summary_table_shows_the_tasks_metrics(regression_models, multiclass_models, capsys):
    from pipeline.cli import _print_metrics
    from pipeline.commands.runs import _print_metrics as print_run_metrics

    for models, names in ((regression_models, metric_names("regression")),
                          (multiclass_models, metric_names("multiclass"))):
        record = evaluate_models(models).record()
        for show in (_print_metrics, print_run_metrics):
            show(record)
            out = capsys.readouterr().out
            assert all(name in out for name in names) and "roc_auc " not in out and "threshold" not in out
            assert f"* best by {record['rank_by']}: {record['best']}" in out
