"""The few-rows path: a served request's handful of rows through the same feature ops, on plain
NumPy arrays instead of a pandas frame.

A pandas call costs tens of microseconds whatever its rows, and a fitted workflow makes a few
hundred of them, so on one row the workflow cost milliseconds while the model scored it in
0.2 ms. ``FewRowsBackend`` is the CPU backend with a lighter frame: a ``ColumnFrame`` (an
ordered mapping of column name to ``Column``) whose columns are NumPy arrays answering the
pandas ``Series`` methods the ops call (``isna``, ``fillna``, ``where``, ``clip``, ``astype``,
``isin``...). The ops themselves are not touched: each runs its own ``transform`` on these
columns, from the same fitted state, so there is no second definition of any op.

The methods written here are the pandas semantics on NumPy, and only where NumPy gives the
same bits (float64 arithmetic is NumPy's in both; a missing value is NaN, None or NaT in
both). Anything else, an accessor (``.dt``), a method not listed, an object column's
conversion, is handed to pandas on the spot (``Column.series``) and its answer taken back, so a
plugin's op runs here too, only without the speed-up where it leaves the fast methods.
``tests/features/test_few_rows.py`` holds every registered op, model and task to bit-identical
output against the pandas path, on random rows with missing values, unseen categories and
extreme numbers.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd

from pipeline.backends.cpu import CpuBackend, category_key, looked_up_codes

# Up to this many rows a batch takes the few-rows path (measured: scripts/bench_serve.py --calls,
# docs/benchmarks.md "Online scoring"); a larger one goes through pandas, whose per-call cost
# is then spread over enough rows to stop mattering.
FEW_ROWS = 4096


class Column(np.ndarray):
    """One column's values (1-D) with the pandas ``Series`` methods the feature ops call."""

    def __new__(cls, values: Any, dtype: Any = None) -> Column:
        return np.asarray(values, dtype=dtype).view(cls)

    def __array_wrap__(self, array: np.ndarray, context: Any = None, return_scalar: bool = False) -> Any:
        # A reduction (``.any()``, ``.sum()``) gives a scalar, as pandas' do, not a 0-d column.
        if return_scalar or array.ndim == 0:
            return array[()]
        return super().__array_wrap__(array, context, return_scalar)

    # ------------------------------------------------------------------ as pandas
    def series(self) -> pd.Series:
        """These values as a pandas Series (for what NumPy does not do the same way)."""
        plain = np.asarray(self)
        return pd.Series(plain, dtype=plain.dtype, copy=False)     # object stays object (pandas would infer str)

    def __getattr__(self, name: str) -> Any:
        # Only reached for names NumPy arrays lack (``dt``, ``str``, ``unique``, ``dropna``...):
        # pandas answers them, and a Series it returns comes back as a Column.
        if name.startswith("__"):
            raise AttributeError(name)
        found = getattr(self.series(), name)
        if callable(found):
            @functools.wraps(found)
            def call(*args: Any, **kwargs: Any) -> Any:
                return _taken_back(found(*_plain(args), **_plain(kwargs)))
            return call
        return _taken_back(found)

    @property
    def values(self) -> np.ndarray:
        return np.asarray(self)

    @property
    def index(self) -> None:
        return None

    def to_numpy(self, dtype: Any = None, na_value: Any = None, copy: bool = False) -> np.ndarray:
        plain = np.asarray(self)
        if na_value is not None and plain.dtype.kind == "O":
            plain = np.where(pd.isna(plain), na_value, plain)
        return plain.astype(dtype, copy=copy) if dtype is not None else (plain.copy() if copy else plain)

    # ------------------------------------------------------------------ missing values
    def isna(self) -> Column:
        plain = np.asarray(self)
        if plain.dtype.kind == "f":
            return Column(np.isnan(plain))
        if plain.dtype.kind in "iub":
            return Column(np.zeros(len(plain), dtype=bool))
        return Column(pd.isna(plain))

    def notna(self) -> Column:
        return Column(~np.asarray(self.isna()))

    def fillna(self, value: Any) -> Column:
        plain = np.asarray(self)
        if plain.dtype.kind in "iub":
            return Column(plain.copy())
        if plain.dtype.kind == "f" and isinstance(value, (int, float)) and not isinstance(value, bool):
            return Column(np.where(np.isnan(plain), value, plain))
        return _taken_back(self.series().fillna(value))

    # ------------------------------------------------------------------ values
    def astype(self, dtype: Any, copy: bool = True, **_: Any) -> Column:    # type: ignore[override]
        plain = np.asarray(self)
        target = _numpy_dtype(dtype)
        if target is None or plain.dtype.kind not in "iubf" or target.kind not in "iubf" or \
                (plain.dtype.kind == "f" and target.kind in "iub" and np.isnan(plain).any()):
            # Text, dates, pandas' own dtypes, or NaN into integers (pandas refuses it): pandas.
            return _taken_back(self.series().astype(dtype))
        return Column(plain.astype(target, copy=copy))

    def clip(self, lower: Any = None, upper: Any = None, *args: Any, **kwargs: Any) -> Column:   # type: ignore[override]
        lower = kwargs.pop("min", lower)
        upper = kwargs.pop("max", upper)
        plain = np.asarray(self)
        if plain.dtype.kind != "f":
            return _taken_back(self.series().clip(lower=lower, upper=upper))
        return Column(np.clip(plain, -np.inf if lower is None else lower, np.inf if upper is None else upper))

    def where(self, cond: Any, other: Any = np.nan) -> Column:
        plain, keep = np.asarray(self), np.asarray(cond, dtype=bool)
        if plain.dtype.kind == "O" and not isinstance(other, np.ndarray):
            out = plain.copy()
            out[~keep] = other
            return Column(out)
        if plain.dtype.kind == "f" and isinstance(other, float):
            return Column(np.where(keep, plain, other))
        return _taken_back(self.series().where(pd.Series(keep, copy=False), other))

    def isin(self, values: Iterable[Any]) -> Column:
        plain, wanted = np.asarray(self), list(values)
        if plain.dtype.kind == "O" and all(type(v) is str for v in wanted):
            allowed = set(wanted)
            return Column(np.fromiter((type(v) is str and v in allowed for v in plain.tolist()), dtype=bool,
                                      count=len(plain)))
        return _taken_back(self.series().isin(wanted))

    # Reductions skip missing values, as pandas' do (NumPy's would give NaN).
    def min(self, *args: Any, **kwargs: Any) -> Any:      # type: ignore[override]
        return self._reduced("min", np.nanmin)

    def max(self, *args: Any, **kwargs: Any) -> Any:      # type: ignore[override]
        return self._reduced("max", np.nanmax)

    def sum(self, *args: Any, **kwargs: Any) -> Any:      # type: ignore[override]
        return self.series().sum()

    def mean(self, *args: Any, **kwargs: Any) -> Any:     # type: ignore[override]
        return self.series().mean()

    def std(self, *args: Any, **kwargs: Any) -> Any:      # type: ignore[override]
        return self.series().std()

    def _reduced(self, name: str, nan_skipping: Any) -> Any:
        plain = np.asarray(self)
        if plain.dtype.kind == "f":
            if len(plain) == 0 or np.isnan(plain).all():
                return np.nan
            return plain.dtype.type(nan_skipping(plain))
        if plain.dtype.kind in "iub" and len(plain):
            return getattr(plain, name)()
        return getattr(self.series(), name)()


