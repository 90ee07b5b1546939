"""``tune:`` scored by cross-validation, with the stage's own params as trial 0 and kept unless
the best trial beats them by more than the folds' spread."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from pipeline.backends import get_backend
from pipeline.core.errors import ConfigError
from pipeline.features import Standardize
from pipeline.featuresets.folds import MatrixFolds
from pipeline.stages import StageContext, build_features, split_frame, train_model
from pipeline.stages.torch_mlp import TorchSpec, train_torch
from pipeline.stages.train import TrainSpec, run_train
from pipeline.stages.training.tuning import (
    BASELINE_NOTE, GAIN_MARGIN, RegistryTrainer, TorchTrainer, TrialRecord, TuneSpec, decide, tune_model,
)

XGB = {"n_estimators": 10, "n_jobs": 1}


def binary_features(rows: int = 400, valid: float = 0.2):
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(2, rows))
    y = np.where(rng.random(rows) < 1 / (1 + np.exp(-(1.5 * a - b))), "yes", "no")
    frame = pd.DataFrame({"a": a, "b": b, "y": y})
    data = split_frame(frame, "y", positive="yes", test=0.2, valid=valid, seed=1, backend=get_backend("cpu"))
    return build_features(data, [Standardize(columns=["a", "b"])])


def regression_features(seed: int, *, rows: int = 1000, noise_columns: int = 77, valid: float = 0.02):
    """Three informative columns among many noise columns: ridge's alpha matters, and a valid
    split of 20 rows cannot tell good alphas from lucky ones."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, 3 + noise_columns))
    y = 2 * x[:, 0] + x[:, 1] - x[:, 2] + 2 * rng.normal(size=rows)
    columns = [f"x{i}" for i in range(x.shape[1])]
    frame = pd.DataFrame(x, columns=columns).assign(y=y)
    data = split_frame(frame, "y", test=0.7, valid=valid, seed=seed, backend=get_backend("cpu"))
    return build_features(data, [Standardize(columns=columns)])


def spec(**block) -> TuneSpec:
    return TuneSpec.model_validate({"trials": 4, "cv": 3, **block})


# ------------------------------------------------------------------ trial 0 is the defaults
def test_trial_0_is_the_stage_params_and_the_sampler_learns_from_it():
    features = binary_features()
    result = tune_model(features, RegistryTrainer(train_model, "xgboost", {**XGB, "max_depth": 3}, seed=1),
                        spec(space={"max_depth": {"int": [1, 6]}}), seed=3)
    first = result.trials[0]
    assert first.number == 0 and first.params == {"max_depth": 3} and BASELINE_NOTE in first.note
    assert result.baseline is first and len(first.folds) == 3
    # Trained exactly as the stage's params would be: the same score as a search without a space
    # value merged in.
    plain = tune_model(features, RegistryTrainer(train_model, "xgboost", {**XGB, "max_depth": 3}, seed=1),
                       spec(trials=1, space={"max_depth": {"int": [1, 6]}}), seed=3)
    assert plain.trials[0].folds == first.folds and plain.kept_defaults


def test_defaults_outside_the_space_or_not_set_are_still_trial_0():
    features = binary_features()
    outside = tune_model(features, RegistryTrainer(train_model, "xgboost", {**XGB, "max_depth": 9}, seed=1),
                         spec(space={"max_depth": {"int": [1, 6]}}), seed=3)
    assert outside.trials[0].params == {"max_depth": 9} and outside.trials[0].state == "COMPLETE"
    assert all(1 <= t.params["max_depth"] <= 6 for t in outside.trials[1:])
    assert [t.number for t in outside.trials] == [0, 1, 2, 3]
    unset = tune_model(features, RegistryTrainer(train_model, "xgboost", XGB, seed=1),
                       spec(space={"max_depth": {"int": [1, 6]}}), seed=3)
    assert unset.trials[0].params == {} and unset.baseline is unset.trials[0]


# ------------------------------------------------------------------ the keep-defaults rule
def record(number: int, folds: list[float]) -> TrialRecord:
    return TrialRecord(number, {"p": number}, float(np.mean(folds)), "COMPLETE", 0.0, folds=folds)


def test_a_gain_within_the_folds_spread_keeps_the_defaults():
    baseline = record(0, [0.80, 0.70, 0.90, 0.75, 0.85])
    noisy = record(3, [0.84, 0.68, 0.93, 0.73, 0.87])          # +0.01 on average, up and down by fold
    chosen, gain, spread = decide(noisy, baseline, True, GAIN_MARGIN)
    assert chosen is baseline and gain == pytest.approx(0.01) and gain < spread
    assert decide(noisy, baseline, True, 0.0)[0] is noisy          # gain_margin: 0 takes any gain
    steady = record(4, [0.82, 0.72, 0.92, 0.77, 0.87])         # +0.02 on every fold: no spread
    assert decide(steady, baseline, True, GAIN_MARGIN)[:2] == (steady, pytest.approx(0.02))
    # A loss (rmse): lower is better, so the gain is turned.
    losses = record(0, [1.0, 1.2, 0.9]), record(1, [0.9, 1.1, 0.8])
    assert decide(losses[1], losses[0], False, GAIN_MARGIN)[:2] == (losses[1], pytest.approx(0.1))
    assert decide(baseline, baseline, True, GAIN_MARGIN) == (baseline, 0.0, 0.0)
    assert decide(steady, None, True, GAIN_MARGIN) == (steady, None, None)    # trial 0 failed


