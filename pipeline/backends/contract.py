"""The backend contract: the one place that knows cuDF from pandas and cuML from scikit-learn.

cuDF mirrors most of the pandas API, so the shared logic lives here once and reads
``self.frame`` (pandas or cudf) and ``self.array`` (numpy or cupy); the two subclasses override
only what really differs. Everything outside ``pipeline.backends`` asks a ``Backend`` object
and never imports a GPU library.
"""

from __future__ import annotations

import contextlib
import csv
import glob
import importlib
import os
import re
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pandas as pd

from pipeline.backends.dates import missing_date_columns, parse_dates, partition_dates
from pipeline.core.errors import BackendUnavailable, DataError, input_not_found
from pipeline.core.problems import BINARY, Task

# Row filters, in the pyarrow form [column, op, value]; see ``apply_filters``.
Filter = tuple[str, str, Any]
FILTER_OPS = ("==", "!=", "<", "<=", ">", ">=", "in", "not in")


class Backend(ABC):
    """Data and model operations for one device."""

    name: str
    frame: ModuleType          # pandas or cudf
    array: ModuleType          # numpy or cupy
    dask_backend: str          # value for dask.config "dataframe.backend"

    # ------------------------------------------------------------------ I/O
    def read(
        self,
        path: str | os.PathLike[str],
        *,
        format: str | None = None,
        columns: Sequence[str] | None = None,
        dtypes: Mapping[str, str] | None = None,
        na_values: Sequence[str] | None = None,
        filters: Sequence[Filter] | None = None,
        dates: Mapping[str, str | None] | None = None,
    ) -> Any:
        """Read a CSV or Parquet file into a frame of this backend.

        Filters go to the Parquet reader (row-group pruning) and are applied after the read
        for CSV, so both formats give the same rows. ``dates`` (column -> strptime format, None
        for the first value's layout) are parsed right after the read (``backends.dates``), so
        a filter on one of them compares dates and is applied after the read on both formats.
        """
        path = Path(path)
        if not path.exists():
            raise input_not_found(path)
        fmt = (format or infer_format(path)).lower()
        check_source(path, fmt)
        if fmt == "csv" and columns:
            check_row_widths(path)
        try:
            if fmt == "csv":
                types = text_dates(dtypes, dates, read_header(path, fmt)) if dates else dtypes
                frame = self._read_csv(path, columns=columns, dtypes=types, na_values=na_values)
            elif fmt == "parquet":
                frame = self._read_parquet(path, columns=columns, filters=pushed_filters(filters, dates))
                if dtypes:
                    frame = frame.astype(dict(dtypes))
            else:
                raise DataError(f"{path}: unknown format '{fmt}' (expected csv or parquet)")
        except DataError:
            raise
        except read_errors() as exc:
            raise DataError(f"cannot read {path} as {fmt}: {one_line(exc)}") from exc
        missing = [c for c in (columns or []) if c not in frame.columns]
        if missing:
            raise DataError(f"{path}: missing columns {missing}")
        if dates:
            frame = parse_dates(self, frame, dates, source=str(path), csv_files=[path] if fmt == "csv" else ())
        late = filters if fmt == "csv" else late_filters(filters, dates)
        if late:
            frame = apply_filters(frame, late, source=str(path))
        return frame

    def read_partitioned(
        self,
        path: str | os.PathLike[str] | Sequence[str],
        *,
        format: str | None = None,
        columns: Sequence[str] | None = None,
        dtypes: Mapping[str, str] | None = None,
        na_values: Sequence[str] | None = None,
        filters: Sequence[Filter] | None = None,
        blocksize: str | int | None = "64MiB",
        dates: Mapping[str, str | None] | None = None,
    ) -> Any:
        """A Dask DataFrame over a Parquet folder/file or CSV file(s) (a glob or a list works).

        Partitions are pandas or cuDF frames as Dask's ``dataframe.backend`` says, so the
        same feature ops run on each partition. Nothing is read until something computes.
        ``dates`` are parsed partition by partition, as ``read`` parses them.
        """
        import dask
        import dask.dataframe as dd

        text: str | list[str] = [str(p) for p in path] if isinstance(path, (list, tuple)) else str(path)
        first = partitioned_sources(text)[0]
        fmt = (format or infer_format(first)).lower()
        if first.exists():                  # a local file or folder (a remote URL is the reader's)
            check_source(first, fmt)
        try:
            with dask.config.set({"dataframe.backend": self.dask_backend}):
                if fmt == "parquet":
                    pushed = pushed_filters(filters, dates)
                    frame = dd.read_parquet(text, columns=list(columns) if columns else None,
                                            filters=[tuple(f) for f in pushed] if pushed else None)
                elif fmt == "csv":
                    types = text_dates(dtypes, dates, read_header(first, fmt) if dates and first.is_file() else None)
                    frame = dd.read_csv(text, usecols=list(columns) if columns else None,
                                        dtype=dict(types) if types else None,
                                        na_values=list(na_values) if na_values else None, blocksize=blocksize)
                else:
                    raise DataError(f"{text}: unknown format '{fmt}' (expected csv or parquet)")
        except DataError:
            raise
        except read_errors() as exc:
            raise DataError(f"cannot read {text} as partitioned {fmt}: {one_line(exc)}") from exc
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

    @abstractmethod
    def _read_csv(self, path: Path, *, columns, dtypes, na_values) -> Any: ...

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

    @abstractmethod
    def category_codes(self, series: Any, categories: Sequence[Any]) -> Any:
        """int32 codes of ``series`` against ``categories``: 1..n for known values, 0 otherwise.

        Code 0 is the shared bucket for missing, unseen and rare values, so a workflow fitted
        on one device transforms new data on another without a lookup failure.
        """

    def is_numeric(self, series: Any) -> bool:
        return pd.api.types.is_numeric_dtype(series.dtype) or pd.api.types.is_bool_dtype(series.dtype)

    def is_integral(self, series: Any) -> bool:
        """Integer or boolean dtype, nullable ones included (pandas ``Int64``, any cuDF int):
        such a column refuses a fill value with a fraction, where NumPy-backed pandas has
        already turned it into float64 if it had a gap."""
        return pd.api.types.is_integer_dtype(series.dtype) or pd.api.types.is_bool_dtype(series.dtype)

    # ------------------------------------------------------------- models
    def estimator_class_path(self, spec: Any, *, distributed: bool = False, task: str | Task = "binary") -> str:
        """``module:Class`` of the estimator this backend uses for a model spec (a registry
        entry) and a task (its kind, or a ``Task``); the entry says why when it has none here."""
        options = _task_option(task)
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
        cls = getattr(_import_estimator_module(spec.name, module_name), class_name)
        if distributed and _takes_client(cls):
            with cluster_client() as client:
                return cls(**dict(params), client=client)
        return cls(**dict(params))

    def predict_scores(self, estimator: Any, X: Any, task: Task = BINARY) -> np.ndarray:
        """Scores in the task's shape (``pipeline.core.problems``), host float64: the positive class's
        probability (binary), the probability matrix (multiclass), the prediction (regression)."""
        return scores_for_task(self.to_host(estimator_output(estimator, X, task)), task, estimator)

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
        from pipeline.backends.detect import module_distributions

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


