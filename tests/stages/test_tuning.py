"""``tune:`` on train and torch stages: the config block, the search and where its trials run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.support.cli import run_cli as _pipeline
from pipeline.backends import get_backend
from pipeline.backends.clusters.startup import cluster_workers
from pipeline.cache import stage_key
from pipeline.config import dump_config, load_config
from pipeline.core.errors import ConfigError
from pipeline.features import Standardize
from pipeline.metrics import task_metrics
from pipeline.stages import StageContext, build_features, split_frame, train_model
from pipeline.stages.torch_mlp import TorchSpec, run_torch
from pipeline.stages.train import TrainSpec, run_train
from pipeline.stages.training.tuning import RegistryTrainer, TuneSpec, parse_duration, tune_model

# Small and quick: every test here trains a few dozen models on one or two cores.
XGB = {"n_estimators": 30, "n_jobs": 1}


def churn_frame(rows: int = 600, seed: int = 0) -> pd.DataFrame:
    """id, three numbers and a yes/no target that depends on them (not linearly)."""
    rng = np.random.default_rng(seed)
    a, b, c = rng.normal(size=(3, rows))
    logit = 1.5 * a - b + 0.8 * a * c
    churn = np.where(rng.random(rows) < 1 / (1 + np.exp(-logit)), "yes", "no")
    return pd.DataFrame({"id": np.arange(rows), "a": a, "b": b, "c": c, "churn": churn})


def make_features(*, valid: float = 0.2, folds: int | None = None):
    data = split_frame(churn_frame(), "churn", positive="yes", test=0.2, valid=valid, seed=1, folds=folds,
                       backend=get_backend("cpu"))
    return build_features(data, [Standardize(columns=["a", "b", "c"])], id_column="id")


@pytest.fixture(scope="module")
def features():
    return make_features()


def stage_ctx(tmp_path: Path, name: str = "m", seed: int = 42) -> StageContext:
    return StageContext(backend=get_backend("cpu"), seed=seed, stage=name, artifacts_dir=tmp_path / name)


def xgb_trainer(**params) -> RegistryTrainer:
    return RegistryTrainer(train_model, "xgboost", {**XGB, **params}, seed=1)


def outcomes(result) -> list[tuple]:
    return [(t.number, t.params, t.value, t.state) for t in result.trials]


# ------------------------------------------------------------------ the config block
CONFIG = """\
name: t
stages:
  raw:
    kind: load
    path: data.csv
  split:
    kind: split
    inputs: [raw]
    target: y
    valid: 0.2
  features:
    kind: features
    inputs: [split]
  m:
    kind: train
    inputs: [features]
    model: xgboost
    params: {n_estimators: 50}
    tune:
"""


def tuned(block: str) -> str:
    return CONFIG + "".join(f"      {line}\n" for line in block.strip().splitlines())


def issues(text: str) -> dict[str, str]:
    with pytest.raises(ConfigError) as info:
        load_config(text=text)
    return {issue.path: issue.message for issue in info.value.issues}


def test_the_space_reads_as_written_and_a_resolved_config_loads_again():
    text = tuned("""
trials: 40
timeout: 10m
metric: log_loss
space:
  max_depth: {int: [3, 10]}
  learning_rate: {float: [0.01, 0.3], log: true}
  n_estimators: {int: [100, 1000], step: 100}
  grow_policy: {choice: [depthwise, lossguide]}
