"""No model file runs code when it is loaded, and a signed run cannot have a model swapped.

Each attack writes a payload that creates a marker file when it is unpickled (or rebuilt by
skops), puts it where a model file belongs, makes the checksums agree as a writer of the run
folder could, and asserts that loading is refused as a data error and the marker never
appears. A control test shows each payload does run when handed to the unsafe loader, so the
marker's absence means something.
"""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from pipeline.backends import get_backend
from pipeline.core.errors import ConfigError, DataError, ExitCode
from pipeline.core.settings import Settings
from pipeline.models import LINEAR_COEFFICIENTS, MODELS, SKOPS, SkopsFormat, get_model_spec
from pipeline.models.formats import LinearPredictor, PortablePredictor
from pipeline.predict.batch import predict_batch
from pipeline.runs.record import read_manifest
from pipeline.runs.signing import KEY_ENV, KEY_FILE_ENV, signature_path, signing_key
from pipeline.runs.store import sha256_file
from pipeline.scoring.model_folder import load_model
from pipeline.stages import build_features, load_table, save_model, split_frame, train_model
from pipeline.stages.torch_mlp import train_torch
from tests.conftest import CHURN_CATEGORICAL, TELCO, churn_ops, working_directory
from tests.support.cli import run_cli as _pipeline

KEY = "k" * 40
OTHER_KEY = "o" * 40
COLUMNS = ["customerID", "Churn", "tenure", "MonthlyCharges", "TotalCharges", "gender", "Partner", "Dependents",
           "PhoneService", "PaperlessBilling", *CHURN_CATEGORICAL]


# ---------------------------------------------------------------- payloads
class RunsCode:
    """Unpickling this runs ``exec``: it writes ``marker``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (exec, (f"open({str(self.marker)!r}, 'w').write('code ran')",))


class WritesOnSetState:
    """skops rebuilds an object through ``__setstate__``: this one writes the marker there."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __setstate__(self, state: dict[str, Any]) -> None:
        Path(state["marker"]).write_text("code ran")


def _pickle_payload(path: Path, marker: Path) -> None:
    with open(path, "wb") as fh:
        pickle.dump(RunsCode(marker), fh)


def _torch_payload(path: Path, marker: Path) -> None:
    import torch

    torch.save(RunsCode(marker), path)


def _skops_payload(path: Path, marker: Path) -> None:
    import skops.io as sio

    sio.dump(WritesOnSetState(marker), path)


def test_each_payload_runs_code_when_loaded_unsafely(tmp_path):
    """The control: the same files do write the marker through a loader that trusts them."""
    import skops.io as sio
    import torch

    for name, write, unsafe_load in [
        ("p.pkl", _pickle_payload, lambda p: pickle.loads(p.read_bytes())),
        ("p.pt", _torch_payload, lambda p: torch.load(p, weights_only=False)),
        ("p.skops", _skops_payload, lambda p: sio.load(p, trusted=sio.get_untrusted_types(file=p))),
    ]:
        marker = tmp_path / f"{name}.ran"
        write(tmp_path / name, marker)
        assert not marker.exists()
        unsafe_load(tmp_path / name)
        assert marker.read_text() == "code ran"


# ---------------------------------------------------------------- exported folders
@pytest.fixture(scope="module")
def features():
    backend = get_backend("cpu")
    frame = load_table(TELCO, backend=backend, na_values=[" "], columns=COLUMNS)
    data = split_frame(frame, "Churn", positive="Yes", test=0.2, valid=0.1, seed=42, backend=backend)
    return build_features(data, churn_ops(), id_column="customerID")


@pytest.fixture(scope="module")
def trained(features) -> dict[str, Any]:
    models = {}
    for name in sorted(MODELS):
        if name == "mlp":
            models[name] = train_torch(features, seed=1, hidden=[16], epochs=2, batch_size=512)
        elif get_model_spec(name).trainable and get_model_spec(name).serves("binary"):
            params = {"n_estimators": 10} if name in ("random_forest", "xgboost", "lightgbm") else \
                {"iterations": 10} if name == "catboost" else {}
            models[name] = train_model(features, name, params, seed=3)
    return models


def _raw_test_rows(features: Any) -> pd.DataFrame:
    frame = pd.read_csv(TELCO, na_values=[" "])
    return frame.set_index("customerID").loc[features.ids["test"]].reset_index()


