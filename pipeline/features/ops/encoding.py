"""Encodings of category columns: ``one_hot`` (a 0/1 column per category) and ``categorify``
(integer codes by frequency, for trees and embeddings)."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field

from pipeline.backends import Backend
from pipeline.backends.headers import ColumnSet
from pipeline.features.ops.op_base import FeatureOp, OpState, Scalar
from pipeline.features.ops.op_registry import register_op
from pipeline.features.ops.op_support import THREADED_ROWS, merged, per_column, replace_columns, replace_in_place
from pipeline.features.ops.rare import RARE, MinFrequency, frequent_levels, rare_statistics


class OneHotState(OpState):
    categories: dict[str, list[Scalar]]
    rare: dict[str, bool]


class CategorifyState(OpState):
    categories: dict[str, list[Scalar]]


@register_op
class OneHot(FeatureOp):
    """One 0/1 column per category seen in training; an unseen value gets all zeros, or a 1 in
    ``<col>=__rare__`` where the op has that column (an unseen value is rarer than any rare one,
    as scikit-learn's ``handle_unknown="infrequent_if_exist"``; ``categorify`` gives both code 0).

    A missing value (null, NaN, or a string listed in the load's ``na_values``) is never a
    category: it is not counted at fit, and at transform it gets all zeros, in the
    ``<col>=__rare__`` column too (missing is not rare). Add ``fill_missing`` before this op
    to give missing values a column of their own (``strategy: constant, value: missing``).
    """

    op: ClassVar[str] = "one_hot"
    state_model: ClassVar[type[OpState]] = OneHotState
    example: ClassVar[dict[str, Any]] = {"columns": ["cat"], "max_categories": 2}
    min_frequency: MinFrequency = Field(1, description="Categories seen fewer times than this (a count, or below 1 a share "
                                        "of the training rows) share one '<col>=__rare__' column.")
    max_categories: int | None = Field(None, ge=1, description="Keep at most this many most-frequent categories.")
    drop_binary: bool = Field(False, description="For a two-category column keep only the second column.")

    def statistics(self, frame: Any, backend: Backend) -> dict[str, Any]:
        return merged(per_column(backend, frame, lambda col: rare_statistics(frame[col], col, self.min_frequency),
                                 self.columns))

    def fit_from(self, stats: dict[str, Any], backend: Backend) -> OneHotState:
        cats, rare = {}, {}
        for col in self.columns:
            kept, rare[col] = frequent_levels(stats, col, self.min_frequency, self.max_categories)
            kept.sort(key=str)
            if self.drop_binary and len(kept) == 2 and not rare[col]:
                kept = kept[1:]
            cats[col] = kept
        return OneHotState(categories=cats, rare=rare)

    def transform(self, frame: Any, backend: Backend, state: OneHotState) -> Any:
        self.check_columns(frame)

        def indicators(col: str) -> dict[str, Any]:
            series, cats = frame[col], state.categories[col]
            if len(frame) < THREADED_ROWS:
                # A few rows (a served request): each row's code first (one lookup; 0 for
                # missing, unseen and rare), then every column from the codes in one scatter, a
                # fixed number of calls per column where comparisons cost three per category.
                codes = backend.category_codes(series, cats)
                new = dict(zip([f"{col}={cat}" for cat in cats], backend.indicator_columns(codes, len(cats))))
                if state.rare[col]:
                    new[f"{col}={RARE}"] = ((codes == 0) & series.notna()).astype("float32")
                return new
            # Many rows: a comparison per category is cheaper than looking each row's code up
            # first for the few categories one-hot columns have (at 1M rows of 2-4 text
            # categories, 0.54 CPU-s against 0.79). Both give the same 0/1 columns.
            new = {f"{col}={cat}": (series == cat).fillna(False).astype("float32") for cat in cats}
            if state.rare[col]:
                known = series.isin(cats) | series.isna()
                new[f"{col}={RARE}"] = (~known).astype("float32")
            return new

        new = merged(per_column(backend, frame, indicators, self.columns))
        return replace_columns(frame, backend, new, list(self.columns))

    def columns_after(self, columns: ColumnSet, why: str) -> ColumnSet:
        """Each column becomes ``<column>=<value>`` columns, whose values fitting finds."""
        return columns.without(self.columns, why).plus(patterns=[f"{c}=" for c in self.columns])

    def output_columns(self, columns: list[str], state: OneHotState) -> list[str]:
        out = [c for c in columns if c not in self.columns]
        for col in self.columns:
            out += [f"{col}={cat}" for cat in state.categories[col]]
            if state.rare[col]:
                out.append(f"{col}={RARE}")
        return out


@register_op
class Categorify(FeatureOp):
    """Integer codes 1..n by training frequency; 0 for missing, unseen and rare values.

    A missing value is not counted at fit (it never gets a code of its own) and is code 0 at
    transform, on both devices; ``fill_missing`` with a constant before this op gives it one.

    The shared 0 bucket and the frequency threshold keep high-cardinality columns small (the
    GPU out-of-memory NVTabular users hit), and codes feed embeddings later.
    """

    op: ClassVar[str] = "categorify"
    state_model: ClassVar[type[OpState]] = CategorifyState
    example: ClassVar[dict[str, Any]] = {"columns": ["cat", "flag"]}
    min_frequency: MinFrequency = Field(1, description="Values seen fewer times than this (a count, or below 1 a share of "
                                        "the training rows) go to code 0.")
    max_categories: int | None = Field(None, ge=1, description="Keep at most this many most-frequent values.")

    def statistics(self, frame: Any, backend: Backend) -> dict[str, Any]:
        return merged(per_column(backend, frame, lambda col: rare_statistics(frame[col], col, self.min_frequency),
                                 self.columns))

    def fit_from(self, stats: dict[str, Any], backend: Backend) -> CategorifyState:
        cats = {col: frequent_levels(stats, col, self.min_frequency, self.max_categories)[0] for col in self.columns}
        return CategorifyState(categories=cats)

    def transform(self, frame: Any, backend: Backend, state: CategorifyState) -> Any:
        self.check_columns(frame)
        def coded(col: str) -> Any:
            return backend.category_codes(frame[col], state.categories[col]).astype(code_dtype(len(state.categories[col])))

        new = dict(zip(self.columns, per_column(backend, frame, coded, self.columns)))
        return replace_in_place(frame, new)

    def categorical_cardinalities(self, state: CategorifyState) -> dict[str, int]:
        """Embedding table sizes: known categories plus the 0 bucket."""
        return {c: len(v) + 1 for c, v in state.categories.items()}


def code_dtype(categories: int) -> str:
    """The smallest unsigned dtype for codes 0..categories: a quarter of int32 for most columns,
    which is what partitioned training holds in memory per worker."""
    if categories < 2**8:
        return "uint8"
    if categories < 2**16:
        return "uint16"
    return "int32"
