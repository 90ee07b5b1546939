"""Give a paused Dask worker's freed memory back to the operating system.

A worker pauses when its process memory passes ``distributed.worker.memory.pause`` (80% of its
limit) and runs no task until it falls back. It spills its managed data to disk first, but
what remains is memory the allocators keep after the data was freed: glibc's heap, Python's
arenas, and pyarrow's mimalloc pool (Parquet reads). Nothing frees those on its own, so a
worker can stay paused for good with no data in memory: 20-50M events on 2 workers × 558 MiB
did, and the run stalled; running workers near the limit were killed at 95% by a task's
peak, and their results computed again. While a worker is paused or past its spill threshold
(70%), this plugin collects garbage and asks pyarrow's pool and glibc to return what is
unused (``malloc_trim``) every couple of seconds: 40-75 MiB per worker there.

Imported only where a cluster is started (it imports ``distributed``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
from typing import Any

from distributed import WorkerPlugin
from distributed.core import Status

CHECK_MS = 2000


def release_unused_memory() -> None:
    """Return freed memory to the OS: garbage, pyarrow's pool, glibc's heap (where there is one)."""
    gc.collect()
    try:
        import pyarrow

        pyarrow.default_memory_pool().release_unused()
    except ImportError:
        pass
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


def _malloc_trim() -> Any:
    """glibc's ``malloc_trim``, or None (musl, macOS: no such call)."""
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        return None


class ReleaseMemoryWhenPaused(WorkerPlugin):
    """While its worker is paused or past its spill threshold, release unused memory every
    ``CHECK_MS`` milliseconds; ``releases`` counts the calls."""

    name = "pipeline-release-memory-when-paused"
    idempotent = True

    def __init__(self) -> None:
        self.releases = 0
        self._callback: Any = None
        self._worker: Any = None

    def setup(self, worker: Any) -> None:
        from tornado.ioloop import PeriodicCallback

        self._worker = worker
        self._callback = PeriodicCallback(self._check, CHECK_MS)
        self._callback.start()

    def teardown(self, worker: Any) -> None:
        if self._callback is not None:
            self._callback.stop()

    def _check(self) -> None:
        if self._worker is not None and self._holding_too_much():
            release_unused_memory()
            self.releases += 1

    def _holding_too_much(self) -> bool:
        """Paused, or past the spill threshold: a running worker that starts a task there can
        pass the 95% limit, where the nanny kills it and its results are computed again."""
        if self._worker.status == Status.paused:
            return True
        memory = self._worker.memory_manager
        limit, spill = memory.memory_limit, memory.memory_spill_fraction
        if not limit or not spill:
            return False
        return self._worker.monitor.get_process_memory() > spill * limit


def register_memory_release(client: Any) -> None:
    """Install the plugin on every worker of ``client``'s cluster, present and future (a
    worker the nanny restarts gets it from the scheduler)."""
    client.register_plugin(ReleaseMemoryWhenPaused())
