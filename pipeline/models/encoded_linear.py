"""``linear``: a linear model that encodes the feature matrix for itself, as a linear model needs.

The feature matrix a table becomes is made for trees (``pipeline.features.auto_ops``: numbers
as they are, categories as integer codes). On it a plain logistic regression is near random:
its penalty and its solver see columns of every scale, and a code is no quantity. This
estimator takes the same matrix and the categorical columns' positions (``fit(X, y,
categorical=...)``, from the registry entry's fit arguments) and fits on its own encoding:

- numbers: with ``skew_max`` set, a column of no negative value whose skewness passes it is
  taken as ``log1p`` first (a price, a count: a linear model otherwise spends its slope on the
  few largest values); then a missing value filled with the training mean, then standardised;
- a categorical column of at most ``one_hot_max`` levels: one-hot;
- one of more levels: target encoded (scikit-learn's ``TargetEncoder``: cross-fitted on the
  training rows, so a level's own label does not leak into its encoding; one column per class
  for a multiclass task), then standardised.

It then fits scikit-learn's ``LogisticRegression`` (binary, multinomial) or ``Ridge``
(regression) on that. The fitted model is additive in the columns, so it is kept, scored and
exported as plain numbers (``pipeline.models.linear_tables``): coefficients on the original
numbers with the scaling folded in, an intercept, the fill values, and a table per categorical
column of what each level adds. Scoring here and scoring the exported file run the same code
(``LinearPredictor``), so they give the same numbers.

Device matrices (the GPU backend's CuPy) are copied to the host: the fit is a few passes over
the rows and the encoders are scikit-learn's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin

from pipeline.backends.matrices import host_array as host
from pipeline.core.problems import BINARY
from pipeline.models.formats import LinearPredictor
from pipeline.models.linear_tables import LevelTable, column_codes, log_columns

__all__ = ["ONE_HOT_MAX", "LinearClassifier", "LinearRegressor", "skewed_columns"]

# Levels up to which a categorical column is one-hot encoded; more are target encoded (one
# coefficient per level over thousands of levels overfits what the penalty does not hold).
ONE_HOT_MAX = 16


class _EncodedLinear(BaseEstimator):
    """The encoding and the additive model shared by both tasks (see the module)."""

    one_hot_max: int
    random_state: int | None
    skew_max: float | None

    def _inner(self) -> Any:
        raise NotImplementedError

    def _target_type(self, y: np.ndarray) -> str:
        raise NotImplementedError

    def fit(self, X: Any, y: Any, categorical: Sequence[int] = ()) -> _EncodedLinear:
        x = np.asarray(host(X), dtype="float64")
        target = np.asarray(host(y))
        if x.ndim != 2:
            raise ValueError(f"X must be a matrix, not an array of shape {x.shape}")
        columns = x.shape[1]
        categorical = sorted({int(i) for i in categorical})
        if any(not 0 <= i < columns for i in categorical):
            raise ValueError(f"categorical positions must be below the {columns} columns: {categorical}")
        numbers = [i for i in range(columns) if i not in set(categorical)]
        logged = skewed_columns(x, numbers, self.skew_max)
        x = log_columns(x, logged)
        mean, scale = _moments(x[:, numbers])
        blocks = [(np.where(np.isnan(x[:, numbers]), mean, x[:, numbers]) - mean) / scale]
        encodings: list[_Encoding] = []
        target_type = self._target_type(target)
        for column in categorical:
            encoding = _Encoding.fit(column, x[:, column], target, one_hot_max=self.one_hot_max,
                                     target_type=target_type, seed=self.random_state)
            encodings.append(encoding)
            blocks.append(encoding.train)
        model = self._inner().fit(np.hstack(blocks) if len(blocks) > 1 else blocks[0], target)
        weights = np.atleast_2d(np.asarray(model.coef_, dtype="float64"))      # (r, p)
        intercept = np.atleast_1d(np.asarray(model.intercept_, dtype="float64"))
        coef = np.zeros((weights.shape[0], columns))
        coef[:, numbers] = weights[:, :len(numbers)] / scale
        intercept = intercept - coef[:, numbers] @ mean
        tables, start = [], len(numbers)
        for encoding in encodings:
            tables.append(encoding.table(weights[:, start:start + encoding.width]))
            start += encoding.width
        fill = np.zeros(columns)
        fill[numbers] = mean
        self.fill_, self.tables_, self.logged_ = fill, tuple(tables), logged
        self.n_features_in_ = columns
        self.n_iter_ = getattr(model, "n_iter_", None)
        self._set_coefficients(model, coef, intercept)
        return self

    def _set_coefficients(self, model: Any, coef: np.ndarray, intercept: np.ndarray) -> None:
        raise NotImplementedError

    def _predictor(self, kind: str) -> LinearPredictor:
        return LinearPredictor(np.asarray(self.coef_), np.atleast_1d(np.asarray(self.intercept_)), "float64", kind,
                               BINARY, self.fill_, self.tables_, self.logged_)


class LinearClassifier(ClassifierMixin, _EncodedLinear):
    """Logistic regression (L2, lbfgs) on the encoding: binary, or multinomial over K classes."""

    def __init__(self, *, C: float = 1.0, max_iter: int = 1000, tol: float = 1e-4, class_weight: Any = None,
                 one_hot_max: int = ONE_HOT_MAX, random_state: int | None = None,
                 skew_max: float | None = None) -> None:
        self.C = C
        self.max_iter = max_iter
        self.tol = tol
        self.class_weight = class_weight
        self.one_hot_max = one_hot_max
        self.random_state = random_state
        self.skew_max = skew_max

    def _inner(self) -> Any:
        from sklearn.linear_model import LogisticRegression

        return LogisticRegression(C=self.C, max_iter=self.max_iter, tol=self.tol, class_weight=self.class_weight)

    def _target_type(self, y: np.ndarray) -> str:
        return "binary" if np.unique(y).size <= 2 else "multiclass"

    def _set_coefficients(self, model: Any, coef: np.ndarray, intercept: np.ndarray) -> None:
        self.classes_ = model.classes_
        self.coef_, self.intercept_ = coef, intercept

    def predict_proba(self, X: Any) -> np.ndarray:
        if self.coef_.shape[0] == 1:
            positive = self._predictor("binary")(X, None)
            return np.column_stack([1.0 - positive, positive])
        return self._predictor("multinomial")(X, None)

    def predict(self, X: Any) -> np.ndarray:
        return self.classes_[self.predict_proba(X).argmax(axis=1)]


class LinearRegressor(RegressorMixin, _EncodedLinear):
    """Ridge regression (an L2 penalty ``alpha``) on the encoding."""

    def __init__(self, *, alpha: float = 1.0, max_iter: int | None = None, tol: float = 1e-4,
                 one_hot_max: int = ONE_HOT_MAX, random_state: int | None = None,
                 skew_max: float | None = None) -> None:
        self.alpha = alpha
        self.max_iter = max_iter
        self.tol = tol
        self.one_hot_max = one_hot_max
        self.random_state = random_state
        self.skew_max = skew_max

    def _inner(self) -> Any:
        from sklearn.linear_model import Ridge

        return Ridge(alpha=self.alpha, max_iter=self.max_iter, tol=self.tol)

    def _target_type(self, y: np.ndarray) -> str:
        return "continuous"

    def _set_coefficients(self, model: Any, coef: np.ndarray, intercept: np.ndarray) -> None:
        self.coef_, self.intercept_ = coef[0], float(intercept[0])

    def predict(self, X: Any) -> np.ndarray:
        return self._predictor("regression")(X, None)


def skewed_columns(x: np.ndarray, numbers: Sequence[int], skew_max: float | None) -> np.ndarray:
    """Positions among ``numbers`` of the columns taken as ``log1p``: no negative value, and a
    skewness (the third standardised moment of the values present) above ``skew_max``."""
    if skew_max is None:
        return np.empty(0, dtype=np.int64)
    chosen = []
    for column in numbers:
        values = x[:, column]
        values = values[~np.isnan(values)]
        if values.size < 3 or values.min() < 0:
            continue
        std = values.std()
        if std > 0 and float(np.mean(((values - values.mean()) / std) ** 3)) > skew_max:
            chosen.append(column)
    return np.asarray(chosen, dtype=np.int64)


def _moments(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per column: the mean of the values present (0 for a column with none), and the standard
    deviation once the missing ones are filled with it (1 for a constant column): what
    scikit-learn's ``SimpleImputer(strategy="mean")`` then ``StandardScaler`` use."""
    if not x.size:
        return np.zeros(x.shape[1]), np.ones(x.shape[1])
    present = ~np.isnan(x)
    counts = present.sum(axis=0)
    mean = np.where(counts > 0, np.nansum(x, axis=0) / np.maximum(counts, 1), 0.0)
    std = np.sqrt((np.where(present, x - mean, 0.0) ** 2).sum(axis=0) / x.shape[0])
    return mean, np.where(std > 0, std, 1.0)


