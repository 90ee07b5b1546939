"""What the GPUs did while a stage ran: utilisation, memory, power and energy, through NVML.

NVML reads the driver's counters: no CUDA context is created and no GPU library imported, so
sampling costs the device nothing and works in a process that never touches CUDA. Its readings
are device-wide (another process on the same GPU counts too): a stage's usage is that of the
GPUs it could use, which is what a GPU-hour is paid for. The devices are those the process may
use: ``CUDA_VISIBLE_DEVICES`` (indices or ``GPU-`` UUIDs), else every GPU NVML sees.

``GpuUsageMeter`` only needs ``GpuReadings`` (the device names and one reading each), so a test
replays recorded NVML readings through it without a GPU.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

# Joules in a watt-hour, and NVML's millijoules and milliwatts.
MJ_PER_WH = 3_600_000.0
_MW_PER_W = 1000.0


@dataclass(frozen=True)
class Reading:
    """One NVML reading of one device."""

    utilisation: float             # percent of the last sample period a kernel was running
    memory_used: int               # bytes in use on the device (every process)
    power_w: float | None = None   # board power draw; None where NVML does not report it
    energy_mj: int | None = None   # energy since the driver loaded (Volta and newer); else None


class GpuReadings(Protocol):
    """The GPUs a process may use, by NVML index and name, and a reading of one of them."""

    devices: Sequence[tuple[int, str]]

    def read(self, index: int) -> Reading: ...


@dataclass
class NvmlReadings:
    """``GpuReadings`` from the driver, through nvidia-ml-py."""

    devices: Sequence[tuple[int, str]]
    handles: dict[int, Any]

    def read(self, index: int) -> Reading:
        import pynvml

        handle = self.handles[index]
        utilisation = float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)
        memory = int(pynvml.nvmlDeviceGetMemoryInfo(handle).used)
        power = _optional(lambda: pynvml.nvmlDeviceGetPowerUsage(handle) / _MW_PER_W)
        energy = _optional(lambda: int(pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)))
        return Reading(utilisation, memory, power, energy)


def _optional(read: Callable[[], Any]) -> Any:
    """A reading some boards do not support: None rather than an error."""
    import pynvml

    try:
        return read()
    except pynvml.NVMLError:
        return None


@functools.cache
def visible_gpus() -> NvmlReadings | None:
    """The GPUs this process may use, or None: no NVML (no driver, no GPU) or none visible.
    Initialised once per process and left open (``nvmlInit`` is reference counted)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        handles = {i: pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())}
        uuids = {_text(pynvml.nvmlDeviceGetUUID(h)): i for i, h in handles.items()}
        chosen = visible_indices(os.environ.get("CUDA_VISIBLE_DEVICES"), list(handles), uuids)
        devices = [(i, _text(pynvml.nvmlDeviceGetName(handles[i]))) for i in chosen]
    except Exception:  # noqa: BLE001 - NVMLError, a missing library: no GPU to measure
        return None
    return NvmlReadings(devices, {i: handles[i] for i in chosen}) if devices else None


def visible_indices(setting: str | None, indices: list[int], uuids: dict[str, int]) -> list[int]:
    """NVML indices of the GPUs ``CUDA_VISIBLE_DEVICES`` lets a process use (None: all). CUDA
    stops at the first entry it cannot use, and so does this."""
    if setting is None:
        return indices
    chosen: list[int] = []
    for entry in (e.strip() for e in setting.split(",")):
        index: int | None = None
        if entry.isdigit():
            index = int(entry)
        elif entry.startswith("GPU-"):
            index = next((i for uuid, i in uuids.items() if uuid.startswith(entry)), None)
        if index is None or index not in indices or index in chosen:
            break
        chosen.append(index)
    return chosen


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass
class _DeviceSeries:
    name: str
    utilisation: list[float] = field(default_factory=list)
    memory: list[int] = field(default_factory=list)
    power: list[float] = field(default_factory=list)
    energy_start: int | None = None
    energy_end: int | None = None


class GpuUsageMeter:
    """``begin`` as a stage starts, ``sample`` from the sampler's thread, ``finish`` for each
    device's usage over the stage (``GPU_FIELDS``)."""

    def __init__(self, readings: GpuReadings, clock: Callable[[], float] = time.monotonic) -> None:
        self._readings = readings
        self._clock = clock
        self._series: dict[int, _DeviceSeries] = {}
        self._started = 0.0

    def begin(self) -> None:
        self._started = self._clock()
        self._series = {index: _DeviceSeries(name) for index, name in self._readings.devices}
        for index, series in self._series.items():
            series.energy_start = self._readings.read(index).energy_mj

    def sample(self) -> None:
        for index, series in self._series.items():
            reading = self._readings.read(index)
            series.utilisation.append(reading.utilisation)
            series.memory.append(reading.memory_used)
            if reading.power_w is not None:
                series.power.append(reading.power_w)
            series.energy_end = reading.energy_mj

    def finish(self) -> list[dict[str, Any]]:
        """Per device: ``seconds`` held, utilisation mean and peak (percent), peak memory used,
        mean power and energy (from the energy counter where the board keeps one, else mean
        power × time). A stage too short for a sample gets one reading taken now."""
        seconds = max(self._clock() - self._started, 0.0)
        if any(not series.utilisation for series in self._series.values()):
            self.sample()
        out = []
        for index, series in self._series.items():
            power = sum(series.power) / len(series.power) if series.power else None
            if series.energy_start is not None and series.energy_end is not None:
                energy = max(series.energy_end - series.energy_start, 0) / MJ_PER_WH
            else:
                energy = power * seconds / 3600.0 if power is not None else None
            out.append({"index": index, "name": series.name, "seconds": round(seconds, 4),
                        "utilisation_mean": round(sum(series.utilisation) / len(series.utilisation), 2),
                        "utilisation_peak": max(series.utilisation), "memory_peak_bytes": max(series.memory),
                        "power_mean_w": None if power is None else round(power, 2),
                        "energy_wh": None if energy is None else round(energy, 6)})
        return out


def gpu_meter() -> GpuUsageMeter | None:
    """A meter of this process's GPUs, or None where there are none to measure."""
    readings = visible_gpus()
    return GpuUsageMeter(readings) if readings is not None else None

