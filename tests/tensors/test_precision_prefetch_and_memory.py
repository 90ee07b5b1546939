"""Three GPU behaviours checked on the CPU through the real code, with stand-ins only for what a
GPU would answer: the autocast dtype a pre-Ampere card gets, how long prefetched batches live,
and what the per-stage device-memory peak counts. The GPU halves are marked ``gpu``."""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import types
import weakref
from pathlib import Path

import pytest
import torch

from pipeline.backends import get_backend
from pipeline.backends.devices.device_memory import (
    CupyPoolCount, DevicePeak, ProcessDeviceMemory, RmmCount, TorchCount, process_device_bytes,
)
from pipeline.usage.memory import MemorySampler
from pipeline.tensors import batches as batches_module
from pipeline.tensors.batches import InFlightBatches, TensorBatches
from pipeline.tensors.fit_loop import autocast_dtype, mixed_precision

ROOT = Path(__file__).resolve().parents[2]
CUDA = torch.device("cuda")


# ------------------------------------------------------------- 8: bf16 only where it is native
def _t4_is_bf16_supported(including_emulation: bool = True) -> bool:
    """A T4 (sm_75): it can make bf16 tensors (emulated), so it says yes unless asked for native."""
    return including_emulation


def _a100_is_bf16_supported(including_emulation: bool = True) -> bool:
    return True


def _claim_cuda(monkeypatch) -> None:
    # GradScaler("cuda") turns itself off where CUDA is missing; the stand-in card "has" it.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)


def test_a_card_that_only_emulates_bf16_trains_in_fp16_with_a_grad_scaler(monkeypatch):
    _claim_cuda(monkeypatch)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", _t4_is_bf16_supported)
    dtype, scaler = mixed_precision("auto", CUDA)
    assert dtype is torch.float16
    assert scaler.is_enabled()
    assert autocast_dtype("auto", CUDA) is torch.float16


def test_a_card_with_native_bf16_trains_in_bf16_without_a_scaler(monkeypatch):
    _claim_cuda(monkeypatch)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", _a100_is_bf16_supported)
    dtype, scaler = mixed_precision("auto", CUDA)
    assert dtype is torch.bfloat16 and not scaler.is_enabled()


@pytest.mark.parametrize("major, want", [(7, torch.float16), (8, torch.bfloat16)])
def test_a_torch_without_the_emulation_argument_decides_by_compute_capability(monkeypatch, major, want):
    _claim_cuda(monkeypatch)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)     # the old signature
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (major, 5))
    assert autocast_dtype("auto", CUDA) is want


def test_the_installed_torch_takes_the_emulation_argument():
    # The floor (2.10) and 2.11 have it too (torch/cuda/__init__.py of their wheels).
    import inspect

    assert "including_emulation" in inspect.signature(torch.cuda.is_bf16_supported).parameters


# ------------------------------------------------------------- 9: prefetched batch lifetime
class FakeEvent:
    """A compute-stream event: pending until the test (or a synchronize) completes it."""

    def __init__(self) -> None:
        self.done = False
        self.synchronized = False

    def query(self) -> bool:
        return self.done

    def synchronize(self) -> None:
        self.synchronized = self.done = True


def test_a_prefetched_batch_lives_until_the_compute_stream_is_done_with_it(monkeypatch):
    events: list[FakeEvent] = []            # events[k]: recorded when the consumer moved past batch k
    monkeypatch.setattr(batches_module, "_compute_done", lambda stream: events.append(FakeEvent()) or events[-1])
    early: list[int] = []

    def freed(number: int) -> None:
        if number >= len(events) or not events[number].done:
            early.append(number)

    x = torch.arange(40 * 3, dtype=torch.float32).reshape(40, 3)
    iterator = TensorBatches([x, None, torch.arange(40)], 8, shuffle=False)._prefetched()   # 5 batches
    weak = []
    for number in range(3):
        batch = next(iterator)
        for tensor in (t for t in batch if t is not None):
            weakref.finalize(tensor, freed, number)
        weak.append([weakref.ref(t) for t in batch if t is not None])
        del batch
        gc.collect()
    # Batches 0 and 1 are retired with their events pending: dropped by the consumer, still alive.
    assert len(events) == 2 and all(ref() is not None for refs in weak for ref in refs)
    events[0].done = True
    next(iterator)                          # retires batch 2; batch 0's work is done, so it goes
    gc.collect()
    assert all(ref() is None for ref in weak[0])
    assert all(ref() is not None for refs in weak[1:] for ref in refs)
    list(iterator)                          # the rest; the end waits for every event
    gc.collect()
    assert early == [], f"batches freed before their compute finished: {early}"
    assert len(events) == 5 and all(event.done for event in events)


