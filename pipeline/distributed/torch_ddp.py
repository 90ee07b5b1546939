"""Data-parallel training of the tabular MLP (PyTorch DDP): shards, ranks, and the one model.

The torch stage's ``distributed:`` runs the same training loop (``tensors.training.fit``) on
several ranks at once: as local processes (``processes: N``), or one per worker of the run's
Dask cluster, pinned there like the external-memory XGBoost ranks. gloo carries the
collectives on CPUs, NCCL on GPUs (one GPU per rank: local rank r on ``cuda:r``, a
LocalCUDACluster worker on the one device it sees).

- **Shards.** Rank r trains on every ``world``-th row of the training split from row r, and
  scores the same rows of the validation split: interleaved, so a table sorted by date or
  customer gives every rank the same mix. A shard crosses to its rank as a host array.
- **The same maths.** ``batch_size`` stays the rows of one optimizer step: each rank takes
  ``ceil(batch_size / world)`` of them and DDP averages the gradients, so two ranks train the
  model one process would, in the same number of steps per epoch.
- **Equal steps.** Every rank runs ``ceil(longest shard / rank batch)`` steps per epoch, a
  shorter shard wrapping around into a new permutation: ranks that ran different step counts
  would leave one waiting in an all-reduce that never comes.
- **One decision.** Validation outputs are gathered from every rank (AUC is not a mean of the
  shards' AUCs), rank 0 decides early stopping and broadcasts it, and rank 0 alone hands back
  its weights: those become the stage's model, scored and exported as any other.
- **Failures.** Collectives time out after ``distributed.timeout``; a rank that dies ends the
  stage at once naming its process or Dask worker (``local_ranks``, ``worker_ranks``).
"""

from __future__ import annotations

import logging
import math
import os
import tempfile
import uuid
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

import numpy as np
import torch

from pipeline.backends import Backend
from pipeline.distributed.local_ranks import run_local_ranks
from pipeline.core.errors import DataError, UsageError
from pipeline.tensors.handoff import Handoff
from pipeline.tensors.mlp import MLPArchitecture
from pipeline.tensors.objectives import Objective
from pipeline.tensors.fit_loop import FitOptions, Split

log = logging.getLogger("pipeline")
WHAT = "DDP training"
# Ranks that wait in a collective for longer than this fail (a peer is gone or stuck).
DEFAULT_TIMEOUT_SECONDS = 120.0


@dataclass(frozen=True)
class Placement:
    """Where the ranks run: ``local`` processes or the Dask cluster's workers, and how many."""

    launch: str                  # "local" | "cluster"
    processes: int | None        # None: one per GPU (local) or per worker (cluster)
    timeout: float = DEFAULT_TIMEOUT_SECONDS


@dataclass(frozen=True)
class ArraySplit:
    """One split of one rank's shard, as host arrays."""

    x: np.ndarray
    y: np.ndarray
    codes: np.ndarray | None = None

    @property
    def rows(self) -> int:
        return int(self.x.shape[0])

    def tensors(self, device: torch.device) -> Split:
        def move(array: np.ndarray | None) -> torch.Tensor | None:
            return None if array is None else torch.from_numpy(array).to(device)

        return Split(x=move(self.x), codes=move(self.codes), y=move(self.y))


