"""LightGBM and CatBoost as registry models: every task trains through a real run, exports in
the library's own file format and scores again through ``pipeline predict`` to the run's
numbers; categorical features reach the library as categorical; the valid split stops the
boosting early; a swapped model file and a missing library are refused with their exit codes;
the conformance kit holds for both entries."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.support.cli import run_cli as _pipeline
from pipeline.core.errors import DataError, ExitCode
from pipeline.runs.store import sha256_file
from pipeline.scoring.model_folder import load_model

pytestmark = pytest.mark.slow

# LightGBM splits on a categorical only with min_data_per_group rows per group (default 100): a
# small table lowers it.
MODELS = {"lightgbm": "{n_estimators: 30, num_leaves: 8, min_child_samples: 5, min_data_per_group: 10}",
          "catboost": "{iterations: 30, depth: 4}"}
# The estimator's planned rounds per model (the name of the parameter, and how to read the rounds kept).
ROUNDS = {"lightgbm": "n_estimators", "catboost": "iterations"}
CLASSES = ["low", "mid", "high"]


def rows(n: int = 360, seed: int = 0) -> pd.DataFrame:
    """``id, a, b, city, label, value, churn``: the city (a string column) moves every target,
    so a model that splits on it natively uses it."""
    rng = np.random.default_rng(seed)
    a, b = rng.normal(size=n), rng.normal(size=n)
    city = rng.choice(["paris", "lyon", "nice", "lille"], size=n)
    effect = pd.Series(city).map({"paris": 1.5, "lyon": -1.0, "nice": 0.5, "lille": -0.5}).to_numpy()
    signal = a - 0.5 * b + effect
    value = 2 * a - b + 2 * effect + rng.normal(scale=0.3, size=n)
    churn = np.where(signal + rng.normal(scale=0.5, size=n) > 0, "yes", "no")
    label = np.array(CLASSES)[np.digitize(signal + rng.normal(scale=0.3, size=n), [-0.7, 0.7])]
    return pd.DataFrame({"id": [f"r{i}" for i in range(n)], "a": a, "b": b, "city": city, "label": label,
                         "value": value, "churn": churn})


TARGETS = {"binary": ("churn", "    positive: 'yes'\n"), "multiclass": ("label", "    task: multiclass\n"),
           "regression": ("value", "    task: regression\n")}


def config(data: Path, model: str, task: str, params: str | None = None, *, valid: float = 0.2) -> str:
    target, declares = TARGETS[task]
    dropped = [c for c in ("churn", "label", "value") if c != target]
    columns = ", ".join(c for c in ("id", "a", "b", "city", "churn", "label", "value") if c not in dropped)
    return (f"name: {model}_{task}\ndevice: cpu\nseed: 7\nstages:\n"
            f"  raw:\n    kind: load\n    path: {data}\n    columns: [{columns}]\n"
            f"  split:\n    kind: split\n    inputs: [raw]\n    target: {target}\n{declares}"
            f"    test: 0.25\n    valid: {valid}\n"
            "  features:\n    kind: features\n    inputs: [split]\n    id: id\n"
            "    ops:\n      - standardize: {columns: [a, b]}\n      - categorify: {columns: [city]}\n"
            f"  model:\n    kind: train\n    inputs: [features]\n    model: {model}\n"
            f"    params: {params or MODELS[model]}\n"
            "  export:\n    kind: export\n    inputs: [model]\n")


def run(folder: Path, name: str, text: str) -> Path:
    from pipeline import run_pipeline

    (folder / f"{name}.yaml").write_text(text)
    return Path(run_pipeline(folder / f"{name}.yaml", runs_dir=folder / "runs").run_dir)


def predict(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return _pipeline("predict", *args, cwd=cwd, env={"COLUMNS": "200", **(env or {})})


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("gbdt")
    rows().to_csv(path / "rows.csv", index=False)
    rows(seed=1).drop(columns=["churn", "label", "value"]).to_csv(path / "new.csv", index=False)
    return path


@pytest.fixture(scope="module")
def runs(folder) -> dict[tuple[str, str], Path]:
    """One run per model and task, trained once for the tests of this module."""
    return {(model, task): run(folder, f"{model}_{task}", config(folder / "rows.csv", model, task))
            for model in MODELS for task in TARGETS}


# ---------------------------------------------------------------- train, export, predict
@pytest.mark.parametrize("task", list(TARGETS))
@pytest.mark.parametrize("model", list(MODELS))
def test_predict_scores_what_the_run_scored(runs, folder, tmp_path, model, task):
    run_dir = runs[(model, task)]
    meta = json.loads((run_dir / "export" / "models" / "model" / "model.json").read_text())
    assert meta["format"] == {"lightgbm": "lightgbm-text", "catboost": "catboost-cbm"}[model]
    assert meta["file"] == {"lightgbm": "model.lgb.txt", "catboost": "model.cbm"}[model]
    assert meta["categorical_features"] == [2]                 # a, b, then city's codes
    out = tmp_path / "scores.parquet"
    proc = predict("--run", str(run_dir), "--input", str(folder / "rows.csv"), "--output", str(out), cwd=folder)
    assert proc.returncode == 0, proc.stderr
    scored = pd.read_parquet(out).set_index("id")
    mine = pd.read_parquet(run_dir / "export" / "predictions.parquet").set_index("id")
    columns = [c for c in mine.columns if c.startswith(("score_", "prediction_"))]
    assert columns
    for column in columns:
        theirs = column.replace("_model", "")
        if column.startswith("prediction_") and task != "regression":
            assert scored.loc[mine.index, theirs].tolist() == mine[column].tolist()
        else:
            np.testing.assert_allclose(scored.loc[mine.index, theirs], mine[column], rtol=0, atol=1e-6)


def test_binary_scores_learn_the_signal(runs):
    for model in MODELS:
        table = pd.read_parquet(runs[(model, "binary")] / "export" / "predictions.parquet")
        from sklearn.metrics import roc_auc_score

        assert roc_auc_score(table["churn"], table["score_model"]) > 0.8, model


# ---------------------------------------------------------------- categorical features
def test_lightgbm_sees_the_categorified_column_as_categorical(runs, folder):
    text = (runs[("lightgbm", "binary")] / "export" / "models" / "model" / "model.lgb.txt").read_text()
    assert "[categorical_feature: 2]" in text
    # LightGBM describes a numeric feature by its range ([min:max]) and a categorical one by its
    # codes (1:2:3:4): the city's codes, binned as categories.
    infos = next(line for line in text.splitlines() if line.startswith("feature_infos=")).split("=")[1].split()
    assert infos[0].startswith("[") and infos[1].startswith("[")
    assert {1, 2, 3, 4} <= {int(code) for code in infos[2].split(":")}
    # ...and it splits on it as a categorical: such a split lists the codes that go left.
    assert "cat_threshold=" in text


def test_catboost_sees_the_categorified_column_as_categorical(runs):
    import catboost

    model = catboost.CatBoostClassifier()
    model.load_model(str(runs[("catboost", "binary")] / "export" / "models" / "model" / "model.cbm"))
    assert model.get_cat_feature_indices() == [2]
    assert model.feature_names_[2] == "2"


# ---------------------------------------------------------------- early stopping
@pytest.mark.parametrize("model,params", [
    ("lightgbm", "{n_estimators: 400, learning_rate: 0.5, num_leaves: 31, min_child_samples: 2, "
                 "early_stopping_rounds: 5}"),
    ("catboost", "{iterations: 400, learning_rate: 0.5, depth: 6, early_stopping_rounds: 5}"),
])
def test_early_stopping_on_the_valid_split_stops_before_the_planned_rounds(folder, model, params):
    run_dir = run(folder, f"{model}_stops", config(folder / "rows.csv", model, "regression", params))
    history = pd.read_csv(next(run_dir.rglob("eval_history.csv")))
    assert history.columns[0] == "round" and any(c.startswith("valid_") for c in history.columns)
    assert len(history) < 400
    # The exported model holds the best iteration's trees, and predict agrees with the run.
    folder_of = run_dir / "export" / "models" / "model"
    if model == "lightgbm":
        import lightgbm

        kept = lightgbm.Booster(model_file=str(folder_of / "model.lgb.txt")).num_trees()
    else:
        import catboost

        kept = catboost.CatBoostRegressor().load_model(str(folder_of / "model.cbm")).tree_count_
    assert kept < len(history) <= 400


def test_lightgbm_early_stopping_without_a_valid_split_says_so(folder):
    text = config(folder / "rows.csv", "lightgbm", "binary", "{n_estimators: 20, early_stopping_rounds: 3}", valid=0)
    with pytest.raises(Exception, match="early_stopping_rounds.*no valid rows"):
        run(folder, "no_valid", text)


# ---------------------------------------------------------------- refused files and libraries
def test_a_swapped_model_file_is_refused_with_exit_3(runs, folder, tmp_path):
    """A regression model's file in place of a binary one's, its checksum in the manifest
    updated (what a writer without a signing key can do): the objective does not give the
    task's scores, so loading refuses it, and ``pipeline predict`` exits 3 naming the file."""
    for model, name in (("lightgbm", "model.lgb.txt"), ("catboost", "model.cbm")):
        copy = tmp_path / f"{model}_copy"
        shutil.copytree(runs[(model, "binary")], copy)
        target = copy / "export" / "models" / "model" / name
        target.write_bytes((runs[(model, "regression")] / "export" / "models" / "model" / name).read_bytes())
        manifest = json.loads((copy / "manifest.json").read_text())
        manifest["artifacts"][f"export/models/model/{name}"] = sha256_file(target)
        (copy / "manifest.json").write_text(json.dumps(manifest, indent=2))
        with pytest.raises(DataError, match=f"{name}.*task is binary"):
            load_model(copy / "export" / "models" / "model")
        proc = predict("--run", str(copy), "--input", str(folder / "new.csv"), "--output", str(tmp_path / "o.csv"),
                       cwd=folder)
        assert proc.returncode == ExitCode.DATA, proc.stderr
        assert name in proc.stderr and "task is binary" in proc.stderr


