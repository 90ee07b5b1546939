"""Partitioned (Dask) data: feature statistics in one pass per phase, the same values as in
memory, Parquet outputs, distributed training on a real local cluster."""

from __future__ import annotations

import json

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

from pipeline import run_pipeline
from pipeline.core.errors import DataError
from pipeline.features import FeatureWorkflow
from pipeline.features.ops import Categorify, FillMissing, Log1p, OneHot, Standardize
from pipeline.features.fitting import op_phases
from pipeline.runs.record import RunManifest, read_manifest
from tests.conftest import TELCO, assert_nested_close

ONE_HOT = ["gender", "Partner", "Dependents", "PhoneService", "PaperlessBilling", "MultipleLines",
           "InternetService", "OnlineSecurity", "OnlineBackup", "DeviceProtection", "TechSupport",
           "StreamingTV", "StreamingMovies", "PaymentMethod"]
OPS = [
    FillMissing(columns=["TotalCharges"], strategy="mean", indicator=True),
    Log1p(columns=["TotalCharges"]),
    OneHot(columns=ONE_HOT, drop_binary=True),
    Categorify(columns=["Contract"]),
    Standardize(columns=["tenure", "MonthlyCharges", "TotalCharges"]),
]


@pytest.fixture(scope="module")
def telco_features() -> pd.DataFrame:
    return pd.read_csv(TELCO, na_values=[" "]).drop(columns=["customerID", "Churn"])


def test_phases_follow_column_dependencies(telco_features):
    assert op_phases(OPS, list(telco_features.columns)) == [0, 1, 0, 0, 2]
    # An op on a column only an earlier op creates depends on every earlier op.
    late = OPS + [Standardize(columns=["TotalCharges_missing"]), Standardize(columns=["gender=Male"])]
    assert op_phases(late, list(telco_features.columns))[-2:] == [1, 3]


def test_partitioned_fit_matches_the_in_memory_fit(telco_features):
    memory = FeatureWorkflow(OPS)
    expected = memory.fit_transform(telco_features)
    lazy = FeatureWorkflow(OPS)
    result = lazy.fit_transform(dd.from_pandas(telco_features, npartitions=5))
    assert lazy.passes_ == 3                          # three phases, three passes over the data
    assert lazy.output_columns_ == memory.output_columns_
    got = result.compute().reset_index(drop=True)
    # Partial sums add up in another order: equal to the last few bits.
    np.testing.assert_allclose(got.to_numpy(dtype="float64"), expected.to_numpy(dtype="float64"),
                               rtol=1e-9, atol=1e-12)
    for a, b in zip(memory.states_, lazy.states_):
        _assert_close(a, b)


def _assert_close(a, b) -> None:
    assert_nested_close(a, b, rel=1e-12)


def test_a_workflow_fitted_on_partitions_saves_and_scores_in_memory(telco_features, tmp_path):
    lazy = FeatureWorkflow(OPS)
    lazy.fit(dd.from_pandas(telco_features, npartitions=3))
    lazy.save(tmp_path / "wf.json")
    again = FeatureWorkflow.load(tmp_path / "wf.json")
    out = again.transform(telco_features.head(20))
    assert list(out.columns) == lazy.output_columns_ and not out.isna().any().any()


def _manifest(result) -> RunManifest:
    return read_manifest(result.run_dir)


@pytest.mark.slow
def test_partitioned_pipeline_trains_xgboost_on_the_cluster(in_project):
    result = run_pipeline("configs/churn_partitioned.yaml", overrides=["stages.xgb.params.n_estimators=60"])
    manifest = _manifest(result)
    assert manifest.status == "succeeded" and manifest.cluster["workers"] == 2
    assert manifest.stages["raw"].facts["partitions"] >= 3                # 1 MB at 256 KiB blocks
    facts = manifest.stages["features"].facts
    assert facts["passes"] == 1 and sum(facts["rows"].values()) == 7043      # fill + categorify: one phase
    parts = result.run_dir / "features" / "partitions"
    assert sorted(p.name for p in parts.iterdir()) == ["test", "train", "valid"]      # nothing half-written
    assert list((parts / "train").glob("*.parquet"))
    assert manifest.stages["xgb"].facts["estimator"] == "xgboost.dask.DaskXGBClassifier"
    assert manifest.metrics["models"]["xgb"]["roc_auc"] > 0.8
    # Written partition by partition: a folder of Parquet files, one per test partition.
    exported = result.run_dir / "export" / "predictions.parquet"
    assert exported.is_dir()
    assert len(list(exported.glob("*.parquet"))) == manifest.stages["features"].facts["partitions"]["test"]
    predictions = pd.read_parquet(exported)
    assert len(predictions) == facts["rows"]["test"] and predictions["customerID"].is_unique
    assert list(predictions.columns) == ["customerID", "split", "Churn", "score_xgb"]
    # The same scores evaluate ranked the model by.
    from sklearn.metrics import roc_auc_score

    auc = roc_auc_score(predictions["Churn"], predictions["score_xgb"])
    assert auc == pytest.approx(manifest.metrics["models"]["xgb"]["roc_auc"], abs=1e-9)
    assert set(manifest.artifacts) >= {f"export/predictions.parquet/{p.name}" for p in exported.iterdir()}
    # The drift profile of the training features, every training row (fewer than the cap).
    folder = result.run_dir / "export" / "models" / "xgb"
    reference = json.loads((folder / "reference.json").read_text())
    assert reference["rows"] == facts["rows"]["train"]
    assert list(reference["features"]) == json.loads((folder / "model.json").read_text())["features"]
    # Category codes, one bucket each; code 0 (a category unseen at fit) would count as other.
    assert reference["features"]["Contract"]["values"] == [1.0, 2.0, 3.0]


