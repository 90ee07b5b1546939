"""Bagging (``bag: k`` on a train stage, ``bag_model``) and stacking (the ``stack`` stage,
``fit_stack``): out-of-fold scores that no fit saw, a meta-model fitted on those only, and both
exported as one model that ``pipeline predict`` scores as the run did."""

from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import roc_auc_score

from tests.support.cli import run_cli as _pipeline
from pipeline.backends import get_backend
from pipeline.config import load_config
from pipeline.core.errors import ConfigError, DataError
from pipeline.core.problems import BINARY
from pipeline.features import Categorify, Standardize
from pipeline.models import get_model_spec
from pipeline.scoring.model_folder import load_model
from pipeline.stages import build_features, save_model, split_frame, train_model
from pipeline.stages.stack import StackedModel, fit_stack
from pipeline.stages.training.bagging import BaggedModel, bag_folds, bag_model

CLASSES = ["<30", ">30", "NO"]
SAFE_FORMATS = {"skops", "xgboost-json", "linear-coefficients", "bagged", "stacked"}


def rows(task: str = "binary", n: int = 600, seed: int = 0) -> pd.DataFrame:
    """``id, a, b, kind, target``: a target the features explain in part (for every task)."""
    rng = np.random.default_rng(seed)
    a, b = rng.normal(size=n), rng.normal(size=n)
    kind = rng.choice(["x", "y", "z"], size=n)
    if task == "regression":
        target = 3 * a - b + (kind == "x") + rng.normal(scale=0.7, size=n)
    elif task == "multiclass":
        logits = 1.5 * np.column_stack([a, b, -a - b + (kind == "x")])
        p = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
        target = np.array(CLASSES)[[rng.choice(3, p=row) for row in p]]
    else:
        target = np.where(rng.random(n) < 1 / (1 + np.exp(-(2 * a - b))), "yes", "no")
    return pd.DataFrame({"id": [f"r{i}" for i in range(n)], "a": a, "b": b, "kind": kind, "target": target})


def features_of(frame: pd.DataFrame, task: str = "binary", *, valid: float = 0.0, ops=None):
    data = split_frame(frame, "target", task=task, positive="yes" if task == "binary" else None,
                       test=0.25, valid=valid, seed=0, backend=get_backend("cpu"))
    ops = ops if ops is not None else [Standardize(columns=["a", "b"]), Categorify(columns=["kind"])]
    return build_features(data, ops, id_column="id")


def auc(features, split: str, scores) -> float:
    return float(roc_auc_score(features.labels(split), scores))


# ---------------------------------------------------------------- bagging
def test_folds_are_stratified_disjoint_and_cover_every_row_once():
    labels = np.array([0] * 90 + [1] * 30)
    folds = bag_folds(BINARY, labels, 3, seed=7)
    held = np.concatenate([h for _, h in folds])
    assert sorted(held.tolist()) == list(range(120))
    for fit, h in folds:
        assert not set(fit) & set(h) and len(fit) + len(h) == 120
        assert labels[h].sum() == 10                     # each fold holds a third of the positives
    assert [h.tolist() for _, h in bag_folds(BINARY, labels, 3, seed=7)] == [h.tolist() for _, h in folds]


