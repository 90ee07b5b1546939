"""Dask clusters: start a local one (LocalCluster on CPU, LocalCUDACluster on GPU) or connect
to an existing scheduler, and close only what was started here.

The only module that imports ``dask_cuda``. The parent process never creates a CUDA context:
that would break LocalCUDACluster's worker start (device detection uses NVML).

GPU workers' memory is sized for XGBoost, which trains on them (``xgboost.dask`` or external
memory): its PyPI build has no RMM, so it allocates device memory beside a ``rmm_pool_size``
pool rather than from it, and external memory keeps its quantised pages in host memory
(``on_host``), which counts against the worker's ``memory_limit``. ``plan_gpu_memory`` caps
the pool's growth to leave XGBoost a share of the device, spills device data before the pool
is full, and says when the configured sizes leave XGBoost too little room.
"""

from __future__ import annotations

import ast
import contextlib
import logging
import os
import re
import socket
import struct
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from pipeline.core.errors import ClusterUnavailable, UsageError
from pipeline.core.threads import THREADS_ENV

GPU_RESOURCE = "GPU"
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

    from pipeline.backends.worker_memory import register_memory_release

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
            _close_quietly(client)
            raise ClusterUnavailable(f"the Dask scheduler at {config.address} stopped answering: "
                                     f"{type(exc).__name__}: {exc}") from None
        return ClusterSession(client, None, f"existing cluster at {config.address} ({workers} worker(s))",
                              {"address": config.address, "workers": workers, "started_here": False})
    refuse_unguarded_main_script()
    plan = gpu_memory_plan_here(config) if device == "gpu" else None
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
                          details)


