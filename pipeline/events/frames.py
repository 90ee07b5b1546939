"""Small frame operations the engine shares, written once for pandas and cuDF (the frame
API only; the backend object supplies the array module where one is needed)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from pipeline.backends import Backend
from pipeline.core.dtypes import dtype_kind, is_number_or_bool

# Input row position (partition number * 2**40 + row within it on Dask): the tie-breaker that
# keeps "ties in row order" true after a sort that is not stable or a shuffle that reorders.
POSITION = "__event_position"
_PARTITION_STRIDE = 1 << 40

_FLOAT_AGGREGATES = ("sum", "mean", "std", "recency", "tenure", "interval_mean")
_INT_AGGREGATES = ("count", "nunique")


def key_list(by: str | Sequence[str]) -> list[str]:
    return [by] if isinstance(by, str) else [str(k) for k in by]


def shuffle_method() -> str:
    """How the engine shuffles Dask frames: as ``dataframe.shuffle.method`` says, else Dask's
    task-based shuffle. Its pieces are ordinary managed results that a worker spills to disk
    under its memory limit; P2P's buffers are unmanaged memory, and with 20M events on two
    450 MiB workers they kept both workers paused for good (the task shuffle finished)."""
    import dask

    return dask.config.get("dataframe.shuffle.method", None) or "tasks"


# Dask frames (by expression name) whose partition i holds exactly the entities that
# ``shuffle_on_keys(..., npartitions=n)`` sends to partition i: another frame shuffled the same
# way lines up with them partition by partition, and joins them without moving either again.
_KEY_PARTITIONED: dict[str, tuple[tuple[str, ...], int]] = {}
_REMEMBERED = 256


def shuffle_on_keys(frame: Any, keys: Sequence[str], npartitions: int | None = None) -> Any:
    """A Dask frame hash-partitioned on ``keys`` (every row of a key in one partition). The
    same call with the same keys, key dtypes and ``npartitions`` puts a key in the same
    partition number whatever the frame.

    A frame with fewer partitions than asked for is first cut into that many by rows: a table
    read as one 57 MiB partition (1.7M customers) and shuffled into 234 pieces held the whole
    partition twice over in one task, and pushed a 558 MiB worker past its limit. Cut first,
    every task handles a piece the size of an output partition; which partition a key lands
    in depends on its hash alone, so the result is the same."""
    if npartitions is not None and int(frame.npartitions) < npartitions:
        frame = frame.repartition(npartitions=npartitions)
    return frame.shuffle(on=list(keys), npartitions=npartitions, shuffle_method=shuffle_method())


def remember_key_partitioned(frame: Any, keys: Sequence[str]) -> Any:
    """Note that ``frame`` came from ``shuffle_on_keys(..., keys)`` with partitions kept as
    they were (a per-partition result of the shuffled frame), and return it."""
    _KEY_PARTITIONED[frame._name] = (tuple(keys), int(frame.npartitions))
    while len(_KEY_PARTITIONED) > _REMEMBERED:
        _KEY_PARTITIONED.pop(next(iter(_KEY_PARTITIONED)))
    return frame


def is_key_partitioned(frame: Any, keys: Sequence[str]) -> bool:
    """Whether ``frame`` is hash-partitioned on exactly ``keys`` (in that order), as noted."""
    return _KEY_PARTITIONED.get(getattr(frame, "_name", None)) == (tuple(keys), int(frame.npartitions))


def with_positions(frame: Any, backend: Backend, partition_info: dict[str, Any] | None = None) -> Any:
    """``frame`` with its rows' input positions in ``POSITION`` (Dask passes ``partition_info``)."""
    offset = int((partition_info or {}).get("number") or 0) * _PARTITION_STRIDE
    out = frame.copy(deep=False)
    out[POSITION] = backend.array.arange(offset, offset + len(frame), dtype="int64")
    return out


def drop_rows_without_key(frame: Any, keys: Sequence[str], facts: dict[str, Any] | None) -> Any:
    """Rows whose key is missing are dropped (they belong to no entity) and counted."""
    missing = None
    for key in keys:
        gaps = frame[key].isna()
        missing = gaps if missing is None else (missing | gaps)
    dropped = int(missing.sum())
    if facts is not None:
        facts["rows_without_key"] = int(facts.get("rows_without_key", 0)) + dropped
    return frame[~missing] if dropped else frame