def test_each_out_of_fold_score_comes_from_the_member_that_never_saw_the_row():
    """Pure-noise labels and a unique id per row as a feature: a forest without bootstrap
    memorises its training rows (in-sample AUC 1), so out-of-fold scores from a member that saw
    the row would show it; from one that did not, they are a coin flip."""
    rng = np.random.default_rng(3)
    n = 1200
    frame = pd.DataFrame({"id": [f"r{i}" for i in range(n)], "a": rng.permutation(n).astype(float),
                          "b": rng.normal(size=n),
                          "target": rng.choice(["yes", "no"], size=n)})
    features = features_of(frame, ops=[Standardize(columns=["a", "b"])])
    seen: list[set[str]] = []

    def recording_train(member, model, params, **kwargs):
        seen.append(set(member.host_ids("train")))
        assert not seen[-1] & set(member.host_ids("valid"))
        return train_model(member, model, params, **kwargs)

    bagged = bag_model(features, "random_forest", {"n_estimators": 20, "bootstrap": False, "max_features": None},
                       k=4, seed=1, name="forest", train=recording_train)
    assert isinstance(bagged, BaggedModel) and bagged.model == "bagged"
    assert auc(features, "train", bagged.scores["train"]) > 0.99          # memorised in-sample
    assert abs(auc(features, "train", bagged.oof_scores) - 0.5) < 0.07     # not out of fold
    ids = features.host_ids("train").tolist()
    folds = bag_folds(features.task, features.labels("train"), 4, seed=1)
    for i, (_, held) in enumerate(folds):
        assert not {ids[j] for j in held} & seen[i]
        member = bagged.estimator.members[i].estimator
        X = features.X["train"][held]
        np.testing.assert_allclose(bagged.oof_scores[held], member.predict_proba(X)[:, 1])
    assert len(bagged.members) == 4 and bagged.params["bag"] == 4


def test_valid_and_test_scores_are_the_members_average_and_boosting_stops_early_on_the_held_out_fold():
    features = features_of(rows(), valid=0.2)
    bagged = bag_model(features, "xgboost", {"n_estimators": 300, "max_depth": 3, "early_stopping_rounds": 5},
                       k=3, seed=5, name="xgb")
    members = [m.estimator for m in bagged.estimator.members]
    expected = np.mean([m.predict_proba(features.X["test"])[:, 1] for m in members], axis=0)
    np.testing.assert_allclose(bagged.scores["test"], expected, atol=1e-7)
    assert all(0 <= info["best_iteration"] < 299 for info in bagged.members)   # stopped before 300 rounds
    assert bagged.fit_seconds > 0 and bagged.oof_scores.shape == (features.rows()["train"],)
    assert not np.isnan(bagged.oof_scores).any()


def test_bag_refuses_folds_on_the_split_and_too_few_folds_by_key():
    data = split_frame(rows(), "target", task="binary", positive="yes", test=0.25, valid=0.0, seed=0,
                       backend=get_backend("cpu"), folds=3)
    features = build_features(data, [Standardize(columns=["a", "b"]), Categorify(columns=["kind"])], id_column="id")
    with pytest.raises(ConfigError, match=r"stages\.m\.bag.*folds: on the split"):
        bag_model(features, "logistic_regression", k=3, name="m")
    with pytest.raises(ConfigError, match=r"bag must be a whole number of folds >= 2"):
        bag_model(features_of(rows()), "logistic_regression", k=1, name="m")


def test_bag_refuses_partitioned_features_by_key():
    import dask.dataframe as dd

    from pipeline.features import FeatureWorkflow
    from pipeline.featuresets.partitioned import PartitionedFeatures

    frame = dd.from_pandas(pd.DataFrame({"a": np.arange(10.0), "target": [0, 1] * 5}), npartitions=2)
    features = PartitionedFeatures(X={"train": frame[["a"]]}, y={"train": frame["target"]}, ids={"train": None},
                                   feature_names=["a"], workflow=FeatureWorkflow([]), target="target",
                                   id_column=None, backend=get_backend("cpu"), row_counts={"train": 10})
    with pytest.raises(ConfigError, match=r"stages\.forest\.bag.*partitioned.*load the data without partitioned"):
        bag_model(features, "random_forest", k=3, name="forest")


