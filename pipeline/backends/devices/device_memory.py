"""The device memory this process itself has allocated, counted allocator by allocator.

``cudaMemGetInfo`` is device-wide: it counts other processes, every CUDA context and the whole
of an RMM pool however little of it is in use, so it cannot give a stage's own peak. Each
allocator a stage allocates through keeps its own count instead:

- ``rmm``: RMM's statistics (a ``StatisticsResourceAdaptor`` over the current resource, added
  the first time a stage starts). cuDF and cuML allocate here, and PyTorch and CuPy too where
  Dask-CUDA routes them to the pool (``rmm_allocator_external_lib_list``).
- ``torch``: PyTorch's caching allocator, ``memory_allocated`` and an exact per-stage
  ``max_memory_allocated`` after ``reset_peak_memory_stats``. Under RMM's PyTorch allocator
  these raise (a pluggable allocator keeps no statistics) and RMM counts those bytes.
- ``cupy``: CuPy's default memory pool, ``used_bytes`` (bytes in live arrays, not the cache the
  pool keeps, ``total_bytes``). Where CuPy allocates from RMM this pool stays empty.

So no byte is counted twice, and a pool's reserved but unused memory, the CUDA context and
other processes are not counted at all. A library is read only once something else imported
it, and PyTorch only once it has a CUDA context: measuring never imports a library or creates
a context (a context alone costs hundreds of MiB).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class DevicePeak:
    """A stage's peak device bytes and the allocators they add up, e.g. ``"rmm+torch"``."""

    bytes: int
    source: str


class AllocatorCount(Protocol):
    """One allocator's own count of the bytes this process holds through it."""

    name: str
    sampled: bool            # whether ``current`` must be polled (no exact peak of its own)

    def begin(self) -> None:
        """A stage starts: reset or note the allocator's own peak."""

    def current(self) -> int | None:
        """Bytes allocated through it now; None where it is not in use in this process."""

    def stage_peak(self) -> int | None:
        """The exact peak since ``begin`` where the allocator keeps one, else None."""


class RmmCount:
    """RMM's statistics: current bytes, and the stage's peak when the stage set a new high.

    The adaptor's ``peak_bytes`` is the process's high-water mark since counting began. A stage
    that raises it peaked at the new value exactly; one that stays below relies on the sampled
    maximum of ``current_bytes``. Counting starts with the first stage: frees of blocks
    allocated before it would take the count below zero, so it is clamped there.
    """

    name = "rmm"
    sampled = True

    def __init__(self) -> None:
        self._peak_before: int | None = None

    def begin(self) -> None:
        counts = _rmm_counts(enable=True)
        self._peak_before = None if counts is None else _count(counts, "peak_bytes")

    def current(self) -> int | None:
        counts = _rmm_counts(enable=False)
        return None if counts is None else max(0, _count(counts, "current_bytes"))

    def stage_peak(self) -> int | None:
        counts = _rmm_counts(enable=False)
        if counts is None:
            return None
        peak = _count(counts, "peak_bytes")
        return peak if self._peak_before is not None and peak > self._peak_before else None


class TorchCount:
    """PyTorch's caching allocator: exact, so never polled.

    A context made during the stage counts from zero, so ``max_memory_allocated`` is the
    stage's own peak then as well.
    """

    name = "torch"
    sampled = False

    def begin(self) -> None:
        cuda = _torch_cuda()
        if cuda is not None:
            try:
                cuda.reset_peak_memory_stats()
            except RuntimeError:         # a pluggable allocator (RMM's): its bytes are RMM's
                pass

    def current(self) -> int | None:
        return _torch_read("memory_allocated")

    def stage_peak(self) -> int | None:
        return _torch_read("max_memory_allocated")


class CupyPoolCount:
    """CuPy's default pool: bytes in live arrays, polled (the pool keeps no peak)."""

    name = "cupy"
    sampled = True

    def begin(self) -> None:
        pass

    def current(self) -> int | None:
        if "cupy" not in sys.modules:
            return None
        import cupy

        return int(cupy.get_default_memory_pool().used_bytes())

    def stage_peak(self) -> int | None:
        return None


