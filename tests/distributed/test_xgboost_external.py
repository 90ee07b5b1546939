"""External-memory XGBoost: how files are dealt to ranks, batches read from real Parquet
files, and how the training notices a failed rank or a lost worker on a real LocalCluster."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pandas as pd
import pytest
import xgboost

from pipeline.backends import get_backend
from pipeline.backends.clusters.startup import cluster_workers
from pipeline.core.errors import DataError, StageError
from pipeline.distributed.partition_files import parquet_files
from pipeline.distributed.worker_ranks import wait_for_ranks
from pipeline.distributed.xgboost_external import (
    BatchSource,
    ParquetBatches,
    plan_shards,
)


def test_files_with_rows_are_listed_in_partition_order(tmp_path):
    for n in (10, 2, 0, 1, 3):
        pd.DataFrame({"a": [1.0] * (n != 3)}).to_parquet(tmp_path / f"part.{n}.parquet")  # part 3: no rows
    (tmp_path / "_metadata").write_bytes(b"")
    assert [os.path.basename(f) for f in parquet_files(tmp_path)] == [
        "part.0.parquet", "part.1.parquet", "part.2.parquet", "part.10.parquet"]


def test_files_are_dealt_round_robin_one_rank_per_worker():
    shards = plan_shards(["tcp://b:2", "tcp://a:1"], [f"t{i}" for i in range(5)], ["v0", "v1", "v2"])
    assert [s.worker for s in shards] == ["tcp://a:1", "tcp://b:2"]
    assert [s.train_files for s in shards] == [("t0", "t2", "t4"), ("t1", "t3")]
    assert [s.valid_files for s in shards] == [("v0", "v2"), ("v1",)]


def test_every_rank_gets_a_validation_file_or_there_are_fewer_ranks():
    shards = plan_shards(["w1", "w2", "w3"], ["t0", "t1", "t2", "t3"], ["v0"])
    assert len(shards) == 1 and shards[0].train_files == ("t0", "t1", "t2", "t3")
    assert len(plan_shards(["w1", "w2"], ["t0", "t1"], [])) == 2       # no validation split


def test_no_training_files_is_a_data_error():
    with pytest.raises(DataError, match="no Parquet files"):
        plan_shards(["w1"], [], [])


def test_batches_read_each_file_once_per_pass_and_train(tmp_path):
    rng = np.random.default_rng(0)
    for i in range(3):
        x = rng.normal(size=(200, 2)).astype("float32")
        pd.DataFrame({"a": x[:, 0], "b": x[:, 1], "y": (x[:, 0] > 0).astype("int8")}).to_parquet(
            tmp_path / f"part.{i}.parquet")
    source = BatchSource(("a", "b"), "y", get_backend("cpu"))
    batches = ParquetBatches(parquet_files(tmp_path), source, str(tmp_path / "cache"))
    matrix = xgboost.ExtMemQuantileDMatrix(batches, max_bin=32)
    assert (matrix.num_row(), matrix.num_col()) == (600, 2)
    assert matrix.feature_names == ["a", "b"]
    booster = xgboost.train({"objective": "binary:logistic", "max_depth": 2, "max_bin": 32}, matrix, num_boost_round=5)
    test = pd.DataFrame({"a": [-2.0, 2.0], "b": [0.0, 0.0]})
    low, high = booster.inplace_predict(test)
    assert low < 0.5 < high


@pytest.mark.slow
def test_the_worker_list_is_never_the_clients_partial_cache(cluster_client):
    """Client.scheduler_info() returns a cache that the client's periodic refresh overwrites
    with a worker-less identity: read at the wrong moment it said a live worker had left and
    failed a benchmark run. ``cluster_workers`` asks the scheduler each time."""
    import threading

    stop = threading.Event()

    def refresh() -> None:                    # what the client's periodic callback does
        while not stop.is_set():
            cluster_client.sync(cluster_client._update_scheduler_info, n_workers=0)

    thread = threading.Thread(target=refresh)
    thread.start()
    try:
        counts = [len(cluster_workers(cluster_client)) for _ in range(200)]
    finally:
        stop.set()
        thread.join()
    assert set(counts) == {2}


def _sleep(seconds: float, stop: str) -> str:
    """Hold a worker thread for ``seconds``, or until the file ``stop`` exists (a cancelled
    task keeps its thread until it returns, and later tests need the workers)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not os.path.exists(stop):
        time.sleep(0.1)
    return "slept"