# ---------------------------------------------------------------- stacking
def test_the_meta_model_is_fitted_on_out_of_fold_scores_only_and_is_not_fooled_by_in_sample_ones():
    """A memorising forest scores its own training rows perfectly but is weaker out of fold
    than a logistic regression. Fitted on in-sample scores, a meta-model trusts the forest and
    its test AUC drops (the control below); fitted on out-of-fold scores, it does not."""
    rng = np.random.default_rng(0)
    n = 2000
    xs = {f"x{i}": rng.normal(size=n) for i in range(10)}      # many small additive effects: linear wins
    logit = 0.6 * sum(xs.values())
    frame = pd.DataFrame({"id": [f"r{i}" for i in range(n)], **xs,
                          "target": np.where(rng.random(n) < 1 / (1 + np.exp(-logit)), "yes", "no")})
    features = features_of(frame, ops=[Standardize(columns=["x0"])])
    forest = bag_model(features, "random_forest", {"n_estimators": 30, "bootstrap": False, "max_features": None},
                       k=5, name="forest")
    linear = bag_model(features, "logistic_regression", k=5, name="linear")
    assert auc(features, "train", forest.scores["train"]) > 0.99 > auc(features, "train", forest.oof_scores)
    stack = fit_stack([forest, linear], name="stack", k=5)
    leaky = fit_stack([dataclasses.replace(m, oof_scores=np.asarray(m.scores["train"])) for m in (forest, linear)],
                      name="leaky", k=5)
    stacked_auc, leaky_auc = auc(features, "test", stack.scores["test"]), auc(features, "test", leaky.scores["test"])
    assert stacked_auc >= auc(features, "test", linear.scores["test"]) - 0.01
    assert leaky_auc < stacked_auc - 0.04
    # The stack's own out-of-fold scores: one per training row, from meta-models that did not see it.
    assert stack.oof_scores.shape == (features.rows()["train"],) and not np.isnan(stack.oof_scores).any()


@pytest.mark.parametrize("task", ["binary", "multiclass", "regression"])
def test_a_stack_of_a_stack_exports_and_scores_new_rows_as_in_the_run(task, tmp_path):
    frame = rows(task)
    features = features_of(frame, task)
    base = "ridge" if task == "regression" else "logistic_regression"
    first = bag_model(features, base, k=3, name="first")
    second = bag_model(features, "xgboost", {"n_estimators": 10, "max_depth": 2}, k=3, name="second")
    stack = fit_stack([first, second], name="stack", k=3, passthrough=True)
    top = fit_stack([stack, first], name="top", k=3)
    width = {"binary": 2, "multiclass": 6, "regression": 2}[task]
    assert stack.meta_model.features.X["train"].shape[1] == width + len(features.feature_names)
    assert top.oof_scores.shape[0] == features.rows()["train"]
    raw = frame.set_index("id").loc[features.host_ids("test")].reset_index()
    for model in (first, top):
        folder = tmp_path / model.name
        written = save_model(model, folder)
        loaded = load_model(folder)
        np.testing.assert_allclose(loaded.score(raw), model.scores["test"], rtol=0, atol=1e-6)
        listed = set(json.loads((folder / "model.json").read_text())["files"])
        assert {p.relative_to(folder).as_posix() for p in written} - {"model.json", "workflow.json"} <= listed
    nested = tmp_path / "top"
    assert (nested / "stack.json").is_file() and (nested / "meta" / "bagged.json").is_file()
    assert (nested / "members" / "stack" / "members" / "second" / "members" / "2" / "model.json").is_file()
    formats = {json.loads(p.read_text())["format"] for p in nested.rglob("model.json")}
    assert formats <= SAFE_FORMATS, formats


@pytest.mark.parametrize("meta", ["lightgbm", "catboost"])
def test_passthrough_hands_the_categorified_columns_to_a_gbdt_meta_model_as_categorical(meta, tmp_path):
    """With passthrough the meta-model reads the features after the members' scores; the
    columns categorify coded stay categorical there (LightGBM's categorical_feature, CatBoost's
    cat_features), as a train stage on the same features gives them, and the exported stack
    scores new rows as the run did."""
    frame = rows(n=800, seed=4)
    rng = np.random.default_rng(4)
    # kind y flips the odds: a middle code, so no member reading the codes as a number sees it.
    flip = (frame["kind"] == "y") & (rng.random(len(frame)) < 0.8)
    frame["target"] = np.where(flip, np.where(frame["target"] == "yes", "no", "yes"), frame["target"])
    features = features_of(frame)
    params = ({"n_estimators": 30, "min_data_per_group": 5, "cat_smooth": 1, "min_child_samples": 5}
              if meta == "lightgbm" else {"iterations": 30, "depth": 3})
    members = [bag_model(features, "logistic_regression", k=3, name="lr")]
    stack = fit_stack(members, name="stack", model=meta, params=params, k=3, passthrough=True)
    columns = ["lr", *features.feature_names]
    assert stack.meta_model.features.feature_names == columns
    assert stack.meta_model.features.categorical_columns == ["kind"]
    folder = tmp_path / "stack"
    save_model(stack, folder)
    position = columns.index("kind")
    for member in sorted((folder / "meta" / "members").glob("*/model.json")):
        assert json.loads(member.read_text())["categorical_features"] == [position]
    if meta == "lightgbm":
        assert "cat_boundaries" in (folder / "meta" / "members" / "0" / "model.lgb.txt").read_text()
    raw = frame.set_index("id").loc[features.host_ids("test")].reset_index()
    np.testing.assert_allclose(load_model(folder).score(raw), stack.scores["test"], rtol=0, atol=1e-6)


