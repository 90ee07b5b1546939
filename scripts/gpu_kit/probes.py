"""The probes: each runs one GPU path of the project through the project's own code.

Each probe runs in a process of its own (``python -m gpu_kit.probes NAME --work DIR --result
FILE``, started by ``probe.py``), so a crash, a CUDA error or a hung cluster ends only that
probe, and the Dask-CUDA probe starts its workers from a process with no CUDA context.
A probe returns named checks with what it observed; it passes when every check holds.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):                   # run as a file: make `gpu_kit` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpu_kit import probe_data  # noqa: E402


@dataclass
class Checks:
    """Named expectations and what was observed; the probe's outcome follows from them."""

    items: list[dict[str, Any]] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)

    def expect(self, name: str, ok: Any, **observed: Any) -> bool:
        self.items.append({"check": name, "ok": bool(ok), **observed})
        return bool(ok)

    def result(self) -> dict[str, Any]:
        failed = [c["check"] for c in self.items if not c["ok"]]
        if failed:
            reason = f"{len(failed)} of {len(self.items)} checks failed: {'; '.join(failed)}"
        else:
            reason = f"all {len(self.items)} checks passed"
        return {"status": "failed" if failed else "passed", "reason": reason, "checks": self.items,
                "details": self.details}


def failed(reason: str, **details: Any) -> dict[str, Any]:
    return {"status": "failed", "reason": reason, "checks": [], "details": details}


def _cuda_torch() -> tuple[Any, str | None]:
    """torch, and why it cannot run on CUDA here (None when it can)."""
    import torch

    if not torch.cuda.is_available():
        return torch, (f"torch {torch.__version__} sees no CUDA device "
                       f"({'built for CUDA ' + torch.version.cuda if torch.version.cuda else 'a CPU build'})")
    return torch, None


def _device_details(torch: Any) -> dict[str, Any]:
    return {"torch": torch.__version__, "torch_cuda": torch.version.cuda, "gpu": torch.cuda.get_device_name(),
            "capability": ".".join(map(str, torch.cuda.get_device_capability())),
            "bf16_supported": torch.cuda.is_bf16_supported()}


def _run(config: dict[str, Any], work: Path, name: str) -> Any:
    from pipeline import run_pipeline

    path = probe_data.write_config(work / f"{name}.yaml", config)
    return run_pipeline(path, runs_dir=work / "runs", cache=False)


def _stage_summary(result: Any) -> dict[str, Any]:
    return {name: {"status": s.status, "seconds": s.seconds, "peak_device_bytes": s.peak_device_bytes}
            for name, s in result.manifest.stages.items()}


# ============================================================================ (a) torch stage
def probe_torch_stage(work: Path) -> dict[str, Any]:
    """The ``torch`` stage (library API, device: cuda) on generated data: trained on the GPU
    under autocast in the dtype ``autocast_dtype`` chooses for this card."""
    torch, why_not = _cuda_torch()
    if why_not:
        return failed(why_not)
    from pipeline.tensors.fit_loop import autocast_dtype

    checks = Checks(details=_device_details(torch))
    data = work / "churn.csv"
    probe_data.churn_table(20_000).to_csv(data, index=False)
    config = probe_data.config("probe_torch", str(data), "cpu", {"mlp": probe_data.torch_stage("cuda")},
                               ops=probe_data.feature_ops(one_hot=False))
    expected = autocast_dtype("auto", torch.device("cuda"))
    outputs: Counter[str] = Counter()

    def record_linear(module: Any, inputs: Any, output: Any) -> None:
        if isinstance(module, torch.nn.Linear) and isinstance(output, torch.Tensor):
            outputs[f"{str(output.dtype).removeprefix('torch.')}@{output.device.type}"] += 1

    torch.cuda.reset_peak_memory_stats()
    hook = torch.nn.modules.module.register_module_forward_hook(record_linear)
    try:
        result = _run(config, work, "torch")
    finally:
        hook.remove()
    record = result.manifest.stages["mlp"]
    facts = record.facts
    names = {torch.bfloat16: "bf16", torch.float16: "fp16", None: "fp32"}
    wanted = f"{str(expected).removeprefix('torch.')}@cuda"
    checks.expect("the torch stage succeeded", record.status == "succeeded", status=record.status, error=record.error)
    checks.expect("the stage trained on cuda", str(facts.get("device", "")).startswith("cuda"), device=facts.get("device"))
    checks.expect("precision is the autocast dtype for this card", facts.get("precision") == names[expected],
                  precision=facts.get("precision"), expected=names[expected])
    checks.expect("linear layers ran in that dtype on cuda during training", outputs[wanted] > 0,
                  linear_outputs=dict(outputs))
    module = result.outputs["mlp"].estimator.module
    checks.expect("the trained weights are on cuda", next(module.parameters()).device.type == "cuda",
                  weights_device=str(next(module.parameters()).device))
    checks.expect("PyTorch allocated GPU memory", torch.cuda.max_memory_allocated() > 0,
                  peak_allocated_bytes=torch.cuda.max_memory_allocated())
    # NVML usage sampling: the stage's record holds each GPU's readings over the stage.
    gpus = (record.usage or {}).get("gpus") or []
    checks.expect("NVML usage sampling recorded the GPU for the stage",
                  bool(gpus) and all((d.get("memory_peak_bytes") or 0) > 0 for d in gpus), usage=record.usage)
    checks.details.update({"epochs_run": facts.get("epochs_run"), "best_epoch": facts.get("best_epoch"),
                           "fit_seconds": facts.get("fit_seconds"), "bytes_copied": facts.get("bytes_copied"),
                           "metrics": result.manifest.metrics, "stages": _stage_summary(result)})
    return checks.result()


