"""In-memory and partitioned features behind one interface: the same rows, labels, ids and
feature values from the same table, and the same calls to train, score and write predictions."""

from __future__ import annotations

import inspect
from types import SimpleNamespace

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

import pipeline.stages
import pipeline.stages.features
from pipeline.backends import get_backend
from pipeline.core.errors import DataError
from pipeline.features import Categorify, FillMissing, Standardize
from pipeline.featuresets import FeatureSet, InMemoryFeatures, PartitionedFeatures
from pipeline.stages import SplitData, build_features, train_model
from pipeline.stages.train import SplitScores
from tests.conftest import TELCO

TEXT = ["gender", "Partner", "Dependents", "PhoneService", "MultipleLines", "InternetService",
        "OnlineSecurity", "OnlineBackup", "DeviceProtection", "TechSupport", "StreamingTV",
        "StreamingMovies", "Contract", "PaperlessBilling", "PaymentMethod"]
OPS = [FillMissing(columns=["TotalCharges"], strategy="mean"), Categorify(columns=TEXT),
       Standardize(columns=["tenure", "MonthlyCharges"])]
SIZES = {"train": 400, "valid": 100, "test": 100}


def small_split(partitions: int | None = None) -> SplitData:
    """The first 600 rows of the churn table, split by position; the same rows either way."""
    frame = pd.read_csv(TELCO, na_values=[" "], nrows=600)
    frame["Churn"] = (frame["Churn"] == "Yes").astype("int8")
    frames, start = {}, 0
    for name, size in SIZES.items():
        frames[name] = frame.iloc[start:start + size].reset_index(drop=True)
        start += size
    if partitions:
        frames = {name: dd.from_pandas(part, npartitions=partitions) for name, part in frames.items()}
    return SplitData(frames=frames, target="Churn", positive="Yes", backend=get_backend("cpu"))


@pytest.fixture(scope="module")
def layouts(tmp_path_factory) -> tuple[FeatureSet, FeatureSet]:
    memory = build_features(small_split(), OPS, id_column="customerID")
    parts = build_features(small_split(partitions=3), OPS, id_column="customerID",
                           output_dir=tmp_path_factory.mktemp("partitions"))
    return memory, parts


def test_the_stage_modules_name_the_interface():
    assert pipeline.stages.FeatureSet is FeatureSet
    assert pipeline.stages.features.FeatureSet is FeatureSet


def test_both_layouts_implement_the_same_interface(layouts):
    memory, parts = layouts
    assert type(memory) is InMemoryFeatures and type(parts) is PartitionedFeatures
    assert isinstance(memory, FeatureSet) and isinstance(parts, FeatureSet)
    assert (memory.distributed, parts.distributed) == (False, True)
    for name in ("fit", "scorer", "write_predictions", "in_memory", "rows", "labels", "host_sample"):
        assert inspect.signature(getattr(type(memory), name)) == inspect.signature(getattr(type(parts), name)), name


def test_both_layouts_give_the_same_rows_labels_ids_and_features(layouts):
    memory, parts = layouts
    assert memory.rows() == parts.rows() == SIZES
    assert memory.feature_names == parts.feature_names
    for split in SIZES:
        labels = memory.labels(split)
        assert isinstance(labels, np.ndarray) and isinstance(parts.labels(split), np.ndarray)
        np.testing.assert_array_equal(labels, parts.labels(split))
        assert labels.sum() > 0
        assert memory.host_ids(split).tolist() == parts.host_ids(split).tolist()
        lazy = parts.X[split].compute().to_numpy(dtype="float32")
        np.testing.assert_allclose(memory.X[split], lazy, rtol=1e-5, atol=1e-6)