def test_a_member_without_out_of_fold_scores_is_named_with_the_way_out():
    features = features_of(rows())
    plain = train_model(features, "logistic_regression", name="plain")
    bagged = bag_model(features, "logistic_regression", k=3, name="bagged_lr")
    with pytest.raises(DataError, match=r"input 'plain' has no out-of-fold scores.*bag: k .*folds: k"):
        fit_stack([bagged, plain], name="stack")


def test_an_ensemble_of_bagged_models_fits_its_weights_on_their_out_of_fold_scores():
    from pipeline.stages import fit_ensemble

    features = features_of(rows())
    members = [bag_model(features, "logistic_regression", k=3, name="lr"),
               bag_model(features, "xgboost", {"n_estimators": 10, "max_depth": 2}, k=3, name="xgb")]
    blend = fit_ensemble(members, name="blend")
    assert blend.fitted_on == "oof" and blend.fit_record["rows"] == features.rows()["train"]


def test_a_stacked_model_pickles_with_its_scores():
    import pickle

    features = features_of(rows())
    stack = fit_stack([bag_model(features, "logistic_regression", k=3, name="lr")], name="stack", k=3)
    again = pickle.loads(pickle.dumps(stack))
    assert isinstance(again, StackedModel)
    np.testing.assert_allclose(again.scores["test"], stack.scores["test"])


def test_bagged_and_stacked_are_registry_entries_train_does_not_offer():
    for name in ("bagged", "stacked"):
        spec = get_model_spec(name)
        assert not spec.trainable and spec.format.name == name


# ---------------------------------------------------------------- the config
def config(data: Path, *, split: str = "", xgb: str = "    bag: 3\n", stack: str = "    inputs: [xgb, logreg]\n") -> str:
    return (f"name: stacked\ndevice: cpu\nseed: 3\nstages:\n  raw:\n    kind: load\n    path: {data}\n"
            "  split:\n    kind: split\n    inputs: [raw]\n    target: target\n    positive: 'yes'\n"
            f"    test: 0.25\n    valid: 0\n{split}"
            "  features:\n    kind: features\n    inputs: [split]\n    id: id\n"
            "    ops:\n      - standardize: {columns: [a, b]}\n      - one_hot: {columns: [kind]}\n"
            "  logreg:\n    kind: train\n    inputs: [features]\n    model: logistic_regression\n    bag: 3\n"
            "  xgb:\n    kind: train\n    inputs: [features]\n    model: xgboost\n"
            f"    params: {{n_estimators: 200, max_depth: 3, early_stopping_rounds: 5}}\n{xgb}"
            f"  stack:\n    kind: stack\n{stack}    bag: 3\n    passthrough: true\n"
            "  top:\n    kind: stack\n    inputs: [stack, logreg]\n    bag: 3\n"
            "  evaluate:\n    kind: evaluate\n    inputs: [logreg, xgb, stack, top]\n"
            "  export:\n    kind: export\n    inputs: [logreg, xgb, stack, top]\n")