def _numpy_dtype(dtype: Any) -> np.dtype | None:
    """``dtype`` as a NumPy dtype when it names one (not 'str', 'category' or a pandas dtype)."""
    if isinstance(dtype, np.dtype):
        return dtype
    if isinstance(dtype, str) and dtype in _NUMPY_NAMES:
        return np.dtype(dtype)
    if isinstance(dtype, type) and issubclass(dtype, (np.number, np.bool_)):
        return np.dtype(dtype)
    return None


_NUMPY_NAMES = frozenset({"float64", "float32", "float16", "int64", "int32", "int16", "int8", "uint64", "uint32",
                          "uint16", "uint8", "bool"})


def _taken_back(value: Any) -> Any:
    """A pandas answer as this path holds it: a Series as a Column (NumPy-backed, or converted
    to NumPy values as ``to_numpy`` gives them); anything else as it is."""
    if isinstance(value, pd.Series):
        return Column(value.to_numpy())
    return value


def _plain(values: Any) -> Any:
    """Arguments for a pandas method: Columns as Series (pandas aligns nothing on them)."""
    if isinstance(values, tuple):
        return tuple(v.series() if isinstance(v, Column) else v for v in values)
    return {k: v.series() if isinstance(v, Column) else v for k, v in values.items()}


class Names(list):
    """A frame's column names (a pandas Index costs 30 us to build; the ops ask dozens of times)."""

    @property
    def is_unique(self) -> bool:
        return True                         # a mapping's keys

    def tolist(self) -> list[str]:
        return list(self)


