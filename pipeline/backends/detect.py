"""Find out what this machine can run, without creating a CUDA context.

GPUs are counted through NVML (nvidia-ml-py), not by initialising CUDA: a CUDA context in the
parent process breaks Dask-CUDA's worker start, and NVML answers in milliseconds. RAPIDS is
probed with ``importlib.util.find_spec`` for the cheap checks; ``doctor`` imports for real.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version

RAPIDS_MODULES = ("cudf", "cuml", "cupy")
REPORTED_MODULES = ("cudf", "cuml", "cupy", "dask_cuda", "dask_cudf", "xgboost", "torch")
_DISTRIBUTIONS = {
    "cudf": "cudf-cu12", "cuml": "cuml-cu12", "cupy": "cupy-cuda12x", "dask_cuda": "dask-cuda",
    "dask_cudf": "dask-cudf-cu12", "xgboost": "xgboost", "torch": "torch",
}


@dataclass(frozen=True)
class GpuDevice:
    index: int
    name: str
    memory_total: int
    memory_used: int


@dataclass
class NvmlReport:
    """What NVML says: driver, CUDA driver version and devices, or why it could not say."""

    driver: str | None = None
    cuda: str | None = None
    devices: list[GpuDevice] = field(default_factory=list)
    error: str | None = None


def probe_nvml() -> NvmlReport:
    try:
        import pynvml
    except ImportError as exc:  # nvidia-ml-py is a base dependency; a broken env still answers
        return NvmlReport(error=f"nvidia-ml-py is not installed ({exc})")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return NvmlReport(error=f"NVML unavailable: {exc} (no NVIDIA driver on this machine?)")
    try:
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
        cuda_int = pynvml.nvmlSystemGetCudaDriverVersion_v2()
        cuda = f"{cuda_int // 1000}.{(cuda_int % 1000) // 10}"
        devices = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
            devices.append(GpuDevice(i, _text(pynvml.nvmlDeviceGetName(handle)), int(mem.total), int(mem.used)))
        return NvmlReport(driver=driver, cuda=cuda, devices=devices)
    except pynvml.NVMLError as exc:
        return NvmlReport(error=f"NVML query failed: {exc}")
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def rapids_installed() -> list[str]:
    """RAPIDS modules that are missing (cheap: no import)."""
    return [m for m in RAPIDS_MODULES if importlib.util.find_spec(m) is None]


@dataclass(frozen=True)
class ModuleStatus:
    module: str
    version: str | None
    importable: bool
    detail: str = ""


def import_status(module: str) -> ModuleStatus:
    """Import a module for real and report its version, or the import error."""
    try:
        dist_version = version(_DISTRIBUTIONS.get(module, module))
    except PackageNotFoundError:
        dist_version = None
    if importlib.util.find_spec(module) is None:
        return ModuleStatus(module, dist_version, False, "not installed")
    try:
        mod = importlib.import_module(module)
    except Exception as exc:  # noqa: BLE001 - any import failure is the answer here
        return ModuleStatus(module, dist_version, False, f"{type(exc).__name__}: {exc}".splitlines()[0])
    detail = ""
    if module == "torch":
        built = getattr(mod.version, "cuda", None)
        detail = f"built for CUDA {built}" if built else "CPU build"
    return ModuleStatus(module, getattr(mod, "__version__", dist_version), True, detail)


@dataclass(frozen=True)
class DeviceChoice:
    device: str          # "cpu" | "gpu"
    reason: str


def choose_device(requested: str, *, nvml: NvmlReport | None = None) -> DeviceChoice:
    """Resolve ``auto | cpu | gpu`` to a device, with the reason in words.

    ``gpu`` without a usable GPU raises BackendUnavailable: never a silent CPU run.
    """
    from pipeline.errors import BackendUnavailable

    if requested == "cpu":
        return DeviceChoice("cpu", "device: cpu was requested")
    nvml = nvml if nvml is not None else probe_nvml()
    missing = rapids_installed()
    gpu_ok = bool(nvml.devices) and not missing
    if gpu_ok:
        names = ", ".join(d.name for d in nvml.devices)
        return DeviceChoice("gpu", f"NVML sees {len(nvml.devices)} GPU(s) ({names}) and RAPIDS is installed")
    if not nvml.devices:
        why = nvml.error or "NVML reports no GPU"
    else:
        why = f"RAPIDS modules not installed: {', '.join(missing)} (pip install 'pipeline[gpu]')"
    if requested == "gpu":
        raise BackendUnavailable(
            f"device: gpu was requested but no GPU backend is usable here: {why}. "
            "Run `pipeline doctor` for details, or set device: cpu (or auto) to run on the CPU."
        )
    return DeviceChoice("cpu", f"auto chose the CPU: {why}")
