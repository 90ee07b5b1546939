"""Linear models: logistic regression and ridge (scikit-learn or cuML), and the linear model
on its own encoding of the features (``pipeline.models.encoded_linear``)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pipeline.models.formats import LINEAR_COEFFICIENTS
from pipeline.models.registry import LINEAR_BASELINE
from pipeline.models.roles import InitChoice, PortfolioMember
from pipeline.models.model_spec import EstimatorClasses, FitInputs, ModelSpec, cpu_only, gpu_only, same

# Logistic regression's penalty. cuML 26.10 takes ``penalty`` and ``l1_ratio`` as scikit-learn
# 1.7 did and applies ``l1_ratio`` only with ``penalty="elasticnet"`` (silently, otherwise).
# scikit-learn 1.8 deprecated ``penalty`` (gone in 1.10): there ``l1_ratio`` alone chooses it.
# A lone ``l1_ratio`` therefore means elasticnet on a new CPU and nothing on the GPU, so it is
# refused; ``penalty`` is what users write, and the CPU gets it in its installed spelling.
_PENALTIES = ("l1", "l2", "elasticnet")
# scikit-learn solvers that handle an L1 term (lbfgs, the default, does not).
_L1_SOLVERS = {"l1": ("saga", "liblinear"), "elasticnet": ("saga",)}


def _logistic_param_rules(params: Mapping[str, Any]) -> list[str]:
    """``penalty`` / ``l1_ratio`` / ``solver`` combinations that would be ignored or refused."""
    penalty = params.get("penalty", "l2")
    if penalty not in _PENALTIES:
        return [f"penalty must be one of {', '.join(map(repr, _PENALTIES))}, not {penalty!r}"]
    problems = []
    ratio = params.get("l1_ratio")
    if "l1_ratio" in params and penalty != "elasticnet":
        problems.append(f"l1_ratio only takes effect with penalty: elasticnet (penalty is {penalty}; cuML would "
                        "ignore it): add penalty: elasticnet, or remove l1_ratio")
    elif penalty == "elasticnet" and ratio is None:
        problems.append("penalty: elasticnet needs l1_ratio (the L1 share: 0 is pure L2, 1 pure L1)")
    elif penalty == "elasticnet" and (isinstance(ratio, bool) or not isinstance(ratio, (int, float))
                                      or not 0 <= ratio <= 1):
        problems.append(f"l1_ratio must be a number between 0 and 1, not {ratio!r}")
    solver = params.get("solver")
    if solver is not None and penalty in _L1_SOLVERS and solver not in _L1_SOLVERS[penalty]:
        needed = " or ".join(repr(s) for s in _L1_SOLVERS[penalty])
        problems.append(f"penalty: {penalty} needs solver {needed} on the CPU, not {solver!r}; leave solver out "
                        "to get saga")
    return problems


def _logistic_for_device(device: str, kwargs: dict[str, Any], params: Mapping[str, Any]) -> dict[str, Any]:
    """scikit-learn's spelling of ``penalty`` on the CPU; cuML takes penalty and l1_ratio as given."""
    penalty = kwargs.get("penalty")
    if device != "cpu" or penalty not in _PENALTIES:
        return kwargs                 # the GPU, no penalty, or a value validation refuses
    if penalty != "l2" and "solver" not in params:
        kwargs["solver"] = "saga"     # the one scikit-learn solver for both L1 and elasticnet
    if _sklearn_version() >= (1, 8):
        del kwargs["penalty"]
        kwargs["l1_ratio"] = {"l1": 1.0, "l2": 0.0}.get(penalty, kwargs.get("l1_ratio"))
    return kwargs


def _sklearn_version() -> tuple[int, int]:
    """(major, minor) of the installed scikit-learn, read without importing it."""
    from importlib.metadata import version

    found = re.match(r"(\d+)\.(\d+)", version("scikit-learn"))
    return (int(found.group(1)), int(found.group(2))) if found else (0, 0)


def linear_fit_arguments(inputs: FitInputs) -> dict[str, Any]:
    """The categorical columns by position: the ``linear`` model encodes them itself."""
    return {"categorical": list(inputs.categorical)}


# ``linear_log``'s skewness past which a number column with no negative value is taken as log1p.
# No one threshold helped every table (docs/benchmarks.md, "The linear member's skewed
# numbers"), so ``auto`` tries it as a second configuration and the blend weighs it.
SKEW_MAX = 0.75


