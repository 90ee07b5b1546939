"""The ``ensemble`` stage: weights fitted on rows no member trained on, a model like any other
(evaluate ranks it, export saves it with every member, ``load_model`` scores it the same)."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import log_loss, mean_squared_error

from pipeline.backends import get_backend
from pipeline.config import load_config
from pipeline.core.errors import ConfigError, DataError
from pipeline.features import Categorify, Standardize
from pipeline.scoring.model_folder import load_model
from pipeline.stages import build_features, fit_ensemble, save_model, split_frame, train_model
from pipeline.stages.ensemble import EnsembleModel, fit_weights
from pipeline.core.problems import BINARY, REGRESSION, Task

CLASSES = ["<30", ">30", "NO"]
MODELS = {"binary": ["logistic_regression", "xgboost", "random_forest"],
          "multiclass": ["logistic_regression", "xgboost", "random_forest"],
          "regression": ["ridge", "xgboost", "random_forest"]}
SMALL = {"xgboost": {"n_estimators": 15, "max_depth": 3}, "random_forest": {"n_estimators": 15, "max_depth": 4}}


def rows(task: str, n: int = 500, seed: int = 0) -> pd.DataFrame:
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


def features_of(task: str, *, valid: float = 0.25, seed: int = 0, frame: pd.DataFrame | None = None):
    frame = rows(task, seed=seed) if frame is None else frame
    data = split_frame(frame, "target", task=task, positive="yes" if task == "binary" else None,
                       test=0.25, valid=valid, seed=seed, backend=get_backend("cpu"))
    return build_features(data, [Standardize(columns=["a", "b"]), Categorify(columns=["kind"])], id_column="id")


@pytest.fixture(scope="module")
def trained() -> dict[str, tuple]:
    """Per task: the features and three fitted members."""
    out = {}
    for task, models in MODELS.items():
        features = features_of(task)
        out[task] = (features, [train_model(features, m, SMALL.get(m, {}), name=m, seed=1) for m in models])
    return out


def task_loss(task: str, labels: np.ndarray, scores: np.ndarray) -> float:
    """scikit-learn's loss of ``scores``: the reference the fit is checked against."""
    if task == "regression":
        return float(mean_squared_error(labels, scores))
    if task == "multiclass":
        return float(log_loss(labels, scores, labels=range(len(CLASSES))))
    return float(log_loss(labels, scores, labels=[0, 1]))


def raw_test_rows(features, task: str) -> pd.DataFrame:
    return rows(task).set_index("id").loc[features.ids["test"]].reset_index()


# ---------------------------------------------------------------- the fit
@pytest.mark.filterwarnings("ignore:The y_prob values do not sum to one")    # float32 class probabilities
@pytest.mark.parametrize("task", list(MODELS))
def test_fitted_weights_are_a_distribution_no_worse_than_the_best_member_where_fitted(trained, task):
    features, members = trained[task]
    blend = fit_ensemble(members, name="blend")
    weights = np.array(list(blend.weights.values()))
    assert (weights >= 0).all() and weights.sum() == pytest.approx(1.0, abs=1e-12)
    assert blend.fitted_on == "valid" and blend.task == features.task
    labels = features.labels("valid")
    member_losses = [task_loss(task, labels, m.scores["valid"]) for m in members]
    ensemble_loss = task_loss(task, labels, blend.scores["valid"])
    assert ensemble_loss <= min(member_losses) + 1e-12
    # The fit's own loss is scikit-learn's.
    assert blend.fit_record["ensemble_loss"] == pytest.approx(ensemble_loss, rel=1e-9)
    assert blend.fit_record["member_loss"] == pytest.approx(dict(zip(blend.weights, member_losses)), rel=1e-9)
    # Scores of every split are the weighted average of the members'.
    expected = sum(w * m.scores["test"] for w, m in zip(weights, members))
    np.testing.assert_allclose(blend.scores["test"], expected, rtol=0, atol=1e-12)


