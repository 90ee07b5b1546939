"""Dask clusters started or joined for a run: a local one (LocalCluster on CPU,
LocalCUDACluster on GPU, the only place that imports ``dask_cuda``) or an existing scheduler,
and closed only when started here. The parent process never creates a CUDA context: that would
break LocalCUDACluster's worker start (device detection uses NVML)."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any

from pipeline.backends.clusters.connect import close_quietly, connect_client
from pipeline.backends.clusters.main_guard import refuse_unguarded_main_script
from pipeline.backends.clusters.memory_plan import GpuMemoryPlan, gpu_memory_plan_here
from pipeline.core.errors import ClusterUnavailable
from pipeline.core.settings import current_settings
from pipeline.core.threads import THREADS_ENV

GPU_RESOURCE = "GPU"


@dataclass
class ClusterSession:
    """A connected client and, when this run started it, the cluster to close afterwards."""

    client: Any
    cluster: Any = None                     # None: an existing cluster, never closed here
    description: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    # What starting the local cluster set in this process's environment: name -> (before, after).
    environ: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)

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
            restore_environ(self.environ)


def environ_changes(before: dict[str, str]) -> dict[str, tuple[str | None, str | None]]:
    """The variables of ``os.environ`` that differ from ``before``: name -> (before, now)."""
    names = set(before) | set(os.environ)
    return {name: (before.get(name), os.environ.get(name)) for name in names
            if before.get(name) != os.environ.get(name)}


def restore_environ(changes: dict[str, tuple[str | None, str | None]]) -> None:
    """Put back what a local cluster's start set in this process's environment (Dask's nanny
    sets ``OMP_NUM_THREADS=1``, ``MKL_NUM_THREADS=1``, ``PYTHONHASHSEED``... for its workers, and
    a library caller's later subprocesses inherited them); a variable changed since is left."""
    for name, (before, set_to) in changes.items():
        if os.environ.get(name) != set_to:
            continue
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


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

    from pipeline.backends.clusters.worker_memory import register_memory_release

    # distributed sets its loggers to INFO when imported; a run's log keeps only its warnings.
    for name in ("distributed", "distributed.scheduler", "distributed.nanny", "distributed.worker",
                 "distributed.core", "distributed.http.proxy"):
        logging.getLogger(name).setLevel(logging.WARNING)
    # P2P shuffles (value_counts of the feature ops) report every start and stop as a warning.
    logging.getLogger("distributed.shuffle").setLevel(logging.ERROR)
    if config.address:
        client = connect_client(config.address, float(config.connect_timeout))
        try:
            workers = len(cluster_workers(client))
        except Exception as exc:  # noqa: BLE001 - the connection can drop right after the handshake
            close_quietly(client)
            raise ClusterUnavailable(f"the Dask scheduler at {config.address} stopped answering: "
                                     f"{type(exc).__name__}: {exc}") from None
        return ClusterSession(client, None, f"existing cluster at {config.address} ({workers} worker(s))",
                              {"address": config.address, "workers": workers, "started_here": False})
    refuse_unguarded_main_script()
    plan = gpu_memory_plan_here(config) if device == "gpu" else None
    environ_before = dict(os.environ)
    try:
        cluster = _local_cuda_cluster(config, plan) if device == "gpu" else _local_cluster(config)
    except ClusterUnavailable:
        raise
    except Exception as exc:  # noqa: BLE001 - cluster start fails in many ways (ports, CUDA, memory)
        raise ClusterUnavailable(f"cannot start a local Dask cluster: {type(exc).__name__}: {exc}") from exc
    client = Client(cluster, set_as_default=False)
    register_memory_release(client)
    workers = len(cluster.workers)
    kind = type(cluster).__name__
    details = {"address": cluster.scheduler_address, "workers": workers, "started_here": True,
               "kind": kind, "memory_limit": config.memory_limit}
    if plan is not None:
        details["gpu_memory"] = plan.facts()
    return ClusterSession(client, cluster, f"{kind} with {workers} worker(s) at {cluster.scheduler_address}",
                          details, environ=environ_changes(environ_before))


def _local_cluster(config: Any) -> Any:
    from distributed import LocalCluster

    return LocalCluster(
        n_workers=config.n_workers or 2, threads_per_worker=config.threads_per_worker, processes=True,
        # The dashboard on any free port of this machine only (":0" listened on every interface).
        memory_limit=config.memory_limit, host="127.0.0.1", dashboard_address="127.0.0.1:0",
        silence_logs=logging.WARNING, preload=worker_preload(), env=worker_environment(config.threads_per_worker),
    )


def worker_environment(threads_per_worker: int | None) -> dict[str, str]:
    """Environment variables every local CPU worker process gets.

    The table engine: pandas in the workers unless this process's environment names one
    (``PIPELINE_CPU_ENGINE``). The workers already use every core between them (one thread
    each), so Polars' threads win nothing there, and its library and allocator cost each worker
    memory: at 1M events on two 512 MiB workers the nanny restarted Polars workers until the run
    gave up, where the pandas engine finished (768 MiB workers: Polars 45 s, pandas 35 s). Both
    engines give the same tables (``pipeline parity --against pandas``).

    Polars' thread pool, when a worker does run it, is sized once at its import to every core
    of the machine: in n one-thread workers that is n x cores threads contending for the cores.
    ``POLARS_MAX_THREADS`` sizes it to the worker's own threads (a value already set in this
    process's environment is passed on instead). The feature ops' column threads: one."""
    from pipeline.backends.cpu_engine import CPU_ENGINE_VARIABLE

    threads = os.environ.get("POLARS_MAX_THREADS") or str(max(1, int(threads_per_worker or 1)))
    engine = (current_settings().cpu_engine or "").strip() or "pandas"
    # The workers already run partitions side by side; column threads inside each would put
    # workers x cores threads on the cores (``pipeline.core.threads``).
    return {"POLARS_MAX_THREADS": threads, CPU_ENGINE_VARIABLE: engine, THREADS_ENV: "1"}


def worker_preload() -> list[str]:
    """Modules every local worker imports as it starts. A worker the nanny restarts (past its
    memory limit) gets data from its peers at once, and unpickling it in one thread while a task
    imports ``dask.dataframe`` in another broke that import ("partially initialized module
    'dask.dataframe.core'"), losing the worker; imported first, it is there for both."""
    return ["dask.dataframe"]


def _local_cuda_cluster(config: Any, plan: GpuMemoryPlan | None = None) -> Any:
    try:
        from dask_cuda import LocalCUDACluster
    except ImportError as exc:
        raise ClusterUnavailable(f"a GPU cluster needs dask-cuda (pip install '.[gpu]'): {exc}") from exc
    return LocalCUDACluster(**local_cuda_cluster_options(config, plan))


def local_cuda_cluster_options(config: Any, plan: GpuMemoryPlan | None = None) -> dict[str, Any]:
    """Keyword arguments for ``LocalCUDACluster`` (checked against its signature by check-gpu);
    a memory ``plan`` adds the pool cap and spill threshold it sized."""
    options: dict[str, Any] = {
        "threads_per_worker": config.threads_per_worker, "memory_limit": config.memory_limit,
        "host": "127.0.0.1", "dashboard_address": "127.0.0.1:0", "silence_logs": logging.WARNING,
        "enable_cudf_spill": config.enable_cudf_spill, "resources": {GPU_RESOURCE: 1},
        # One memory pool shared by cuDF/CuPy and PyTorch on each worker.
        "rmm_allocator_external_lib_list": ["torch", "cupy"] if config.rmm_pool_size else None,
        "preload": worker_preload(),
    }
    for key in ("CUDA_VISIBLE_DEVICES", "rmm_pool_size", "device_memory_limit", "protocol", "n_workers"):
        value = getattr(config, key)
        if value is not None:
            options[key] = value
    if plan is not None:
        options.update(plan.cluster_options())
    return {k: v for k, v in options.items() if v is not None}


