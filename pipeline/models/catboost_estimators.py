"""CatBoost's estimators as the registry's ``catboost`` entry builds them.

Why a subclass and not ``catboost:CatBoostClassifier`` itself:

- CatBoost refuses float values in a categorical column, and the feature matrix is float32
  (categorify's integer codes among the numbers): each fit and predict hands CatBoost a pandas
  DataFrame whose categorical columns (the fitted model's own ``get_cat_feature_indices()``)
  are int64, the rest float32;
- on the GPU backend the matrix is a CuPy array: it is copied to the host (``.get()``, found by
  duck typing: this layer does not import CuPy); ``task_type="GPU"`` still trains on the GPU;
- CatBoost's ``get_params`` lists only the parameters set; here it lists every constructor
  parameter (None when unset, which CatBoost's constructor ignores), as scikit-learn does;
- ``evals_result()`` gives the per-round metrics in XGBoost's shape, which ``train`` writes.

``import catboost`` is at the top on purpose: a machine without it fails the backend's import
of this module with ``ModuleNotFoundError('catboost')``, which names the extra to install.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import catboost
import numpy as np
import pandas as pd

from pipeline.backends.matrices import host_array as host



def catboost_frame(X: Any, categorical: Sequence[int]) -> Any:
    """``X`` as CatBoost takes it: a DataFrame with integer categorical columns (positions as
    column names, so fit and predict agree); a DataFrame or Pool is passed through."""
    if isinstance(X, (pd.DataFrame, catboost.Pool)):
        return X
    matrix = np.asarray(host(X))
    frame = pd.DataFrame(matrix)
    for position in categorical:
        column = frame[position]
        if column.isna().any():
            raise ValueError(f"catboost: categorical column {position} holds missing values; categorify's codes "
                             "never do, so this matrix did not come from the features stage")
        frame[position] = column.astype("int64")
    return frame


class _HostCatBoost:
    """What both tasks' estimators add to CatBoost's (see the module docstring)."""

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        unset = {name: None for name in inspect.signature(type(self).__init__).parameters
                 if name not in ("self", "kwargs")}
        return {**unset, **super().get_params(deep=deep)}  # type: ignore[misc]

    def _categorical(self) -> list[int]:
        return [int(i) for i in self.get_cat_feature_indices()] if self.is_fitted() else []  # type: ignore[attr-defined]

    def fit(self, X: Any, y: Any = None, cat_features: Sequence[int] | None = None,
            eval_set: Any = None, **kwargs: Any) -> Any:
        categorical = [int(i) for i in cat_features or []]
        if isinstance(eval_set, list):
            eval_set = [(catboost_frame(ex, categorical), host(ey)) for ex, ey in eval_set]
        elif isinstance(eval_set, tuple):
            eval_set = (catboost_frame(eval_set[0], categorical), host(eval_set[1]))
        labels = host(y)
        try:
            return super().fit(catboost_frame(X, categorical), labels,  # type: ignore[misc]
                               cat_features=categorical or None, eval_set=eval_set, **kwargs)
        except catboost.CatBoostError as exc:
            raise _labels_cut(exc, labels) from exc

    def predict(self, data: Any, *args: Any, **kwargs: Any) -> Any:
        return super().predict(catboost_frame(data, self._categorical()), *args, **kwargs)  # type: ignore[misc]

    def evals_result(self) -> dict[str, dict[str, list[float]]]:
        """The metric of each round on the evaluation set (``{"valid": {metric: values}}``)."""
        recorded = self.get_evals_result() or {}  # type: ignore[attr-defined]
        return {"valid": dict(recorded["validation"])} if recorded.get("validation") else {}


class CatBoostClassifier(_HostCatBoost, catboost.CatBoostClassifier):
    """``catboost.CatBoostClassifier`` fed integer categorical columns (binary and multiclass)."""

    def predict_proba(self, X: Any, *args: Any, **kwargs: Any) -> Any:
        return super().predict_proba(catboost_frame(X, self._categorical()), *args, **kwargs)


class CatBoostRegressor(_HostCatBoost, catboost.CatBoostRegressor):
    """``catboost.CatBoostRegressor`` fed integer categorical columns."""


def _labels_cut(exc: Exception, labels: Any) -> Exception:
    """CatBoost holds labels as float32: 1e12 + 1e4 * x is one value there, and it stops with
    "All train targets are equal" about labels that differ. Said as the data problem it is."""
    values = np.asarray(labels, dtype="float64")
    if "All train targets are equal" not in str(exc) or not values.size or values.min() == values.max():
        return exc
    from pipeline.core.errors import DataError

    return DataError(f"catboost: the target's values (up to {np.abs(values).max():.6g}) are large against their "
                     f"spread (std {values.std():.6g}), and CatBoost holds labels as float32, in which they are all "
                     "one value; subtract a constant from the target (a python stage) or predict a difference")
