"""Predict and export per task: a score per class and the original class value for
multiclass, the value for regression, binary as it was; through ``pipeline predict`` as a cron
job runs it, and the rules (class column names, the threshold, which model) one by one."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.support.cli import run_cli as _pipeline
from pipeline.core.errors import ExitCode, UsageError
from pipeline.predict.batch import choose_model, predict_batch
from pipeline.scoring.model_folder import load_model, scores_table
from pipeline.core.problems import BINARY, Task
from tests.conftest import small_config

pytestmark = pytest.mark.slow

# Class values that are not column names as they stand: symbols, a space, one that is empty
# once cleaned, and two that clean to the same name.
CLASSES = ["<30", ">30", "NO", "One year"]
SCORES = ["score_30_0", "score_30_1", "score_NO", "score_One_year"]


def rows(n: int = 480, seed: int = 0) -> pd.DataFrame:
    """``id, a, b, kind, label, value``: a 4-class label and a number the features explain."""
    rng = np.random.default_rng(seed)
    a, b = rng.normal(size=n), rng.normal(size=n)
    kind = rng.choice(["x", "y"], size=n)
    logits = 1.5 * np.column_stack([a, b, -a - b, a - b])
    p = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    label = np.array(CLASSES)[[rng.choice(len(CLASSES), p=row) for row in p]]
    value = 3 * a - b + (kind == "x") + rng.normal(scale=0.5, size=n)
    return pd.DataFrame({"id": [f"r{i}" for i in range(n)], "a": a, "b": b, "kind": kind, "label": label,
                         "value": value})


def config(name: str, data: Path, *, target: str, task: str, models: dict[str, str]) -> str:
    """load (without the other task's target), split, features, the ``models`` (stage -> registry
    model), an ensemble of them, evaluate and export."""
    other = "value" if target == "label" else "label"
    columns = ", ".join(c for c in ("id", "a", "b", "kind", "label", "value") if c != other)
    text = (f"name: {name}\ndevice: cpu\nstages:\n  raw:\n    kind: load\n    path: {data}\n    columns: [{columns}]\n"
            f"  split:\n    kind: split\n    inputs: [raw]\n    target: {target}\n    task: {task}\n"
            "    test: 0.25\n    valid: 0.25\n"
            "  features:\n    kind: features\n    inputs: [split]\n    id: id\n"
            "    ops:\n      - standardize: {columns: [a, b]}\n      - one_hot: {columns: [kind]}\n")
    for stage, model in models.items():
        text += f"  {stage}:\n    kind: train\n    inputs: [features]\n    model: {model}\n"
        if model == "xgboost":
            text += "    params: {n_estimators: 10, max_depth: 3}\n"
    names = ", ".join([*models, "blend"])
    return text + (f"  blend:\n    kind: ensemble\n    inputs: [{', '.join(models)}]\n"
                   f"  evaluate:\n    kind: evaluate\n    inputs: [{names}]\n"
                   f"  export:\n    kind: export\n    inputs: [{names}]\n")


def build_run(folder: Path, name: str, text: str) -> Path:
    from pipeline import run_pipeline

    (folder / f"{name}.yaml").write_text(text)
    return Path(run_pipeline(folder / f"{name}.yaml", runs_dir=folder / "runs").run_dir)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    """A multiclass, a regression and a binary run (each with an ensemble) in one project folder."""
    folder = tmp_path_factory.mktemp("predict_tasks")
    rows().to_csv(folder / "rows.csv", index=False)
    binary = folder / "binary.csv"
    rng = np.random.default_rng(1)
    pd.DataFrame({"id": range(200), "a": rng.random(200), "b": rng.random(200),
                  "churn": np.where(rng.random(200) < 0.4, "yes", "no")}).to_csv(binary, index=False)
    after = ("  xgb:\n    kind: train\n    inputs: [features]\n    model: xgboost\n    params: {n_estimators: 5}\n"
             "  export:\n    kind: export\n    inputs: [logreg, xgb]\n")
    classes = config("classes", folder / "rows.csv", target="label", task="multiclass",
                     models={"logreg": "logistic_regression", "xgb": "xgboost"})
    values = config("values", folder / "rows.csv", target="value", task="regression",
                    models={"ridge": "ridge", "xgb": "xgboost"})
    return {"folder": folder, "multiclass": build_run(folder, "classes", classes),
            "regression": build_run(folder, "values", values),
            "binary": build_run(folder, "churn", small_config("churn", binary, after=after))}


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return _pipeline("predict", *args, cwd=cwd, env={"COLUMNS": "200"})


def run_predictions(run_dir: Path) -> pd.DataFrame:
    return pd.read_parquet(run_dir / "export" / "predictions.parquet")


def test_class_columns_keep_letters_digits_and_underscores_and_stay_apart():
    from pipeline.scoring.columns import class_columns

    assert class_columns(CLASSES) == ["30_0", "30_1", "NO", "One_year"]
    assert class_columns(["Month-to-month", "", "?!", 3, 4.5]) == ["Month_to_month", "class_1", "class_2", "3", "4_5"]
    # A suffixed name that meets a value spelt that way: every name gets its code.
    assert class_columns(["a", "a!", "a_1"]) == ["a_0", "a_1", "a_1_2"]
    assert class_columns(["x y", "x_y"]) == ["x_y_0", "x_y_1"]


# ---------------------------------------------------------------- export
def test_export_writes_the_original_classes_and_a_score_per_class(runs):
    run_dir = runs["multiclass"]
    table = run_predictions(run_dir)
    per_model = ["score_{m}_30_0", "score_{m}_30_1", "score_{m}_NO", "score_{m}_One_year", "prediction_{m}"]
    assert list(table.columns) == ["id", "split", "label"] + [c.format(m=m) for m in ("logreg", "xgb", "blend")
                                                              for c in per_model]
    truth = rows().set_index("id").loc[table["id"], "label"].tolist()
    assert table["label"].tolist() == truth
    for model in ("logreg", "xgb", "blend"):
        scores = table[[c.format(m=model) for c in per_model[:-1]]].to_numpy()
        np.testing.assert_allclose(scores.sum(axis=1), 1.0, atol=1e-5)
        assert table[f"prediction_{model}"].tolist() == [CLASSES[k] for k in scores.argmax(axis=1)]
    assert table.attrs["class_columns"]["score_blend_30_1"] == ">30"
    meta = json.loads((run_dir / "export" / "models" / "xgb" / "model.json").read_text())
    assert meta["task"] == {"kind": "multiclass", "classes": CLASSES}


def test_export_writes_the_value_and_the_prediction_for_regression(runs):
    table = run_predictions(runs["regression"])
    assert list(table.columns) == ["id", "split", "value", "prediction_ridge", "prediction_xgb", "prediction_blend"]
    truth = rows().set_index("id").loc[table["id"], "value"].to_numpy()
    np.testing.assert_allclose(table["value"], truth, rtol=1e-6)          # float32 labels
    assert np.corrcoef(table["prediction_blend"], truth)[0, 1] > 0.9


def test_binary_export_is_as_before_plus_the_task_in_model_json(runs):
    run_dir = runs["binary"]
    assert list(run_predictions(run_dir).columns) == ["id", "split", "churn", "score_logreg", "score_xgb"]
    meta = json.loads((run_dir / "export" / "models" / "logreg" / "model.json").read_text())
    assert meta["task"] == {"kind": "binary", "positive": "yes"}


def test_partitioned_export_writes_the_task_columns_partition_by_partition(tmp_path):
    from pipeline import run_pipeline

    rows().drop(columns=["value", "kind"]).to_csv(tmp_path / "rows.csv", index=False)
    (tmp_path / "parts.yaml").write_text(
        "name: parts\ndevice: cpu\ncluster: {n_workers: 2, threads_per_worker: 1}\nstages:\n"
        f"  raw:\n    kind: load\n    path: {tmp_path / 'rows.csv'}\n    partitioned: true\n"
        "  split:\n    kind: split\n    inputs: [raw]\n    target: label\n    task: multiclass\n    test: 0.25\n"
        "  features:\n    kind: features\n    inputs: [split]\n    id: id\n"
        "    ops:\n      - standardize: {columns: [a, b]}\n"
        "  xgb:\n    kind: train\n    inputs: [features]\n    model: xgboost\n    params: {n_estimators: 5}\n"
        "  export:\n    kind: export\n    inputs: [xgb]\n")
    run_dir = Path(run_pipeline(tmp_path / "parts.yaml", runs_dir=tmp_path / "runs").run_dir)
    written = run_dir / "export" / "predictions.parquet"
    assert written.is_dir()                                    # one file per partition, not gathered
    table = pd.read_parquet(written)
    scores = ["score_xgb_30_0", "score_xgb_30_1", "score_xgb_NO", "score_xgb_One_year"]
    assert list(table.columns) == ["id", "split", "label", *scores, "prediction_xgb"]
    assert table["label"].tolist() == rows().set_index("id").loc[table["id"], "label"].tolist()
    assert table["prediction_xgb"].tolist() == [CLASSES[k] for k in table[scores].to_numpy().argmax(axis=1)]


# ---------------------------------------------------------------- pipeline predict
@pytest.mark.parametrize("model", ["logreg", "blend"])
def test_predict_writes_a_score_per_class_and_the_original_class(runs, tmp_path, model):
    run_dir, folder = runs["multiclass"], runs["folder"]
    source = tmp_path / "new.csv"
    rows().drop(columns=["label", "value"]).to_csv(source, index=False)
    out = tmp_path / "scores.parquet"
    proc = cli("--run", str(run_dir), "--input", str(source), "--output", str(out), "--model", model, cwd=folder)
    assert proc.returncode == 0, proc.stderr
    assert f"with {model} " in proc.stderr and "multiclass" in proc.stderr and "threshold" not in proc.stderr
    table = pd.read_parquet(out)
    assert list(table.columns) == ["id", *SCORES, "prediction", "model"]
    assert table.attrs["class_columns"] == {"score_30_0": "<30", "score_30_1": ">30", "score_NO": "NO",
                                            "score_One_year": "One year"}
    # The run's own scores of its test rows, and their classes.
    mine = run_predictions(run_dir).set_index("id")
    scored = table.set_index("id").loc[mine.index]
    for column in SCORES:
        np.testing.assert_allclose(scored[column], mine[column.replace("score_", f"score_{model}_")], atol=1e-6)
    assert scored["prediction"].tolist() == mine[f"prediction_{model}"].tolist()
    assert set(table["prediction"]) <= set(CLASSES)


def test_predict_writes_the_value_for_regression(runs, tmp_path):
    run_dir, folder = runs["regression"], runs["folder"]
    source = tmp_path / "new.csv"
    rows().drop(columns=["label", "value"]).to_csv(source, index=False)
    out = tmp_path / "values.csv"
    proc = cli("--run", str(run_dir), "--input", str(source), "--output", str(out), "--model", "blend", cwd=folder)
    assert proc.returncode == 0, proc.stderr
    table = pd.read_csv(out)
    assert list(table.columns) == ["id", "prediction", "model"]
    mine = run_predictions(run_dir).set_index("id")
    np.testing.assert_allclose(table.set_index("id").loc[mine.index, "prediction"], mine["prediction_blend"],
                               rtol=1e-6)


def test_a_threshold_for_a_model_that_is_not_binary_is_a_usage_error(runs, tmp_path):
    run_dir, folder = runs["regression"], runs["folder"]
    source = tmp_path / "new.csv"
    rows().head(5).to_csv(source, index=False)
    out = tmp_path / "values.parquet"
    proc = cli("--run", str(run_dir), "--input", str(source), "--output", str(out), "--threshold", "0.3", cwd=folder)
    assert proc.returncode == ExitCode.CONFIG
    assert "--threshold applies to binary models only" in proc.stderr and "regression" in proc.stderr
    assert not out.exists()


def test_binary_predict_is_unchanged(runs, tmp_path):
    run_dir, folder = runs["binary"], runs["folder"]
    source = tmp_path / "new.csv"
    pd.DataFrame({"id": [1, 2], "a": [0.1, 0.9], "b": [0.5, 0.5]}).to_csv(source, index=False)
    out = tmp_path / "scores.parquet"
    proc = cli("--run", str(run_dir), "--input", str(source), "--output", str(out), "--model", "logreg",
               "--threshold", "0.4", cwd=folder)
    assert proc.returncode == 0, proc.stderr
    assert "threshold 0.4" in proc.stderr
    table = pd.read_parquet(out)
    assert list(table.columns) == ["id", "score", "prediction", "model"]
    assert table["prediction"].tolist() == (table["score"] >= 0.4).astype(int).tolist()
    assert table.attrs == {}


def test_partitioned_predict_writes_the_same_columns(runs, tmp_path):
    run_dir = runs["multiclass"]
    source = tmp_path / "new.csv"
    rows().drop(columns=["label", "value"]).to_csv(source, index=False)
    predict_batch(run_dir, source, tmp_path / "whole.parquet", model="blend")
    result = predict_batch(run_dir, source, tmp_path / "parts", model="blend", partitioned=True)
    assert result.threshold is None and result.task == "multiclass"
    whole, parts = pd.read_parquet(tmp_path / "whole.parquet"), pd.read_parquet(tmp_path / "parts")
    assert list(parts.columns) == list(whole.columns)
    pd.testing.assert_frame_equal(parts.astype({"id": "str"}), whole, check_dtype=False)


# ---------------------------------------------------------------- the library and the rules
def test_a_saved_model_says_its_task_and_predicts_original_values(runs):
    run_dir = runs["multiclass"]
    saved = load_model(run_dir / "export" / "models" / "xgb", device="cpu")
    assert saved.task == Task("multiclass", tuple(CLASSES))
    frame = rows().head(20)
    scores = saved.score(frame)
    assert scores.shape == (20, len(CLASSES))
    np.testing.assert_array_equal(saved.predict(frame), np.array(CLASSES)[scores.argmax(axis=1)])
    table = scores_table(frame.iloc[:0], saved, "xgb", None, saved.backend or _cpu())
    assert list(table.columns) == ["id", *SCORES, "prediction", "model"]


def test_a_model_json_without_a_task_is_binary(runs, tmp_path):
    import shutil

    folder = tmp_path / "old"
    shutil.copytree(runs["binary"] / "export" / "models" / "logreg", folder)
    meta = json.loads((folder / "model.json").read_text())
    del meta["task"]
    (folder / "model.json").write_text(json.dumps(meta))
    saved = load_model(folder, device="cpu")
    assert saved.task == BINARY
    frame = pd.DataFrame({"id": [1, 2], "a": [0.1, 0.9], "b": [0.5, 0.5]})
    np.testing.assert_array_equal(saved.predict(frame, threshold=0.3), (saved.score(frame) >= 0.3).astype(int))


def _cpu():
    from pipeline.backends import get_backend

    return get_backend("cpu")


def test_choose_model_prefers_the_recorded_best_then_ranks_in_the_metrics_direction():
    models = {"a": "export/models/a", "b": "export/models/b", "c": "export/models/c"}
    by = {"a": {"log_loss": 0.30, "roc_auc": 0.80}, "b": {"log_loss": 0.20, "roc_auc": 0.70},
          "c": {"log_loss": float("nan"), "roc_auc": 0.75}}
    here = Path("run")
    assert choose_model(models, None, {"best": "c", "rank_by": "log_loss", "models": by}, here) == "c"
    # The best was not exported: the best exported one, lower is better for a loss...
    assert choose_model(models, None, {"best": "gone", "rank_by": "log_loss", "models": by}, here) == "b"
    assert choose_model(models, None, {"rank_by": "log_loss", "models": by}, here) == "b"
    # ... higher for a score; an error (rmse) is a loss too.
    assert choose_model(models, None, {"best": "gone", "rank_by": "roc_auc", "models": by}, here) == "a"
    rmse = {"a": {"rmse": 3.0}, "b": {"rmse": 1.5}, "c": {"rmse": 2.0}}
    assert choose_model(models, None, {"rank_by": "rmse", "models": rmse}, here) == "b"
    with pytest.raises(UsageError, match="names no best model"):
        choose_model(models, None, {"rank_by": "no_such_metric", "models": by}, here)
    assert choose_model(models, "c", {"best": "a"}, here) == "c"
