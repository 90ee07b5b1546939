"""Importances a model computes itself, named by its registry entry (``ModelSpec.explain``).

An explainer takes the fitted estimator, a host sample of feature rows and the feature names,
and returns ``{kind: {feature: value}}``. XGBoost's are its split gain and the mean absolute
SHAP contribution from ``pred_contribs`` (XGBoost's own TreeSHAP: exact for trees, on the
booster's device, no extra dependency).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

Explainer = Callable[[Any, np.ndarray, Sequence[str]], dict[str, dict[str, float]]]


def xgboost_importance(estimator: Any, matrix: np.ndarray, names: Sequence[str]) -> dict[str, dict[str, float]]:
    """``gain``: average loss reduction of the splits on each feature (0 for a feature no tree
    splits on); ``shap``: mean |contribution| over rows (and classes), in the score's units."""
    import xgboost

    booster = estimator.get_booster() if hasattr(estimator, "get_booster") else estimator
    own = list(booster.feature_names or [])
    position = {(own[i] if own else f"f{i}"): name for i, name in enumerate(names)}
    gain = {name: 0.0 for name in names}
    for key, value in booster.get_score(importance_type="gain").items():
        if key in position:
            gain[position[key]] = float(value)
    data = xgboost.DMatrix(matrix, feature_names=own or None)
    contributions = np.asarray(booster.predict(data, pred_contribs=True))
    # (rows, features + bias) or (rows, classes, features + bias): drop the bias column.
    mean_abs = np.abs(contributions[..., :-1]).mean(axis=tuple(range(contributions.ndim - 1)))
    return {"gain": gain, "shap": {name: float(v) for name, v in zip(names, mean_abs)}}