def _fail() -> None:
    raise ValueError("rank 1 could not read its batch")


def _pinned(client, fn, worker, *args):
    return client.submit(fn, *args, workers=[worker], allow_other_workers=False, pure=False)


@pytest.mark.slow
def test_a_failed_rank_ends_the_training_while_the_others_still_run(cluster_client, tmp_path):
    workers = sorted(cluster_workers(cluster_client))
    shards = plan_shards(workers, ["t0", "t1"], [])
    stop = tmp_path / "stop"
    futures = [_pinned(cluster_client, _sleep, workers[0], 60, str(stop)), _pinned(cluster_client, _fail, workers[1])]
    started = time.monotonic()
    try:
        with pytest.raises(ValueError, match="could not read its batch"):
            wait_for_ranks(cluster_client, futures, [s.worker for s in shards], "xgb", "training")
        assert time.monotonic() - started < 30
    finally:
        _free_workers(cluster_client, futures, stop)


@pytest.mark.slow
def test_a_lost_worker_fails_the_stage_naming_it(cluster_client, tmp_path):
    workers = sorted(cluster_workers(cluster_client))
    shards = plan_shards(workers, ["t0", "t1"], [])
    stop = tmp_path / "stop"
    futures = [_pinned(cluster_client, _sleep, w, 120, str(stop)) for w in workers]
    time.sleep(1)
    pid = cluster_client.run(os.getpid, workers=[workers[1]])[workers[1]]
    os.kill(pid, signal.SIGKILL)           # the nanny starts a new worker, at another address
    try:
        with pytest.raises(StageError) as info:
            wait_for_ranks(cluster_client, futures, [s.worker for s in shards], "xgb", "training")
        assert workers[1] in str(info.value) and info.value.stage == "xgb"
    finally:
        _free_workers(cluster_client, futures, stop)


def _free_workers(client, futures, stop) -> None:
    """End the sleeps and wait until no worker is busy with them (a worker the test killed is
    replaced by its nanny; the others must be free for the next test on this cluster)."""
    stop.touch()
    client.cancel(futures)
    deadline = time.monotonic() + 60
    while any(client.processing().values()) and time.monotonic() < deadline:
        time.sleep(0.2)


def test_external_memory_needs_features_written_as_parquet():
    """Library use: partitioned features built without an output folder have no files to stream."""
    import dask.dataframe as dd

    from pipeline.features.ops import Categorify, FillMissing
    from pipeline.stages import build_features, split_frame, train_model
    from tests.conftest import TELCO

    frame = dd.read_csv(str(TELCO), na_values=[" "], blocksize="256KiB")
    data = split_frame(frame, "Churn", positive="Yes", test=0.2, valid=0.1, seed=1)
    text = ["gender", "Partner", "Dependents", "PhoneService", "MultipleLines", "InternetService",
            "OnlineSecurity", "OnlineBackup", "DeviceProtection", "TechSupport", "StreamingTV",
            "StreamingMovies", "Contract", "PaperlessBilling", "PaymentMethod"]
    features = build_features(data, [FillMissing(columns=["TotalCharges"], strategy="mean"),
                                     Categorify(columns=text)], id_column="customerID")
    assert features.partitioned and features.parquet_dirs == {}
    with pytest.raises(DataError, match="cannot stream from Parquet"):
        train_model(features, "xgboost", external_memory=True)
