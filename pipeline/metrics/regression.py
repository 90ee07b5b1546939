"""Regression metrics with scikit-learn's definitions, in two float64 vectors beyond the inputs.

``tests/metrics/test_multiclass_and_regression.py`` checks every value against scikit-learn.
"""

from __future__ import annotations

import math

import numpy as np

NAMES = ("rmse", "mae", "r2", "mape")
_EPS = np.finfo("float64").eps


def regression_metrics(y_true: np.ndarray, predicted: np.ndarray) -> dict[str, float]:
    """RMSE, MAE, R² and MAPE of ``predicted`` against ``y_true``.

    R² follows scikit-learn: NaN below 2 rows; a constant target gives 1.0 when predicted
    exactly and 0.0 otherwise (not -inf). MAPE is NaN when any true value is 0: scikit-learn
    divides by ``max(|y|, eps)`` there, so one zero target turns an ordinary error into a
    number near 1e15 that hides every other row; a user with zeros in the target ranks by
    MAE or RMSE instead. MAPE is a fraction (0.1 = 10%), as scikit-learn's.
    """
    y = np.asarray(y_true, dtype="float64").ravel()
    p = np.asarray(predicted, dtype="float64").ravel()
    n = len(y)
    if n == 0:
        return dict.fromkeys(NAMES, math.nan)
    error = p - y
    ss_res = float(np.dot(error, error))
    np.abs(error, out=error)
    mae = float(error.mean())
    centred = y - y.mean()
    ss_tot = float(np.dot(centred, centred))
    return {"rmse": math.sqrt(ss_res / n), "mae": mae, "r2": _r2(ss_res, ss_tot, n),
            "mape": _mape(error, y, out=centred)}


def _r2(ss_res: float, ss_tot: float, n: int) -> float:
    if n < 2:
        return math.nan
    if ss_tot == 0.0:
        return 1.0 if ss_res == 0.0 else 0.0
    return 1.0 - ss_res / ss_tot


def _mape(abs_error: np.ndarray, y: np.ndarray, *, out: np.ndarray) -> float:
    """Mean of ``|error| / |y|`` (``abs_error`` and ``out`` are overwritten); NaN with a zero target."""
    np.abs(y, out=out)
    if not np.all(out):
        return math.nan
    np.maximum(out, _EPS, out=out)
    abs_error /= out
    return float(abs_error.mean())
