"""GPU workers' memory, sized for XGBoost, which trains on them (``xgboost.dask`` or external
memory): its PyPI build has no RMM, so it allocates device memory beside a ``rmm_pool_size``
pool rather than from it, and external memory keeps its quantised pages in host memory
(``on_host``), which counts against the worker's ``memory_limit``. ``plan_gpu_memory`` caps
the pool's growth to leave XGBoost a share of the device, spills device data before the pool
is full, and says when the configured sizes leave XGBoost too little room."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("pipeline")

# Share of each GPU kept outside the RMM pool for XGBoost's own allocations: its gradients,
# histograms and prediction cache, and with external memory the pages it copies in from the
# host cache (concatenated to about 1/16 of the device each, a few in flight).
XGBOOST_DEVICE_SHARE = 0.25
# dask-cuda's default spill threshold is 80% of the device; with a capped pool, 80% of the cap.
DEVICE_SPILL_SHARE = 0.8
# Dask's nanny stops a worker whose process memory passes this share of its memory_limit
# (distributed.worker.memory.terminate); XGBoost's host cache is process memory Dask cannot spill.
TERMINATE_SHARE = 0.95
# Host memory a GPU worker process takes besides data: interpreter, libraries, CUDA's host side.
WORKER_BASE_BYTES = 2 * 2**30
# External memory is for a training share larger than the GPU; its quantised pages take about
# one byte per float32 value, so a rank's host cache is then at least this share of the device.
EXTMEM_CACHE_DEVICE_SHARE = 0.25



@dataclass(frozen=True)
class MachineMemory:
    """What the GPU workers can have: the smallest of their GPUs, the host's memory (its cgroup
    limit where lower) and how many GPUs they may use (one worker each)."""

    device_bytes: int
    host_bytes: int
    gpus: int


@dataclass(frozen=True)
class GpuMemoryPlan:
    """Per-worker memory sizes (bytes) for a LocalCUDACluster on which XGBoost trains."""

    workers: int
    device_bytes: int
    rmm_pool_size: int | None = None              # as configured
    rmm_maximum_pool_size: int | None = None      # the pool's cap: it never grows into XGBoost's room
    device_memory_limit: int | None = None        # spill threshold set here (None: as configured)
    xgboost_device_room: int | None = None        # device memory the pool leaves XGBoost
    memory_limit: int | None = None               # host limit (None: unlimited)
    host_cache_room: int | None = None            # host memory left for external memory's pages
    warnings: tuple[str, ...] = ()

    def cluster_options(self) -> dict[str, Any]:
        """The ``LocalCUDACluster`` arguments the plan sets (the rest come from the config)."""
        options = {"rmm_maximum_pool_size": self.rmm_maximum_pool_size,
                   "device_memory_limit": self.device_memory_limit}
        return {k: v for k, v in options.items() if v is not None}

    def facts(self) -> dict[str, Any]:
        """For the run record: the sizes, and the warnings given."""
        return {k: v for k, v in vars(self).items() if k != "warnings" and v is not None} | \
            {"warnings": list(self.warnings)}


def plan_gpu_memory(config: Any, machine: MachineMemory, *, xgboost_on_workers: bool = True) -> GpuMemoryPlan:
    """Size the RMM pool, the device spill threshold and check the host limit of GPU workers.

    ``config`` is the cluster config (``rmm_pool_size``, ``device_memory_limit``,
    ``memory_limit``, ``n_workers``). With a pool and XGBoost on the workers, the pool may grow
    only to ``1 - XGBOOST_DEVICE_SHARE`` of the device (XGBoost allocates beside it), or not at
    all past a larger configured size, which is kept but warned about; device data then spills
    to host at ``DEVICE_SPILL_SHARE`` of that cap rather than of the device. On the host, the
    warnings say when the limits leave external memory's cache too little room. A pure function
    of its arguments, so the sizing is tested without a GPU.
    """
    device = machine.device_bytes
    workers = max(1, int(config.n_workers or machine.gpus or 1))
    pool = _device_size(config.rmm_pool_size, device)
    device_sizes, device_notes = ({}, []) if not (pool and xgboost_on_workers) else \
        _cap_pool_for_xgboost(pool, _device_size(config.device_memory_limit, device), device)
    host_sizes, host_notes = _check_host_room(config.memory_limit, machine, workers,
                                              xgboost_on_workers=xgboost_on_workers)
    return GpuMemoryPlan(workers=workers, device_bytes=device, rmm_pool_size=pool or None, **device_sizes,
                         **host_sizes, warnings=tuple(device_notes + host_notes))


def _cap_pool_for_xgboost(pool: int, spill: int | None, device: int) -> tuple[dict[str, int | None], list[str]]:
    """The pool's cap, XGBoost's room beside it and the spill threshold under the cap."""
    notes = []
    cap = _aligned(device * (1 - XGBOOST_DEVICE_SHARE))
    if pool > cap:
        notes.append(
            f"cluster.rmm_pool_size {_size(pool)} leaves XGBoost {_size(max(device - pool, 0))} of the "
            f"{_size(device)} GPU: XGBoost's PyPI build has no RMM and allocates beside the pool, so training "
            f"on the workers may run out of device memory; set rmm_pool_size to at most {_size(cap)}")
        cap = pool
    threshold = _aligned(cap * DEVICE_SPILL_SHARE) if spill is None else None     # else as configured
    if spill and spill > cap:
        notes.append(f"cluster.device_memory_limit {_size(spill)} is above the RMM pool's cap "
                     f"{_size(cap)}: device data spills to host at the cap instead")
        threshold = cap
    return {"rmm_maximum_pool_size": cap, "device_memory_limit": threshold,
            "xgboost_device_room": max(device - cap, 0)}, notes


def _check_host_room(memory_limit: Any, machine: MachineMemory, workers: int, *,
                     xgboost_on_workers: bool) -> tuple[dict[str, int | None], list[str]]:
    """The host limit per worker and the room it leaves external memory's host cache."""
    notes = []
    limit = _host_size(memory_limit, machine.host_bytes, workers)
    if limit and _explicit(memory_limit) and limit * workers > machine.host_bytes:
        notes.append(f"cluster.memory_limit {_size(limit)} x {workers} workers is more than the machine's "
                     f"{_size(machine.host_bytes)}: spilled device data and XGBoost's external-memory cache "
                     "can exhaust host memory before Dask steps in")
    room = None
    if limit and xgboost_on_workers:
        room = max(int(limit * TERMINATE_SHARE) - WORKER_BASE_BYTES, 0)
        wanted = int(machine.device_bytes * EXTMEM_CACHE_DEVICE_SHARE)
        if room < wanted:
            notes.append(
                f"each GPU worker has about {_size(room)} of host memory under its memory limit "
                f"({_size(limit)}) for XGBoost's external-memory cache, which lives in host memory on GPUs; "
                f"a training share too large for the {_size(machine.device_bytes)} GPU needs at least "
                f"{_size(wanted)} (Dask stops a worker past 95% of its limit): raise cluster.memory_limit, "
                "use fewer workers, or train in memory (external_memory: false)")
    return {"memory_limit": limit, "host_cache_room": room}, notes