def test_two_partly_right_members_blend_better_than_either_and_a_useless_one_gets_0():
    rng = np.random.default_rng(3)
    truth = rng.random(4000) < 0.5
    logit = np.where(truth, 1.0, -1.0)
    first = 1 / (1 + np.exp(-(logit + rng.normal(scale=1.5, size=truth.size))))
    second = 1 / (1 + np.exp(-(logit + rng.normal(scale=1.5, size=truth.size))))
    useless = rng.random(truth.size)
    weights, record = fit_weights(BINARY, truth.astype("int32"), [first, second, useless], names=["f", "s", "u"])
    assert weights[2] == 0.0
    assert weights[0] > 0.3 and weights[1] > 0.3
    assert record["ensemble_loss"] < min(record["member_loss"].values()) - 0.01


def test_regression_weights_minimise_squared_error_at_any_scale():
    rng = np.random.default_rng(4)
    y = rng.normal(scale=1e4, size=2000) + 5e5
    first, second = y + rng.normal(scale=3e3, size=y.size), y + rng.normal(scale=6e3, size=y.size)
    weights, record = fit_weights(REGRESSION, y, [first, second])
    assert weights == pytest.approx([0.8, 0.2], abs=0.05)            # independent errors: 1 / variance
    assert record["loss"] == "mse"
    assert record["ensemble_loss"] == pytest.approx(mean_squared_error(y, weights[0] * first + weights[1] * second))


def test_a_member_with_non_finite_scores_is_named():
    with pytest.raises(DataError, match="'?bad'? scored values that are not finite"):
        fit_weights(BINARY, np.array([0, 1]), [np.array([0.2, 0.8]), np.array([np.nan, 0.5])], names=["ok", "bad"])


def test_fixed_weights_are_scaled_to_sum_1_and_not_fitted(trained):
    features, members = trained["binary"]
    blend = fit_ensemble(members[:2], weights={members[0].name: 3, members[1].name: 1})
    assert blend.weights == {members[0].name: 0.75, members[1].name: 0.25}
    assert blend.fitted_on == "fixed" and blend.fit_record == {}
    expected = 0.75 * members[0].scores["test"] + 0.25 * members[1].scores["test"]
    np.testing.assert_allclose(blend.scores["test"], expected)
    with pytest.raises(DataError, match="missing: xgboost"):
        fit_ensemble(members[:2], weights={members[0].name: 1})


def test_without_valid_rows_the_weights_are_fitted_on_out_of_fold_scores():
    features = features_of("binary", valid=0.0)
    members = [train_model(features, m, SMALL.get(m, {}), name=m, seed=1) for m in ("logistic_regression", "xgboost")]
    labels = features.labels("train")
    rng = np.random.default_rng(0)
    # Out-of-fold scores as cross-validation leaves them: one member close to the truth, one noise.
    members[0].oof_scores = np.clip(labels * 0.8 + 0.1 + rng.normal(scale=0.05, size=labels.size), 0.01, 0.99)
    members[1].oof_scores = rng.random(labels.size)
    blend = fit_ensemble(members, on="auto")
    assert blend.fitted_on == "oof"
    assert blend.fit_record["rows"] == labels.size
    assert blend.weights["logistic_regression"] > 0.9
    expected = sum(w * m.oof_scores for w, m in zip(blend.weights.values(), members))
    np.testing.assert_allclose(blend.oof_scores, expected)   # an ensemble of it can fit on them too
    with pytest.raises(DataError, match="on: valid needs a valid split"):
        fit_ensemble(members, on="valid")


def test_without_valid_rows_or_out_of_fold_scores_it_says_what_it_needs():
    features = features_of("binary", valid=0.0)
    members = [train_model(features, "logistic_regression", name=n) for n in ("a", "b")]
    with pytest.raises(DataError, match=r"valid: > 0 .* folds:"):
        fit_ensemble(members)
    members[0].oof_scores = np.full(features.rows()["train"], 0.5)
    with pytest.raises(DataError, match=r"b has none: set folds: on the split stage, or bag: on each input"):
        fit_ensemble(members, on="oof")
    assert fit_ensemble(members, weights={"a": 1, "b": 1}).weights == {"a": 0.5, "b": 0.5}


