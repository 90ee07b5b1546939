"""Tree ensembles by bagging: the random forest (scikit-learn or cuML) and extra trees (scikit-learn)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeline.models.roles import InitChoice, PortfolioMember
from pipeline.models.model_spec import EstimatorClasses, ModelSpec, cpu_only, gpu_only, same

# Random forest criteria by task, in scikit-learn's names (what users write).
_FOREST_CRITERIA = {
    "classification": ("gini", "entropy", "log_loss"),
    "regression": ("squared_error", "absolute_error", "friedman_mse", "poisson"),
}
# cuML 26.10's ``split_criterion`` for scikit-learn's names (log_loss is entropy in both);
# absolute_error and friedman_mse have no cuML criterion (it refuses mae, warns and falls
# back on names it does not know).
_CUML_CRITERIA = {"gini": "gini", "entropy": "entropy", "log_loss": "entropy", "squared_error": "mse",
                  "poisson": "poisson"}


def _forest_task_rules(params: Mapping[str, Any], task: str) -> list[str]:
    """Classifier-only settings given to a regression forest and the other way round: the
    estimators would refuse them, or ignore them, without naming the task."""
    group = "regression" if task == "regression" else "classification"
    problems = []
    if group == "regression" and "class_weight" in params:
        problems.append("class_weight applies to classification; a regression forest has no classes to weight: "
                        "remove it")
    criterion = params.get("criterion")
    if criterion is not None and criterion not in _FOREST_CRITERIA[group]:
        problems.append(f"criterion {criterion!r} is not a {task} criterion; use one of "
                        f"{', '.join(_FOREST_CRITERIA[group])}")
    return problems


def _forest_for_device(device: str, kwargs: dict[str, Any], params: Mapping[str, Any]) -> dict[str, Any]:
    """scikit-learn's criterion names in cuML's spelling on the GPU."""
    criterion = kwargs.get("split_criterion")
    if device == "cpu" or criterion is None:
        return kwargs
    if criterion not in _CUML_CRITERIA:
        raise ValueError(f"random_forest: criterion {criterion!r} has no cuML equivalent on the GPU (cuML has "
                         f"{', '.join(_CUML_CRITERIA)}); choose one of those or run on the CPU")
    kwargs["split_criterion"] = _CUML_CRITERIA[criterion]
    return kwargs


RANDOM_FOREST = ModelSpec(
    name="random_forest",
    cpu_class="sklearn.ensemble:RandomForestClassifier",
    gpu_class="cuml.ensemble:RandomForestClassifier",
    params={
        **same(
            "n_estimators", "max_depth", "max_features", "min_samples_leaf",
            "min_samples_split", "bootstrap", "max_samples", "random_state",
            "min_impurity_decrease", "verbose", "class_weight", "oob_score",
        ),
        "criterion": ("criterion", "split_criterion"),
        # cuML's max_leaves means the same but spells "unlimited" -1, not None:
        # keep the two apart rather than translate values.
        **cpu_only("n_jobs", "ccp_alpha", "warm_start", "max_leaf_nodes"),
        **gpu_only("n_bins", "n_streams", "max_batch_size", "max_leaves"),
    },
    cpu_defaults={"n_jobs": -1},
    # cuML changed its max_depth default 16 -> None in 26.08; pin the sklearn default
    # explicitly so both devices grow the same kind of trees whatever the version.
    gpu_defaults={"max_depth": None, "output_type": "cupy"},
    description="random forest (cuML on GPU, scikit-learn on CPU); a classifier, or a regressor "
                "for regression",
    # cuml.dask trains n_estimators / workers trees on each worker's partitions.
    dask_gpu_class="cuml.dask.ensemble:RandomForestClassifier",
    adapt_params=_forest_for_device,
    tasks=("binary", "multiclass", "regression"),
    regression=EstimatorClasses(
        cpu="sklearn.ensemble:RandomForestRegressor",
        gpu="cuml.ensemble:RandomForestRegressor",
        dask_gpu="cuml.dask.ensemble:RandomForestRegressor",
    ),
    task_param_rules=_forest_task_rules,
    threads_param="n_jobs",
    portfolio=(PortfolioMember("random_forest", {"*": {"n_estimators": 300, "min_samples_leaf": 2,
                                                      "max_features": "sqrt"},
                                                "regression": {"max_features": 0.5}},
                               cost=9.0, device_cost=13.0, rank=5, quick=True),),
    init_choices=(InitChoice(("binary", "multiclass", "regression"),
                             {"n_estimators": 200, "min_samples_leaf": 5}, "robust trees, little tuning",
                             rank=2),),
)


EXTRA_TREES = ModelSpec(
    name="extra_trees",
    cpu_class="sklearn.ensemble:ExtraTreesClassifier",
    params={
        **same(
            "n_estimators", "max_depth", "max_features", "min_samples_leaf", "min_samples_split",
            "bootstrap", "max_samples", "random_state", "min_impurity_decrease", "verbose",
            "class_weight", "criterion", "n_jobs", "ccp_alpha", "max_leaf_nodes",
        ),
    },
    cpu_defaults={"n_jobs": -1},
    description="extremely randomized trees (scikit-learn, on the CPU only: cuML has none); a classifier, "
                "or a regressor for regression",
    tasks=("binary", "multiclass", "regression"),
    regression=EstimatorClasses(cpu="sklearn.ensemble:ExtraTreesRegressor"),
    task_param_rules=_forest_task_rules,
    threads_param="n_jobs",
    portfolio=(PortfolioMember("extra_trees", {"*": {"n_estimators": 300, "min_samples_leaf": 2,
                                                    "max_features": "sqrt"},
                                              "regression": {"max_features": 0.5}}, cost=4.0, rank=4),),
)
