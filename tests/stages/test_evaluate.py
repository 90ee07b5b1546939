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
from pipeline.core.errors import ConfigError, DataError, ExitCode
from pipeline.featuresets import InMemoryFeatures
from pipeline.metrics import metric_names
from pipeline.stages.spec import StageContext
from pipeline.stages.evaluate import EvaluateSpec, evaluate_models, run_evaluate
from pipeline.stages.train import TrainedModel
from pipeline.core.problems import BINARY, REGRESSION, Task

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


def test_two_models_of_one_name_or_none_are_refused(regression_models):
    """Two of one name: the second replaced the first in every table, silently, and could rank
    as best; no model at all was a bare StopIteration."""
    import dataclasses

    from pipeline.core.errors import UsageError

    twin = dataclasses.replace(regression_models[1], name="close")
    with pytest.raises(DataError, match=r"evaluate: models must have distinct names \(close appear twice\)"):
        evaluate_models([regression_models[0], twin])
    with pytest.raises(UsageError, match="needs at least one trained model"):
        evaluate_models([])


def test_a_metric_that_is_undefined_prints_a_dash_in_the_runs_table(capsys):
    """metrics.json holds null for an undefined metric; a cached rerun printed its table from
    it and failed formatting None (exit 1) where the first run had printed nan."""
    from pipeline.cli.app import _print_metrics

    _print_metrics({"split": "test", "rank_by": "rmse", "best": "ridge", "task": "regression",
                    "models": {"ridge": {"rmse": None, "mae": float("nan"), "r2": 0.5}}})
    out = capsys.readouterr().out
    assert "—" in out and "0.5000" in out and "nan" not in out


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
    # These models hold scores and no estimator: their importances are skipped, saying why.
    importance = json.loads((tmp_path / "importance.json").read_text())
    assert importance["models"] == {} and set(importance["skipped"]) == {m.name for m in multiclass_models}
    assert all("could not score other rows (AttributeError" in why for why in importance["skipped"].values())


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
    written = evaluation.to_dict()
    assert {"split", "threshold", "rank_by", "best", "models"} <= set(written)      # what readers had
    assert set(written) - {"split", "threshold", "rank_by", "best", "models"} == {"confusion", "splits"}
    assert evaluation.record() == {key: value for key, value in written.items() if key != "confusion"}
    assert evaluate_models(models, rank_by="log_loss").best == "b"


def test_cross_validation_results_travel_with_the_evaluation(regression_models):
    cv = {"mean": {"rmse": 1.1, "r2": 0.9}, "std": {"rmse": 0.1, "r2": 0.01},
          "folds": [{"rmse": 1.0}, {"rmse": 1.2}], "oof": np.zeros(3)}
    regression_models[0].cv = cv
    data = evaluate_models(regression_models).to_dict()
    assert data["cv"] == {"close": {"mean": cv["mean"], "std": cv["std"], "folds": cv["folds"]}}
    assert math.isfinite(data["models"]["close"]["rmse"])


def test_the_run_summary_table_shows_the_tasks_metrics(regression_models, multiclass_models, capsys):
    from pipeline.cli.app import _print_metrics
    from pipeline.cli.runs_command import _print_metrics as print_run_metrics

    for models, names in ((regression_models, metric_names("regression")),
                          (multiclass_models, metric_names("multiclass"))):
        record = evaluate_models(models).record()
        for show in (_print_metrics, print_run_metrics):
            show(record)
            out = capsys.readouterr().out
            assert all(name in out for name in names) and "roc_auc " not in out and "threshold" not in out
            assert f"* best by {record['rank_by']}: {record['best']}" in out


def _binary_model(name: str, rng: np.random.Generator, rows: dict[str, int], skill: float) -> TrainedModel:
    """A binary model with train/valid/test labels and scores; higher ``skill`` separates better."""
    y = {split: rng.integers(0, 2, n).astype("int32") for split, n in rows.items()}
    scores = {split: np.clip(labels * skill + rng.random(len(labels)) * (1 - skill), 0, 1)
              for split, labels in y.items()}
    feats = InMemoryFeatures(X={s: np.zeros((n, 1), dtype="float32") for s, n in rows.items()}, y=y, ids={},
                             feature_names=["x"], workflow=None, target="y", id_column=None,
                             backend=get_backend("cpu"), task=BINARY)
    return TrainedModel(name=name, model="logreg", estimator=None, features=feats, scores=scores, params={})