def test_on_oof_without_out_of_fold_scores_names_what_oof_needs_not_valid_rows(trained):
    """The split has valid rows: what on: oof lacks is out-of-fold scores (bag: or folds:), and
    on: valid is the way out that needs no refit."""
    features, members = trained["binary"]
    assert features.rows()["valid"] > 0
    with pytest.raises(DataError) as caught:
        fit_ensemble(members, on="oof")
    message = str(caught.value)
    assert "on: oof" in message and "bag: on each input" in message and "folds: on the split" in message
    assert "valid: > 0" not in message and "on: valid" in message


def test_members_trained_on_different_features_are_refused_by_name(trained):
    _, members = trained["binary"]
    other = features_of("binary", seed=1)
    stranger = train_model(other, "logistic_regression", name="stranger")
    with pytest.raises(DataError, match="same features stage; stranger read other features than logistic_regression"):
        fit_ensemble([members[0], stranger])


# ---------------------------------------------------------------- export and load
@pytest.mark.parametrize("task", list(MODELS))
def test_an_exported_ensemble_scores_new_rows_as_in_the_run(trained, task, tmp_path):
    features, members = trained[task]
    blend = fit_ensemble(members, name="blend", weights={m.name: w for m, w in zip(members, (0.5, 0.3, 0.2))})
    written = save_model(blend, tmp_path / "blend")
    meta = json.loads((tmp_path / "blend" / "model.json").read_text())
    assert meta["model"] == "ensemble" and meta["format"] == "ensemble"
    assert meta["task"] == features.task.to_dict()
    assert meta["weights"] == pytest.approx(blend.weights)
    # Every member file is listed, so predict's checksum verification covers it.
    on_disk = {p.relative_to(tmp_path / "blend").as_posix() for p in (tmp_path / "blend").rglob("*") if p.is_file()}
    assert set(meta["files"]) == on_disk - {"model.json", "workflow.json"}
    assert {p.relative_to(tmp_path / "blend").as_posix() for p in written} == on_disk
    for member in members:
        member_meta = json.loads((tmp_path / "blend" / "members" / member.name / "model.json").read_text())
        assert member_meta["model"] == member.model and member_meta["task"] == features.task.to_dict()

    loaded = load_model(tmp_path / "blend", device="cpu")
    assert loaded.task == features.task
    scores = loaded.score(raw_test_rows(features, task))
    np.testing.assert_allclose(scores, blend.scores["test"], rtol=0, atol=1e-6)
    predicted = loaded.predict(raw_test_rows(features, task))
    if task == "multiclass":
        assert set(predicted) <= set(CLASSES)
        np.testing.assert_array_equal(predicted, np.array(CLASSES)[blend.scores["test"].argmax(axis=1)])
    elif task == "regression":
        np.testing.assert_allclose(predicted, blend.scores["test"], atol=1e-6)
    else:
        np.testing.assert_array_equal(predicted, (blend.scores["test"] >= 0.5).astype(int))


def test_an_mlp_member_gets_its_categorical_codes_and_zero_weight_members_are_not_loaded(trained, tmp_path):
    from pipeline.stages import train_torch

    features, members = trained["binary"]
    mlp = train_torch(features, name="mlp", seed=1, hidden=[8], epochs=2, batch_size=128)
    blend = fit_ensemble([mlp, members[0], members[1]], name="blend",
                         weights={"mlp": 0.6, members[0].name: 0.4, members[1].name: 0.0})
    save_model(blend, tmp_path / "blend")
    meta = json.loads((tmp_path / "blend" / "model.json").read_text())
    assert meta["categorical_columns"] == ["kind"]
    loaded = load_model(tmp_path / "blend", device="cpu")
    assert len(loaded.predictor.predictors) == 2                    # xgboost (weight 0) never read
    np.testing.assert_allclose(loaded.score(raw_test_rows(features, "binary")), blend.scores["test"], atol=1e-6)