def _import_estimator_module(model: str, module_name: str) -> Any:
    """The estimator's module, or a clear word on which install flavour brings it (XGBoost is
    in the `cpu`, `gpu` and `gpu-cu12` extras, not the base requirements)."""
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise BackendUnavailable(
            f"model '{model}' needs the Python package '{exc.name}', which is not installed here; "
            "install pipeline with the extra for this machine, in its checkout: pip install -e '.[cpu]' "
            "(or '.[gpu]' for CUDA 13, '.[gpu-cu12]' for CUDA 12); `make setup` does the first") from exc


def _task_option(task: str | Task) -> dict[str, str]:
    """``task=`` for a spec's ``class_path`` / ``unavailable``: left out for binary, so a spec
    written before tasks (a plugin's own class, a duck-typed stand-in) still answers there."""
    kind = task.kind if isinstance(task, Task) else str(task)
    return {} if kind == "binary" else {"task": kind}


def estimator_output(estimator: Any, X: Any, task: Task) -> Any:
    """What the estimator predicts for ``task``: ``predict`` for regression, else
    ``predict_proba`` (on the estimator's device; Dask collections stay lazy)."""
    return estimator.predict(X) if task.kind == "regression" else estimator.predict_proba(X)


def scores_for_task(output: Any, task: Task, estimator: Any = None) -> np.ndarray:
    """A host ``predict`` / ``predict_proba`` result in the task's score shape, float64.

    A multiclass model must score every class of the task, in code order: one fitted on a
    training split that lacked a class has fewer columns, and the message names the classes
    (read from the estimator's ``classes_`` where it has them).
    """
    scores = np.asarray(output, dtype="float64")
    if task.kind == "regression":
        return scores.reshape(-1) if scores.ndim == 2 and scores.shape[1] == 1 else scores
    if task.kind == "binary":
        return scores[:, 1] if scores.ndim == 2 else scores
    expected = len(task.classes)
    if scores.ndim != 2 or scores.shape[1] != expected:
        raise DataError(_missing_classes_message(scores, task, estimator))
    return np.ascontiguousarray(scores)