# ============================================================================ (b) CuPy -> torch
_SLOW_FILL = r"""
extern "C" __global__ void slow_fill(float* out, long long n, float value, long long spin) {
    long long start = clock64();
    while (clock64() - start < spin) { }
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)blockDim.x * gridDim.x) {
        out[i] = value;
    }
}
"""


class DLPackSpy:
    """A CuPy array that records the stream its consumer passes to ``__dlpack__``."""

    def __init__(self, array: Any) -> None:
        self._array = array
        self.streams: list[Any] = []

    def __dlpack__(self, **kwargs: Any) -> Any:
        capsule = self._array.__dlpack__(**kwargs)
        self.streams.append(kwargs.get("stream"))
        return capsule

    def __dlpack_device__(self) -> Any:
        return self._array.__dlpack_device__()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._array, name)


def handoff_backend() -> tuple[Any, str]:
    """The GPU backend when RAPIDS imports; else the CPU backend's class with CuPy arrays, so
    the hand-off still runs through ``Backend.to_torch`` and ``pipeline.tensors.to_torch``."""
    try:
        from pipeline.backends import get_backend

        return get_backend("gpu"), "GpuBackend"
    except Exception as exc:  # noqa: BLE001 - RAPIDS missing or broken: say which and go on
        import cupy

        from pipeline.backends.cpu import CpuBackend

        class CupyArrays(CpuBackend):
            name = "gpu"
            array = cupy

            def data_address(self, array: Any) -> int:
                return int(array.data.ptr)

        return CupyArrays(), f"CPU backend class with CuPy arrays (GPU backend unavailable: {type(exc).__name__})"


def probe_cupy_handoff(work: Path) -> dict[str, Any]:
    """``pipeline.tensors.to_torch`` on CuPy arrays: zero copy, and the DLPack stream handshake
    that orders PyTorch's stream after the work CuPy queued on its own."""
    torch, why_not = _cuda_torch()
    if why_not:
        return failed(why_not)
    import cupy as cp

    from pipeline.tensors.handoff import to_torch

    backend, backend_note = handoff_backend()
    checks = Checks(details={**_device_details(torch), "cupy": cp.__version__, "backend": backend_note})
    matrix = cp.arange(4096 * 64, dtype=cp.float32).reshape(4096, 64)
    tensor, record = to_torch(matrix, backend, "probe.X")
    checks.expect("the hand-off is zero-copy", record.zero_copy and record.bytes_copied == 0,
                  zero_copy=record.zero_copy, bytes_copied=record.bytes_copied, note=record.note)
    checks.expect("the tensor starts at the CuPy array's address", tensor.data_ptr() == matrix.data.ptr,
                  tensor_ptr=tensor.data_ptr(), array_ptr=int(matrix.data.ptr))
    checks.expect("the tensor is on cuda with the array's shape", tensor.is_cuda and tuple(tensor.shape) == matrix.shape,
                  device=str(tensor.device), shape=list(tensor.shape))
    tensor[0, 0] = -1.0
    torch.cuda.synchronize()
    checks.expect("a write through the tensor shows in the array", float(matrix[0, 0]) == -1.0)

    n = 1 << 24
    target = cp.zeros(n, dtype=cp.float32)
    cp.cuda.Device().synchronize()
    kernel = cp.RawKernel(_SLOW_FILL, "slow_fill")
    producer = cp.cuda.Stream(non_blocking=True)
    consumer = torch.cuda.Stream()
    spin = 200_000_000                    # about 0.1 s of clock cycles before the fill
    spy = DLPackSpy(target)
    # CuPy orders the consumer after the work on CuPy's *current* stream: the fill is queued on
    # a non-blocking stream that is current at the hand-off, as a producer's own stream would be.
    with producer, torch.cuda.stream(consumer):
        kernel((256,), (256,), (target, cp.int64(n), cp.float32(7.0), cp.int64(spin)))
        shared, _ = to_torch(spy, backend, "probe.slow")
        written = torch.count_nonzero(shared == 7.0)   # on torch's stream; no device-wide synchronize
        producer_busy = not producer.done
    count = int(written.item())
    producer.synchronize()
    checks.expect("torch passed its current stream to CuPy's __dlpack__", spy.streams[-1:] == [consumer.cuda_stream],
                  passed=spy.streams, torch_stream=consumer.cuda_stream)
    checks.expect("torch read what CuPy wrote on its own stream", count == n, elements_written=count, expected=n,
                  producer_still_running_at_handoff=producer_busy)
    checks.details["control_without_handshake"] = _race_control(cp, torch, kernel, n, spin)
    return checks.result()


