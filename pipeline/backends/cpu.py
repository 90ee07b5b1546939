"""CPU backend: pandas, NumPy, scikit-learn (XGBoost on the CPU)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pandas as pd

from pipeline.backends.contract import Backend
from pipeline.backends.cpu_engine import cpu_engine_choice, reductions_choice
from pipeline.backends.csv_dialect import DEFAULT_DIALECT, CsvDialect
from pipeline.backends.csv_reader import read_csv_frame
from pipeline.backends.dask_collections import compute_lazy, is_partitioned
from pipeline.backends.matrices import row_major_matrix
from pipeline.core.dtypes import dtype_kind
from pipeline.core.threads import map_in_threads, thread_count

# The table engine and how it adds floats: read on each use (backends.cpu_engine), so a test or
# a caller can switch.

T = TypeVar("T")
R = TypeVar("R")
# Rows from which ``take`` spreads a frame's columns over threads (below it, thread hand-offs
# cost more than the take: the feature ops' threshold too).
THREADED_TAKE_ROWS = 32_768


class CpuBackend(Backend):
    name = "cpu"
    frame = pd
    array = np
    dask_backend = "pandas"
    _distributions = ("pandas", "numpy", "pyarrow", "polars", "sklearn", "xgboost", "lightgbm", "catboost")
    csv_checks_row_widths = True

    @property
    def table_engine_name(self) -> str:
        """``polars`` unless ``$PIPELINE_CPU_ENGINE`` says ``pandas``; anything else is refused."""
        return cpu_engine_choice()

    @property
    def table_engine(self) -> Any | None:
        """The Polars engine unless ``$PIPELINE_CPU_ENGINE`` says pandas."""
        if self.table_engine_name == "pandas":
            return None
        return _polars_engine(self.reductions == "repeatable")

    @property
    def reductions(self) -> str:
        """``repeatable`` unless ``$PIPELINE_REDUCTIONS`` says ``fast`` (and the engine is
        Polars: pandas' sums are in row order); anything else is refused."""
        choice = reductions_choice()
        return "repeatable" if self.table_engine_name == "pandas" else choice

    def versions(self) -> dict[str, str]:
        """The libraries, the table engine the run used and how it adds floats (the run record
        says which, and a cached result of one is not taken for another's)."""
        return {**super().versions(), "table_engine": self.table_engine_name, "reductions": self.reductions}

    def _read_csv(self, path: Path, *, columns, dtypes, na_values, dialect: CsvDialect = DEFAULT_DIALECT) -> pd.DataFrame:
        # pyarrow's reader on every core, giving the C parser's frame (backends.csv_reader).
        return read_csv_frame(path, columns=columns, dtypes=dtypes, na_values=na_values, dialect=dialect)

    def _read_parquet(self, path: Path, *, columns, filters) -> pd.DataFrame:
        frame = pd.read_parquet(
            path,
            columns=list(columns) if columns else None,
            filters=[tuple(f) for f in filters] if filters else None,
        )
        # pyarrow's allocator keeps the pages of the Arrow table it read and converted: 330 MiB
        # of 10M events stayed resident, and were the difference between the events benchmark's
        # peak and Polars' (1.92 against 1.59 GiB with them given back; 1.40 hand-written Polars).
        import pyarrow

        pyarrow.default_memory_pool().release_unused()
        return frame

    def from_pandas(self, frame: pd.DataFrame) -> pd.DataFrame:
        return frame

    def to_host(self, x: Any) -> Any:
        if is_partitioned(x):
            (x,) = compute_lazy(x)
        if isinstance(x, (pd.DataFrame, pd.Series, np.ndarray)):
            return x
        if isinstance(x, np.generic):
            return x.item()
        return x

    def to_matrix(self, frame: pd.DataFrame, columns: Sequence[str] | None = None, dtype: str = "float32") -> np.ndarray:
        """A writable, row-major matrix filled column by column: the one allowed copy.

        ``DataFrame.to_numpy`` of a mixed-dtype frame returns a column-major matrix; every
        consumer here reads rows (mini-batch gathers, XGBoost, which copies a column-major
        array to row-major first), and a batch gather from a row-major matrix measured 8x
        faster at 1M x 40. Filling a preallocated row-major matrix costs the same as
        ``to_numpy``. It is writable, which DLPack export needs (pandas copy-on-write views
        are read-only). Rows are filled by cache-sized blocks, spans of them on a thread per
        core (``row_major_matrix``).
        """
        names = list(columns) if columns is not None else list(frame.columns)

        def column_values(name: str) -> np.ndarray:
            values = frame[name].to_numpy()          # a view for NumPy-backed columns
            if values.dtype == object:               # nullable extension column: NA -> NaN
                values = frame[name].to_numpy(dtype=dtype, na_value=np.nan)
            return values

        return row_major_matrix(np, len(frame), names, column_values, dtype,
                                map_spans=map_in_threads, spans=thread_count())

    def to_vector(self, series: pd.Series, dtype: str = "float32") -> np.ndarray:
        return series.to_numpy(dtype=dtype, copy=True)

    def data_address(self, array: np.ndarray) -> int:
        return int(array.__array_interface__["data"][0])

    def take(self, frame: Any, positions: np.ndarray) -> Any:
        """Rows by position, each column taken on a thread of its own (``map_in_threads``):
        pandas takes a frame's columns one after another on one core, and a split's three
        takes of a 2M-row table were 2 s of its stage. A small take, a partitioned frame or
        one with repeated column names goes through pandas' own ``iloc``; either way the
        result is the same frame, column for column."""
        if not _threaded_rows(frame, len(positions)):
            return super().take(frame, positions)
        positions = np.asarray(positions, dtype=np.intp)
        index = pd.RangeIndex(len(positions))

        def column(source: pd.Series) -> pd.Series:
            # the dtype given, or pandas would infer ``str`` for an object column of text
            return pd.Series(source.array.take(positions), index=index, dtype=source.dtype, copy=False)

        return _by_column(frame, column, index)

    def reindex(self, frame: Any, labels: Any) -> Any:
        """One hash lookup of ``labels`` in the frame's index, then each column taken on a
        thread of its own: pandas' reindex takes the columns one after another on one core,
        and the events' label and join lookups of 3.4M rows spent most of their time there. A
        small reindex, a partitioned frame, one with repeated column names or repeated index
        values (pandas' own error) goes through pandas' ``reindex``; either way the result is
        the same frame, column for column."""
        if not _threaded_rows(frame, len(labels)) or not frame.index.is_unique:
            return super().reindex(frame, labels)
        labels = labels if isinstance(labels, pd.Index) else pd.Index(labels)
        positions = frame.index.get_indexer(labels)
        return _by_column(frame, lambda source: _taken_or_missing(source, positions, labels), labels)

    def columns_frame(self, columns: Mapping[str, Any], index: Any) -> pd.DataFrame:
        """Without copying: pandas' constructor (``copy=None`` for a dict) stacks same-dtype
        columns into one new block, a copy of every value (1.4 s of 4.4 s of CPU in a 2M-row
        workflow's fit and transform); ``copy=False`` keeps each column's own buffer. The ops
        never write into a frame, and pandas' copy-on-write tracks the series they pass."""
        return pd.DataFrame(dict(columns), index=index, copy=False)

    def map_columns(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
        """Per-column work on a thread per available core (``PIPELINE_THREADS``): the NumPy,
        pandas and pyarrow kernels the ops call release the GIL, and each column is computed
        by the same code as in a serial loop, so results are identical."""
        return map_in_threads(fn, items)

    def indicator_columns(self, codes: pd.Series, count: int) -> list[np.ndarray]:
        """One scatter into a column-major matrix instead of ``count`` comparisons, each a
        pandas call: each column is a contiguous view of it. A served request of one row spent
        most of its time in those calls."""
        positions = codes.to_numpy()
        matrix = np.zeros((len(positions), count + 1), dtype=np.float32, order="F")
        matrix[np.arange(len(positions)), positions] = 1.0
        return [matrix[:, i + 1] for i in range(count)]

    def category_codes(self, series: pd.Series, categories: Sequence[Any]) -> pd.Series:
        # Index.get_indexer gives -1 for anything not listed (unseen, rare, missing); casting
        # to a CategoricalDtype would too, but pandas deprecates that for unlisted values.
        key = category_key(categories, series.dtype)
        if key is not None and len(series) <= SMALL_LOOKUP_ROWS:
            # A few rows (a served request): a dict lookup per value is a tenth of the cost of
            # the vectorised lookups' set-up. Same codes: both match by equality and hash.
            codes = looked_up_codes(series.tolist(), series.isna().to_numpy(), key)
            return pd.Series(codes, index=series.index, dtype="int32")
        index = _category_index(*key) if key is not None else _new_category_index(categories, series.dtype)
        codes = arrow_string_positions(series, index)
        if codes is None:
            codes = index.get_indexer(series)
        return pd.Series(codes + 1, index=series.index, dtype="int32")


# Up to this many values, category codes come from a dict lookup per value.
SMALL_LOOKUP_ROWS = 64


def _threaded_rows(frame: Any, rows: int) -> bool:
    """Whether making ``rows`` rows of ``frame`` goes column by column on threads: enough rows
    to pay for the hand-offs, an in-memory frame of two columns or more, each named once."""
    return rows >= THREADED_TAKE_ROWS and not is_partitioned(frame) and frame.shape[1] >= 2 and frame.columns.is_unique


def _by_column(frame: pd.DataFrame, column: Callable[[pd.Series], pd.Series], index: pd.Index) -> pd.DataFrame:
    """A frame of ``column(c)`` for each column ``c`` of ``frame``, each on a thread of its own,
    on ``index``, with ``frame``'s column labels and ``attrs``."""
    columns = map_in_threads(lambda i: column(frame.iloc[:, i]), range(frame.shape[1]))
    out = pd.DataFrame(dict(enumerate(columns)), index=index, copy=False)
    out.columns = frame.columns
    out.attrs = dict(frame.attrs)
    return out


def _taken_or_missing(source: pd.Series, positions: np.ndarray, index: pd.Index) -> pd.Series:
    """``source``'s values at ``positions``, missing at -1, on ``index``: the column pandas'
    reindex gives (a NumPy column widened where a value is missing, an extension array in its
    own dtype)."""
    if isinstance(source.dtype, np.dtype):
        values = pd.api.extensions.take(source.to_numpy(), positions, allow_fill=True)
    else:
        values = source.array.take(positions, allow_fill=True)
    # the dtype given, or pandas would infer ``str`` for an object column of text
    return pd.Series(values, index=index, dtype=values.dtype, copy=False, name=source.name)


def category_key(categories: Sequence[Any], dtype: Any) -> tuple[Any, ...] | None:
    """(categories, dtype) as the key of the cached lookups; None when either is unhashable."""
    key = (tuple(categories), dtype)
    try:
        hash(key)
    except TypeError:                        # an unhashable category or dtype: no reuse
        return None
    return key


def looked_up_codes(values: Sequence[Any], missing: Sequence[bool], key: tuple[Any, ...]) -> np.ndarray:
    """int32 codes of a few ``values`` by a dict lookup each (``category_key``'s categories:
    1..n, 0 for any other value); a ``missing`` one (NaN, None, pd.NA) is 0, never compared."""
    positions = _category_positions(*key)
    return np.fromiter((0 if gone else positions.get(value, 0) for value, gone in zip(values, missing, strict=True)),
                       dtype=np.int32, count=len(values))


@functools.lru_cache(maxsize=4096)
def _category_positions(categories: tuple[Any, ...], dtype: Any) -> dict[Any, int]:
    """Category -> its code (1-based) as ``_category_index`` matches it: the index's own
    values, so a value the column's dtype would have converted is looked up as converted."""
    index = _category_index(categories, dtype)
    positions: dict[Any, int] = {}
    for code, value in enumerate(index.tolist(), start=1):
        positions.setdefault(value, code)         # a repeated value keeps its first code, as get_indexer
    return positions


@functools.lru_cache(maxsize=4096)
def _category_index(categories: tuple[Any, ...], dtype: Any) -> pd.Index:
    """The (immutable) index of a fitted op's categories, built once per column and dtype: a
    served request of a few rows spent an eighth of its time building these."""
    return _new_category_index(categories, dtype)


def _new_category_index(categories: Sequence[Any], dtype: Any) -> pd.Index:
    try:
        return pd.Index(list(categories), dtype=dtype if len(categories) else None)
    except (TypeError, ValueError):          # categories the column's dtype cannot hold match nothing of it
        return pd.Index(list(categories), dtype=object)


@functools.cache
def _polars_engine(repeatable: bool = True) -> Any:
    """The (stateless) Polars engine of this process for a mode; Polars is imported on first use."""
    from pipeline.backends.polars_engine import PolarsTableEngine

    return PolarsTableEngine(repeatable)


def arrow_string_positions(series: pd.Series, index: pd.Index) -> np.ndarray | None:
    """``index.get_indexer(series)`` for a pyarrow-backed text column (pandas 3's default
    ``str``), by pyarrow's hash lookup on the Arrow buffers: ``get_indexer`` first converts
    every value to a Python string (at 2M rows 0.5 s a column, 8x the lookup). Same
    positions, -1 for missing and unlisted values; None for any other column."""
    values, listed = _arrow_strings(series.array), _arrow_strings(index.array)
    if values is None or listed is None or values.type != listed.type:
        return None
    import pyarrow.compute as pc

    found = pc.index_in(values, value_set=listed.combine_chunks() if hasattr(listed, "combine_chunks") else listed)
    return np.asarray(found.fill_null(-1).to_numpy(zero_copy_only=False), dtype=np.int32)


def _arrow_strings(array: Any) -> Any:
    """The Arrow (chunked) array behind a pandas text array, or None when it is not one."""
    if not (isinstance(array, pd.arrays.ArrowExtensionArray) and dtype_kind(array.dtype) == "text"):
        return None
    import pyarrow as pa

    arrow = array.__arrow_array__()
    return arrow if pa.types.is_string(arrow.type) or pa.types.is_large_string(arrow.type) else None
