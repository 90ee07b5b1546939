"""``folds: k``: fold assignment (random, stratified, by group, forward in time), fold features
refitted on each fold's fit rows, ``cross_validate`` and its wiring in the model stages."""

from __future__ import annotations

import dataclasses
import json
import pickle
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.cli import run_cli as _pipeline
from pipeline import ConfigError, load_config, run_pipeline
from pipeline.core.errors import DataError
from pipeline.features import FeatureWorkflow
from pipeline.featuresets.folds import HELD_OUT, without_validation
from pipeline.metrics import binary_metrics
from pipeline.runs.record import read_manifest
from pipeline.stages import build_features, cross_validate, split_frame, train_model
from pipeline.stages.training.cross_validation import fold_statistics
from pipeline.featuresets.split_positions import fold_positions
from tests.conftest import small_config

EVALUATE = "  evaluate:\n    kind: evaluate\n    inputs: [logreg]\n"


def table(rows: int = 240, seed: int = 0, *, signal: bool = True) -> pd.DataFrame:
    """id, a, b, a group g (4 rows each), a time t (12 distinct), a category c, churn yes/no."""
    rng = np.random.default_rng(seed)
    a = rng.normal(size=rows)
    churn = (a + rng.normal(scale=0.8, size=rows) > 0.4) if signal else rng.random(rows) < 0.4
    return pd.DataFrame({
        "id": np.arange(rows), "a": a, "b": rng.normal(size=rows), "g": rng.permutation(rows) // 4,
        "t": rng.integers(0, 12, rows), "c": rng.choice(["x", "y", "z"], rows),
        "churn": np.where(churn, "yes", "no"),
    })


def assert_partition(folds, n_rows: int) -> None:
    """Every row scored in exactly one fold; in each fold fit and scored rows are disjoint and
    together every row."""
    scored = np.concatenate([score for _, score in folds])
    assert sorted(scored.tolist()) == list(range(n_rows))
    for fit, score in folds:
        assert not np.intersect1d(fit, score).size
        assert len(fit) + len(score) == n_rows


# ---------------------------------------------------------------------------- fold assignment
@pytest.mark.parametrize("keys", [{}, {"stratify": False}, {"group": "g"}, {"group": "g", "stratify": False}])
def test_folds_partition_the_non_test_rows_exactly(keys):
    frame = table()
    data = split_frame(frame, "churn", positive="yes", test=0.25, folds=4, seed=3, **keys)
    train = data.frames["train"]
    assert len(data.folds) == 4 and len(train) + len(data.frames["test"]) == len(frame)
    assert not set(train["id"]) & set(data.frames["test"]["id"])
    assert_partition(data.folds, len(train))
    if "group" in keys:                   # the test split is by group too: no group in train and test
        assert not set(train["g"]) & set(data.frames["test"]["g"])


def test_folds_follow_the_seed():
    frame = table()
    one = split_frame(frame, "churn", positive="yes", folds=3, seed=1).folds
    again = split_frame(frame, "churn", positive="yes", folds=3, seed=1).folds
    other = split_frame(frame, "churn", positive="yes", folds=3, seed=2).folds
    assert all(np.array_equal(x[1], y[1]) for x, y in zip(one, again))
    assert not all(np.array_equal(x[1], y[1]) for x, y in zip(one, other))


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(n_rows=st.integers(8, 300), n_groups=st.integers(4, 60), k=st.integers(2, 6),
       stratified=st.booleans(), seed=st.integers(0, 2**32 - 1), data=st.data())
def test_no_group_is_both_fitted_on_and_scored_in_a_fold(n_rows, n_groups, k, stratified, seed, data):
    groups = pd.Series(data.draw(st.lists(st.integers(0, n_groups - 1), min_size=n_rows, max_size=n_rows)))
    if groups.nunique() < k:
        with pytest.raises(DataError, match="group column 'g'"):
            fold_positions(n_rows, k, seed=seed, groups=groups, group_name="g")
        return
    labels = np.array(data.draw(st.lists(st.integers(0, 1), min_size=n_rows, max_size=n_rows))) if stratified else None
    folds = fold_positions(n_rows, k, seed=seed, groups=groups, labels=labels, group_name="g")
    assert len(folds) == k
    assert_partition(folds, n_rows)
    for fit, score in folds:
        assert not set(groups[fit]) & set(groups[score])