def _missing_classes_message(scores: np.ndarray, task: Task, estimator: Any) -> str:
    """Why a multiclass model's probabilities do not have one column per class of the task."""
    got = scores.shape[1] if scores.ndim == 2 else 1
    fitted = getattr(estimator, "classes_", None)
    missing: list[Any] = []
    if fitted is not None:
        with contextlib.suppress(TypeError, ValueError):
            on_host = fitted.get() if hasattr(fitted, "__cuda_array_interface__") else fitted   # CuPy: copy
            codes = {int(c) for c in np.asarray(on_host).ravel()}
            missing = [value for code, value in enumerate(task.classes) if code not in codes]
    which = (f": the training split has no rows of {', '.join(repr(v) for v in missing)}" if missing
             else " (the training split lacked some of them)")
    return (f"the model scores {got} classes but the task is {task.describe()}{which}. A classifier learns only "
            "the classes it sees: use more data or a stratified split, or merge or drop the rare classes")


def _takes_client(cls: type) -> bool:
    """Whether ``cls(...)`` names a ``client`` parameter (``**kwargs`` does not count: XGBoost's
    would take it for a booster parameter)."""
    import inspect

    try:
        return "client" in inspect.signature(cls).parameters
    except (TypeError, ValueError):         # no signature to read (a builtin or extension type)
        return False


def instance_of(cls: type[Backend]) -> Backend:
    """The one instance of a backend class in this process."""
    if cls not in _INSTANCES:
        _INSTANCES[cls] = cls()
    return _INSTANCES[cls]


def is_partitioned(data: object) -> bool:
    """Whether ``data`` is a Dask collection (lazy, partitioned) rather than in memory."""
    return type(data).__module__.split(".")[0] in ("dask", "dask_expr", "dask_cudf")


def compute_lazy(*collections: Any) -> tuple[Any, ...]:
    """Compute Dask collections together (one graph: shared reads happen once).

    Inside a task on a Dask worker it goes through the cluster and secedes from the worker's
    thread pool while it waits, so a one-thread worker does not deadlock on its own subtasks.
    """
    import dask

    collections = fused(collections)
    try:
        from distributed import get_worker, worker_client

        get_worker()
    except (ImportError, ValueError):
        return dask.compute(*collections)
    with worker_client() as client:
        return tuple(client.gather(client.compute(list(collections))))


def fused(collections: Sequence[Any]) -> tuple[Any, ...]:
    """Dask DataFrame collections with their per-partition steps fused, optimized together.

    ``dask.compute`` in dask 2026.8 optimizes without blockwise fusion: every step of a chain
    (read, filter, aggregate, label, join, write) ran as a task of its own whose result a
    worker held, spilled and read back. With 50M events on two 558 MiB workers that churn
    pushed workers past 95% of their limit. Fused, a partition goes through the chain in one
    task. Optimizing the collections together keeps a step they share (a read, an upstream
    stage) one task, computed once. Other collections (delayed objects) pass unchanged.
    """
    try:
        from dask._collections import new_collection
        from dask._expr import Expr, _ExprSequence
        from dask.dataframe.dask_expr._expr import optimize_blockwise_fusion
    except ImportError:           # a dask release that moved them: correct, only unfused
        return tuple(collections)
    picked = [i for i, c in enumerate(collections) if isinstance(getattr(c, "expr", None), Expr)]
    if not picked:
        return tuple(collections)
    # A sequence's own optimize(fuse=True) leaves its members unfused: fuse the optimized
    # sequence with the DataFrame pass, which walks any expression graph.
    together = optimize_blockwise_fusion(_ExprSequence(*(collections[i].expr for i in picked)).optimize())
    out = list(collections)
    for i, expr in zip(picked, together.operands):
        out[i] = new_collection(expr)
    return tuple(out)


