"""XGBoost on partitioned data larger than the workers' memory: external memory per worker.

``xgboost.dask`` hands each worker all of its training partitions in one task, so a worker
must hold its share of the feature matrix and XGBoost's quantised copy of it at once: at
three times the workers' memory that cannot fit. Here each worker instead reads its share of
the split's Parquet files one file at a time through a ``DataIter`` into an
``ExtMemQuantileDMatrix``: XGBoost sketches the quantiles over the batches, then keeps only
the quantised pages, cached under the worker's local directory, so a worker holds one
partition plus one-byte bin indices. The workers train together through XGBoost's collective
(a ``RabitTracker``, as xgboost.dask uses) and the booster is loaded into the same
``DaskXGBClassifier`` the in-memory path fits, so scoring and export do not change.

A worker lost during training fails the stage naming it (the ranks are tied to their workers,
so Dask cannot move one elsewhere); every task and cache file of the attempt is discarded.
"""

from __future__ import annotations

import shutil
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import xgboost

from pipeline.backends import Backend
from pipeline.backends.clusters.startup import cluster_workers
from pipeline.distributed.partition_files import parquet_files
from pipeline.distributed.worker_progress import WorkerProgress
from pipeline.distributed.worker_ranks import rendezvous_host, submit_pinned, wait_for_ranks
from pipeline.core.errors import DataError
from pipeline.usage.memory import release_freed_memory
from pipeline.core.problems import BINARY, Task

# How long a collective operation may wait for a peer before it fails (a lost worker).
_COLLECTIVE_TIMEOUT_SECONDS = 600


@dataclass(frozen=True)
class Shard:
    """The files one worker trains on, and its rank in XGBoost's collective."""

    rank: int
    worker: str
    train_files: tuple[str, ...]
    valid_files: tuple[str, ...]


@dataclass(frozen=True)
class BatchSource:
    """What a rank needs to read its batches: columns and the backend that reads them."""

    features: tuple[str, ...]
    target: str
    backend: Backend


def plan_shards(workers: Sequence[str], train_files: Sequence[str],
                valid_files: Sequence[str]) -> list[Shard]:
    """Deal the files round-robin to the workers; one rank per worker that gets files.

    Every rank needs at least one training file, and one validation file when there is a
    validation split (the collective evaluates on every rank), so there are at most as many
    ranks as the smaller of those file counts.
    """
    if not train_files:
        raise DataError("the training split has no Parquet files to train on")
    if not workers:
        raise DataError("the Dask cluster has no workers to train on")
    ranks = min(len(workers), len(train_files), len(valid_files) if valid_files else len(train_files))
    return [
        Shard(rank, worker, tuple(train_files[rank::ranks]),
              tuple(valid_files[rank::ranks]) if valid_files else ())
        for rank, worker in enumerate(sorted(workers)[:ranks])
    ]


class ParquetBatches(xgboost.DataIter):
    """One Parquet file per batch, read when XGBoost asks for it and released after."""

    def __init__(self, files: Sequence[str], source: BatchSource, cache_prefix: str) -> None:
        self._files = list(files)
        self._source = source
        self._next = 0
        super().__init__(cache_prefix=cache_prefix, release_data=True)

    def next(self, input_data: Any) -> bool:
        if self._next == len(self._files):
            return False
        source = self._source
        frame = source.backend.read(self._files[self._next], format="parquet",
                                    columns=[*source.features, source.target])
        input_data(data=frame[list(source.features)], label=frame[source.target])
        self._next += 1
        return True

    def reset(self) -> None:
        self._next = 0