@pytest.mark.parametrize("name", ["logistic_regression", "linear", "mlp", "random_forest", "xgboost", "lightgbm",
                                  "catboost"])
def test_every_registry_model_scores_identically_after_a_round_trip(name, trained, features, tmp_path):
    model = trained[name]
    save_model(model, tmp_path / name)
    loaded = load_model(tmp_path / name, device="cpu")
    X, codes = features.X["test"], (features.codes["test"] if features.categorical_columns else None)
    # Equal up to the order of a sum: a forest adds its trees' votes in parallel threads.
    np.testing.assert_allclose(loaded.predictor(X, codes), model.scores["test"], rtol=0, atol=1e-12)
    # From raw rows through the saved workflow too (float32 matrix: the same as in the run).
    np.testing.assert_allclose(loaded.score(_raw_test_rows(features)), model.scores["test"], rtol=0, atol=1e-6)


def test_the_registry_round_trip_covers_every_built_in_model():
    # ridge (regression only), extra_trees, ensemble, bagged and stacked round-trip in
    # test_task_estimators / test_auto / test_ensemble / test_bagging_stacking.
    assert {"logistic_regression", "linear", "mlp", "random_forest", "extra_trees", "xgboost", "lightgbm", "catboost", "ridge",
            "ensemble", "bagged", "stacked"} == set(MODELS)


@pytest.mark.parametrize("name", ["random_forest"])
def test_scikit_learn_models_are_skops_files_with_only_allowed_types(name, trained, tmp_path):
    import zipfile

    import skops.io as sio

    save_model(trained[name], tmp_path / name)
    meta = json.loads((tmp_path / name / "model.json").read_text())
    assert meta["format"] == "skops" and meta["files"] == ["model.skops", "reference.json"]
    file = tmp_path / name / "model.skops"
    assert zipfile.is_zipfile(file)
    assert set(sio.get_untrusted_types(file=file)) <= set(SKOPS.trusted)


def _swap(folder: Path, filename: str, write, marker: Path, **meta_changes: Any) -> None:
    """Replace the model files of an exported folder with a payload at ``filename`` (and edit
    model.json); its description, workflow and drift profile stay."""
    for old in folder.iterdir():
        if old.name not in ("model.json", "workflow.json", "reference.json"):
            old.unlink()
    write(folder / filename, marker)
    if meta_changes:
        meta = json.loads((folder / "model.json").read_text())
        meta.update(meta_changes)
        for key in [k for k, v in meta_changes.items() if v is None]:
            del meta[key]
        (folder / "model.json").write_text(json.dumps(meta))


@pytest.mark.parametrize("name,filename,write,meta_changes", [
    # The skops file replaced by a pickle under the same name.
    ("random_forest", "model.skops", _pickle_payload, {}),
    ("logistic_regression", "model.skops", _pickle_payload, {}),
    # A folder as written before skops: model.json names a joblib pickle.
    ("random_forest", "model.joblib", _pickle_payload, {"file": "model.joblib", "files": None, "format": None}),
    ("logistic_regression", "model.joblib", _pickle_payload,
     {"file": "model.joblib", "files": None, "format": None, "coef": None}),
    # A skops file naming a type outside the allow-list.
    ("random_forest", "model.skops", _skops_payload, {}),
    # XGBoost's JSON and the MLP's state_dict replaced by pickles.
    ("xgboost", "model.xgb.json", _pickle_payload, {}),
    ("mlp", "model.pt", _torch_payload, {}),
])
def test_a_model_file_swapped_for_code_is_refused_and_the_code_never_runs(
        name, filename, write, meta_changes, trained, tmp_path):
    folder = tmp_path / name
    save_model(trained[name], folder)
    if name == "mlp":
        keep = (folder / "architecture.json").read_text()
    marker = tmp_path / "code-ran"
    _swap(folder, filename, write, marker, **meta_changes)
    if name == "mlp":
        (folder / "architecture.json").write_text(keep)
    with pytest.raises(DataError) as info:
        load_model(folder, device="cpu")
    assert info.value.exit_code == ExitCode.DATA
    assert "\n" not in str(info.value)
    assert not marker.exists()