def _race_control(cp: Any, torch: Any, kernel: Any, n: int, spin: int) -> dict[str, Any]:
    """The same read with DLPack's "no synchronization" stream (-1): shows the probe can see a
    race (fewer than n elements written), so the handshake check is not passing by luck."""
    try:
        target = cp.zeros(n, dtype=cp.float32)
        cp.cuda.Device().synchronize()
        producer = cp.cuda.Stream(non_blocking=True)
        consumer = torch.cuda.Stream()
        with producer, torch.cuda.stream(consumer):
            kernel((256,), (256,), (target, cp.int64(n), cp.float32(7.0), cp.int64(spin)))
            written = torch.count_nonzero(torch.from_dlpack(target.__dlpack__(stream=-1)) == 7.0)
        count = int(written.item())
        producer.synchronize()
        return {"elements_written": count, "raced": count != n}
    except Exception as exc:  # noqa: BLE001 - a control only: record, never fail the probe on it
        return {"error": f"{type(exc).__name__}: {exc}"}


# ============================================================================ (c) pinned prefetch
def probe_pinned_prefetch(work: Path) -> dict[str, Any]:
    """``TensorBatches`` from host tensors to cuda: pinned double buffers, copies on a side
    stream, and batches equal to the source rows in the seeded order."""
    torch, why_not = _cuda_torch()
    if why_not:
        return failed(why_not)
    from pipeline.tensors import batches as batches_module
    from pipeline.tensors.batches import TensorBatches

    checks = Checks(details=_device_details(torch))
    rows, batch_size, seed = 100_003, 4096, 11
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(rows, 24, generator=generator)
    codes = torch.randint(0, 40, (rows, 3), generator=generator)
    y = (torch.rand(rows, generator=generator) > 0.5).float()
    buffers: list[bool] = []
    original = batches_module._host_buffer

    def spy(t: Any, n: int, pin: bool) -> Any:
        buffer = original(t, n, pin)
        buffers.append(bool(buffer.is_pinned()))
        return buffer

    batches_module._host_buffer = spy
    try:
        batches = TensorBatches([x, codes, None, y], batch_size, generator=torch.Generator().manual_seed(seed),
                                device="cuda", pin_memory=True)
        got: list[list[Any]] = []
        devices = set()
        for batch in batches:
            devices.update(str(b.device) for b in batch if b is not None)
            got.append([None if b is None else b.cpu() for b in batch])
    finally:
        batches_module._host_buffer = original
    order = torch.randperm(rows, generator=torch.Generator().manual_seed(seed))
    checks.expect("host tensors cross to cuda (the prefetch path)", batches.crosses_devices,
                  source=str(batches.source), device=str(batches.device))
    checks.expect("two pinned buffers per tensor", len(buffers) == 6 and all(buffers), buffers=buffers)
    checks.expect("every batch is on cuda", devices and all(d.startswith("cuda") for d in devices), devices=sorted(devices))
    checks.expect("as many batches as len() says", len(got) == len(batches), batches=len(got), expected=len(batches))
    equal = {name: bool(torch.equal(torch.cat([g[i] for g in got]), source[order]))
             for name, i, source in (("x", 0, x), ("codes", 1, codes), ("y", 3, y))}
    checks.expect("the batches are the source rows in the seeded order", all(equal.values()), equal=equal)
    checks.expect("a None tensor stays None", all(g[2] is None for g in got))
    checks.details["throughput"] = _prefetch_throughput(torch, TensorBatches)
    return checks.result()