def default_counts() -> list[AllocatorCount]:
    return [RmmCount(), TorchCount(), CupyPoolCount()]


class ProcessDeviceMemory:
    """A stage's peak of the device memory this process allocated: per allocator, the exact
    peak where it keeps one, else the highest of the values sampled, added up.

    Allocators that peak at different moments make the sum an upper bound of their combined
    peak; polled ones can miss a spike shorter than the sampling interval. Stages that run at
    the same time in one process (a Dask worker with several threads) share the counters.
    """

    def __init__(self, counts: Sequence[AllocatorCount] | None = None) -> None:
        self._counts = list(counts) if counts is not None else default_counts()
        self._sampled: dict[str, int] = {}

    def begin(self) -> None:
        self._sampled.clear()
        for count in self._counts:
            _quietly(count.begin)
        self.sample()

    def sample(self) -> None:
        """Poll the allocators that keep no peak of their own (the sampler thread calls this)."""
        for count in self._counts:
            if count.sampled:
                used = _quietly(count.current)
                if used is not None:
                    self._sampled[count.name] = max(self._sampled.get(count.name, 0), used)

    def finish(self) -> DevicePeak | None:
        """The stage's peak, or None when no allocator was in use."""
        self.sample()
        peaks: dict[str, int] = {}
        for count in self._counts:
            found = [v for v in (_quietly(count.stage_peak), self._sampled.get(count.name)) if v is not None]
            if found:
                peaks[count.name] = max(found)
        if not peaks:
            return None
        named = [name for name, value in peaks.items() if value > 0] or list(peaks)
        return DevicePeak(sum(peaks.values()), "+".join(named))


def process_device_bytes(counts: Sequence[AllocatorCount] | None = None) -> int | None:
    """Bytes this process holds on the device now, over its allocators; None if none is in use."""
    counts = list(counts) if counts is not None else default_counts()
    _quietly(lambda: _rmm_counts(enable=True))
    found = [v for v in (_quietly(count.current) for count in counts) if v is not None]
    return sum(found) if found else None


# ---------------------------------------------------------------- the libraries' counters
def _rmm_counts(*, enable: bool) -> Any | None:
    """The statistics of the adaptor in RMM's current resource stack; with ``enable``, one is
    put on top first where the stack has none (never a second: new counters would start at
    zero and count frees of blocks the first one saw allocated)."""
    if "rmm" not in sys.modules:
        return None
    import rmm.mr
    import rmm.statistics

    adaptor = _statistics_adaptor(rmm.mr.get_current_device_resource(), rmm.mr.StatisticsResourceAdaptor)
    if adaptor is None and enable:
        rmm.statistics.enable_statistics()
        adaptor = _statistics_adaptor(rmm.mr.get_current_device_resource(), rmm.mr.StatisticsResourceAdaptor)
    return None if adaptor is None else adaptor.allocation_counts


def _statistics_adaptor(resource: Any, adaptor_type: type) -> Any | None:
    """The topmost statistics adaptor in the stack under ``resource`` (adaptors name theirs
    ``upstream_mr``), e.g. below a spill callback cuDF put on top."""
    while resource is not None:
        if isinstance(resource, adaptor_type):
            return resource
        resource = getattr(resource, "upstream_mr", None)
    return None


def _count(counts: Any, key: str) -> int:
    """A field of RMM's ``Statistics`` (a dict in older releases)."""
    return int(counts[key] if isinstance(counts, dict) else getattr(counts, key))


def _torch_cuda() -> Any | None:
    """``torch.cuda`` once PyTorch is imported and has made its CUDA context, else None."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return None
    return torch.cuda


def _torch_read(counter: str) -> int | None:
    cuda = _torch_cuda()
    if cuda is None:
        return None
    try:
        return int(getattr(cuda, counter)())
    except RuntimeError:                 # a pluggable allocator keeps no statistics
        return None


def _quietly(read: Any) -> Any:
    """A measurement that fails reads as "not in use": it must never fail the stage."""
    try:
        return read()
    except Exception:  # noqa: BLE001 - a library's counters failing is not the stage's failure
        return None