def test_both_layouts_sample_the_training_matrix_on_the_host_over_the_whole_split(layouts):
    memory, parts = layouts
    whole = memory.host_sample("train", 1_000)[0]
    assert isinstance(whole, np.ndarray) and whole.shape == (400, len(memory.feature_names))
    np.testing.assert_array_equal(whole, memory.X["train"])
    np.testing.assert_allclose(parts.host_sample("train", 1_000)[0], whole, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(memory.host_sample("train", 100)[0], memory.X["train"][::4])
    # Partitioned: the partitions read (all 3 here: at least four are), then 200 rows evenly over them.
    sample = parts.host_sample("train", 200)[0]
    assert sample.shape == (200, len(parts.feature_names))
    np.testing.assert_allclose(sample[[0, -1]], whole[[0, -1]], rtol=1e-5, atol=1e-6)
    assert all(np.isclose(whole, row, rtol=1e-5, atol=1e-6).all(axis=1).any() for row in sample)
    assert parts.host_sample("train", 200)[0].tolist() == sample.tolist()           # the same every time


def test_only_in_memory_features_hand_out_matrices(layouts):
    memory, parts = layouts
    assert memory.in_memory("refused") is memory
    with pytest.raises(DataError, match="^this consumer needs matrices$"):
        parts.in_memory("this consumer needs matrices")


def test_each_layout_records_its_own_facts(layouts):
    memory, parts = layouts
    assert list(memory.facts()) == ["rows", "features", "categorical", "handoffs"]
    assert list(parts.facts()) == ["passes", "partitions", "rows", "features", "handoffs"]
    assert parts.facts()["partitions"] == {"train": 3, "valid": 3, "test": 3}
    assert memory.fit_facts(None) == {} and parts.fit_facts(None) == {"external_memory": False}


def test_split_scores_are_computed_on_first_read_only(layouts):
    for features in layouts:
        asked: list[str] = []

        def score(split: str, features=features) -> np.ndarray:
            asked.append(split)
            return np.zeros(features.rows()[split])

        scores = SplitScores(score, features)
        assert "test" in scores and "nope" not in scores and list(scores) == list(SIZES)
        assert asked == []                                   # answered from the row counts
        assert scores["test"].shape == (100,) and scores["test"] is scores["test"]
        assert asked == ["test"]


def test_partitioned_predictions_are_gathered_where_a_model_scores_no_partition(layouts, tmp_path):
    """A model without a per-partition scorer (no booster): one table, as in memory."""
    memory, parts = layouts
    model = SimpleNamespace(name="flat", estimator=object(), scores={"test": np.full(100, 0.5)})
    tables = []
    for features in layouts:
        path = tmp_path / type(features).__name__ / "predictions.parquet"
        path.parent.mkdir()
        assert features.write_predictions([model], "test", path) == [path]
        tables.append(pd.read_parquet(path))
    pd.testing.assert_frame_equal(tables[0], tables[1], check_dtype=False)    # Parquet reads ids as Arrow strings
    assert tables[0]["customerID"].tolist() == memory.host_ids("test").tolist()


@pytest.mark.slow
def test_both_layouts_train_score_and_write_predictions_through_one_interface(layouts, cluster_client, tmp_path):  # noqa: F811
    from pipeline.stages.explain import explain_models

    memory, parts = layouts
    tables = {}
    for name, features in (("memory", memory), ("parts", parts)):
        trained = train_model(features, "xgboost", {"n_estimators": 10}, seed=0, name="xgb")
        assert trained.scores["test"].shape == (100,)
        assert ((trained.scores["test"] >= 0) & (trained.scores["test"] <= 1)).all()
        # Both explain themselves on a sample; only the in-memory one is shuffled and scored.
        found = explain_models([trained], split="test", metric="roc_auc", threshold=0.5, rows=60, repeats=1)
        assert set(found["models"]["xgb"]) == ({"permutation", "gain", "shap"} if name == "memory"
                                              else {"gain", "shap"})
        assert ("xgb" in found["skipped"]) == (name == "parts")
        assert set(found["models"]["xgb"]["shap"]) == set(features.feature_names)
        written = features.write_predictions([trained], "test", tmp_path / name / "predictions.parquet")
        tables[name] = pd.read_parquet(tmp_path / name / "predictions.parquet")
        assert len(written) == (1 if name == "memory" else 3)
    for column in ("customerID", "split", "Churn"):
        assert tables["memory"][column].tolist() == tables["parts"][column].tolist()
    assert list(tables["memory"].columns) == list(tables["parts"].columns) == [
        "customerID", "split", "Churn", "score_xgb"]


def test_a_host_sample_is_rows_of_the_split_with_their_own_labels(layouts):
    """At most the rows asked for, each one a row of the split beside its own label."""
    for features in layouts:
        whole = np.asarray(features.backend.to_host(features.X["train"]), dtype="float32")
        labels = features.labels("train")
        rows = {tuple(np.round(x, 5)): int(y) for x, y in zip(whole, labels)}
        x, y = features.host_sample("train", 50)
        assert x.shape == (50, len(features.feature_names)) and y.shape == (50,)
        assert all(rows[tuple(np.round(row, 5))] == int(label) for row, label in zip(x, y))
        assert features.host_sample("train", 10_000)[0].shape[0] == SIZES["train"]


def test_both_layouts_profile_every_row_alike(layouts):
    """Asked for more rows than a split has, both layouts profile every row: the same
    histograms and target balance, whichever order the rows came in."""
    memory, parts = (features.profile(rows=10_000) for features in layouts)
    assert memory["rows"] == parts["rows"] == memory["sample_rows"] == SIZES
    assert memory["balance"] == parts["balance"]
    assert memory["balance"]["counts"]["train"] == np.bincount(layouts[0].labels("train"), minlength=2).tolist()
    assert list(memory["histograms"]) == layouts[0].feature_names
    for name, entry in memory["histograms"].items():
        other = parts["histograms"][name]
        assert entry.keys() == other.keys()
        for split in SIZES:
            np.testing.assert_allclose(entry["shares"][split], other["shares"][split], atol=1e-12)


def test_the_profile_sample_gives_the_drift_reference_without_reading_the_split_again(monkeypatch):
    from pipeline.metrics.drift import reference_profile

    features = build_features(small_split(), OPS, id_column="customerID")
    read: list[str] = []
    sample = features.host_sample
    monkeypatch.setattr(features, "host_sample", lambda split, rows: read.append(split) or sample(split, rows))
    features.profile()
    reference = features.drift_reference()
    assert read == ["train", "valid", "test"]                      # one read per split, none for the reference
    assert reference == reference_profile(sample("train", 10_000)[0], features.feature_names)
    fresh = build_features(small_split(), OPS, id_column="customerID")
    assert fresh.drift_reference() == reference                     # without a profile: worked out on demand