""")
    spec = load_config(text=text).stages["m"].tune
    assert spec.trials == 40 and spec.timeout == 600.0 and spec.metric == "log_loss" and spec.pruning
    assert spec.space["learning_rate"].model_dump() == {"float": [0.01, 0.3], "log": True}
    assert spec.space["n_estimators"].model_dump() == {"int": [100, 1000], "step": 100}
    again = load_config(text=dump_config(load_config(text=text))).stages["m"].tune
    assert again == spec


@pytest.mark.parametrize(("block", "path", "words"), [
    ("trials: 5\nspace: {max_depth: {int: [10, 3]}}", "stages.m.tune.space.max_depth", "low must be below high"),
    ("trials: 5\nspace: {learning_rate: {float: [0, 0.3], log: true}}", "stages.m.tune.space.learning_rate",
     "log: true needs a low bound above 0"),
    ("trials: 5\nspace: {max_depth: {int: [1, 10], step: 4}}", "stages.m.tune.space.max_depth", "does not divide"),
    ("trials: 5\nspace: {max_depth: {ints: [1, 10]}}", "stages.m.tune.space.max_depth.ints",
     "did you mean 'int'"),
    ("trials: 5\nspace: {max_depth: {}}", "stages.m.tune.space.max_depth", "exactly one of int"),
    ("trials: 5\nspace: {max_dept: {int: [3, 10]}}", "stages.m.tune.space.max_dept", "space.max_dept"),
    ("trials: 5\nseed: -1\nspace: {max_depth: {int: [3, 10]}}", "stages.m.tune.seed", "greater than or equal to 0"),
    ("trials: 5\ncv: 1000\nspace: {max_depth: {int: [3, 10]}}", "stages.m.tune.cv", "less than or equal to 100"),
    ("trials: 5\nspace: {subsample: {float: [true, 0.9]}}", "stages.m.tune.space.subsample.float",
     "not true or false"),
    ("space: {max_depth: {int: [3, 10]}}", "stages.m.tune", "needs a budget"),
    ("trials: 5\ntimeout: 10 parsecs\nspace: {max_depth: {int: [3, 10]}}", "stages.m.tune.timeout",
     "not a duration"),
    ("trials: 5\nmetric: roc_acu\nspace: {max_depth: {int: [3, 10]}}", "stages.m.tune.metric",
     "did you mean 'roc_auc'"),
    ("trials: 0\nspace: {max_depth: {int: [3, 10]}}", "stages.m.tune.trials", "greater than 0"),
    ("trials: 5\nspace: {}", "stages.m.tune.space", "at least 1"),
])
def test_config_errors_name_the_key(block, path, words):
    found = issues(tuned(block))
    assert path in found, found
    assert words in found[path]


def test_an_unknown_param_gets_the_closest_name():
    message = issues(tuned("trials: 5\nspace: {max_dept: {int: [3, 10]}}"))["stages.m.tune.space.max_dept"]
    assert "unknown parameter 'max_dept' for model 'xgboost'" in message and "did you mean 'max_depth'" in message


def test_the_torch_stage_checks_fields_and_range_ends():
    base = CONFIG.split("  m:")[0] + "  mlp:\n    kind: torch\n    inputs: [features]\n    tune:\n"
    unknown = issues(base + "      trials: 3\n      space: {learnig_rate: {float: [0.001, 0.1]}}\n")
    assert "did you mean 'learning_rate'" in unknown["stages.mlp.tune.space.learnig_rate"]
    not_tunable = issues(base + "      trials: 3\n      space: {device: {choice: [cpu, cuda]}}\n")
    assert "space.device" in not_tunable["stages.mlp.tune.space.device"] and "budget" not in str(not_tunable)
    bad_end = issues(base + "      trials: 3\n      space: {dropout: {float: [0.0, 1.5]}}\n")
    assert "space.dropout: 1.5 is not a valid dropout" in bad_end["stages.mlp.tune"]


@pytest.mark.parametrize(("text", "seconds"), [(90, 90.0), ("90s", 90.0), ("10m", 600.0), ("1h", 3600.0),
                                               ("1h30m", 5400.0), ("2.5 min", 150.0)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


# ------------------------------------------------------------------ the search
def test_the_same_seed_gives_the_same_trials(features):
    spec = TuneSpec.model_validate({"trials": 5, "space": {"max_depth": {"int": [2, 6]},
                                                           "learning_rate": {"float": [0.02, 0.5], "log": True}}})
    first = tune_model(features, xgb_trainer(), spec, seed=7)
    second = tune_model(features, xgb_trainer(), spec, seed=7)
    assert outcomes(first) == outcomes(second)
    assert all(t.state == "COMPLETE" for t in first.trials)
    other = tune_model(features, xgb_trainer(), spec, seed=8)
    assert [t.params for t in other.trials] != [t.params for t in first.trials]
    assert first.to_dict()["sampler"] == "TPE" and first.to_dict()["seed"] == 7


def test_hopeless_xgboost_trials_are_pruned(features):
    spec = TuneSpec.model_validate({"trials": 14, "space": {"learning_rate": {"float": [1e-7, 1.0], "log": True}}})
    result = tune_model(features, xgb_trainer(n_estimators=40), spec, seed=3)
    states = [t.state for t in result.trials]
    assert "PRUNED" in states and states.count("COMPLETE") >= 5
    pruned = [t for t in result.trials if t.state == "PRUNED"]
    assert all(t.value is None and "pruned at step" in t.note for t in pruned)
    # The pruned trials are ones that learn next to nothing in 40 rounds: a tiny learning rate.
    assert all(t.params["learning_rate"] < 1e-3 for t in pruned)
    assert "XGBoost boosting round" in result.pruning
    unpruned = tune_model(features, xgb_trainer(n_estimators=40), spec.model_copy(update={"pruning": False}), seed=3)
    assert {t.state for t in unpruned.trials} == {"COMPLETE"}


def test_models_that_report_nothing_run_every_trial(features):
    spec = TuneSpec.model_validate({"trials": 3, "space": {"C": {"float": [0.01, 10.0], "log": True}}})
    result = tune_model(features, RegistryTrainer(train_model, "logistic_regression", {}, seed=1), spec, seed=1)
    assert result.pruning.startswith("none") and {t.state for t in result.trials} == {"COMPLETE"}


def test_the_stage_trains_the_winner_and_records_the_search(features, tmp_path):
    spec = TrainSpec.model_validate({
        "kind": "train", "inputs": ["f"], "model": "xgboost", "params": XGB,
        "tune": {"trials": 6, "seed": 11, "scoring": "valid", "space": {"max_depth": {"int": [1, 6]},
                                                    "learning_rate": {"float": [0.01, 0.5], "log": True}}}})
    ctx = stage_ctx(tmp_path)
    trained = run_train(spec, ctx, {"f": features})
    tuning = trained.tuning
    assert tuning["metric"] == "roc_auc" and tuning["direction"] == "maximize" and len(tuning["trials"]) == 6
    complete = [t for t in tuning["trials"] if t["state"] == "COMPLETE"]
    best = max(complete, key=lambda t: t["value"])
    assert tuning["best_params"] == best["params"] and tuning["best_value"] == best["value"]
    # Scored on the valid split there is no spread: the best trial wins if it beats trial 0 at all.
    assert tuning["trials"][0]["number"] == 0 and tuning["baseline"]["trial"] == 0
    assert tuning["kept_defaults"] == (best["number"] == 0) and tuning["chosen_trial"] == best["number"]
    assert {k: trained.params[k] for k in best["params"]} == best["params"]
    assert trained.params["n_estimators"] == XGB["n_estimators"]          # the stage's own params stay
    # The final model is the best trial's model: the same validation score.
    valid = task_metrics(features.task, features.labels("valid"), trained.scores["valid"])["roc_auc"]
    assert valid == pytest.approx(tuning["best_value"], abs=1e-12)
    assert ctx.facts["tuning"]["best_value"] == tuning["best_value"]
    assert sum(ctx.facts["tuning"]["counts"].values()) == 6
    table = pd.read_csv(ctx.artifact_path("tuning.csv"))
    assert list(table["number"]) == list(range(6)) and set(table.columns) >= {"state", "roc_auc", "max_depth"}


def test_text_where_the_model_takes_a_number_in_the_space_is_refused_before_any_trial(features, tmp_path):
    """Each trial that drew 'fast' failed alone (state FAIL) and the search went on: the stage
    succeeded with a typo in its space and no word of it."""
    spec = TrainSpec.model_validate({
        "kind": "train", "inputs": ["f"], "model": "xgboost", "params": XGB,
        "tune": {"trials": 4, "space": {"max_depth": {"int": [2, 4]}, "learning_rate": {"choice": [0.1, "fast"]}}}})
    ctx = stage_ctx(tmp_path)
    with pytest.raises(ConfigError) as info:
        run_train(spec, ctx, {"f": features})
    (issue,) = info.value.issues
    assert issue.path == "stages.m.tune" and "space.learning_rate: 'fast'" in issue.message
    assert "takes a number" in issue.message and info.value.exit_code == 2
    assert "tuning" not in ctx.facts
    # scikit-learn's estimators say what they take in their parameter constraints, not annotations.
    logistic = TrainSpec.model_validate({"kind": "train", "inputs": ["f"], "model": "logistic_regression",
                                         "tune": {"trials": 3, "space": {"C": {"choice": ["a", "b"]}}}})
    with pytest.raises(ConfigError, match=r"space\.C: 'a' is not a valid C: .*The 'C' parameter of "
                                          r"LogisticRegression must be a float"):
        run_train(logistic, stage_ctx(tmp_path, "lr"), {"f": features})


def test_a_metric_of_another_task_and_a_split_without_valid_rows_are_refused(features):
    space = {"max_depth": {"int": [2, 4]}}
    with pytest.raises(ConfigError, match="'rmse' does not apply to binary"):
        tune_model(features, xgb_trainer(), TuneSpec.model_validate({"trials": 2, "metric": "rmse", "space": space}))
    with pytest.raises(ConfigError, match=r"scoring: valid.*set valid: .*scoring: cv"):
        tune_model(make_features(valid=0.0), xgb_trainer(),
                   TuneSpec.model_validate({"trials": 2, "scoring": "valid", "space": space}))
    # Scored by cross-validation (the default), the training rows alone suffice.
    result = tune_model(make_features(valid=0.0), xgb_trainer(), TuneSpec.model_validate({"trials": 2, "space": space}))
    assert result.scored_on.startswith("mean of 5 folds over the training rows")


def test_every_trial_failing_is_the_stage_error(features):
    spec = TuneSpec.model_validate({"trials": 2, "space": {"max_depth": {"choice": ["deep", "deeper"]}}})
    with pytest.raises(Exception, match="max_depth") as info:       # trial 0 (the stage's own) fails too
        tune_model(features, xgb_trainer(max_depth="deep"), spec)
    assert any("every one of the 2 trials failed" in note for note in getattr(info.value, "__notes__", []))


def test_tuning_with_folds_scores_by_the_folds_mean(tmp_path):
    folded = make_features(valid=0.0, folds=3)
    spec = TrainSpec.model_validate({
        "kind": "train", "inputs": ["f"], "model": "logistic_regression",
        "tune": {"trials": 3, "space": {"C": {"float": [0.001, 10.0], "log": True}}}})
    trained = run_train(spec, stage_ctx(tmp_path), {"f": folded})
    assert trained.tuning["scored_on"].startswith("mean of 3 folds (the split's folds")
    # The stage's cross-validation of the trained params gives the chosen trial's value.
    chosen = trained.tuning["trials"][trained.tuning["chosen_trial"]]
    assert trained.cv["mean"]["roc_auc"] == pytest.approx(chosen["value"], abs=1e-12)
    assert [fold["roc_auc"] for fold in trained.cv["per_fold"]] == pytest.approx(chosen["folds"], abs=1e-12)
    assert trained.params["C"] == trained.tuning["chosen_params"].get("C", 1.0)


def test_the_torch_stage_tunes_its_fields(features, tmp_path):
    spec = TorchSpec.model_validate({
        "kind": "torch", "inputs": ["f"], "epochs": 3, "batch_size": 64, "hidden": [8],
        "tune": {"trials": 3, "space": {"learning_rate": {"float": [1e-3, 1e-1], "log": True},
                                        "hidden": {"choice": [[8], [16, 8]]}}}})
    ctx = stage_ctx(tmp_path, "mlp")
    trained = run_torch(spec, ctx, {"f": features})
    tuning = trained.tuning
    assert len(tuning["trials"]) == 3 and tuning["metric"] == "roc_auc"
    assert all(t["params"]["hidden"] in ([8], [16, 8]) for t in tuning["trials"])
    assert trained.params["hidden"] == tuning["best_params"]["hidden"]
    assert trained.params["learning_rate"] == tuning["best_params"]["learning_rate"]
    assert "tune" not in trained.params
    assert "validation loss of each epoch" in tuning["pruning"]
    assert ctx.artifact_path("tuning.csv").exists()


# ------------------------------------------------------------------ the cache key
def test_the_cache_key_covers_the_space_and_the_budget():
    def key(**tune_block) -> str:
        block = {"trials": 10, "space": {"max_depth": {"int": [3, 10]}}, **tune_block}
        spec = TrainSpec.model_validate({"kind": "train", "inputs": ["f"], "model": "xgboost", "tune": block})
        return stage_key(spec, {"f": "abc"}, fingerprint={}, code=(), backend="cpu", versions={}, seed=1)

    assert key() == key()
    assert key(space={"max_depth": {"int": [3, 11]}}) != key()
    assert key(space={"max_depth": {"int": [3, 10], "log": True}}) != key()
    assert key(trials=11) != key()
    assert key(timeout="1h") != key(timeout="2h")
    assert key(metric="log_loss") != key()
    assert key(seed=5) != key()


# ------------------------------------------------------------------ on a Dask cluster
def _tune_in_a_worker_task(features, spec):
    """A stage on a cluster runs as a task: the trials it submits must not wait on its thread."""
    from distributed import get_worker

    result = tune_model(features, xgb_trainer(), spec, seed=5)
    return get_worker().address, result


@pytest.mark.slow
def test_trials_run_on_a_two_worker_cluster_and_match_the_in_process_search(features):
    from distributed import Client, LocalCluster

    spec = TuneSpec.model_validate({"trials": 4, "parallel": 2, "pruning": False,
                                    "space": {"max_depth": {"int": [1, 6]},
                                              "learning_rate": {"float": [0.02, 0.5], "log": True}}})
    here = tune_model(features, xgb_trainer(), spec, seed=5)
    assert here.where.startswith("in this process") and here.parallel == 2
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address="127.0.0.1:0") as cluster, Client(cluster) as client:
        workers = set(cluster_workers(client))
        # Default parallel (one per worker) and pruning on: trials on workers are not pruned.
        there = tune_model(features, xgb_trainer(), spec.model_copy(update={"parallel": None, "pruning": True}), seed=5)
        assert there.where.startswith("Dask cluster (2 workers") and there.parallel == 2
        assert outcomes(there) == outcomes(here)
        assert {t.worker for t in there.trials} <= workers
        assert there.pruning.startswith("off: trials on Dask workers")

        # Inside a one-thread worker's task (as a stage on a cluster runs): the task secedes, so
        # the trials it submits do not wait on its thread (without it, a one-worker cluster would
        # never finish). Which worker Dask places each trial on is its own choice: on a busy
        # machine it put all four on the other worker, so only "on the cluster" is asserted.
        stage_worker, inside = client.submit(_tune_in_a_worker_task, features, spec, pure=False).result(timeout=300)
        assert outcomes(inside) == outcomes(here)
        assert stage_worker in workers and {t.worker for t in inside.trials} <= workers


# ------------------------------------------------------------------ end to end
@pytest.mark.slow
def test_a_cli_run_records_the_search(tmp_path):
    churn_frame().to_csv(tmp_path / "churn.csv", index=False)
    (tmp_path / "tuned.yaml").write_text(f"""\