def test_every_split_is_evaluated_side_by_side_with_the_ranked_one():
    rng = np.random.default_rng(3)
    models = [_binary_model("a", rng, {"train": 300, "valid": 80, "test": 120}, 0.3),
              _binary_model("b", rng, {"train": 300, "valid": 80, "test": 120}, 0.6)]
    evaluation = evaluate_models(models)
    assert list(evaluation.splits) == ["train", "valid", "test"]
    assert evaluation.splits["test"] == evaluation.metrics
    for split in ("train", "valid"):
        for m in models:
            labels, scores = m.features.labels(split), m.scores[split]
            assert evaluation.splits[split][m.name]["roc_auc"] == pytest.approx(skm.roc_auc_score(labels, scores))
    matrix = evaluation.confusion["b"]["matrix"]
    assert matrix == skm.confusion_matrix(models[1].features.labels("test"),
                                          (models[1].scores["test"] >= 0.5).astype(int), labels=[0, 1]).tolist()
    assert set(evaluation.curves) == {"a", "b"} and evaluation.curves["a"]["rows"] == 120
    only = evaluate_models(models, splits=["train"])
    assert list(only.splits) == ["train", "test"]                  # the ranked split always
    assert "valid" not in only.splits


def test_asking_for_a_split_a_model_lacks_names_model_and_split(regression_models):
    with pytest.raises(DataError, match="model 'close' has no 'train' split"):
        evaluate_models(regression_models, splits=["train"])


def test_run_evaluate_writes_the_curves_it_computed(tmp_path):
    rng = np.random.default_rng(4)
    models = {m.name: m for m in (_binary_model("a", rng, {"train": 50, "test": 60}, 0.5),)}
    ctx = StageContext(backend=get_backend("cpu"), seed=0, stage="ev", artifacts_dir=tmp_path)
    evaluation = run_evaluate(EvaluateSpec(kind="evaluate", inputs=["a"]), ctx, models)
    curves = json.loads((tmp_path / "curves.json").read_text())
    assert curves["split"] == "test" and curves["task"] == {"kind": "binary"}
    assert curves["models"]["a"] == json.loads(json.dumps(evaluation.curves["a"]))
    assert ctx.run_record["metrics"]["splits"]["train"]["a"] == evaluation.splits["train"]["a"]


class CountingLogistic:
    """A fitted logistic regression that records the rows of every call to score it."""

    def __init__(self, x: np.ndarray, y: np.ndarray) -> None:
        from sklearn.linear_model import LogisticRegression

        self.inner = LogisticRegression().fit(x, y)
        self.classes_ = self.inner.classes_
        self.scored: list[int] = []

    def predict_proba(self, x: np.ndarray) -> np.ndarray:
        self.scored.append(len(x))
        return self.inner.predict_proba(x)


def _fitted_binary(rows: dict[str, int]) -> tuple[TrainedModel, CountingLogistic]:
    from pipeline.stages.training.trained import SplitScores

    rng = np.random.default_rng(11)
    X = {s: rng.normal(size=(n, 3)).astype("float32") for s, n in rows.items()}
    y = {s: (x[:, 0] + rng.normal(size=len(x)) > 0).astype("int32") for s, x in X.items()}
    feats = InMemoryFeatures(X=X, y=y, ids={}, feature_names=["a", "b", "c"], workflow=None, target="y",
                             id_column=None, backend=get_backend("cpu"), task=BINARY)
    estimator = CountingLogistic(X["train"], y["train"])
    return TrainedModel(name="m", model="logistic_regression", estimator=estimator, features=feats,
                        scores=SplitScores.of_estimator(estimator, feats), params={}), estimator


def test_the_training_split_past_train_rows_is_scored_on_every_kth_row_and_says_so():
    model, estimator = _fitted_binary({"train": 1000, "valid": 400, "test": 500})
    evaluation = evaluate_models([model], train_rows=300)
    # ceil(1000 / 300) = 4: rows 0, 4, 8, ... of the training split, 250 of them
    assert sorted(estimator.scored) == [250, 400, 500]
    x, labels = model.features.X["train"][::4], model.features.labels("train")[::4]
    expected = skm.roc_auc_score(labels, estimator.inner.predict_proba(x)[:, 1])
    assert evaluation.splits["train"]["m"]["roc_auc"] == pytest.approx(expected, abs=1e-12)
    assert evaluation.sampled == {"train": {"m": {"rows": 250, "of": 1000}}}
    assert evaluation.to_dict()["sampled"] == evaluation.sampled
    assert "sampled" in evaluation.record()
    # valid and test stay whole, whatever their size
    whole = skm.roc_auc_score(model.features.labels("valid"), model.scores["valid"])
    assert evaluation.splits["valid"]["m"]["roc_auc"] == pytest.approx(whole, abs=1e-12)


