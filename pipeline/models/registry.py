"""Model registry: one name → the GPU estimator, the CPU estimator, how parameters translate
and the file format its exported model is saved in.

Users write scikit-learn's parameter names once; the registry renames them for cuML
(``criterion`` → ``split_criterion``), drops ones that do not exist on the device (and says
so), and fills device defaults. Where a name-by-name mapping is not enough, an entry adds
rules over combinations (a parameter that only acts together with another is refused
alone, never passed on to be ignored) and a per-device rewrite of values. Estimator classes
are named as ``module:Class`` strings so this module never imports a GPU library; the backend
imports them.

Everything that depends on which model it is (what ``train`` offers, what can stream from
Parquet, how ``export`` writes it and ``predict`` reads it back, what importances it computes
itself) is a field of the entry, so
plugin code adds a model with ``register_model`` and no module here names it.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pipeline.models.blending import BaggedFormat, EnsembleFormat, StackFormat
from pipeline.models.explainers import Explainer, catboost_importance, lightgbm_importance, xgboost_importance
from pipeline.models.formats import (
    LINEAR_COEFFICIENTS, SKOPS, TORCH_STATE_DICT, XGBOOST_JSON, ModelFormat, xgboost_family,
)
from pipeline.models.gbdt_formats import CATBOOST_CBM, LIGHTGBM_TEXT, catboost_family, lightgbm_family
from pipeline.features.auto_ops import CODES
from pipeline.models.roles import InitChoice, PortfolioMember
from pipeline.models.steps import XGBOOST_PRUNING, Pruning, StepsOf, lightgbm_rounds, xgboost_rounds

# common name -> (name on CPU, name on GPU); None = the device has no such parameter.
ParamMap = Mapping[str, tuple[str | None, str | None]]
# The user's params (known names only) -> problems, each naming the keys involved.
ParamRules = Callable[[Mapping[str, Any]], list[str]]
# (device, translated kwargs, the user's params) -> the kwargs that device's estimator takes.
ParamAdapter = Callable[[str, dict[str, Any], Mapping[str, Any]], dict[str, Any]]
# (the user's params, known names only; the task kind) -> problems with params for that task.
TaskParamRules = Callable[[Mapping[str, Any], str], list[str]]
# Tasks an entry serves unless it says otherwise: what a classifier does (plugin entries
# registered before tasks existed are classifiers).
CLASSIFICATION_TASKS: tuple[str, ...] = ("binary", "multiclass")


@dataclass(frozen=True)
class FitInputs:
    """What a fit can be given beyond the training rows, for an entry's ``fit_arguments`` to
    choose from: plain values, so this layer needs no feature set."""

    # The valid split's (X, y) on the run's device; None when the split has no valid rows.
    eval_set: tuple[Any, Any] | None = None
    # Positions in the feature matrix of the categorical columns (categorify's integer codes).
    categorical: tuple[int, ...] = ()
    # The features' names, in matrix order.
    feature_names: tuple[str, ...] = ()
    # The user's params (the entry's names), for settings that act at fit time.
    params: Mapping[str, Any] = field(default_factory=dict)


# FitInputs -> the keyword arguments of the estimator's ``fit``.
FitArguments = Callable[[FitInputs], dict[str, Any]]


def lightgbm_fit_arguments(inputs: FitInputs) -> dict[str, Any]:
    """The valid split as LightGBM's evaluation set (early stopping is the estimator's, given
    ``early_stopping_rounds``), and the categorical columns by position."""
    kwargs: dict[str, Any] = {}
    if inputs.eval_set is not None:
        kwargs["eval_set"] = [inputs.eval_set]
    if inputs.categorical:
        kwargs["categorical_feature"] = list(inputs.categorical)
    return kwargs


def catboost_fit_arguments(inputs: FitInputs) -> dict[str, Any]:
    """The valid split as CatBoost's ``eval_set`` (its ``early_stopping_rounds`` acts on it and
    the model keeps the best iteration), and the categorical columns as ``cat_features``."""
    kwargs: dict[str, Any] = {}
    if inputs.eval_set is not None:
        kwargs["eval_set"] = inputs.eval_set
    if inputs.categorical:
        kwargs["cat_features"] = list(inputs.categorical)
    return kwargs


@dataclass(frozen=True)
class EstimatorClasses:
    """Estimators as ``module:Class`` strings, per device and layout; None: none there."""

    cpu: str | None = None
    gpu: str | None = None
    dask_cpu: str | None = None       # partitioned (Dask) data
    dask_gpu: str | None = None

    def path(self, device: str, *, distributed: bool = False) -> str | None:
        if distributed:
            return self.dask_cpu if device == "cpu" else self.dask_gpu
        return self.cpu if device == "cpu" else self.gpu


@dataclass(frozen=True)
class ModelSpec:
    """One registry entry. ``cpu_class``/``gpu_class`` None: no estimator there (the MLP is
    trained by its own stage and is an entry only for its file format).

    Examples:
        >>> from pipeline.models import get_model_spec
        >>> spec = get_model_spec("random_forest")
        >>> spec.tasks, spec.class_path("cpu", task="regression"), spec.class_path("gpu", task="binary")
        (('binary', 'multiclass', 'regression'), 'sklearn.ensemble:RandomForestRegressor', 'cuml.ensemble:RandomForestClassifier')
    """

    name: str
    cpu_class: str | None = None
    gpu_class: str | None = None
    params: ParamMap = field(default_factory=dict)
    cpu_defaults: Mapping[str, Any] = field(default_factory=dict)
    gpu_defaults: Mapping[str, Any] = field(default_factory=dict)
    seed_param: str | None = "random_state"
    supports_eval_set: bool = False
    description: str = ""
    # Estimators for partitioned (Dask) data; None = this model cannot train distributed there.
    dask_cpu_class: str | None = None
    dask_gpu_class: str | None = None
    # How ``export`` writes the fitted estimator and ``load_model`` reads it back: scikit-learn's
    # (and cuML's, as their scikit-learn twins) in skops' format unless the entry says otherwise.
    format: ModelFormat = SKOPS
    # Can train from partition files through XGBoost-style external memory.
    external_memory: bool = False
    # Checks over combinations of params, for what the name mapping cannot see (a parameter
    # that only acts together with another); run by ``check_params``, so at validation.
    param_rules: ParamRules | None = None
    # Rewrites translated kwargs whose meaning lies in values, not names; run by ``translate``.
    adapt_params: ParamAdapter | None = None
    # The tasks it serves (``pipeline.core.problems``): a ``train`` stage fed another task is refused
    # at validation when the split declares the task, else when training starts.
    tasks: tuple[str, ...] = CLASSIFICATION_TASKS
    # Regression estimators where they differ from the fields above (a classifier's regressor
    # twin); None: the fields above serve every task in ``tasks``.
    regression: EstimatorClasses | None = None
    # Checks of params against the task (a classifier-only parameter given to a regressor);
    # run by ``task_problems``, so at validation when the task is declared, else at training.
    task_param_rules: TaskParamRules | None = None
    # Importances the fitted estimator computes itself (``pipeline.models.explainers``), beside
    # the permutation importance ``evaluate`` measures for every model; None: none.
    explain: Explainer | None = None
    # The steps a fit reports while it runs (``pipeline.models.steps``: XGBoost's boosting
    # rounds), given the constructor kwargs; None: the fit is one call with nothing to count.
    fit_steps: StepsOf | None = None
    # The keyword arguments of ``fit`` (an evaluation set, the categorical columns), chosen from
    # ``FitInputs``; None: ``{"eval_set": [valid], "verbose": False}`` where ``supports_eval_set``
    # and there are valid rows, else nothing.
    fit_arguments: FitArguments | None = None
    # The optional dependency group (pyproject extra) that installs the model's library, named
    # when it is missing; None: the machine's flavour (cpu, gpu) brings it.
    extra: str | None = None
    # Its configurations in ``auto``'s portfolio (empty: auto leaves it out), the models ``init``
    # writes for a task (empty: none), and the tasks a ``stack`` takes it for as its meta-model
    # by default: what the stages know of a model, so that none of them names one
    # (``pipeline.models.roles``).
    portfolio: tuple[PortfolioMember, ...] = ()
    init_choices: tuple[InitChoice, ...] = ()
    meta_model_for: tuple[str, ...] = ()
    # How a tuning trial of it is pruned while it fits (the metric it reports each step); None:
    # a trial runs to its end. Not on partitioned (Dask) data, where the fit runs on workers.
    pruning: Pruning | None = None
    # Its CPU estimator's thread-count parameter, where the library starts threads per core
    # (``auto`` sizes it to the cores free at the fit); None: it has none that acts.
    threads_param: str | None = None

    def fit_kwargs(self, inputs: FitInputs) -> dict[str, Any]:
        """What ``train`` passes to ``fit`` beside the training rows (see ``fit_arguments``)."""
        if self.fit_arguments is not None:
            return dict(self.fit_arguments(inputs))
        if self.supports_eval_set and inputs.eval_set is not None:
            return {"eval_set": [inputs.eval_set], "verbose": False}
        return {}

    @property
    def trainable(self) -> bool:
        """Whether a ``train`` stage can fit it (it has an estimator class somewhere)."""
        extra = self.regression or EstimatorClasses()
        return any(c is not None for c in (self.cpu_class, self.gpu_class, extra.cpu, extra.gpu))

    def serves(self, task: str) -> bool:
        """Whether it predicts for a task of this kind (binary, multiclass, regression)."""
        return task in self.tasks

    def estimator_classes(self, task: str = "binary") -> EstimatorClasses:
        """The estimators that serve ``task`` (whether it serves it at all: ``serves``)."""
        if task == "regression" and self.regression is not None:
            return self.regression
        return EstimatorClasses(self.cpu_class, self.gpu_class, self.dask_cpu_class, self.dask_gpu_class)

    def class_path(self, device: str, *, distributed: bool = False, task: str = "binary") -> str | None:
        if not self.serves(task):
            return None
        return self.estimator_classes(task).path(device, distributed=distributed)

    def cannot_serve(self, task: str) -> str:
        can = models_for(task)
        return (f"model '{self.name}' cannot serve a {task} task; models that can: "
                + (", ".join(can) if can else "none"))

    def unavailable(self, device: str, *, distributed: bool = False, task: str = "binary") -> str:
        """Why this model has no estimator on ``device`` for ``task`` (and what to use instead)."""
        if not self.serves(task):
            return self.cannot_serve(task)
        if not distributed:
            return (f"model '{self.name}' has no estimator on the {device.upper()}"
                    + ("; it is trained by its own stage kind" if not self.trainable else ""))
        others = ", ".join(name for name, s in MODELS.items() if s.class_path(device, distributed=True, task=task))
        return (f"model '{self.name}' cannot train on partitioned data on the {device.upper()} "
                f"(no distributed {self.name} there). Use one that can ({others}), or load the data "
                "without partitioned: true if it fits in one process"
                + (", or run on GPUs, where cuML trains it with cuml.dask"
                   if self.class_path("gpu", distributed=True, task=task) and device == "cpu" else ""))

    def task_problems(self, task: str, params: Mapping[str, Any] | None = None) -> list[str]:
        """Why it cannot train for ``task`` with ``params`` (empty when it can), each message
        naming the task and the way out (the models that serve it, the parameter to drop)."""
        if not self.serves(task):
            return [self.cannot_serve(task)]
        if self.task_param_rules is None or not params:
            return []
        return self.task_param_rules({k: v for k, v in params.items() if k in self.params}, task)

    def allowed_params(self) -> list[str]:
        return sorted(self.params)

    def check_params(self, params: Mapping[str, Any]) -> list[str]:
        """Problems with user params, each naming the key and the closest valid name."""
        problems = []
        allowed = self.allowed_params()
        for key in params:
            if key not in self.params:
                close = difflib.get_close_matches(key, allowed, n=1)
                hint = f"; did you mean '{close[0]}'?" if close else f"; known: {', '.join(allowed)}"
                problems.append(f"unknown parameter '{key}' for model '{self.name}'{hint}")
        if self.param_rules is not None:
            problems += self.param_rules({k: v for k, v in params.items() if k in self.params})
        return problems

    def translate(self, params: Mapping[str, Any], device: str, *, seed: int | None,
                  distributed: bool = False) -> tuple[dict[str, Any], list[str]]:
        """Device-specific constructor kwargs, and the user params the device does not have."""
        slot = 0 if device == "cpu" else 1
        out = dict(self.cpu_defaults if device == "cpu" else self.gpu_defaults)
        if distributed:
            out.pop("output_type", None)        # cuml.dask estimators return Dask collections
        dropped = []
        if seed is not None and self.seed_param and self.seed_param not in params:
            out[self.seed_param] = seed
        for key, value in params.items():
            target = self.params[key][slot]
            if target is None:
                dropped.append(key)
            else:
                out[target] = value
        if self.adapt_params is not None:
            out = self.adapt_params(device, out, params)
        return out, dropped


def _same(*names: str) -> dict[str, tuple[str, str]]:
    return {n: (n, n) for n in names}


def _cpu_only(*names: str) -> dict[str, tuple[str, None]]:
    return {n: (n, None) for n in names}


def _gpu_only(*names: str) -> dict[str, tuple[None, str]]:
    return {n: (None, n) for n in names}


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


def _linear_param_rules(params: Mapping[str, Any]) -> list[str]:
    value = params.get("one_hot_max", 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return [f"one_hot_max must be a whole number of levels (0 or more), not {value!r}"]
    return []


def _linear_task_rules(params: Mapping[str, Any], task: str) -> list[str]:
    """C and class_weight belong to the classifier (logistic regression), alpha to the regressor (ridge)."""
    wrong = ("alpha",) if task != "regression" else ("C", "class_weight")
    right = "C" if task != "regression" else "alpha"
    return [f"'{key}' does not apply to a {task} task (the linear model's penalty there is '{right}'): remove it"
            for key in wrong if key in params]


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


def _xgboost_task_rules(params: Mapping[str, Any], task: str) -> list[str]:
    problems = _objective_problems(params, task, "objective", xgboost_family)
    if "scale_pos_weight" in params and task != "binary":
        problems.append(f"scale_pos_weight weighs a binary task's positive class; a {task} task ignores it: "
                        "remove it")
    return problems


# What each family of objective gives, for the messages.
_FAMILY_GIVES = {"binary": "one class's probability", "multiclass": "each class's probability", "value": "a value"}


def _objective_problems(params: Mapping[str, Any], task: str, key: str, family_of: Callable[[str], str]) -> list[str]:
    """An objective (or loss function) in ``params[key]`` that cannot give ``task``'s scores: a
    regression objective for classes, a classifier's for a regression, a multiclass one for a
    binary task. (A binary objective on a multiclass task is left to the library: a task of
    two classes takes it.) Caught here, such a run would train, succeed and leave a model that
    ``predict`` refuses."""
    value = params.get(key)
    if not isinstance(value, str) or not value:
        return []
    family = family_of(value)
    fits = {"regression": family == "value", "binary": family == "binary",
            "multiclass": family in ("binary", "multiclass")}.get(task, True)
    if fits:
        return []
    return [f"{key} {value!r} gives {_FAMILY_GIVES[family]}, and the split's task is {task}: remove {key} (the "
            "library then chooses the task's own) or give one for the task"]


def _lightgbm_task_rules(params: Mapping[str, Any], task: str) -> list[str]:
    return _objective_problems(params, task, "objective", lightgbm_family) + _gbdt_task_rules(params, task)


def _catboost_task_rules(params: Mapping[str, Any], task: str) -> list[str]:
    return _objective_problems(params, task, "loss_function", catboost_family) + _gbdt_task_rules(params, task)


# XGBoost's sklearn API is the same on both devices; only `device` differs.
_XGB_PARAMS = _same(
    "n_estimators", "max_depth", "max_leaves", "max_bin", "grow_policy", "learning_rate",
    "objective", "booster", "tree_method", "n_jobs", "gamma", "min_child_weight",
    "max_delta_step", "subsample", "sampling_method", "colsample_bytree", "colsample_bylevel",
    "colsample_bynode", "reg_alpha", "reg_lambda", "scale_pos_weight", "base_score",
    "random_state", "missing", "num_parallel_tree", "max_cat_to_onehot", "eval_metric",
    "early_stopping_rounds", "validate_parameters",
)

def _gbdt_task_rules(params: Mapping[str, Any], task: str) -> list[str]:
    """Class weights and positive-class weights given to a task that has none to weigh."""
    problems = []
    for key in ("scale_pos_weight", "is_unbalance"):
        if key in params and task != "binary":
            problems.append(f"{key} weighs a binary task's positive class; a {task} task ignores it: remove it")
    for key in ("class_weight", "class_weights", "auto_class_weights"):
        if key in params and task == "regression":
            problems.append(f"{key} applies to classification; a regression has no classes to weigh: remove it")
    return problems


# LightGBM's scikit-learn names, the same on both devices (its wheel has no CUDA build: on the GPU
# backend it trains on the CPU from a host copy), and the LightGBM parameters users also write.
_LGBM_PARAMS = _same(
    "n_estimators", "learning_rate", "num_leaves", "max_depth", "min_child_samples", "min_child_weight",
    "min_split_gain", "subsample", "subsample_freq", "subsample_for_bin", "colsample_bytree", "reg_alpha",
    "reg_lambda", "boosting_type", "objective", "class_weight", "random_state", "n_jobs",
    "early_stopping_rounds", "max_bin", "cat_smooth", "cat_l2", "max_cat_threshold", "min_data_per_group",
    "max_cat_to_onehot", "extra_trees", "path_smooth", "scale_pos_weight", "is_unbalance", "verbose",
)
# n_jobs=-1: a thread per CPU the process may use (LightGBM counts them as joblib does, within a
# container's share); its own default, None, takes physical cores only.
_LGBM_DEFAULTS = {"verbose": -1, "n_jobs": -1}

# CatBoost's own names (the same estimator on both devices; task_type="GPU" on the GPU).
_CATBOOST_PARAMS = _same(
    "iterations", "learning_rate", "depth", "l2_leaf_reg", "border_count", "random_strength",
    "bagging_temperature", "bootstrap_type", "subsample", "rsm", "grow_policy", "min_data_in_leaf",
    "max_leaves", "one_hot_max_size", "max_ctr_complexity", "leaf_estimation_iterations", "loss_function",
    "eval_metric", "auto_class_weights", "class_weights", "scale_pos_weight", "early_stopping_rounds",
    "use_best_model", "random_seed", "thread_count", "nan_mode", "boosting_type", "verbose",
)
# thread_count is left at CatBoost's default, -1: every core (CatBoost drops an explicit -1).
_CATBOOST_DEFAULTS = {"verbose": False, "allow_writing_files": False}

# The entry the torch stage trains (the MLP), and the composites the ensemble, bag and stack
# stages build: names the stages take from here rather than spell.
MLP_MODEL, ENSEMBLE_MODEL, BAGGED_MODEL, STACKED_MODEL = "mlp", "ensemble", "bagged", "stacked"
LINEAR_BASELINE = "a linear baseline: fast, and a yardstick for the trees"

MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec(
            name="logistic_regression",
            cpu_class="sklearn.linear_model:LogisticRegression",
            gpu_class="cuml.linear_model:LogisticRegression",
            params={
                **_same("C", "max_iter", "tol", "fit_intercept", "class_weight", "penalty", "l1_ratio", "verbose"),
                **_cpu_only("solver", "n_jobs", "warm_start"),
                **_gpu_only("linesearch_max_iter"),
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
        ),
        ModelSpec(
            name="random_forest",
            cpu_class="sklearn.ensemble:RandomForestClassifier",
            gpu_class="cuml.ensemble:RandomForestClassifier",
            params={
                **_same(
                    "n_estimators", "max_depth", "max_features", "min_samples_leaf",
                    "min_samples_split", "bootstrap", "max_samples", "random_state",
                    "min_impurity_decrease", "verbose", "class_weight", "oob_score",
                ),
                "criterion": ("criterion", "split_criterion"),
                # cuML's max_leaves means the same but spells "unlimited" -1, not None:
                # keep the two apart rather than translate values.
                **_cpu_only("n_jobs", "ccp_alpha", "warm_start", "max_leaf_nodes"),
                **_gpu_only("n_bins", "n_streams", "max_batch_size", "max_leaves"),
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
                                       cost=9.0, rank=5, quick=True),),
            init_choices=(InitChoice(("binary", "multiclass", "regression"),
                                     {"n_estimators": 200, "min_samples_leaf": 5}, "robust trees, little tuning",
                                     rank=2),),
        ),
        ModelSpec(
            name="extra_trees",
            cpu_class="sklearn.ensemble:ExtraTreesClassifier",
            params={
                **_same(
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
        ),
        ModelSpec(
            name="xgboost",
            cpu_class="xgboost:XGBClassifier",
            gpu_class="xgboost:XGBClassifier",
            params=_XGB_PARAMS,
            cpu_defaults={"tree_method": "hist", "device": "cpu"},
            gpu_defaults={"tree_method": "hist", "device": "cuda"},
            supports_eval_set=True,
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
            explain=xgboost_importance,
            fit_steps=xgboost_rounds,
            pruning=XGBOOST_PRUNING,
            threads_param="n_jobs",
            portfolio=(
                PortfolioMember("xgboost", {"*": {"n_estimators": 2000, "learning_rate": 0.05, "max_depth": 6,
                                                  "min_child_weight": 1, "colsample_bytree": 0.9,
                                                  "early_stopping_rounds": 50}}, cost=1.2, per_class=True, rank=3,
                                quick=True),
                # A deeper second configuration, for the time the members leave.
                PortfolioMember("xgboost", {"*": {"n_estimators": 2000, "learning_rate": 0.03, "max_depth": 8,
                                                  "min_child_weight": 3, "subsample": 0.8, "colsample_bytree": 0.7,
                                                  "early_stopping_rounds": 50}}, name="xgboost_deep", extra=True,
                                cost=2.5, per_class=True, rank=10),
            ),
            init_choices=(InitChoice(("binary", "multiclass", "regression"),
                                     {"n_estimators": 300, "learning_rate": 0.05, "max_depth": 6, "subsample": 0.8},
                                     "gradient-boosted trees: usually the strongest on tables", rank=3),),
        ),
        ModelSpec(
            name="lightgbm",
            cpu_class="pipeline.models.lightgbm_estimators:LightGBMClassifier",
            gpu_class="pipeline.models.lightgbm_estimators:LightGBMClassifier",
            params=_LGBM_PARAMS,
            cpu_defaults=_LGBM_DEFAULTS,
            gpu_defaults=_LGBM_DEFAULTS,
            supports_eval_set=True,
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
        ),
        ModelSpec(
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
            explain=catboost_importance,
            extra="catboost",
            threads_param="thread_count",
            portfolio=(PortfolioMember("catboost", {"*": {"iterations": 2000, "learning_rate": 0.08, "depth": 6,
                                                         "early_stopping_rounds": 50}},
                                       cost=8.0, per_class=True, reads=CODES, rank=2),),
        ),
        ModelSpec(
            name="ridge",
            cpu_class="sklearn.linear_model:Ridge",
            gpu_class="cuml.linear_model:Ridge",
            params=_same("alpha", "fit_intercept", "solver", "max_iter", "tol"),
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
        ),
        ModelSpec(
            name="linear",
            cpu_class="pipeline.models.encoded_linear:LinearClassifier",
            gpu_class="pipeline.models.encoded_linear:LinearClassifier",
            params=_same("C", "alpha", "max_iter", "tol", "class_weight", "one_hot_max", "random_state"),
            param_rules=_linear_param_rules,
            task_param_rules=_linear_task_rules,
            format=LINEAR_COEFFICIENTS,
            tasks=("binary", "multiclass", "regression"),
            regression=EstimatorClasses(cpu="pipeline.models.encoded_linear:LinearRegressor",
                                        gpu="pipeline.models.encoded_linear:LinearRegressor"),
            fit_arguments=linear_fit_arguments,
            description="a linear model on its own encoding of the features: numbers standardised, categorical "
                        "columns one-hot (at most one_hot_max levels) or target encoded; logistic regression "
                        "(C) or ridge (alpha); exported as coefficients and a table per categorical column",
            # It encodes the matrix for itself (numbers standardised, few levels one-hot, many
            # target encoded); logistic regression or ridge.
            portfolio=(PortfolioMember("linear", {"binary": {"C": 1.0, "max_iter": 300},
                                                  "multiclass": {"C": 1.0, "max_iter": 300},
                                                  "regression": {"alpha": 1.0}}, cost=0.3, rank=7, quick=True),),
        ),
        ModelSpec(
            name=MLP_MODEL,
            seed_param=None,
            description="tabular MLP with categorical embeddings (PyTorch; trained by the torch stage)",
            format=TORCH_STATE_DICT,
            tasks=("binary", "multiclass", "regression"),
            portfolio=(PortfolioMember(MLP_MODEL, {"*": {"hidden": [256, 128], "dropout": 0.1, "epochs": 40,
                                                         "batch_size": 512, "learning_rate": 0.003,
                                                         "weight_decay": 1e-5,
                                                         "early_stopping": {"monitor": "val_loss", "patience": 5}}},
                                       trainer="torch", cost=6.0, rank=6),),
        ),
    )
}


def register_model(spec: ModelSpec) -> ModelSpec:
    """Add ``spec`` to the registry (plugin code calls this); an existing name is replaced, so a
    plugin reloaded in a notebook does not fail. Returns ``spec``.

    Examples:
        >>> from pipeline.models import MODELS, ModelSpec, register_model
        >>> spec = register_model(ModelSpec(name="nearest_centroid", cpu_class="sklearn.neighbors:NearestCentroid",
        ...                                 seed_param=None, description="class centroids (scikit-learn)"))
        >>> MODELS["nearest_centroid"] is spec, spec.tasks
        (True, ('binary', 'multiclass'))
        >>> del MODELS["nearest_centroid"]       # the example's model, taken back out
    """
    if not isinstance(spec, ModelSpec):
        raise TypeError(f"register_model takes a ModelSpec, not {type(spec).__name__}")
    if not isinstance(spec.format, ModelFormat):
        raise TypeError(f"model '{spec.name}': format must be a ModelFormat, not {type(spec.format).__name__}")
    MODELS[spec.name] = spec
    return spec


def portfolio_members() -> list[PortfolioMember]:
    """Every configuration of every registered model in ``auto``'s portfolio, in fitting order
    (``rank``, then registration order), read now: a plugin's model is among them."""
    members = [member for spec in MODELS.values() for member in spec.portfolio]
    return sorted(members, key=lambda member: member.rank)


