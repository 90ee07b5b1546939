"""CatBoost (the same estimator on both devices; ``task_type='GPU'`` on the GPU), reading categorical
columns as codes with ordered target statistics of its own."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeline.features.auto_ops import CODES
from pipeline.models.catalogue.booster_objectives import gbdt_task_rules, objective_problems
from pipeline.models.explainers import catboost_importance
from pipeline.models.gbdt_formats import CATBOOST_CBM, catboost_family
from pipeline.models.roles import PortfolioMember
from pipeline.models.model_spec import EstimatorClasses, FitInputs, ModelSpec, same
from pipeline.models.param_bounds import COUNT, FRACTION, NON_NEGATIVE, POSITIVE, SIZE, between


def catboost_fit_arguments(inputs: FitInputs) -> dict[str, Any]:
    """The valid split as CatBoost's ``eval_set`` (its ``early_stopping_rounds`` acts on it and
    the model keeps the best iteration), and the categorical columns as ``cat_features``."""
    kwargs: dict[str, Any] = {}
    if inputs.eval_set is not None:
        kwargs["eval_set"] = inputs.eval_set
    if inputs.categorical:
        kwargs["cat_features"] = list(inputs.categorical)
    return kwargs


def _catboost_task_rules(params: Mapping[str, Any], task: str) -> list[str]:
    return objective_problems(params, task, "loss_function", catboost_family) + gbdt_task_rules(params, task)


# CatBoost's own names (the same estimator on both devices; task_type="GPU" on the GPU).
_CATBOOST_PARAMS = same(
    "iterations", "learning_rate", "depth", "l2_leaf_reg", "border_count", "random_strength",
    "bagging_temperature", "bootstrap_type", "subsample", "rsm", "grow_policy", "min_data_in_leaf",
    "max_leaves", "one_hot_max_size", "max_ctr_complexity", "leaf_estimation_iterations", "loss_function",
    "eval_metric", "auto_class_weights", "class_weights", "scale_pos_weight", "early_stopping_rounds",
    "use_best_model", "random_seed", "thread_count", "nan_mode", "boosting_type", "verbose",
)
# thread_count is left at CatBoost's default, -1: every core (CatBoost drops an explicit -1).
_CATBOOST_DEFAULTS = {"verbose": False, "allow_writing_files": False}

# CatBoost fits an inverted model for a negative learning rate (ROC AUC 0.08) and a constant
# one for depth 0, and refuses the rest as a C++ check naming its source file.
_CATBOOST_BOUNDS = {
    "iterations": COUNT, "early_stopping_rounds": COUNT, "learning_rate": POSITIVE, "depth": between(1, 16),
    "l2_leaf_reg": NON_NEGATIVE, "border_count": between(1, 65535), "random_strength": NON_NEGATIVE,
    "bagging_temperature": NON_NEGATIVE, "subsample": FRACTION, "rsm": FRACTION, "min_data_in_leaf": COUNT,
    "max_leaves": between(2, 64), "one_hot_max_size": SIZE, "max_ctr_complexity": SIZE,
    "leaf_estimation_iterations": COUNT, "scale_pos_weight": POSITIVE,
}


CATBOOST = ModelSpec(
    name="catboost",
    cpu_class="pipeline.models.catboost_estimators:CatBoostClassifier",
    gpu_class="pipeline.models.catboost_estimators:CatBoostClassifier",
    params=_CATBOOST_PARAMS,
    cpu_defaults=_CATBOOST_DEFAULTS,
    gpu_defaults={**_CATBOOST_DEFAULTS, "task_type": "GPU"},
    seed_param="random_seed",
    supports_eval_set=True,
    fit_arguments=catboost_fit_arguments,
    description="gradient-boosted oblivious trees (CatBoost); categorical features natively; "
                "task_type='GPU' on GPU",
    format=CATBOOST_CBM,
    tasks=("binary", "multiclass", "regression"),
    regression=EstimatorClasses(
        cpu="pipeline.models.catboost_estimators:CatBoostRegressor",
        gpu="pipeline.models.catboost_estimators:CatBoostRegressor",
    ),
    task_param_rules=_catboost_task_rules,
    bounds=_CATBOOST_BOUNDS,
    explain=catboost_importance,
    extra="catboost",
    threads_param="thread_count",
    portfolio=(PortfolioMember("catboost", {"*": {"iterations": 2000, "learning_rate": 0.08, "depth": 6,
                                                 "early_stopping_rounds": 50}},
                               cost=8.0, device_cost=7.4, per_class=True, reads=CODES, rank=2),),
)