def test_train_rows_none_or_a_small_split_or_ranking_on_train_scores_every_row():
    for kwargs in ({"train_rows": None}, {"train_rows": 1000}, {"train_rows": 300, "split": "train"}):
        model, estimator = _fitted_binary({"train": 1000, "valid": 400, "test": 500})
        evaluation = evaluate_models([model], **kwargs)
        assert 1000 in estimator.scored, kwargs
        assert evaluation.sampled == {} and "sampled" not in evaluation.to_dict(), kwargs
        whole = skm.roc_auc_score(model.features.labels("train"), model.scores["train"])
        assert evaluation.splits["train"]["m"]["roc_auc"] == pytest.approx(whole, abs=1e-12)


def test_train_rows_is_validated_at_its_key():
    with pytest.raises(Exception, match="train_rows"):
        EvaluateSpec(kind="evaluate", inputs=["m"], train_rows=0)
    assert EvaluateSpec(kind="evaluate", inputs=["m"], train_rows=None).train_rows is None


# ---------------------------------------------------------------- threshold: binary only
def evaluate_config(data: str, *, split: str = "", evaluate: str = "", model: str = "logistic_regression") -> str:
    return ("name: t\ndevice: cpu\nstages:\n"
            f"  raw: {{kind: load, path: {data}}}\n"
            f"  split: {{kind: split, inputs: [raw], target: y, test: 0.25{split}}}\n"
            "  feats: {kind: features, inputs: [split], ops: [{standardize: {columns: [a, b]}}]}\n"
            f"  m: {{kind: train, inputs: [feats], model: {model}}}\n"
            f"  ev: {{kind: evaluate, inputs: [m]{evaluate}}}\n")


def three_classes(path) -> None:
    """``a, b, y``: three classes the features separate in part."""
    import pandas as pd

    rng = np.random.default_rng(6)
    a, b = rng.normal(size=240), rng.normal(size=240)
    y = np.select([a + rng.normal(scale=0.5, size=240) > 0.5, b > 0], ["high", "mid"], "low")
    pd.DataFrame({"a": a.round(4), "b": b.round(4), "y": y}).to_csv(path, index=False)


@pytest.mark.parametrize("task", ["multiclass", "regression"])
def test_a_threshold_on_a_declared_non_binary_task_is_refused_at_validation_at_its_key(task):
    text = evaluate_config("data.csv", split=f", task: {task}", evaluate=", threshold: 0.3",
                           model="ridge" if task == "regression" else "logistic_regression")
    with pytest.raises(ConfigError) as info:
        load_config(text=text)
    (issue,) = info.value.issues
    assert issue.path == "stages.ev.threshold" and issue.line == 8
    assert "binary" in issue.message and task in issue.message and "leave threshold out" in issue.message
    if task == "multiclass":
        load_config(text=text.replace(f"task: {task}", "task: binary"))      # binary: the threshold applies
    load_config(text=text.replace(", threshold: 0.3", ""))                   # the default is no choice of yours


