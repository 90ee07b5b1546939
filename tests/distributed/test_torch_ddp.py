"""Data-parallel training of the torch stage (PyTorch DDP) on the CPU with gloo: as local
processes and as ranks on a 2-worker LocalCluster, against one process; uneven shards; a rank
killed mid-training; the exported model scored by ``pipeline predict``. The same tests run on
a GPU machine, where NCCL carries the collectives (the ``gpu``-marked ones need it)."""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import psutil
import pytest
import yaml

from pipeline.backends import available_devices
from pipeline.backends.clusters.startup import cluster_workers
from pipeline.config import load_config
from pipeline.distributed.local_ranks import run_local_ranks
from pipeline.distributed.torch_ddp import (
    ArraySplit, RankJob, RankShard, check_placement, plan_shards, rank_options, train_rank,
)
from pipeline.core.errors import ConfigError, DataError, StageError, UsageError
from pipeline.stages import build_features, evaluate_models, load_table, split_frame
from pipeline.stages.torch_mlp import train_torch
from pipeline.tensors import TensorBatches
from pipeline.tensors.mlp import MLPArchitecture
from pipeline.tensors.objectives import Objective
from pipeline.tensors.fit_loop import FitOptions
from tests.conftest import CHURN_CATEGORICAL, TELCO, churn_ops
from tests.support.cli import run_cli

MLP = dict(hidden=[64, 32], epochs=20, batch_size=256, dropout=0.0)
ROOT = Path(__file__).resolve().parents[2]


# What churn_ops() reads, the target and the id: the columns every churn feature set here loads.
CHURN_COLUMNS = ["customerID", "Churn", "tenure", "MonthlyCharges", "TotalCharges", "gender", "Partner",
                 "Dependents", "PhoneService", "PaperlessBilling", *CHURN_CATEGORICAL]


def churn_features(device: str):
    """The churn features on ``device``'s backend, built one way for the CPU and the GPU tests, so
    the CPU run checks what the GPU-only tests build from (they are skipped without a GPU)."""
    from pipeline.backends import get_backend

    backend = get_backend(device)
    frame = load_table(TELCO, backend=backend, na_values=[" "], columns=CHURN_COLUMNS)
    data = split_frame(frame, "Churn", positive="Yes", test=0.2, valid=0.1, seed=42, backend=backend)
    return build_features(data, churn_ops(), id_column="customerID")


@pytest.fixture(scope="module")
def churn():
    return churn_features("cpu")


@pytest.fixture(scope="module")
def one_process(churn):
    return train_torch(churn, seed=1, **MLP)


def _auc(model) -> float:
    return evaluate_models([model]).metrics[model.name]["roc_auc"]


