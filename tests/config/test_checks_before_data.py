"""Checks that ran only after training now fail ``pipeline validate`` (exit 2, the key path and
its line): an auto stage's id that is not a column, a member listed twice or one that cannot
serve the task, a stack's meta-model params its default model does not have, and a boosting
objective that contradicts the split's task (a run that used to succeed and leave a model
``predict`` refused)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.config import load_config
from pipeline.core.errors import ConfigError
from tests.conftest import TELCO
from tests.support.cli import run_cli

HEAD = f"""\
name: checks
device: cpu
stages:
  raw:
    kind: load
    path: {TELCO}
    na_values: [" "]
  split:
    kind: split
    inputs: [raw]
    target: Churn
    task: binary
    positive: "Yes"
"""
FEATURES = """\
  features:
    kind: features
    inputs: [split]
    id: customerID
    ops:
      - fill_missing: {columns: {type: numeric}}
      - categorify: {columns: {type: categorical}}
"""


def issues(tmp_path: Path, text: str) -> list:
    (tmp_path / "c.yaml").write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_config(tmp_path / "c.yaml", check_data=True)
    return caught.value.issues


def test_an_auto_id_that_is_not_a_column_names_the_key(tmp_path):
    (issue,) = issues(tmp_path, HEAD + "  auto:\n    kind: auto\n    inputs: [split]\n    id: customerId\n")
    assert issue.path == "stages.auto.id" and "customerId" in issue.message and "customerID" in issue.message
    assert issue.line == 17


def test_an_auto_member_listed_twice_is_refused(tmp_path):
    (issue,) = issues(tmp_path, HEAD + "  auto:\n    kind: auto\n    inputs: [split]\n"
                                      "    models: [lightgbm, linear, lightgbm]\n")
    assert issue.path == "stages.auto.models" and "names lightgbm more than once" in issue.message


def test_an_auto_member_that_cannot_serve_the_task_is_named(monkeypatch):
    import dataclasses

    from pipeline.stages import auto

    only_binary = [dataclasses.replace(m, tasks=("binary",)) if m.label == "linear" else m for m in auto.portfolio()]
    monkeypatch.setattr(auto, "portfolio", lambda: only_binary)
    spec = auto.AutoSpec(kind="auto", inputs=["split"], models=["linear", "lightgbm"])
    assert spec.task_problems("regression") == [(("models", 0), "linear cannot serve a regression task")]
    alone = auto.AutoSpec(kind="auto", inputs=["split"], models=["linear"])
    assert alone.task_problems("regression")[0][1].endswith("(and no member listed can)")
    assert spec.task_problems("binary") == []


STACK = FEATURES + """\
  a:
    kind: train
    inputs: [features]
    model: logistic_regression
    bag: 3
  b:
    kind: train
    inputs: [features]
    model: random_forest
    bag: 3
    params: {n_estimators: 10}
  stack:
    kind: stack
    inputs: [a, b]
