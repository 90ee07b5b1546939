"""Peak memory of a stage: host RSS and device memory, sampled on a background thread.

``ru_maxrss`` only ever grows over the whole process, so it cannot give a per-stage peak;
sampling every few milliseconds can, at a cost too small to see in the run time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import psutil


class MemorySampler:
    """Context manager recording the highest RSS (and device use) seen while it is open."""

    def __init__(self, device_used: Callable[[], int | None] | None = None, interval: float = 0.01) -> None:
        self._process = psutil.Process()
        self._device_used = device_used
        self._interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.peak_rss = 0
        self.peak_device: int | None = None

    def _sample(self) -> None:
        rss = self._process.memory_info().rss
        self.peak_rss = max(self.peak_rss, rss)
        if self._device_used is not None:
            used = self._device_used()
            if used is not None:
                self.peak_device = max(self.peak_device or 0, used)

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            self._sample()

    def __enter__(self) -> MemorySampler:
        self._sample()
        self._thread = threading.Thread(target=self._loop, name="memory-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample()
