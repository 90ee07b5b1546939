"""Dask clusters: start a local one (LocalCluster on CPU, LocalCUDACluster on GPU) or connect
to an existing scheduler, and close only what was started here.

The only module that imports ``dask_cuda``. The parent process never creates a CUDA context:
that would break LocalCUDACluster's worker start (device detection uses NVML).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from pipeline.errors import ClusterUnavailable

GPU_RESOURCE = "GPU"


@dataclass
class ClusterSession:
    """A connected client and, when this run started it, the cluster to close afterwards."""

    client: Any
    cluster: Any = None                     # None: an existing cluster, never closed here
    description: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def owned(self) -> bool:
        return self.cluster is not None

    def gpu_resources(self) -> bool:
        """Whether workers advertise a GPU resource (training stages then take one each)."""
        workers = cluster_workers(self.client)
        return any(GPU_RESOURCE in (w.get("resources") or {}) for w in workers.values())

    def close(self) -> None:
        try:
            self.client.close()
        finally:
            if self.cluster is not None:
                self.cluster.close()


def cluster_workers(client: Any) -> dict[str, dict[str, Any]]:
    """The scheduler's workers now, by address, asked of the scheduler itself.

    Not ``client.scheduler_info()``: that returns a cached identity which the client's
    periodic refresh overwrites with one that lists no workers, so read at the wrong moment
    it reports live workers as gone (65 of 200 reads in a test).
    """
    return dict(client.sync(client.scheduler.identity, n_workers=-1).get("workers", {}))


def open_cluster(config: Any, device: str) -> ClusterSession:
    """Connect to ``config.address``, or start a local cluster for ``device`` ("cpu" | "gpu")."""
    from distributed import Client

    # distributed sets its loggers to INFO when imported; a run's log keeps only its warnings.
    for name in ("distributed", "distributed.scheduler", "distributed.nanny", "distributed.worker",
                 "distributed.core", "distributed.http.proxy"):
        logging.getLogger(name).setLevel(logging.WARNING)
    # P2P shuffles (value_counts of the feature ops) report every start and stop as a warning.
    logging.getLogger("distributed.shuffle").setLevel(logging.ERROR)
    if config.address:
        try:
            client = Client(config.address, timeout=f"{config.connect_timeout}s", set_as_default=False)
        except (OSError, TimeoutError) as exc:
            raise ClusterUnavailable(
                f"cannot reach the Dask scheduler at {config.address} within {config.connect_timeout:g} s "
                f"({type(exc).__name__}: {exc}); start it with `dask scheduler` or fix cluster.address"
            ) from None
        workers = len(cluster_workers(client))
        return ClusterSession(client, None, f"existing cluster at {config.address} ({workers} worker(s))",
                              {"address": config.address, "workers": workers, "started_here": False})
    try:
        cluster = _local_cuda_cluster(config) if device == "gpu" else _local_cluster(config)
    except ClusterUnavailable:
        raise
    except Exception as exc:  # noqa: BLE001 - cluster start fails in many ways (ports, CUDA, memory)
        raise ClusterUnavailable(f"cannot start a local Dask cluster: {type(exc).__name__}: {exc}") from exc
    client = Client(cluster, set_as_default=False)
    workers = len(cluster.workers)
    kind = type(cluster).__name__
    return ClusterSession(client, cluster, f"{kind} with {workers} worker(s) at {cluster.scheduler_address}",
                          {"address": cluster.scheduler_address, "workers": workers, "started_here": True,
                           "kind": kind, "memory_limit": config.memory_limit})


def _local_cluster(config: Any) -> Any:
    from distributed import LocalCluster

    return LocalCluster(
        n_workers=config.n_workers or 2, threads_per_worker=config.threads_per_worker, processes=True,
        memory_limit=config.memory_limit, host="127.0.0.1", dashboard_address=":0",   # any free port
        silence_logs=logging.WARNING,
    )


def _local_cuda_cluster(config: Any) -> Any:
    try:
        from dask_cuda import LocalCUDACluster
    except ImportError as exc:
        raise ClusterUnavailable(f"a GPU cluster needs dask-cuda (pip install '.[gpu]'): {exc}") from exc
    return LocalCUDACluster(**local_cuda_cluster_options(config))


def local_cuda_cluster_options(config: Any) -> dict[str, Any]:
    """Keyword arguments for ``LocalCUDACluster`` (checked against its signature by check-gpu)."""
    options: dict[str, Any] = {
        "threads_per_worker": config.threads_per_worker, "memory_limit": config.memory_limit,
        "host": "127.0.0.1", "dashboard_address": ":0", "silence_logs": logging.WARNING,
        "enable_cudf_spill": config.enable_cudf_spill, "resources": {GPU_RESOURCE: 1},
        # One memory pool shared by cuDF/CuPy and PyTorch on each worker.
        "rmm_allocator_external_lib_list": ["torch", "cupy"] if config.rmm_pool_size else None,
    }
    for key in ("CUDA_VISIBLE_DEVICES", "rmm_pool_size", "device_memory_limit", "protocol", "n_workers"):
        value = getattr(config, key)
        if value is not None:
            options[key] = value
    return {k: v for k, v in options.items() if v is not None}