name: tuned
device: cpu
stages:
  raw: {{kind: load, path: {tmp_path / 'churn.csv'}}}
  split: {{kind: split, inputs: [raw], target: churn, positive: "yes", test: 0.2, valid: 0.2}}
  features:
    kind: features
    inputs: [split]
    id: id
    ops: [{{standardize: {{columns: [a, b, c]}}}}]
  xgb:
    kind: train
    inputs: [features]
    model: xgboost
    params: {{n_estimators: 20, n_jobs: 1, max_depth: 3}}
    tune:
      trials: 3
      space: {{max_depth: {{int: [1, 5]}}}}
  evaluate: {{kind: evaluate, inputs: [xgb]}}
""")
    proc = _pipeline("run", tmp_path / "tuned.yaml", "--runs-dir", tmp_path / "runs", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "best trial #" in proc.stdout + proc.stderr
    (manifest_path,) = (tmp_path / "runs").glob("*/latest/manifest.json")
    manifest = json.loads(manifest_path.read_text())
    tuning = manifest["stages"]["xgb"]["facts"]["tuning"]
    assert len(tuning["trials"]) == 3 and set(tuning["best_params"]) == {"max_depth"}
    assert tuning["trials"][0]["params"] == {"max_depth": 3} and tuning["scoring"] == "cv"
    assert "gain" in tuning and "kept_defaults" in tuning
    assert any(path.endswith("xgb/tuning.csv") for path in manifest["artifacts"])


def test_a_search_that_went_past_failed_trials_warns_with_the_first_failure(features, caplog):
    """Trials that failed (a value the model cannot take at fit) were only in INFO lines and the
    record: the stage succeeded with half its search lost and no warning."""
    import logging

    class FailsOddTrials(RegistryTrainer):
        def fit(self, features, params, report, threads=None):
            if params.get("C", 1.0) > 1.0:
                raise ValueError("C above one is refused here")
            return super().fit(features, params, report, threads)

    spec = TuneSpec.model_validate({"trials": 6, "seed": 3, "space": {"C": {"float": [0.01, 100.0], "log": True}}})
    with caplog.at_level(logging.WARNING, logger="pipeline"):
        result = tune_model(features, FailsOddTrials(train_model, "logistic_regression", {}, seed=1), spec, seed=3)
    failed = [t for t in result.trials if t.state == "FAIL"]
    assert failed, [t.params for t in result.trials]
    assert (f"tune: {len(failed)} of 6 trials failed (the first, trial {failed[0].number}: ValueError: C above one"
            in caplog.text)