@contextlib.contextmanager
def cluster_client() -> Iterator[Any]:
    """A Dask client for distributed training and scoring of partitioned data.

    Inside a task on a worker: ``worker_client()``, which secedes from the worker's thread
    pool while the training's own tasks run (a one-thread worker would deadlock otherwise).
    Elsewhere: the process's default client. Without either it is a clear error.
    """
    try:
        from distributed import get_client, get_worker, worker_client
    except ImportError as exc:
        raise DataError(f"partitioned data needs dask.distributed: {exc}") from exc
    try:
        get_worker()
    except ValueError:
        try:
            yield get_client()
        except ValueError:
            raise DataError("training on partitioned data needs a Dask cluster: add a cluster: section to the "
                            "config (e.g. cluster: {n_workers: 2}) or pass --scheduler ADDRESS") from None
        return
    with worker_client() as client:
        yield client


def has_cluster() -> bool:
    """Whether ``cluster_client`` has a cluster to give: inside a Dask worker, or with a default
    client in this process (the run's cluster, or the caller's own ``Client``)."""
    try:
        from distributed import get_client, get_worker
    except ImportError:
        return False
    try:
        get_worker()
        return True
    except ValueError:
        pass
    try:
        get_client()
        return True
    except ValueError:
        return False


def row_major_matrix(
    xp: ModuleType,
    n_rows: int,
    names: Sequence[Any],
    column_values: Callable[[Any], Any],
    dtype: Any,
) -> Any:
    """A C-contiguous (row-major) ``n_rows x len(names)`` matrix of ``xp`` (numpy or cupy),
    filled one column at a time.

    Every consumer reads rows (batch gathers, XGBoost, cuML's forest inference), but NumPy and
    cuDF both build a column-major matrix from a frame. Filling a preallocated row-major one
    is the single copy; the assignment converts each column's dtype on the way in, so the
    peak is the matrix plus at most one column (``column_values`` returns a column as a 1-D
    array, a view where the frame allows one). Converting a column-major matrix afterwards
    would hold both matrices at once.
    """
    out = xp.empty((n_rows, len(names)), dtype=dtype, order="C")
    for j, name in enumerate(names):
        out[:, j] = column_values(name)
    return out


def read_errors() -> tuple[type[BaseException], ...]:
    """What a reader raises on a file it cannot read (pyarrow's errors only when it imports;
    cuDF reports parse failures as RuntimeError). Evaluated only when something was raised."""
    errors: tuple[type[BaseException], ...] = (
        ValueError, KeyError, TypeError, OSError, OverflowError, RuntimeError, csv.Error)
    try:
        from pyarrow.lib import ArrowException
    except ImportError:
        return errors
    return (*errors, ArrowException)


def one_line(exc: BaseException) -> str:
    """A library's message as one line (pandas ends its parser errors with a newline)."""
    return "; ".join(line.strip() for line in str(exc).splitlines() if line.strip()) or type(exc).__name__


def check_source(path: Path, fmt: str) -> None:
    """Refuse what the readers accept quietly or report without naming the file.

    A folder without data files reads as a table with no columns; a CSV header that names
    a column twice is renamed by pandas and cuDF alike (``tenure``, ``tenure.1``) and both
    would be trained on. Both readers get the same answer because it is decided here, from
    the raw header, before either reads.
    """
    if path.is_dir():
        if fmt != "parquet":
            raise DataError(f"{path} is a folder; a {fmt} input is one file (name the file, or read a folder "
                            f"of CSV files with partitioned: true and a glob such as {path}/*.csv)")
        files = parquet_files(path)
        if not files:
            csvs = sorted(p.name for p in path.glob("*.csv"))
            hint = (f"; it holds CSV files ({', '.join(csvs[:3])}): name one, or use partitioned: true with "
                    f"{path}/*.csv") if csvs else ""
            raise DataError(f"no .parquet files in {path}{hint}")
        path = files[0]
    check_header_names(path, read_header(path, fmt))