def test_in_flight_batches_are_bounded_by_waiting_for_the_oldest():
    held = InFlightBatches(limit=2)
    events = [FakeEvent() for _ in range(4)]
    tensors = [torch.zeros(3) for _ in range(4)]
    refs = [weakref.ref(t) for t in tensors]
    for tensor, event in zip(tensors, events):
        held.retire([tensor], event)
    del tensors, tensor
    gc.collect()
    # Four pending, room for two: the host waited on the two oldest before letting them go.
    assert [e.synchronized for e in events] == [True, True, False, False]
    assert [r() is None for r in refs] == [True, True, False, False]
    assert len(held) == 2
    events[2].done = True
    held.retire([], FakeEvent())
    assert len(held) == 2 and refs[2]() is None and not events[2].synchronized
    held.drain()
    assert len(held) == 0 and events[3].synchronized and refs[3]() is None


def test_a_consumer_that_stops_early_still_waits_before_the_batches_go(monkeypatch):
    events: list[FakeEvent] = []
    monkeypatch.setattr(batches_module, "_compute_done", lambda stream: events.append(FakeEvent()) or events[-1])
    staged = TensorBatches([torch.arange(50.0)], 10, shuffle=False)
    iterator = staged._prefetched()
    next(iterator), next(iterator)
    iterator.close()                    # the batch in hand is retired too, then everything waited for
    assert len(events) == 2 and all(e.synchronized or e.done for e in events)


def test_the_prefetch_path_still_yields_every_row_once_in_order():
    x = torch.arange(30.0).reshape(15, 2)
    got = torch.cat([b[0] for b in TensorBatches([x], 4, shuffle=False)._prefetched()])
    assert torch.equal(got, x)