@dataclass(frozen=True)
class ParquetSplit:
    """One split of one rank's shard as Parquet files of the featurized split, read by the rank
    itself onto its own device (data larger than one worker never passes through one)."""

    files: tuple[str, ...]
    rows: int
    features: tuple[str, ...]
    categorical: tuple[str, ...]
    target: str
    label_dtype: str
    backend: Backend

    def tensors(self, device: torch.device) -> Split:
        from pipeline.tensors.handoff import to_torch

        parts: list[tuple[torch.Tensor, ...]] = []
        for path in self.files:
            frame = self.backend.read(path, format="parquet", columns=[*self.features, self.target])
            arrays = [self.backend.to_matrix(frame, columns=list(self.features), dtype="float32"),
                      self.backend.to_vector(frame[self.target], dtype=self.label_dtype)]
            if self.categorical:
                arrays.append(self.backend.to_matrix(frame, columns=list(self.categorical), dtype="int64"))
            parts.append(tuple(to_torch(a, self.backend, path)[0].to(device) for a in arrays))
            del frame
        if not parts:       # no file of this split came to this rank: empty tensors of the right types
            empty = (np.empty((0, len(self.features)), "float32"), np.empty((0,), self.label_dtype),
                     np.empty((0, len(self.categorical)), "int64"))
            parts.append(tuple(torch.from_numpy(a).to(device) for a in empty[:3 if self.categorical else 2]))
        x, y, *codes = (torch.cat(column) if len(column) > 1 else column[0] for column in zip(*parts))
        return Split(x=x, y=y, codes=codes[0] if codes else None)


@dataclass(frozen=True)
class RankShard:
    rank: int
    train: ArraySplit | ParquetSplit
    valid: ArraySplit | ParquetSplit | None


@dataclass(frozen=True)
class RankJob:
    """What every rank is given alike: the network, the loop's options, where to meet."""

    world: int
    arch: MLPArchitecture
    objective: Objective
    options: FitOptions
    seed: int
    backend: str                 # "gloo" | "nccl"
    timeout: float
    rendezvous: tuple[str, ...]  # ("file", path) or ("tcp", host, port)
    threads: int | None = None   # torch threads per local CPU rank (the cores shared out)
    loopback: str | None = None  # local ranks: the interface gloo/NCCL sockets stay on


@dataclass
class RankResult:
    """Rank 0's hand-back: the weights, the fit record, bytes sent per rank. The weights travel
    as NumPy arrays: a tensor sent between processes is shared through a file descriptor that
    is gone once the rank's process has exited."""

    state: dict[str, np.ndarray]
    fit: dict[str, Any]
    gradient_bytes: int
    other_bytes: int


@dataclass
class DdpOutcome:
    state: dict[str, torch.Tensor]
    fit: dict[str, Any]
    facts: dict[str, Any]
    handoffs: list[Handoff] = field(default_factory=list)