def check_header_names(path: Path, names: Sequence[str]) -> None:
    """Refuse a header that names a column twice (see ``check_source``)."""
    repeated = sorted(str(n) for n, count in Counter(names).items() if count > 1)
    if repeated:
        raise DataError(f"{path}: column name(s) {repeated} appear more than once in the header; rename them "
                        f"(pandas and cuDF would read the second '{repeated[0]}' as '{repeated[0]}.1')")


_WIDTH_ERROR = re.compile(r"Expected (\d+) columns, got (\d+): ?(.*)", re.S)


def check_row_widths(path: Path) -> None:
    """Refuse a CSV row with more fields than the header when only some columns are read.

    Reading every column, pandas and cuDF refuse such a row themselves; reading some
    (``usecols``: predict reads only what the model needs) they drop the extra fields and
    score the row. pyarrow's parser counts the fields of every row while converting one
    column, at about the cost of the read itself. Its other complaints are left to the
    reader of record, which decides what the file means.
    """
    import pyarrow as pa
    import pyarrow.csv as pacsv

    try:
        reader = pacsv.open_csv(path, read_options=pacsv.ReadOptions(autogenerate_column_names=True,
                                                                     block_size=1 << 24),
                                convert_options=pacsv.ConvertOptions(include_columns=["f0"],
                                                                     column_types={"f0": pa.string()}))
        for _ in reader:
            pass
    except (pa.ArrowInvalid, pa.ArrowKeyError, OSError, ValueError) as exc:
        found = _WIDTH_ERROR.search(str(exc))
        if found and int(found.group(2)) > int(found.group(1)):
            row = one_line(found.group(3))[:120]
            raise DataError(f"{path}: a row has {found.group(2)} fields where the header has {found.group(1)} "
                            f"(row: {row!r}); fix the row or quote the field that holds the separator") from None


def parquet_files(folder: Path) -> list[Path]:
    """The Parquet files of a dataset folder as pyarrow lists them (hidden ``.``/``_`` names
    skipped, partition subfolders included)."""
    return sorted(p for p in folder.rglob("*")
                  if p.suffix.lower() in (".parquet", ".pq") and p.is_file()
                  and not any(part.startswith((".", "_")) for part in p.relative_to(folder).parts))


def read_header(path: Path, fmt: str) -> list[str]:
    """Column names exactly as the file holds them (pandas renames a repeated name; this does
    not): the first non-blank line of a CSV, the schema of a Parquet file."""
    if fmt == "parquet":
        import pyarrow.parquet as pq

        try:
            return [str(n) for n in pq.read_schema(path).names]
        except read_errors() as exc:
            raise DataError(f"cannot read {path} as parquet: {one_line(exc)}") from exc
    try:
        with open(path, newline="", encoding="utf-8-sig") as fh:
            row = next((r for r in csv.reader(fh) if r), None)
    except (csv.Error, UnicodeDecodeError) as exc:
        raise DataError(f"{path} is not a text CSV file ({one_line(exc)})") from exc
    except OSError as exc:
        raise DataError(f"cannot read {path}: {exc.strerror or exc}") from exc
    if row is None:
        raise DataError(f"{path} is empty: a CSV file needs a header line")
    return row


def partitioned_sources(text: str | list[str]) -> list[Path]:
    """The files a partitioned read names (globs expanded, in name order); nothing matching is
    an error naming the pattern. Remote URLs pass through unchecked."""
    found: list[Path] = []
    for item in [text] if isinstance(text, str) else text:
        if "://" in item:
            found.append(Path(item.split("://", 1)[1]))
        elif any(ch in item for ch in "*?["):
            matched = sorted(glob.glob(item))
            if not matched:
                raise DataError(f"no files match {item}")
            found += [Path(m) for m in matched]
        elif not Path(item).exists():
            raise input_not_found(item)
        else:
            found.append(Path(item))
    if not found:
        raise DataError("no input files given")
    return found