def booster_params(estimator: Any, task: Task = BINARY) -> tuple[dict[str, Any], int, int | None]:
    """The native parameters, boosting rounds and early stopping of an XGBoost estimator.

    The objective follows the task as ``xgboost.dask``'s ``fit`` sets it, since ranks call
    ``xgboost.train`` directly: ``multi:softprob`` with one output per class of the task (not
    per class the training files happen to hold, so the scores have the task's columns); the
    estimator's own objective otherwise (``binary:logistic`` for a classifier,
    ``reg:squarederror`` for a regressor unless the user chose another).
    """
    params = {k: v for k, v in estimator.get_xgb_params().items() if v is not None}
    if task.kind == "multiclass":
        params.update(objective="multi:softprob", num_class=len(task.classes))
    else:
        params.setdefault("objective", "reg:squarederror" if task.kind == "regression" else "binary:logistic")
    return params, estimator.get_num_boosting_rounds(), estimator.early_stopping_rounds


class RoundReporter(xgboost.callback.TrainingCallback):
    """Rank 0's progress: a line at most every ``every`` seconds, and after the last round.

    Lines go out as the stage's worker progress events, which the client prints like the
    torch stage's epoch lines; outside a Dask worker they are dropped.
    """

    def __init__(self, stage: str, rounds: int, every: float = 15.0) -> None:
        self._progress = WorkerProgress(stage)
        self._rounds = rounds
        self._every = every
        self._started = self._last = time.monotonic()

    def message(self, text: str) -> None:
        self._progress.message(text)

    def after_iteration(self, model: Any, epoch: int, evals_log: dict[str, Any]) -> bool:
        now = time.monotonic()
        if now - self._last >= self._every or epoch + 1 == self._rounds:
            self._last = now
            metrics = " - ".join(f"{data}-{name}: {values[-1]:.4f}"
                                 for data, by_name in evals_log.items() for name, values in by_name.items())
            per_round = (now - self._started) / (epoch + 1)
            self.message(f"round {epoch + 1}/{self._rounds} - {per_round:.2f}s/round"
                         + (f" - {metrics}" if metrics else ""))
        return False


def train_rank(shard: Shard, source: BatchSource, params: dict[str, Any], rounds: int,
               early_stopping: int | None, tracker_args: dict[str, Any], stage: str = "train") -> bytes | None:
    """One worker's part of the training (a Dask task); rank 0 returns the model bytes."""
    from distributed import get_worker

    worker = get_worker()
    cache = Path(worker.local_directory) / f"xgboost-extmem-{uuid.uuid4().hex}"
    cache.mkdir(parents=True)
    threads = max(1, int(getattr(worker.state, "nthreads", 1)))
    local = {**params, "nthread": threads}
    local.pop("n_jobs", None)
    args = {**tracker_args, "dmlc_task_id": f"{shard.rank:06d}",
            "dmlc_timeout": _COLLECTIVE_TIMEOUT_SECONDS}
    try:
        with xgboost.collective.CommunicatorContext(**args), xgboost.config_context(**_global_config(local)):
            reporter = RoundReporter(stage, rounds) if shard.rank == 0 else None
            booster = _train_shard(shard, source, local, rounds, early_stopping, cache, reporter)
        return bytes(booster.save_raw("ubj")) if shard.rank == 0 else None
    finally:
        shutil.rmtree(cache, ignore_errors=True)
        release_freed_memory()        # the pages and gradients are freed; give the heap back


def _global_config(params: dict[str, Any]) -> dict[str, Any]:
    """XGBoost's global settings for a rank: its threads; on a GPU with an XGBoost built with RMM,
    RMM's allocator, so its device memory comes from the pool dask-cuda set up (``rmm_pool_size``).
    The PyPI build has no RMM and allocates beside the pool (the cluster leaves it room:
    ``backends.clusters.memory_plan.plan_gpu_memory``); the quantised pages live in host memory either way."""
    config: dict[str, Any] = {"nthread": params["nthread"]}
    if str(params.get("device", "cpu")).startswith("cuda") and xgboost.build_info().get("USE_RMM"):
        config["use_rmm"] = True
    return config


