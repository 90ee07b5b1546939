"""Estimators as a backend builds and reads them: the estimator class imported (or a clear word
on the install that brings it), whether its constructor takes a Dask ``client``, and what it
predicts turned into the task's scores.
"""

from __future__ import annotations

import contextlib
import importlib
from typing import Any

import numpy as np

from pipeline.core.errors import BackendUnavailable, DataError
from pipeline.core.problems import Task


def import_estimator_module(model: str, module_name: str, extra: str | None = None) -> Any:
    """The estimator's module, or a clear word on which install flavour brings it.

    ``extra``: the optional dependency group that installs the model's library (``lightgbm``,
    ``catboost``: the registry entry's ``extra``), named in the message; None: the library comes
    with the machine's flavour (XGBoost is in the `cpu`, `gpu` and `gpu-cu12` extras, not the
    base requirements).
    """
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if extra:
            raise BackendUnavailable(
                f"model '{model}' needs the Python package '{exc.name}', which is not installed here; install it "
                f"with pipeline's '{extra}' extra, in its checkout: pip install -e '.[{extra}]'") from exc
        raise BackendUnavailable(
            f"model '{model}' needs the Python package '{exc.name}', which is not installed here; "
            "install pipeline with the extra for this machine, in its checkout: pip install -e '.[cpu]' "
            "(or '.[gpu]' for CUDA 13, '.[gpu-cu12]' for CUDA 12); `make setup` does the first") from exc


def task_option(task: str | Task) -> dict[str, str]:
    """``task=`` for a spec's ``class_path`` / ``unavailable``: left out for binary, so a spec
    written before tasks (a plugin's own class, a duck-typed stand-in) still answers there."""
    kind = task.kind if isinstance(task, Task) else str(task)
    return {} if kind == "binary" else {"task": kind}


def takes_client(cls: type) -> bool:
    """Whether ``cls(...)`` names a ``client`` parameter (``**kwargs`` does not count: XGBoost's
    would take it for a booster parameter)."""
    import inspect

    try:
        return "client" in inspect.signature(cls).parameters
    except (TypeError, ValueError):         # no signature to read (a builtin or extension type)
        return False


def estimator_output(estimator: Any, X: Any, task: Task) -> Any:
    """What the estimator predicts for ``task``: ``predict`` for regression, else
    ``predict_proba`` (on the estimator's device; Dask collections stay lazy)."""
    return estimator.predict(X) if task.kind == "regression" else estimator.predict_proba(X)


def scores_for_task(output: Any, task: Task, estimator: Any = None) -> np.ndarray:
    """A host ``predict`` / ``predict_proba`` result in the task's score shape, float64.

    A multiclass model must score every class of the task, in code order: one fitted on a
    training split that lacked a class has fewer columns, and the message names the classes
    (read from the estimator's ``classes_`` where it has them).
    """
    scores = np.asarray(output, dtype="float64")
    if task.kind == "regression":
        return scores.reshape(-1) if scores.ndim == 2 and scores.shape[1] == 1 else scores
    if task.kind == "binary":
        return scores[:, 1] if scores.ndim == 2 else scores
    expected = len(task.classes)
    if scores.ndim != 2 or scores.shape[1] != expected:
        raise DataError(_missing_classes_message(scores, task, estimator))
    return np.ascontiguousarray(scores)


def _missing_classes_message(scores: np.ndarray, task: Task, estimator: Any) -> str:
    """Why a multiclass model's probabilities do not have one column per class of the task."""
    got = scores.shape[1] if scores.ndim == 2 else 1
    fitted = getattr(estimator, "classes_", None)
    missing: list[Any] = []
    if fitted is not None:
        with contextlib.suppress(TypeError, ValueError):
            on_host = fitted.get() if hasattr(fitted, "__cuda_array_interface__") else fitted   # CuPy: copy
            codes = {int(c) for c in np.asarray(on_host).ravel()}
            missing = [value for code, value in enumerate(task.classes) if code not in codes]
    which = (f": the training split has no rows of {', '.join(repr(v) for v in missing)}" if missing
             else " (the training split lacked some of them)")
    return (f"the model scores {got} classes but the task is {task.describe()}{which}. A classifier learns only "
            "the classes it sees: use more data or a stratified split, or merge or drop the rare classes")
