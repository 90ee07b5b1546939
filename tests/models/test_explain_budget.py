"""The default explanations cost a bounded number of scored rows whatever the classes, rows and
columns: the permutation sample shrinks with classes x features, SHAP runs on a bounded sample,
and what they used is recorded (importance.json, the evaluate stage's facts, the report)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd
import pytest

from pipeline.backends import get_backend
from pipeline.core.problems import Task
from pipeline.features import Standardize
from pipeline.stages import SplitData, build_features, train_model
from pipeline.stages.evaluate import explained_facts
from pipeline.stages.explain import (FIT_SHARE, FLOOR_SECONDS, MIN_PERMUTED, MIN_SAMPLE_ROWS, MIN_TIMED_ROWS,
                                     explain_models, native_rows, permuted_count, sample_rows, time_cap,
                                     within_seconds)
from pipeline.stages.train import TrainedModel

CLASSES = 7


def table(rows: int, width: int, seed: int) -> pd.DataFrame:
    """Seven classes, the first three columns shifted by the class, the rest noise."""
    rng = np.random.default_rng(seed)
    label = rng.integers(0, CLASSES, size=rows)
    x = rng.normal(size=(rows, width))
    x[:, :3] += np.linspace(-2, 2, CLASSES)[label, None]
    frame = pd.DataFrame(x, columns=[f"x{j}" for j in range(width)])
    frame["y"] = label.astype("int32")          # class codes, as the split stage leaves them
    return frame


def features_of(width: int):
    data = SplitData(frames={"train": table(1500, width, 1), "test": table(1500, width, 2)},
                     target="y", positive=None, backend=get_backend("cpu"),
                     task=Task("multiclass", classes=tuple(f"k{k}" for k in range(CLASSES))))
    return build_features(data, [Standardize(columns=[f"x{j}" for j in range(width)])])


@dataclass
class Counted(TrainedModel):
    """A trained model that counts the rows it is asked to score (what a plugin model's own
    ``scorer_for`` could do): the explanations' cost, counted where it is paid."""

    scored: list[int] = field(default_factory=list)

    def scorer_for(self, features: Any):
        inner = super().scorer_for(features)

        def score(split: str):
            out = inner(split)
            self.scored.append(len(out))
            return out
        return score


def counted(features, model: str, params: dict[str, Any]) -> Counted:
    trained = train_model(features, model, params, seed=0, name=model)
    return Counted(**{k: getattr(trained, k) for k in TrainedModel.__dataclass_fields__})


@pytest.fixture(scope="module")
def narrow():
    return features_of(12)


@pytest.fixture(scope="module")
def wide():
    return features_of(40)


def test_the_permutation_sample_shrinks_with_classes_and_features_to_fit_the_budget(narrow):
    model = counted(narrow, "xgboost", {"n_estimators": 5, "max_depth": 2})
    assert model.task.n_outputs == CLASSES
    found = explain_models([model], split="test", metric="log_loss", threshold=0.5, rows=5000, repeats=3,
                           budget=100_000, native_budget=700)
    # 100,000 // (7 classes x (12 features x 3 repeats + 1)) = 386 rows: every 4th of the 1,500
    assert found["rows"]["xgboost"] == 375
    assert found["permuted"] == {}                                   # all 12 features fit
    assert sum(model.scored) * CLASSES == found["scored_rows"]["xgboost"] == 375 * 37 * CLASSES
    assert found["scored_rows"]["xgboost"] <= 100_000
    # SHAP: 700 row-outputs / 7 classes = 100, raised to the floor of 200 rows
    assert found["native_rows"]["xgboost"] <= MIN_SAMPLE_ROWS
    assert set(found["models"]["xgboost"]) == {"permutation", "gain", "shap"}
    assert list(found["models"]["xgboost"]["permutation"]["mean"])[0] in {"x0", "x1", "x2"}
    assert found["budgets"]["scored_rows"] == 100_000
    assert explained_facts(found) == {"xgboost": {"permutation": 375, "scored_rows": 375 * 37 * CLASSES,
                                                  "native": found["native_rows"]["xgboost"]}}


def test_past_the_smallest_sample_fewer_features_are_permuted_and_the_budget_still_holds(wide):
    model = counted(wide, "logistic_regression", {"max_iter": 200})
    found = explain_models([model], split="test", metric="log_loss", threshold=0.5, rows=5000, repeats=3,
                           budget=100_000)
    n = found["rows"]["logistic_regression"]
    assert n <= MIN_SAMPLE_ROWS                     # 40 features x 3 x 7 classes leave too few: the floor
    chosen = found["permuted"]["logistic_regression"]
    assert MIN_PERMUTED <= chosen["features"] < chosen["of"] == 40
    assert "past the 100,000 rows x outputs" in chosen["reason"] and "cells" not in chosen["reason"], chosen["reason"]
    assert sum(model.scored) * CLASSES == found["scored_rows"]["logistic_regression"] <= 100_000
    assert found["native_rows"] == {}               # logistic regression has no explainer of its own


@dataclass
class Slow(Counted):
    """Scores as a large ensemble does: a fixed 50 ms per call, whatever the rows."""

    def scorer_for(self, features: Any):
        inner = super().scorer_for(features)

        def score(split: str):
            time.sleep(0.05)
            return inner(split)
        return score