def test_stratified_folds_keep_the_class_shares():
    labels = np.repeat([0, 1, 2], [600, 300, 100])
    folds = fold_positions(len(labels), 5, seed=0, labels=labels)
    for _, score in folds:
        counts = np.bincount(labels[score], minlength=3)
        assert np.all(np.abs(counts - np.array([120, 60, 20])) <= 1)
    # Stratified by group as well: shares close, no group split.
    groups = pd.Series(np.arange(len(labels)) // 5)          # each group of one class
    folds = fold_positions(len(labels), 5, seed=0, labels=labels, groups=groups, group_name="g")
    for _, score in folds:
        assert np.all(np.abs(np.bincount(labels[score], minlength=3) - np.array([120, 60, 20])) <= 5)


def test_a_regression_target_is_not_stratified_and_still_partitions():
    frame = table().assign(churn=lambda f: f["a"] * 2.0)
    data = split_frame(frame, "churn", task="regression", folds=3)
    assert data.task.kind == "regression"
    assert_partition(data.folds, len(data.frames["train"]))


@pytest.mark.parametrize("with_group", [False, True])
def test_order_by_folds_chain_forward_in_time(with_group):
    """Fold i fits on every row older than the block it scores (TimeSeriesSplit); one time (or,
    with group, one group, which goes by its newest row) never straddles a cut; the oldest
    block is fitted on by every fold and never scored."""
    keys = {"group": "g"} if with_group else {}
    data = split_frame(table(600), "churn", positive="yes", test=0.2, order_by="t", folds=3, **keys)
    train = data.frames["train"]
    test = data.frames["test"]
    if with_group:
        newest = pd.concat([train, test]).groupby("g")["t"].max()
        when, test_when = newest[train["g"]].to_numpy(), newest[test["g"]].to_numpy()
    else:
        when, test_when = train["t"].to_numpy(), test["t"].to_numpy()
    assert when.max() <= test_when.min()
    scored_before: list[int] = []
    for fit, score in data.folds:
        assert when[fit].max() <= when[score].min()
        if with_group:
            assert not set(train["g"].iloc[fit]) & set(train["g"].iloc[score])
        else:
            assert when[fit].max() < when[score].min()
        assert set(scored_before) <= set(fit.tolist())          # what was scored before is fitted on now
        scored_before += score.tolist()
    oldest = set(range(len(train))) - set(scored_before)
    assert oldest and set(data.folds[0][0].tolist()) == oldest
    assert len(scored_before) == len(set(scored_before))


def test_one_time_holding_most_rows_cannot_make_forward_blocks():
    times = pd.Series([0] * 90 + list(range(1, 11)))
    with pytest.raises(DataError, match="order_by column 't'.*use fewer folds"):
        fold_positions(100, 4, seed=0, times=times, order_name="t")


def test_too_few_rows_for_the_folds_are_a_data_error():
    with pytest.raises(DataError, match="folds: 5 needs at least 5 rows"):
        fold_positions(4, 5, seed=0)
    with pytest.raises(DataError, match="cannot cut 6 non-test rows into 5 folds"):
        fold_positions(6, 5, seed=0, labels=np.array([0, 0, 1, 1, 2, 2]))


@pytest.mark.parametrize("keys", [{}, {"group": "g"}, {"order_by": "t"}])
def test_folds_and_fold_features_are_the_same_on_every_device(backend, keys):
    """Positions are drawn on the host from the labels, groups or times: the same rows on CPU
    and GPU; each fold's features are built on the run's device."""
    frame = table()
    on_device = split_frame(backend.from_pandas(frame), "churn", positive="yes", folds=3, seed=9, backend=backend,
                            **keys)
    on_host = split_frame(frame, "churn", positive="yes", folds=3, seed=9, **keys)
    assert all(np.array_equal(a[1], b[1]) for a, b in zip(on_device.folds, on_host.folds))
    features = build_features(on_device, [{"standardize": {"columns": ["a"]}}, {"drop": {"columns": ["c"]}}],
                              id_column="id")
    fold = features.folds.features(1)
    assert fold.backend.name == backend.name and fold.rows()["valid"] == len(on_host.folds[1][1])
    assert list(fold.host_ids("valid")) == on_host.frames["train"]["id"].iloc[on_host.folds[1][1]].tolist()


def test_a_class_a_fold_cannot_fit_on_is_named():
    frame = table(60).assign(kind=["a"] * 30 + ["b"] * 29 + ["rare"])
    with pytest.raises(DataError, match=r"fits on no row of class\(es\) \['rare'\]"):
        split_frame(frame.drop(columns="churn"), "kind", test=0.0, folds=3)


def test_folds_that_score_no_row_of_a_class_warn_with_the_folds_to_use(caplog):
    """10 folds over 6 positives: 4 folds score no positive, their ROC AUC and the folds' mean
    were null, and nothing said why."""
    frame = table(60).assign(churn=["yes"] * 6 + ["no"] * 54)
    with caplog.at_level("WARNING", logger="pipeline"):
        split_frame(frame, "churn", positive="yes", test=0.0, folds=10, seed=1)
    assert "some fold scores no row of class(es) ['yes'] of target 'churn'" in caplog.text
    assert "use at most 6 folds" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="pipeline"):
        split_frame(frame, "churn", positive="yes", test=0.0, folds=5, seed=1)
    assert "scores no row" not in caplog.text


