"""The ``torch`` stage: as a library function, inside a pipeline, exported and scored again."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from pipeline import run_pipeline
from pipeline.config import load_config
from pipeline.core.errors import BackendUnavailable, ConfigError, DataError
from pipeline.runs.record import read_manifest
from pipeline.scoring.model_folder import load_model
from pipeline.stages import build_features, evaluate_models, load_table, predictions_frame, save_model, split_frame
from pipeline.stages.torch_mlp import train_torch
from tests.conftest import CHURN_CATEGORICAL, TELCO, churn_ops

CATEGORICAL = CHURN_CATEGORICAL
OPS = churn_ops()
FAST = dict(hidden=[32], epochs=6, batch_size=256)


@pytest.fixture
def features(backend):
    frame = load_table(TELCO, backend=backend, na_values=[" "],
                       columns=["customerID", "Churn", "tenure", "MonthlyCharges", "TotalCharges",
                                "gender", "Partner", "Dependents", "PhoneService", "PaperlessBilling", *CATEGORICAL])
    data = split_frame(frame, "Churn", positive="Yes", test=0.2, valid=0.1, seed=42, backend=backend)
    return build_features(data, OPS, id_column="customerID")


def test_categorified_columns_arrive_as_one_int64_code_matrix(features):
    assert sorted(features.categorical_columns) == sorted(CATEGORICAL)      # in feature order
    codes = features.codes["train"]
    assert codes.dtype == np.int64 and codes.shape == (features.rows()["train"], 3)
    X = features.backend.to_host(features.X["train"])
    positions = [features.feature_names.index(c) for c in features.categorical_columns]
    np.testing.assert_array_equal(features.backend.to_host(codes), X[:, positions].astype("int64"))
    names = [h.name for h in features.handoffs]
    assert names == ["train.X", "train.codes", "valid.X", "valid.codes", "test.X", "test.codes"]
    assert all(not h.zero_copy and h.bytes_copied > 0 for h in features.handoffs)


def test_mlp_with_embeddings_trains_and_is_evaluated_like_any_model(features):
    trained = train_torch(features, name="mlp", seed=1, **FAST)
    arch = trained.estimator.arch
    sizes = dict(zip(features.categorical_columns, arch.cardinalities))
    assert sizes == {"Contract": 4, "PaymentMethod": 5, "InternetService": 4}   # values + the 0 bucket
    assert len(arch.continuous_index) == len(features.feature_names) - 3
    assert all(h.zero_copy for h in trained.handoffs) and {h.name for h in trained.handoffs} >= {"train.codes"}
    evaluation = evaluate_models([trained])
    assert evaluation.metrics["mlp"]["roc_auc"] > 0.75
    table = predictions_frame([trained])
    assert "score_mlp" in table and len(table) == features.rows()["test"]


def test_same_seed_same_model(features, tmp_path):
    a = train_torch(features, seed=3, **FAST)
    b = train_torch(features, seed=3, **FAST)
    np.testing.assert_array_equal(a.scores["test"], b.scores["test"])
    assert [h["loss"] for h in a.history] == [h["loss"] for h in b.history]
    # The same model is the same file, byte for byte (the zip's inner folder was the temporary
    # file's random name).
    written = [save_model(m, tmp_path / name) for name, m in (("a", a), ("b", b))]
    assert (tmp_path / "a" / "model.pt").read_bytes() == (tmp_path / "b" / "model.pt").read_bytes(), written


def test_fits_in_two_threads_train_the_models_their_seeds_give(features):
    """PyTorch's random generator is the process's: two runs in two threads of a service drew
    from it in turn, and one run's MLP came out other than its seed gives (ROC AUC 0.8114
    against 0.8007 every time alone)."""
    import threading

    params = {**FAST, "dropout": 0.2}
    alone = {seed: train_torch(features, seed=seed, **params).scores["test"] for seed in (3, 4)}
    together: dict[int, np.ndarray] = {}

    def fit(seed: int) -> None:
        together[seed] = train_torch(features, seed=seed, **params).scores["test"]

    threads = [threading.Thread(target=fit, args=(seed,)) for seed in (3, 4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for seed in (3, 4):
        np.testing.assert_array_equal(together[seed], alone[seed])


def test_exported_mlp_scores_raw_rows_on_the_cpu(features, tmp_path, telco_pandas):
    trained = train_torch(features, seed=1, **FAST)
    save_model(trained, tmp_path / "mlp")
    meta = json.loads((tmp_path / "mlp" / "model.json").read_text())
    assert meta["file"] == "model.pt" and meta["categorical_columns"] == features.categorical_columns
    ids = features.ids["test"]
    rows = telco_pandas.set_index("customerID").loc[ids].reset_index()
    model = load_model(tmp_path / "mlp", device="cpu")
    np.testing.assert_allclose(model.score(rows), trained.scores["test"], atol=1e-5)


def test_embedding_dims_must_name_categorified_columns(features):
    """A config's mistake (exit 2 at the key), not the data's (it was exit 3, naming no key)."""
    with pytest.raises(ConfigError, match="not categorified columns") as caught:
        train_torch(features, name="mlp", embedding_dims={"tenure": 4}, **FAST)
    assert caught.value.issues[0].path == "stages.mlp.embedding_dims" and caught.value.exit_code == 2


def test_cuda_without_a_cuda_device_is_a_backend_error(features):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    with pytest.raises(BackendUnavailable, match="no CUDA device"):
        train_torch(features, device="cuda", **FAST)


CONFIG = """\
name: nn
device: cpu
stages:
  raw: {kind: load, path: %(data)s, na_values: [" "]}
  split: {kind: split, inputs: [raw], target: Churn, positive: "Yes", test: 0.2, valid: 0.1}
  features:
    kind: features
    inputs: [split]
    id: customerID
    ops:
      - fill_missing: {columns: [TotalCharges]}
      - categorify: {columns: [Contract, PaymentMethod, InternetService], min_frequency: 10}
      - drop: {columns: [gender, Partner, Dependents, PhoneService, PaperlessBilling, MultipleLines,
                         OnlineSecurity, OnlineBackup, DeviceProtection, TechSupport, StreamingTV, StreamingMovies]}
      - standardize: {columns: [tenure, MonthlyCharges, TotalCharges]}
  mlp: {kind: torch, inputs: [features], hidden: [16], epochs: 3, embedding_dims: {Contract: 2}}
  xgb: {kind: train, inputs: [features], model: xgboost, params: {n_estimators: 20}}
  evaluate: {kind: evaluate, inputs: [mlp, xgb]}
  export: {kind: export, inputs: [mlp, xgb]}
