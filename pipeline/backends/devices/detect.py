"""Find out what this machine can run, without creating a CUDA context.

GPUs are counted through NVML (nvidia-ml-py), not by initialising CUDA: a CUDA context in the
parent process breaks Dask-CUDA's worker start, and NVML answers in milliseconds. RAPIDS is
probed with ``importlib.util.find_spec`` for the cheap checks; ``doctor`` imports for real.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, distribution, packages_distributions

RAPIDS_MODULES = ("cudf", "cuml", "cupy")
REPORTED_MODULES = ("cudf", "cuml", "cupy", "dask_cuda", "dask_cudf", "xgboost", "torch")
# Modules whose wheels are built for one CUDA major (what ``doctor`` checks against the driver).
CUDA_WHEEL_MODULES = ("torch", "cupy", "cudf", "cuml", "xgboost", "rmm", "dask_cudf", "raft_dask")
# One module, several distributions: the CUDA flavours (cpu / gpu = CUDA 13 / gpu-cu12 extras)
# publish each build under its own name. Tried by name where the installed metadata does not
# list a distribution's files (packages_distributions() then misses it).
_KNOWN_DISTRIBUTIONS = {
    "cudf": ("cudf-cu13", "cudf-cu12"), "cuml": ("cuml-cu13", "cuml-cu12"),
    "cupy": ("cupy-cuda13x", "cupy-cuda12x"), "dask_cuda": ("dask-cuda",),
    "dask_cudf": ("dask-cudf-cu13", "dask-cudf-cu12"), "raft_dask": ("raft-dask-cu13", "raft-dask-cu12"),
    "rmm": ("rmm-cu13", "rmm-cu12"), "torch": ("torch",),
    "xgboost": ("xgboost", "xgboost-cpu", "xgboost-cu13", "xgboost-cu12"),
    "pandas": ("pandas",), "numpy": ("numpy",), "pyarrow": ("pyarrow",), "sklearn": ("scikit-learn",),
    "lightgbm": ("lightgbm",), "catboost": ("catboost",),
    # Polars 1.34+ ships its compiled engine in a runtime distribution of its own.
    "polars": ("polars", "polars-runtime-32", "polars-runtime-64", "polars-runtime-compat"),
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


# Reported from installed metadata, never imported: importing torch takes seconds and
# hundreds of MiB, too much for a setup check (``pipeline doctor``) to pay.
METADATA_ONLY = ("torch",)


def import_status(module: str, provided: Mapping[str, Sequence[str]] | None = None) -> ModuleStatus:
    """Import a module for real and report its version, or the import error (``METADATA_ONLY``
    modules: what their metadata says, without importing them).

    ``provided`` is ``packages_distributions()``, passed in when asking about several modules.
    """
    dists = module_distributions(module, provided)
    dist_version = dists[0].version if dists else None
    if importlib.util.find_spec(module) is None:
        return ModuleStatus(module, dist_version, False, "not installed")
    if module in METADATA_ONLY and dists:
        return _status_from_metadata(module, dists)
    try:
        mod = importlib.import_module(module)
    except Exception as exc:  # noqa: BLE001 - any import failure is the answer here
        return ModuleStatus(module, dist_version, False, f"{type(exc).__name__}: {exc}".splitlines()[0])
    detail = ""
    if module == "torch":
        built = getattr(mod.version, "cuda", None)
        detail = f"built for CUDA {built}" if built else "CPU build"
    if len(dists) > 1:
        detail = "; ".join(filter(None, [detail, "installed by " + " and ".join(d.name for d in dists)]))
    return ModuleStatus(module, getattr(mod, "__version__", dist_version), True, detail)


def _status_from_metadata(module: str, dists: Sequence[DistMeta]) -> ModuleStatus:
    """torch's version and CUDA build from its metadata (``2.13.0+cu128``: CUDA 12.8)."""
    meta = dists[0]
    needs, major, _ = _labelled_cuda(meta.version, meta.requires)
    label = _CUDA_LOCAL_LABEL.match(meta.version.partition("+")[2])
    if label:
        detail = f"built for CUDA {label['major']}.{label[0][-1]}"
    else:
        detail = f"built for CUDA {major}" if needs and major is not None else "CUDA build" if needs else "CPU build"
    detail += " (from its metadata; not imported)"
    if len(dists) > 1:
        detail += "; installed by " + " and ".join(d.name for d in dists)
    return ModuleStatus(module, meta.version, True, detail)