def test_folds_with_a_validation_split_are_a_config_error():
    text = small_config("p", Path("data.csv")).replace("test: 0.25\n", "test: 0.25\n    valid: 0.1\n    folds: 3\n")
    with pytest.raises(ConfigError, match="folds use every non-test row.*set valid: 0"):
        load_config(text=text)
    with pytest.raises(ValueError, match="set valid: 0"):
        split_frame(table(), "churn", positive="yes", valid=0.1, folds=3)


def test_partitioned_data_with_folds_is_refused():
    import dask.dataframe as dd

    frame = dd.from_pandas(table(), npartitions=3)
    with pytest.raises(DataError, match=r"cross-validation needs in-memory data.*\(partitioned: false\)"):
        split_frame(frame, "churn", positive="yes", folds=3)
    on_host = split_frame(table(), "churn", positive="yes", folds=3)
    partitioned = dataclasses.replace(on_host, frames={n: dd.from_pandas(f, npartitions=2)
                                                       for n, f in on_host.frames.items()})
    with pytest.raises(DataError, match="cross-validation needs in-memory data"):
        build_features(partitioned, [])


# ---------------------------------------------------------------------------- fold features
def test_each_fold_fits_the_workflow_on_its_fit_rows_only():
    """The workflow's statistics of a fold are those of its fit rows, not of the rows it scores:
    the mean of ``a`` is the fit rows' mean, and a category seen only in the scored rows (each
    group is one category here, and no group is on both sides) is unknown to the fold."""
    frame = table().assign(c=lambda f: "g" + f["g"].astype(str))
    data = split_frame(frame, "churn", positive="yes", test=0.25, folds=4, group="g", seed=5)
    ops = [{"standardize": {"columns": ["a"]}}, {"categorify": {"columns": ["c"]}}, {"drop": {"columns": ["g", "t"]}}]
    features = build_features(data, ops, id_column="id")
    train = data.frames["train"]
    seen = []

    def fit_and_score(fold):
        seen.append(fold)
        return np.full(fold.rows()["valid"], 0.5)

    cross_validate(features, fit_and_score)
    assert len(seen) == features.fold_count() == 4
    for fold, (fit, score) in zip(seen, data.folds):
        raw_fit = train.iloc[fit]
        assert list(fold.host_ids("train")) == raw_fit["id"].tolist()
        assert list(fold.host_ids("valid")) == train["id"].iloc[score].tolist()
        assert fold.rows()["test"] == 0
        state = fold.workflow.states_
        assert state[0]["mean_std"]["a"][0] == pytest.approx(raw_fit["a"].mean())
        alone = FeatureWorkflow(ops).fit(raw_fit.drop(columns=["churn", "id"])).states_
        assert state == alone
        assert not set(state[1]["categories"]["c"]) & set(train["c"].iloc[score])
    assert features.workflow.states_[0]["mean_std"]["a"][0] == pytest.approx(train["a"].mean())


