"""XGBoost: the same scikit-learn estimator on both devices (``device='cuda'`` on the GPU), on Dask
through ``xgboost.dask``, streamed from Parquet by external memory, pruned by its metric each round."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeline.models.catalogue.booster_objectives import objective_problems
from pipeline.models.explainers import xgboost_importance
from pipeline.models.formats import XGBOOST_JSON, xgboost_family
from pipeline.models.roles import InitChoice, PortfolioMember
from pipeline.models.model_spec import EstimatorClasses, ModelSpec, same
from pipeline.models.param_bounds import COUNT, FRACTION, NON_NEGATIVE, POSITIVE, SIZE, at_least
from pipeline.models.steps import XGBOOST_PRUNING, xgboost_rounds


def _xgboost_task_rules(params: Mapping[str, Any], task: str) -> list[str]:
    problems = objective_problems(params, task, "objective", xgboost_family)
    if "scale_pos_weight" in params and task != "binary":
        problems.append(f"scale_pos_weight weighs a binary task's positive class; a {task} task ignores it: "
                        "remove it")
    return problems


# XGBoost's sklearn API is the same on both devices; only `device` differs.
_XGB_PARAMS = same(
    "n_estimators", "max_depth", "max_leaves", "max_bin", "grow_policy", "learning_rate",
    "objective", "booster", "tree_method", "n_jobs", "gamma", "min_child_weight",
    "max_delta_step", "subsample", "sampling_method", "colsample_bytree", "colsample_bylevel",
    "colsample_bynode", "reg_alpha", "reg_lambda", "scale_pos_weight", "base_score",
    "random_state", "missing", "num_parallel_tree", "max_cat_to_onehot", "eval_metric",
    "early_stopping_rounds", "validate_parameters",
)

# XGBoost fits a constant model for no rounds, a zero learning rate or a zero row sample (exit
# 0, ROC AUC 0.5), and checks the other ranges only once its data is built.
_XGB_BOUNDS = {
    "n_estimators": COUNT, "num_parallel_tree": COUNT, "early_stopping_rounds": COUNT,
    "learning_rate": POSITIVE, "max_depth": SIZE, "max_leaves": SIZE, "max_bin": at_least(2),
    "subsample": FRACTION, "colsample_bytree": FRACTION, "colsample_bylevel": FRACTION,
    "colsample_bynode": FRACTION, "gamma": NON_NEGATIVE, "min_child_weight": NON_NEGATIVE,
    "max_delta_step": NON_NEGATIVE, "reg_alpha": NON_NEGATIVE, "reg_lambda": NON_NEGATIVE,
    "scale_pos_weight": POSITIVE,
}


XGBOOST = ModelSpec(
    name="xgboost",
    cpu_class="xgboost:XGBClassifier",
    gpu_class="xgboost:XGBClassifier",
    params=_XGB_PARAMS,
    cpu_defaults={"tree_method": "hist", "device": "cpu"},
    gpu_defaults={"tree_method": "hist", "device": "cuda"},
    supports_eval_set=True,
    eval_set_params=("early_stopping_rounds",),
    description="gradient-boosted trees (XGBoost; device='cuda' on GPU)",
    dask_cpu_class="xgboost.dask:DaskXGBClassifier",
    dask_gpu_class="xgboost.dask:DaskXGBClassifier",
    format=XGBOOST_JSON,
    external_memory=True,
    tasks=("binary", "multiclass", "regression"),
    regression=EstimatorClasses(
        cpu="xgboost:XGBRegressor",
        gpu="xgboost:XGBRegressor",
        dask_cpu="xgboost.dask:DaskXGBRegressor",
        dask_gpu="xgboost.dask:DaskXGBRegressor",
    ),
    task_param_rules=_xgboost_task_rules,
    bounds=_XGB_BOUNDS,
    explain=xgboost_importance,
    fit_steps=xgboost_rounds,
    pruning=XGBOOST_PRUNING,
    threads_param="n_jobs",
    portfolio=(
        PortfolioMember("xgboost", {"*": {"n_estimators": 2000, "learning_rate": 0.05, "max_depth": 6,
                                          "min_child_weight": 1, "colsample_bytree": 0.9,
                                          "early_stopping_rounds": 50}}, cost=1.2, device_cost=1.1, per_class=True,
                        rank=3, quick=True),
        # A deeper second configuration, for the time the members leave.
        PortfolioMember("xgboost", {"*": {"n_estimators": 2000, "learning_rate": 0.03, "max_depth": 8,
                                          "min_child_weight": 3, "subsample": 0.8, "colsample_bytree": 0.7,
                                          "early_stopping_rounds": 50}}, name="xgboost_deep", extra=True,
                        cost=2.5, device_cost=2.4, per_class=True, rank=10),
    ),
    init_choices=(InitChoice(("binary", "multiclass", "regression"),
                             {"n_estimators": 300, "learning_rate": 0.05, "max_depth": 6, "subsample": 0.8},
                             "gradient-boosted trees: usually the strongest on tables", rank=3),),
)
