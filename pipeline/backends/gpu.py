"""GPU backend: cuDF, CuPy, cuML (XGBoost with device="cuda").

Importing this module imports cuDF, so only ``pipeline.backends.get_backend("gpu")`` does it,
after detection said a GPU is there. Every cuDF/cuML/CuPy call made here is checked against
the installed signatures by ``scripts/check_gpu_api.py`` (``make check-gpu``), which runs
without a GPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import cudf
import cupy as cp
import numpy as np
import pandas as pd

from pipeline.backends.base import Backend, compute_lazy, is_partitioned, row_major_matrix


def _column_array(series: cudf.Series) -> cp.ndarray:
    """One column as a 1-D CuPy array in its own dtype: a view of the column's buffer when it
    is numeric without nulls (ints with nulls come out float64 with NaN, as on the CPU)."""
    return series.to_cupy()


class GpuBackend(Backend):
    name = "gpu"
    frame = cudf
    array = cp
    dask_backend = "cudf"
    _distributions = ("cudf", "cuml", "cupy", "dask_cuda", "pandas", "pyarrow", "xgboost")

    def _read_csv(self, path: Path, *, columns, dtypes, na_values) -> cudf.DataFrame:
        return cudf.read_csv(
            str(path),
            usecols=list(columns) if columns else None,
            dtype=dict(dtypes) if dtypes else None,
            na_values=list(na_values) if na_values else None,
        )

    def _read_parquet(self, path: Path, *, columns, filters) -> cudf.DataFrame:
        return cudf.read_parquet(
            str(path),
            columns=list(columns) if columns else None,
            filters=[tuple(f) for f in filters] if filters else None,
        )

    def from_pandas(self, frame: pd.DataFrame) -> cudf.DataFrame:
        if isinstance(frame, cudf.DataFrame):
            return frame
        # cudf.DataFrame.from_pandas was deprecated in 25.12 and is gone in 26.10 (cudf#19996,
        # cudf#20925); the module-level cudf.from_pandas is the supported conversion.
        return cudf.from_pandas(frame)

    def to_host(self, x: Any) -> Any:
        if is_partitioned(x):
            (x,) = compute_lazy(x)
        if isinstance(x, (cudf.DataFrame, cudf.Series)):
            return x.to_pandas()
        if isinstance(x, cp.ndarray):
            return cp.asnumpy(x)
        if isinstance(x, cp.generic):
            return x.item()
        return x

    def to_matrix(self, frame: cudf.DataFrame, columns: Sequence[str] | None = None, dtype: str = "float32") -> cp.ndarray:
        """A row-major CuPy matrix filled column by column: the one allowed copy.

        ``DataFrame.to_cupy()`` always allocates column-major, which makes every batch
        gather and XGBoost read strided (and cuML's forest inference copies it to row-major).
        Preallocating the row-major matrix and assigning each column (a zero-copy view of a
        numeric column without nulls; CuPy converts the dtype during the assignment) peaks
        at the matrix itself; ``to_cupy()`` followed by ``cp.ascontiguousarray`` would hold
        two full matrices and copy twice. Strings raise; the feature workflow lets neither
        strings nor nulls reach here.
        """
        names = list(columns) if columns is not None else list(frame.columns)
        return row_major_matrix(cp, len(frame), names, lambda name: _column_array(frame[name]), np.dtype(dtype))

    def to_vector(self, series: cudf.Series, dtype: str = "float32") -> cp.ndarray:
        return series.to_cupy(dtype=np.dtype(dtype), copy=True)

    def to_torch(self, array: cp.ndarray, *, copy: bool = False) -> Any:
        """A CUDA tensor sharing ``array``'s device buffer.

        Stream discipline: ``torch.from_dlpack`` passes PyTorch's current stream to CuPy's
        ``__dlpack__(stream=...)``, and CuPy makes that stream wait for the work it queued on its
        own current stream, so the tensor is never read before the producer has written it.
        """
        import torch

        return torch.from_dlpack(array, copy=copy)

    def data_address(self, array: cp.ndarray) -> int:
        return int(array.data.ptr)

    def category_codes(self, series: cudf.Series, categories: Sequence[Any]) -> cudf.Series:
        # cuDF turns values outside the categories into nulls, and .cat.codes keeps the null
        # mask (pandas uses -1): fill with -1 so the +1 shift puts every unknown value in 0.
        dtype = cudf.CategoricalDtype(categories=list(categories))
        return series.astype(dtype).cat.codes.astype("int32").fillna(-1) + 1

    def take(self, frame: cudf.DataFrame, positions: np.ndarray) -> cudf.DataFrame:
        return frame.iloc[cp.asarray(positions)].reset_index(drop=True)


    def device_memory_used(self) -> int | None:
        """Bytes this process has allocated on the device through RMM, PyTorch and CuPy's pool.

        Not ``memGetInfo``'s total - free: that is device-wide (other processes, CUDA contexts,
        the whole of an RMM pool). ``backends.device_memory`` says what each allocator counts.
        """
        from pipeline.backends.device_memory import process_device_bytes

        return process_device_bytes()
