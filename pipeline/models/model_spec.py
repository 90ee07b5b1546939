"""The model contract: what a registry entry says of a model (``ModelSpec``): its estimators
per device and task, how parameters translate, the rules over them, its file format, and what
the stages read of it (``pipeline.models.roles``, ``pipeline.models.steps``).

Users write scikit-learn's parameter names once; an entry renames them for cuML
(``criterion`` -> ``split_criterion``), drops ones that do not exist on the device (and says
so), and fills device defaults. Where a name-by-name mapping is not enough, an entry adds
rules over combinations (a parameter that only acts together with another is refused alone,
never passed on to be ignored) and a per-device rewrite of values. Estimator classes are named
as ``module:Class`` strings so no entry imports a GPU library; the backend imports them.
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pipeline.models.explainers import (
    Explainer,
)
from pipeline.models.formats import (
    SKOPS,
    ModelFormat,
)
from pipeline.models.param_bounds import Bound
from pipeline.models.roles import InitChoice, PortfolioMember
from pipeline.models.steps import (
    Pruning,
    StepsOf,
)

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
    # Params that act on the evaluation set only (XGBoost's ``early_stopping_rounds``: its fit
    # raises without one): refused at their key where the training has no valid rows.
    eval_set_params: tuple[str, ...] = ()
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
    # The range of each parameter (``pipeline.models.param_bounds``) where the library checks
    # none before it fits: refused at validation, and in a tune space before the first trial.
    bounds: Mapping[str, Bound] = field(default_factory=dict)

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
        problems += [problem for _, problem in self.bound_problems(params)]
        if self.param_rules is not None:
            problems += self.param_rules({k: v for k, v in params.items() if k in self.params})
        return problems

    def bound_problems(self, params: Mapping[str, Any]) -> list[tuple[str, str]]:
        """``(param, problem)`` for each value outside the entry's declared ``bounds``."""
        found = []
        for key, value in params.items():
            why = self.bounds[key].problem(value) if key in self.bounds else None
            if why:
                found.append((key, f"parameter '{key}' of model '{self.name}': {why}, not {value!r}"))
        return found

    def value_problems(self, params: Mapping[str, Any]) -> list[tuple[str, str]]:
        """``(param, problem)`` for text (or true/false) where the CPU estimator's constructor
        annotates a number (``n_estimators: abc``): XGBoost and LightGBM check a value's type
        only deep in their fit, a TypeError naming no key; and for a value scikit-learn's
        parameter constraints refuse (``C: high``, ``C: -1``). Read from the estimator class, so
        it imports the model's library: the config's checks (``validate``, and a run's before its
        first stage) ask it through ``TrainSpec.preview_problems``, and ``train`` once more before
        fitting. A parameter without an annotation or a constraint, or an estimator that does not
        import, is not checked. The entry's own ``bounds`` come first."""
        problems = self.bound_problems(params)
        path = next(filter(None, (self.class_path("cpu", task=task) for task in self.tasks)), None)
        cls = _class_at(path) if path else None
        if cls is None:
            return problems
        numbers = _annotated_numbers(cls)
        bounded = {key for key, _ in problems}
        for key, value in params.items():
            target = self.params[key][0] if key in self.params else None
            if target is None or key in bounded:
                continue
            kind = numbers.get(target)
            if kind and (isinstance(value, bool) or not isinstance(value, (int, float))) and value is not None:
                problems.append((key, f"parameter '{key}' of model '{self.name}' takes {kind}, not {value!r}"))
                continue
            why = _constraint_problem(cls, target, value)
            if why:
                problems.append((key, f"parameter '{key}' of model '{self.name}': {why}"))
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


def same(*names: str) -> dict[str, tuple[str, str]]:
    return {n: (n, n) for n in names}


def cpu_only(*names: str) -> dict[str, tuple[str, None]]:
    return {n: (n, None) for n in names}


def gpu_only(*names: str) -> dict[str, tuple[None, str]]:
    return {n: (None, n) for n in names}


# The registry itself: name -> entry (``pipeline.models.registry`` adds to it and reads it;
# ``pipeline.models.catalogue`` registers the built-in entries). Here, beside the contract, so an
# entry's messages can name the models that could serve instead.
MODELS: dict[str, ModelSpec] = {}


def models_for(task: str) -> list[str]:
    """Names a ``train`` stage accepts that serve ``task`` (binary, multiclass, regression)."""
    return sorted(name for name, spec in MODELS.items() if spec.trainable and spec.serves(task))


@functools.lru_cache(maxsize=64)
def _class_at(path: str) -> type | None:
    """The class at ``module:Class`` (None where it does not import here)."""
    import importlib

    module, _, name = path.partition(":")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None


def _constraint_problem(cls: type, param: str, value: Any) -> str | None:
    """What scikit-learn's own parameter constraints (``_parameter_constraints``, which its
    estimators check as they fit) say of ``value`` for ``param`` of ``cls``: asked before the
    fit, and of each value a tune space may draw, not after the stages before it ran or as a
    failed trial. None where it accepts it or the class has no constraints."""
    constraints = getattr(cls, "_parameter_constraints", None)
    if not isinstance(constraints, dict) or param not in constraints:
        return None
    try:
        from sklearn.utils._param_validation import InvalidParameterError, validate_parameter_constraints
    except ImportError:
        return None
    try:
        validate_parameter_constraints({param: constraints[param]}, {param: value}, caller_name=cls.__name__)
    except InvalidParameterError as exc:
        return str(exc)
    except Exception:  # noqa: BLE001 - a constraint this scikit-learn cannot read: the fit checks it
        return None
    return None


@functools.lru_cache(maxsize=64)
def _annotated_numbers(cls: type) -> dict[str, str]:
    """Constructor parameters of ``cls`` annotated as a number (``int``, ``float``, or either or
    None), over its base classes (XGBoost's classifier passes its ``**kwargs`` to ``XGBModel``):
    name -> "an integer" or "a number"."""
    import inspect
    import types
    import typing

    found: dict[str, str] = {}
    for klass in reversed(inspect.getmro(cls)):
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        try:
            hints = typing.get_type_hints(init)
        except Exception:                      # an annotation that does not resolve here: not checked
            continue
        for param, hint in hints.items():
            args = set(typing.get_args(hint)) - {type(None)} if typing.get_origin(hint) in (typing.Union,
                                                                                              types.UnionType) else {hint}
            if args == {int}:
                found[param] = "an integer"
            elif args and args <= {int, float}:
                found[param] = "a number"
            else:
                found.pop(param, None)
    return found