def matching_key_dtypes(left: Any, right: Any, keys: list[str]) -> tuple[Any, Any]:
    """Keys of one kind in one dtype (int32 and int64 -> int64, int and float -> float64,
    datetime64 units -> the finer, categories -> their values), so every backend merges them."""
    for key in keys:
        left, right = _plain_categories(left, key), _plain_categories(right, key)
        a, b = left[key].dtype, right[key].dtype
        if a == b or not (isinstance(a, np.dtype) and isinstance(b, np.dtype)):
            continue                     # pandas' own nullable dtypes: pandas merges them as they are
        common = np.result_type(a, b)
        if a != common:
            left = left.assign(**{key: left[key].astype(common)})
        if b != common:
            right = right.assign(**{key: right[key].astype(common)})
    return left, right


def _plain_categories(frame: Any, key: str) -> Any:
    dtype = frame[key].dtype
    if str(dtype) == "category" and getattr(dtype, "categories", None) is not None:
        return frame.assign(**{key: frame[key].astype(dtype.categories.dtype)})
    return frame


def lookup(rows: Any, table: Any, keys: list[str], backend: Backend) -> Any:
    """``table``'s other columns for each row of ``rows`` (missing where its keys are not in
    ``table``), on ``rows``' index. ``table`` holds each key once.

    A reindex on the keys: one hash lookup, and only the looked-up columns are written. A left
    merge would also copy every column of ``rows`` (and give no row order on cuDF)."""
    probe, table = matching_key_dtypes(rows[keys], table, keys)
    return lookup_indexed(probe, table.set_index(keys), backend)


def lookup_indexed(probe: Any, indexed: Any, backend: Backend) -> Any:
    """``indexed``'s columns for each row of ``probe`` (a frame holding the key columns that
    ``indexed`` is indexed on, in their dtypes), on ``probe``'s index. Indexing a table once
    and probing it many times (a Dask partition at a time) builds its hash table once."""
    keys = [str(name) for name in indexed.index.names]
    found = backend.reindex(indexed, _key_index(probe, keys, backend))
    found.index = probe.index
    return found


def _key_index(frame: Any, keys: list[str], backend: Backend) -> Any:
    if len(keys) == 1:
        return backend.frame.Index(frame[keys[0]])
    return backend.frame.MultiIndex.from_frame(frame[keys])


def side_by_side(columns: dict[str, Any], index: Any, backend: Backend) -> Any:
    """A frame of ``columns`` (Series on ``index``), in that order. A concat, not
    ``DataFrame(dict)``: pandas' constructor copies same-dtype columns into one block, and on
    millions of rows that copy (fresh pages) cost more than the group-by it followed."""
    if not columns:
        return backend.frame.DataFrame(index=index)
    return backend.frame.concat([series.rename(name) for name, series in columns.items()], axis=1)


def rows_before(frame: Any, time: str, cutoff: Any) -> Any:
    """The rows whose ``time`` is before ``cutoff`` (in memory or on Dask)."""
    return frame[frame[time] < cutoff]


def set_constant(frame: Any, name: str, value: Any, dtype: Any, *, loc: int | None = None) -> None:
    """A new column ``name`` holding ``value`` in every row, of ``dtype``, at position ``loc``
    (default: last)."""
    frame.insert(len(frame.columns) if loc is None else loc, name, value)
    frame[name] = frame[name].astype(dtype)


def cast_output(series: Any, aggregate: str, *, zero_when_missing: bool, source_dtype: Any = None,
                bool_dtype: str = "boolean") -> Any:
    """A feature column in its documented dtype: counts int64, sums and days float64, min /
    max / first / last of numbers float64, of bools ``bool_dtype`` (the backend's nullable
    bool: missing stays missing whether or not every entity had an event in the window), text
    and dates as they are. ``source_dtype`` is the dtype of the column aggregated."""
    if zero_when_missing:
        series = series.fillna(0)
    if aggregate in _INT_AGGREGATES:
        return series.astype("int64")
    if aggregate in _FLOAT_AGGREGATES:
        return series.astype("float64")
    if source_dtype is not None and dtype_kind(source_dtype) == "bool":
        return series.astype(bool_dtype)
    if is_number_or_bool(series.dtype):
        return series.astype("float64")
    return series

