"""Encodings by how often, or where, a level falls: ``frequency_encode`` (each level's share
or count of the training rows), ``hash_encode`` (levels hashed into a fixed number of buckets,
for columns of very many levels) and ``group_rare`` (rare levels merged into one, as text,
for the ops after it)."""

from __future__ import annotations

import hashlib
import math
from typing import Any, ClassVar

import numpy as np
import pandas as pd
from pydantic import Field

from pipeline.backends import Backend
from pipeline.core.dtypes import dtype_kind
from pipeline.core.errors import DataError
from pipeline.features.ops.encoding import code_dtype
from pipeline.features.ops.op_base import FeatureOp, OpState, Scalar
from pipeline.features.ops.op_registry import register_op
from pipeline.features.ops.op_support import (
    count_pairs,
    lookup,
    merged,
    missing_value,
    per_column,
    plain,
    replace_in_place,
)
from pipeline.features.ops.rare import (
    RARE,
    MinFrequency,
    frequent_levels,
    rare_statistics,
)


class FrequencyEncodeState(OpState):
    categories: dict[str, list[Scalar]]
    # Per column, the share (or count) of each category, in ``categories`` order.
    frequencies: dict[str, list[float]]


@register_op
class FrequencyEncode(FeatureOp):
    """Each value replaced by its share of the training rows (``normalize: false``: its count).

    The share is of every training row, missing ones included. Missing and unseen values get
    0, as a level never seen in training has no rows. The column keeps its name and place.
    """

    op: ClassVar[str] = "frequency_encode"
    state_model: ClassVar[type[OpState]] = FrequencyEncodeState
    example: ClassVar[dict[str, Any]] = {"columns": ["cat", "flag"]}
    normalize: bool = Field(True, description="A share of the training rows; false: the count of rows.")

    def statistics(self, frame: Any, backend: Backend) -> dict[str, Any]:
        return merged(per_column(backend, frame, lambda col: {col: frame[col].value_counts(dropna=True),
                                                              f"{col}.missing": frame[col].isna().sum()},
                                 self.columns))

    def fit_from(self, stats: dict[str, Any], backend: Backend) -> FrequencyEncodeState:
        cats, freqs = {}, {}
        for col in self.columns:
            counts = count_pairs(stats[col])
            rows = sum(n for _, n in counts) + int(plain(stats[f"{col}.missing"]))
            cats[col] = [v for v, _ in counts]
            freqs[col] = [n / rows if self.normalize else float(n) for _, n in counts]
        return FrequencyEncodeState(categories=cats, frequencies=freqs)

    def transform(self, frame: Any, backend: Backend, state: FrequencyEncodeState) -> Any:
        self.check_columns(frame)
        looked_up = per_column(backend, frame, lambda col: lookup(frame[col], state.categories[col],
                                                                  [0.0, *state.frequencies[col]], backend),
                               self.columns)
        new = dict(zip(self.columns, looked_up))
        return replace_in_place(frame, new)