def _prefetch_throughput(torch: Any, tensor_batches: Any) -> dict[str, Any]:
    """Host-to-GPU batches per second, pinned and not (a measurement, not a check)."""
    x = torch.randn(1_000_000, 64)
    measured = {}
    for pin in (True, False):
        batches = tensor_batches([x], 16384, generator=torch.Generator().manual_seed(0), device="cuda", pin_memory=pin)
        for _ in batches:                                   # warm-up epoch
            pass
        torch.cuda.synchronize()
        started = time.perf_counter()
        checksum = torch.zeros((), device="cuda")
        for (xb,) in batches:
            checksum += xb[0, 0]
        torch.cuda.synchronize()
        seconds = time.perf_counter() - started
        measured["pinned" if pin else "pageable"] = {"seconds": round(seconds, 4),
                                                    "GB_per_s": round(x.numel() * 4 / seconds / 1e9, 2)}
    return measured


# ============================================================================ (d) XGBoost on cuda
class CupyParquet:
    """Reads a Parquet file's columns as CuPy arrays: the reader slot of the project's
    ``BatchSource``, so ``ParquetBatches`` hands XGBoost CuPy batches."""

    def read(self, path: str, *, format: str, columns: list[str]) -> Any:
        import cupy as cp
        import pyarrow.parquet as pq

        table = pq.read_table(path, columns=columns)
        return CupyColumns({name: cp.asarray(table.column(name).to_numpy()) for name in columns})


@dataclass
class CupyColumns:
    columns: dict[str, Any]

    def __getitem__(self, key: Any) -> Any:
        import cupy as cp

        if isinstance(key, list):
            return cp.ascontiguousarray(cp.stack([self.columns[k] for k in key], axis=1))
        return self.columns[key]


def probe_xgboost_cuda(work: Path) -> dict[str, Any]:
    """XGBoost with the registry's GPU parameters (device="cuda"), in memory and through
    external memory: the project's ``ParquetBatches`` yielding CuPy batches into an
    ``ExtMemQuantileDMatrix``; trained a few rounds, then predicted on the GPU."""
    import cupy as cp
    import xgboost

    from pipeline.distributed.xgboost_external import BatchSource, ParquetBatches, booster_params
    from pipeline.metrics import binary_metrics
    from pipeline.models.registry import MODELS

    checks = Checks(details={"xgboost": xgboost.__version__, "cupy": cp.__version__,
                             "build": {k: v for k, v in xgboost.build_info().items() if k.startswith("USE_")}})
    files = probe_data.numeric_batches(6, 20_000, 12, work / "batches")
    train_files, valid_files, test_file = files[:4], files[4:5], files[5]
    features = tuple(f"f{j}" for j in range(12))
    kwargs, _ = MODELS["xgboost"].translate({"n_estimators": 40, "max_depth": 5, "learning_rate": 0.2}, "gpu", seed=0)
    checks.expect("the registry's GPU parameters ask for device cuda", kwargs.get("device") == "cuda", params=kwargs)
    reader = CupyParquet()
    test = reader.read(str(test_file), format="parquet", columns=[*features, "y"])
    x_test, y_test = test[list(features)], cp.asnumpy(test["y"])

    in_memory = xgboost.XGBClassifier(**kwargs)
    train = [reader.read(str(f), format="parquet", columns=[*features, "y"]) for f in train_files]
    in_memory.fit(cp.concatenate([t[list(features)] for t in train]), cp.concatenate([t["y"] for t in train]))
    auc_memory = binary_metrics(y_test, _host(in_memory.predict_proba(x_test))[:, 1])["roc_auc"]
    checks.expect("in memory: the booster ran on cuda", _booster_device(in_memory.get_booster()).startswith("cuda"),
                  device=_booster_device(in_memory.get_booster()))

    seen: list[str] = []

    class RecordingBatches(ParquetBatches):
        def next(self, input_data: Callable[..., Any]) -> bool:
            def record(**batch: Any) -> Any:
                seen.append(type(batch["data"]).__module__.split(".")[0])
                return input_data(**batch)
            return super().next(record)

    source = BatchSource(features, "y", reader)
    (work / "cache").mkdir()                 # XGBoost writes its pages under the cache prefix
    started = time.perf_counter()
    dtrain = xgboost.ExtMemQuantileDMatrix(RecordingBatches([str(f) for f in train_files], source,
                                                            str(work / "cache" / "train")), max_bin=256)
    dvalid = xgboost.ExtMemQuantileDMatrix(RecordingBatches([str(f) for f in valid_files], source,
                                                            str(work / "cache" / "valid")), ref=dtrain, max_bin=256)
    params, rounds, _ = booster_params(xgboost.XGBClassifier(**kwargs))
    history: dict[str, Any] = {}
    booster = xgboost.train(params, dtrain, num_boost_round=rounds, evals=[(dvalid, "valid")],
                            evals_result=history, verbose_eval=False)
    predicted = booster.inplace_predict(x_test)
    seconds = time.perf_counter() - started
    auc_external = binary_metrics(y_test, _host(predicted))["roc_auc"]
    checks.expect("external memory: every batch XGBoost read was a CuPy array", seen and set(seen) == {"cupy"},
                  batch_types=dict(Counter(seen)))
    checks.expect("external memory: all training rows were read", dtrain.num_row() == 4 * 20_000, rows=dtrain.num_row())
    checks.expect("external memory: the booster ran on cuda", _booster_device(booster).startswith("cuda"),
                  device=_booster_device(booster))
    checks.expect("external memory: predictions on the GPU come back as CuPy", type(predicted).__module__.startswith("cupy"),
                  type=type(predicted).__module__)
    checks.expect("both ways learn the data (test ROC AUC > 0.9)", auc_memory > 0.9 and auc_external > 0.9,
                  auc_in_memory=round(auc_memory, 4), auc_external_memory=round(auc_external, 4))
    checks.expect("both ways agree (ROC AUC within 0.02)", abs(auc_memory - auc_external) < 0.02)
    checks.details.update({"rounds": rounds, "external_memory_seconds": round(seconds, 3),
                           "valid_logloss_last": history.get("valid", {}).get("logloss", [None])[-1],
                           "batches_read": len(seen), "params": {k: str(v) for k, v in params.items()}})
    return checks.result()