PREFETCH_UNDER_RMM = textwrap.dedent("""
    import rmm, torch
    rmm.reinitialize(pool_allocator=True, initial_pool_size=2**28)
    from rmm.allocators.torch import rmm_torch_allocator
    # RMM's allocator for PyTorch: record_stream is a no-op under it, as on a Dask-CUDA worker
    # with rmm_allocator_external_lib_list=["torch"].
    torch.cuda.memory.change_current_allocator(rmm_torch_allocator)
    from pipeline.tensors.batches import TensorBatches
    rows, width, size = 64 * 60, 512, 64
    x = torch.arange(rows * width, dtype=torch.float32).reshape(rows, width)
    kept = []
    for (batch,) in TensorBatches([x], size, shuffle=False, device="cuda"):
        torch.cuda._sleep(20_000_000)      # the compute stream lags: later copies run meanwhile
        kept.append(batch.clone())          # reads the batch only after the sleep
    got = torch.cat(kept).cpu()
    bad = int((got != x).any(dim=1).sum())
    print("rows overwritten before they were read:", bad)
    raise SystemExit(1 if bad else 0)
""")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_prefetch_is_correct_under_an_allocator_that_ignores_record_stream():
    pytest.importorskip("rmm", reason="needs RMM for its PyTorch allocator")
    run = subprocess.run([sys.executable, "-c", PREFETCH_UNDER_RMM], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr


# ------------------------------------------------------------- 10: this process's own device bytes
class FakeCount:
    """An allocator's count: currents read in turn, and an exact peak where it keeps one."""

    def __init__(self, name: str, currents: list[int | None], exact: int | None = None,
                 sampled: bool = True) -> None:
        self.name, self._currents, self._exact, self.sampled = name, list(currents), exact, sampled
        self.begun = 0

    def begin(self) -> None:
        self.begun += 1

    def current(self) -> int | None:
        return self._currents.pop(0) if len(self._currents) > 1 else self._currents[0]

    def stage_peak(self) -> int | None:
        return self._exact


def test_the_stage_peak_adds_each_allocators_own_peak_and_names_them():
    rmm = FakeCount("rmm", [100, 700, 300])            # sampled: its high point was 700
    torch_count = FakeCount("torch", [None], exact=5000, sampled=False)
    cupy = FakeCount("cupy", [0])
    meter = ProcessDeviceMemory([rmm, torch_count, cupy])
    meter.begin()
    meter.sample()
    peak = meter.finish()
    assert peak == DevicePeak(5700, "rmm+torch")       # cupy held nothing: not named
    assert rmm.begun == torch_count.begun == 1


def test_no_allocator_in_use_means_no_device_number():
    meter = ProcessDeviceMemory([FakeCount("torch", [None], sampled=False), FakeCount("cupy", [None])])
    meter.begin()
    assert meter.finish() is None


def test_the_sampler_records_the_meters_peak_and_what_it_counts():
    count = FakeCount("rmm", [10, 20, 4096, 30])
    with MemorySampler(interval=3600, device_meter=ProcessDeviceMemory([count])) as sampler:
        sampler._sample()                # the background thread's step, taken by hand
        sampler._sample()
    assert sampler.peak_device == 4096 and sampler.peak_device_source == "rmm"


def _load_task(tmp_path):
    """The churn config's ``load`` stage, reading the shipped CSV by its absolute path."""
    from pipeline.config import load_config
    from pipeline.engine.executors import StageTask

    spec = load_config(ROOT / "configs" / "churn.yaml").stages["raw"]
    spec = spec.model_copy(update={"path": str(ROOT / "data" / "telco_customer_churn.csv")})
    return StageTask(name="raw", spec=spec, backend=get_backend("cpu"), seed=1, artifacts_dir=tmp_path)


def test_a_cpu_stage_records_no_device_peak(tmp_path):
    from pipeline.engine.executors import execute_stage

    outcome = execute_stage(_load_task(tmp_path), {})
    assert outcome.status == "succeeded", outcome.error
    assert outcome.peak_device_bytes is None and outcome.peak_device_source is None


def test_the_stage_outcome_carries_the_meters_source(tmp_path, monkeypatch):
    from pipeline.engine import executors as execution

    monkeypatch.setattr(execution, "ProcessDeviceMemory", lambda: ProcessDeviceMemory([FakeCount("torch", [64])]))
    outcome = execution.execute_stage(_load_task(tmp_path), {})
    assert (outcome.peak_device_bytes, outcome.peak_device_source) == (64, "torch")


# The real counters, with stand-ins for the libraries' answers.
class FakeStatistics:
    def __init__(self, current: int, peak: int) -> None:
        self.current_bytes, self.peak_bytes = current, peak


def _fake_rmm(monkeypatch, top):
    """``rmm`` whose current resource is ``top``; enable_statistics wraps it as RMM does."""
    class Adaptor:
        def __init__(self, upstream) -> None:
            self.upstream_mr = upstream
            self.allocation_counts = FakeStatistics(0, 0)

    state = types.SimpleNamespace(resource=top)
    mr = types.ModuleType("rmm.mr")
    mr.StatisticsResourceAdaptor = Adaptor
    mr.get_current_device_resource = lambda: state.resource
    statistics = types.ModuleType("rmm.statistics")

    def enable_statistics() -> None:
        if not isinstance(state.resource, Adaptor):
            state.resource = Adaptor(state.resource)

    statistics.enable_statistics = enable_statistics
    rmm = types.ModuleType("rmm")
    rmm.mr, rmm.statistics = mr, statistics
    for name, module in (("rmm", rmm), ("rmm.mr", mr), ("rmm.statistics", statistics)):
        monkeypatch.setitem(sys.modules, name, module)
    return state, Adaptor


def test_rmm_statistics_are_switched_on_once_and_read_for_the_stage(monkeypatch):
    state, adaptor = _fake_rmm(monkeypatch, object())
    count = RmmCount()
    count.begin()
    stats = state.resource
    assert isinstance(stats, adaptor)
    stats.allocation_counts = FakeStatistics(current=300, peak=900)     # a new high during the stage
    assert count.current() == 300 and count.stage_peak() == 900
    count.begin()                                                      # next stage: same adaptor
    assert state.resource is stats
    stats.allocation_counts = FakeStatistics(current=-50, peak=900)    # frees of older blocks
    assert count.current() == 0 and count.stage_peak() is None          # below the old high: sampled


def test_rmm_statistics_are_found_below_another_adaptor(monkeypatch):
    state, adaptor = _fake_rmm(monkeypatch, object())
    stats = adaptor(object())
    stats.allocation_counts = FakeStatistics(current=42, peak=42)
    state.resource = types.SimpleNamespace(upstream_mr=stats)           # e.g. a spill callback on top
    count = RmmCount()
    count.begin()
    assert state.resource.upstream_mr is stats and count.current() == 42


def test_rmm_is_not_read_where_it_was_never_imported(monkeypatch):
    monkeypatch.delitem(sys.modules, "rmm", raising=False)
    count = RmmCount()
    count.begin()
    assert count.current() is None and count.stage_peak() is None


def test_torch_counts_only_once_it_has_a_cuda_context(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: calls.append("read") or 1)
    count = TorchCount()
    count.begin()
    assert count.current() is None and count.stage_peak() is None and calls == []
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device=None: calls.append("reset"))
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: 8192)
    count.begin()
    assert calls == ["reset"] and count.current() == 1 and count.stage_peak() == 8192


