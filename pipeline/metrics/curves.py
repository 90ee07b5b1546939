"""The curves a report draws, computed once where the scores are (``evaluate``) and recorded.

Each curve is a few hundred exact points of the full split, never a sample of its rows: a
report that redrew them from a sample would show a different AUC than the run recorded.
Points are taken at thresholds evenly spaced in rank (every k-th distinct score), so the
curve is exact where it has points and a 5M-row split still gives a small JSON.

- binary: ROC and precision-recall points, calibration (mean score against the positive rate
  per score decile), cumulative gain and lift (positives found against rows contacted, the
  rows ranked by score), and a threshold sweep (precision, recall, F1 and positive rate at
  thresholds 0.01 ... 0.99; precision is None where no row is predicted positive);
- regression: predicted against actual (an evenly spaced subset of rows, sorted by actual)
  and a histogram of residuals.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

POINTS = 200            # at most this many points per curve
CALIBRATION_BINS = 10
SWEEP = np.round(np.linspace(0.01, 0.99, 99), 2)
SCATTER = 2000          # regression: at most this many (actual, predicted) pairs
RESIDUAL_BINS = 40


def binary_curves(y_true: np.ndarray, scores: np.ndarray) -> dict[str, Any]:
    """ROC, PR, calibration, gain/lift and the threshold sweep of one model on one split."""
    positive = np.asarray(y_true).astype(bool, copy=False).ravel()
    scores = np.asarray(scores, dtype="float64").ravel()
    n, n_pos = len(positive), int(np.count_nonzero(positive))
    out: dict[str, Any] = {"rows": n, "positives": n_pos,
                           "calibration": _calibration(positive, scores),
                           "thresholds": _sweep(positive, scores)}
    if n == 0:
        return out
    above, tps = _ranked_counts(positive, scores)        # rows and positives above each threshold
    keep = _spread(len(above))
    above, tps = above[keep], tps[keep]
    fps = above - tps
    n_neg = n - n_pos
    out["gain"] = {"fraction_rows": _listed(np.append(0.0, above / n)),
                   "fraction_positives": _listed(np.append(0.0, tps / n_pos if n_pos else 0 * tps))}
    base_rate = n_pos / n
    out["lift"] = {"fraction_rows": _listed(above / n),
                   "lift": _listed((tps / above) / base_rate if n_pos else 0 * tps)}
    if n_pos and n_neg:
        out["roc"] = {"fpr": _listed(np.append(0.0, fps / n_neg)), "tpr": _listed(np.append(0.0, tps / n_pos))}
        out["pr"] = {"recall": _listed(tps / n_pos), "precision": _listed(tps / above)}
    return out


def regression_curves(y_true: np.ndarray, predicted: np.ndarray) -> dict[str, Any]:
    """Predicted against actual (a spread of rows) and the residuals' histogram."""
    actual = np.asarray(y_true, dtype="float64").ravel()
    predicted = np.asarray(predicted, dtype="float64").ravel()
    finite = np.isfinite(actual) & np.isfinite(predicted)
    actual, predicted = actual[finite], predicted[finite]
    out: dict[str, Any] = {"rows": int(len(actual))}
    if not len(actual):
        return out
    order = np.argsort(actual, kind="stable")
    pick = order[np.unique(np.linspace(0, len(order) - 1, min(SCATTER, len(order))).round().astype("int64"))]
    out["scatter"] = {"actual": _listed(actual[pick]), "predicted": _listed(predicted[pick])}
    residuals = predicted - actual
    counts, edges = np.histogram(residuals, bins=RESIDUAL_BINS)
    out["residuals"] = {"edges": _listed(edges), "counts": [int(c) for c in counts],
                        "mean": float(residuals.mean()), "std": float(residuals.std())}
    return out


def _ranked_counts(positive: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each distinct score, highest first: rows scored at or above it, and positives among them."""
    order = np.argsort(-scores, kind="stable")
    ranked = scores[order]
    ends = np.flatnonzero(np.append(ranked[1:] != ranked[:-1], True))
    tps = np.cumsum(positive[order], dtype="float64")[ends]
    return (ends + 1).astype("float64"), tps


def _spread(count: int) -> np.ndarray:
    """At most ``POINTS`` indices out of ``count``, evenly spaced, the last always kept."""
    if count <= POINTS:
        return np.arange(count)
    return np.unique(np.linspace(0, count - 1, POINTS).round().astype("int64"))


def _calibration(positive: np.ndarray, scores: np.ndarray) -> dict[str, list[float]]:
    """Per score bin (tenths of [0, 1]) that holds rows: mean score, positive rate, rows."""
    bins = np.clip((scores * CALIBRATION_BINS).astype("int64"), 0, CALIBRATION_BINS - 1)
    rows = np.bincount(bins, minlength=CALIBRATION_BINS)
    score_sum = np.bincount(bins, weights=scores, minlength=CALIBRATION_BINS)
    hits = np.bincount(bins, weights=positive, minlength=CALIBRATION_BINS)
    held = rows > 0
    return {"mean_score": _listed(score_sum[held] / rows[held]), "fraction_positive": _listed(hits[held] / rows[held]),
            "rows": [int(r) for r in rows[held]]}


def _sweep(positive: np.ndarray, scores: np.ndarray) -> dict[str, list[float]]:
    """Precision, recall, F1 and the share of rows predicted positive at each threshold of ``SWEEP``."""
    n, n_pos = len(positive), int(np.count_nonzero(positive))
    ranked = np.sort(scores)
    pos_ranked = np.sort(scores[positive])
    predicted = n - np.searchsorted(ranked, SWEEP, side="left")          # scores >= threshold
    tp = n_pos - np.searchsorted(pos_ranked, SWEEP, side="left")
    with np.errstate(invalid="ignore", divide="ignore"):
        precision = np.where(predicted > 0, tp / np.maximum(predicted, 1), np.nan)   # none predicted: undefined
        recall = tp / n_pos if n_pos else np.zeros(len(SWEEP))
        f1 = np.where(predicted + n_pos > 0, 2 * tp / np.maximum(predicted + n_pos, 1), 0.0)
    return {"threshold": _listed(SWEEP), "precision": _listed(precision), "recall": _listed(recall),
            "f1": _listed(f1), "positive_rate": _listed(predicted / n if n else np.zeros(len(SWEEP)))}


def _listed(values: np.ndarray) -> list[float | None]:
    """Plain floats rounded to 6 places (exact enough to draw, small enough to keep); an
    undefined value (NaN) is None, which JSON keeps and a plot leaves as a gap."""
    return [None if math.isnan(v) else round(v, 6) for v in np.asarray(values, dtype="float64").tolist()]