def _linear_param_rules(params: Mapping[str, Any]) -> list[str]:
    problems = []
    value = params.get("one_hot_max", 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        problems.append(f"one_hot_max must be a whole number of levels (0 or more), not {value!r}")
    skew = params.get("skew_max")
    if skew is not None and (isinstance(skew, bool) or not isinstance(skew, (int, float)) or skew != skew):
        problems.append(f"skew_max must be a number (or null: no column taken as log1p), not {skew!r}")
    return problems


def _linear_task_rules(params: Mapping[str, Any], task: str) -> list[str]:
    """C and class_weight belong to the classifier (logistic regression), alpha to the regressor (ridge)."""
    wrong = ("alpha",) if task != "regression" else ("C", "class_weight")
    right = "C" if task != "regression" else "alpha"
    return [f"'{key}' does not apply to a {task} task (the linear model's penalty there is '{right}'): remove it"
            for key in wrong if key in params]


# scikit-learn's Ridge solvers but lbfgs (which needs positive=True, not offered here).
_RIDGE_SOLVERS = ("auto", "svd", "cholesky", "lsqr", "sparse_cg", "sag", "saga")


def _ridge_param_rules(params: Mapping[str, Any]) -> list[str]:
    solver = params.get("solver", "auto")
    if solver not in _RIDGE_SOLVERS:
        return [f"solver must be one of {', '.join(map(repr, _RIDGE_SOLVERS))}, not {solver!r}"]
    return []


def _ridge_for_device(device: str, kwargs: dict[str, Any], params: Mapping[str, Any]) -> dict[str, Any]:
    """cuML 26.10's Ridge solves with 'auto', 'eig', 'svd' or 'lsmr': scikit-learn's names map
    as cuML's own accelerator maps them (svd stays, lsqr is lsmr, the rest is auto, which
    solves the same least-squares problem by an eigendecomposition)."""
    if device != "cpu" and "solver" in kwargs:
        kwargs["solver"] = {"svd": "svd", "lsqr": "lsmr"}.get(kwargs["solver"], "auto")
    return kwargs


LOGISTIC_REGRESSION = ModelSpec(
    name="logistic_regression",
    cpu_class="sklearn.linear_model:LogisticRegression",
    gpu_class="cuml.linear_model:LogisticRegression",
    params={
        **same("C", "max_iter", "tol", "fit_intercept", "class_weight", "penalty", "l1_ratio", "verbose"),
        **cpu_only("solver", "n_jobs", "warm_start"),
        **gpu_only("linesearch_max_iter"),
        "random_state": ("random_state", None),
    },
    cpu_defaults={"max_iter": 1000},
    gpu_defaults={"max_iter": 1000, "output_type": "cupy"},
    seed_param=None,
    param_rules=_logistic_param_rules,
    format=LINEAR_COEFFICIENTS,
    adapt_params=_logistic_for_device,
    description="logistic regression, L2 by default; penalty: l1, or elasticnet with l1_ratio "
                "(cuML's only solver is 'qn'; scikit-learn's saga on the CPU)",
    # cuml.dask.linear_model.LogisticRegression exists but has no predict_proba
    # (make check-gpu, cuML 26.10), so it cannot be scored like the others.
    init_choices=(InitChoice(("binary", "multiclass"), {"C": 1.0}, LINEAR_BASELINE, rank=1),),
    meta_model_for=("binary", "multiclass"),
)


RIDGE = ModelSpec(
    name="ridge",
    cpu_class="sklearn.linear_model:Ridge",
    gpu_class="cuml.linear_model:Ridge",
    params=same("alpha", "fit_intercept", "solver", "max_iter", "tol"),
    gpu_defaults={"output_type": "cupy"},
    seed_param=None,
    param_rules=_ridge_param_rules,
    adapt_params=_ridge_for_device,
    format=LINEAR_COEFFICIENTS,
    tasks=("regression",),
    description="ridge regression: least squares with an L2 penalty (alpha); cuML on GPU, "
                "scikit-learn on CPU",
    init_choices=(InitChoice(("regression",), {"alpha": 1.0}, LINEAR_BASELINE, rank=1),),
    meta_model_for=("regression",),
)


LINEAR = ModelSpec(
    name="linear",
    cpu_class="pipeline.models.encoded_linear:LinearClassifier",
    gpu_class="pipeline.models.encoded_linear:LinearClassifier",
    params=same("C", "alpha", "max_iter", "tol", "class_weight", "one_hot_max", "random_state", "skew_max"),
    param_rules=_linear_param_rules,
    task_param_rules=_linear_task_rules,
    format=LINEAR_COEFFICIENTS,
    tasks=("binary", "multiclass", "regression"),
    regression=EstimatorClasses(cpu="pipeline.models.encoded_linear:LinearRegressor",
                                gpu="pipeline.models.encoded_linear:LinearRegressor"),
    fit_arguments=linear_fit_arguments,
    description="a linear model on its own encoding of the features: numbers standardised (log1p first where "
                "a column has no negative value and a skewness above skew_max), categorical "
                "columns one-hot (at most one_hot_max levels) or target encoded; logistic regression "
                "(C) or ridge (alpha); exported as coefficients and a table per categorical column",
    # It encodes the matrix for itself (numbers standardised, few levels one-hot, many
    # target encoded); logistic regression or ridge.
    portfolio=(PortfolioMember("linear", {"binary": {"C": 1.0, "max_iter": 300},
                                          "multiclass": {"C": 1.0, "max_iter": 300},
                                          "regression": {"alpha": 1.0}}, cost=0.3, device_cost=0.4, rank=7, quick=True),
               # A second configuration: skewed non-negative numbers as log1p (it helps some
               # tables and hurts others, so the blend decides; docs/benchmarks.md).
               PortfolioMember("linear", {"binary": {"C": 1.0, "max_iter": 300, "skew_max": SKEW_MAX},
                                          "multiclass": {"C": 1.0, "max_iter": 300, "skew_max": SKEW_MAX},
                                          "regression": {"alpha": 1.0, "skew_max": SKEW_MAX}},
                               name="linear_log", extra=True, cost=0.3, device_cost=0.4, rank=10),),
)