def test_config_mistakes_are_named_at_validation(tmp_path):
    rows().to_csv(tmp_path / "rows.csv", index=False)
    with pytest.raises(ConfigError, match=r"stages\.xgb\.bag.*folds: on the split"):
        load_config(text=config(tmp_path / "rows.csv", split="    folds: 3\n"), check_data=True)
    with pytest.raises(ConfigError, match=r"stages\.stack\.inputs.*input 'xgb' has no out-of-fold scores"):
        load_config(text=config(tmp_path / "rows.csv", xgb=""), check_data=True)
    with pytest.raises(ConfigError, match=r"stages\.xgb\.bag.*greater than or equal to 2"):
        load_config(text=config(tmp_path / "rows.csv", xgb="    bag: 1\n"), check_data=True)
    with pytest.raises(ConfigError, match=r"stages\.stack\.model.*unknown model 'ridg'"):
        load_config(text=config(tmp_path / "rows.csv", stack="    inputs: [xgb, logreg]\n    model: ridg\n"),
                    check_data=True)
    # Bagged inputs give an ensemble out-of-fold rows to fit its weights on without a valid split.
    load_config(text=config(tmp_path / "rows.csv") + "  blend:\n    kind: ensemble\n    inputs: [xgb, logreg]\n",
                check_data=True)
    with pytest.raises(ConfigError, match=r"stages\.blend\.inputs.*bag: on each input"):
        load_config(text=config(tmp_path / "rows.csv", xgb="") + "  blend:\n    kind: ensemble\n"
                    "    inputs: [xgb, logreg]\n", check_data=True)
    # A stack of one input is a model: its meta-model recalibrates that input's out-of-fold scores.
    load_config(text=config(tmp_path / "rows.csv", stack="    inputs: [xgb]\n"), check_data=True)
    # With folds: on the split, any model stage has out-of-fold scores: a stack of them validates.
    text = config(tmp_path / "rows.csv", split="    folds: 3\n", xgb="").replace("    bag: 3\n  xgb", "\n  xgb")
    load_config(text=text.replace("early_stopping_rounds: 5", "learning_rate: 0.3"), check_data=True)


def test_tune_searches_first_and_the_best_params_are_bagged(tmp_path):
    from pipeline import run_pipeline
    from pipeline.runs.record import read_manifest

    rows().to_csv(tmp_path / "rows.csv", index=False)
    text = config(tmp_path / "rows.csv").replace("    valid: 0\n", "    valid: 0.2\n").replace(
        "    bag: 3\n  xgb", "    bag: 3\n    tune: {trials: 2, space: {C: {float: [0.01, 10], log: true}}}\n  xgb")
    (tmp_path / "tuned.yaml").write_text(text)
    result = run_pipeline(tmp_path / "tuned.yaml", runs_dir=tmp_path / "runs", only=["logreg"])
    facts = read_manifest(Path(result.run_dir)).stages["logreg"].facts
    assert facts["bag"]["k"] == 3 and "roc_auc" in facts["bag"]["oof"]
    bagged = result.outputs["logreg"]
    assert isinstance(bagged, BaggedModel) and bagged.tuning is not None
    assert bagged.params["params"].get("C") == facts["tuning"]["chosen_params"].get("C")   # every member: the chosen C
    assert bagged.oof_scores.shape == (bagged.features.rows()["train"],)


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return _pipeline(*args, cwd=cwd, env={"COLUMNS": "200", "PYTHONPATH": str(Path(__file__).resolve().parents[2])})