# ------------------------------------------------------------------ shards and steps
def test_a_short_shard_wraps_around_to_run_as_many_full_batches_as_the_longest():
    long_rows, short_rows, batch = 1000, 130, 64
    steps = -(-long_rows // batch)
    counts = []
    for rows in (long_rows, short_rows):
        batches = TensorBatches([__import__("torch").arange(rows)], batch, steps=steps)
        seen = [b[0] for b in batches]
        counts.append(len(seen))
        assert len(batches) == steps and all(len(b) == batch for b in seen)
        drawn = np.concatenate([b.numpy() for b in seen])
        assert set(drawn.tolist()) == set(range(rows))       # every row of the shard is drawn
    assert counts[0] == counts[1] == steps


def test_shards_interleave_the_rows_and_share_out_each_steps_rows(churn):
    shards, handoffs = plan_shards(churn, 3)
    train = churn.backend.to_host(churn.X["train"])
    assert [s.train.rows for s in shards] == [len(train[r::3]) for r in range(3)]
    np.testing.assert_array_equal(shards[1].train.x, train[1::3])
    assert all(s.valid is not None and s.valid.codes is not None for s in shards)
    assert {h.name for h in handoffs} >= {"rank2:train.X", "rank0:valid.codes"}
    assert all(h.bytes_copied > 0 and not h.zero_copy for h in handoffs)
    options = rank_options(FitOptions(batch_size=256), shards)
    assert options.batch_size == 86 and options.steps_per_epoch == -(-shards[0].train.rows // 86)


def test_more_ranks_than_training_rows_is_refused(churn):
    tiny = dataclasses.replace(churn, X={"train": churn.X["train"][:2]}, y={"train": churn.y["train"][:2]},
                               codes={"train": churn.codes["train"][:2]})
    with pytest.raises(DataError, match="at least 3 training rows"):
        plan_shards(tiny, 3)


def test_parquet_files_are_dealt_round_robin_and_bound_the_rank_count(tmp_path, caplog):
    from types import SimpleNamespace

    from pipeline.backends import get_backend
    from pipeline.core.problems import BINARY

    folders = {}
    for split, sizes in (("train", [50, 10, 0, 30]), ("valid", [5])):
        folders[split] = tmp_path / split
        folders[split].mkdir()
        for i, n in enumerate(sizes):
            pd.DataFrame({"a": np.arange(n, dtype="float32"), "y": np.zeros(n, "int8")}).to_parquet(
                folders[split] / f"part.{i}.parquet")
    features = SimpleNamespace(partitioned=True, parquet_dirs={k: str(v) for k, v in folders.items()},
                               rows=lambda: {"train": 90, "valid": 5}, feature_names=["a"], categorical_columns=[],
                               target="y", task=BINARY, backend=get_backend("cpu"))
    shards, handoffs = plan_shards(features, 2)
    assert handoffs == [] and [s.train.rows for s in shards] == [50 + 30, 10]       # the empty file is not dealt
    assert [len(s.valid.files) for s in shards] == [1, 0]
    assert rank_options(FitOptions(batch_size=20), shards).steps_per_epoch == 8     # 80 rows / 10 per rank
    empty = shards[1].valid.tensors(__import__("torch").device("cpu"))
    assert empty.rows == 0 and str(empty.y.dtype) == f"torch.{BINARY.label_dtype}"    # as the other ranks read it
    with caplog.at_level("WARNING", logger="pipeline"):
        assert len(plan_shards(features, 5)[0]) == 3
    assert "3 rank(s) instead of 5" in caplog.text


# ------------------------------------------------------------------ config
def _torch_config(tmp_path: Path, distributed) -> Path:
    config = {"name": "ddp", "stages": {
        "raw": {"kind": "load", "path": str(TELCO)},
        "split": {"kind": "split", "inputs": ["raw"], "target": "Churn", "positive": "Yes"},
        "features": {"kind": "features", "inputs": ["split"], "ops": [{"drop": {"columns": ["customerID"]}}]},
        "mlp": {"kind": "torch", "inputs": ["features"], "distributed": distributed}}}
    path = tmp_path / "ddp.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_distributed_config_takes_a_duration_and_refuses_nonsense(tmp_path):
    config = load_config(_torch_config(tmp_path, {"processes": 2, "timeout": "2m"}))
    assert config.stages["mlp"].distributed.timeout == 120 and config.stages["mlp"].distributed.processes == 2
    for bad, words in (({"processes": 0}, "processes"), ({"timeout": "soon"}, "duration"),
                       ({"ranks": 2}, "ranks"), ({"launch": "cloud"}, "launch")):
        with pytest.raises(ConfigError, match=words):
            load_config(_torch_config(tmp_path, bad))


def test_launch_cluster_without_a_cluster_says_how_to_get_one():
    assert check_placement("auto", False) == "local" and check_placement("auto", True) == "cluster"
    with pytest.raises(UsageError, match="cluster:"):
        check_placement("cluster", False)


def test_local_ranks_on_the_cpu_need_a_process_count(churn):
    with pytest.raises(DataError, match="processes: N"):
        train_torch(churn, seed=1, distributed={"launch": "local"}, **MLP)


# ------------------------------------------------------------------ acceptance: equal to one process
@pytest.mark.slow
def test_two_local_ranks_train_the_churn_mlp_to_the_auc_of_one_process(churn, one_process):
    two = train_torch(churn, seed=1, distributed={"processes": 2, "launch": "local"}, **MLP)
    assert abs(_auc(two) - _auc(one_process)) <= 0.01
    facts = two.distributed
    assert facts["ranks"] == 2 and facts["launch"] == "local processes" and facts["backend"] == "gloo"
    n_params = sum(p.numel() for p in two.estimator.module.parameters())
    # DDP all-reduces every gradient once a step: 4 bytes per parameter per step.
    assert facts["communication"]["gradient_bytes_per_epoch"] == 4 * n_params * facts["steps_per_epoch"]
    assert two.fit_result["best_epoch"] >= 1 and len(two.history) >= 1
    assert two.scores["test"].shape == one_process.scores["test"].shape


@pytest.mark.slow
def test_two_ranks_on_a_two_worker_local_cluster_match_one_process(churn, one_process, cluster_client):
    two = train_torch(churn, seed=1, distributed={"launch": "cluster"}, **MLP)     # one rank per worker
    assert abs(_auc(two) - _auc(one_process)) <= 0.01
    assert two.distributed["launch"] == "Dask workers"
    assert two.distributed["workers"] == sorted(cluster_workers(cluster_client))


# ------------------------------------------------------------------ uneven shards
class CountingProgress:
    def __init__(self) -> None:
        self.totals: list[int] = []
        self.steps = 0

    def message(self, text: str) -> None:
        pass

    def bar(self, total: int, description: str):
        import contextlib

        self.totals.append(total)

        def advance(n: int) -> None:
            self.steps += n

        return contextlib.nullcontext(advance)


def _counted_rank(rank: int, job: RankJob, shard: RankShard, *, progress=None) -> tuple[list[int], int]:
    counter = CountingProgress()
    train_rank(rank, job, shard, "cpu", progress=counter)
    return counter.totals, counter.steps


def _shard(rank: int, rows: int, rng: np.random.Generator) -> RankShard:
    x = rng.normal(size=(rows, 4)).astype("float32")
    y = (x[:, 0] + rng.normal(scale=0.5, size=rows) > 0).astype("int8")
    return RankShard(rank, ArraySplit(x=x, y=y), ArraySplit(x=x[:20], y=y[:20]))


@pytest.mark.slow
def test_ranks_with_uneven_shards_run_the_same_number_of_batches(tmp_path):
    rng = np.random.default_rng(0)
    shards = [_shard(0, 700, rng), _shard(1, 150, rng)]
    options = rank_options(FitOptions(epochs=3, batch_size=64, patience=10), shards)
    job = RankJob(world=2, arch=MLPArchitecture(n_features=4, continuous_index=[0, 1, 2, 3], hidden=[8]),
                  objective=Objective(), options=options, seed=0, backend="gloo", timeout=60,
                  rendezvous=("file", str(tmp_path / "rendezvous")), threads=1)
    results = run_local_ranks(_counted_rank, [(job, shard) for shard in shards], stage="uneven")
    (totals0, steps0), (totals1, steps1) = results
    assert totals0 == totals1 == [options.steps_per_epoch] * 3
    assert steps0 == steps1 == 3 * options.steps_per_epoch == 3 * 22


# ------------------------------------------------------------------ a rank that dies
def _spawned(besides: set[int] = frozenset()) -> list[psutil.Process]:
    """This process's rank-like processes (oldest first) other than ``besides`` (a Dask cluster's
    worker processes are such processes too): spawned children, or forks of the forkserver
    (the server itself is this process's child; what it forks are its own)."""
    def started_here(p: psutil.Process) -> bool:
        command = " ".join(p.cmdline())
        return "spawn_main" in command or ("multiprocessing.forkserver" in command and p.ppid() != os.getpid())

    children = psutil.Process().children(recursive=True)
    return sorted((p for p in children if p.pid not in besides and started_here(p)), key=lambda p: p.create_time())


class KillAfterFirstEpoch:
    """Kills the newest rank process (rank 1) when rank 0 reports its first epoch."""

    def __init__(self) -> None:
        self.killed: tuple[int, float] | None = None
        self.before = {p.pid for p in _spawned()}

    def message(self, text: str) -> None:
        if self.killed is None and text.startswith("Epoch 1/"):
            victim = _spawned(self.before)[-1]
            victim.send_signal(signal.SIGKILL)
            self.killed = (victim.pid, time.monotonic())

    def bar(self, total, description):
        import contextlib

        return contextlib.nullcontext(lambda n: None)


@pytest.mark.slow
def test_a_killed_local_rank_ends_the_stage_within_the_timeout_naming_it(churn):
    progress = KillAfterFirstEpoch()
    timeout = 60
    with pytest.raises(StageError) as info:
        train_torch(churn, seed=1, progress=progress, distributed={"processes": 2, "launch": "local", "timeout": timeout},
                    **{**MLP, "epochs": 500, "batch_size": 32, "early_stopping": {"patience": 500}})
    assert progress.killed is not None
    pid, killed_at = progress.killed
    assert time.monotonic() - killed_at < timeout
    assert f"local process {pid}" in str(info.value) and "SIGKILL" in str(info.value)
    assert not [p for p in _spawned(progress.before) if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


@pytest.mark.slow
def test_a_lost_worker_ends_the_cluster_training_naming_it(churn, cluster_client):
    workers = sorted(cluster_workers(cluster_client))
    outcome: dict[str, BaseException] = {}

    def train() -> None:
        try:
            train_torch(churn, seed=1, distributed={"launch": "cluster", "timeout": 60},
                        **{**MLP, "epochs": 500, "batch_size": 32, "early_stopping": {"patience": 500}})
        except BaseException as exc:   # noqa: BLE001 - the test looks at it below
            outcome["error"] = exc

    thread = threading.Thread(target=train)
    thread.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not _ranks_running(cluster_client, workers):
        time.sleep(0.2)
    time.sleep(2)                                  # into the training, past the rendezvous
    pid = cluster_client.run(os.getpid, workers=[workers[1]])[workers[1]]
    os.kill(pid, signal.SIGKILL)
    killed_at = time.monotonic()
    thread.join(90)
    try:
        assert not thread.is_alive()
        assert time.monotonic() - killed_at < 60
        error = outcome.get("error")
        assert isinstance(error, StageError) and workers[1] in str(error)
    finally:
        cluster_client.wait_for_workers(2, timeout=60)
        _wait_until_idle(cluster_client)


def _ranks_running(client, workers) -> bool:
    processing = client.processing()
    return all(any(str(key).startswith("ddp-") for key in processing.get(w, ())) for w in workers)


def _wait_until_idle(client) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and any(client.processing().values()):
        time.sleep(0.2)


# ------------------------------------------------------------------ mixed precision and compile
@pytest.mark.slow
def test_bf16_autocast_and_compile_train_under_ddp(churn):
    trained = train_torch(churn, seed=1, distributed={"processes": 2, "launch": "local"}, precision="bf16", compile=True,
                          **{**MLP, "epochs": 2})
    assert trained.fit_result["precision"] == "bf16" and trained.fit_result["compiled"]
    assert np.isfinite([row["loss"] for row in trained.history]).all()


@pytest.mark.slow
def test_fp16_autocast_trains_under_ddp_with_a_gradient_scaler(churn):
    trained = train_torch(churn, seed=1, distributed={"processes": 2, "launch": "local"}, precision="fp16",
                          **{**MLP, "epochs": 3})
    assert trained.fit_result["precision"] == "fp16"
    assert np.isfinite([row["loss"] for row in trained.history]).all() and _auc(trained) > 0.7


@pytest.mark.gpu
@pytest.mark.skipif("gpu" not in available_devices(), reason="needs a GPU")
def test_nccl_ranks_train_on_the_gpus():
    import torch

    features = churn_features("gpu")
    assert features.backend.name == "gpu"
    ranks = min(2, torch.cuda.device_count())
    trained = train_torch(features, seed=1, distributed={"processes": ranks}, **MLP)
    assert trained.distributed["backend"] == "nccl" and trained.distributed["ranks"] == ranks
    assert trained.fit_result["device"].startswith("cuda") and _auc(trained) > 0.8


# ------------------------------------------------------------------ end to end: run, export, predict
@pytest.mark.slow
def test_a_ddp_trained_model_is_exported_and_scored_by_predict(tmp_path):
    config = yaml.safe_load((ROOT / "configs" / "churn.yaml").read_text())
    stages = config["stages"]
    stages["raw"]["path"] = str(ROOT / stages["raw"]["path"])
    stages["mlp"].update(distributed={"processes": 2}, epochs=8)
    for name in [n for n, s in stages.items() if s["kind"] == "train"]:
        del stages[name]
    stages["evaluate"]["inputs"] = stages["export"]["inputs"] = ["mlp"]
    path = tmp_path / "ddp.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    # In process, as the library runs it: the stage starts its ranks as processes either way.
    env = {"PIPELINE_REPORT": "on"}
    run = run_cli("run", str(path), "--runs-dir", str(tmp_path / "runs"), cwd=tmp_path, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    run_dir = next((tmp_path / "runs" / config["name"]).iterdir())
    manifest = yaml.safe_load((run_dir / "manifest.json").read_text())
    facts = manifest["stages"]["mlp"]["facts"]["distributed"]
    assert facts["ranks"] == 2 and facts["launch"] == "local processes"
    assert "Trained data-parallel on 2 ranks (local processes, gloo)" in (run_dir / "report.html").read_text()
    rows = pd.read_csv(TELCO).head(200)
    rows.to_csv(tmp_path / "new.csv", index=False)
    scored = run_cli("predict", "--run", "latest", "--runs-dir", str(tmp_path / "runs"), "--pipeline", config["name"],
                     "--input", str(tmp_path / "new.csv"), "--output", str(tmp_path / "scores.csv"), cwd=tmp_path)
    assert scored.returncode == 0, scored.stderr[-3000:]
    scores = pd.read_csv(tmp_path / "scores.csv")
    assert len(scores) == 200 and scores.filter(like="score").iloc[:, 0].between(0, 1).all()


def test_cluster_ranks_go_to_the_workers_that_advertise_a_gpu_first():
    """On GPUs, ranks are placed on the workers with the GPU resource (as LocalCUDACluster's
    workers advertise it), in address order; without such workers, on every worker."""
    from distributed import Client, Scheduler, SpecCluster, Worker

    from pipeline.distributed.worker_ranks import worker_slots

    local = {"nthreads": 1, "host": "127.0.0.1"}
    workers = {"plain": {"cls": Worker, "options": local},
               "gpu": {"cls": Worker, "options": {**local, "resources": {"GPU": 1}}}}
    scheduler = {"cls": Scheduler, "options": {"host": "127.0.0.1", "dashboard_address": None}}
    with SpecCluster(scheduler=scheduler, workers=workers) as cluster, \
            Client(cluster, set_as_default=False) as client:
        client.wait_for_workers(2)
        info = client.scheduler_info()["workers"]
        gpu = next(address for address, w in info.items() if w.get("resources"))
        assert worker_slots(client, None, gpu=True, what="t") == [gpu]
        assert worker_slots(client, None, gpu=False, what="t") == sorted(info)
        with pytest.raises(DataError, match="has 2 worker"):
            worker_slots(client, 3, gpu=False, what="DDP training")


@pytest.mark.slow
def test_ranks_read_their_own_parquet_files_of_partitioned_features(in_project):
    """Partitioned features: each rank reads its share of the features stage's Parquet files
    (uneven: files differ in rows) and runs as many steps as the others; the MLP then scores
    every partition where it lies and is evaluated and exported with the rest."""
    from pipeline import run_pipeline

    config = (in_project / "configs" / "churn_partitioned.yaml").read_text() + (
        "  mlp: {kind: torch, inputs: [features], epochs: 4, distributed: {}}\n")
    config = config.replace("inputs: [xgb]", "inputs: [xgb, mlp]")
    (in_project / "configs" / "nn.yaml").write_text(config)
    # Ten trees: the booster beside the MLP is not what this checks (300 take most of the run).
    result = run_pipeline("configs/nn.yaml", overrides=["stages.xgb.params.n_estimators=10"])
    facts = result.manifest.stages["mlp"].facts["distributed"]
    assert facts["ranks"] == 2 and facts["launch"] == "Dask workers"
    assert sum(facts["train_files_per_rank"]) == len(list((result.run_dir / "features").rglob("train/*.parquet")))
    rows = facts["train_rows_per_rank"]
    assert sum(rows) == result.outputs["features"].rows()["train"]
    assert facts["steps_per_epoch"] == -(-max(rows) // facts["batch_per_rank"])
    assert 0.5 < result.manifest.metrics["models"]["mlp"]["roc_auc"] <= 1
    assert (result.run_dir / "export" / "models" / "mlp" / "model.pt").exists()