def test_an_ensemble_of_ensembles_round_trips(trained, tmp_path):
    features, members = trained["regression"]
    inner = fit_ensemble(members[:2], name="inner")
    outer = fit_ensemble([inner, members[2]], name="outer")
    save_model(outer, tmp_path / "outer")
    assert (tmp_path / "outer" / "members" / "inner" / "members" / members[0].name / "model.json").is_file()
    loaded = load_model(tmp_path / "outer", device="cpu")
    np.testing.assert_allclose(loaded.score(raw_test_rows(features, "regression")), outer.scores["test"], atol=1e-5)


def test_member_files_the_ensemble_does_not_list_are_never_loaded(trained, tmp_path):
    _, members = trained["binary"]
    save_model(fit_ensemble(members[:2], name="blend"), tmp_path / "blend")
    meta_path = tmp_path / "blend" / "model.json"
    meta = json.loads(meta_path.read_text())
    meta["files"] = [f for f in meta["files"] if not f.startswith(f"members/{members[0].name}/")]
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(DataError, match="not among the ensemble's files"):
        load_model(tmp_path / "blend", device="cpu")


def test_a_member_name_that_leaves_the_folder_is_refused(trained, tmp_path):
    _, members = trained["binary"]
    save_model(fit_ensemble(members[:2], name="blend"), tmp_path / "blend")
    body_path = tmp_path / "blend" / "ensemble.json"
    body = json.loads(body_path.read_text())
    body["members"][0]["name"] = "../../elsewhere"
    body_path.write_text(json.dumps(body))
    with pytest.raises(DataError, match="not a plain name"):
        load_model(tmp_path / "blend", device="cpu")


def test_an_ensemble_pickles_with_its_scores(trained):
    features, members = trained["multiclass"]
    blend = fit_ensemble(members, name="blend")
    again = pickle.loads(pickle.dumps(blend))
    assert isinstance(again, EnsembleModel) and again.weights == blend.weights
    np.testing.assert_allclose(again.scores["test"], blend.scores["test"])
    assert again.task == Task("multiclass", tuple(CLASSES))


# ---------------------------------------------------------------- the stage in a run
def config(data: Path, *, blend: str = "    inputs: [logreg, xgb]\n") -> str:
    return (f"name: blended\ndevice: cpu\nstages:\n  raw:\n    kind: load\n    path: {data}\n"
            "  split:\n    kind: split\n    inputs: [raw]\n    target: target\n    task: multiclass\n"
            "    test: 0.25\n    valid: 0.25\n"
            "  features:\n    kind: features\n    inputs: [split]\n    id: id\n"
            "    ops:\n      - standardize: {columns: [a, b]}\n      - one_hot: {columns: [kind]}\n"
            "  logreg:\n    kind: train\n    inputs: [features]\n    model: logistic_regression\n"
            "  xgb:\n    kind: train\n    inputs: [features]\n    model: xgboost\n"
            "    params: {n_estimators: 10, max_depth: 3}\n"
            f"  blend:\n    kind: ensemble\n{blend}"
            "  evaluate:\n    kind: evaluate\n    inputs: [logreg, xgb, blend]\n"
            "  export:\n    kind: export\n    inputs: [logreg, xgb, blend]\n")


def test_the_ensemble_stage_is_evaluated_and_exported_like_any_model(tmp_path):
    from pipeline import run_pipeline
    from pipeline.runs.record import read_manifest

    rows("multiclass").to_csv(tmp_path / "rows.csv", index=False)
    (tmp_path / "blended.yaml").write_text(config(tmp_path / "rows.csv"))
    result = run_pipeline(tmp_path / "blended.yaml", runs_dir=tmp_path / "runs")
    run_dir = Path(result.run_dir)
    manifest = read_manifest(run_dir)
    facts = manifest.stages["blend"].facts
    assert set(facts["weights"]) == {"logreg", "xgb"} and facts["fitted_on"] == "valid"
    assert sum(facts["weights"].values()) == pytest.approx(1.0, abs=1e-5)
    record = json.loads((run_dir / "blend" / "weights.json").read_text())
    assert record["loss"] == "log_loss" and record["ensemble_loss"] <= min(record["member_loss"].values()) + 1e-12
    assert "blend" in manifest.metrics["models"]
    assert manifest.models["blend"] == "export/models/blend"
    assert {f"export/models/blend/{name}" for name in json.loads(
        (run_dir / "export" / "models" / "blend" / "model.json").read_text())["files"]} <= set(manifest.artifacts)