# --------------------------------------------------------------------------- CUDA needs of wheels
@dataclass(frozen=True)
class DistMeta:
    """An installed distribution's metadata: all a wheel's CUDA need is read from."""

    name: str
    version: str
    requires: tuple[str, ...] = ()


@dataclass(frozen=True)
class CudaNeed:
    """Which CUDA a wheel is built for, read from its metadata (no import, no GPU).

    ``needs_cuda``: True (a CUDA build), False (a CPU build) or None (cannot tell);
    ``cuda_major`` is set when the metadata says which major; ``basis`` says how we know.
    """

    module: str
    distribution: str
    version: str
    needs_cuda: bool | None
    cuda_major: int | None
    basis: str


# cudf-cu13, cupy-cuda12x, nvidia-nccl-cu12, nvidia-cuda-runtime-cu12 ...
_CUDA_NAME_SUFFIX = re.compile(r"-(?:cu|cuda)(?P<major>\d{2})x?$")
# torch's local version label: +cu130, +cu128, +cu118 (major, then one minor digit).
_CUDA_LOCAL_LABEL = re.compile(r"^cu(?P<major>\d+)\d$")
# Distributions versioned by the CUDA release they carry: their version's major is the CUDA major.
CUDA_VERSIONED = ("cuda-toolkit", "cuda-bindings", "cuda-runtime")
# Builds whose name says nothing of CUDA: XGBoost's CPU build, and plain `xgboost`, which is its
# CUDA 12 build (it requires nvidia-nccl-cu12).
_BUILD_OF_NAME = {
    "xgboost-cpu": (False, None, "xgboost-cpu: the CPU build"),
    "xgboost": (True, 12, "plain xgboost is the CUDA 12 build (requires nvidia-nccl-cu12)"),
}
# Builds that carry their CUDA major in a local version label (``+cu130``, ``+cpu``) or, without
# one, in the CUDA libraries they require (``_labelled_cuda``): PyTorch's wheels.
LABELLED_BUILDS = ("torch",)
_REQUIREMENT_NAME = re.compile(r"^\s*(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)")
_REQUIREMENT_FLOOR = re.compile(r"(?:===|==|>=|~=)\s*(?P<major>\d+)")
_EXTRA_MARKER = re.compile(r"\bextra\s*==")
# The build part of a distribution name: xgboost-cpu, cudf-cu13, cupy-cuda12x, cupy-rocm-6-0.
_BUILD_SUFFIX = re.compile(r"-(?:cpu|cu\d{2}|cuda\d{2}x|rocm-\d+-\d+)$")


def canonical_name(name: str) -> str:
    """A distribution name as installers compare them (PEP 503): ``Cudf_CU12`` is ``cudf-cu12``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def build_stem(name: str) -> str:
    """A distribution name without its build: ``cudf-cu13`` and ``xgboost-cpu`` give ``cudf``,
    ``xgboost``; two installed distributions of one stem overwrite each other's files."""
    return _BUILD_SUFFIX.sub("", canonical_name(name))


def distribution_cuda_major(meta: DistMeta) -> int | None:
    """The CUDA major any distribution is built for, where it says so: its name (``-cu13``,
    ``-cuda12x``), the CUDA release it carries (``cuda-toolkit 13.0.3``), torch's label or
    requirements, the builds named above; None for everything else (numpy, dask, ...)."""
    name = canonical_name(meta.name)
    if name in CUDA_VERSIONED:
        return int(meta.version.split(".")[0])
    if name in LABELLED_BUILDS:
        return _labelled_cuda(meta.version, meta.requires)[1]
    if name in _BUILD_OF_NAME:
        return _BUILD_OF_NAME[name][1]
    suffix = _CUDA_NAME_SUFFIX.search(name)
    return int(suffix["major"]) if suffix else None


