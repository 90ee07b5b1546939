"""The backend contract: the one place that knows cuDF from pandas and cuML from scikit-learn.

cuDF mirrors most of the pandas API, so the shared logic lives here once and reads
``self.frame`` (pandas or cudf) and ``self.array`` (numpy or cupy); the two subclasses override
only what really differs. Everything outside ``pipeline.backends`` asks a ``Backend`` object
and never imports a GPU library.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

import numpy as np
import pandas as pd

from pipeline.backends.compressed import compression_of, plain_copy, refuse_partitioned
from pipeline.backends.csv_dialect import DEFAULT_DIALECT, CsvDialect
from pipeline.backends.dask_collections import cluster_client
from pipeline.backends.dates import missing_date_columns, parse_dates, partition_dates
from pipeline.backends.estimators import (
    estimator_output, import_estimator_module, scores_for_task, takes_client, task_option,
)
from pipeline.backends.filters import apply_filters, late_filters, pushed_filters, text_dates
from pipeline.backends.input_files import (
    check_parts, check_row_widths, check_source, decimal_columns, encoding_hint, infer_format, one_line, parquet_files,
    partitioned_sources, read_errors, read_header,
)
from pipeline.backends.table_read import TableRead
from pipeline.core.dtypes import dtype_kind, is_number_or_bool
from pipeline.core.errors import DataError, input_not_found
from pipeline.core.problems import BINARY, Task

T = TypeVar("T")
R = TypeVar("R")


class Backend(ABC):
    """Data and model operations for one device."""

    name: str
    frame: ModuleType          # pandas or cudf
    array: ModuleType          # numpy or cupy
    dask_backend: str          # value for dask.config "dataframe.backend"
    # Whether ``_read_csv`` refuses a row with more or fewer fields than the header itself;
    # else ``read`` checks the widths first (``input_files.check_row_widths``).
    csv_checks_row_widths: bool = False

    # ------------------------------------------------------------------ I/O
    def read(self, path: str | os.PathLike[str], how: TableRead | None = None, /, *,
             layouts: dict[str, str | None] | None = None, **changes: Any) -> Any:
        """Read a CSV or Parquet file into a frame of this backend: what ``how`` (a ``TableRead``)
        or its fields by name ask for (a CSV file as its ``dialect`` says it is written:
        separator, encoding, decimal mark, thousands separator).

        Filters go to the Parquet reader (row-group pruning) and are applied after the read
        for CSV, so both formats give the same rows. ``dates`` (column -> strptime format, None
        for the first value's layout) are parsed right after the read (``backends.dates``), so
        a filter on one of them compares dates and is applied after the read on both formats.
        ``layouts``, when given, gets each ``dates`` column's format as parsed (the layout of its
        first value where none was given: ``dates.parse_dates``).
        """
        how = TableRead.build(how, **changes)
        columns, dtypes, na_values, filters, dates, dialect = (how.columns, how.dtypes, how.na_values, how.filters,
                                                               how.dates, how.dialect)
        path = Path(path)
        if not path.exists():
            raise input_not_found(path)
        fmt = (how.format or infer_format(path)).lower()
        if fmt == "csv" and compression_of(path):   # every check and reader below takes a plain file
            with plain_copy(path) as plain:
                return self.read(plain, how, layouts=layouts)
        check_source(path, fmt, dialect)
        if fmt == "csv" and not self.csv_checks_row_widths:
            check_row_widths(path, dialect)
        try:
            if fmt == "csv":
                types = text_dates(dtypes, dates, read_header(path, fmt, dialect)) if dates else dtypes
                frame = self._read_csv(path, columns=columns, dtypes=types, na_values=na_values, dialect=dialect)
            elif fmt == "parquet":
                frame = self._read_parquet(path, columns=columns, filters=pushed_filters(filters, dates))
                for name in decimal_columns(path, frame.columns):     # read as floats, on either device
                    frame[name] = frame[name].astype("float64")
                text_na_values(frame, na_values)
                if dtypes:
                    frame = frame.astype(dict(dtypes))
            else:
                raise DataError(f"{path}: unknown format '{fmt}' (expected csv or parquet)")
        except DataError:
            raise
        except read_errors() as exc:
            raise DataError(f"cannot read {path} as {fmt}: {one_line(exc)}{encoding_hint(exc, dialect)}") from exc
        missing = [c for c in (columns or []) if c not in frame.columns]
        if missing:
            raise DataError(f"{path}: missing columns {missing}")
        if dates:
            frame = parse_dates(self, frame, dates, source=str(path), csv_files=[path] if fmt == "csv" else (),
                                layouts=layouts)
        late = filters if fmt == "csv" else late_filters(filters, dates)
        if late:
            frame = apply_filters(frame, late, source=str(path))
        return frame

    def read_partitioned(self, path: str | os.PathLike[str] | Sequence[str], how: TableRead | None = None, /, *,
                         blocksize: str | int | None = "64MiB", **changes: Any) -> Any:
        """A Dask DataFrame over a Parquet folder/file or CSV file(s) (a glob or a list works).

        Partitions are pandas or cuDF frames as Dask's ``dataframe.backend`` says, so the
        same feature ops run on each partition. Nothing is read until something computes.
        ``dates`` are parsed partition by partition, as ``read`` parses them. ``how`` (a
        ``TableRead``) or its fields by name say what to read, as for ``read``; ``blocksize``:
        the bytes of CSV per partition.
        """
        import dask
        import dask.dataframe as dd

        how = TableRead.build(how, **changes)
        columns, dtypes, na_values, filters, dates, dialect = (how.columns, how.dtypes, how.na_values, how.filters,
                                                               how.dates, how.dialect)
        text: str | list[str] = [str(p) for p in path] if isinstance(path, (list, tuple)) else str(path)
        sources = partitioned_sources(text)
        first = sources[0]
        fmt = (how.format or infer_format(first)).lower()
        if first.exists():                  # a local file or folder (a remote URL is the reader's)
            check_source(first, fmt, dialect)
            parts = [f for s in sources for f in (parquet_files(s) if s.is_dir() else [s]) if f.exists()]
            check_parts(parts, fmt, dialect)
            if fmt == "csv":
                refuse_partitioned(parts)
        try:
            with dask.config.set({"dataframe.backend": self.dask_backend}):
                if fmt == "parquet":
                    pushed = pushed_filters(filters, dates)
                    frame = dd.read_parquet(text, columns=list(columns) if columns else None,
                                            filters=[tuple(f) for f in pushed] if pushed else None)
                elif fmt == "csv":
                    types = text_dates(dtypes, dates,
                                       read_header(first, fmt, dialect) if dates and first.is_file() else None)
                    frame = dd.read_csv(text, usecols=list(columns) if columns else None,
                                        dtype=dict(types) if types else None,
                                        na_values=list(na_values) if na_values else None, blocksize=blocksize,
                                        **self.partitioned_csv_options(dialect))
                else:
                    raise DataError(f"{text}: unknown format '{fmt}' (expected csv or parquet)")
        except DataError:
            raise
        except read_errors() as exc:
            raise DataError(f"cannot read {text} as partitioned {fmt}: {one_line(exc)}") from exc
        if fmt == "parquet":
            text_na_values(frame, na_values)
        if dtypes and fmt == "parquet":
            frame = frame.astype(dict(dtypes))
        if dates:
            frame = self._parse_partitioned_dates(frame, dates, text, fmt)
        late = filters if fmt == "csv" else late_filters(filters, dates)
        if late:
            frame = frame.map_partitions(apply_filters, late, source=str(text))
        return frame

    def _parse_partitioned_dates(self, frame: Any, dates: Mapping[str, str | None], text: str | list[str],
                                 fmt: str) -> Any:
        """``dates`` parsed in each partition; a column the data lacks is refused now, and a
        bad value in a CSV is found by its line in the files when its partition is computed."""
        missing = missing_date_columns(frame.columns, dates)
        if missing:
            raise DataError(f"{text}: dates names column(s) {missing} that the data does not have "
                            f"(columns: {', '.join(map(str, frame.columns))})")
        files = [p for p in partitioned_sources(text) if p.is_file()] if fmt == "csv" else []
        options = {"source": str(text), "csv_files": files}
        return frame.map_partitions(partition_dates, self, dict(dates), **options,
                                    meta=parse_dates(self, frame._meta, dates, **options))

    def strptime(self, text: Any, fmt: str) -> tuple[Any, Any]:
        """``text`` parsed with the strptime format ``fmt`` (no offset), and the mask of the
        present values that do not parse; the dates are unused when any does not."""
        parsed = self.frame.to_datetime(text, format=fmt, errors="coerce")
        return parsed, parsed.isna() & text.notna()

    def partitioned_csv_options(self, dialect: CsvDialect) -> dict[str, Any]:
        """What Dask's ``read_csv`` (pandas' on each partition here) takes for ``dialect``."""
        return dialect.reader_options()

    @abstractmethod
    def _read_csv(self, path: Path, *, columns, dtypes, na_values, dialect: CsvDialect = DEFAULT_DIALECT) -> Any: ...

    @abstractmethod
    def _read_parquet(self, path: Path, *, columns, filters) -> Any: ...

    def write_parquet(self, frame: Any, path: str | os.PathLike[str]) -> None:
        """Write a frame to Parquet (the caller makes the write atomic)."""
        frame.to_parquet(path, index=False)

    # ------------------------------------------------------- host <-> device
    @abstractmethod
    def from_pandas(self, frame: pd.DataFrame) -> Any:
        """A pandas frame as a frame of this backend (no copy on CPU)."""

    @abstractmethod
    def to_host(self, x: Any) -> Any:
        """Frames to pandas, arrays to NumPy, scalars to Python: for reports and artifacts."""

    @abstractmethod
    def to_matrix(self, frame: Any, columns: Sequence[str] | None = None, dtype: str = "float32") -> Any:
        """One dense 2-D array of ``columns``: the single copy the hand-off is allowed."""

    @abstractmethod
    def to_vector(self, series: Any, dtype: str = "float32") -> Any:
        """A column as a 1-D array on this device (labels for the models)."""

    def to_torch(self, array: Any, *, copy: bool = False) -> Any:
        """``array`` as a torch tensor on the same device through DLPack.

        ``copy=False`` is strict: PyTorch raises instead of copying when the producer cannot
        share its buffer (a read-only NumPy array, an unsupported dtype), so a copy is never
        silent; ``pipeline.tensors.to_torch`` records why and falls back.
        """
        import torch  # imported on use: `pipeline validate` does not pay for it

        return torch.from_dlpack(array, copy=copy)

    @abstractmethod
    def data_address(self, array: Any) -> int:
        """Address of ``array``'s first element: the zero-copy check compares it with the tensor's."""

    def asarray(self, values: Any) -> Any:
        """A host array (labels, indices) as an array on this device."""
        return self.array.asarray(values)

    # ------------------------------------------------------------- frames
    def take(self, frame: Any, positions: np.ndarray) -> Any:
        """Rows by position, with a fresh 0..n-1 index."""
        return frame.iloc[self.asarray(positions)].reset_index(drop=True)

    def reindex(self, frame: Any, labels: Any) -> Any:
        """``frame.reindex(labels)``: ``frame``'s rows at the index values ``labels`` (an
        index), a row of missing values where ``frame`` has no such label, on ``labels``;
        dtypes widen as a reindex widens them (int -> float64, bool -> object) where a row is
        missing. ``frame``'s index holds each value once."""
        return frame.reindex(labels)

    def columns_frame(self, columns: Mapping[str, Any], index: Any) -> Any:
        """A frame of new ``columns`` (name -> series or array) on ``index``, to put beside
        an op's kept columns."""
        return self.frame.DataFrame(dict(columns), index=index)

    def map_columns(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
        """``[fn(item) for item in items]``: per-column work of the feature ops, results in order.
        Serial here (the GPU runs one column's kernel at a time on its stream anyway); the CPU
        backend spreads the calls over the process's cores (``pipeline.core.threads``)."""
        return [fn(item) for item in items]

    def indicator_columns(self, codes: Any, count: int) -> list[Any]:
        """0/1 float32 columns ``codes == 1``, ..., ``codes == count`` (``category_codes``'
        codes): the one-hot columns of one input column."""
        return [(codes == i + 1).astype("float32") for i in range(count)]

    @abstractmethod
    def category_codes(self, series: Any, categories: Sequence[Any]) -> Any:
        """int32 codes of ``series`` against ``categories``: 1..n for known values, 0 otherwise.

        Code 0 is the shared bucket for missing, unseen and rare values, so a workflow fitted
        on one device transforms new data on another without a lookup failure.
        """

    def is_numeric(self, series: Any) -> bool:
        return is_number_or_bool(series.dtype)

    def is_integral(self, series: Any) -> bool:
        """Integer or boolean dtype, nullable ones included (pandas ``Int64``, any cuDF int):
        such a column refuses a fill value with a fraction, where NumPy-backed pandas has
        already turned it into float64 if it had a gap."""
        return dtype_kind(series.dtype) in ("integer", "bool")

    @property
    def table_engine(self) -> Any | None:
        """The engine that runs event windows, horizon targets and join matching on this
        backend's in-memory frames, or None: the frame-API code (pandas, cuDF) runs them."""
        return None

    # Where min / max / first / last of a bool column land: missing stays missing and values
    # stay bools, in every window (pandas' nullable "boolean"; cuDF's bool is nullable).
    bool_dtype: str = "boolean"

    # ------------------------------------------------------------- models
    def estimator_class_path(self, spec: Any, *, distributed: bool = False, task: str | Task = "binary") -> str:
        """``module:Class`` of the estimator this backend uses for a model spec (a registry
        entry) and a task (its kind, or a ``Task``); the entry says why when it has none here."""
        options = task_option(task)
        path = spec.class_path(self.name, distributed=distributed, **options)
        if path is None:
            raise DataError(spec.unavailable(self.name, distributed=distributed, **options))
        return path

    def estimator(self, spec: Any, params: Mapping[str, Any], *, distributed: bool = False,
                  task: str | Task = "binary") -> Any:
        """Construct the estimator for a registry model and a task with already-translated params.

        A Dask estimator whose constructor takes ``client`` (cuml.dask's) is built inside
        ``cluster_client()`` and given it: the constructor submits a task to every worker and
        waits, so inside a one-thread worker's task it must run after the task seceded, and
        without ``client=`` it asks for a default client that a fresh worker does not have.
        """
        path = self.estimator_class_path(spec, distributed=distributed, task=task)
        module_name, _, class_name = path.partition(":")
        cls = getattr(import_estimator_module(spec.name, module_name, getattr(spec, "extra", None)), class_name)
        if distributed and takes_client(cls):
            with cluster_client() as client:
                return cls(**dict(params), client=client)
        return cls(**dict(params))

    def predict_scores(self, estimator: Any, X: Any, task: Task = BINARY) -> np.ndarray:
        """Scores in the task's shape (``pipeline.core.problems``), host float64: the positive class's
        probability (binary), the probability matrix (multiclass), the prediction (regression)."""
        return scores_for_task(self.to_host(estimator_output(estimator, X, task)), task, estimator, rows=_rows(X))

    def to_portable_estimator(self, estimator: Any) -> Any:
        """The fitted estimator as the CPU library's own (what a model file stores, so it loads
        on any machine): scikit-learn's and XGBoost's already are."""
        return estimator

    def from_portable_estimator(self, estimator: Any) -> Any:
        """A loaded scikit-learn estimator as one that scores this backend's data."""
        return estimator

    # ------------------------------------------------------------- status
    def device_memory_used(self) -> int | None:
        """Bytes in use on the device, or None for the CPU backend."""
        return None

    def versions(self) -> dict[str, str]:
        """Versions of the libraries this backend runs on, for the run manifest, under the name
        of the distribution that installed each (``cudf-cu13``, ``xgboost-cpu``): the build is
        part of the answer."""
        from pipeline.backends.devices.detect import module_distributions

        return {dist.name: dist.version
                for module in self._distributions for dist in module_distributions(module, provided={})}

    _distributions: tuple[str, ...] = ()     # import names; detect knows their builds

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"

    def __reduce__(self):
        # Backends travel to Dask workers as their class: modules do not pickle, and the
        # receiving process uses its one instance of that class.
        return (instance_of, (type(self),))


_INSTANCES: dict[type, Backend] = {}


def instance_of(cls: type[Backend]) -> Backend:
    """The one instance of a backend class in this process; the host memory policy
    (``host_memory``) is in force before it touches any data."""
    if cls not in _INSTANCES:
        from pipeline.core.host_memory import apply_page_policy

        apply_page_policy()
        _INSTANCES[cls] = cls()
    return _INSTANCES[cls]


def _rows(X: Any) -> int | None:
    """How many rows ``X`` holds where its shape says (None for a lazy collection of unknown length)."""
    shape = getattr(X, "shape", None)
    first = shape[0] if shape else None
    return int(first) if isinstance(first, (int, np.integer)) else None


def text_na_values(frame: Any, na_values: Sequence[str] | None) -> None:
    """Make the ``na_values`` strings of a Parquet frame's text columns missing, in place, as a
    CSV read makes them (Parquet records its nulls, but a table exported with ``' '`` for a
    missing number holds it as text): so ``dtypes`` can then read the column as numbers."""
    if not na_values:
        return
    for name in frame.columns:
        if dtype_kind(frame[name].dtype) == "text":
            column = frame[name]
            frame[name] = column.mask(column.isin(list(na_values)))
