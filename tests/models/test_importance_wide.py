"""Permutation importance on wide tables: the shuffled copies scored in one call are bounded in
bytes (rows x columns x itemsize), not rows, and past a budget of cells only the features the
model's score follows most are permuted, which importance.json and the report say."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pipeline.backends import get_backend
from pipeline.stages import SplitData, build_features, train_model
from pipeline.stages.explain import (MIN_PERMUTED, RANKED_BY, explain_models, permutation_importance,
                                     permuted_features)

ROWS, WIDTH, SIGNAL = 400, 80, 3


class CountingModel:
    """A fitted model that counts the rows of each scoring call: the shape the importances ask
    it to score, seen from the model's side."""

    def __init__(self, fitted) -> None:
        self.fitted = fitted
        self.calls: list[tuple[int, int]] = []

    def predict_proba(self, x):
        self.calls.append(x.shape)
        return self.fitted.predict_proba(x)

    def __getattr__(self, name):
        return getattr(self.fitted, name)


@pytest.fixture(scope="module")
def wide():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(ROWS, WIDTH)).astype("float32")
    logit = x[:, :SIGNAL] @ np.array([3.0, -2.5, 2.0]) + rng.normal(scale=0.3, size=ROWS)
    frame = pd.DataFrame(x, columns=[f"x{i}" for i in range(WIDTH)])
    frame["y"] = (logit > 0).astype("int8")
    data = SplitData(frames={"train": frame.iloc[50:].reset_index(drop=True),
                             "test": frame.iloc[:50].reset_index(drop=True)},
                     target="y", positive=1, backend=get_backend("cpu"))
    return train_model(build_features(data, []), "logistic_regression", seed=0, name="logreg")


def test_a_scoring_call_holds_at_most_the_batch_bytes(wide):
    counting = CountingModel(wide.estimator)
    wide_counted = type(wide)(**{**wide.__dict__, "estimator": counting})
    copy_bytes = 50 * WIDTH * 4
    found = permutation_importance(wide_counted, split="test", metric="roc_auc", threshold=0.5, rows=50, repeats=2,
                                   seed=0, batch_bytes=copy_bytes * 7)
    base, *batches = counting.calls
    assert base == (50, WIDTH)
    assert max(rows for rows, _ in batches) == 7 * 50                  # 7 copies of the sample per call
    assert sum(rows for rows, _ in batches) == WIDTH * 2 * 50           # every feature, twice
    assert found["permuted"] == {"features": WIDTH, "of": WIDTH}


def test_past_the_cell_budget_the_features_the_score_follows_are_permuted(wide):
    per_feature = 2 * 50 * WIDTH                                        # repeats x rows x columns
    found = permutation_importance(wide, split="test", metric="roc_auc", threshold=0.5, rows=50, repeats=2,
                                   seed=0, max_cells=per_feature * 15)
    assert found["permuted"]["features"] == 15 and found["permuted"]["of"] == WIDTH
    assert found["permuted"]["ranked_by"] == RANKED_BY
    reason = found["permuted"]["reason"]
    assert f"past the {per_feature * 15:,} cells" in reason and "rows x outputs" not in reason, reason
    assert len(found["mean"]) == 15 and {"x0", "x1", "x2"} <= set(found["mean"])
    assert list(found["mean"])[:1][0] in {"x0", "x1", "x2"}              # the strongest is measured first


def test_the_budget_never_permutes_fewer_than_the_minimum():
    x = np.random.default_rng(1).normal(size=(20, 500))
    chosen = permuted_features(x, x[:, 7], repeats=3, max_cells=1)
    assert len(chosen) == MIN_PERMUTED and 7 in chosen and chosen == sorted(chosen)


def test_importance_json_says_which_features_were_permuted(wide):
    found = explain_models([wide], split="test", metric="roc_auc", threshold=0.5, rows=50, repeats=1,
                           max_cells=50 * WIDTH * 12)
    assert found["permuted"]["logreg"]["features"] == 12 and found["permuted"]["logreg"]["of"] == WIDTH
    assert len(found["models"]["logreg"]["permutation"]["mean"]) == 12
    narrow = explain_models([wide], split="test", metric="roc_auc", threshold=0.5, rows=50, repeats=1)
    assert narrow["permuted"] == {}                                    # within the budget: every feature