def test_cross_validation_never_scores_a_model_on_rows_it_was_fitted_on():
    """A forest without bootstrap memorises its training rows (accuracy 1 on them); the labels
    are noise, so on unseen rows it is a coin. CV accuracy near 1 would mean it scored rows it
    had seen."""
    data = split_frame(table(400, seed=2, signal=False), "churn", positive="yes", test=0.2, folds=4)
    features = build_features(data, [{"drop": {"columns": ["g", "t", "c"]}}], id_column="id")
    fitted = []

    def fit_and_score(fold):
        trained = train_model(fold, "random_forest", {"n_estimators": 20, "bootstrap": False})
        fitted.append(binary_metrics(fold.labels("train"), trained.scores["train"])["accuracy"])
        return trained.scores["valid"]

    result = cross_validate(features, fit_and_score)
    assert min(fitted) == 1.0
    assert result.mean["accuracy"] < 0.75 and all(f["accuracy"] < 0.8 for f in result.folds)


def test_mean_std_and_out_of_fold_scores_are_those_of_the_folds():
    data = split_frame(table(300), "churn", positive="yes", test=0.2, folds=5, seed=4)
    features = build_features(data, [{"standardize": {"columns": ["a", "b"]}}, {"drop": {"columns": ["g", "t", "c"]}}],
                              id_column="id")
    returned = []

    def fit_and_score(fold):
        scores = train_model(fold, "logistic_regression").scores["valid"]
        returned.append(scores)
        return scores

    result = cross_validate(features, fit_and_score)
    y = features.labels("train")
    from sklearn.metrics import roc_auc_score

    aucs = [roc_auc_score(y[score], s) for (_, score), s in zip(data.folds, returned)]
    assert [f["roc_auc"] for f in result.folds] == pytest.approx(aucs)
    assert result.mean["roc_auc"] == pytest.approx(sum(aucs) / 5)
    assert result.std["roc_auc"] == pytest.approx(float(np.std(aucs)))      # ddof=0, as np.std
    for (_, score), s in zip(data.folds, returned):
        assert np.array_equal(result.oof[score], s)
    assert not np.isnan(result.oof).any() and result.rows == [len(s) for _, s in data.folds]
    assert result.to_dict() == {"folds": 5, "per_fold": result.folds, "mean": result.mean, "std": result.std}


def test_a_nan_fold_metric_makes_the_mean_nan_not_the_mean_of_the_others():
    mean, std = fold_statistics([{"roc_auc": 0.8}, {"roc_auc": float("nan")}, {"roc_auc": 0.6}])
    assert np.isnan(mean["roc_auc"]) and np.isnan(std["roc_auc"])
    mean, std = fold_statistics([{"rmse": 1.0}, {"rmse": 3.0}])
    assert mean == {"rmse": 2.0} and std == {"rmse": 1.0}


