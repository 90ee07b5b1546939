"""Model file formats belong to the registry entry: every entry's format round-trips, a model
registered from outside the package saves and loads with its own format, an unregistered
model is a data error that says how to register it, and folders written before ``files``
existed in model.json still verify and load."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pipeline.core.errors import DataError, ExitCode
from pipeline.models import (
    JOBLIB,
    LINEAR_COEFFICIENTS,
    MODELS,
    SKOPS,
    TORCH_STATE_DICT,
    XGBOOST_JSON,
    ModelFormat,
    ModelSpec,
    get_model_spec,
    register_model,
    trainable_models,
)
from pipeline.predict.batch import verify_artifacts
from pipeline.scoring.model_folder import load_model
from pipeline.stages import build_features, load_table, save_model, split_frame, train_model
from pipeline.stages.torch_mlp import train_torch
from pipeline.stages.train import TrainSpec, external_memory_models
from pipeline.runs.store import atomic_write_text, sha256_file
from tests.conftest import CHURN_CATEGORICAL, TELCO, churn_ops, dump_unloadable

CATEGORICAL = CHURN_CATEGORICAL
OPS = churn_ops()
COLUMNS = ["customerID", "Churn", "tenure", "MonthlyCharges", "TotalCharges", "gender", "Partner", "Dependents",
           "PhoneService", "PaperlessBilling", *CATEGORICAL]
BUILT_IN = {"logistic_regression", "linear", "random_forest", "xgboost", "mlp"}


def _train(name: str, features: Any) -> Any:
    if name == "mlp":
        return train_torch(features, seed=1, hidden=[16], epochs=2, batch_size=512)
    params = {"n_estimators": 10} if name in ("random_forest", "xgboost") else {}
    return train_model(features, name, params, seed=3)


@pytest.fixture
def features(backend):
    frame = load_table(TELCO, backend=backend, na_values=[" "], columns=COLUMNS)
    data = split_frame(frame, "Churn", positive="Yes", test=0.2, valid=0.1, seed=42, backend=backend)
    return build_features(data, OPS, id_column="customerID")


@pytest.fixture
def registry():
    """The registry as it was before the test, whatever the test registers."""
    saved = dict(MODELS)
    yield MODELS
    MODELS.clear()
    MODELS.update(saved)


def _test_matrices(features: Any) -> tuple[Any, Any]:
    codes = features.codes["test"] if features.categorical_columns else None
    return features.X["test"], codes


def _manifest(run_dir: Path, folder: str, *, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """A run manifest listing every file of the model folder with its checksum."""
    base = run_dir / folder
    return {"artifacts": {f"{folder}/{p.name}": sha256_file(p) for p in sorted(base.iterdir())
                          if p.is_file() and p.name not in skip}}


def _raw_test_rows(features: Any, telco_pandas: Any) -> Any:
    return telco_pandas.set_index("customerID").loc[features.ids["test"]].reset_index()


# ---------------------------------------------------------------- the built-in entries
def test_every_built_in_entry_is_covered_here_and_has_its_format():
    assert set(MODELS) >= BUILT_IN
    assert get_model_spec("xgboost").format == XGBOOST_JSON
    assert get_model_spec("mlp").format == TORCH_STATE_DICT
    assert get_model_spec("logistic_regression").format == LINEAR_COEFFICIENTS
    assert get_model_spec("linear").format == LINEAR_COEFFICIENTS
    assert get_model_spec("random_forest").format == SKOPS
    assert JOBLIB is SKOPS                  # the old name, for plugins that used it
    # The MLP is an entry for its format, not something a train stage fits.
    # lightgbm and catboost round-trip in tests/models/test_gbdt_models.py.
    assert get_model_spec("lightgbm").format.name == "lightgbm-text"
    assert get_model_spec("catboost").format.name == "catboost-cbm"
    assert "mlp" not in trainable_models() and set(trainable_models()) == BUILT_IN - {"mlp"} | {
        "ridge", "lightgbm", "catboost", "extra_trees"}
    # Regression-only and composite entries have round trips of their own
    # (tests/models/test_task_estimators.py, tests/stages/test_ensemble.py).
    assert get_model_spec("ridge").format == LINEAR_COEFFICIENTS
    assert get_model_spec("ensemble").format.name == "ensemble" and not get_model_spec("ensemble").trainable
    assert external_memory_models() == ["xgboost"]


@pytest.mark.parametrize("name", sorted(BUILT_IN))
def test_each_format_round_trips_to_the_estimators_scores(name, features, tmp_path):
    trained = _train(name, features)
    spec = get_model_spec(name)
    folder = tmp_path / name
    folder.mkdir()
    written, extra = spec.format.save(trained.estimator, folder, backend=features.backend)
    assert written and all(p.is_file() and p.parent == folder for p in written)
    assert extra["file"] == written[0].name
    meta = {"model": name, **extra, "files": [p.name for p in written]}
    assert spec.format.files(meta) == [p.name for p in written]
    legacy = {k: v for k, v in meta.items() if k != "files"}
    assert spec.format.files(legacy) == [p.name for p in written]      # older model.json: same files

    predictor = spec.format.load(folder, meta, backend=features.backend)
    got = predictor(*_test_matrices(features))
    assert got.dtype == np.float64 and got.shape == (features.rows()["test"],)
    np.testing.assert_allclose(got, trained.scores["test"], rtol=0, atol=1e-9)
    # Loaded without a backend (the data decides), as load_model does by default.
    again = spec.format.load(folder, legacy, backend=None)(*_test_matrices(features))
    np.testing.assert_allclose(again, trained.scores["test"], rtol=0, atol=1e-9)


@pytest.mark.parametrize("name,files,keys", [
    ("logistic_regression", ["coefficients.json"], {"coef", "intercept", "dtype"}),
    ("linear", ["coefficients.json"], {"coef", "intercept", "dtype", "tables"}),
    ("random_forest", ["model.skops"], set()),
    ("xgboost", ["model.xgb.json"], set()),
    ("mlp", ["model.pt", "architecture.json"], {"architecture", "categorical_columns", "best_epoch"}),
])
def test_save_model_writes_the_files_and_keys_as_before_and_load_model_scores_raw_rows(
        name, files, keys, features, tmp_path, telco_pandas):
    trained = _train(name, features)
    folder = tmp_path / name
    written = save_model(trained, folder)
    assert sorted(p.name for p in written) == sorted([*files, "reference.json", "workflow.json", "model.json"])
    assert sorted(p.name for p in folder.iterdir()) == sorted([*files, "reference.json", "workflow.json", "model.json"])
    meta = json.loads((folder / "model.json").read_text())
    common = {"name", "model", "device", "estimator", "params", "features", "target", "id_column", "file", "files",
              "format", "task"}
    assert set(meta) == common | keys
    # The drift profile is listed after the model's own files, so predict verifies it too.
    assert meta["file"] == files[0] and meta["files"] == [*files, "reference.json"] and meta["model"] == name
    assert meta["format"] == get_model_spec(name).format.name
    if name == "mlp":
        assert meta["architecture"] == "architecture.json"
        assert meta["categorical_columns"] == features.categorical_columns
    if name == "xgboost":
        assert json.loads((folder / "model.xgb.json").read_text())["learner"]      # XGBoost's JSON, not a pickle

    model = load_model(folder, device="cpu")
    assert model.kind == name
    scores = model.score(_raw_test_rows(features, telco_pandas))
    np.testing.assert_allclose(scores, trained.scores["test"], rtol=0, atol=1e-6 if name == "mlp" else 1e-9)


@pytest.mark.parametrize("name", ["mlp", "logistic_regression"])
def test_a_model_json_written_before_files_existed_verifies_and_loads(name, features, tmp_path, telco_pandas):
    trained = _train(name, features)
    run_dir = tmp_path / "run"
    folder = run_dir / "export" / "models" / name
    save_model(trained, folder)
    meta = json.loads((folder / "model.json").read_text())
    del meta["files"]
    (folder / "model.json").write_text(json.dumps(meta, indent=2))
    key = f"export/models/{name}"

    verify_artifacts(run_dir, _manifest(run_dir, key)["artifacts"], key)
    model = load_model(folder, device="cpu")
    np.testing.assert_allclose(model.score(_raw_test_rows(features, telco_pandas)), trained.scores["test"],
                               rtol=0, atol=1e-6)
    # Every file the old keys name is still verified: one missing from the manifest is refused.
    for missing in ([meta["file"]] + ([meta["architecture"]] if name == "mlp" else [])):
        with pytest.raises(DataError, match=f"{missing}.*not in the run's manifest"):
            verify_artifacts(run_dir, _manifest(run_dir, key, skip=(missing,))["artifacts"], key)


def test_predict_verifies_the_files_the_format_lists(features, tmp_path):
    trained = _train("mlp", features)
    run_dir = tmp_path / "run"
    save_model(trained, run_dir / "m")
    verify_artifacts(run_dir, _manifest(run_dir, "m")["artifacts"], "m")
    with pytest.raises(DataError, match="architecture.json.*not in the run's manifest"):
        verify_artifacts(run_dir, _manifest(run_dir, "m", skip=("architecture.json",))["artifacts"], "m")
    (run_dir / "m" / "architecture.json").write_text("{}")
    with pytest.raises(DataError, match="architecture.json is corrupt"):
        verify_artifacts(run_dir, {**_manifest(run_dir, "m")["artifacts"], "m/architecture.json": "0" * 64}, "m")


def test_a_file_name_outside_the_folder_is_refused():
    with pytest.raises(DataError, match="outside its folder"):
        JOBLIB.files({"files": ["../../elsewhere/model.joblib"]})
    with pytest.raises(DataError, match="outside its folder"):
        TORCH_STATE_DICT.files({"file": "/etc/passwd", "architecture": "architecture.json"})


def test_an_old_pickled_linear_model_scores_from_its_coefficients_without_being_unpickled(
        features, tmp_path, monkeypatch):
    """A folder written before skops (model.joblib): the pickle is never loaded; a linear model
    scores from the coefficients model.json keeps, anything else is refused with what to do
    (stand-in pickle: a module that exists only while it is written, so unpickling would fail)."""
    trained = _train("logistic_regression", features)
    folder = tmp_path / "m"
    save_model(trained, folder)
    (folder / "coefficients.json").unlink()
    dump_unloadable(folder / "model.joblib", "fake_gpu_linear", "LogisticRegression", tmp_path, monkeypatch)
    meta = json.loads((folder / "model.json").read_text())
    meta.update(file="model.joblib")
    del meta["files"], meta["format"]
    predictor = SKOPS.load(folder, meta, backend=None)
    # The estimator scores the float32 matrix in float32; the coefficients score it in float64.
    np.testing.assert_allclose(predictor(features.X["test"], None), trained.scores["test"], rtol=0, atol=1e-6)
    del meta["coef"], meta["intercept"]
    with pytest.raises(DataError, match="not in a safe model format.*pickles are never loaded.*again"):
        SKOPS.load(folder, meta, backend=None)


def test_xgboost_loads_onto_the_backends_device(features, tmp_path):
    from pipeline.backends import get_backend

    save_model(_train("xgboost", features), tmp_path / "x")
    meta = json.loads((tmp_path / "x" / "model.json").read_text())
    predictor = XGBOOST_JSON.load(tmp_path / "x", meta, backend=get_backend("cpu"))
    assert predictor.estimator.get_params()["device"] == "cpu"


def test_formats_and_entries_pickle_and_compare_by_value():
    for spec in MODELS.values():
        assert pickle.loads(pickle.dumps(spec)) == spec
    assert JOBLIB == type(JOBLIB)() and JOBLIB != type(JOBLIB)("other.joblib") and JOBLIB != XGBOOST_JSON


# ---------------------------------------------------------------- a model from outside the package
class CoefJsonFormat(ModelFormat):
    """A plugin's format: a linear model's coefficients as plain JSON."""

    name = "coef-json"

    def save(self, estimator, folder, *, backend):
        path = folder / "coef.json"
        coef = np.asarray(backend.to_host(estimator.coef_)).ravel().tolist()
        intercept = float(np.asarray(backend.to_host(estimator.intercept_)).ravel()[0])
        atomic_write_text(path, json.dumps({"coef": coef, "intercept": intercept}))
        return [path], {"file": path.name, "coef_format": 1}

    def load(self, folder, meta, *, backend):
        saved = json.loads((folder / self.files(meta)[0]).read_text())
        coef, intercept = np.asarray(saved["coef"]), saved["intercept"]

        def predict(X, codes):
            from pipeline.backends import backend_for

            host = np.asarray(backend_for(X, backend).to_host(X), dtype="float64")
            return 1.0 / (1.0 + np.exp(-(host @ coef + intercept)))

        return predict


def _json_logreg() -> ModelSpec:
    return ModelSpec(
        name="json_logreg",
        cpu_class="sklearn.linear_model:LogisticRegression",
        gpu_class="cuml.linear_model:LogisticRegression",
        params={"C": ("C", "C"), "max_iter": ("max_iter", "max_iter")},
        cpu_defaults={"max_iter": 1000},
        gpu_defaults={"max_iter": 1000, "output_type": "cupy"},
        seed_param=None,
        format=CoefJsonFormat(),
    )


def test_a_model_registered_from_outside_saves_and_loads_with_its_own_format(
        registry, features, tmp_path, telco_pandas):
    with pytest.raises(KeyError, match="unknown model 'json_logreg'"):
        get_model_spec("json_logreg")
    register_model(_json_logreg())
    assert get_model_spec("json_logreg").format == CoefJsonFormat()     # no cache hides it
    assert "json_logreg" in trainable_models()
    assert TrainSpec(kind="train", model="json_logreg", params={"C": 0.5}).model == "json_logreg"
    assert "json_logreg" in TrainSpec.model_json_schema()["properties"]["model"]["enum"]

    trained = train_model(features, "json_logreg", {"C": 0.5})
    run_dir = tmp_path / "run"
    folder = run_dir / "models" / "j"
    written = save_model(trained, folder)
    assert sorted(p.name for p in written) == ["coef.json", "model.json", "reference.json", "workflow.json"]
    meta = json.loads((folder / "model.json").read_text())
    assert meta["files"] == ["coef.json", "reference.json"] and meta["coef_format"] == 1
    assert meta["model"] == "json_logreg"
    verify_artifacts(run_dir, _manifest(run_dir, "models/j")["artifacts"], "models/j")
    model = load_model(folder, device="cpu")
    # float64 coefficients against the estimator's float32 arithmetic on the same matrix.
    np.testing.assert_allclose(model.score(_raw_test_rows(features, telco_pandas)), trained.scores["test"],
                               rtol=0, atol=1e-6)


def test_a_registered_model_that_can_stream_is_accepted_for_external_memory(registry):
    with pytest.raises(ValueError, match="external_memory applies to xgboost only"):
        TrainSpec(kind="train", model="random_forest", external_memory=True)
    spec = _json_logreg()
    register_model(ModelSpec(**{**vars(spec), "external_memory": True}))
    assert TrainSpec(kind="train", model="json_logreg", external_memory=True).external_memory


def test_register_model_refuses_what_is_not_an_entry_or_a_format(registry):
    with pytest.raises(TypeError, match="ModelSpec"):
        register_model({"name": "x"})       # type: ignore[arg-type]
    with pytest.raises(TypeError, match="ModelFormat"):
        register_model(ModelSpec(name="x", cpu_class="a:B", format="joblib"))      # type: ignore[arg-type]
    assert "x" not in MODELS


# ---------------------------------------------------------------- unknown models
def test_train_offers_only_trainable_models_with_a_suggestion(features):
    with pytest.raises(ValueError, match=r"unknown model 'xgbost' \(known: catboost, extra_trees, lightgbm, linear, "
                                         r"logistic_regression, "
                                         r"random_forest, ridge, xgboost\); did you mean 'xgboost'\?"):
        TrainSpec(kind="train", model="xgbost")
    with pytest.raises(ValueError, match="model 'mlp' is not fitted by a train stage"):
        TrainSpec(kind="train", model="mlp")
    with pytest.raises(ValueError, match="trained by its own stage"):
        train_model(features, "mlp")
    with pytest.raises(KeyError, match="did you mean 'xgboost'"):
        get_model_spec("xgbost")
    from pipeline.core.errors import UsageError

    with pytest.raises(UsageError, match="unknown model 'xgbost'.*did you mean 'xgboost'"):
        train_model(features, "xgbost")          # the library's argument: a usage error, not a KeyError


def test_a_model_json_naming_an_unregistered_model_says_to_load_its_plugin(registry, features, tmp_path):
    register_model(_json_logreg())
    run_dir = tmp_path / "run"
    save_model(train_model(features, "json_logreg"), run_dir / "j")
    del MODELS["json_logreg"]                  # a later process where the plugin is not loaded
    for load in (lambda: load_model(run_dir / "j", device="cpu"),
                 lambda: verify_artifacts(run_dir, _manifest(run_dir, "j")["artifacts"], "j")):
        with pytest.raises(DataError) as info:
            load()
        message = str(info.value)
        assert info.value.exit_code == ExitCode.DATA == 3
        assert "model 'json_logreg' is unknown here" in message
        assert "plugins:" in message and "PIPELINE_PLUGINS" in message
