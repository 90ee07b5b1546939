"""GPU backend: cuDF, CuPy, cuML (XGBoost with device="cuda").

Importing this module imports cuDF, so only ``pipeline.backends.get_backend("gpu")`` does it,
after detection said a GPU is there. Every cuDF/cuML/CuPy call made here is checked against
the installed signatures by ``scripts/check_gpu_api.py`` (``make check-gpu``), which runs
without a GPU.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cudf
import cupy as cp
import numpy as np
import pandas as pd

from pipeline.backends.csv_dialect import DEFAULT_DIALECT, CsvDialect
from pipeline.backends.contract import Backend
from pipeline.backends.dask_collections import compute_lazy, is_partitioned
from pipeline.backends.matrices import row_major_matrix
from pipeline.core.errors import DataError


# Formats whose every directive writes a zero-padded number: a date parsed with one writes back
# exactly the text it came from, which catches the days libcudf accepts and pandas does not.
_ROUND_TRIP = re.compile(r"(?:[^%]|%[YmdHMS])*")


def _column_array(series: cudf.Series) -> cp.ndarray:
    """One column as a 1-D CuPy array in its own dtype: a view of the column's buffer when it
    is numeric without nulls (ints with nulls come out float64 with NaN, as on the CPU)."""
    return series.to_cupy()


class GpuBackend(Backend):
    name = "gpu"
    frame = cudf
    array = cp
    dask_backend = "cudf"
    bool_dtype = "bool"            # cuDF's bool columns hold nulls already
    _distributions = ("cudf", "cuml", "cupy", "dask_cuda", "pandas", "pyarrow", "xgboost", "lightgbm", "catboost")

    def _read_csv(self, path: Path, *, columns, dtypes, na_values, dialect: CsvDialect = DEFAULT_DIALECT) -> cudf.DataFrame:
        if not dialect.utf8:
            # cuDF reads UTF-8 only: another encoding is decoded by pandas' C parser on the host.
            from pipeline.backends.csv_reader import read_with_c_parser

            return cudf.from_pandas(read_with_c_parser(path, columns=columns, dtypes=dtypes, na_values=na_values,
                                                       dialect=dialect))
        return cudf.read_csv(
            str(path),
            usecols=list(columns) if columns else None,
            dtype=dict(dtypes) if dtypes else None,
            na_values=list(na_values) if na_values else None,
            **dialect.reader_options(),
        )

    def partitioned_csv_options(self, dialect: CsvDialect) -> dict[str, Any]:
        """dask_cudf's ``read_csv`` reads UTF-8 only: another encoding is refused by name."""
        if not dialect.utf8:
            raise DataError(f"a partitioned read on the GPU takes UTF-8 CSV files only (encoding: {dialect.encoding}); "
                            "convert the files (iconv -f ... -t utf-8), or read them with device: cpu")
        return dialect.reader_options()

    def _read_parquet(self, path: Path, *, columns, filters) -> cudf.DataFrame:
        return cudf.read_parquet(
            str(path),
            columns=list(columns) if columns else None,
            filters=[tuple(f) for f in filters] if filters else None,
        )

    def strptime(self, text: cudf.Series, fmt: str) -> tuple[cudf.Series, cudf.Series]:
        """``text`` parsed on the GPU where cuDF parses it as pandas does, else on the host.

        cuDF's ``to_datetime`` has no ``errors="coerce"``, refuses a column whose values differ
        in length ("1/2/1997" beside "10/12/1997") and some directives, and libcudf checks each
        field's range, not the date (it reads 1997-02-30). So the values are checked with
        ``str.istimestamp`` first, and a format of zero-padded numbers only (ISO, %Y%m%d) is
        checked once more by writing the dates back: any value found wanting, or any refusal,
        sends the column to pandas, whose answer (the dates, the values that do not parse) is
        the CPU backend's exactly.
        """
        present = text.notna()
        try:
            valid = text.str.istimestamp(fmt).fillna(False)
            if bool((present & ~valid).any()):
                return self._strptime_on_host(text, fmt)
            parsed = cudf.to_datetime(text, format=fmt)
            if _ROUND_TRIP.fullmatch(fmt) and bool((present & (parsed.dt.strftime(fmt) != text)).any()):
                return self._strptime_on_host(text, fmt)
        except (NotImplementedError, ValueError, TypeError, RuntimeError):
            return self._strptime_on_host(text, fmt)
        return parsed, present & parsed.isna()

    def _strptime_on_host(self, text: cudf.Series, fmt: str) -> tuple[cudf.Series, cudf.Series]:
        """pandas' parse of ``text`` (the CPU backend's rule), moved back to the GPU."""
        host = text.to_pandas()
        parsed = pd.to_datetime(host, format=fmt, errors="coerce")
        return cudf.from_pandas(parsed), cudf.from_pandas(parsed.isna() & host.notna())

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

    def columns_frame(self, columns: Mapping[str, Any], index: Any) -> cudf.DataFrame:
        """The contract's frame, without a join per column: given ``index``, cuDF's constructor
        reindexes every Series onto it (a merge each), and the 36 one-hot columns of a churn
        model made one served row's call 330 ms on an H200, at any batch size. The ops' Series
        share their frame's index, which the constructor only checks when it is not given; the
        frame is reindexed once where the result is not on ``index`` (never, for the ops)."""
        out = cudf.DataFrame(dict(columns))
        if not any(isinstance(value, cudf.Series) for value in columns.values()):
            out.index = index                       # arrays only: positions are the rows
            return out
        return out if out.index.equals(index) else out.reindex(index=index)


    def to_portable_estimator(self, estimator: Any) -> Any:
        """cuML's estimators as their scikit-learn twins (cuML's ``as_sklearn``), so a model
        trained here is stored in a safe format and scores on a machine without a GPU.

        A cuml.dask estimator gives its combined model first (every worker holds the same one);
        XGBoost's and scikit-learn's estimators are returned as they are. Every task's estimator
        converts (cuML 26.10: ``LogisticRegression`` binary and multinomial with ``classes_`` kept,
        ``Ridge``, ``RandomForestClassifier`` / ``RandomForestRegressor`` through Treelite), and
        ``from_portable_estimator`` finds each twin by its ``_cpu_class_path``.
        """
        from cuml.internals.interop import InteropMixin, UnsupportedOnCPU

        if type(estimator).__module__.startswith("cuml.dask."):
            estimator = estimator.get_combined_model()
        if not isinstance(estimator, InteropMixin):
            return estimator
        try:
            return estimator.as_sklearn()
        except UnsupportedOnCPU as exc:
            raise DataError(f"export: {type(estimator).__name__} cannot be stored as its scikit-learn twin ({exc}); "
                            "train it with parameters scikit-learn has") from None

    def from_portable_estimator(self, estimator: Any) -> Any:
        """The cuML twin of a loaded scikit-learn estimator (cuML's ``from_sklearn``), so scoring
        stays on the GPU; one cuML has no twin for, or cannot mirror, scores on the host."""
        from cuml.internals.interop import UnsupportedOnGPU

        twin = _cuml_twin(type(estimator))
        if twin is not None:
            try:
                return twin.from_sklearn(estimator)
            except UnsupportedOnGPU:
                pass
        return HostEstimator(estimator)

    def device_memory_used(self) -> int | None:
        """Bytes this process has allocated on the device through RMM, PyTorch and CuPy's pool.

        Not ``memGetInfo``'s total - free: that is device-wide (other processes, CUDA contexts,
        the whole of an RMM pool). ``backends.devices.device_memory`` says what each allocator counts.
        """
        from pipeline.backends.devices.device_memory import process_device_bytes

        return process_device_bytes()


@functools.cache
def _cuml_twin(cpu_class: type) -> type | None:
    """The cuML estimator class that mirrors ``cpu_class`` (the one whose ``_cpu_class_path``
    names it), looked up among cuML's top-level estimators; None when cuML has none."""
    import cuml
    from cuml.internals.interop import InteropMixin

    for candidate in vars(cuml).values():
        if (isinstance(candidate, type) and issubclass(candidate, InteropMixin)
                and candidate._cpu_class_path.rpartition(".")[2] == cpu_class.__name__):
            try:
                if candidate._get_cpu_class() is cpu_class:
                    return candidate
            except (ImportError, AttributeError):
                continue
    return None


@dataclass
class HostEstimator:
    """A scikit-learn estimator scored on the host: the GPU matrix is copied to NumPy first
    (``predict_proba`` for classifiers, ``predict`` for regressors)."""

    estimator: Any

    def predict_proba(self, X: Any) -> Any:
        return self.estimator.predict_proba(cp.asnumpy(X))

    def predict(self, X: Any) -> Any:
        return self.estimator.predict(cp.asnumpy(X))

    @property
    def classes_(self) -> Any:
        """The wrapped classifier's classes (a message about missing classes reads them)."""
        return getattr(self.estimator, "classes_", None)