def test_a_threshold_on_an_inferred_non_binary_task_is_exit_2_at_its_key_and_the_rerun_reuses_the_training(tmp_path):
    from tests.support.cli import run_cli

    three_classes(tmp_path / "data.csv")
    (tmp_path / "t.yaml").write_text(evaluate_config("data.csv", evaluate=", threshold: 0.3"))
    load_config(text=evaluate_config(str(tmp_path / "data.csv"), evaluate=", threshold: 0.3"), check_data=True)
    proc = run_cli("run", "t.yaml", "--runs-dir", "runs", "-q", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr + proc.stdout
    assert "stages.ev.threshold (line 8)" in proc.stderr and "multiclass" in proc.stderr, proc.stderr
    (tmp_path / "t.yaml").write_text(evaluate_config("data.csv"))
    proc = run_cli("run", "t.yaml", "--runs-dir", "runs", "-q", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    manifest = json.loads((tmp_path / "runs" / "t" / "latest" / "manifest.json").read_text())
    assert manifest["stages"]["m"]["status"] == "cached" and manifest["stages"]["ev"]["status"] != "cached"


# ---------------------------------------------------------------- a split the models cannot have
def test_evaluating_the_valid_split_of_a_split_with_folds_is_refused_at_validation_saying_why(tmp_path):
    """With folds every non-test row is fitted and scored in turn: there is no valid split, and
    the run used to fail at evaluate (exit 3) after training every model."""
    three_classes(tmp_path / "data.csv")
    data = str(tmp_path / "data.csv")
    with pytest.raises(ConfigError) as info:
        load_config(text=evaluate_config(data, split=", folds: 3", evaluate=", split: valid"), check_data=True)
    (issue,) = info.value.issues
    assert issue.path == "stages.ev.split" and issue.line == 8
    assert "folds: 3" in issue.message and "every non-test row" in issue.message
    assert "split: test" in issue.message and "cv" in issue.message
    with pytest.raises(ConfigError) as info:
        load_config(text=evaluate_config(data, split=", folds: 3", evaluate=", splits: [train, valid]"),
                    check_data=True)
    (issue,) = info.value.issues
    assert issue.path == "stages.ev.splits[1]" and "every non-test row" in issue.message
    # Without folds and without valid rows (valid: 0, the default) there is no valid split either.
    with pytest.raises(ConfigError) as info:
        load_config(text=evaluate_config(data, evaluate=", split: valid"), check_data=True)
    (issue,) = info.value.issues
    assert issue.path == "stages.ev.split" and "valid: 0" in issue.message and "valid: > 0" in issue.message
    load_config(text=evaluate_config(data, split=", valid: 0.2", evaluate=", split: valid"), check_data=True)
    load_config(text=evaluate_config(data, split=", folds: 3", evaluate=", splits: [train, test]"), check_data=True)


def test_evaluating_or_exporting_the_test_split_of_a_split_without_one_is_refused_at_validation(tmp_path):
    """`test: 0` (a final fit on every row) with evaluate or export left at their default split
    trained every model, then failed at evaluate, or at export once evaluate scored valid."""
    three_classes(tmp_path / "data.csv")
    text = evaluate_config(str(tmp_path / "data.csv"), split=", valid: 0.2").replace("test: 0.25", "test: 0")
    exported = text + "  out: {kind: export, inputs: [m]}\n"
    with pytest.raises(ConfigError) as info:
        load_config(text=exported, check_data=True)
    evaluate, export = info.value.issues
    assert evaluate.path == "stages.ev.split" and "test: 0, so there are no test rows" in evaluate.message
    assert "evaluate split: valid" in evaluate.message
    assert export.path == "stages.out.split" and "test: 0, so it has no rows" in export.message
    assert "split: all" in export.message
    fixed = exported.replace("inputs: [m]}", "inputs: [m], split: valid}", 1).replace("[m]}\n", "[m], split: all}\n")
    load_config(text=fixed, check_data=True)
    # A run stops before the first stage, not after every model trained.
    from tests.support.cli import run_cli

    (tmp_path / "t.yaml").write_text(exported)
    proc = run_cli("run", "t.yaml", "--runs-dir", "runs", "-q", cwd=tmp_path)
    assert proc.returncode == ExitCode.CONFIG and "stages.ev.split" in proc.stderr
    assert not (tmp_path / "runs").exists()


def test_a_perfect_score_on_held_out_rows_is_named_as_a_likely_leak(tmp_path, caplog):
    """A leaking column gave ROC AUC 1.0000 for every model, exit 0, and nothing said so."""
    rng = np.random.default_rng(3)
    y = rng.integers(0, 2, 300).astype("int32")
    leaked = model("leaky", BINARY, y, np.clip(y + rng.normal(scale=0.01, size=300), 0, 1))
    honest = model("honest", BINARY, y, np.clip(0.5 * y + rng.uniform(0, 0.6, size=300), 0, 1))
    ctx = StageContext(backend=get_backend("cpu"), seed=0, stage="ev", artifacts_dir=tmp_path)
    spec = EvaluateSpec(kind="evaluate", inputs=["a", "b"], importance=False)
    with caplog.at_level("WARNING", logger="pipeline"):
        run_evaluate(spec, ctx, {"leaky": leaked, "honest": honest})
    (said,) = [r.getMessage() for r in caplog.records if "leaks" in r.getMessage()]
    assert "leaky scores roc_auc 1.0000 on the test split" in said
    caplog.clear()
    with caplog.at_level("WARNING", logger="pipeline"):
        run_evaluate(spec, ctx, {"honest": honest})
    assert not [r for r in caplog.records if "leaks" in r.getMessage()]


def test_only_a_binary_evaluation_records_a_threshold(regression_models, multiclass_models):
    """A regression's metrics.json and curves.json said threshold 0.5, which applies to nothing
    (and runs diff printed it as a setting)."""
    for models in (regression_models, multiclass_models):
        evaluation = evaluate_models(models)
        assert evaluation.to_dict()["threshold"] is None and evaluation.curves_dict()["threshold"] is None
