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


def _mean_abs_contribution(contributions: np.ndarray, names: Sequence[str]) -> dict[str, float]:
    """Mean |contribution| per feature over rows (and classes) of a (rows, [classes,] features +
    bias) array, the bias column dropped."""
    mean_abs = np.abs(contributions[..., :-1]).mean(axis=tuple(range(contributions.ndim - 1)))
    return {name: float(v) for name, v in zip(names, mean_abs)}


def lightgbm_importance(estimator: Any, matrix: np.ndarray, names: Sequence[str]) -> dict[str, dict[str, float]]:
    """``gain``: total loss reduction of the splits on each feature (LightGBM's ``gain``);
    ``shap``: mean |contribution| from LightGBM's own TreeSHAP (``pred_contrib``)."""
    booster = estimator.booster_
    gain = booster.feature_importance(importance_type="gain")
    contributions = np.asarray(booster.predict(np.asarray(matrix), pred_contrib=True))
    d = len(names)
    if contributions.ndim == 2 and contributions.shape[1] != d + 1:      # multiclass: classes x (d + 1) columns
        contributions = contributions.reshape(len(contributions), -1, d + 1)
    return {"gain": {name: float(v) for name, v in zip(names, gain)},
            "shap": _mean_abs_contribution(contributions, names)}


def catboost_importance(estimator: Any, matrix: np.ndarray, names: Sequence[str]) -> dict[str, dict[str, float]]:
    """``gain``: CatBoost's default importance (PredictionValuesChange: how much the prediction
    moves with the feature, normalised to sum to 100); ``shap``: mean |contribution| from
    CatBoost's ``ShapValues``, with categorical columns handed to it as integers."""
    import catboost

    from pipeline.models.catboost_estimators import catboost_frame

    categorical = [int(i) for i in estimator.get_cat_feature_indices()]
    gain = estimator.get_feature_importance()
    pool = catboost.Pool(catboost_frame(matrix, categorical), cat_features=categorical or None)
    contributions = np.asarray(estimator.get_feature_importance(type="ShapValues", data=pool))
    return {"gain": {name: float(v) for name, v in zip(names, gain)},
            "shap": _mean_abs_contribution(contributions, names)}
