"""Multiclass and regression metrics equal scikit-learn's on random data, ties, a class missing
from the split, one-class splits and perfect predictions; the per-task names and directions."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn import metrics as skm

from pipeline.usage.memory import MemorySampler
from pipeline.metrics import (ALL_METRICS, HIGHER_IS_BETTER, binary_metrics, class_table, confusion_matrix,
                              default_metric, is_better, metric_names, task_metrics)
from pipeline.core.problems import BINARY, REGRESSION, Task

APPROX = {"rel": 1e-10, "abs": 1e-12}


def three(k: int = 3) -> Task:
    return Task("multiclass", classes=tuple(f"c{i}" for i in range(k)))


def probabilities(rng: np.random.Generator, y: np.ndarray, k: int, decimals: int | None = None) -> np.ndarray:
    """Rows summing to 1, leaning towards the true class (rounded: many ties, sums near 1)."""
    logits = rng.normal(size=(len(y), k))
    logits[np.arange(len(y)), y] += 1.0
    p = np.exp(logits)
    p /= p.sum(axis=1, keepdims=True)
    return p if decimals is None else np.round(p, decimals)


def multiclass_reference(y: np.ndarray, p: np.ndarray) -> dict[str, float]:
    """scikit-learn's values; the one-vs-rest AUC is its binary AUC per class present, averaged
    (what ``multi_class="ovr"`` computes, without its check that rounded rows sum to 1)."""
    k = p.shape[1]
    predicted = p.argmax(axis=1)
    present = np.unique(y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # rounded rows that do not sum to 1
        return {
            "log_loss": skm.log_loss(y, p, labels=list(range(k))),
            "roc_auc_ovr_macro": float(np.mean([skm.roc_auc_score(y == c, p[:, c]) for c in present]))
            if len(present) > 1 else math.nan,
            "accuracy": skm.accuracy_score(y, predicted),
            "f1_macro": skm.f1_score(y, predicted, average="macro", zero_division=0),
            "f1_weighted": skm.f1_score(y, predicted, average="weighted", zero_division=0),
        }


def assert_same(ours: dict[str, float], theirs: dict[str, float]) -> None:
    assert set(ours) == set(theirs)
    for key, value in theirs.items():
        if math.isnan(value):
            assert math.isnan(ours[key]), key
        else:
            assert ours[key] == pytest.approx(value, **APPROX), key


@pytest.mark.parametrize("n, k, decimals, seed", [
    (1000, 3, None, 0),
    (3000, 5, 1, 1),          # many ties, including ties for the argmax
    (200, 4, 2, 2),
    (50, 3, None, 3),
])
def test_multiclass_equals_scikit_learn(n, k, decimals, seed):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k, n).astype("int32")
    p = probabilities(rng, y, k, decimals)
    assert_same(task_metrics(three(k), y, p), multiclass_reference(y, p))


def test_multiclass_all_present_auc_is_scikit_learns_ovr_macro():
    rng = np.random.default_rng(7)
    y = rng.integers(0, 4, 800).astype("int32")
    p = probabilities(rng, y, 4)
    ours = task_metrics(three(4), y, p)["roc_auc_ovr_macro"]
    assert ours == pytest.approx(skm.roc_auc_score(y, p, multi_class="ovr", average="macro"), **APPROX)


def test_a_class_missing_from_the_split():
    rng = np.random.default_rng(8)
    y = rng.choice([0, 1, 3], 600).astype("int32")        # class 2 of 4 never occurs
    p = probabilities(rng, y, 4)
    ours = task_metrics(three(4), y, p)
    assert_same(ours, multiclass_reference(y, p))
    assert math.isfinite(ours["roc_auc_ovr_macro"]) and math.isfinite(ours["log_loss"])


def test_a_class_neither_present_nor_predicted_does_not_count_in_the_macro_f1():
    y = np.array([0, 0, 1, 1, 1], dtype="int32")
    p = np.array([[0.9, 0.05, 0.05], [0.2, 0.7, 0.1], [0.1, 0.8, 0.1], [0.3, 0.6, 0.1], [0.5, 0.4, 0.1]])
    ours = task_metrics(three(), y, p)
    assert ours["f1_macro"] == pytest.approx(skm.f1_score(y, p.argmax(axis=1), average="macro"), **APPROX)
    assert_same(ours, multiclass_reference(y, p))


def test_one_class_split_has_nan_auc_and_the_rest():
    rng = np.random.default_rng(9)
    y = np.full(100, 2, dtype="int32")
    p = probabilities(rng, y, 3)
    ours = task_metrics(three(), y, p)
    assert math.isnan(ours["roc_auc_ovr_macro"])
    assert_same(ours, multiclass_reference(y, p))


def test_perfect_multiclass_predictions():
    y = np.array([0, 1, 2, 2, 1, 0], dtype="int32")
    p = np.eye(3)[y]
    ours = task_metrics(three(), y, p)
    assert ours["accuracy"] == 1.0 and ours["f1_macro"] == 1.0 and ours["f1_weighted"] == 1.0
    assert ours["roc_auc_ovr_macro"] == 1.0
    assert ours["log_loss"] == pytest.approx(-math.log(1 - np.finfo("float64").eps))
    assert_same(ours, multiclass_reference(y, p))


def test_multiclass_confusion_matrix_and_class_table():
    rng = np.random.default_rng(10)
    y = rng.integers(0, 4, 500).astype("int32")
    p = probabilities(rng, y, 4, decimals=1)
    task = Task("multiclass", classes=("a", "b", 7, "d"))
    predicted = p.argmax(axis=1)
    assert confusion_matrix(task, y, p) == skm.confusion_matrix(y, predicted, labels=range(4)).tolist()
    table = class_table(task, confusion_matrix(task, y, p))
    precision, recall, f1, support = skm.precision_recall_fscore_support(y, predicted, labels=range(4),
                                                                         zero_division=0)
    assert table["labels"] == ["a", "b", 7, "d"]
    assert table["precision"] == pytest.approx(precision.tolist())
    assert table["recall"] == pytest.approx(recall.tolist())
    assert table["f1"] == pytest.approx(f1.tolist())
    assert table["support"] == support.tolist()


def test_binary_confusion_matrix_at_the_threshold():
    rng = np.random.default_rng(11)
    y = rng.integers(0, 2, 300)
    s = np.round(rng.random(300), 1)
    expected = skm.confusion_matrix(y, (s >= 0.3).astype(int), labels=[0, 1]).tolist()
    assert confusion_matrix(BINARY, y, s, threshold=0.3) == expected


def test_multiclass_scores_of_the_wrong_shape_are_refused():
    from pipeline.core.errors import DataError

    with pytest.raises(DataError, match="matrix"):
        task_metrics(three(), np.array([0, 1, 2]), np.array([0.1, 0.2, 0.3]))
    with pytest.raises(DataError, match="codes 0..2"):
        task_metrics(three(), np.array([0, 1, 3]), np.full((3, 3), 1 / 3))


def regression_reference(y: np.ndarray, p: np.ndarray) -> dict[str, float]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {
            "rmse": skm.root_mean_squared_error(y, p),
            "mae": skm.mean_absolute_error(y, p),
            "r2": skm.r2_score(y, p),
            "mape": skm.mean_absolute_percentage_error(y, p) if np.all(y != 0) else math.nan,
        }


@pytest.mark.parametrize("n, seed, offset", [(1000, 0, 50.0), (37, 1, -3.0), (5000, 2, 0.5)])
def test_regression_equals_scikit_learn(n, seed, offset):
    rng = np.random.default_rng(seed)
    y = (rng.normal(size=n) * 10 + offset).astype("float32")          # labels are float32
    p = y.astype("float64") + rng.normal(size=n) * 3
    assert_same(task_metrics(REGRESSION, y, p), regression_reference(y.astype("float64"), p))


def test_mape_is_nan_when_a_true_value_is_zero():
    y = np.array([0.0, 1.0, 2.0, 4.0], dtype="float32")
    p = np.array([0.1, 1.1, 1.9, 4.5])
    ours = task_metrics(REGRESSION, y, p)
    assert math.isnan(ours["mape"])
    assert skm.mean_absolute_percentage_error(y, p) > 1e12          # what it would have reported
    assert_same({k: v for k, v in ours.items() if k != "mape"},
                {k: v for k, v in regression_reference(y, p).items() if k != "mape"})


def test_perfect_and_constant_regression():
    y = np.array([3.0, 3.0, 3.0], dtype="float32")
    assert_same(task_metrics(REGRESSION, y, y.astype("float64")), regression_reference(y, y))
    assert task_metrics(REGRESSION, y, y.astype("float64"))["r2"] == 1.0
    assert_same(task_metrics(REGRESSION, y, np.array([3.0, 2.0, 4.0])),
                regression_reference(y, np.array([3.0, 2.0, 4.0])))       # constant target: R² 0
    one = task_metrics(REGRESSION, np.array([2.0]), np.array([1.0]))
    assert math.isnan(one["r2"]) and one["rmse"] == 1.0 and one["mape"] == 0.5


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(st.integers(2, 5).flatmap(lambda k: st.tuples(
    st.just(k),
    st.lists(st.integers(0, k - 1), min_size=1, max_size=40),
    st.integers(0, 2**32 - 1),
    st.sampled_from([None, 0, 1]))))
def test_multiclass_property_any_labels_and_ties(case):
    k, labels, seed, decimals = case
    y = np.array(labels, dtype="int32")
    p = probabilities(np.random.default_rng(seed), y, k, decimals)
    assert_same(task_metrics(three(k), y, p), multiclass_reference(y, p))


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(st.lists(st.tuples(st.integers(-20, 20), st.integers(-20, 20)), min_size=2, max_size=40))
def test_regression_property_small_integers(pairs):
    y = np.array([a for a, _ in pairs], dtype="float32")
    p = np.array([b for _, b in pairs], dtype="float64")
    assert_same(task_metrics(REGRESSION, y, p), regression_reference(y.astype("float64"), p))


def test_binary_task_metrics_are_todays_binary_metrics():
    rng = np.random.default_rng(12)
    y = rng.integers(0, 2, 400)
    s = rng.random(400)
    assert task_metrics(BINARY, y, s, threshold=0.4) == binary_metrics(y, s, threshold=0.4)
    assert tuple(task_metrics(BINARY, y, s)) == metric_names("binary")


@pytest.mark.parametrize("kind", ["binary", "multiclass", "regression"])
def test_every_metric_has_a_direction_and_each_task_a_default(kind):
    names = metric_names(kind)
    assert default_metric(kind) in names
    assert all(name in HIGHER_IS_BETTER and name in ALL_METRICS for name in names)


def test_is_better_follows_the_direction_and_never_prefers_nan():
    assert is_better("roc_auc", 0.8, 0.7) and not is_better("roc_auc", 0.7, 0.8)
    assert is_better("rmse", 1.0, 2.0) and not is_better("rmse", 2.0, 1.0)
    assert is_better("log_loss", 0.3, 0.5) and is_better("r2", 0.9, 0.1)
    assert not is_better("rmse", 1.0, 1.0)
    assert not is_better("rmse", math.nan, 1.0) and is_better("rmse", 1.0, math.nan)
    assert not is_better("roc_auc", math.nan, math.nan)


def test_multiclass_memory_stays_near_a_few_vectors():
    """1M rows x 5 classes: the matrix is the caller's; a handful of row vectors here."""
    rng = np.random.default_rng(13)
    n, k = 1_000_000, 5
    y = rng.integers(0, k, n).astype("int32")
    p = rng.random((n, k))
    p /= p.sum(axis=1, keepdims=True)
    with MemorySampler(interval=0.002) as sampler:
        before = sampler.peak_rss
        task_metrics(three(k), y, p)
    assert sampler.peak_rss - before < 120 * 2**20        # the 40 MB matrix would be copied 3x