def cuda_need(module: str, meta: DistMeta) -> CudaNeed:
    """The CUDA major ``meta`` (the distribution providing ``module``) is built for."""
    name = canonical_name(meta.name)
    if name in LABELLED_BUILDS:
        needs, major, basis = _labelled_cuda(meta.version, meta.requires)
    elif name in _BUILD_OF_NAME:
        needs, major, basis = _BUILD_OF_NAME[name]
    else:
        needs, major, basis = _suffix_cuda(name)
    return CudaNeed(module, name, meta.version, needs, major, basis)


def _labelled_cuda(version: str, requires: Sequence[str]) -> tuple[bool | None, int | None, str]:
    """A labelled build (torch): the local label (``+cu130``, ``+cpu``), else the CUDA libraries it
    requires."""
    label = version.partition("+")[2]
    if label:
        cuda = _CUDA_LOCAL_LABEL.match(label)
        if cuda:
            return True, int(cuda["major"]), f"version label +{label}"
        return False, None, f"version label +{label}: no CUDA"
    for line in requires:
        major = _requirement_cuda_major(line)
        if major is not None:
            return True, major, f"requires {line.split(';')[0].strip()}"
    return False, None, "no CUDA libraries among its requirements: a CPU build"


def _requirement_cuda_major(line: str) -> int | None:
    """The CUDA major a Requires-Dist line pins (``cuda-toolkit[...]==13.0.3``, ``...-cu12``)."""
    requirement, _, marker = line.partition(";")
    if _EXTRA_MARKER.search(marker):
        return None                     # an optional extra: not installed with the package
    named = _REQUIREMENT_NAME.match(requirement)
    if not named:
        return None
    name = canonical_name(named["name"])
    suffix = _CUDA_NAME_SUFFIX.search(name)
    if suffix and name.startswith("nvidia-"):
        return int(suffix["major"])
    if name in CUDA_VERSIONED:
        floor = _REQUIREMENT_FLOOR.search(requirement[named.end():])
        return int(floor["major"]) if floor else None
    return None


def _suffix_cuda(name: str) -> tuple[bool | None, int | None, str]:
    """RAPIDS and CuPy: the major is in the name (``-cu13``, ``-cuda12x``)."""
    suffix = _CUDA_NAME_SUFFIX.search(name)
    if suffix:
        return True, int(suffix["major"]), f"distribution name {name}"
    if "rocm" in name:
        return False, None, f"{name}: a ROCm build"
    return True, None, f"{name}: no CUDA suffix (a conda or source build; CUDA major unknown)"


def module_distributions(module: str, provided: Mapping[str, Sequence[str]] | None = None) -> list[DistMeta]:
    """Every installed distribution that provides ``module`` (two when builds overwrite each other)."""
    provided = packages_distributions() if provided is None else provided
    # Builds of the module itself, not plugins that add files inside its folder.
    names = dict.fromkeys(n for n in map(canonical_name, provided.get(module, ()))
                          if build_stem(n) == canonical_name(module))
    names.update(dict.fromkeys(_KNOWN_DISTRIBUTIONS.get(module, ())))
    found = []
    for name in names:
        try:
            dist = distribution(name)
        except PackageNotFoundError:
            continue
        found.append(DistMeta(canonical_name(dist.metadata["Name"] or name), dist.version, tuple(dist.requires or ())))
    return list({d.name: d for d in found}.values())


def installed_cuda_needs(provided: Mapping[str, Sequence[str]] | None = None) -> list[CudaNeed]:
    """The CUDA need of every installed GPU wheel (torch, CuPy, RAPIDS, XGBoost), from metadata."""
    provided = packages_distributions() if provided is None else provided
    return [cuda_need(module, meta) for module in CUDA_WHEEL_MODULES
            for meta in module_distributions(module, provided)]


@dataclass(frozen=True)
class DeviceChoice:
    device: str          # "cpu" | "gpu"
    reason: str


def choose_device(requested: str, *, nvml: NvmlReport | None = None) -> DeviceChoice:
    """Resolve ``auto | cpu | gpu`` to a device, with the reason in words.

    ``gpu`` without a usable GPU raises BackendUnavailable: never a silent CPU run.
    """
    from pipeline.core.errors import BackendUnavailable

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
