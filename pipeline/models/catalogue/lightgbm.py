"""LightGBM (the CPU wheel on both devices: on the GPU backend it trains on the CPU from a host copy)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeline.models.catalogue.booster_objectives import gbdt_task_rules, objective_problems
from pipeline.models.explainers import lightgbm_importance
from pipeline.models.gbdt_formats import LIGHTGBM_TEXT, lightgbm_family
from pipeline.models.roles import PortfolioMember
from pipeline.models.model_spec import EstimatorClasses, FitInputs, ModelSpec, same
from pipeline.models.param_bounds import COUNT, FRACTION, NON_NEGATIVE, POSITIVE, SIZE, at_least
from pipeline.models.steps import lightgbm_rounds


def lightgbm_fit_arguments(inputs: FitInputs) -> dict[str, Any]:
    """The valid split as LightGBM's evaluation set (early stopping is the estimator's, given
    ``early_stopping_rounds``), and the categorical columns by position."""
    kwargs: dict[str, Any] = {}
    if inputs.eval_set is not None:
        kwargs["eval_set"] = [inputs.eval_set]
    if inputs.categorical:
        kwargs["categorical_feature"] = list(inputs.categorical)
    return kwargs


def _lightgbm_task_rules(params: Mapping[str, Any], task: str) -> list[str]:
    return objective_problems(params, task, "objective", lightgbm_family) + gbdt_task_rules(params, task)


# LightGBM's scikit-learn names, the same on both devices (its wheel has no CUDA build: on the GPU
# backend it trains on the CPU from a host copy), and the LightGBM parameters users also write.
_LGBM_PARAMS = same(
    "n_estimators", "learning_rate", "num_leaves", "max_depth", "min_child_samples", "min_child_weight",
    "min_split_gain", "subsample", "subsample_freq", "subsample_for_bin", "colsample_bytree", "reg_alpha",
    "reg_lambda", "boosting_type", "objective", "class_weight", "random_state", "n_jobs",
    "early_stopping_rounds", "max_bin", "cat_smooth", "cat_l2", "max_cat_threshold", "min_data_per_group",
    "max_cat_to_onehot", "extra_trees", "path_smooth", "scale_pos_weight", "is_unbalance", "verbose",
)
# n_jobs=-1: a thread per CPU the process may use (LightGBM counts them as joblib does, within a
# container's share); its own default, None, takes physical cores only.
_LGBM_DEFAULTS = {"verbose": -1, "n_jobs": -1}

# LightGBM refuses these only as a C++ check naming its source file ("Check failed:
# (num_leaves) > (1) at .../config_auto.cpp"); max_depth takes any integer (<= 0: no limit).
_LGBM_BOUNDS = {
    "n_estimators": COUNT, "early_stopping_rounds": COUNT, "learning_rate": POSITIVE,
    "num_leaves": at_least(2), "max_bin": at_least(2), "min_child_samples": SIZE, "subsample_freq": SIZE,
    "subsample": FRACTION, "colsample_bytree": FRACTION, "min_child_weight": NON_NEGATIVE,
    "min_split_gain": NON_NEGATIVE, "reg_alpha": NON_NEGATIVE, "reg_lambda": NON_NEGATIVE,
    "scale_pos_weight": POSITIVE, "cat_smooth": NON_NEGATIVE, "cat_l2": NON_NEGATIVE,
    "max_cat_threshold": COUNT, "min_data_per_group": COUNT, "path_smooth": NON_NEGATIVE,
}


LIGHTGBM = ModelSpec(
    name="lightgbm",
    cpu_class="pipeline.models.lightgbm_estimators:LightGBMClassifier",
    gpu_class="pipeline.models.lightgbm_estimators:LightGBMClassifier",
    params=_LGBM_PARAMS,
    cpu_defaults=_LGBM_DEFAULTS,
    gpu_defaults=_LGBM_DEFAULTS,
    supports_eval_set=True,
    eval_set_params=("early_stopping_rounds",),
    fit_arguments=lightgbm_fit_arguments,
    description="gradient-boosted trees (LightGBM); categorical features split natively; trains on the "
                "CPU on either device (its wheel has no CUDA build: a GPU run hands it a host copy)",
    format=LIGHTGBM_TEXT,
    tasks=("binary", "multiclass", "regression"),
    regression=EstimatorClasses(
        cpu="pipeline.models.lightgbm_estimators:LightGBMRegressor",
        gpu="pipeline.models.lightgbm_estimators:LightGBMRegressor",
    ),
    task_param_rules=_lightgbm_task_rules,
    bounds=_LGBM_BOUNDS,
    explain=lightgbm_importance,
    fit_steps=lightgbm_rounds,
    extra="lightgbm",
    threads_param="n_jobs",
    portfolio=(
        # The first member: cheap and strong.
        PortfolioMember("lightgbm", {"*": {"n_estimators": 2000, "learning_rate": 0.05, "num_leaves": 31,
                                           "min_child_samples": 20, "colsample_bytree": 0.9,
                                           "early_stopping_rounds": 50}}, per_class=True, rank=1, quick=True),
        # Second configurations (AutoGluon's: bigger trees at a lower rate; randomised split points).
        PortfolioMember("lightgbm", {"*": {"n_estimators": 3000, "learning_rate": 0.03, "num_leaves": 128,
                                           "min_child_samples": 3, "colsample_bytree": 0.9,
                                           "early_stopping_rounds": 50}}, name="lightgbm_large", extra=True,
                        cost=3.0, per_class=True, rank=8),
        PortfolioMember("lightgbm", {"*": {"n_estimators": 2000, "learning_rate": 0.05, "num_leaves": 31,
                                           "extra_trees": True, "colsample_bytree": 0.9,
                                           "early_stopping_rounds": 50}}, name="lightgbm_xt", extra=True,
                        cost=1.0, per_class=True, rank=9),
    ),
)