@pytest.mark.parametrize("kind", ["multiclass", "regression"])
def test_cross_validate_scores_each_task_in_its_shape(kind):
    from sklearn.linear_model import LinearRegression, LogisticRegression

    frame = table(300)
    frame["churn"] = frame["c"] if kind == "multiclass" else frame["a"] * 3 + frame["b"]
    data = split_frame(frame.drop(columns="c"), "churn", task=kind, test=0.2, folds=3)
    features = build_features(data, [{"drop": {"columns": ["g", "t"]}}], id_column="id")
    model = LogisticRegression(max_iter=500) if kind == "multiclass" else LinearRegression()

    def fit_and_score(fold):
        model.fit(fold.X["train"], fold.y["train"])
        return model.predict_proba(fold.X["valid"]) if kind == "multiclass" else model.predict(fold.X["valid"])

    result = cross_validate(features, fit_and_score)
    n = features.rows()["train"]
    assert result.oof.shape == ((n, 3) if kind == "multiclass" else (n,))
    assert ("log_loss" if kind == "multiclass" else "rmse") in result.mean
    if kind == "regression":
        assert result.mean["r2"] > 0.99


def test_out_of_fold_scores_are_nan_for_the_oldest_block_of_a_time_split():
    data = split_frame(table(400), "churn", positive="yes", test=0.2, order_by="t", folds=3)
    features = build_features(data, [{"drop": {"columns": ["g", "c"]}}], id_column="id")
    result = cross_validate(features, lambda fold: train_model(fold, "logistic_regression").scores["valid"])
    never = np.setdiff1d(np.arange(features.rows()["train"]), np.concatenate([s for _, s in data.folds]))
    assert len(never) and np.isnan(result.oof[never]).all()
    assert not np.isnan(np.delete(result.oof, never)).any()


def test_features_without_folds_refuse_to_cross_validate():
    features = build_features(split_frame(table(), "churn", positive="yes"), [{"drop": {"columns": ["c"]}}])
    assert features.fold_count() == 0 and features.folds is None
    with pytest.raises(ValueError, match="set folds: k"):
        cross_validate(features, lambda fold: np.zeros(0))


def test_fold_features_survive_pickling():
    data = split_frame(table(), "churn", positive="yes", folds=3)
    features = build_features(data, [{"one_hot": {"columns": ["c"]}}], id_column="id")
    again = pickle.loads(pickle.dumps(features))
    assert again.fold_count() == 3
    for i in range(3):
        one, two = features.folds.features(i), again.folds.features(i)
        assert np.array_equal(one.X["valid"], two.X["valid"]) and one.workflow.states_ == two.workflow.states_


def test_without_validation_renames_the_scored_rows_and_shares_the_matrices():
    data = split_frame(table(), "churn", positive="yes", folds=3)
    fold = build_features(data, [{"drop": {"columns": ["c"]}}]).folds.features(0)
    renamed = without_validation(fold)
    assert "valid" not in renamed.rows() and renamed.rows()[HELD_OUT] == fold.rows()["valid"]
    assert renamed.X[HELD_OUT] is fold.X["valid"] and "valid" in fold.X and renamed.uid != fold.uid


# ---------------------------------------------------------------------------- the stages
def write_table(folder: Path, rows: int = 200, *, signal: bool = True) -> Path:
    path = folder / "data.csv"
    table(rows, seed=7, signal=signal)[["id", "a", "b", "churn"]].to_csv(path, index=False)
    return path


def test_a_train_stage_reports_cv_and_fits_its_final_model_on_every_non_test_row(tmp_path):
    (tmp_path / "p.yaml").write_text(small_config("p", write_table(tmp_path), after=EVALUATE))
    result = run_pipeline(tmp_path / "p.yaml", runs_dir=tmp_path / "runs", overrides=["stages.split.folds=4"])
    manifest = read_manifest(result.run_dir)
    split = manifest.stages["split"].facts
    assert split["folds"] == 4 and split["rows"] == {"train": 150, "valid": 0, "test": 50}
    assert [f["fit"] + f["scored"] for f in split["fold_rows"]] == [150] * 4
    assert manifest.stages["features"].facts["folds"] == 4
    cv = manifest.stages["logreg"].facts["cv"]
    assert cv["folds"] == 4 and set(cv["mean"]) == set(cv["std"]) >= {"roc_auc", "log_loss"}
    assert 0.6 < cv["mean"]["roc_auc"] <= 1.0 and cv["std"]["roc_auc"] > 0
    trained = result.outputs["logreg"]
    assert trained.cv["mean"] == cv["mean"] and len(trained.cv["per_fold"]) == 4
    assert trained.oof_scores.shape == (150,) and not np.isnan(trained.oof_scores).any()
    assert trained.features.rows()["train"] == 150              # the final model: every non-test row
    on_disk = json.loads((result.run_dir / "logreg" / "cv.json").read_text())
    assert on_disk["per_fold"] == trained.cv["per_fold"]


