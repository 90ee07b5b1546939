"""What the boosters share: an objective checked against the task (the family it belongs to
against what the task needs), and the task rules of every gradient-boosted entry."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

# What each family of objective gives, for the messages.
FAMILY_GIVES = {"binary": "one class's probability", "multiclass": "each class's probability", "value": "a value",
               "scores": "class scores that are not probabilities (the metrics, the threshold and a blend read "
                         "probabilities)"}


def objective_problems(params: Mapping[str, Any], task: str, key: str, family_of: Callable[[str], str]) -> list[str]:
    """An objective (or loss function) in ``params[key]`` that cannot give ``task``'s scores: a
    regression objective for classes, a classifier's for a regression, a multiclass one for a
    binary task, a binary one for a multiclass task (XGBoost replaced it with its own without a
    word while the run record kept it; LightGBM and CatBoost failed after the stages before).
    Caught here, such a run would fail late, or train and leave a model that ``predict``
    refuses."""
    value = params.get(key)
    if not isinstance(value, str) or not value:
        return []
    family = family_of(value)
    fits = family != "scores" and {"regression": family == "value", "binary": family == "binary",
                                   "multiclass": family == "multiclass"}.get(task, True)
    if fits:
        return []
    return [f"{key} {value!r} gives {FAMILY_GIVES[family]}, and the split's task is {task}: remove {key} (the "
            "library then chooses the task's own) or give one for the task"]


def gbdt_task_rules(params: Mapping[str, Any], task: str) -> list[str]:
    """Class weights and positive-class weights given to a task that has none to weigh."""
    problems = []
    for key in ("scale_pos_weight", "is_unbalance"):
        if key in params and task != "binary":
            problems.append(f"{key} weighs a binary task's positive class; a {task} task ignores it: remove it")
    for key in ("class_weight", "class_weights", "auto_class_weights"):
        if key in params and task == "regression":
            problems.append(f"{key} applies to classification; a regression has no classes to weigh: remove it")
    return problems