def init_choices(task: str) -> list[tuple[str, InitChoice]]:
    """The models ``init`` writes for ``task``: ``(name, choice)`` by ``rank``, read now."""
    found = [(spec.name, choice) for spec in MODELS.values() for choice in spec.init_choices if task in choice.tasks]
    return sorted(found, key=lambda pair: pair[1].rank)


def meta_model_for(task: str) -> str:
    """The registered model a ``stack`` fits on its members' scores for ``task`` by default."""
    for spec in MODELS.values():
        if task in spec.meta_model_for:
            return spec.name
    raise KeyError(f"no registered model is a stack's default meta-model for a {task} task; name one "
                   "(stages.<name>.model)")


def trainable_models() -> list[str]:
    """Names a ``train`` stage accepts, read now (so models registered later are included)."""
    return sorted(name for name, spec in MODELS.items() if spec.trainable)


def trainable_model_named(model: str) -> str:
    """``model`` if a ``train`` stage can fit it, else a ValueError naming the closest one. Read
    when a config is validated, not at import: plugins register models later."""
    known = trainable_models()
    if model not in known:
        close = difflib.get_close_matches(model, known, n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise ValueError(f"unknown model '{model}' (known: {', '.join(known)}){hint}")
    return model


def checked_params(model: str | None, params: dict[str, Any]) -> dict[str, Any]:
    """``params`` if every key is a parameter of ``model`` (None: not known yet), else a
    ValueError naming each unknown key and its closest valid name."""
    problems = get_model_spec(model).check_params(params) if model else []
    if problems:
        raise ValueError("; ".join(problems))
    return params


def models_for(task: str) -> list[str]:
    """Names a ``train`` stage accepts that serve ``task`` (binary, multiclass, regression)."""
    return sorted(name for name, spec in MODELS.items() if spec.trainable and spec.serves(task))


def get_model_spec(name: str) -> ModelSpec:
    """The entry called ``name``; KeyError with the closest known name otherwise.

    Not cached: a dict lookup is cheap, and a cache would hide models registered later.

    Examples:
        >>> from pipeline.models import get_model_spec
        >>> spec = get_model_spec("xgboost")
        >>> spec.cpu_class, spec.supports_eval_set
        ('xgboost:XGBClassifier', True)
        >>> get_model_spec("xgbost")
        Traceback (most recent call last):
        ...
        KeyError: "unknown model 'xgbost' (known: ...); did you mean 'xgboost'?"
    """
    try:
        return MODELS[name]
    except KeyError:
        close = difflib.get_close_matches(name, list(MODELS), n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise KeyError(f"unknown model '{name}' (known: {', '.join(sorted(MODELS))}){hint}") from None


def _format_of(name: str) -> ModelFormat:
    """A registered model's format: an ensemble saves and loads each member with its own."""
    return get_model_spec(name).format


# Built by the ensemble stage from trained models, not trained (like the MLP, an entry for its
# format). Its format finds members' formats here, so a plugin's model can be a member.
register_model(ModelSpec(
    name=ENSEMBLE_MODEL, seed_param=None, tasks=("binary", "multiclass", "regression"),
    description="weighted average of other models' scores (built by the ensemble stage)",
    format=EnsembleFormat(_format_of),
))

# Built by ``bag:`` on a train stage: k fits of one model on k folds of the training rows,
# averaged; each member is saved in its base model's format.
register_model(ModelSpec(
    name=BAGGED_MODEL, seed_param=None, tasks=("binary", "multiclass", "regression"),
    description="k fits of one model on k folds of the training rows, averaged (built by bag: on a train stage)",
    format=BaggedFormat(_format_of),
))

# Built by the stack stage: a meta-model fitted on its members' out-of-fold scores.
register_model(ModelSpec(
    name=STACKED_MODEL, seed_param=None, tasks=("binary", "multiclass", "regression"),
    description="a meta-model fitted on other models' out-of-fold scores (built by the stack stage)",
    format=StackFormat(_format_of),
))