def test_cached_features_rebuild_the_same_folds(tmp_path):
    """The features stage's output (with its fold source and the frame it holds) goes through
    the stage cache; a model stage rerun on it cross-validates exactly as before."""
    (tmp_path / "p.yaml").write_text(small_config("p", write_table(tmp_path)))
    first = run_pipeline(tmp_path / "p.yaml", runs_dir=tmp_path / "runs", overrides=["stages.split.folds=3"])
    again = run_pipeline(tmp_path / "p.yaml", runs_dir=tmp_path / "runs", overrides=["stages.split.folds=3"],
                         force=["logreg"])
    stages = read_manifest(again.run_dir).stages
    assert stages["features"].status == "cached" and stages["logreg"].status != "cached"
    assert stages["logreg"].facts["cv"] == read_manifest(first.run_dir).stages["logreg"].facts["cv"]
    assert np.array_equal(again.outputs["logreg"].oof_scores, first.outputs["logreg"].oof_scores)


def test_the_torch_stage_cross_validates_each_fold_without_early_stopping(tmp_path, monkeypatch):
    """With folds the final network has no validation split and trains every epoch; each fold's
    network trains the same way, its scored rows out of sight of early stopping."""
    import pipeline.stages.torch_mlp as torch_stage

    trained_on = []
    real = torch_stage.train_torch

    def spy(features, **kw):
        model = real(features, **kw)
        trained_on.append((features.rows(), len(model.history)))
        return model

    monkeypatch.setattr(torch_stage, "train_torch", spy)
    after = "  mlp:\n    kind: torch\n    inputs: [features]\n    hidden: [8]\n    epochs: 3\n" \
            "    early_stopping: {patience: 1}\n"
    (tmp_path / "p.yaml").write_text(small_config("p", write_table(tmp_path), after=after))
    result = run_pipeline(tmp_path / "p.yaml", runs_dir=tmp_path / "runs", overrides=["stages.split.folds=3"],
                          only=["raw", "split", "features", "mlp"])
    facts = read_manifest(result.run_dir).stages["mlp"].facts
    assert facts["cv"]["folds"] == 3 and "roc_auc" in facts["cv"]["mean"]
    assert result.outputs["mlp"].oof_scores.shape == (150,)
    final, *folds = trained_on
    assert final == ({"train": 150, "valid": 0, "test": 50}, 3) and len(folds) == 3
    for rows, epochs in folds:
        assert "valid" not in rows and rows[HELD_OUT] == 50 and rows["train"] == 100 and epochs == 3


@pytest.mark.slow
def test_pipeline_run_with_folds_reports_cv(tmp_path):
    (tmp_path / "p.yaml").write_text(small_config("p", write_table(tmp_path), after=EVALUATE))
    proc = _pipeline("run", "p.yaml", "--set", "stages.split.folds=3", cwd=tmp_path, env={"COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr
    assert "logreg: fold 3/3 - roc_auc:" in proc.stderr
    latest = tmp_path / "runs" / "p" / "latest"
    cv = read_manifest(latest).stages["logreg"].facts["cv"]
    assert cv["folds"] == 3 and {"roc_auc", "log_loss"} <= set(cv["mean"])
    assert json.loads((latest / "logreg" / "cv.json").read_text())["mean"] == cv["mean"]