def _local_cluster(config: Any) -> Any:
    from distributed import LocalCluster

    return LocalCluster(
        n_workers=config.n_workers or 2, threads_per_worker=config.threads_per_worker, processes=True,
        memory_limit=config.memory_limit, host="127.0.0.1", dashboard_address=":0",   # any free port
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
    from pipeline.backends.cpu import CPU_ENGINE_VARIABLE

    threads = os.environ.get("POLARS_MAX_THREADS") or str(max(1, int(threads_per_worker or 1)))
    engine = os.environ.get(CPU_ENGINE_VARIABLE, "").strip() or "pandas"
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
        "host": "127.0.0.1", "dashboard_address": ":0", "silence_logs": logging.WARNING,
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


# ------------------------------------------------------------------ an existing scheduler
SCHEDULER_EXAMPLE = "tcp://scheduler:8786"
SCHEDULER_SCHEMES = ("tcp", "tls", "ucx", "ucxx", "ws", "wss")
_SCHEDULER_ADDRESS = re.compile(
    r"^(?:(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://)?"
    r"(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?)"
    r"(?::(?P<port>[0-9]+))?$")
# A Dask handshake is a small dict (compression, Python version, pickle protocol): about 60 bytes.
# The first 8 bytes a peer sends are the frame length; from another service they are text
# ("HTTP/1.1") read as a length of exabytes, which distributed would try to allocate.
MAX_HANDSHAKE_BYTES = 64 * 2**10


def scheduler_address_problem(address: str) -> str | None:
    """Why ``address`` cannot be a Dask scheduler address, or None when it has the form
    ``[scheme://]host:port``. Checked before connecting, so a typo is a config error (exit 2)
    rather than a connection that times out."""
    match = _SCHEDULER_ADDRESS.match(address.strip()) if address.strip() == address else None
    if match is None:
        return "it is not of the form tcp://HOST:PORT"
    scheme = (match["scheme"] or "tcp").lower()
    if scheme not in SCHEDULER_SCHEMES:
        return f"unknown protocol '{scheme}://' (one of: {', '.join(SCHEDULER_SCHEMES)})"
    if match["port"] is None:
        return "it has no port (a scheduler listens on 8786 unless told otherwise)"
    if not 0 < int(match["port"]) < 65536:
        return f"port {match['port']} is not between 1 and 65535"
    return None


def check_scheduler_address(address: str, *, where: str) -> None:
    """Raise a UsageError (exit 2) naming ``where`` (``--scheduler``, ``cluster.address``) when
    ``address`` is not a scheduler address."""
    problem = scheduler_address_problem(address)
    if problem:
        raise UsageError(f"{where} {address!r} is not a Dask scheduler address: {problem}; expected "
                         f"tcp://HOST:PORT, for example {SCHEDULER_EXAMPLE}")


def connect_client(address: str, timeout: float) -> Any:
    """A client of the scheduler at ``address``, or ClusterUnavailable within ``timeout`` seconds.

    A tcp:// address is probed first: the scheduler must send a Dask handshake, so another
    service on that port is named as such instead of being read as a Dask frame. A client whose
    start failed is disarmed: its finaliser would otherwise wait twice the timeout to close a
    connection that never opened, and print a traceback at exit.
    """
    from distributed import Client

    check_scheduler_address(address, where="the scheduler address (cluster.address or --scheduler)")
    deadline = time.monotonic() + timeout
    match = _SCHEDULER_ADDRESS.match(address)
    assert match is not None
    if (match["scheme"] or "tcp").lower() == "tcp":
        _await_dask_handshake(address, match["host"].strip("[]"), int(match["port"]), timeout, deadline)
    remaining = max(deadline - time.monotonic(), 1.0)
    try:
        return Client(address, timeout=f"{remaining}s", set_as_default=False)
    except (OSError, TimeoutError) as exc:
        _disarm_failed_client(exc)
        raise ClusterUnavailable(_unreachable(address, timeout, f"{type(exc).__name__}: {exc}")) from None
    except Exception as exc:  # noqa: BLE001 - whatever a peer's bytes make of distributed's protocol
        _disarm_failed_client(exc)
        raise ClusterUnavailable(f"the Dask scheduler at {address} did not accept a client: "
                                 f"{type(exc).__name__}: {exc}") from None


def _unreachable(address: str, timeout: float, why: str) -> str:
    return (f"cannot reach the Dask scheduler at {address} within {timeout:g} s ({why}); start it with "
            "`dask scheduler` or fix cluster.address (or --scheduler)")


def _await_dask_handshake(address: str, host: str, port: int, timeout: float, deadline: float) -> None:
    """Connect (retrying until ``deadline``, as a scheduler may be starting) and read the
    handshake a Dask server sends first; raise ClusterUnavailable unless it is one."""
    sock = _connect_until(address, host, port, timeout, deadline)
    with sock:
        header = _receive(sock, 8, deadline)
        fix = f"point cluster.address or --scheduler at the scheduler, e.g. {SCHEDULER_EXAMPLE}"
        if not header:
            what = "sent nothing" if header is None else "closed the connection"
            raise ClusterUnavailable(f"{address} accepted the connection but {what} instead of a Dask "
                                     f"handshake within {timeout:g} s: it is not a Dask scheduler (another "
                                     f"service on that port?); {fix}")
        (length,) = struct.unpack("Q", header) if len(header) == 8 else (0,)
        body = _receive(sock, length, deadline) if 0 < length <= MAX_HANDSHAKE_BYTES else None
        if body is None or len(body) < length or not _is_dask_handshake(body):
            seen = header.decode("ascii", "replace")
            raise ClusterUnavailable(f"{address} answered, but not as a Dask scheduler (it began with "
                                     f"{seen!r}): another service is listening on that port; {fix}")


def _connect_until(address: str, host: str, port: int, timeout: float, deadline: float) -> socket.socket:
    error: OSError | None = None
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            why = f"{type(error).__name__}: {error}" if error else "no answer"
            raise ClusterUnavailable(_unreachable(address, timeout, why))
        try:
            return socket.create_connection((host, port), timeout=left)
        except OSError as exc:
            error = exc
            time.sleep(min(0.2, max(deadline - time.monotonic(), 0)))


def _receive(sock: socket.socket, size: int, deadline: float) -> bytes | None:
    """Exactly ``size`` bytes, fewer when the peer closes, or None when none came in time."""
    data = b""
    while len(data) < size:
        left = deadline - time.monotonic()
        if left <= 0:
            return data or None
        sock.settimeout(left)
        try:
            chunk = sock.recv(size - len(data))
        except (TimeoutError, socket.timeout):
            return data or None
        except OSError:
            return data
        if not chunk:
            return data
        data += chunk
    return data


def _is_dask_handshake(body: bytes) -> bool:
    from distributed.protocol.core import loads
    from distributed.protocol.utils import unpack_frames

    try:
        frames, missing = unpack_frames(body, partial=True)
        message = loads(frames, deserialize=False) if not missing else None
    except Exception:  # noqa: BLE001 - not Dask's framing: that is the answer
        return False
    return isinstance(message, dict) and "python" in message


def _disarm_failed_client(exc: BaseException) -> None:
    """Mark the half-started Client in ``exc``'s traceback closed and stop its loop thread."""
    from distributed import Client

    tb = exc.__traceback__
    while tb is not None:
        candidate = tb.tb_frame.f_locals.get("self")
        if isinstance(candidate, Client):
            candidate.status = "closed"
            with contextlib.suppress(Exception):
                candidate._loop_runner.stop()
            return
        tb = tb.tb_next


def _close_quietly(client: Any) -> None:
    with contextlib.suppress(Exception):
        client.close(timeout=2)


# ------------------------------------------------------------------ scripts that start workers
GUARD = 'if __name__ == "__main__":'


def refuse_run_in_worker_bootstrap() -> None:
    """Fail at once when a run starts while this process is a new worker importing its parent's
    main script (multiprocessing's spawn bootstrap): the parent holds the run lock, so the
    run would wait on it until the worker's start times out."""
    import multiprocessing

    if getattr(multiprocessing.current_process(), "_inheriting", False):
        main = sys.modules.get("__main__")
        script = getattr(main, "__file__", None) or "the main script"
        raise UsageError(
            f"a pipeline run was started while a new worker process was importing {script}: Dask's local "
            f"worker processes import the script that started them, so code at its top level runs again in "
            f"each of them; put the call under `{GUARD}` (see the README's Library use)")


def refuse_unguarded_main_script(starting: str = "a local Dask cluster", *, method: str | None = None) -> None:
    """Before starting local worker processes (``starting`` says which; ``method`` is their start
    method, Dask's when None): refuse when the call comes from top-level code of a ``__main__``
    script that the workers will import again (spawn, forkserver), outside an
    ``if __name__ == "__main__":`` block, where each worker would start the run again."""
    main = sys.modules.get("__main__")
    if main is None or not _workers_import_main(main, method or worker_start_method()):
        return
    frame = sys._getframe(1)
    while frame is not None and not (frame.f_globals is main.__dict__ and frame.f_code.co_name == "<module>"):
        frame = frame.f_back
    if frame is None:                 # not called while the script's top level runs
        return
    path, line = frame.f_code.co_filename, frame.f_lineno
    try:
        with open(path, encoding="utf-8") as handle:
            tree = ast.parse(handle.read(), path)
    except (OSError, SyntaxError, ValueError):
        return                        # cannot read it: do not guess
    if not _guarded(tree, line):
        raise UsageError(
            f"{path}, line {line}, starts {starting} from the script's top level: its "
            f"processes import {os.path.basename(path)} again and would each start the run once more "
            f"(waiting on this run's lock). Put the code that runs the pipeline under `{GUARD}` (see the "
            "README's Library use), or use an existing cluster (scheduler=...)")


def worker_start_method() -> str:
    """How Dask starts a local worker process (``distributed.worker.multiprocessing-method``:
    spawn by default, forkserver or fork)."""
    import dask

    return str(dask.config.get("distributed.worker.multiprocessing-method", "spawn"))


def _workers_import_main(main: Any, method: str) -> bool:
    """Whether processes started by ``method`` run ``main`` again, as multiprocessing's spawn
    (and forkserver, which prepares its children the same way) decides it."""
    if method == "fork":
        return False
    name = getattr(getattr(main, "__spec__", None), "name", None)
    if name is not None:
        return name != "__main__" and not name.endswith(".__main__")
    path = getattr(main, "__file__", None)
    return bool(path) and os.path.splitext(os.path.basename(path))[0] != "ipython"


def _guarded(tree: ast.Module, line: int) -> bool:
    """Whether ``line`` lies in the body of an ``if __name__ == "__main__":`` (or the else of
    ``!=``)."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.If):
            continue
        equal = _main_test(node.test)
        block = node.body if equal else node.orelse if equal is False else []
        if block and block[0].lineno <= line <= (block[-1].end_lineno or block[-1].lineno):
            return True
    return False


def _main_test(test: ast.expr) -> bool | None:
    """True for ``__name__ == "__main__"``, False for ``!=``, None for any other test."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Eq, ast.NotEq))):
        return None
    sides = [test.left, test.comparators[0]]
    names = any(isinstance(s, ast.Name) and s.id == "__name__" for s in sides)
    main = any(isinstance(s, ast.Constant) and s.value == "__main__" for s in sides)
    return isinstance(test.ops[0], ast.Eq) if names and main else None


# ------------------------------------------------------------------ GPU worker memory
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

    from pipeline.backends.detect import probe_nvml

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