def test_a_model_that_scores_slowly_gets_fewer_features_permuted_within_its_seconds(wide):
    fitted = counted(wide, "logistic_regression", {"max_iter": 200})
    fast = explain_models([fitted], split="test", metric="log_loss", threshold=0.5, rows=300, repeats=3,
                          budget=10**9)
    assert fast["permuted"] == {}                   # no time cap: all 40 features
    slow = Slow(**{k: getattr(fitted, k) for k in TrainedModel.__dataclass_fields__})
    started = time.perf_counter()
    capped = explain_models([slow], split="test", metric="log_loss", threshold=0.5, rows=300, repeats=3,
                            budget=10**9, seconds=0.2)
    took = time.perf_counter() - started
    chosen = capped["permuted"]["logistic_regression"]
    # 0.2 s at 50 ms a call of 300 rows affords 4 x 300 rows: fewer than one feature's 3 repeats,
    # so the floor of MIN_PERMUTED features, one batched call
    assert chosen["features"] == MIN_PERMUTED < chosen["of"] == 40
    assert chosen["seconds"] == 0.2 and "0.2 s" in chosen["reason"]
    # The reason names the cap that cut it, the time, not the cells or rows x outputs it is far within.
    assert "longer than the 0.2 s" in chosen["reason"] and "cells" not in chosen["reason"], chosen["reason"]
    # Even the floors (10 features x 3 repeats x 300 rows) cost more than 0.2 s: one shuffle per
    # feature, on fewer rows.
    assert chosen["repeats"] == 1 and MIN_TIMED_ROWS <= chosen["rows"] < 300 and "0.2 s afford" in chosen["time"]
    assert capped["rows"]["logistic_regression"] == chosen["rows"]
    assert len(slow.scored) < 5 and took < 5


def test_within_seconds_cuts_repeats_first_then_rows_never_below_the_floor():
    assert within_seconds(None, 0.001, 0.0, 10, 3, 200) is None                 # no cap
    assert within_seconds(100.0, 0.001, 0.0, 10, 3, 200) is None                # 6,000 rows fit
    assert within_seconds(1.0, 0.001, 0.0, 10, 3, 200) == (1, 100)              # 1,000 rows: 1 x 100
    assert within_seconds(5.0, 0.001, 0.0, 10, 3, 200) == (2, 200)              # 5,000 rows: 2 repeats
    assert within_seconds(0.01, 0.001, 0.0, 10, 3, 200) == (1, MIN_TIMED_ROWS)  # the floor holds
    assert within_seconds(1.0, 0.001, 0.9, 10, 3, 200) == (1, MIN_TIMED_ROWS)   # what was spent counts


def test_the_time_cap_is_a_share_of_the_model_fit_with_a_floor(narrow):
    fitted = counted(narrow, "logistic_regression", {"max_iter": 50})
    assert time_cap(replace(fitted, fit_seconds=300.0), None) == pytest.approx(FIT_SHARE * 300.0)
    assert time_cap(replace(fitted, fit_seconds=0.05), None) == FLOOR_SECONDS
    assert time_cap(replace(fitted, fit_seconds=0.0), None) is None          # no fit recorded: no cap
    assert time_cap(replace(fitted, fit_seconds=300.0), 1.5) == 1.5          # given: as given


@pytest.mark.parametrize("classes", [1, 2, 7, 50])
@pytest.mark.parametrize("width", [3, 40, 400, 10_000])
def test_the_planned_scoring_is_bounded_whatever_the_classes_and_columns(classes, width):
    budget, repeats = 250_000, 3
    n = sample_rows(5000, width, repeats, classes, budget)
    keep = min(width, permuted_count(n, width, repeats, 10**9, outputs=classes, budget=budget))
    scored = n * classes * (keep * repeats + 1)
    floor = MIN_SAMPLE_ROWS * classes * (MIN_PERMUTED * repeats + 1)
    assert scored <= max(budget, floor)
    assert n >= min(5000, MIN_SAMPLE_ROWS)
    assert native_rows(5000, classes) * classes <= max(1_000, MIN_SAMPLE_ROWS * classes)


def test_a_run_records_what_its_explanations_used_in_the_facts_and_the_report(tmp_path):
    from pipeline import run_pipeline

    frame = table(700, 6, 3)
    frame["y"] = np.array([f"k{k}" for k in range(CLASSES)])[frame["y"]]
    frame.to_csv(tmp_path / "seven.csv", index=False)
    (tmp_path / "seven.yaml").write_text(f"""\
name: seven
device: cpu
stages:
  raw: {{kind: load, path: {tmp_path / "seven.csv"}}}
  split: {{kind: split, inputs: [raw], target: y, task: multiclass, test: 0.3}}
  features:
    kind: features
    inputs: [split]
    ops: [standardize: {{columns: [x0, x1, x2, x3, x4, x5]}}]
  xgb: {{kind: train, inputs: [features], model: xgboost, params: {{n_estimators: 3, max_depth: 2}}}}
  evaluate: {{kind: evaluate, inputs: [xgb], importance_budget: 20000}}
""")
    result = run_pipeline(tmp_path / "seven.yaml", runs_dir=tmp_path / "runs", cache=False)
    explained = result.manifest.stages["evaluate"].facts["explained"]["xgb"]
    # 20,000 // (7 x (6 x 3 + 1)) = 150 rows, raised to the floor of 200: all 210 test rows fit
    # no more than 200 spread rows, so every 2nd: 105
    assert explained["permutation"] == 105
    assert explained["scored_rows"] == 105 * CLASSES * (6 * 3 + 1)
    assert explained["native"] <= MIN_SAMPLE_ROWS
    from pipeline.report.build import build_report

    page = build_report(result.run_dir).read_text()         # the suite turns the run's own report off
    assert f"own importances (SHAP) on xgb: {explained['native']} rows" in page
    assert "budget 20,000 per model" in page
