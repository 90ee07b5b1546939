"""Feature histograms and target balance per split, as the report's data section draws them."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.metrics.profile import feature_histograms, target_balance
from pipeline.core.problems import Task


def test_histograms_share_the_training_bins_and_count_every_row():
    rng = np.random.default_rng(0)
    train = np.column_stack([rng.normal(size=1000), rng.integers(0, 3, 1000)])
    test = np.column_stack([rng.normal(size=400) + 10, rng.integers(0, 4, 400)])   # far right; a new code
    test[:40, 0] = np.nan
    found = feature_histograms({"train": train, "test": test}, ["x", "code"], bins=10)
    x, code = found["x"], found["code"]
    assert len(x["edges"]) == 11 and x["edges"][0] == train[:, 0].min() and x["edges"][-1] == train[:, 0].max()
    assert sum(x["shares"]["train"]) == pytest.approx(1.0) and x["missing"]["train"] == 0
    # beyond the training range: every finite row in the last bin; the NaN rows are missing
    assert x["shares"]["test"][-1] == pytest.approx(0.9) and sum(x["shares"]["test"][:-1]) == 0
    assert x["missing"]["test"] == pytest.approx(0.1)
    # few distinct values: one bar per training value; a value training never had is not one
    assert code["values"] == [0.0, 1.0, 2.0]
    assert code["shares"]["train"] == pytest.approx([(train[:, 1] == v).mean() for v in range(3)])
    assert sum(code["shares"]["test"]) == pytest.approx((test[:, 1] < 3).mean())


def test_target_balance_counts_classes_and_summarises_values():
    labels = {"train": np.array([0, 1, 1, 2]), "test": np.array([2, 2])}
    task = Task(kind="multiclass", classes=("a", "b", "c"))
    assert target_balance(task, labels) == {"kind": "classes", "classes": ["a", "b", "c"],
                                            "counts": {"train": [1, 2, 1], "test": [0, 0, 2]}}
    values = {"train": np.array([1.0, 2.0, 3.0, np.nan]), "test": np.array([5.0])}
    found = target_balance(Task(kind="regression"), values, bins=4)
    assert found["summary"]["train"] == {"mean": 2.0, "std": pytest.approx(np.std([1, 2, 3])), "min": 1.0, "max": 3.0}
    assert found["edges"] == [1.0, 1.5, 2.0, 2.5, 3.0]
    assert found["counts"] == {"train": [1, 0, 1, 1], "test": [0, 0, 0, 1]}