def test_torch_under_a_pluggable_allocator_is_left_to_rmm(monkeypatch):
    def no_stats(device=None):
        raise RuntimeError("CUDAPluggableAllocator does not yet support getDeviceStats")

    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    for name in ("memory_allocated", "max_memory_allocated", "reset_peak_memory_stats"):
        monkeypatch.setattr(torch.cuda, name, no_stats)
    count = TorchCount()
    count.begin()
    assert count.current() is None and count.stage_peak() is None


def test_cupy_counts_bytes_in_arrays_not_the_pools_cache(monkeypatch):
    pool = types.SimpleNamespace(used_bytes=lambda: 1024, total_bytes=lambda: 10 * 1024)
    cupy = types.ModuleType("cupy")
    cupy.get_default_memory_pool = lambda: pool
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    assert CupyPoolCount().current() == 1024


def test_process_device_bytes_is_none_without_any_gpu_library_in_use(monkeypatch):
    for name in ("rmm", "cupy"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    assert process_device_bytes() is None


def _gpu_libraries() -> bool:
    try:
        from pipeline.backends import available_devices
    except ImportError:
        return False
    return "gpu" in available_devices() and torch.cuda.is_available()


@pytest.mark.gpu
@pytest.mark.skipif(not _gpu_libraries(), reason="needs a GPU with RAPIDS and CUDA PyTorch")
def test_on_a_gpu_each_stage_counts_its_own_allocations():
    rmm = pytest.importorskip("rmm")
    from pipeline.backends import get_backend

    backend = get_backend("gpu")
    torch.zeros(1, device="cuda")                                      # the context exists before
    with MemorySampler(device_meter=ProcessDeviceMemory()) as big:
        block = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")
        del block
    with MemorySampler(device_meter=ProcessDeviceMemory()) as small:
        torch.empty(2**20, dtype=torch.uint8, device="cuda")
    # Whatever earlier tests still hold is in both; the first stage's 256 MiB is not in the second.
    assert "torch" in big.peak_device_source and big.peak_device >= 256 * 2**20
    assert small.peak_device <= big.peak_device - 200 * 2**20
    with MemorySampler(device_meter=ProcessDeviceMemory()) as pooled:
        buffer = rmm.DeviceBuffer(size=128 * 2**20)                    # what cuDF allocates through
        pooled._sample()             # RMM is exact only at a new high: an earlier test may have had one
        del buffer
    assert "rmm" in pooled.peak_device_source and pooled.peak_device >= 128 * 2**20
    assert backend.device_memory_used() is not None