@pytest.mark.slow
def test_pipeline_predict_reproduces_the_runs_test_scores_of_bagged_and_stacked_models(tmp_path):
    frame = rows(n=800)
    frame.to_csv(tmp_path / "rows.csv", index=False)
    (tmp_path / "stacked.yaml").write_text(config(tmp_path / "rows.csv"))
    proc = run_cli("run", "stacked.yaml", "--runs-dir", "runs", "-q", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    run_dir = (tmp_path / "runs" / "stacked" / "latest").resolve()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["stages"]["xgb"]["facts"]["bag"]["k"] == 3
    predictions = pd.read_parquet(run_dir / "export" / "predictions.parquet")
    test_rows = frame.set_index("id").loc[predictions["id"]].reset_index()
    test_rows.drop(columns=["target"]).to_csv(tmp_path / "new.csv", index=False)
    for model in ("xgb", "top"):            # top: a stack whose members are a stack (passthrough) and a bag
        out = tmp_path / f"{model}.parquet"
        proc = run_cli("predict", "--run", "latest", "--runs-dir", "runs", "--pipeline", "stacked", "--model", model,
                       "--input", "new.csv", "--output", str(out), cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        table = pd.read_parquet(out)
        assert table["id"].tolist() == predictions["id"].tolist()
        np.testing.assert_allclose(table["score"], predictions[f"score_{model}"], rtol=0, atol=1e-6)
    meta = json.loads((run_dir / "export" / "models" / "top" / "model.json").read_text())
    assert meta["model"] == "stacked" and meta["format"] == "stacked"
    formats = {json.loads(p.read_text())["format"] for p in (run_dir / "export" / "models").rglob("model.json")}
    assert formats <= SAFE_FORMATS, formats


def test_a_fold_bag_is_fitted_fold_by_fold_and_is_a_bag_of_the_folds_fitted_so_far():
    from pipeline.stages.training.bagging import FoldBag

    features = features_of(rows())
    bag = FoldBag(features, "logistic_regression", k=4, seed=3, name="lr")
    with pytest.raises(ValueError, match="no fold is fitted"):
        bag.model()
    assert bag.fit_next() > 0 and bag.done == 1
    first = bag.model()
    held = bag.held_out(0)
    scored = ~np.isnan(first.oof_scores)
    assert scored.sum() == len(held) and scored[held].all()          # out of fold on fold 0's rows only
    assert first.scoring_cost() == 1 and first.params["bag"] == 1
    while bag.done < 4:
        bag.fit_next()
    with pytest.raises(ValueError, match="all 4 folds are fitted"):
        bag.fit_next()
    whole = bag.model()
    # Fold by fold gives what bag_model gives in one call (same folds, same seeds).
    reference = bag_model(features, "logistic_regression", k=4, seed=3, name="lr")
    np.testing.assert_allclose(whole.oof_scores, reference.oof_scores)
    np.testing.assert_allclose(whole.scores["test"], reference.scores["test"])
    assert whole.scoring_cost() == 4


def test_a_bad_parameter_of_a_bagged_model_or_a_meta_model_is_named_at_the_stages_key(tmp_path):
    """A bag's members are fitted as logreg_0, logreg_1, ... and a stack's meta-model as
    stack_meta_0: the error named stages.logreg_0.params.C at line 3 (the `stages:` key), and a
    --set value at a line instead of `(--set)`."""
    rows(n=300).to_csv(tmp_path / "rows.csv", index=False)
    (tmp_path / "bag.yaml").write_text(
        "name: bagged\ndevice: cpu\nstages:\n"
        "  raw: {kind: load, path: rows.csv}\n"
        "  split: {kind: split, inputs: [raw], target: target, positive: \"yes\"}\n"
        "  features: {kind: features, inputs: [split], id: id,\n"
        "             ops: [{standardize: {columns: [a, b]}}, {one_hot: {columns: [kind]}}]}\n"
        "  logreg: {kind: train, inputs: [features], model: logistic_regression, bag: 3}\n"
        "  stack: {kind: stack, inputs: [logreg], params: {C: -1}}\n", encoding="utf-8")
    meta = _pipeline("run", "bag.yaml", cwd=tmp_path)
    assert meta.returncode == 2 and "stages.stack.params.C (line 9):" in meta.stderr, meta.stderr
    member = _pipeline("run", "bag.yaml", "--set", "stages.stack.params.C=1", "--set", "stages.logreg.params.C=-1",
                       cwd=tmp_path)
    assert member.returncode == 2 and "stages.logreg.params.C (--set):" in member.stderr, member.stderr
    assert "logreg_0" not in member.stderr + meta.stderr and "stack_meta" not in meta.stderr