@register_op
class HashEncode(FeatureOp):
    """Each value hashed into one of ``buckets`` integer codes 1..buckets; 0 for missing.

    For columns of very many levels (ids, URLs, postcodes), where a category list would be as
    long as the data: nothing is fitted, so the workflow stays small, and a value never seen in
    training gets a bucket like any other. The output is one integer-code column in place
    (a categorical: ``categorical_cardinalities`` reports ``buckets + 1``, for embeddings and
    trees), not one-hot columns, which would be ``buckets`` wide.

    The hash is the same on every device and in every process: the first 8 bytes (little
    endian) of the BLAKE2b digest (8-byte digest) of the value's text in UTF-8, modulo
    ``buckets``, plus 1. The text of a whole number is its digits whether it is held as an
    integer or a float (``3`` and ``3.0`` are both ``"3"``: a column of integers with a gap is
    float on pandas and integer on cuDF), another float is its ``repr``, a boolean is
    ``True``/``False`` and a string is itself. Python's ``hash()`` is salted per process, and
    pandas' and cuDF's own row hashes differ, so neither is used: each batch's distinct values
    are hashed on the host (as many as it has distinct values, not rows) and mapped back on
    the device.
    """

    op: ClassVar[str] = "hash_encode"
    example: ClassVar[dict[str, Any]] = {"columns": ["cat", "count"], "buckets": 4}
    buckets: int = Field(1024, ge=1, le=2**31 - 2, description="Number of hash buckets (codes 1..buckets; 0 = missing).")

    def transform(self, frame: Any, backend: Backend, state: OpState) -> Any:
        self.check_columns(frame)
        dtype = code_dtype(self.buckets)

        def hashed(col: str) -> Any:
            series = frame[col]
            values = [plain(v) for v in backend.to_host(series.dropna().unique()) if not missing_value(plain(v))]
            table = [0] + [stable_bucket(v, self.buckets) for v in values]
            return lookup(series, values, table, backend).astype(dtype)

        new = dict(zip(self.columns, per_column(backend, frame, hashed, self.columns)))
        return replace_in_place(frame, new)

    def categorical_cardinalities(self, state: OpState) -> dict[str, int]:
        return {c: self.buckets + 1 for c in self.columns}


def stable_bucket(value: Any, buckets: int) -> int:
    """``value``'s bucket 1..buckets by the documented hash (``HashEncode``)."""
    digest = hashlib.blake2b(hash_text(value).encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little") % buckets + 1


def hash_text(value: Any) -> str:
    """The text a value is hashed by: one text per value whatever dtype holds it."""
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value))
    if isinstance(value, float) and math.isfinite(value) and value == int(value):
        return str(int(value))
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, pd.Timestamp):
        return value.isoformat()
    return str(value)


class GroupRareState(OpState):
    kept: dict[str, list[Scalar]]


@register_op
class GroupRare(FeatureOp):
    """Rare levels of text columns replaced by one level, ``__rare__``, kept as text.

    Rare is the rule ``one_hot`` and ``categorify`` follow (``min_frequency``: a count, or below
    1 a share of the training rows; ``max_categories``), so ops after it (``one_hot``,
    ``target_encode``) see one pooled level instead of many thin ones. Values never seen in
    training are rare too; missing values stay missing.
    """

    op: ClassVar[str] = "group_rare"
    state_model: ClassVar[type[OpState]] = GroupRareState
    example: ClassVar[dict[str, Any]] = {"columns": ["cat"], "min_frequency": 2}
    min_frequency: MinFrequency = Field(0.01, description="Levels seen fewer times than this (a count, or below 1 a "
                                                          "share of the training rows) become '__rare__'.")
    max_categories: int | None = Field(None, ge=1, description="Keep at most this many most-frequent levels.")

    def statistics(self, frame: Any, backend: Backend) -> dict[str, Any]:
        def column_statistics(col: str) -> dict[str, Any]:
            series = frame[col]
            if not is_text(series):
                raise DataError(f"group_rare: column '{col}' is {series.dtype}, not text; its rare levels would "
                                "become the text '__rare__' in a column of numbers: use categorify's min_frequency, "
                                "or quantile_bin for numbers")
            return rare_statistics(series, col, self.min_frequency)

        return merged(per_column(backend, frame, column_statistics, self.columns))

    def fit_from(self, stats: dict[str, Any], backend: Backend) -> GroupRareState:
        return GroupRareState(kept={col: frequent_levels(stats, col, self.min_frequency, self.max_categories)[0]
                                    for col in self.columns})

    def transform(self, frame: Any, backend: Backend, state: GroupRareState) -> Any:
        self.check_columns(frame)
        def grouped(col: str) -> Any:
            series = frame[col]
            return series.where(series.isin(state.kept[col]) | series.isna(), RARE)

        new = dict(zip(self.columns, per_column(backend, frame, grouped, self.columns)))
        return replace_in_place(frame, new)


def is_text(series: Any) -> bool:
    """A column of strings (pandas object or string dtype, cuDF's string columns)."""
    return dtype_kind(series.dtype) == "text"