def test_fixed_weights_must_name_each_input(tmp_path):
    text = config(tmp_path / "rows.csv", blend="    inputs: [logreg, xgb]\n    weights: {logreg: 1, forest: 2}\n")
    with pytest.raises(ConfigError, match=r"not an input: forest; no weight for: xgb"):
        load_config(text=text)
    text = config(tmp_path / "rows.csv", blend="    inputs: [logreg, xgb]\n    weights: {logreg: -1, xgb: 2}\n")
    with pytest.raises(ConfigError, match="greater than or equal to 0"):
        load_config(text=text)
    text = config(tmp_path / "rows.csv", blend="    inputs: [logreg, raw]\n")
    with pytest.raises(ConfigError, match="input .raw. is a .load. stage"):
        load_config(text=text)


def test_on_oof_over_members_without_out_of_fold_scores_is_refused_at_its_key_saying_what_it_needs(tmp_path):
    rows("multiclass").to_csv(tmp_path / "rows.csv", index=False)
    text = config(tmp_path / "rows.csv", blend="    inputs: [logreg, xgb]\n    on: oof\n")
    with pytest.raises(ConfigError) as caught:
        load_config(text=text, check_data=True)
    message = str(caught.value)
    assert "stages.blend.on" in message and "on: oof" in message
    assert "bag: on each input" in message and "folds: on the split" in message
    assert "valid: > 0" not in message and "on: valid" in message      # the split has valid rows already


def test_an_ensemble_of_one_input_is_refused_at_its_inputs():
    """One member leaves no weights to fit (a stack of one is a model: its meta-model recalibrates it)."""
    with pytest.raises(ConfigError, match=r"stages\.blend\.inputs.*an 'ensemble' stage needs at least 2 input"):
        load_config(text=config(Path("rows.csv"), blend="    inputs: [logreg]\n"))


def test_an_ensemble_on_order_by_folds_fits_on_the_rows_every_member_scored(tmp_path):
    """With order_by folds the oldest block is never scored out of fold: the ensemble took its
    NaN scores for the members' fault ("scored values that are not finite numbers")."""
    from pipeline import run_pipeline
    from tests.conftest import working_directory

    rng = np.random.default_rng(5)
    n = 300
    x = rng.normal(size=n)
    pd.DataFrame({"rid": range(n), "t": np.arange(n), "x": x, "z": rng.normal(size=n),
                  "y": (x + rng.normal(0, 1, n) > 0).astype(int)}).to_csv(tmp_path / "rows.csv", index=False)
    (tmp_path / "p.yaml").write_text(
        "name: ordered\ndevice: cpu\nstages:\n"
        "  raw: {kind: load, path: rows.csv}\n"
        "  split: {kind: split, inputs: [raw], target: y, test: 0.2, folds: 3, order_by: t}\n"
        "  features: {kind: features, inputs: [split], id: rid, ops: [{drop: {columns: [t]}}]}\n"
        "  lr: {kind: train, inputs: [features], model: logistic_regression}\n"
        "  xgb: {kind: train, inputs: [features], model: xgboost, params: {n_estimators: 10}}\n"
        "  e: {kind: ensemble, inputs: [lr, xgb]}\n")
    with working_directory(tmp_path):
        result = run_pipeline("p.yaml", runs_dir=tmp_path / "runs")
    facts = result.manifest.stages["e"].facts
    assert result.manifest.status == "succeeded"
    assert abs(sum(facts["weights"].values()) - 1) < 1e-9, facts
