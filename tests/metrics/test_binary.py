"""The lean metrics equal scikit-learn's on every case that matters: ties, extremes, one class."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn import metrics as skm

from pipeline.usage.memory import MemorySampler
from pipeline.metrics import binary_metrics


def reference(y: np.ndarray, s: np.ndarray, threshold: float) -> dict[str, float]:
    predicted = (s >= threshold).astype(int)
    both = len(np.unique(y)) == 2
    return {
        "roc_auc": skm.roc_auc_score(y, s) if both else math.nan,
        "pr_auc": skm.average_precision_score(y, s) if both else math.nan,
        "log_loss": skm.log_loss(y, s, labels=[0, 1]),             # its own clip: float64 eps
        "accuracy": skm.accuracy_score(y, predicted),
        "precision": skm.precision_score(y, predicted, zero_division=0),
        "recall": skm.recall_score(y, predicted, zero_division=0),
        "f1": skm.f1_score(y, predicted, zero_division=0),
    }


@pytest.mark.parametrize("n, decimals, rate, threshold, seed", [
    (1000, None, 0.3, 0.5, 0),
    (5000, 2, 0.1, 0.3, 1),         # many ties
    (200, 1, 0.5, 0.5, 2),          # few distinct scores
    (10_000, 3, 0.02, 0.9, 3),      # rare positives, high threshold
    (50, None, 0.4, 0.01, 4),
])
def test_equal_to_scikit_learn(n, decimals, rate, threshold, seed):
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < rate).astype("int64")
    s = np.clip(rng.normal(0.3 + 0.3 * y, 0.2), 0, 1)
    if decimals is not None:
        s = np.round(s, decimals)
    s[:3] = [0.0, 1.0, 0.5]                                # exact 0 and 1 hit the log-loss clip
    ours, theirs = binary_metrics(y, s, threshold=threshold), reference(y, s, threshold)
    assert set(ours) == set(theirs)
    for key in theirs:
        assert ours[key] == pytest.approx(theirs[key], rel=1e-12, abs=1e-12), key


def test_one_class_gives_nan_areas_and_the_rest():
    y = np.zeros(100, dtype="int64")
    s = np.linspace(0, 1, 100)
    ours, theirs = binary_metrics(y, s), reference(y, s, 0.5)
    assert math.isnan(ours["roc_auc"]) and math.isnan(ours["pr_auc"])
    for key in ("log_loss", "accuracy", "precision", "recall", "f1"):
        assert ours[key] == pytest.approx(theirs[key], abs=1e-12), key


def test_labels_of_any_integer_or_bool_type():
    rng = np.random.default_rng(5)
    y = rng.random(500) < 0.3
    s = rng.random(500)
    expected = binary_metrics(y.astype("int64"), s)
    for dtype in ("bool", "int8", "uint8", "int32", "float32"):
        assert binary_metrics(y.astype(dtype), s) == expected


def test_memory_stays_near_a_few_vectors():
    """5M rows took 670 MiB above the process with scikit-learn; a handful of 40 MB vectors here."""
    rng = np.random.default_rng(6)
    y = (rng.random(5_000_000) < 0.27).astype("int8")
    s = rng.random(5_000_000)
    with MemorySampler(interval=0.002) as sampler:
        before = sampler.peak_rss
        binary_metrics(y, s)
    assert sampler.peak_rss - before < 250 * 2**20


def test_log_loss_of_a_probability_of_exactly_0_or_1_equals_scikit_learns():
    """A forest gives exact 0 and 1: clipped at 1e-15 the loss was 1.1962 against 1.2172."""
    y = np.array([1, 0, 1, 0, 1, 1, 0, 0])
    s = np.array([0.0, 1.0, 1.0, 0.0, 0.7, 0.2, 0.4, 0.1])
    got = binary_metrics(y, s, threshold=0.5)["log_loss"]
    assert got == pytest.approx(skm.log_loss(y, s, labels=[0, 1]), rel=1e-12)