"""


def test_stack_params_that_its_default_meta_model_lacks_fail_before_training(tmp_path):
    (issue,) = issues(tmp_path, HEAD + STACK + "    params: {alpha: 2.0}\n")
    assert issue.path == "stages.stack.params.alpha"
    assert "unknown parameter 'alpha' for model 'logistic_regression'" in issue.message
    assert "the binary task's default meta-model" in issue.message
    (typo,) = issues(tmp_path, HEAD + STACK + "    params: {Cx: 2.0}\n")
    assert typo.path == "stages.stack.params.Cx" and "did you mean 'C'" in typo.message


@pytest.mark.parametrize("model, params, words", [
    ("lightgbm", "{objective: regression}", "objective 'regression' gives a value, and the split's task is binary"),
    ("xgboost", "{objective: 'multi:softprob'}", "objective 'multi:softprob' gives each class's probability"),
    ("catboost", "{loss_function: RMSE}", "loss_function 'RMSE' gives a value"),
    # Class scores that are no probabilities: raw margins, hard 0/1 (a run failed after training, exit 3).
    ("xgboost", "{objective: 'binary:logitraw'}", "objective 'binary:logitraw' gives class scores that are not "
                                                 "probabilities"),
    ("xgboost", "{objective: 'binary:hinge'}", "objective 'binary:hinge' gives class scores that are not"),
])
def test_an_objective_that_contradicts_the_task_fails_validate(tmp_path, model, params, words):
    _objective_fails_validate(tmp_path, HEAD, model, params, words)


@pytest.mark.parametrize("model, params, words", [
    ("xgboost", "{objective: 'binary:logistic'}", "objective 'binary:logistic' gives one class's probability, and "
                                                  "the split's task is multiclass"),
    ("lightgbm", "{objective: binary}", "objective 'binary' gives one class's probability"),
    ("catboost", "{loss_function: Logloss}", "loss_function 'Logloss' gives one class's probability"),
])
def test_a_binary_objective_on_a_multiclass_task_fails_validate(tmp_path, model, params, words):
    """XGBoost replaced it with multi:softprob without a word (the run record kept the binary
    one, exit 0); LightGBM and CatBoost failed after the stages before it (exit 4)."""
    multiclass = HEAD.replace("target: Churn\n    task: binary\n    positive: \"Yes\"\n",
                              "target: Contract\n    task: multiclass\n")
    assert "target: Contract" in multiclass
    _objective_fails_validate(tmp_path, multiclass, model, params, words)


def _objective_fails_validate(tmp_path, head, model, params, words):
    text = head + FEATURES + f"  model:\n    kind: train\n    inputs: [features]\n    model: {model}\n" \
                             f"    params: {params}\n"
    (tmp_path / "c.yaml").write_text(text)
    proc = run_cli("validate", "c.yaml", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "stages.model.params" in proc.stderr and words in proc.stderr and "Traceback" not in proc.stderr


EVALUATE = FEATURES + """\
  model:
    kind: train
    inputs: [features]
    model: logistic_regression
  evaluate:
    kind: evaluate
    inputs: [model]
  export:
    kind: export
    inputs: [model]
"""


def test_a_metric_of_another_task_is_refused_at_its_key(tmp_path):
    (issue,) = issues(tmp_path, HEAD + EVALUATE + "  promote:\n    kind: promote\n    inputs: [split, evaluate, "
                                                  "export]\n    metric: rmse\n")
    assert issue.path == "stages.promote.metric"
    assert issue.message.startswith("'rmse' is not a metric of a binary task; its metrics are roc_auc")
    (ranked,) = issues(tmp_path, (HEAD + EVALUATE).replace("    inputs: [model]\n  export",
                                                           "    inputs: [model]\n    rank_by: r2\n  export"))
    assert ranked.path == "stages.evaluate.rank_by" and "'r2' is not a metric of a binary task" in ranked.message


def test_a_promote_holdout_that_is_missing_fails_validate_naming_it(tmp_path):
    promote = "  promote:\n    kind: promote\n    inputs: [split, evaluate, export]\n    holdout: {}\n"
    (tmp_path / "c.yaml").write_text(HEAD + EVALUATE + promote.format("holdout.csv"))
    proc = run_cli("validate", "c.yaml", cwd=tmp_path)
    assert proc.returncode == 3 and "holdout.csv" in proc.stderr and "Traceback" not in proc.stderr
    # With the split among the inputs its target is known, and the holdout's header must have it.
    (tmp_path / "holdout.csv").write_text("customerID,tenure,churn\nx,1,Yes\n")
    (issue,) = issues(tmp_path, HEAD + EVALUATE + promote.format(tmp_path / "holdout.csv"))
    assert issue.path == "stages.promote.holdout" and "'Churn'" in issue.message and "'churn'" in issue.message


def test_one_vs_all_objectives_give_no_task_its_scores():
    """A one-vs-all multiclass objective's rows do not add up to 1: CatBoost's MultiClassOneVsAll
    ranked first by log loss with an accuracy of 0.39 (its rows added up to about 10)."""
    from pipeline.core.problems import Task
    from pipeline.models import get_model_spec
    from pipeline.models.formats import objective_serves
    from pipeline.models.gbdt_formats import catboost_family, lightgbm_family

    assert lightgbm_family("multiclassova") == catboost_family("MultiClassOneVsAll") == "scores"
    assert lightgbm_family("multiclass") == catboost_family("MultiClass") == "multiclass"
    assert not objective_serves(Task("multiclass", classes=("a", "b", "c")), "scores", 3)
    (problem,) = get_model_spec("catboost").task_problems("multiclass", {"loss_function": "MultiClassOneVsAll"})
    assert "gives class scores that are not probabilities" in problem
