"""Backends: the only package that imports cuDF, cuML, CuPy or Dask-CUDA.

Its modules hold the frame contract and engines, by job; ``devices/`` (which GPUs there are,
device memory, GPU meters) and ``clusters/`` (Dask clusters started or joined, their memory
plan) are its subpackages, so hardware code stays behind the one boundary.

``get_backend("cpu" | "gpu")`` returns the backend object; ``resolve_backend("auto")`` picks
one with the rules in ``detect.choose_device``.
"""

from __future__ import annotations

from functools import cache

from pipeline.backends import cpu_engine as _cpu_engine  # noqa: F401 - registers the CPU engine's settings checks
from pipeline.backends.contract import Backend, instance_of
from pipeline.backends.dask_collections import cluster_client, compute_lazy, has_cluster, is_partitioned
from pipeline.backends.estimators import estimator_output, scores_for_task
from pipeline.backends.filters import FILTER_OPS, apply_filters
from pipeline.backends.devices.detect import DeviceChoice, choose_device
from pipeline.core.errors import BackendUnavailable, UsageError

__all__ = [
    "Backend", "DeviceChoice", "FILTER_OPS", "apply_filters", "available_devices",
    "backend_for", "cluster_client", "is_frame", "compute_lazy", "estimator_output", "get_backend", "has_cluster",
    "is_partitioned", "resolve_backend", "scores_for_task",
]


# Where ``ColumnFrame`` lives (not imported here: it imports pandas, which this package does not).
FEW_ROWS_MODULE = "pipeline.backends.few_rows"


@cache
def get_backend(name: str) -> Backend:
    """The backend for an explicit device name (one instance per process)."""
    if name == "cpu":
        from pipeline.backends.cpu import CpuBackend

        return instance_of(CpuBackend)
    if name == "gpu":
        try:
            from pipeline.backends.gpu import GpuBackend
        except Exception as exc:  # noqa: BLE001 - RAPIDS import errors come in many types
            raise BackendUnavailable(f"the GPU backend cannot load: {type(exc).__name__}: {exc}") from exc
        return instance_of(GpuBackend)
    raise BackendUnavailable(f"unknown device '{name}' (expected cpu or gpu)")


def backend_for(data: object, backend: Backend | str | None = None) -> Backend:
    """The backend to use for ``data``: the one given, else CPU for pandas/NumPy, else GPU.

    Lets library users call stage functions on the frame they hold without naming a device.
    """
    if type(data).__module__ == FEW_ROWS_MODULE and (backend is None or getattr(backend, "name", backend) == "cpu"):
        from pipeline.backends.few_rows import FewRowsBackend

        return instance_of(FewRowsBackend)  # a few rows on the host, as NumPy columns
    if isinstance(backend, Backend):
        return backend
    if isinstance(backend, str):
        return get_backend(backend)
    if is_partitioned(data):
        data = data._meta                   # a Dask collection: its partitions' type decides
    module = type(data).__module__.split(".")[0]
    if module in ("pandas", "numpy"):
        return get_backend("cpu")
    if module in ("cudf", "cupy"):
        return get_backend("gpu")
    # A Polars frame, an Arrow table or a dict was taken for a GPU frame, and the message was
    # that cuDF is missing.
    raise UsageError(f"a frame of pandas (or cuDF, on a GPU) is what this takes, not a {module} "
                     f"{type(data).__name__}: convert it first (a Polars or Arrow table's .to_pandas(), "
                     "pandas.DataFrame(a_dict))")



def is_frame(data: object) -> bool:
    """Whether ``data`` is an in-memory frame of one of the backends (pandas or cuDF), the
    type ``backend_for`` can tell a device from; anything else (a dict, an array) is not."""
    return type(data).__module__.split(".")[0] in ("pandas", "cudf") and hasattr(data, "columns")


def resolve_backend(requested: str = "auto") -> tuple[Backend, DeviceChoice]:
    """Backend for ``auto | cpu | gpu`` plus the reason it was chosen."""
    choice = choose_device(requested)
    try:
        return get_backend(choice.device), choice
    except BackendUnavailable as exc:
        if requested != "auto":
            raise
        # NVML saw a GPU and RAPIDS is installed but will not import: auto falls back, saying why.
        return get_backend("cpu"), DeviceChoice("cpu", f"auto chose the CPU: {exc}")


def available_devices() -> list[str]:
    """Devices that can run here: always "cpu", plus "gpu" when a GPU and RAPIDS are present."""
    try:
        choice = choose_device("auto")
    except BackendUnavailable:
        return ["cpu"]
    return ["cpu", "gpu"] if choice.device == "gpu" else ["cpu"]