class ColumnFrame:
    """An ordered mapping of column name to ``Column``, all of one length: the frame the
    few-rows path hands the ops (``frame[col]``, ``frame[cols]``, ``frame.columns``, ``drop``,
    ``copy``, assignment)."""

    def __init__(self, columns: Mapping[str, Any], rows: int | None = None) -> None:
        self._columns = {str(name): _as_column(values) for name, values in columns.items()}
        self._rows = rows if rows is not None else (len(next(iter(self._columns.values()))) if self._columns else 0)

    @classmethod
    def _of_columns(cls, columns: dict[str, Column], rows: int) -> ColumnFrame:
        """A frame of columns that are Columns already (a subset, a copy): nothing converted."""
        frame = cls.__new__(cls)
        frame._columns, frame._rows = columns, rows
        return frame

    @classmethod
    def of(cls, frame: pd.DataFrame) -> ColumnFrame:
        """A pandas frame's columns as NumPy arrays (text as object arrays, NaN for missing)."""
        return cls({name: _from_series(frame[name]) for name in frame.columns}, rows=len(frame))

    def to_pandas(self) -> pd.DataFrame:
        return pd.DataFrame({name: np.asarray(values) for name, values in self._columns.items()}, copy=False)

    # ------------------------------------------------------------------ the frame API the ops use
    def __len__(self) -> int:
        return self._rows

    @property
    def shape(self) -> tuple[int, int]:
        return self._rows, len(self._columns)

    @property
    def empty(self) -> bool:
        return self._rows == 0 or not self._columns

    @property
    def columns(self) -> Names:
        return Names(self._columns)

    @property
    def index(self) -> None:
        return None

    @property
    def dtypes(self) -> dict[str, np.dtype]:
        return {name: values.dtype for name, values in self._columns.items()}

    def __contains__(self, name: object) -> bool:
        return name in self._columns

    def __iter__(self) -> Iterator[str]:
        return iter(self._columns)

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            try:
                return self._columns[key]
            except KeyError:
                raise KeyError(key) from None
        names = list(key)
        missing = [name for name in names if name not in self._columns]
        if missing:
            raise KeyError(f"{missing} not in the columns")
        return ColumnFrame._of_columns({name: self._columns[name] for name in names}, self._rows)

    def __setitem__(self, name: str, values: Any) -> None:
        self._columns[str(name)] = _as_column(values)

    def copy(self, deep: bool = True) -> ColumnFrame:
        columns = {name: values.copy() for name, values in self._columns.items()} if deep else dict(self._columns)
        return ColumnFrame._of_columns(columns, self._rows)

    def drop(self, columns: Sequence[str]) -> ColumnFrame:
        gone = set(columns)
        return ColumnFrame._of_columns({name: v for name, v in self._columns.items() if name not in gone}, self._rows)

    def isna(self) -> ColumnFrame:
        return ColumnFrame._of_columns({name: values.isna() for name, values in self._columns.items()}, self._rows)

    def sum(self) -> dict[str, Any]:
        return {name: np.asarray(values).sum() for name, values in self._columns.items()}


def _as_column(values: Any) -> Column:
    if isinstance(values, Column):
        return values
    if isinstance(values, (pd.Series, pd.Index)):
        return Column(_from_series(values))
    return Column(values)


def _from_series(series: Any) -> np.ndarray:
    """A pandas column's values as NumPy: NumPy-backed ones as they are, text as an object
    array (NaN for missing, as pandas' own string dtype holds it), nullable ones as float64
    with NaN (what ``to_matrix`` makes of them)."""
    values = series.to_numpy()
    if values.dtype.kind == "O" and not _is_text(series):
        return series.to_numpy(dtype="float64", na_value=np.nan)
    return values


def _is_text(series: Any) -> bool:
    from pipeline.core.dtypes import dtype_kind

    return dtype_kind(series.dtype) in ("text", "other")


def concat(frames: Sequence[ColumnFrame], axis: int = 1, **_: Any) -> ColumnFrame:
    """Frames side by side (the ops join their new columns to the kept ones)."""
    if axis != 1:
        raise ValueError("the few-rows path joins columns only (axis=1)")
    columns: dict[str, Column] = {}
    for frame in frames:
        columns.update(frame._columns)
    return ColumnFrame._of_columns(columns, len(frames[0]) if frames else 0)


class FewRowsBackend(CpuBackend):
    """The CPU backend for a few rows held as a ``ColumnFrame`` (see the module doc); everything
    that is not about the frame is the CPU backend's."""

    frame = SimpleNamespace(concat=concat, DataFrame=ColumnFrame, Series=Column, isna=pd.isna)

    def from_pandas(self, frame: Any) -> ColumnFrame:
        return frame if isinstance(frame, ColumnFrame) else ColumnFrame.of(frame)

    def to_host(self, x: Any) -> Any:
        if isinstance(x, ColumnFrame):
            return x.to_pandas()
        if isinstance(x, Column):
            return x.series()
        return super().to_host(x)

    def columns_frame(self, columns: Mapping[str, Any], index: Any) -> ColumnFrame:
        return ColumnFrame(columns)

    def map_columns(self, fn: Any, items: Sequence[Any]) -> list[Any]:
        return [fn(item) for item in items]

    def to_vector(self, series: Any, dtype: str = "float32") -> np.ndarray:
        return np.asarray(series).astype(dtype, copy=False)

    def category_codes(self, series: Any, categories: Sequence[Any]) -> Column:
        # The CPU backend's few-rows lookup (a cached dict per category list), on the array itself.
        values = np.asarray(series)
        key = category_key(categories, values.dtype)
        if key is None:
            return _taken_back(super().category_codes(Column(values).series(), categories))
        return Column(looked_up_codes(values.tolist(), np.asarray(Column(values).isna()).tolist(), key))
