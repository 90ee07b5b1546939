"""The ``linear`` model: a linear model on its own encoding (numbers standardised, few levels
one-hot, many target encoded), kept and exported as coefficients plus a table per categorical
column. Its scores are scikit-learn's own pipeline's, a file holds numbers only and a
tampered one is refused, and it beats the plain logistic regression on the matrix trees get."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.compose import ColumnTransformer
from sklearn.impute import SimpleImputer
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import KFold, StratifiedKFold
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler, TargetEncoder

from pipeline.backends import get_backend
from pipeline.core.errors import DataError
from pipeline.core.problems import BINARY, Task
from pipeline.models import LINEAR_COEFFICIENTS, get_model_spec
from pipeline.models.encoded_linear import LinearClassifier, LinearRegressor

SEED = 5


def matrix(n: int = 3000, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Two numbers of very different scales (one with gaps), a 4-level code and a 200-level code;
    the signal is in all four. Returns X, a binary label and a numeric target."""
    rng = np.random.default_rng(seed)
    big, small = rng.normal(500, 200, n), rng.normal(0, 0.01, n)
    few, many = rng.integers(0, 4, n), rng.integers(0, 200, n)
    effect = rng.normal(size=200)
    signal = (big - 500) / 200 + small * 100 + (few == 2) * 1.2 + effect[many]
    X = np.column_stack([big, few, many, small]).astype("float64")
    X[rng.random(n) < 0.1, 0] = np.nan
    label = (rng.random(n) < 1 / (1 + np.exp(-signal))).astype("int64")
    return X, label, signal + rng.normal(scale=0.3, size=n)


def reference(task: str, y: np.ndarray) -> object:
    """scikit-learn's own pipeline for the same encoding: what ``linear`` must equal."""
    folds = (KFold if task == "regression" else StratifiedKFold)(5, shuffle=True, random_state=SEED)
    target_type = {"binary": "binary", "multiclass": "multiclass", "regression": "continuous"}[task]
    encode = ColumnTransformer([
        ("numbers", make_pipeline(SimpleImputer(strategy="mean"), StandardScaler()), [0, 3]),
        ("few", OneHotEncoder(handle_unknown="ignore"), [1]),
        ("many", make_pipeline(TargetEncoder(target_type=target_type, cv=folds), StandardScaler()), [2]),
    ])
    model = Ridge(alpha=1.0) if task == "regression" else LogisticRegression(C=1.0, max_iter=1000, tol=1e-4)
    return make_pipeline(encode, model)


needs_cv_splitter = pytest.mark.skipif("cv_object" not in TargetEncoder._parameter_constraints.get("cv", []),
                                       reason="this scikit-learn's TargetEncoder takes a fold count only")


@needs_cv_splitter
@pytest.mark.parametrize("task", ["binary", "multiclass", "regression"])
def test_scores_equal_scikit_learns_pipeline_of_the_same_encoding(task):
    X, label, value = matrix()
    y = {"binary": label, "multiclass": np.digitize(value, [-0.5, 0.7]), "regression": value}[task]
    new, _, _ = matrix(500, seed=1)
    new[:5, 2] = 999                      # levels never seen in training
    new[5:10, 0] = np.nan
    if task == "regression":
        ours = LinearRegressor(random_state=SEED).fit(X, y, categorical=[1, 2]).predict(new)
        theirs = reference(task, y).fit(X, y).predict(new)
    else:
        ours = LinearClassifier(random_state=SEED).fit(X, y, categorical=[1, 2]).predict_proba(new)
        theirs = reference(task, y).fit(X, y).predict_proba(new)
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-8)


def test_few_levels_are_one_hot_and_many_target_encoded_with_an_unknown_row():
    X, label, _ = matrix()
    model = LinearClassifier(random_state=SEED).fit(X, label, categorical=[2, 1])
    few, many = model.tables_
    assert (few.column, few.codes.tolist()) == (1, [0, 1, 2, 3]) and np.all(few.unknown == 0)
    assert many.column == 2 and many.codes.size == 200 and many.unknown.shape == (1,)
    assert np.all(model.coef_[0, [1, 2]] == 0)          # codes act only through their tables
    # one_hot_max: 0 target-encodes every categorical column.
    encoded = LinearClassifier(one_hot_max=0, random_state=SEED).fit(X, label, categorical=[1, 2])
    assert np.any(encoded.tables_[0].unknown != 0)
    # A code that is not a whole number, or was never seen, adds the unknown row.
    row = X[:2].copy()
    row[0, 1], row[1, 1] = 2.5, 77
    terms = few.terms(row)
    np.testing.assert_array_equal(terms, np.zeros((2, 1)))


