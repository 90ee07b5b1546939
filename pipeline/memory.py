"""Peak memory of a stage: host RSS and device memory, sampled on a background thread.

``ru_maxrss`` only ever grows over the whole process, so it cannot give a per-stage peak;
sampling every few milliseconds can, at a cost too small to see in the run time. Device memory
is this process's own allocations, read from each allocator's counters by a ``DeviceMeter``
(``backends.device_memory``), not the device-wide free memory, which counts other processes
and the unused part of a memory pool.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

import psutil

if TYPE_CHECKING:
    from pipeline.backends.device_memory import DevicePeak


class DeviceMeter(Protocol):
    """Per-stage device memory: ``begin`` as the stage starts, ``sample`` from the sampler's
    thread, ``finish`` for the peak (None where no device allocator was in use)."""

    def begin(self) -> None: ...
    def sample(self) -> None: ...
    def finish(self) -> DevicePeak | None: ...


class MemorySampler:
    """Context manager recording the highest RSS (and device use) seen while it is open.

    ``device_meter`` gives the stage's own device peak and what it counts
    (``peak_device_source``); without one only the host is measured.
    """

    def __init__(self, interval: float = 0.01, *, device_meter: DeviceMeter | None = None) -> None:
        self._process = psutil.Process()
        self._meter = device_meter
        self._interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.peak_rss = 0
        self.peak_device: int | None = None
        self.peak_device_source: str | None = None

    def _sample(self) -> None:
        rss = self._process.memory_info().rss
        self.peak_rss = max(self.peak_rss, rss)
        if self._meter is not None:
            self._meter.sample()

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            self._sample()

    def __enter__(self) -> MemorySampler:
        if self._meter is not None:
            self._meter.begin()
        self._sample()
        self._thread = threading.Thread(target=self._loop, name="memory-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample()
        if self._meter is not None:
            peak = self._meter.finish()
            if peak is not None:
                self.peak_device, self.peak_device_source = peak.bytes, peak.source


def release_freed_memory() -> int:
    """Collect garbage and hand freed heap pages back to the OS; returns the bytes of RSS given back.

    glibc keeps memory freed in the middle of its heap, so a Dask worker that finished a big
    task still looks as large to the nanny as at its peak: after external-memory training a
    worker stayed at ~820 MiB of a 1 GiB limit, the next stage pushed it past 95% and the nanny
    restarted it, losing the trained model. ``malloc_trim(0)`` returns those pages (136 MiB
    of 429 after a 10-round training here). A no-op where the C library has no malloc_trim.
    """
    import gc

    gc.collect()
    process = psutil.Process()
    before = process.memory_info().rss
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
    return max(0, before - process.memory_info().rss)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim from the symbols already loaded in this process, looked up once
    (``ctypes.util.find_library`` would run ``ldconfig`` after every task); None elsewhere."""
    import ctypes

    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