# ----------------------------------------------------------------------------- parent side
def train_ddp(features: Any, arch: MLPArchitecture, options: FitOptions, *,
              placement: Placement, device: torch.device, stage: str, progress: Any = None) -> DdpOutcome:
    """Train ``arch`` on ``features`` (in memory, or partitioned as Parquet files) across ranks;
    rank 0's weights come back."""
    if placement.launch == "cluster":
        return _train_on_cluster(features, arch, options, placement=placement, device=device,
                                 stage=stage)
    shards, handoffs = plan_shards(features, local_world(placement, device))
    with tempfile.TemporaryDirectory(prefix="pipeline-ddp-") as folder:
        job = _job(arch, options, shards, device, placement, ("file", os.path.join(folder, "rendezvous")),
                   threads=max(1, (os.cpu_count() or 1) // len(shards)) if device.type == "cpu" else None,
                   loopback=loopback_interface())
        per_rank = [(job, shard, str(_local_device(device, shard.rank))) for shard in shards]
        result = run_local_ranks(train_rank, per_rank, stage=stage, progress=progress, what=WHAT)[0]
    return _outcome(result, job, shards, handoffs, {"launch": "local processes"})


def local_world(placement: Placement, device: torch.device) -> int:
    """How many local ranks: as asked, else one per visible GPU; at most one rank per GPU
    (NCCL cannot put two ranks on one device)."""
    if device.type == "cuda":
        gpus = torch.cuda.device_count()
        if not gpus:
            raise DataError(f"distributed training on cuda needs a GPU PyTorch can use, and torch {torch.__version__} "
                            "sees none; train on the CPU (device: cpu)")
        world = placement.processes or gpus
        if world > gpus:
            raise DataError(f"distributed.processes is {world}, but this machine has {gpus} visible GPU(s) and NCCL "
                            "needs one GPU per rank; lower processes, or train on the CPU (device: cpu)")
        return world
    if placement.processes is None:
        raise DataError("distributed: local ranks on the CPU need processes: N (how many processes to train in)")
    return placement.processes


def plan_shards(features: Any, world: int) -> tuple[list[RankShard], list[Handoff]]:
    """Each rank's shard: of the matrices in memory, or of the Parquet files of partitioned
    features (then at most one rank per training file); the hand-offs the shards copied."""
    if getattr(features, "partitioned", False):
        return _file_shards(features, world), []
    return _memory_shards(features, world)


def _memory_shards(features: Any, world: int) -> tuple[list[RankShard], list[Handoff]]:
    """Every ``world``-th row from row r for rank r, of the training and validation splits."""
    rows = features.rows()
    if rows["train"] < world:
        raise DataError(f"distributed training on {world} ranks needs at least {world} training rows; "
                        f"the training split has {rows['train']}")
    backend: Backend = features.backend
    shards, handoffs = [], []
    for rank in range(world):
        parts: dict[str, ArraySplit | None] = {"train": None, "valid": None}
        for split in parts:
            if split not in features.X or (split == "valid" and not rows.get("valid")):
                continue
            parts[split] = ArraySplit(
                x=_host(backend, features.X[split][rank::world], "float32"),
                y=_host(backend, features.y[split][rank::world]),
                codes=_host(backend, features.codes[split][rank::world], "int64")
                if features.categorical_columns else None)
            handoffs += _shard_handoffs(rank, split, parts[split])
        shards.append(RankShard(rank, parts["train"], parts["valid"]))
    return shards, handoffs


def _file_shards(features: Any, world: int) -> list[RankShard]:
    """The split's Parquet files dealt round-robin, one rank per training file at most; a rank
    may get no validation file (it then validates nothing and gathers the others')."""
    from pipeline.distributed.partition_files import partition_files

    folders = getattr(features, "parquet_dirs", {})
    if "train" not in folders:
        raise DataError("distributed training of partitioned features reads the features stage's Parquet files, and "
                        "these features were not written (run them through a features stage with a run folder)")
    train = partition_files(folders["train"])
    valid = partition_files(folders["valid"]) if features.rows().get("valid") and "valid" in folders else []
    if not train:
        raise DataError(f"the training split's folder {folders['train']} has no Parquet file with rows")
    if len(train) < world:
        log.warning("DDP training: the training split has %d Parquet file(s) with rows, so %d rank(s) instead of %d "
                    "(a rank reads whole files; more partitions allow more ranks)", len(train), len(train), world)
        world = len(train)

    def split(files: list[tuple[str, int]], rank: int) -> ParquetSplit:
        mine = files[rank::world]
        return ParquetSplit(files=tuple(path for path, _ in mine), rows=sum(n for _, n in mine),
                            features=tuple(features.feature_names), categorical=tuple(features.categorical_columns),
                            target=features.target, label_dtype=features.task.label_dtype, backend=features.backend)

    return [RankShard(rank, split(train, rank), split(valid, rank) if valid else None) for rank in range(world)]


def rank_options(options: FitOptions, shards: list[RankShard]) -> FitOptions:
    """The loop's options on each rank: its share of the step's rows, the same step count."""
    world = len(shards)
    batch = max(1, math.ceil(options.batch_size / world))
    steps = math.ceil(max(shard.train.rows for shard in shards) / batch)
    return replace(options, batch_size=batch, steps_per_epoch=steps)


def _job(arch: MLPArchitecture, options: FitOptions, shards: list[RankShard],
         device: torch.device, placement: Placement, rendezvous: tuple[str, ...], *, threads: int | None = None,
         loopback: str | None = None) -> RankJob:
    """What every rank is given: one rank per shard, the loop's options shared out."""
    world = len(shards)
    per_rank = rank_options(options, shards)
    if arch.batch_norm and per_rank.batch_size < 2:
        raise DataError(f"batch_norm needs at least 2 rows per rank and step; batch_size {options.batch_size} "
                        f"over {world} ranks leaves {per_rank.batch_size}: raise batch_size")
    return RankJob(world=world, arch=arch, objective=options.objective or Objective(), options=per_rank,
                   seed=options.seed, backend="nccl" if device.type == "cuda" else "gloo", timeout=placement.timeout,
                   rendezvous=rendezvous, threads=threads, loopback=loopback)


def _outcome(result: RankResult, job: RankJob, shards: list[RankShard], handoffs: list[Handoff],
             where: dict[str, Any]) -> DdpOutcome:
    epochs = max(1, len(result.fit["history"]))
    facts = {
        "ranks": job.world, **where, "backend": job.backend,
        "train_rows_per_rank": [shard.train.rows for shard in shards],
        **({"train_files_per_rank": [len(shard.train.files) for shard in shards]}
           if isinstance(shards[0].train, ParquetSplit) else {}),
        "batch_per_rank": job.options.batch_size, "steps_per_epoch": job.options.steps_per_epoch,
        "communication": {"gradient_bytes_per_epoch": result.gradient_bytes // epochs,
                          "other_bytes_per_epoch": result.other_bytes // epochs,
                          "note": "bytes each rank hands to its collectives (DDP's gradient all-reduce; the loss "
                                  "sums, validation gathers and stop decisions); a ring all-reduce sends about "
                                  "2(n-1)/n of that per rank"},
    }
    state = {key: torch.from_numpy(value) for key, value in result.state.items()}
    return DdpOutcome(state=state, fit=result.fit, facts=facts, handoffs=handoffs)


def _local_device(device: torch.device, rank: int) -> torch.device:
    return torch.device("cuda", rank) if device.type == "cuda" else torch.device("cpu")


def loopback_interface() -> str | None:
    """The name of the interface that holds 127.0.0.1 (``lo`` on Linux, ``lo0`` on macOS), so
    local ranks talk over it and never over a network the machine is on."""
    import psutil

    for name, addresses in psutil.net_if_addrs().items():
        if any(address.address == "127.0.0.1" for address in addresses):
            return name
    return None


def _host(backend: Backend, array: Any, dtype: str | None = None) -> np.ndarray:
    host = np.asarray(backend.to_host(array))
    return np.ascontiguousarray(host, dtype=dtype or host.dtype)


def _shard_handoffs(rank: int, split: str, part: ArraySplit) -> list[Handoff]:
    named = {"X": part.x, "y": part.y, "codes": part.codes}
    return [Handoff(name=f"rank{rank}:{split}.{key}", shape=tuple(int(n) for n in array.shape), dtype=str(array.dtype),
                    device="host", bytes_copied=int(array.nbytes), zero_copy=False,
                    note=f"rank {rank}'s shard (every n-th row from row {rank}), copied to the rank's process")
            for key, array in named.items() if array is not None]


# ----------------------------------------------------------------------------- rank side
def train_rank(rank: int, job: RankJob, shard: RankShard, device: str, *, progress: Any = None) -> RankResult | None:
    """One rank's training (a local process or a Dask task); rank 0 returns the weights."""
    import torch.distributed as dist

    from pipeline.tensors.ranks import GroupRanks
    from pipeline.tensors.fit_loop import fit

    where = torch.device(device)
    if where.type == "cuda":
        torch.cuda.set_device(where)
    if job.threads:
        torch.set_num_threads(job.threads)
    if job.loopback:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", job.loopback)
        os.environ.setdefault("NCCL_SOCKET_IFNAME", job.loopback)
    timeout = timedelta(seconds=job.timeout)
    dist.init_process_group(job.backend, store=_store(job, timeout), rank=rank, world_size=job.world,
                            timeout=timeout)
    try:
        ranks = GroupRanks()
        train = shard.train.tensors(where)
        valid = shard.valid.tensors(where) if shard.valid is not None else None
        with torch.random.fork_rng(devices=[where.index or 0] if where.type == "cuda" else []):
            torch.manual_seed(job.seed)            # the same initial weights on every rank
            module = job.arch.build()
            torch.manual_seed(job.seed + rank)     # each rank its own dropout masks
            result = fit(module, train, valid, job.options, device=where, progress=progress, ranks=ranks)
        if rank != 0:
            return None
        return RankResult(state={k: v.detach().cpu().numpy() for k, v in module.state_dict().items()},
                          fit=result.to_dict(), gradient_bytes=ranks.gradient_bytes, other_bytes=ranks.other_bytes)
    finally:
        dist.destroy_process_group()


def _store(job: RankJob, timeout: timedelta) -> Any:
    import torch.distributed as dist

    if job.rendezvous[0] == "file":
        return dist.FileStore(job.rendezvous[1], job.world)
    _, host, port = job.rendezvous
    return dist.TCPStore(host, int(port), is_master=False, timeout=timeout)


def train_rank_on_worker(rank: int, job: RankJob, shard: RankShard, stage: str) -> RankResult | None:
    """A rank as a Dask task: the worker's own device (dask-cuda gives each GPU worker one,
    visible as device 0) and its threads; rank 0's epoch lines go out as worker progress."""
    from distributed import get_worker

    from pipeline.distributed.worker_progress import WorkerProgress

    device = f"cuda:{torch.cuda.current_device()}" if job.backend == "nccl" else "cpu"
    threads = max(1, int(getattr(get_worker().state, "nthreads", 1)))
    return train_rank(rank, replace(job, threads=threads), shard, device,
                      progress=WorkerProgress(stage) if rank == 0 else None)


def _train_on_cluster(features: Any, arch: MLPArchitecture, options: FitOptions, *,
                      placement: Placement, device: torch.device, stage: str) -> DdpOutcome:
    from distributed import MultiLock

    from pipeline.backends import cluster_client
    from pipeline.distributed.worker_ranks import rendezvous_host, submit_pinned, wait_for_ranks, worker_slots

    with cluster_client() as client:
        workers = worker_slots(client, placement.processes, gpu=device.type == "cuda", what=WHAT)
        shards, handoffs = plan_shards(features, len(workers))
        workers = workers[:len(shards)]
        with MultiLock(workers, client):      # two trainings sharing a worker would wait on each other
            import torch.distributed as dist

            host = rendezvous_host(client)
            store = dist.TCPStore(host, 0, is_master=True, wait_for_workers=False,
                                  timeout=timedelta(seconds=placement.timeout))
            job = _job(arch, options, shards, device, placement, ("tcp", host, str(store.port)))
            futures = [submit_pinned(client, train_rank_on_worker, worker, shard.rank, job, shard, stage,
                                     key=f"ddp-{stage}-rank{shard.rank}-{uuid.uuid4().hex[:8]}")
                       for worker, shard in zip(workers, shards)]
            try:
                wait_for_ranks(client, futures, workers, stage, WHAT)
                result = futures[0].result()
            finally:
                client.cancel(futures)
                del store
    return _outcome(result, job, shards, handoffs, {"launch": "Dask workers", "workers": workers})


def check_placement(launch: str, in_cluster: bool) -> str:
    """``local`` or ``cluster`` for a ``launch`` of auto, local or cluster."""
    if launch == "auto":
        return "cluster" if in_cluster else "local"
    if launch == "cluster" and not in_cluster:
        raise UsageError("distributed.launch is cluster, but the run has no Dask cluster: add a cluster: section "
                         "(e.g. cluster: {n_workers: 2}), pass --scheduler ADDRESS, or use launch: local")
    return launch