def _host(values: Any) -> Any:
    import numpy as np

    return np.asarray(values.get() if hasattr(values, "get") else values)


def _booster_device(booster: Any) -> str:
    config = json.loads(booster.save_config())
    return str(config["learner"]["generic_param"].get("device", ""))


# ============================================================================ (e) Dask-CUDA + RMM
POOL_BYTES = "1GB"


def rmm_pool_task(nbytes: int) -> dict[str, Any]:
    """On a Dask-CUDA worker: allocate with torch and with CuPy, and read RMM's statistics
    (the pool dask-cuda set up is the upstream of the statistics adaptor pushed here)."""
    import cupy
    import rmm
    import rmm.statistics
    import torch

    chain, resource = [], rmm.mr.get_current_device_resource()
    pool = None
    while resource is not None:
        chain.append(type(resource).__name__)
        if isinstance(resource, rmm.mr.PoolMemoryResource):
            pool = resource
        resource = getattr(resource, "upstream_mr", None)
    allocator = getattr(cupy.cuda, "get_allocator", lambda: None)()
    free_before = cupy.cuda.runtime.memGetInfo()[0]
    stats: dict[str, Any] = {}
    with rmm.statistics.statistics():
        stats["start"] = _counts(rmm.statistics.get_statistics())
        by_torch = torch.ones(nbytes // 4, dtype=torch.float32, device="cuda")
        torch.cuda.synchronize()
        stats["after_torch"] = _counts(rmm.statistics.get_statistics())
        by_cupy = cupy.ones(nbytes // 4, dtype=cupy.float32)
        cupy.cuda.runtime.deviceSynchronize()
        stats["after_cupy"] = _counts(rmm.statistics.get_statistics())
        total = float(by_torch.sum().item() + torch.from_dlpack(by_cupy).sum().item())
        free_during = cupy.cuda.runtime.memGetInfo()[0]
        del by_torch, by_cupy
        torch.cuda.synchronize()
        stats["after_free"] = _counts(rmm.statistics.get_statistics())
    return {
        "resource_chain": chain, "pool_size": pool.pool_size() if pool is not None else None,
        "cupy_allocator": getattr(allocator, "__qualname__", repr(allocator)),
        "stats": stats, "sum": total, "expected_sum": float(2 * (nbytes // 4)),
        "device_free_change_bytes": int(free_before - free_during),
    }


def _counts(statistics: Any) -> dict[str, int]:
    """RMM's allocation counters as a plain dict."""
    fields = ("current_bytes", "current_count", "peak_bytes", "peak_count", "total_bytes", "total_count")
    return {name: int(getattr(statistics, name)) for name in fields}


def probe_dask_cuda_rmm(work: Path) -> dict[str, Any]:
    """A LocalCUDACluster started by the project's ``open_cluster`` with an RMM pool shared by
    torch and CuPy (``rmm_allocator_external_lib_list``); a task allocates with both."""
    from pipeline.backends.clusters.startup import local_cuda_cluster_options, open_cluster
    from pipeline.config.schema import ClusterConfig

    config = ClusterConfig(n_workers=1, rmm_pool_size=POOL_BYTES)
    options = local_cuda_cluster_options(config)
    checks = Checks(details={"cluster_options": {k: str(v) for k, v in options.items()}})
    checks.expect("torch and cupy are routed to the RMM pool", options.get("rmm_allocator_external_lib_list") == ["torch", "cupy"],
                  libraries=options.get("rmm_allocator_external_lib_list"))
    nbytes = 64 * 1024 * 1024
    started = time.perf_counter()
    session = open_cluster(config, "gpu")
    try:
        checks.details["cluster"] = session.details
        checks.details["start_seconds"] = round(time.perf_counter() - started, 2)
        checks.expect("a LocalCUDACluster with one worker", session.details.get("kind") == "LocalCUDACluster"
                      and session.details.get("workers") == 1, kind=session.details.get("kind"),
                      workers=session.details.get("workers"))
        checks.expect("workers advertise a GPU resource", session.gpu_resources())
        seen = session.client.submit(rmm_pool_task, nbytes, pure=False).result(timeout=300)
    finally:
        session.close()
    stats = seen["stats"]
    torch_bytes = stats["after_torch"]["total_bytes"] - stats["start"]["total_bytes"]
    cupy_bytes = stats["after_cupy"]["total_bytes"] - stats["after_torch"]["total_bytes"]
    checks.details["worker"] = seen
    checks.expect("the worker's memory resource is an RMM pool", seen["pool_size"] is not None,
                  resource_chain=seen["resource_chain"], pool_size=seen["pool_size"])
    checks.expect("CuPy allocates through RMM", "rmm_cupy_allocator" in seen["cupy_allocator"],
                  allocator=seen["cupy_allocator"])
    checks.expect("torch's allocation came from the pool", torch_bytes >= nbytes, bytes=torch_bytes, asked=nbytes)
    checks.expect("CuPy's allocation came from the pool", cupy_bytes >= nbytes, bytes=cupy_bytes, asked=nbytes)
    checks.expect("both were freed back to the pool", stats["after_free"]["current_bytes"] < nbytes,
                  current_bytes=stats["after_free"]["current_bytes"])
    checks.expect("the shared tensors hold what was written", seen["sum"] == seen["expected_sum"])
    return checks.result()


# ============================================================================ (f) RAPIDS stages
def probe_rapids_stages(work: Path) -> dict[str, Any]:
    """``pipeline run`` with device gpu on generated data: partitioned data on a LocalCUDACluster
    (Dask-cuDF, XGBoost external memory on the worker), then in memory with cuDF features, cuML
    and XGBoost models and the torch stage. The cluster run goes first, from a process with no
    CUDA context yet, as ``pipeline run`` starts one."""
    checks = Checks()
    table = probe_data.churn_table(30_000)
    folder = work / "parts"
    folder.mkdir()
    for index, chunk in enumerate(range(0, len(table), 7_500)):
        table.iloc[chunk:chunk + 7_500].to_csv(folder / f"part-{index}.csv", index=False)
    xgb = {"kind": "train", "inputs": ["features"], "model": "xgboost", "params": {"n_estimators": 50}}
    partitioned = probe_data.config(
        "probe_rapids_partitioned", str(folder / "part-*.csv"), "gpu", {"xgb": xgb}, partitioned=True,
        cluster={"n_workers": 1}, ops=probe_data.feature_ops(one_hot=False))
    result = _run(partitioned, work, "rapids_partitioned")
    stages = result.manifest.stages
    checks.expect("partitioned: every stage succeeded on a LocalCUDACluster",
                  all(s.status == "succeeded" for s in stages.values())
                  and (result.manifest.cluster or {}).get("kind") == "LocalCUDACluster",
                  stages={n: s.status for n, s in stages.items()}, cluster=result.manifest.cluster)
    checks.details["partitioned"] = {"metrics": result.manifest.metrics, "xgb": stages["xgb"].facts,
                                     "stages": _stage_summary(result)}

    data = work / "churn.csv"
    table.to_csv(data, index=False)
    models = {
        "logreg": {"kind": "train", "inputs": ["features"], "model": "logistic_regression"},
        "forest": {"kind": "train", "inputs": ["features"], "model": "random_forest", "params": {"n_estimators": 50}},
        "xgb": xgb,
        "mlp": probe_data.torch_stage("auto"),
    }
    result = _run(probe_data.config("probe_rapids", str(data), "gpu", models), work, "rapids")
    stages = result.manifest.stages
    checks.expect("in memory: the run used the GPU backend", result.manifest.device.name == "gpu",
                  device=result.manifest.device.model_dump())
    checks.expect("in memory: every stage succeeded", all(s.status == "succeeded" for s in stages.values()),
                  stages={n: s.status for n, s in stages.items()})
    estimators = {n: stages[n].facts.get("estimator") for n in ("logreg", "forest", "xgb")}
    checks.expect("in memory: cuML trained the linear model and the forest",
                  all(str(estimators[n]).startswith("cuml") for n in ("logreg", "forest")), estimators=estimators)
    mlp = stages["mlp"].facts
    checks.expect("in memory: cuDF -> CuPy -> torch without a copy", mlp.get("handoffs") and mlp.get("bytes_copied") == 0,
                  bytes_copied=mlp.get("bytes_copied"), handoffs=len(mlp.get("handoffs", [])), device=mlp.get("device"))
    checks.details["in_memory"] = {"metrics": result.manifest.metrics, "stages": _stage_summary(result)}
    return checks.result()


# ============================================================================ (g) DDP with NCCL
def probe_torch_ddp(work: Path) -> dict[str, Any]:
    """The ``torch`` stage under DDP with NCCL, two ways: one rank per LocalCUDACluster worker
    (first, while this process has no CUDA context, as a run starts its cluster), then local
    ranks, one per visible GPU (rank r on ``cuda:r``), through ``pipeline run``. One probe,
    not two: the results channel takes eight files."""
    from importlib.util import find_spec

    cluster_device = "gpu" if find_spec("dask_cuda") is not None else None
    torch, why_not = _cuda_torch()
    if why_not:
        return failed(why_not)
    return ddp_checks(work, "cuda", torch.cuda.device_count(), cluster_device=cluster_device,
                      details=_device_details(torch), skip_cluster_why="dask_cuda is not installed")


def ddp_checks(work: Path, device: str, ranks: int, *, cluster_device: str | None,
               details: dict[str, Any] | None = None, skip_cluster_why: str = "",
               rows: int = 20_000) -> dict[str, Any]:
    """The DDP checks on ``device`` ("cuda": NCCL, one rank per GPU; "cpu": gloo, ``ranks``
    processes), the cluster's first when ``cluster_device`` names one, on a churn table of
    ``rows`` rows. The probe runs them on CUDA; the test suite runs the same code on CPUs (on a
    smaller table), so a fault of the probe itself shows there."""
    if cluster_device is None:
        cluster: dict[str, Any] = {"skipped": skip_cluster_why or "no cluster asked for"}
    else:
        try:
            cluster = _ddp_on_cluster(work, cluster_device, device, rows)
        except Exception as exc:  # noqa: BLE001 - the local ranks are still worth probing
            cluster = {"checks": [{"check": "the training on the cluster ran", "ok": False,
                                   "error": f"{type(exc).__name__}: {exc}".splitlines()[0][:500],
                                   "traceback": traceback.format_exc()[-4000:]}]}
    backend = "nccl" if device == "cuda" else "gloo"
    rank0 = "cuda:0" if device == "cuda" else "cpu"
    checks = Checks(details={**(details or {}), "gpus" if device == "cuda" else "ranks": ranks, "cluster": cluster})
    for item in cluster.get("checks", []):
        checks.items.append({**item, "check": f"cluster: {item['check']}"})
    data = work / "churn.csv"
    probe_data.churn_table(rows).to_csv(data, index=False)
    stage = {**probe_data.torch_stage(device), "distributed": {"processes": ranks, "launch": "local"}}
    config = probe_data.config("probe_ddp", str(data), "cpu", {"mlp": stage},
                               ops=probe_data.feature_ops(one_hot=False))
    result = _run(config, work, "ddp_local")
    record = result.manifest.stages["mlp"]
    ddp = record.facts.get("distributed") or {}
    checks.expect("the DDP torch stage succeeded", record.status == "succeeded", status=record.status,
                  error=record.error)
    checks.expect(f"{backend.upper()} carried the collectives", ddp.get("backend") == backend,
                  backend=ddp.get("backend"))
    checks.expect("one rank per visible GPU" if device == "cuda" else "the ranks asked for", ddp.get("ranks") == ranks,
                  ranks=ddp.get("ranks"), wanted=ranks)
    checks.expect(f"rank 0 trained on {rank0}", str(record.facts.get("device")) == rank0,
                  device=record.facts.get("device"))
    # The run's metrics: {"models": {name: {metric: value}}, "splits": ..., "best": ...}.
    scored = ((result.manifest.metrics or {}).get("models") or {}).get("mlp") or {}
    checks.expect("the model was evaluated", 0.5 < (scored.get("roc_auc") or 0.0) <= 1.0,
                  roc_auc=scored.get("roc_auc"))
    checks.details.update({"distributed": ddp, "fit_seconds": record.facts.get("fit_seconds")})
    return checks.result()


def _ddp_on_cluster(work: Path, cluster_device: str, device: str, rows: int = 20_000) -> dict[str, Any]:
    """The MLP trained by one rank per worker of a local cluster (``launch: cluster``): on a
    LocalCUDACluster each rank on its worker's own GPU, which dask-cuda makes device 0 of what
    the worker sees. The session's client is made current, as a run's stages find theirs: the
    cluster's client is not the process's default, and a ``launch: cluster`` training looks
    for the current one."""
    from pipeline.backends import get_backend
    from pipeline.backends.clusters.startup import open_cluster
    from pipeline.config.schema import ClusterConfig
    from pipeline.stages import build_features, evaluate_models, load_table, split_frame
    from pipeline.stages.torch_mlp import train_torch

    session = open_cluster(ClusterConfig() if cluster_device == "gpu" else ClusterConfig(n_workers=2), cluster_device)
    try:
        checks = Checks(details={"cluster": session.details})
        backend = get_backend("cpu")
        data = work / "churn_cluster.csv"
        probe_data.churn_table(rows).to_csv(data, index=False)
        frame = load_table(data, backend=backend)
        split = split_frame(frame, probe_data.TARGET, positive="Yes", test=0.2, valid=0.1, seed=7, backend=backend)
        features = build_features(split, probe_data.feature_ops(one_hot=False), id_column="customer")
        stage = {k: v for k, v in probe_data.torch_stage(device).items() if k not in ("kind", "inputs")}
        with session.client.as_current():
            trained = train_torch(features, name="mlp", distributed={"launch": "cluster"}, **stage)
        ddp = trained.distributed or {}
        workers = session.details.get("workers")
        backend_name = "nccl" if device == "cuda" else "gloo"
        checks.expect(f"{backend_name.upper()} carried the collectives", ddp.get("backend") == backend_name,
                      backend=ddp.get("backend"))
        checks.expect("one rank per worker", ddp.get("ranks") == workers and ddp.get("launch") == "Dask workers",
                      ranks=ddp.get("ranks"), workers=workers, launch=ddp.get("launch"))
        rank0 = "cuda:0" if device == "cuda" else "cpu"
        checks.expect(f"rank 0 trained on {rank0} (its worker's device 0)", trained.fit_result.get("device") == rank0,
                      device=trained.fit_result.get("device"))
        auc = evaluate_models([trained]).metrics["mlp"]["roc_auc"]
        checks.expect("the model scores the test split", 0.5 < auc <= 1.0, roc_auc=auc)
        checks.details["distributed"] = ddp
    finally:
        session.close()
    return {"checks": checks.items, **checks.details}


# ============================================================================ registry
@dataclass(frozen=True)
class Probe:
    name: str
    title: str
    run: Callable[[Path], dict[str, Any]]
    needs: tuple[str, ...] = ()          # modules that must be installed, else skipped


PROBES: dict[str, Probe] = {p.name: p for p in (
    Probe("torch_stage", "(a) torch stage on CUDA with autocast", probe_torch_stage, ("torch",)),
    Probe("cupy_handoff", "(b) CuPy -> torch hand-off: zero copy, DLPack stream handshake", probe_cupy_handoff,
          ("torch", "cupy")),
    Probe("pinned_prefetch", "(c) pinned host -> GPU prefetch of TensorBatches", probe_pinned_prefetch, ("torch",)),
    Probe("xgboost_cuda", "(d) XGBoost device=cuda, in memory and external memory with CuPy batches",
          probe_xgboost_cuda, ("xgboost", "cupy")),
    Probe("dask_cuda_rmm", "(e) LocalCUDACluster with an RMM pool shared by torch and CuPy", probe_dask_cuda_rmm,
          ("dask_cuda", "rmm", "torch", "cupy")),
    Probe("rapids_stages", "(f) cuDF/cuML stages: pipeline run with device gpu", probe_rapids_stages,
          ("cudf", "cuml", "dask_cudf")),
    Probe("torch_ddp", "(g) torch stage under DDP with NCCL: a rank per LocalCUDACluster worker, local ranks",
          probe_torch_ddp, ("torch",)),
)}


def run_probe(name: str, work: Path) -> dict[str, Any]:
    """Run one probe here; any exception is the probe failing, with its traceback."""
    try:
        return PROBES[name].run(work)
    except Exception as exc:  # noqa: BLE001 - every failure is a result to report
        return failed(f"{type(exc).__name__}: {exc}".splitlines()[0][:500],
                      traceback=traceback.format_exc()[-4000:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run one probe (probe.py starts this in a process of its own).")
    parser.add_argument("name", choices=sorted(PROBES))
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--result", type=Path, required=True)
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    result = run_probe(args.name, args.work)
    args.result.write_text(json.dumps(result, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