def infer_format(path: Path, *, fix: str = "set format: csv or parquet") -> str:
    """The format a file's name says (a folder is Parquet); ``fix`` is how the caller's user
    names one when the name says nothing."""
    if path.is_dir():
        return "parquet"
    suffixes = [s.lower() for s in path.suffixes]
    if ".parquet" in suffixes or ".pq" in suffixes:
        return "parquet"
    if ".csv" in suffixes or ".txt" in suffixes:
        return "csv"
    raise DataError(f"{path}: cannot tell the format from the file name (.csv, .txt, .parquet or .pq); {fix}")


def text_dates(dtypes: Mapping[str, str] | None, dates: Mapping[str, Any] | None,
               header: Sequence[str] | None) -> dict[str, str] | None:
    """CSV dtypes with each ``dates`` column of ``header`` read as text unless ``dtypes`` names
    it: 19970101 keeps its digits (a gap would make it 19970101.0), and Dask does not guess a
    type from its first rows that a bad value further on contradicts. A column the header lacks
    is left to the check that names it."""
    types = {**{c: "str" for c in dates or {} if header is None or c in header}, **(dtypes or {})}
    return types or None


def pushed_filters(filters: Sequence[Filter] | None, dates: Mapping[str, Any] | None) -> list[Filter]:
    """The filters a Parquet reader can apply itself: those on columns not parsed as dates
    (a filter on a date column compares dates, which exist only after the parse)."""
    return [f for f in filters or () if f[0] not in (dates or {})]


def late_filters(filters: Sequence[Filter] | None, dates: Mapping[str, Any] | None) -> list[Filter]:
    """The filters on ``dates`` columns: applied after the parse."""
    return [f for f in filters or () if f[0] in (dates or {})]


def apply_filters(frame: Any, filters: Sequence[Filter], *, source: str = "") -> Any:
    """Keep rows matching every ``[column, op, value]`` filter (pyarrow's conjunctive form)."""
    mask = None
    for column, op, value in filters:
        if column not in frame.columns:
            raise DataError(f"{source}: filter on unknown column '{column}'")
        try:
            cond = _filter_condition(frame[column], op, value)
        except (TypeError, ValueError) as exc:       # a text column compared with a number...
            raise DataError(f"{source}: filter [{column!r}, {op!r}, {value!r}] cannot compare column '{column}' "
                            f"({frame[column].dtype}) with {value!r}: {one_line(exc)}") from exc
        mask = cond if mask is None else (mask & cond)
    return frame[mask.fillna(False)].reset_index(drop=True) if mask is not None else frame


def _filter_condition(col: Any, op: str, value: Any) -> Any:
    """The row mask of one ``[column, op, value]`` filter; on a date column the value is a
    date (``"1997-06-01"``, or 19970601 as its digits)."""
    if pd.api.types.is_datetime64_any_dtype(col.dtype):
        value = [_as_date(v) for v in value] if op in ("in", "not in") else _as_date(value)
    if op == "in":
        return col.isin(list(value))
    if op == "not in":
        return ~col.isin(list(value))
    compare = _COMPARISONS.get(op)
    if compare is None:
        raise ValueError(f"unknown filter operator '{op}' (use one of {', '.join(FILTER_OPS)})")
    return compare(col, value)


def _as_date(value: Any) -> pd.Timestamp:
    """A filter value compared with a date column, as a date (an integer read as its digits:
    pandas would read 19970601 as nanoseconds since 1970)."""
    stamp = pd.Timestamp(str(value) if isinstance(value, (int, np.integer)) else value)
    if stamp is pd.NaT:
        raise ValueError(f"{value!r} is not a date")
    return stamp


_COMPARISONS: dict[str, Callable[[Any, Any], Any]] = {
    "==": lambda col, v: col == v, "!=": lambda col, v: col != v, "<": lambda col, v: col < v,
    "<=": lambda col, v: col <= v, ">": lambda col, v: col > v, ">=": lambda col, v: col >= v,
}