"""


def test_torch_stage_in_a_pipeline_records_handoffs_and_artifacts(tmp_path):
    config = load_config(text=CONFIG % {"data": TELCO})
    result = run_pipeline(config, runs_dir=tmp_path)
    manifest = read_manifest(result.run_dir)
    facts = manifest.stages["mlp"].facts
    assert facts["bytes_copied"] == 0 and facts["epochs_run"] == 3 and facts["precision"] == "fp32"
    feature_copies = manifest.stages["features"].facts["handoffs"]
    assert {h["name"] for h in feature_copies} >= {"train.X", "train.codes"}
    assert set(manifest.metrics["models"]) == {"mlp", "xgb"}
    arch = json.loads((result.run_dir / "export" / "models" / "mlp" / "architecture.json").read_text())
    categorical = manifest.stages["features"].facts["categorical"]
    dims = dict(zip(categorical, arch["embedding_dims"]))
    assert dims["Contract"] == 2 and sorted(arch["cardinalities"]) == [4, 4, 5]
    history = pd.read_csv(result.run_dir / "mlp" / "history.csv")
    assert list(history["epoch"]) == [1, 2, 3] and history["val_auc"].between(0, 1).all()
    assert "mlp/learning_curve.png" in manifest.artifacts


def test_torch_stage_config_errors_name_key_and_line():
    text = (CONFIG % {"data": TELCO}).replace("hidden: [16]", "hiden: [16]").replace(
        "embedding_dims: {Contract: 2}", "precision: fp8")
    with pytest.raises(ConfigError) as info:
        load_config(text=text)
    found = {i.path: i for i in info.value.issues}
    assert "did you mean 'hidden'" in found["stages.mlp.hiden"].message and found["stages.mlp.hiden"].line == 16
    assert "stages.mlp.precision" in found and "bf16" in found["stages.mlp.precision"].message
