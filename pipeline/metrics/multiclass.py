"""Multiclass metrics from the ``n x K`` probability matrix, with scikit-learn's definitions.

Everything that depends on the predicted class comes from one ``K x K`` confusion matrix
(one ``bincount``), so accuracy, macro / weighted F1 and the per-class table cost one
argmax vector; log loss reads only each row's true-class probability; the one-vs-rest ROC
AUC reuses the binary single-sort area per class. ``tests/metrics/test_multiclass_and_regression.py`` checks
every value against scikit-learn: ties, a class missing from the split, one-class splits.

Where scikit-learn leaves a choice, the choice here:

- **F1 (macro, weighted) and the per-class table**: a class counts when it occurs in the
  split or among the predictions (scikit-learn's default ``labels``); precision, recall or F1
  with a zero denominator is 0 (its ``zero_division`` default).
- **Log loss**: the true-class probability is clipped to ``[eps, 1 - eps]`` (float64's machine
  epsilon, as scikit-learn clips since 1.5), as the binary log loss is; rows are not renormalised (scikit-learn stopped renormalising in 1.5:
  a model's probabilities already sum to 1). Every class of the task counts, present in the
  split or not (``labels=range(K)``).
- **ROC AUC, one-vs-rest, macro**: the mean of each class's AUC against the rest over the
  classes present in the split (an absent class has no AUC; scikit-learn with
  ``labels=range(K)`` would return NaN for the whole split); NaN when fewer than 2 classes
  are present. Scores need not sum to 1.
"""

from __future__ import annotations

import math

import numpy as np

from pipeline.core.errors import DataError
from pipeline.metrics.binary import _CLIP, _curve_areas

NAMES = ("log_loss", "roc_auc_ovr_macro", "accuracy", "f1_macro", "f1_weighted")


def multiclass_metrics(y_true: np.ndarray, scores: np.ndarray) -> dict[str, float]:
    """Log loss, one-vs-rest macro ROC AUC, accuracy, macro and weighted F1 (``y_true``: codes
    ``0..K-1``; ``scores``: ``n x K`` probabilities in class-code order)."""
    codes, scores = _checked(y_true, scores)
    if len(codes) == 0:
        return dict.fromkeys(NAMES, math.nan)
    matrix = confusion_counts(codes, scores)
    table = _per_class(matrix)
    counted = (matrix.sum(axis=0) + matrix.sum(axis=1)) > 0      # in the split or predicted
    support = table["support"]
    return {
        "log_loss": _log_loss(codes, scores),
        "roc_auc_ovr_macro": _ovr_macro_auc(codes, scores, matrix.sum(axis=1)),
        "accuracy": float(np.trace(matrix)) / len(codes),
        "f1_macro": float(table["f1"][counted].mean()),
        "f1_weighted": float((table["f1"] * support).sum() / support.sum()),
    }


def confusion_counts(y_true: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """``K x K`` int64 counts: rows the true class, columns the predicted (argmax; a tie goes
    to the lower code, as ``predict`` of a scikit-learn classifier)."""
    codes, scores = _checked(y_true, scores)
    k = scores.shape[1]
    cells = codes.astype("int64") * k
    cells += np.argmax(scores, axis=1)
    return np.bincount(cells, minlength=k * k).reshape(k, k)


def per_class_metrics(confusion: np.ndarray) -> dict[str, list[float]]:
    """Precision, recall and F1 per class (class-code order) and the true rows per class, from
    the ``confusion_counts`` matrix."""
    table = _per_class(np.asarray(confusion, dtype="int64"))
    return {"precision": table["precision"].tolist(), "recall": table["recall"].tolist(),
            "f1": table["f1"].tolist(), "support": [int(s) for s in table["support"]]}


def _checked(y_true: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The codes as a flat vector and the scores as a float64 ``n x K`` matrix, or why not."""
    codes = np.asarray(y_true).ravel()
    scores = np.asarray(scores, dtype="float64")
    if scores.ndim != 2 or scores.shape[0] != len(codes):
        raise DataError(f"multiclass scores must be a matrix of one row per label ({len(codes)} rows), "
                        f"not shape {scores.shape}")
    if len(codes) and (codes.min() < 0 or codes.max() >= scores.shape[1]):
        raise DataError(f"multiclass labels must be codes 0..{scores.shape[1] - 1}, "
                        f"got {codes.min()}..{codes.max()}")
    return codes, scores


def _per_class(matrix: np.ndarray) -> dict[str, np.ndarray]:
    tp = np.diag(matrix).astype("float64")
    predicted = matrix.sum(axis=0)
    support = matrix.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        precision = np.where(predicted > 0, tp / predicted, 0.0)
        recall = np.where(support > 0, tp / support, 0.0)
        denominator = predicted + support                   # 2tp + fp + fn
        f1 = np.where(denominator > 0, 2 * tp / denominator, 0.0)
    return {"precision": precision, "recall": recall, "f1": f1, "support": support}


def _log_loss(codes: np.ndarray, scores: np.ndarray) -> float:
    p = np.take_along_axis(scores, codes.astype("intp")[:, None], axis=1).ravel()
    np.clip(p, _CLIP, 1 - _CLIP, out=p)
    np.log(p, out=p)
    return float(-p.mean())


def _ovr_macro_auc(codes: np.ndarray, scores: np.ndarray, support: np.ndarray) -> float:
    present = np.flatnonzero(support)
    if len(present) < 2:
        return math.nan
    areas = [_curve_areas(codes == k, scores[:, k], int(support[k]))[0] for k in present]
    return float(np.mean(areas))