def _shuffled_folds(target_type: str, seed: int | None) -> dict[str, Any]:
    """TargetEncoder's shuffled, seeded cross-fitting folds in the installed scikit-learn's terms:
    a splitter as ``cv`` from 1.9 (which deprecates ``shuffle`` and ``random_state``), those two
    before it (where ``cv`` is a count)."""
    from sklearn.model_selection import KFold, StratifiedKFold
    from sklearn.preprocessing import TargetEncoder

    if "cv_object" in TargetEncoder._parameter_constraints.get("cv", []):
        splitter = KFold if target_type == "continuous" else StratifiedKFold
        return {"cv": splitter(5, shuffle=True, random_state=seed)}
    return {"shuffle": True, "random_state": seed}


class _Encoding:
    """One categorical column's encoding: its training block and, once the model is fitted, its
    level table."""

    def __init__(self, column: int, levels: np.ndarray, train: np.ndarray, level_rows: np.ndarray,
                 unknown_row: np.ndarray) -> None:
        self.column = column
        self.levels = levels              # (L,) sorted codes
        self.train = train                # (n, width): what the model is fitted on
        self.level_rows = level_rows      # (L, width): each level's encoded row, as scored
        self.unknown_row = unknown_row    # (width,): an unseen level's
        self.width = train.shape[1]

    @classmethod
    def fit(cls, column: int, values: np.ndarray, y: np.ndarray, *, one_hot_max: int, target_type: str,
            seed: int | None) -> _Encoding:
        codes = column_codes(values)
        levels = np.unique(codes)
        if levels.size <= one_hot_max:
            rows = np.eye(levels.size)
            return cls(column, levels, rows[np.searchsorted(levels, codes)], rows, np.zeros(levels.size))
        from sklearn.preprocessing import TargetEncoder

        encoder = TargetEncoder(target_type=target_type, **_shuffled_folds(target_type, seed))
        train = encoder.fit_transform(codes.reshape(-1, 1), y)          # cross-fitted: no level sees its own label
        mean, scale = _moments(train)
        level_rows = (encoder.transform(levels.reshape(-1, 1)) - mean) / scale
        unseen = np.array([[levels.min() - 1]])
        unknown_row = ((encoder.transform(unseen) - mean) / scale)[0]
        return cls(column, levels, (train - mean) / scale, level_rows, unknown_row)

    def table(self, weights: np.ndarray) -> LevelTable:
        """The level table of a model whose coefficients on this block are ``weights`` (r, width)."""
        return LevelTable(self.column, self.levels.astype(np.int64), self.level_rows @ weights.T,
                          self.unknown_row @ weights.T)