def _train_shard(shard: Shard, source: BatchSource, params: dict[str, Any], rounds: int,
                 early_stopping: int | None, cache: Path, reporter: RoundReporter | None) -> xgboost.Booster:
    """Build this rank's DMatrices and train; they (and their cache pages) go on return."""
    threads = params["nthread"]
    started = time.monotonic()
    train = xgboost.ExtMemQuantileDMatrix(
        ParquetBatches(shard.train_files, source, str(cache / "train")),
        max_bin=params.get("max_bin"), nthread=threads)
    evals = []
    if shard.valid_files:
        valid = xgboost.ExtMemQuantileDMatrix(
            ParquetBatches(shard.valid_files, source, str(cache / "valid")),
            ref=train, max_bin=params.get("max_bin"), nthread=threads)
        evals = [(valid, "validation_0")]
    if reporter is not None:
        reporter.message(f"rank 0 of {xgboost.collective.get_world_size()}: {train.num_row():,} training rows from "
                         f"{len(shard.train_files)} file(s) quantised in {time.monotonic() - started:.1f}s")
    return xgboost.train(params, train, num_boost_round=rounds, evals=evals,
                         early_stopping_rounds=early_stopping if evals else None, verbose_eval=False,
                         callbacks=[reporter] if reporter is not None else None)


def _start_tracker(ranks: int, host: str) -> dict[str, Any]:
    """A RabitTracker in this process for the ranks to meet at; returns their arguments."""
    from xgboost.tracker import RabitTracker

    tracker = RabitTracker(n_workers=ranks, host_ip=host, sortby="task",
                           timeout=_COLLECTIVE_TIMEOUT_SECONDS)
    tracker.start()
    threading.Thread(target=tracker.wait_for, daemon=True, name="xgboost-tracker").start()
    return dict(tracker.worker_args())


def fit_external_memory(estimator: Any, features: Any, client: Any, *, stage: str) -> dict[str, Any]:
    """Train ``estimator`` (a DaskXGBClassifier, or DaskXGBRegressor for regression) rank by rank
    on the workers, then load the model.

    Returns the plan for the manifest: the number of ranks and the training files per worker.
    """
    from distributed import MultiLock

    workers = sorted(cluster_workers(client))
    folders = features.parquet_dirs
    shards = plan_shards(workers, parquet_files(folders["train"]),
                         parquet_files(folders["valid"]) if features.rows().get("valid") else [])
    source = BatchSource(tuple(features.feature_names), features.target, features.backend)
    params, rounds, early_stopping = booster_params(estimator, getattr(features, "task", BINARY))
    used = [shard.worker for shard in shards]
    # Two trainings sharing a worker would each wait in the collective for the other's rank.
    with MultiLock(used, client):
        tracker_args = _start_tracker(len(shards), rendezvous_host(client))
        futures = [
            submit_pinned(client, train_rank, shard.worker, shard, source, params, rounds, early_stopping,
                          tracker_args, stage, key=f"xgboost-extmem-{stage}-rank{shard.rank}-{uuid.uuid4().hex[:8]}")
            for shard in shards
        ]
        try:
            wait_for_ranks(client, futures, used, stage, "external-memory XGBoost training")
            raw = futures[0].result()
        finally:
            client.cancel(futures)
    load_trained_model(estimator, raw)
    return {"ranks": len(shards), "train_files": {s.worker: len(s.train_files) for s in shards}}


def load_trained_model(estimator: Any, raw: bytes) -> None:
    """Load the ranks' model into ``estimator``, its booster on the estimator's device.

    XGBoost's ``load_model`` leaves the booster on the CPU whatever ``device`` the estimator
    was built with; a CPU booster given cuDF partitions (``inplace_predict``, xgboost.dask's
    predict) copies them to the host and predicts there.
    """
    estimator.load_model(bytearray(raw))
    device = estimator.get_params().get("device")
    if device:
        estimator.get_booster().set_param({"device": device})