def test_a_search_whose_gains_are_noise_trains_the_stage_params_and_says_so(tmp_path):
    stage = TrainSpec.model_validate({
        "kind": "train", "inputs": ["f"], "model": "logistic_regression", "params": {"C": 1.0},
        "tune": {"trials": 5, "cv": 4, "space": {"C": {"float": [0.9, 1.1]}}}})
    ctx = StageContext(backend=get_backend("cpu"), seed=42, stage="m", artifacts_dir=tmp_path / "m")
    trained = run_train(stage, ctx, {"f": binary_features()})
    tuning = ctx.facts["tuning"]
    assert tuning["scoring"] == "cv" and tuning["scored_on"].startswith("mean of 4 folds over the training and valid")
    assert tuning["baseline"]["trial"] == 0 and len(tuning["baseline"]["folds"]) == 4
    assert len(tuning["winner_folds"]) == 4 and tuning["margin"] == GAIN_MARGIN
    assert tuning["kept_defaults"] is True and tuning["chosen_trial"] == 0 and tuning["chosen_params"] == {"C": 1.0}
    assert abs(tuning["gain"]) <= tuning["spread"] or tuning["best_trial"] == 0
    assert trained.params["C"] == 1.0
    assert trained.tuning["kept_defaults"] and "trial 0" in (tmp_path / "m" / "tuning.csv").read_text()
    saved = json.loads((tmp_path / "m" / "tuning.json").read_text())
    assert saved["kept_defaults"] is True and saved["baseline"]["folds"] == tuning["baseline"]["folds"]


# ------------------------------------------------------------------ a narrow valid split misleads
def heldout_mse_change(features, params: dict, own: dict) -> tuple[float, float]:
    """Mean change of the test rows' squared error from ``own`` to ``params`` (ridge), and its
    standard error: the noise of a paired comparison on those rows."""
    def squared_errors(p: dict) -> np.ndarray:
        scores = train_model(features, "ridge", {**own, **p}, seed=1).scores["test"]
        return (scores - features.labels("test")) ** 2

    change = squared_errors(params) - squared_errors({})
    return float(change.mean()), float(change.std(ddof=1) / np.sqrt(len(change)))


def test_a_narrow_valid_split_misleads_and_cross_validation_with_kept_defaults_does_not():
    features = regression_features(seed=7)
    assert features.rows() == {"train": 280, "valid": 20, "test": 700}
    own = {"alpha": 100.0}                              # about right for this data
    space = {"alpha": {"float": [1e-3, 1e4], "log": True}}
    trainer = RegistryTrainer(train_model, "ridge", own, seed=1)
    on_valid = tune_model(features, trainer, TuneSpec.model_validate({"trials": 25, "scoring": "valid",
                                                                       "space": space}), seed=7)
    by_cv = tune_model(features, trainer, TuneSpec.model_validate({"trials": 25, "space": space}), seed=7)
    assert on_valid.scoring == "valid" and by_cv.scoring == "cv" and by_cv.folds == 5
    # Both searches start from the same trial 0; on 20 rows another alpha looks better ...
    assert on_valid.trials[0].params == by_cv.trials[0].params == own
    assert not on_valid.kept_defaults
    worse, noise = heldout_mse_change(features, on_valid.chosen_params, own)
    # ... and is clearly worse on 700 held-out rows than the untuned params,
    print(f"valid scoring: alpha {on_valid.chosen_params}, test MSE change {worse:+.4f} (se {noise:.4f})")
    assert worse > 2 * noise
    # while the cross-validated search is not worse than untuned beyond that noise.
    change, noise = heldout_mse_change(features, by_cv.chosen_params, own)
    print(f"cv scoring: alpha {by_cv.chosen_params}, kept {by_cv.kept_defaults}, gain {by_cv.gain:+.4f} "
          f"spread {by_cv.spread:.4f}, test MSE change {change:+.4f} (se {noise:.4f})")
    assert change < 2 * noise


# ------------------------------------------------------------------ the fold source and the stages
def test_matrix_folds_cover_the_training_and_valid_rows_once():
    features = binary_features()
    source = MatrixFolds.of_features(features, 4, seed=2)
    total = features.rows()["train"] + features.rows()["valid"]
    scored = np.sort(np.concatenate([scored for _, scored in source.positions]))
    assert np.array_equal(scored, np.arange(total))
    fold = source.features(1)
    assert fold.rows() == {"train": len(source.positions[1][0]), "valid": len(source.positions[1][1]), "test": 0}
    pooled_y = np.concatenate([features.labels("train"), features.labels("valid")])
    assert np.array_equal(fold.labels("valid"), pooled_y[source.positions[1][1]])


def test_valid_scoring_without_valid_rows_is_refused():
    with pytest.raises(ConfigError, match="scoring: valid"):
        tune_model(binary_features(valid=0.0), RegistryTrainer(train_model, "xgboost", XGB, seed=1),
                   spec(scoring="valid", space={"max_depth": {"int": [1, 3]}}))


def test_the_torch_stage_keeps_valid_scoring_by_default_and_can_cross_validate():
    features = binary_features()
    own = TorchSpec(kind="torch", epochs=1, batch_size=128, hidden=[8]).model_dump(
        exclude={"kind", "inputs", "description", "tune"})
    trainer = TorchTrainer(train_torch, {**own, "distributed": None}, seed=1)
    space = {"learning_rate": {"float": [1e-3, 1e-1], "log": True}}
    default = tune_model(features, trainer, spec(trials=2, space=space), seed=1)
    assert default.scoring == "valid" and default.trials[0].params["learning_rate"] == own["learning_rate"]
    assert "validation loss of each epoch" in default.pruning
    folded = tune_model(features, trainer, spec(trials=2, scoring="cv", cv=2, space=space), seed=1)
    assert folded.scoring == "cv" and [len(t.folds) for t in folded.trials] == [2, 2]
    assert folded.pruning.startswith("none")      # each fold trains every epoch: nothing to prune on