def test_a_missing_library_is_exit_5_naming_the_extra(folder, tmp_path):
    """A ``lightgbm`` module that fails to import, first on the path: a real import failure."""
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "lightgbm.py").write_text("raise ModuleNotFoundError(\"No module named 'lightgbm'\", name='lightgbm')\n")
    (folder / "missing.yaml").write_text(config(folder / "rows.csv", "lightgbm", "binary"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(shim), os.environ.get("PYTHONPATH", ""),
                                                        str(Path(__file__).resolve().parents[2])])}
    # A process: LightGBM is missing only in an interpreter that never imported it.
    proc = subprocess.run([sys.executable, "-m", "pipeline", "run", "missing.yaml", "--runs-dir",
                           str(tmp_path / "runs")], cwd=folder, env=env, capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == ExitCode.BACKEND, proc.stderr
    assert "pip install -e '.[lightgbm]'" in proc.stderr


# ---------------------------------------------------------------- importances, tuning, the kit
class DeviceMatrix:
    """Stands in for a CuPy array where no GPU is: it names the CUDA array interface and copies
    itself to the host with ``.get()``, and NumPy cannot read it otherwise."""

    def __init__(self, values: np.ndarray) -> None:
        self._values = values
        self.__cuda_array_interface__ = {"shape": values.shape}
        self.shape = values.shape

    def get(self) -> np.ndarray:
        return self._values.copy()

    def __array__(self, *args, **kwargs):
        raise TypeError("a device array is not readable on the host; copy it with .get()")


@pytest.mark.parametrize("model", list(MODELS))
def test_device_matrices_are_copied_to_the_host_for_fit_evaluation_and_scoring(model):
    """The GPU backend hands the estimator CuPy matrices; both libraries read host memory."""
    from pipeline.backends import get_backend
    from pipeline.models import FitInputs, get_model_spec
    from pipeline.testing.models import tiny_dataset
    from pipeline.core.problems import BINARY

    X, y = tiny_dataset(BINARY)
    X[:, 3] = np.arange(len(X)) % 3            # a categorical column of codes
    spec = get_model_spec(model)
    kwargs, _ = spec.translate({ROUNDS[model]: 20}, "cpu", seed=0)
    estimator = get_backend("cpu").estimator(spec, kwargs)
    cut = len(X) * 2 // 3
    fit = spec.fit_kwargs(FitInputs(eval_set=(DeviceMatrix(X[cut:]), DeviceMatrix(y[cut:])), categorical=(3,)))
    estimator.fit(DeviceMatrix(X[:cut]), DeviceMatrix(y[:cut]), **fit)
    on_device = estimator.predict_proba(DeviceMatrix(X))
    np.testing.assert_array_equal(on_device, estimator.predict_proba(X))
    assert on_device.shape == (len(X), 2)
    assert estimator.evals_result()["valid"]


SPACES = {"lightgbm": "{num_leaves: {int: [4, 16]}, learning_rate: {float: [0.05, 0.3], log: true}}",
          "catboost": "{depth: {int: [2, 5]}, l2_leaf_reg: {float: [1, 10], log: true}}"}


@pytest.mark.parametrize("model", list(MODELS))
def test_tune_searches_the_models_own_parameters(folder, model):
    text = config(folder / "rows.csv", model, "binary")
    text = text.replace("  export:\n", f"    tune:\n      trials: 3\n      space: {SPACES[model]}\n  export:\n")
    run_dir = run(folder, f"{model}_tuned", text)
    tuning = pd.read_csv(next(run_dir.rglob("tuning.csv")))
    assert len(tuning) == 3
    space = {"lightgbm": ["num_leaves", "learning_rate"], "catboost": ["depth", "l2_leaf_reg"]}[model]
    assert all(any(name in column for column in tuning.columns) for name in space)


@pytest.mark.parametrize("model", list(MODELS))
def test_native_importances_rank_the_features(model):
    from pipeline.models import get_model_spec
    from pipeline.backends import get_backend
    from pipeline.testing.models import tiny_dataset
    from pipeline.core.problems import Task

    task = Task.from_dict({"kind": "multiclass", "classes": [0, 1, 2]})
    X, y = tiny_dataset(task)
    spec = get_model_spec(model)
    kwargs, _ = spec.translate({ROUNDS[model]: 20}, "cpu", seed=0)
    estimator = get_backend("cpu").estimator(spec, kwargs, task="multiclass").fit(X, y)
    found = spec.explain(estimator, X, ["a", "b", "c", "noise"])
    assert set(found) == {"gain", "shap"}
    for values in found.values():
        assert max(values, key=values.get) in ("a", "b", "c") and values["noise"] < max(values.values())


@pytest.mark.parametrize("model", list(MODELS))
def test_the_conformance_kit_passes(model):
    from pipeline.testing import check_model

    check_model(model, params={ROUNDS[model]: 20})


@pytest.mark.parametrize("model,module", [("lightgbm", "pipeline.models.lightgbm_estimators"),
                                          ("catboost", "pipeline.models.catboost_estimators")])
def test_the_stage_cache_key_covers_the_estimator_module_and_the_format(model, module):
    """Editing the estimator subclass or the format module invalidates cached train stages."""
    from pipeline.stages.spec import STAGE_KINDS

    spec = STAGE_KINDS["train"].spec.model_validate({"kind": "train", "inputs": ["f"], "model": model})
    modules = STAGE_KINDS["train"].code_modules(spec)
    assert {module, "pipeline.models.gbdt_formats"} <= modules
