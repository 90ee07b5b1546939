"""What a stage used: peak host RSS and device memory, sampled on a background thread, its CPU
time, and what its GPUs did (``backends.devices.gpu_usage``: utilisation, memory, power, energy).

``ru_maxrss`` only ever grows over the whole process, so it cannot give a per-stage peak;
sampling every few milliseconds can, at a cost too small to see in the run time. Device memory
is this process's own allocations, read from each allocator's counters by a ``DeviceMeter``
(``backends.devices.device_memory``), not the device-wide free memory, which counts other processes
and the unused part of a memory pool.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import psutil

from pipeline.backends.devices.gpu_usage import MJ_PER_WH, visible_gpus
from pipeline.core.errors import ConfigError
from pipeline.core.settings import Settings, current_settings, register_check

if TYPE_CHECKING:
    from pipeline.backends.devices.device_memory import DevicePeak


class DeviceMeter(Protocol):
    """Per-stage device memory: ``begin`` as the stage starts, ``sample`` from the sampler's
    thread, ``finish`` for the peak (None where no device allocator was in use)."""

    def begin(self) -> None: ...
    def sample(self) -> None: ...
    def finish(self) -> DevicePeak | None: ...


# Seconds between a stage's samples: 20 a second. Every 10 ms cost 2.3% of a cold churn run on
# two cores (scripts/bench_sampling.py: the sampling thread competes with the stage's own).
STAGE_INTERVAL = 0.05


class GpuMeter(Protocol):
    """Per-stage GPU usage (``backends.devices.gpu_usage.GpuUsageMeter``): ``finish`` gives a record
    per device."""

    def begin(self) -> None: ...
    def sample(self) -> None: ...
    def finish(self) -> list[dict[str, Any]]: ...


class MemorySampler:
    """Context manager recording the highest RSS (and device use) seen while it is open, the
    process's CPU seconds over it, and what its GPUs did.

    ``device_meter`` gives the stage's own device peak and what it counts
    (``peak_device_source``); without one only the host is measured. ``gpu_meter`` is read
    every ``gpu_every`` samples (NVML's utilisation is over its own sample period, about
    1/6 s, so reading it more often would only repeat it); without one ``gpus`` stays None.
    ``interval`` None samples only as the stage starts and ends (``$PIPELINE_SAMPLING=off``:
    what the sampling's cost is measured against).
    """

    def __init__(self, interval: float | None = STAGE_INTERVAL, *, device_meter: DeviceMeter | None = None,
                 gpu_meter: GpuMeter | None = None, gpu_every: int = 2) -> None:
        self._process = psutil.Process()
        self._meter = device_meter
        self._gpu = gpu_meter
        self._gpu_every = max(gpu_every, 1)
        self._ticks = 0
        self._interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._cpu_start = 0.0
        self.peak_rss = 0
        self.peak_device: int | None = None
        self.peak_device_source: str | None = None
        self.cpu_seconds = 0.0
        self.gpus: list[dict[str, Any]] | None = None

    def _sample(self) -> None:
        rss = self._process.memory_info().rss
        self.peak_rss = max(self.peak_rss, rss)
        if self._meter is not None:
            self._meter.sample()
        if self._gpu is not None and self._ticks % self._gpu_every == 0:
            self._gpu.sample()
        self._ticks += 1

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            self._sample()

    def __enter__(self) -> MemorySampler:
        if self._meter is not None:
            self._meter.begin()
        if self._gpu is not None:
            self._gpu.begin()
        self._cpu_start = cpu_seconds(self._process)
        self._sample()
        if self._interval is not None:
            self._thread = threading.Thread(target=self._loop, name="memory-sampler", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample()
        self.cpu_seconds = max(cpu_seconds(self._process) - self._cpu_start, 0.0)
        if self._meter is not None:
            peak = self._meter.finish()
            if peak is not None:
                self.peak_device, self.peak_device_source = peak.bytes, peak.source
        if self._gpu is not None:
            self.gpus = self._gpu.finish()

    def usage(self) -> dict[str, Any]:
        """The stage record's ``usage``: CPU seconds, and ``gpus`` only where GPUs were measured
        (absent, not zero, on a machine without one)."""
        usage: dict[str, Any] = {"cpu_seconds": round(self.cpu_seconds, 4)}
        if self.gpus:
            usage["gpus"] = self.gpus
        return usage


ENV_SAMPLING = Settings.variable("sampling")


def cpu_seconds(process: psutil.Process) -> float:
    """User and system seconds of ``process`` and of the children it has waited for."""
    times = process.cpu_times()
    return times.user + times.system + times.children_user + times.children_system


def sampling_interval(settings: Settings | None = None) -> float | None:
    """Seconds between samples: ``STAGE_INTERVAL``, or None (start and end only) with
    ``$PIPELINE_SAMPLING=off``."""
    settings = current_settings() if settings is None else settings
    value = (settings.sampling or "").strip().lower() or "on"
    if value not in _SAMPLING_ON and value not in _SAMPLING_OFF:
        raise ConfigError(f"${ENV_SAMPLING} is {value!r}: use on (the default: a stage's memory sampled while it "
                          "runs) or off (only as it starts and ends); 1/0, true/false and yes/no say the same")
    return None if value in _SAMPLING_OFF else STAGE_INTERVAL


_SAMPLING_ON, _SAMPLING_OFF = ("on", "1", "true", "yes"), ("off", "0", "false", "no")
register_check("sampling", check=sampling_interval)


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


def process_snapshot() -> dict[str, Any]:
    """This process's cumulative CPU seconds and each visible GPU's energy counter: what a Dask
    worker reports at the start and end of a run (``worker_usage`` takes the difference)."""
    snapshot: dict[str, Any] = {"cpu_seconds": cpu_seconds(psutil.Process()), "time": time.monotonic()}
    readings = visible_gpus()
    if readings is not None:
        snapshot["gpus"] = [{"index": index, "name": name, "energy_mj": readings.read(index).energy_mj}
                            for index, name in readings.devices]
    return snapshot


def worker_usage(before: Mapping[str, Mapping[str, Any]],
                 after: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per worker present at both ends: CPU seconds, wall seconds, and each GPU's energy (Wh,
    where the board keeps a counter) between two ``process_snapshot`` of every worker."""
    out: dict[str, dict[str, Any]] = {}
    for worker, end in after.items():
        start = before.get(worker)
        if start is None:
            continue
        entry: dict[str, Any] = {"cpu_seconds": round(max(end["cpu_seconds"] - start["cpu_seconds"], 0.0), 4),
                                 "seconds": round(max(end["time"] - start["time"], 0.0), 4)}
        first = {g["index"]: g for g in start.get("gpus", [])}
        gpus = []
        for gpu in end.get("gpus", []):
            begun = first.get(gpu["index"], {}).get("energy_mj")
            energy = (gpu["energy_mj"] - begun) / MJ_PER_WH if begun is not None and gpu["energy_mj"] is not None \
                else None
            gpus.append({"index": gpu["index"], "name": gpu["name"],
                         "energy_wh": None if energy is None else round(max(energy, 0.0), 6)})
        if gpus:
            entry["gpus"] = gpus
        out[worker] = entry
    return out