def gpu_memory_plan_here(config: Any) -> GpuMemoryPlan | None:
    """``plan_gpu_memory`` for this machine's GPUs (through NVML, no CUDA context) and memory;
    its warnings go to the log. None where NVML cannot say (the cluster starts unsized)."""
    machine = machine_memory(config)
    if machine is None:
        return None
    plan = plan_gpu_memory(config, machine)
    for note in plan.warnings:
        log.warning("cluster: %s", note)
    return plan


def machine_memory(config: Any) -> MachineMemory | None:
    """The memory of the GPUs the workers will use (``CUDA_VISIBLE_DEVICES``, the first
    ``n_workers`` of them) and of the host."""
    from distributed.system import MEMORY_LIMIT

    from pipeline.backends.devices.detect import probe_nvml

    devices = probe_nvml().devices
    visible = _visible_indices(config.CUDA_VISIBLE_DEVICES
                               if config.CUDA_VISIBLE_DEVICES is not None
                               else os.environ.get("CUDA_VISIBLE_DEVICES"))
    if visible is not None:
        devices = [d for i in visible for d in devices if d.index == i]
    if config.n_workers:
        devices = devices[:config.n_workers]
    if not devices:
        return None
    return MachineMemory(device_bytes=min(d.memory_total for d in devices), host_bytes=int(MEMORY_LIMIT),
                         gpus=len(devices))


def _visible_indices(value: Any) -> list[int] | None:
    """GPU indices from a CUDA_VISIBLE_DEVICES value; None for all (or for UUIDs, which NVML
    indices do not name: then the smallest of all GPUs is used)."""
    if value is None or value == "":
        return None
    items = value if isinstance(value, list) else str(value).split(",")
    try:
        return [int(str(item).strip()) for item in items]
    except ValueError:
        return None


def _device_size(value: Any, device: int) -> int | None:
    """Bytes of a device size as dask-cuda reads it: bytes, a size ("24GB") or a fraction of
    the device (0.5 or "0.5", but 1 and "1" are one byte); "default" and None are unset, 0 is
    set to nothing (no spilling)."""
    if value is None or value == "default":
        return None
    if value == "auto":
        return device
    share = _fraction(value) if isinstance(value, float) or value not in (1, "1") else None
    if share is not None:
        return int(share * device)
    return int(_parse_bytes(value)) if isinstance(value, str) else int(value)


def _host_size(value: Any, host: int, workers: int) -> int | None:
    """Per-worker host limit as Dask reads it: "auto" is the host's share per worker, a number
    up to 1 a share of the host, more than the host is the host; None or 0 is no limit."""
    if value is None:
        return None
    if value == "auto":
        return host // workers
    share = _fraction(value)
    size = int(share * host) if share is not None else (
        int(_parse_bytes(value)) if isinstance(value, str) else int(value))
    return min(size, host) or None


def _explicit(value: Any) -> bool:
    return value not in (None, "auto")


def _fraction(value: Any) -> float | None:
    """``value`` as a share in (0, 1], or None when it is a size."""
    try:
        share = float(value)
    except (TypeError, ValueError):
        return None
    return share if 0 < share <= 1 else None


def _parse_bytes(text: str) -> int:
    from dask.utils import parse_bytes

    return int(parse_bytes(text))


def _aligned(value: float) -> int:
    """Bytes rounded down to RMM's 256-byte alignment."""
    return int(value) // 256 * 256


def _size(value: int) -> str:
    from dask.utils import format_bytes

    return format_bytes(value)