@pytest.mark.slow
def test_features_are_the_same_in_process_and_on_the_cluster(in_project):
    here = run_pipeline("configs/churn_partitioned.yaml", overrides=["cluster=null"], until=["features"])
    there = run_pipeline("configs/churn_partitioned.yaml", until=["features"])
    for split in ("train", "valid", "test"):
        a = pd.read_parquet(here.run_dir / "features" / "partitions" / split).sort_values("customerID")
        b = pd.read_parquet(there.run_dir / "features" / "partitions" / split).sort_values("customerID")
        pd.testing.assert_frame_equal(a.reset_index(drop=True), b.reset_index(drop=True), rtol=1e-12)


@pytest.mark.slow
def test_metrics_agree_between_one_and_two_workers(in_project):
    """xgboost.dask sketches histograms per worker, so trees may differ slightly with the
    number of workers: the stated tolerance is 0.01 ROC AUC."""
    fast = ["stages.xgb.params.n_estimators=60"]
    one = _manifest(run_pipeline("configs/churn_partitioned.yaml", overrides=[*fast, "cluster.n_workers=1"]))
    two = _manifest(run_pipeline("configs/churn_partitioned.yaml", overrides=fast))
    auc1, auc2 = (m.metrics["models"]["xgb"]["roc_auc"] for m in (one, two))
    assert abs(auc1 - auc2) < 0.01, (auc1, auc2)


@pytest.mark.slow
def test_a_model_without_a_distributed_version_says_which_can(in_project):
    with pytest.raises(DataError) as info:
        run_pipeline("configs/churn_partitioned.yaml", until=["xgb"],
                     overrides=["stages.xgb.model=random_forest", "stages.xgb.params={n_estimators: 10}",
                                "device=cpu"])
    message = str(info.value)
    assert "cannot train on partitioned data on the CPU" in message and "xgboost" in message
    assert info.value.stage == "xgb"


def test_training_partitioned_data_without_a_cluster_is_a_clear_error(in_project):
    with pytest.raises(DataError, match="needs a Dask cluster"):
        run_pipeline("configs/churn_partitioned.yaml", overrides=["cluster=null"], until=["xgb"])


def test_the_torch_stage_refuses_partitioned_data_without_distributed(in_project):
    config = (in_project / "configs" / "churn_partitioned.yaml").read_text() + (
        "  mlp: {kind: torch, inputs: [features]}\n")
    (in_project / "configs" / "nn.yaml").write_text(config)
    with pytest.raises(DataError, match="partitioned data only with distributed"):
        run_pipeline("configs/nn.yaml", overrides=["cluster=null"], only=["mlp"])


def test_features_read_back_keep_x_and_label_partitions_aligned(tmp_path):
    """Dask fuses Parquet files by the size of the projected columns; X and y must still come
    out partition for partition (xgboost.dask refused 50 vs 10 partitions at 25M rows)."""
    import dask

    from pipeline.stages import build_features, split_frame

    frame = dd.read_csv(str(TELCO), na_values=[" "], blocksize="128KiB")
    data = split_frame(frame, "Churn", positive="Yes", test=0.2, valid=0.1, seed=1)
    ops = [FillMissing(columns=["TotalCharges"], strategy="mean"), OneHot(columns=ONE_HOT + ["Contract"])]
    # The threshold below which files are fused, lowered so this small table behaves like a big one.
    with dask.config.set({"dataframe.parquet.minimum-partition-size": 1}):
        features = build_features(data, ops, id_column="customerID", output_dir=tmp_path)
        for split in ("train", "test"):
            # Partitions as Dask will compute them: after its optimizer has fused files.
            parts = {features.X[split].optimize().npartitions, features.y[split].optimize().npartitions,
                     features.ids[split].optimize().npartitions}
            assert len(parts) == 1 and parts.pop() >= 4, split
            assert len(features.X[split]) == len(features.y[split]) == features.rows()[split]


@pytest.mark.slow
def test_external_memory_training_agrees_with_in_memory_training(in_project):
    """Both ranks stream their Parquet files; the model agrees with xgboost.dask's within 0.01
    ROC AUC (quantiles are sketched per batch rather than per worker, so trees may differ)."""
    fast = ["stages.xgb.params.n_estimators=60", "device=cpu"]
    streamed = _manifest(run_pipeline("configs/churn_partitioned.yaml", overrides=fast))
    held = _manifest(run_pipeline("configs/churn_partitioned.yaml",
                                  overrides=[*fast, "stages.xgb.external_memory=false"]))
    plan = streamed.stages["xgb"].facts["external_memory"]
    files = streamed.stages["features"].facts["partitions"]["train"]
    assert plan["ranks"] == 2 and sum(plan["train_files"].values()) == files
    assert held.stages["xgb"].facts["external_memory"] is False
    auc_streamed, auc_held = (m.metrics["models"]["xgb"]["roc_auc"] for m in (streamed, held))
    assert auc_streamed > 0.8 and abs(auc_streamed - auc_held) < 0.01, (auc_streamed, auc_held)


def test_external_memory_is_refused_for_models_that_cannot_stream(in_project):
    from pipeline.config import load_config
    from pipeline.core.errors import ConfigError

    with pytest.raises(ConfigError, match="external_memory applies to xgboost only"):
        load_config("configs/churn_partitioned.yaml",
                    overrides=["stages.xgb.model=random_forest", "stages.xgb.params={}",
                               "stages.xgb.external_memory=true"])
