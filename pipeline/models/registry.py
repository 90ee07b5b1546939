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
Parquet, how ``export`` writes it and ``predict`` reads it back) is a field of the entry, so
plugin code adds a model with ``register_model`` and no module here names it.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pipeline.models.formats import LINEAR_COEFFICIENTS, SKOPS, TORCH_STATE_DICT, XGBOOST_JSON, ModelFormat

# common name -> (name on CPU, name on GPU); None = the device has no such parameter.
ParamMap = Mapping[str, tuple[str | None, str | None]]
# The user's params (known names only) -> problems, each naming the keys involved.
ParamRules = Callable[[Mapping[str, Any]], list[str]]
# (device, translated kwargs, the user's params) -> the kwargs that device's estimator takes.
ParamAdapter = Callable[[str, dict[str, Any], Mapping[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class ModelSpec:
    """One registry entry. ``cpu_class``/``gpu_class`` None: no estimator there (the MLP is
    trained by its own stage and is an entry only for its file format)."""

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

    @property
    def trainable(self) -> bool:
        """Whether a ``train`` stage can fit it (it has an estimator class somewhere)."""
        return self.cpu_class is not None or self.gpu_class is not None

    def class_path(self, device: str, *, distributed: bool = False) -> str | None:
        if distributed:
            return self.dask_cpu_class if device == "cpu" else self.dask_gpu_class
        return self.cpu_class if device == "cpu" else self.gpu_class

    def unavailable(self, device: str, *, distributed: bool = False) -> str:
        """Why this model has no estimator on ``device`` (and what to use instead)."""
        if not distributed:
            return (f"model '{self.name}' has no estimator on the {device.upper()}"
                    + ("; it is trained by its own stage kind" if not self.trainable else ""))
        others = ", ".join(name for name, s in MODELS.items() if s.class_path(device, distributed=True))
        return (f"model '{self.name}' cannot train on partitioned data on the {device.upper()} "
                f"(no distributed {self.name} there). Use one that can ({others}), or load the data "
                "without partitioned: true if it fits in one process"
                + (", or run on GPUs, where cuML trains it with cuml.dask"
                   if self.class_path("gpu", distributed=True) and device == "cpu" else ""))

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


# XGBoost's sklearn API is the same on both devices; only `device` differs.
_XGB_PARAMS = _same(
    "n_estimators", "max_depth", "max_leaves", "max_bin", "grow_policy", "learning_rate",
    "objective", "booster", "tree_method", "n_jobs", "gamma", "min_child_weight",
    "max_delta_step", "subsample", "sampling_method", "colsample_bytree", "colsample_bylevel",
    "colsample_bynode", "reg_alpha", "reg_lambda", "scale_pos_weight", "base_score",
    "random_state", "missing", "num_parallel_tree", "max_cat_to_onehot", "eval_metric",
    "early_stopping_rounds", "validate_parameters",
)

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
            description="random forest (cuML on GPU, scikit-learn on CPU)",
            # cuml.dask trains n_estimators / workers trees on each worker's partitions.
            dask_gpu_class="cuml.dask.ensemble:RandomForestClassifier",
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
        ),
        ModelSpec(
            name="mlp",
            seed_param=None,
            description="tabular MLP with categorical embeddings (PyTorch; trained by the torch stage)",
            format=TORCH_STATE_DICT,
        ),
    )
}


def register_model(spec: ModelSpec) -> ModelSpec:
    """Add ``spec`` to the registry (plugin code calls this); an existing name is replaced, so a
    plugin reloaded in a notebook does not fail. Returns ``spec``."""
    if not isinstance(spec, ModelSpec):
        raise TypeError(f"register_model takes a ModelSpec, not {type(spec).__name__}")
    if not isinstance(spec.format, ModelFormat):
        raise TypeError(f"model '{spec.name}': format must be a ModelFormat, not {type(spec.format).__name__}")
    MODELS[spec.name] = spec
    return spec


def trainable_models() -> list[str]:
    """Names a ``train`` stage accepts, read now (so models registered later are included)."""
    return sorted(name for name, spec in MODELS.items() if spec.trainable)


def get_model_spec(name: str) -> ModelSpec:
    """The entry called ``name``; KeyError with the closest known name otherwise.

    Not cached: a dict lookup is cheap, and a cache would hide models registered later.
    """
    try:
        return MODELS[name]
    except KeyError:
        close = difflib.get_close_matches(name, list(MODELS), n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise KeyError(f"unknown model '{name}' (known: {', '.join(sorted(MODELS))}){hint}") from None
