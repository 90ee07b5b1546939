"""``check_model``: a registry model run through the contract ``train``, ``export``, ``predict``
and Dask workers rely on (``pipeline.models.registry``, ``pipeline.models.formats``), on a tiny
deterministic dataset, on the CPU backend, in about a second.

What it checks, each failure an ``AssertionError`` naming the model and the check:

- ``registry entry``: a name, tasks among binary / multiclass / regression, a ``ModelFormat``
  with a name of its own, params that map a common name to a (CPU name, GPU name) pair;
- ``pickle (registry entry)``: the entry pickles and unpickles equal (Dask workers receive it);
- ``API names``: every ``module:Class`` it names is well formed; the GPU ones are checked as
  strings only (no GPU library is imported), the CPU ones name modules installed here;
- ``refuses unknown params``: ``check_params`` refuses an unknown parameter by name, and so
  does a ``train`` stage's block through the config loader (``stages.<stage>.params``);

then for each task it serves (or the one ``task=`` names):

- ``build``: the CPU backend constructs its estimator from the translated params, and every
  parameter name it translates to is one that estimator has (``get_params``);
- ``fit``: it fits a tiny dataset (with an evaluation set where the entry says it takes one),
  reporting its steps where the entry counts them (``fit_steps``);
- ``predict``: scores in the task's shape (a vector of probabilities, an ``n x K`` matrix
  whose rows sum to 1, a vector of values), finite;
- ``importances``: what its own explainer returns names every feature with a finite number;
- ``pickle``: the fitted estimator pickles and scores the same after;
- ``file format``: the entry's format writes files inside the model folder and ``model.json``
  keys that are JSON, and lists the files it wrote;
- ``file format round trip``: the files load back (with and without a backend chosen) into a
  predictor that pickles and whose scores equal the fitted estimator's, within float tolerance;
- ``damaged file``: a main model file overwritten with junk is refused with ``DataError``.

A model with no CPU estimator (trained by its own stage kind, as the MLP, or built from other
models, as an ensemble) is checked with what ``fitted=`` returns instead of a fitted estimator.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.backends import Backend, get_backend
from pipeline.core.errors import DataError
from pipeline.core.problems import TASK_KINDS, Task
from pipeline.models.formats import ModelFormat
from pipeline.models.registry import MODELS, FitInputs, ModelSpec, get_model_spec
from pipeline.testing.failures import (
    Check, ConformanceFailure, Prerequisites, first_line, pickled, registered_while_checked, run_checks,
)

__all__ = ["TASKS", "Fitted", "check_model", "model_checks", "tiny_dataset"]

# The task of each kind the check fits (multiclass: three classes).
TASKS: dict[str, Task] = {
    "binary": Task("binary"),
    "multiclass": Task("multiclass", classes=("a", "b", "c")),
    "regression": Task("regression"),
}
ROWS, TRAIN_ROWS, FEATURES = 90, 60, 4
UNKNOWN_PARAM = "not_a_param_of_this_model"
# Scores read back from a model file may differ from the fitted estimator's by float rounding.
RTOL, ATOL = 1e-5, 1e-6
CLASS_PATH = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*$")
JUNK = b"this is not a model file\n"

# ``fitted(task, X, y)``: a fitted estimator of the model for an entry without a CPU estimator
# to build, or ``(estimator, score)`` where ``score(X)`` gives its scores in the task's shape
# (for an estimator that has no ``predict_proba`` / ``predict`` of its own).
Fitted = Callable[[Task, np.ndarray, np.ndarray], Any]


def check_model(model: str | ModelSpec, *, task: str | None = None, params: Mapping[str, Any] | None = None,
                fitted: Fitted | None = None) -> None:
    """Run a model (its registered name, or a ``ModelSpec``) through the contract; None when it
    holds, else ``AssertionError`` naming the model and the check.

    ``task``: check that task only (it must be one the entry serves); default every task it
    serves. ``params``: the user's hyper-parameters for the fit (small ones keep it fast: a
    forest of 10 trees), which the entry must accept. ``fitted``: for an entry without a CPU
    estimator, makes the fitted estimator (see ``Fitted``); it replaces the build and fit.
    A ``ModelSpec`` not in the registry is registered while the check runs, then removed.

    Examples:
        >>> from pipeline.testing import check_model
        >>> check_model("logistic_regression", task="binary")     # None: the model keeps the contract
    """
    run_checks(model_checks(model, task=task, params=params, fitted=fitted))


def model_checks(model: str | ModelSpec, *, task: str | None = None, params: Mapping[str, Any] | None = None,
                 fitted: Fitted | None = None) -> list[Check]:
    """``check_model``'s checks, one ``Check`` each, for ``parametrize_with_checks``: ``entry``,
    ``API names``, ``params``, ``unknown params``, then one per task it serves (``binary``:
    build, fit, predict, importances, pickle and the file format on that task's tiny data).

    Examples:
        >>> from pipeline.testing import model_checks
        >>> [check.id for check in model_checks("random_forest", params={"n_estimators": 5})]
        ['registry entry', 'API names', 'params', 'unknown params', 'binary', 'multiclass', 'regression', 'roles']
    """
    try:
        spec = _spec(model)
    except ConformanceFailure as failure:               # not registered: that check alone
        missing = failure
        return [Check(missing.extension, "registered", lambda: _raise(missing))]
    label = f"model '{spec.name}'"
    params = dict(params or {})
    steps = Prerequisites()

    def entry() -> None:
        steps.get("entry", lambda: _check_entry(spec, label))

    def given_params() -> None:
        def check() -> None:
            problems = spec.check_params(params)
            if problems:
                raise ConformanceFailure(label, "params", f"the params given to the check are refused: "
                                                          f"{'; '.join(problems)}")
            if task is not None and (task not in TASK_KINDS or not spec.serves(task)):
                raise ConformanceFailure(label, "task", f"task {task!r} is not one it serves "
                                                          f"({', '.join(spec.tasks)})")
        steps.get("params", check)

    def unknown_params() -> None:
        entry()
        with _registered(spec):
            _check_unknown_params(spec, label)

    def one_task(name: str) -> Callable[[], None]:
        def run() -> None:
            entry()
            given_params()
            with _registered(spec):
                _check_task(spec, TASKS[name], params, fitted, get_backend("cpu"), label)
        return run

    def roles() -> None:
        entry()
        _check_roles(spec, label)

    def pruning() -> None:
        entry()
        with _registered(spec):
            _check_pruning(spec, label)

    tasks = [task] if task is not None and task in spec.tasks else list(spec.tasks) if task is None else []
    return [Check(label, "registry entry", entry, owns=("entry",)), Check(label, "API names", lambda: _check_api_names(spec, label)),
            Check(label, "params", given_params), Check(label, "unknown params", unknown_params),
            *(Check(label, name, one_task(name)) for name in tasks), Check(label, "roles", roles),
            *([Check(label, "pruning", pruning)] if spec.pruning is not None else [])]


def _check_roles(spec: ModelSpec, label: str) -> None:
    """What the stages read of the entry (``pipeline.models.roles``): each portfolio member is
    this model, for tasks it serves, with parameters it accepts for each (a member trained by
    the registry's ``train_model``); each init choice the same; a default meta-model only for tasks it serves."""
    def fail(detail: str) -> None:
        raise ConformanceFailure(label, "roles", detail)

    for member in spec.portfolio:
        if member.model != spec.name:
            fail(f"its portfolio member {member.label} names model '{member.model}', not '{spec.name}'")
        for task in member.tasks:
            if not spec.serves(task):
                fail(f"its portfolio member {member.label} is for {task}, a task it does not serve")
            if member.trainer != "registry":           # the torch stage's own params: its spec checks them
                continue
            problems = [*spec.check_params(member.params_for(task)), *spec.task_problems(task, member.params_for(task))]
            if problems:
                fail(f"its portfolio member {member.label} has params it refuses for {task}: {'; '.join(problems)}")
    for choice in spec.init_choices:
        for task in choice.tasks:
            problems = [] if spec.serves(task) else [f"{task} is a task it does not serve"]
            problems += [*spec.check_params(dict(choice.params)), *spec.task_problems(task, dict(choice.params))]
            if problems:
                fail(f"its init choice for {task} is refused: {'; '.join(problems)}")
    unserved = [task for task in spec.meta_model_for if not spec.serves(task)]
    if unserved:
        fail(f"it is a stack's default meta-model for {unserved}, tasks it does not serve")


def _check_pruning(spec: ModelSpec, label: str) -> None:
    """An entry's ``pruning``: ``attach(report)`` gives constructor keyword arguments, and a fit
    with them on its first task's tiny data reports a finite metric each step, as tuning needs."""
    task = TASKS[spec.tasks[0]]
    if spec.class_path("cpu", task=task.kind) is None:
        return                                       # nothing to fit here: the task checks say so
    reported: list[float] = []

    def report(step: int, value: float, *, higher_is_better: bool) -> None:
        reported.append(value)

    attached = _attempt(label, "pruning", "attach(report)", lambda: spec.pruning.attach(report))
    if not isinstance(attached, Mapping) or not all(isinstance(key, str) for key in attached):
        raise ConformanceFailure(label, "pruning", f"attach(report) returned {attached!r}, not constructor "
                                                   "keyword arguments")
    X, y = tiny_dataset(task)
    backend = get_backend("cpu")
    kwargs, _ = _attempt(label, "pruning", "translating params for the CPU", lambda: spec.translate({}, "cpu", seed=0))
    estimator = _attempt(label, "pruning", "building the estimator with the pruning arguments",
                         lambda: backend.estimator(spec, {**kwargs, **attached}, task=task.kind))
    fit_kwargs = spec.fit_kwargs(FitInputs(eval_set=(X[TRAIN_ROWS:], y[TRAIN_ROWS:]),
                                           feature_names=tuple(f"feature_{i}" for i in range(X.shape[1]))))
    _attempt(label, "pruning", f"fit on {TRAIN_ROWS} rows with the pruning arguments",
             lambda: estimator.fit(X[:TRAIN_ROWS], y[:TRAIN_ROWS], **fit_kwargs))
    if not reported or not np.isfinite(reported).all():
        raise ConformanceFailure(label, "pruning", f"the fit reported {reported[:5]!r}: tuning needs a finite "
                                                   "validation metric after each step")


def _raise(failure: ConformanceFailure) -> None:
    raise failure


def tiny_dataset(task: Task) -> tuple[np.ndarray, np.ndarray]:
    """``ROWS`` rows of ``FEATURES`` float32 features and labels of ``task`` (int32 codes, or
    float32 values for regression), the same on every call; every class is present in the
    first ``TRAIN_ROWS`` rows (the training part) and in the rest (the evaluation part)."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(ROWS, FEATURES)).astype("float32")
    noise = rng.normal(scale=0.5, size=(ROWS, 3))
    if task.kind == "regression":
        return X, (X @ np.array([1.0, -2.0, 0.5, 0.0]) + noise[:, 0] * 0.2).astype("float32")
    if task.kind == "binary":
        return X, (X @ np.array([1.5, -1.0, 0.5, 0.0]) + noise[:, 0] > 0).astype("int32")
    weights = np.array([[2.0, -1.0, 0.0], [0.0, 1.5, -1.5], [0.5, 0.0, 1.0], [0.0, 0.0, 0.0]])
    return X, np.argmax(X @ weights + noise[:, : len(task.classes)], axis=1).astype("int32")


# ---------------------------------------------------------------- the entry
def _spec(model: str | ModelSpec) -> ModelSpec:
    if isinstance(model, ModelSpec):
        return model
    if not isinstance(model, str):
        raise TypeError(f"check_model takes a model's name or its ModelSpec, not {type(model).__name__}")
    try:
        return get_model_spec(model)
    except KeyError as exc:
        raise ConformanceFailure(f"model '{model}'", "registered", f"{exc.args[0]}; import the module that calls "
                                                                   "register_model first") from None


def _registered(spec: ModelSpec) -> Any:
    """``spec`` in ``MODELS`` while the check runs (a block validates against it)."""
    return registered_while_checked(MODELS, spec.name, spec)


def _check_entry(spec: ModelSpec, label: str) -> None:
    def fail(detail: str) -> None:
        raise ConformanceFailure(label, "registry entry", detail)

    if not isinstance(spec.name, str) or not spec.name.strip():
        fail(f"the name must be a non-empty string, not {spec.name!r}")
    tasks = spec.tasks
    if not isinstance(tasks, tuple) or not tasks or len(set(tasks)) < len(tasks) \
            or any(t not in TASK_KINDS for t in tasks):
        fail(f"tasks must be a tuple of distinct task kinds among {', '.join(TASK_KINDS)}, not {tasks!r}")
    model_format = spec.format
    if not isinstance(model_format, ModelFormat):
        fail(f"format must be a ModelFormat, not {type(model_format).__name__}")
    if not isinstance(model_format.name, str) or not model_format.name or model_format.name == ModelFormat.name:
        fail(f"its format {type(model_format).__name__} must set a name of its own (model.json records it), not "
             f"{model_format.name!r}")
    for key, pair in spec.params.items():
        if not isinstance(key, str) or not (isinstance(pair, tuple) and len(pair) == 2) \
                or not all(name is None or isinstance(name, str) for name in pair):
            fail(f"params must map a name to (CPU name or None, GPU name or None), not {key!r}: {pair!r}")
    if spec.seed_param is not None and not isinstance(spec.seed_param, str):
        fail(f"seed_param must be a parameter name or None, not {spec.seed_param!r}")
    try:
        back = pickled(spec)
    except Exception as exc:  # noqa: BLE001
        raise ConformanceFailure(label, "pickle (registry entry)",
                                 f"the registry entry does not pickle ({first_line(exc)}); Dask workers receive it: "
                                 "its functions and format must be defined at module level") from None
    if back != spec:
        raise ConformanceFailure(label, "pickle (registry entry)", "the registry entry unpickles unequal (its format "
                                                                   "or functions do not compare equal by value)")


def _class_paths(spec: ModelSpec) -> dict[str, str | None]:
    paths = {"cpu_class": spec.cpu_class, "gpu_class": spec.gpu_class,
             "dask_cpu_class": spec.dask_cpu_class, "dask_gpu_class": spec.dask_gpu_class}
    if spec.regression is not None:
        paths.update({f"regression.{key}": getattr(spec.regression, key)
                      for key in ("cpu", "gpu", "dask_cpu", "dask_gpu")})
    return paths


def _check_api_names(spec: ModelSpec, label: str) -> None:
    """``module:Class`` strings; a CPU one's module must be installed (a GPU one is not imported)."""
    for key, path in _class_paths(spec).items():
        if path is None:
            continue
        if not isinstance(path, str) or not CLASS_PATH.match(path):
            raise ConformanceFailure(label, "API names", f"{key} must be a 'module.path:Class' string, not {path!r}")
        if "gpu" in key:
            continue
        module = path.partition(":")[0]
        if module in sys.modules:               # imported already (a script's own __main__ too)
            continue
        try:
            found = importlib.util.find_spec(module)
        except (ImportError, ValueError) as exc:
            found, why = None, first_line(exc)
        else:
            why = "no such module"
        if found is None:
            raise ConformanceFailure(label, "API names", f"{key} names module '{module}', which cannot be imported on "
                                                         f"the CPU here ({why})")


def _check_unknown_params(spec: ModelSpec, label: str) -> None:
    problems = spec.check_params({UNKNOWN_PARAM: 1})
    if not any(UNKNOWN_PARAM in problem for problem in problems):
        raise ConformanceFailure(label, "refuses unknown params", f"check_params accepts an unknown parameter "
                                                                  f"'{UNKNOWN_PARAM}' (it said {problems!r})")
    from pipeline.stages.spec import STAGE_KINDS

    if not spec.trainable or "train" not in STAGE_KINDS:
        return
    from pipeline.testing.stage_kinds import STAGE, load_block

    block = {"kind": "train", "inputs": ["input_0"], "model": spec.name, "params": {UNKNOWN_PARAM: 1}}
    config, error = load_block(block, label, "a train stage with an unknown parameter")
    where = f"stages.{STAGE}.params.{UNKNOWN_PARAM}"
    issues = [] if error is None else [i for i in error.issues if i.path == where and UNKNOWN_PARAM in i.message]
    if not issues or issues[0].line is None:
        said = "accepted it" if error is None else "; ".join(str(i) for i in error.issues)
        raise ConformanceFailure(label, "refuses unknown params", f"a train stage with params {{{UNKNOWN_PARAM}: 1}} "
                                                                  f"is not refused at {where} with a line: {said}")


# ---------------------------------------------------------------- one task
def _check_task(spec: ModelSpec, task: Task, params: dict[str, Any], fitted: Fitted | None, backend: Backend,
                label: str) -> None:
    X, y = tiny_dataset(task)
    train = slice(0, TRAIN_ROWS)
    if fitted is not None:
        estimator, score = _from_fitted(fitted, task, X[train], y[train], label)
    elif spec.class_path("cpu", task=task.kind) is None:
        raise ConformanceFailure(label, f"build ({task.kind})",
                                 f"it has no CPU estimator for {task.kind} "
                                 f"({spec.unavailable('cpu', task=task.kind)}); pass fitted=... to check a model "
                                 "trained elsewhere")
    else:
        estimator = _fit(spec, task, params, X, y, backend, label)
        score = None

    def scores(model: Any) -> np.ndarray:
        return score(X) if score is not None and model is estimator else backend.predict_scores(model, X, task)

    original = _check_predict(spec, task, scores, estimator, X, label)
    if spec.explain is not None:
        _check_importances(spec, task, estimator, X, label)
    again = _attempt(label, f"pickle ({task.kind})", "pickling the fitted estimator", lambda: pickled(estimator))
    if score is None:
        _check_same(label, f"pickle ({task.kind})", "the unpickled estimator's scores",
                    _attempt(label, f"pickle ({task.kind})", "scoring the unpickled estimator", lambda: scores(again)),
                    original)
    _check_format(spec, task, estimator, X, original, backend, label)


def _attempt(label: str, check: str, doing: str, call: Callable[[], Any]) -> Any:
    try:
        return call()
    except ConformanceFailure:
        raise
    except Exception as exc:  # noqa: BLE001 - what failed is what the check reports
        raise ConformanceFailure(label, check, f"{doing} raised {first_line(exc)}") from exc


def _from_fitted(fitted: Fitted, task: Task, X: np.ndarray, y: np.ndarray,
                 label: str) -> tuple[Any, Callable[[np.ndarray], np.ndarray] | None]:
    made = _attempt(label, f"fit ({task.kind})", "fitted(task, X, y)", lambda: fitted(task, X, y))
    if isinstance(made, tuple) and len(made) == 2 and callable(made[1]):
        return made[0], made[1]
    return made, None


def _fit(spec: ModelSpec, task: Task, params: dict[str, Any], X: np.ndarray, y: np.ndarray, backend: Backend,
         label: str) -> Any:
    """Build and fit as ``train_model`` does: translated params, the backend's estimator, an
    evaluation set where the entry takes one, the step callback where it counts steps."""
    check = f"build ({task.kind})"
    refused = spec.task_problems(task.kind, params)
    if refused:
        raise ConformanceFailure(label, "params", f"the params given to the check are refused for {task.kind}: "
                                                  f"{'; '.join(refused)}")
    kwargs, _ = _attempt(label, check, "translating params for the CPU",
                         lambda: spec.translate(params, "cpu", seed=0))
    steps = _attempt(label, f"fit steps ({task.kind})", "fit_steps(kwargs)",
                     lambda: spec.fit_steps(kwargs)) if spec.fit_steps is not None else None
    advanced: list[int] = []
    attached = _attempt(label, f"fit steps ({task.kind})", "attaching the step callback",
                        lambda: dict(steps.attach(advanced.append))) if steps is not None else {}
    estimator = _attempt(label, check, "the CPU backend building the estimator",
                         lambda: backend.estimator(spec, {**kwargs, **attached}, task=task.kind))
    _check_param_names(spec, task, estimator, kwargs, label)
    takes_eval = spec.supports_eval_set or spec.fit_arguments is not None
    fit_kwargs = spec.fit_kwargs(FitInputs(eval_set=(X[TRAIN_ROWS:], y[TRAIN_ROWS:]) if takes_eval else None,
                                           feature_names=tuple(f"feature_{i}" for i in range(X.shape[1])),
                                           params=dict(params)))
    _attempt(label, f"fit ({task.kind})", f"fit on {TRAIN_ROWS} rows",
             lambda: estimator.fit(X[:TRAIN_ROWS], y[:TRAIN_ROWS], **fit_kwargs))
    if steps is not None:
        _attempt(label, f"fit steps ({task.kind})", "set_params removing the step callback",
                 lambda: estimator.set_params(**{key: kwargs.get(key) for key in attached}))
        total = sum(advanced)
        if not isinstance(steps.total, int) or steps.total <= 0 or not 0 < total <= steps.total:
            raise ConformanceFailure(label, f"fit steps ({task.kind})",
                                     f"the fit reported {total} step(s) of a planned {steps.total!r}")
    return estimator


def _check_param_names(spec: ModelSpec, task: Task, estimator: Any, kwargs: Mapping[str, Any], label: str) -> None:
    """Every CPU name the entry translates to (and its defaults) is a parameter of the estimator,
    but for those the task's own rules refuse (a classifier's class_weight for regression)."""
    get_params = getattr(estimator, "get_params", None)
    if not callable(get_params):
        return
    known = set(_attempt(label, f"build ({task.kind})", "get_params()", lambda: get_params(deep=False)))
    names = {cpu: common for common, (cpu, _) in spec.params.items()
             if cpu is not None and not spec.task_problems(task.kind, {common: None})}
    names.update({key: key for key in kwargs if key not in names})
    unknown = sorted(f"{common} -> {cpu}" if common != cpu else cpu
                     for cpu, common in names.items() if cpu not in known)
    if unknown:
        raise ConformanceFailure(label, f"build ({task.kind})", f"{type(estimator).__name__} has no parameter(s) "
                                 f"{', '.join(unknown)} that the entry passes on the CPU")


def _check_predict(spec: ModelSpec, task: Task, scores: Callable[[Any], np.ndarray], estimator: Any, X: np.ndarray,
                   label: str) -> np.ndarray:
    check = f"predict ({task.kind})"
    found = np.asarray(_attempt(label, check, "scoring", lambda: scores(estimator)))
    expected = (len(X), task.n_outputs) if task.kind == "multiclass" else (len(X),)
    if found.shape != expected:
        raise ConformanceFailure(label, check, f"scores of {len(X)} rows have shape {found.shape}, not {expected}")
    if not np.isfinite(found).all():
        raise ConformanceFailure(label, check, "scores are not all finite numbers")
    if task.is_classification and ((found < 0).any() or (found > 1).any()):
        raise ConformanceFailure(label, check, "class probabilities fall outside [0, 1]")
    if task.kind == "multiclass" and not np.allclose(found.sum(axis=1), 1.0, atol=1e-4):
        raise ConformanceFailure(label, check, "a row's class probabilities do not sum to 1")
    return found


def _check_importances(spec: ModelSpec, task: Task, estimator: Any, X: np.ndarray, label: str) -> None:
    check = f"importances ({task.kind})"
    names = [f"feature_{i}" for i in range(X.shape[1])]
    found = _attempt(label, check, "its explainer", lambda: spec.explain(estimator, X, names))
    if not isinstance(found, dict) or not found:
        raise ConformanceFailure(label, check, f"the explainer must return {{kind: {{feature: value}}}}, not {found!r}")
    for kind, values in found.items():
        if not isinstance(values, dict) or set(values) != set(names) \
                or not all(isinstance(v, (int, float)) and np.isfinite(v) for v in values.values()):
            raise ConformanceFailure(label, check, f"importances {kind!r} must give every feature a finite number, "
                                                   f"not {values!r}")


def _check_same(label: str, check: str, what: str, found: Any, original: np.ndarray) -> None:
    found = np.asarray(found, dtype="float64")
    if found.shape != original.shape:
        raise ConformanceFailure(label, check, f"{what} have shape {found.shape}, not {original.shape}")
    if not np.allclose(found, original, rtol=RTOL, atol=ATOL):
        worst = float(np.max(np.abs(found - original)))
        raise ConformanceFailure(label, check, f"{what} differ from the fitted estimator's (by up to {worst:.3g}): the "
                                               "fitted state was not kept")


# ---------------------------------------------------------------- the file format
def _check_format(spec: ModelSpec, task: Task, estimator: Any, X: np.ndarray, original: np.ndarray,
                  backend: Backend, label: str) -> None:
    model_format = spec.format
    check, trip = f"file format ({task.kind})", f"file format round trip ({task.kind})"
    with tempfile.TemporaryDirectory(prefix="conformance-") as tmp:
        folder = Path(tmp) / spec.name
        folder.mkdir()
        written, extra = _attempt(label, check, f"{type(model_format).__name__}.save",
                                  lambda: model_format.save(estimator, folder, backend=backend))
        files = []
        for path in written:
            path = Path(path)
            if not path.is_file() or not path.resolve().is_relative_to(folder.resolve()):
                raise ConformanceFailure(label, check, f"save returned {path}, which is not a file inside the model "
                                                       "folder")
            files.append(path.resolve().relative_to(folder.resolve()).as_posix())
        if not isinstance(extra, dict) or not isinstance(extra.get("file"), str):
            raise ConformanceFailure(label, check, f"save must return model.json keys with 'file' (the main file), "
                                                   f"not {extra!r}")
        meta = {"name": spec.name, "model": spec.name, "task": task.to_dict(), **extra, "format": model_format.name,
                "files": files}
        try:
            meta = json.loads(json.dumps(meta, allow_nan=False))
        except (TypeError, ValueError) as exc:
            raise ConformanceFailure(label, check, f"the model.json keys it returns are not JSON ({first_line(exc)})"
                                     ) from None
        listed = _attempt(label, check, "files(meta)", lambda: model_format.files(meta))
        if sorted(listed) != sorted(files):
            raise ConformanceFailure(label, check, f"files(meta) lists {sorted(listed)}, not the files save wrote "
                                                   f"{sorted(files)}")
        for chosen in (None, backend):
            doing = f"load(backend={'None' if chosen is None else chosen.name!r})"
            predictor = _attempt(label, trip, doing, lambda: model_format.load(folder, meta, backend=chosen))
            _check_same(label, trip, f"scores of the model loaded by {doing}",
                        _attempt(label, trip, "scoring the loaded model", lambda: predictor(X, None)), original)
        _check_same(label, trip, "scores of the loaded model after pickling",
                    _attempt(label, trip, "pickling the loaded model's predictor", lambda: pickled(predictor)(X, None)),
                    original)
        _check_damaged(model_format, folder, meta, X, task, label)


def _check_damaged(model_format: ModelFormat, folder: Path, meta: dict[str, Any], X: np.ndarray, task: Task,
                   label: str) -> None:
    check = f"damaged file ({task.kind})"
    main = model_format.main_file(folder, meta)
    main.write_bytes(JUNK)
    try:
        model_format.load(folder, meta, backend=None)(X, None)
    except DataError:
        return
    except Exception as exc:  # noqa: BLE001
        raise ConformanceFailure(label, check, f"loading a damaged {main.name} raised {first_line(exc)}; a format must "
                                               "raise DataError for a file it cannot read") from None
    raise ConformanceFailure(label, check, f"a damaged {main.name} loaded and scored without an error")