def test_it_beats_the_plain_logistic_regression_on_the_matrix_trees_get():
    X, label, _ = matrix(4000)
    test, test_label, _ = matrix(2000, seed=2)
    plain = LogisticRegression(max_iter=1000).fit(np.nan_to_num(X), label)
    ours = LinearClassifier(random_state=SEED).fit(X, label, categorical=[1, 2])
    plain_auc = roc_auc_score(test_label, plain.predict_proba(np.nan_to_num(test))[:, 1])
    our_auc = roc_auc_score(test_label, ours.predict_proba(test)[:, 1])
    assert our_auc > plain_auc + 0.03, (our_auc, plain_auc)


@pytest.mark.parametrize("task", ["binary", "multiclass", "regression"])
def test_the_coefficients_file_holds_numbers_and_scores_as_the_estimator(task, tmp_path):
    X, label, value = matrix()
    classes = np.digitize(value, [-0.5, 0.7])
    if task == "regression":
        estimator, kind, fitted_task = LinearRegressor().fit(X, value, categorical=[1, 2]), "regression", \
            Task("regression")
        expected = estimator.predict(X)
    else:
        y = label if task == "binary" else classes
        estimator = LinearClassifier().fit(X, y, categorical=[1, 2])
        fitted_task = BINARY if task == "binary" else Task("multiclass", classes=(0, 1, 2))
        proba = estimator.predict_proba(X)
        expected, kind = (proba[:, 1], "binary") if task == "binary" else (proba, "multinomial")
    written, meta = LINEAR_COEFFICIENTS.save(estimator, tmp_path, backend=get_backend("cpu"))
    body = json.loads(written[0].read_text())
    assert body.get("kind", "binary") == kind and meta["tables"] == 2 and "values" not in json.dumps(meta)
    assert len(body["fill"]) == 4 and [t["column"] for t in body["tables"]] == [1, 2]
    meta["task"] = fitted_task.to_dict()
    scores = LINEAR_COEFFICIENTS.load(tmp_path, meta, backend=None)(X, None)
    np.testing.assert_allclose(scores, expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("tamper,message", [
    (lambda body: body["tables"][0].update(values=[[1.0]]), r"tables\[0\] must hold 1 number"),
    (lambda body: body["tables"][0].update(column=99), r"tables\[0\]\.column must be a distinct column"),
    (lambda body: body["tables"][1].update(codes=[3, 1] + body["tables"][1]["codes"][2:]), "increasing integers"),
    (lambda body: body.update(fill=[0.0]), "fill must be 4 finite numbers"),
    (lambda body: body["tables"][0].pop("unknown"), "exactly column, codes, values and unknown"),
])
def test_a_tampered_table_is_refused_naming_the_file(tamper, message, tmp_path):
    X, label, _ = matrix(800)
    estimator = LinearClassifier().fit(X, label, categorical=[1, 2])
    written, meta = LINEAR_COEFFICIENTS.save(estimator, tmp_path, backend=get_backend("cpu"))
    body = json.loads(written[0].read_text())
    tamper(body)
    written[0].write_text(json.dumps(body))
    with pytest.raises(DataError, match=rf"coefficients\.json: not a readable coefficients file \(.*{message}"):
        LINEAR_COEFFICIENTS.load(tmp_path, meta, backend=None)


def test_the_entry_serves_every_task_and_refuses_the_other_tasks_penalty():
    spec = get_model_spec("linear")
    assert spec.tasks == ("binary", "multiclass", "regression") and spec.format == LINEAR_COEFFICIENTS
    assert spec.task_problems("binary", {"alpha": 2.0}) == [
        "'alpha' does not apply to a binary task (the linear model's penalty there is 'C'): remove it"]
    assert spec.task_problems("regression", {"C": 2.0})[0].startswith("'C' does not apply to a regression task")
    assert spec.check_params({"one_hot_max": -1}) == ["one_hot_max must be a whole number of levels (0 or more), "
                                                      "not -1"]


def skewed_matrix(n: int = 3000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``matrix``'s columns and a price-like column (lognormal: no negative value, skewness far
    past 0.75) whose logarithm carries the signal; a label."""
    X, _, _ = matrix(n, seed)
    rng = np.random.default_rng(seed + 7)
    price = rng.lognormal(3, 1.2, n)
    price[rng.random(n) < 0.05] = np.nan
    signal = (np.nan_to_num(np.log1p(price), nan=3.0) - 3) + (X[:, 1] == 2) * 1.2
    label = (rng.random(n) < 1 / (1 + np.exp(-signal))).astype("int64")
    return np.column_stack([X, price]), label


def test_skew_max_takes_skewed_non_negative_numbers_as_log1p_only():
    from pipeline.models.encoded_linear import skewed_columns

    X, label = skewed_matrix()
    # column 0: N(500, 200) with gaps; 3: N(0, 0.01) (negatives); 4: the lognormal price
    assert skewed_columns(X, [0, 3, 4], 0.75).tolist() == [4]
    assert skewed_columns(X, [0, 3, 4], None).tolist() == []
    assert skewed_columns(X, [0, 3, 4], 100.0).tolist() == []
    plain = LinearClassifier(random_state=SEED).fit(X, label, categorical=[1, 2])
    logged = LinearClassifier(random_state=SEED, skew_max=0.75).fit(X, label, categorical=[1, 2])
    assert plain.logged_.tolist() == [] and logged.logged_.tolist() == [4]
    test, test_label = skewed_matrix(2000, seed=3)
    assert roc_auc_score(test_label, logged.predict_proba(test)[:, 1]) > \
        roc_auc_score(test_label, plain.predict_proba(test)[:, 1])


@needs_cv_splitter
def test_logged_scores_equal_scikit_learns_pipeline_with_log1p_first():
    from sklearn.preprocessing import FunctionTransformer

    X, label = skewed_matrix()
    folds = StratifiedKFold(5, shuffle=True, random_state=SEED)
    encode = ColumnTransformer([
        ("numbers", make_pipeline(SimpleImputer(strategy="mean"), StandardScaler()), [0, 3]),
        ("price", make_pipeline(FunctionTransformer(np.log1p), SimpleImputer(strategy="mean"), StandardScaler()), [4]),
        ("few", OneHotEncoder(handle_unknown="ignore"), [1]),
        ("many", make_pipeline(TargetEncoder(target_type="binary", cv=folds), StandardScaler()), [2]),
    ])
    theirs = make_pipeline(encode, LogisticRegression(C=1.0, max_iter=1000, tol=1e-4)).fit(X, label)
    ours = LinearClassifier(random_state=SEED, skew_max=0.75).fit(X, label, categorical=[1, 2])
    new, _ = skewed_matrix(400, seed=4)
    np.testing.assert_allclose(ours.predict_proba(new), theirs.predict_proba(new), rtol=0, atol=1e-8)


def test_the_coefficients_file_keeps_the_log1p_columns_and_refuses_bad_ones(tmp_path):
    X, label = skewed_matrix(1500)
    estimator = LinearClassifier(skew_max=0.75).fit(X, label, categorical=[1, 2])
    written, meta = LINEAR_COEFFICIENTS.save(estimator, tmp_path, backend=get_backend("cpu"))
    body = json.loads(written[0].read_text())
    assert body["log1p"] == [4]
    meta["task"] = BINARY.to_dict()
    scores = LINEAR_COEFFICIENTS.load(tmp_path, meta, backend=None)(X, None)
    np.testing.assert_allclose(scores, estimator.predict_proba(X)[:, 1], rtol=0, atol=1e-12)
    for bad in ([9], [1], [4, 4], ["4"]):                  # past the columns, a categorical one, twice, text
        written[0].write_text(json.dumps({**body, "log1p": bad}))
        with pytest.raises(DataError, match="log1p must list distinct number-column positions"):
            LINEAR_COEFFICIENTS.load(tmp_path, meta, backend=None)
    assert get_model_spec("linear").check_params({"skew_max": "high"}) == [
        "skew_max must be a number (or null: no column taken as log1p), not 'high'"]