def test_an_old_pickled_linear_model_scores_from_model_json_and_the_pickle_never_runs(trained, features, tmp_path):
    folder = tmp_path / "logreg"
    save_model(trained["logistic_regression"], folder)
    marker = tmp_path / "code-ran"
    _swap(folder, "model.joblib", _pickle_payload, marker, file="model.joblib", files=None, format=None)
    loaded = load_model(folder, device="cpu")
    np.testing.assert_allclose(loaded.predictor(features.X["test"], None), trained["logistic_regression"].scores["test"],
                               rtol=0, atol=1e-6)
    assert not marker.exists()


def test_an_untrusted_type_is_named_in_the_message(trained, tmp_path):
    folder = tmp_path / "forest"
    save_model(trained["random_forest"], folder)
    _swap(folder, "model.skops", _skops_payload, tmp_path / "code-ran")
    with pytest.raises(DataError, match=r"model file contains untrusted types .*WritesOnSetState"):
        load_model(folder, device="cpu")
    assert not (tmp_path / "code-ran").exists()


def test_export_refuses_an_estimator_holding_types_outside_the_allow_list(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    with pytest.raises(DataError, match="does not trust .*WritesOnSetState.*trusted="):
        SKOPS.save(WritesOnSetState(tmp_path / "x"), folder, backend=get_backend("cpu"))
    assert list(folder.iterdir()) == []                     # no file, not even a temporary one
    # A format that lists the type saves it: the allow-list is the entry's to extend.
    extended = SkopsFormat(trusted=[*SKOPS.trusted, f"{__name__}.WritesOnSetState"])
    written, _ = extended.save(WritesOnSetState(tmp_path / "x"), folder, backend=get_backend("cpu"))
    assert [p.name for p in written] == ["model.skops"]
    assert SkopsFormat() == SKOPS and extended != SKOPS


def test_backends_keep_scikit_learn_estimators_as_they_are(trained):
    cpu = get_backend("cpu")
    estimator = trained["random_forest"].estimator
    assert cpu.to_portable_estimator(estimator) is estimator
    assert cpu.from_portable_estimator(estimator) is estimator


NATIVE_MODULE = {"cpu": "sklearn.", "gpu": "cuml."}


def _stored_and_scored_on_cpu_and(device: str, features: Any, folder: Path) -> None:
    """Models trained on ``device`` are saved in their registry entry's format, load for the CPU
    and for ``device``, and score the same raw rows alike on both. The logistic regression is
    its coefficients (a ``LinearPredictor`` that scores on the host, whichever device loaded
    it: there is no estimator to move); the forest is a scikit-learn estimator in a skops file,
    which the device's backend turns into its own estimator (cuML's twin on the GPU)."""
    backend = get_backend(device)
    for name in ("logistic_regression", "random_forest"):
        model = train_model(features, name, {"n_estimators": 10} if name == "random_forest" else {}, seed=3)
        assert type(model.estimator).__module__.startswith(NATIVE_MODULE[device])
        save_model(model, folder / name)
        on_cpu = load_model(folder / name, device="cpu")
        on_device = load_model(folder / name, device=device)
        stored_as = get_model_spec(name).format
        if stored_as == LINEAR_COEFFICIENTS:
            assert json.loads((folder / name / "model.json").read_text())["format"] == LINEAR_COEFFICIENTS.name
            assert isinstance(on_cpu.predictor, LinearPredictor) and isinstance(on_device.predictor, LinearPredictor)
        else:
            assert stored_as == SKOPS and isinstance(on_cpu.predictor, PortablePredictor)
            assert type(on_cpu.predictor.estimator).__module__.startswith("sklearn.")
            assert type(on_device.predictor.for_backend(backend)).__module__.startswith(NATIVE_MODULE[device])
        rows = _raw_test_rows(features).head(200)
        np.testing.assert_allclose(on_cpu.score(rows), on_device.score(backend.from_pandas(rows)), rtol=0, atol=1e-5)


def test_a_cpu_trained_model_is_stored_and_scores_as_the_gpu_test_checks(features, tmp_path):
    """The CPU twin of the GPU test below: the same models through the same checks, so a check
    that does not fit a model's format shows here, on any machine."""
    _stored_and_scored_on_cpu_and("cpu", features, tmp_path)


@pytest.mark.gpu
def test_a_gpu_trained_model_is_stored_as_scikit_learn_and_scores_on_both_devices(tmp_path):
    from pipeline.backends import available_devices

    if "gpu" not in available_devices():
        pytest.skip("needs a GPU with RAPIDS installed")
    gpu = get_backend("gpu")
    frame = load_table(TELCO, backend=gpu, na_values=[" "], columns=COLUMNS)
    data = split_frame(frame, "Churn", positive="Yes", test=0.2, valid=0.1, seed=42, backend=gpu)
    _stored_and_scored_on_cpu_and("gpu", build_features(data, churn_ops(), id_column="customerID"), tmp_path)


# ---------------------------------------------------------------- signed runs
CONFIG = """\
name: signed
device: cpu
seed: 42
stages:
  raw:
    kind: load
    path: data/telco_customer_churn.csv
    na_values: [" "]
    columns: [customerID, Churn, tenure, MonthlyCharges, TotalCharges, gender, Partner, Contract]
  split: {kind: split, inputs: [raw], target: Churn, positive: "Yes", test: 0.2, valid: 0.1}
  features:
    kind: features
    inputs: [split]
    id: customerID
    ops:
      - fill_missing: {columns: [TotalCharges], strategy: median}
      - one_hot: {columns: [gender, Partner, Contract], drop_binary: true}
      - standardize: {columns: [tenure, MonthlyCharges, TotalCharges]}
  logreg: {kind: train, inputs: [features], model: logistic_regression}
  forest: {kind: train, inputs: [features], model: random_forest, params: {n_estimators: 5}}
  evaluate: {kind: evaluate, inputs: [logreg, forest]}
  export: {kind: export, inputs: [logreg, forest]}
"""


@pytest.fixture(scope="module")
def signed_project(tmp_path_factory) -> dict[str, Any]:
    """Two finished runs of a small config: one signed with KEY, one made without a key."""
    from pipeline import run_pipeline

    project = tmp_path_factory.mktemp("signed_project")
    shutil.copytree(Path(__file__).resolve().parents[2] / "data", project / "data")
    (project / "signed.yaml").write_text(CONFIG)
    with working_directory(project), pytest.MonkeyPatch.context() as env:
        env.delenv(KEY_FILE_ENV, raising=False)
        env.setenv(KEY_ENV, KEY)
        signed = run_pipeline("signed.yaml", runs_dir=project / "runs", cache=False)
        env.delenv(KEY_ENV)
        unsigned = run_pipeline("signed.yaml", runs_dir=project / "unsigned-runs", cache=False)
    rows = pd.read_csv(project / "data" / "telco_customer_churn.csv").head(20).drop(columns=["Churn"])
    rows.to_csv(project / "new.csv", index=False)
    return {"project": project, "signed": Path(signed.run_dir), "unsigned": Path(unsigned.run_dir),
            "input": project / "new.csv"}


@pytest.fixture
def key(monkeypatch):
    monkeypatch.delenv(KEY_FILE_ENV, raising=False)
    monkeypatch.setenv(KEY_ENV, KEY)


def _copy(run_dir: Path, tmp_path: Path) -> Path:
    target = tmp_path / "runs" / "signed" / run_dir.name
    shutil.copytree(run_dir, target)
    return target


def _predict(run_dir: Path, signed_project: dict[str, Any], out: Path, model: str = "forest") -> Any:
    return predict_batch(run_dir, signed_project["input"], out, model=model, na_values=[" "])


def test_a_signed_run_has_its_signature_and_scores_with_the_key(signed_project, key, tmp_path):
    run_dir = signed_project["signed"]
    assert signature_path(run_dir / "manifest.json").is_file()
    assert not signature_path(signed_project["unsigned"] / "manifest.json").exists()
    assert "manifest.json.sig" not in read_manifest(run_dir).artifacts
    result = _predict(run_dir, signed_project, tmp_path / "out.csv")
    assert result.rows == 20
    assert load_model(run_dir / "export" / "models" / "logreg").kind == "logistic_regression"


def test_without_a_key_nothing_is_checked(signed_project, monkeypatch, tmp_path):
    monkeypatch.delenv(KEY_ENV, raising=False)
    monkeypatch.delenv(KEY_FILE_ENV, raising=False)
    assert _predict(signed_project["unsigned"], signed_project, tmp_path / "a.csv").rows == 20
    assert _predict(signed_project["signed"], signed_project, tmp_path / "b.csv").rows == 20


def _swap_model_and_checksum(run_dir: Path, donor: Path) -> None:
    """What a writer without the key can do: replace the forest with another model file and
    update its checksum in the manifest."""
    folder = run_dir / "export" / "models" / "forest"
    shutil.copy2(donor / "export" / "models" / "forest" / "model.skops", folder / "model.skops")
    data = json.loads((run_dir / "manifest.json").read_text())
    data["artifacts"]["export/models/forest/model.skops"] = sha256_file(folder / "model.skops")
    (run_dir / "manifest.json").write_text(json.dumps(data, indent=2))


def test_a_model_swapped_with_its_checksum_is_refused_when_the_key_is_set(signed_project, key, tmp_path):
    run_copy = _copy(signed_project["signed"], tmp_path)
    _swap_model_and_checksum(run_copy, signed_project["unsigned"])
    with pytest.raises(DataError, match="signature .* does not match .*changed after it was signed") as info:
        _predict(run_copy, signed_project, tmp_path / "out.csv")
    assert info.value.exit_code == ExitCode.DATA
    assert not (tmp_path / "out.csv").exists()
    with pytest.raises(DataError, match="does not match"):
        load_model(run_copy / "export" / "models" / "forest")


def test_a_drift_profile_swapped_with_its_checksum_is_refused_when_the_key_is_set(signed_project, key, tmp_path):
    """reference.json decides which features predict reports as drifted: one edited to hide a
    shift (and its checksum updated) is refused like a swapped model file."""
    run_copy = _copy(signed_project["signed"], tmp_path)
    path = run_copy / "export" / "models" / "forest" / "reference.json"
    profile = json.loads(path.read_text())
    profile["features"]["tenure"]["edges"] = [1e9]
    path.write_text(json.dumps(profile))
    data = json.loads((run_copy / "manifest.json").read_text())
    data["artifacts"]["export/models/forest/reference.json"] = sha256_file(path)
    (run_copy / "manifest.json").write_text(json.dumps(data, indent=2))
    with pytest.raises(DataError, match="signature .* does not match .*changed after it was signed"):
        _predict(run_copy, signed_project, tmp_path / "out.csv")
    assert not (tmp_path / "out.csv").exists()


def test_a_model_swapped_without_updating_the_checksum_is_refused_by_load_model(signed_project, key, tmp_path):
    run_copy = _copy(signed_project["signed"], tmp_path)
    folder = run_copy / "export" / "models" / "forest"
    shutil.copy2(signed_project["unsigned"] / "export" / "models" / "forest" / "model.skops", folder / "model.skops")
    with pytest.raises(DataError, match="does not match its sha256 in run .* signed manifest"):
        load_model(folder)
    (folder / "extra.bin").write_bytes(b"x")
    shutil.copy2(signed_project["signed"] / "export" / "models" / "forest" / "model.skops", folder / "model.skops")
    with pytest.raises(DataError, match=r"\['export/models/forest/extra.bin'\] are not in run"):
        load_model(folder)


def test_an_unsigned_run_or_another_keys_signature_is_refused(signed_project, monkeypatch, tmp_path):
    monkeypatch.delenv(KEY_FILE_ENV, raising=False)
    monkeypatch.setenv(KEY_ENV, KEY)
    with pytest.raises(DataError, match=r"is not signed \(no manifest.json.sig\)"):
        _predict(signed_project["unsigned"], signed_project, tmp_path / "out.csv")
    with pytest.raises(DataError, match="is not signed"):
        load_model(signed_project["unsigned"] / "export" / "models" / "logreg")
    monkeypatch.setenv(KEY_ENV, OTHER_KEY)
    with pytest.raises(DataError, match="signed with another key"):
        _predict(signed_project["signed"], signed_project, tmp_path / "out.csv")


def test_a_model_folder_outside_a_run_does_not_load_when_the_key_is_set(signed_project, key, tmp_path):
    shutil.copytree(signed_project["signed"] / "export" / "models" / "logreg", tmp_path / "loose")
    with pytest.raises(DataError, match="not inside a run folder"):
        load_model(tmp_path / "loose")


def test_predict_through_the_cli_exits_3_with_one_paragraph(signed_project, tmp_path):
    run_copy = _copy(signed_project["signed"], tmp_path)
    _swap_model_and_checksum(run_copy, signed_project["unsigned"])
    key_file = tmp_path / "key"
    key_file.write_text(KEY + "\n")                       # a trailing newline, as editors write

    def predict(run: Path):
        return _pipeline("predict", "--run", run, "--input", signed_project["input"], "--output",
                         tmp_path / "out.csv", "--na-values", " ", cwd=tmp_path, env={KEY_FILE_ENV: str(key_file)},
                         unset=[KEY_ENV])

    proc = predict(run_copy)
    assert proc.returncode == ExitCode.DATA, proc.stderr
    message = proc.stderr.strip()
    assert "signature" in message and "does not match" in message and "\n\n" not in message
    # The same command on the untouched run, with the key from the file, succeeds.
    proc = predict(signed_project["signed"])
    assert proc.returncode == 0, proc.stderr


def test_a_config_edited_to_import_a_plugin_is_refused_before_the_plugin_runs(signed_project, monkeypatch, tmp_path):
    """The run's config.yaml names the plugins predict imports: an edit is caught by its checksum
    before any import (and, with the key, by the signature even if the checksum was updated)."""
    monkeypatch.delenv(KEY_ENV, raising=False)
    monkeypatch.delenv(KEY_FILE_ENV, raising=False)
    run_copy = _copy(signed_project["signed"], tmp_path)
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    marker = tmp_path / "plugin-ran"
    (plugins / "planted_plugin.py").write_text(f"open({str(marker)!r}, 'w').write('code ran')\n")
    monkeypatch.syspath_prepend(str(plugins))
    config = run_copy / "config.yaml"
    config.write_text(config.read_text() + "plugins: [planted_plugin]\n")
    with pytest.raises(DataError, match="run config .*config.yaml is corrupt"):
        _predict(run_copy, signed_project, tmp_path / "out.csv")
    assert not marker.exists()

    data = json.loads((run_copy / "manifest.json").read_text())
    data["artifacts"]["config.yaml"] = sha256_file(config)
    (run_copy / "manifest.json").write_text(json.dumps(data, indent=2))
    monkeypatch.setenv(KEY_ENV, KEY)
    with pytest.raises(DataError, match="does not match"):
        _predict(run_copy, signed_project, tmp_path / "out.csv")
    assert not marker.exists()


# ---------------------------------------------------------------- the key
def test_the_key_comes_from_one_variable_and_must_be_usable(tmp_path):
    assert signing_key(Settings()) is None
    assert signing_key(Settings.from_environ({KEY_ENV: KEY})) == KEY.encode()
    (tmp_path / "key").write_text(KEY + "\n")
    assert signing_key(Settings.from_environ({KEY_FILE_ENV: str(tmp_path / "key")})) == KEY.encode()
    for environ, expected in [
        ({KEY_ENV: KEY, KEY_FILE_ENV: str(tmp_path / "key")}, "both"),
        ({KEY_ENV: ""}, "empty"),
        ({KEY_ENV: "short"}, "5 bytes; use at least 16"),
        ({KEY_FILE_ENV: str(tmp_path / "missing")}, "cannot read the signing key"),
    ]:
        with pytest.raises(ConfigError, match=expected) as info:
            signing_key(Settings.from_environ(environ))
        assert info.value.exit_code == ExitCode.CONFIG and "\n" not in str(info.value)


def test_a_run_with_an_unusable_key_fails_before_it_starts(tmp_path, monkeypatch):
    from pipeline import run_pipeline

    (tmp_path / "data").mkdir()
    shutil.copy2(TELCO, tmp_path / "data" / TELCO.name)
    (tmp_path / "signed.yaml").write_text(CONFIG)
    monkeypatch.setenv(KEY_ENV, "short")
    monkeypatch.delenv(KEY_FILE_ENV, raising=False)
    with working_directory(tmp_path), pytest.raises(ConfigError, match=KEY_ENV):
        run_pipeline("signed.yaml", runs_dir=tmp_path / "runs", cache=False)
    assert list(tmp_path.rglob("manifest.json")) == []          # no run was started


def test_any_file_signs_and_verifies_the_same_way(tmp_path):
    """Signing is about files, not runs: a cache record, say, signs the same way."""
    from pipeline.runs.signing import sign_file, verify_file

    record = tmp_path / "record.json"
    record.write_text("{}")
    assert sign_file(record, KEY.encode()) == tmp_path / "record.json.sig"
    assert verify_file(record, KEY.encode()) == b"{}"
    record.write_text("{ }")
    with pytest.raises(DataError, match="changed after it was signed"):
        verify_file(record, KEY.encode())
    assert verify_file(record, None) is None or signing_key() is not None     # no key: nothing checked
