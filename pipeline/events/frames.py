"""Small frame operations the engine shares, written once for pandas and cuDF (the frame
API only; the backend object supplies the array module where one is needed)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from pipeline.backends import Backend

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


def merge_left(left: Any, right: Any, keys: list[str]) -> Any:
    """Every row of ``left`` with ``right``'s columns where the keys match (missing elsewhere)."""
    return left.merge(right, on=keys, how="left")


def stack_and_sort(frames: list[Any], by: list[str], backend: Backend) -> Any:
    """Frames stacked and sorted by ``by`` (unique per row here, so any sort gives one order)."""
    frame = frames[0] if len(frames) == 1 else backend.frame.concat(frames, ignore_index=True)
    return frame.sort_values(by).reset_index(drop=True)


def set_constant(frame: Any, name: str, value: Any, dtype: Any) -> None:
    """Column ``name`` holding ``value`` in every row, of ``dtype``."""
    frame[name] = value
    frame[name] = frame[name].astype(dtype)


def cast_output(series: Any, aggregate: str, *, zero_when_missing: bool) -> Any:
    """A feature column in its documented dtype: counts int64, sums and days float64, min /
    max / first / last of numbers float64 (text and dates stay as they are)."""
    if zero_when_missing:
        series = series.fillna(0)
    if aggregate in _INT_AGGREGATES:
        return series.astype("int64")
    if aggregate in _FLOAT_AGGREGATES or _is_number(series.dtype):
        return series.astype("float64")
    return series


def _is_number(dtype: Any) -> bool:
    return pd.api.types.is_numeric_dtype(dtype) or pd.api.types.is_bool_dtype(dtype)
