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


def scores_for_task(output: Any, task: Task, estimator: Any = None, rows: int | None = None) -> np.ndarray:
    """A host ``predict`` / ``predict_proba`` result in the task's score shape, float64, checked
    (``check_scores``: ``rows`` of them where the caller knows how many it asked for).

    A multiclass model must score every class of the task, in code order: one fitted on a
    training split that lacked a class has fewer columns, and the message names the classes
    (read from the estimator's ``classes_`` where it has them).
    """
    scores = np.asarray(output, dtype="float64")
    if task.kind == "regression":
        scores = scores.reshape(-1) if scores.ndim == 2 and scores.shape[1] == 1 else scores
    elif task.kind == "binary":
        if scores.ndim == 2 and scores.shape[1] != 2:
            raise DataError(f"{_named(estimator)} gave {scores.shape[1]} probability column(s) for a binary task; "
                            "predict_proba must give two, the negative class's then the positive's")
        scores = scores[:, 1] if scores.ndim == 2 else scores
    else:
        if scores.ndim != 2 or scores.shape[1] != len(task.classes):
            raise DataError(_missing_classes_message(scores, task, estimator))
        scores = np.ascontiguousarray(scores)
    check_scores(scores, task, estimator, rows)
    return scores


# How far a probability may stray past 0 or 1 by rounding (a float32 softmax) and still be one,
# and how far a row of class probabilities may add up away from 1 (26 float32 terms).
PROBABILITY_SLACK = 1e-6
ROW_SUM_SLACK = 1e-4


def check_scores(scores: np.ndarray, task: Task, estimator: Any = None, rows: int | None = None) -> None:
    """Scores a metric and a threshold can read: one per row asked for, every one a number, and
    probabilities within 0..1. A model that gives anything else (a plugin's, a diverged network)
    is refused here, naming it, where its scores would otherwise go on into metrics that are
    computed regardless (a NaN makes ROC AUC a coin's toss) and into prediction files."""
    if rows is not None and len(scores) != rows:
        raise DataError(f"{_named(estimator)} scored {len(scores):,} rows of the {rows:,} it was given: a model "
                        "gives one score per row")
    finite = np.isfinite(scores)
    if not finite.all():
        bad = ~finite.reshape(len(scores), -1).all(axis=1)
        raise DataError(f"{_named(estimator)} gave NaN or infinite scores for {int(bad.sum()):,} of its "
                        f"{len(scores):,} rows (the first: row {int(np.argmax(bad))}); a score must be a number")
    if task.kind != "regression" and scores.size and (
            scores.min() < -PROBABILITY_SLACK or scores.max() > 1 + PROBABILITY_SLACK):
        raise DataError(f"{_named(estimator)} gave probabilities outside 0..1 (from {scores.min():.6g} to "
                        f"{scores.max():.6g}) for a {task.kind} task; predict_proba must give probabilities")
    if task.kind == "multiclass" and scores.size:
        sums = scores.sum(axis=1)
        if np.abs(sums - 1).max() > ROW_SUM_SLACK:
            raise DataError(f"{_named(estimator)} gave class probabilities whose rows add up to {sums.min():.6g} to "
                            f"{sums.max():.6g}, not 1 (one-vs-all scores?); predict_proba must give each row's "
                            "probabilities of the task's classes")


def _named(estimator: Any) -> str:
    """The estimator as a message names it: its class, or 'the model'."""
    return f"the model ({type(estimator).__name__})" if estimator is not None else "the model"


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
