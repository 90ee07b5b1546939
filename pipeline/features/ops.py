"""Feature ops with scikit-learn semantics: ``fit`` on the training split, ``transform`` anywhere.

An op is a frozen pydantic model of its parameters (the same model validates the YAML). Its
fitted state is a second pydantic model, declared by the op (``state_model``): returned by
``fit``, not stored, and plain JSON when dumped (numbers, category lists), so a workflow
fitted on a GPU transforms on a CPU and back, and a hand-edited workflow.json is validated
field by field when it loads. An op also declares what the workflow needs to know about it
without asking which op it is: the columns it writes before fitting (``written_columns``,
for dependency phases) and the embedding sizes of its outputs (``categorical_cardinalities``).
Ops read frames through the backend's ``frame`` module, so one implementation serves pandas
and cuDF.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal, Union

import numpy as np
from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, ValidationError, create_model, model_validator

from pipeline.backends import Backend, is_partitioned
from pipeline.backends.headers import ColumnSet
from pipeline.core.errors import DataError
from pipeline.features.date_ops import DateDiffRules, DatePartsRules

# A category or fill value as JSON holds it (the exact type is kept: 1, 1.0, "1", True).
Scalar = Union[float, int, str, bool]


class OpState(BaseModel):
    """Base of the fitted states: frozen values, unknown keys refused (a typo in a hand-edited
    workflow.json is an error, not an ignored field), and only finite numbers: NaN and
    Infinity are not JSON, and a state holding one would turn every transformed value into it."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class EmptyState(OpState):
    """The state of an op that learns nothing (log1p checks its domain; drop just drops)."""


class FillMissingState(OpState):
    """Fill value per column. Its JSON type is part of the state: a float fill (mean and
    median always are) makes an integer column float64 on every device (see ``FillMissing``)."""

    fill: dict[str, Scalar]


class OneHotState(OpState):
    categories: dict[str, list[Scalar]]
    rare: dict[str, bool]


class CategorifyState(OpState):
    categories: dict[str, list[Scalar]]


class StandardizeState(OpState):
    mean_std: dict[str, tuple[float, float]]


class FeatureOp(BaseModel):
    """Base of every op: a list of columns, the fit/transform pair and its state model."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    op: ClassVar[str]
    state_model: ClassVar[type[OpState]] = EmptyState
    columns: list[str] = Field(min_length=1, description="Columns this op applies to.")

    def fit(self, frame: Any, backend: Backend) -> OpState:
        """The fitted state from the training frame (in memory; the workflow's fit driver
        does the same phase by phase for whole workflows and partitioned frames)."""
        self.check_columns(frame)
        wanted = self.statistics(frame, backend)
        return fit_state(self, {key: backend.to_host(value) for key, value in wanted.items()}, backend)

    def statistics(self, frame: Any, backend: Backend) -> dict[str, Any]:
        """The aggregates ``fit`` needs, as expressions on ``frame``.

        On a pandas or cuDF frame they are values; on a Dask frame they are lazy, and the
        workflow computes the aggregates of every op in a dependency phase in one pass.
        """
        return {}

    def fit_from(self, stats: dict[str, Any], backend: Backend) -> OpState:
        """The fitted state from computed ``statistics`` (host values)."""
        return self.state_model()

    def transform(self, frame: Any, backend: Backend, state: OpState) -> Any:
        raise NotImplementedError

    def output_columns(self, columns: list[str], state: OpState) -> list[str]:
        """Column names after this op, given the names before it."""
        return columns

    def written_columns(self) -> set[str]:
        """Columns this op replaces, removes or adds under a name known before fitting: an op
        reading one of them must be fitted after this one (a dependency phase later)."""
        return set(self.columns)

    def read_columns(self) -> set[str]:
        """Columns whose values this op reads (every one it names, unless it only removes
        them): an input column no op reads and none passes to the output is not needed to score."""
        return set(self.columns)

    def categorical_cardinalities(self, state: OpState) -> dict[str, int]:
        """Embedding table sizes of the integer-code columns this op outputs (none by default)."""
        return {}

    def named_columns(self) -> list[tuple[tuple[str | int, ...], str]]:
        """Every input column this op's parameters name, with its key path in the op's block:
        each must exist when the op is fitted (checked before any data is read)."""
        return [(("columns", i), c) for i, c in enumerate(self.columns)]

    def columns_after(self, columns: ColumnSet, why: str) -> ColumnSet:
        """The columns known after this op, before any data is read (``why`` names the op in
        messages about the columns it removes). An op with an ``output_columns`` of its own
        says here what it does to the names; one that does not leaves them unknown."""
        if type(self).output_columns is FeatureOp.output_columns:
            return columns
        return columns.opened()

    def load_state(self, data: Mapping[str, Any]) -> OpState:
        """A saved state (workflow.json) validated into this op's state model."""
        return self.state_model.model_validate(data)

    def check_columns(self, frame: Any) -> None:
        missing = [c for c in self.columns if c not in frame.columns]
        if missing:
            raise DataError(f"feature op '{self.op}': column(s) {missing} not in the data "
                            f"(available: {', '.join(map(str, frame.columns))})")


def fit_state(op: FeatureOp, stats: dict[str, Any], backend: Backend) -> OpState:
    """``op.fit_from(stats)``; a state its model refuses (a statistic that is not a finite
    number) is a DataError naming the op and the field, as when workflow.json is loaded."""
    try:
        return op.fit_from(stats, backend)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'state'}: {e['msg']}" for e in exc.errors())
        raise DataError(f"feature op '{op.op}' on {op.columns}: the fitted state is not valid ({problems})") from None


# A statistic that overflows float64 (values near 1e200 square to infinity) is taken again on
# the values times 2**-600: exact (a power of two moves only the exponent), and any float64
# times it squares and sums without overflow. Values below about 1e-143 become 0 there, which
# cannot matter next to a spread large enough to overflow.
_SCALE = 2.0 ** -600


def _moments(series: Any, names: tuple[str, ...], col: str) -> dict[str, Any]:
    """``mean`` and/or population ``std`` of ``series`` under ``<col>.<name>`` keys, plus the
    same of the scaled values (``<col>.<name>.scaled``): always when lazy (one pass takes
    both), in memory only when the plain one is not finite."""
    def stat(values: Any, name: str) -> Any:
        return values.mean() if name == "mean" else values.std(ddof=0)

    with np.errstate(over="ignore", invalid="ignore"):      # an overflow here is expected and handled
        wanted = {f"{col}.{name}": stat(series, name) for name in names}
        lazy = is_partitioned(series)
        for name in names:
            if lazy or not _finite_number(wanted[f"{col}.{name}"]):
                wanted[f"{col}.{name}.scaled"] = stat(series * _SCALE, name)
    return wanted


def _finite_number(value: Any) -> bool:
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def _stable(stats: dict[str, Any], key: str) -> float:
    """A statistic taken by ``_moments``: the plain value, else the scaled one scaled back."""
    value = _as_float(stats[key])
    if not math.isfinite(value) and f"{key}.scaled" in stats:
        value = _as_float(stats[f"{key}.scaled"]) / _SCALE
    return value


def _as_float(value: Any) -> float:
    """A host statistic as a float; pandas' NA (the mean of a nullable column with no values) is NaN."""
    try:
        return float(_plain(value))
    except (TypeError, ValueError):
        return math.nan


def _require_finite(op: str, col: str, what: str, value: float) -> float:
    """``value``, or a DataError naming the op and the column saying why it is not a number."""
    if math.isfinite(value):
        return value
    reason = ("the column has no values there" if math.isnan(value)
              else "its values include infinity, or are too large for float64 arithmetic")
    raise DataError(f"{op}: the {what} of column '{col}' in the training split is {value}, not a finite "
                    f"number; {reason}")


def _count_pairs(counts: Any) -> list[tuple[Any, int]]:
    """(value, count) pairs of a host ``value_counts``, most frequent first, ties by value:
    deterministic on both devices and for any partitioning. A missing value is no category,
    whichever way the backend counted it (cuDF may count a NaN that is not a null)."""
    pairs = [(_plain(v), int(c)) for v, c in counts.items() if not _missing_value(_plain(v))]
    pairs.sort(key=lambda vc: (-vc[1], str(vc[0])))
    return pairs


def _median(series: Any) -> Any:
    # Dask has no exact distributed median; its approximate one is documented as such.
    return series.median_approximate() if hasattr(series, "median_approximate") else series.median()


def _missing_value(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _plain(value: Any) -> Any:
    """NumPy scalars to Python scalars so the state serialises as JSON."""
    return value.item() if isinstance(value, np.generic) else value


def _as_fillable(series: Any, fill: Any, backend: Backend) -> Any:
    """``series`` as float64 when ``fill`` is a float and the column is integer or boolean."""
    if isinstance(fill, float) and backend.is_integral(series):
        return series.astype("float64")
    return series


def _replace_columns(frame: Any, backend: Backend, new: dict[str, Any], drop: list[str]) -> Any:
    """Drop ``drop`` and append ``new`` columns in one concat (no per-column fragmentation)."""
    kept = frame.drop(columns=drop) if drop else frame
    if not new:
        return kept
    added = backend.frame.DataFrame(new, index=frame.index)
    return backend.frame.concat([kept, added], axis=1)


class FillMissing(FeatureOp):
    """Replace missing values with a constant or a statistic of the training split.

    A float fill (mean, median, a constant such as 0.5) turns an integer column into float64
    first, whether or not it has a gap: pandas already holds NumPy ints with a gap as float64,
    but pandas' nullable ``Int64`` and cuDF keep them integer and refuse a fill with a
    fraction. Deciding by the fitted value's type, not the data, gives one dtype on both
    devices and for every split and scoring batch. An integer fill keeps integer columns.
    """

    op: ClassVar[str] = "fill_missing"
    state_model: ClassVar[type[OpState]] = FillMissingState
    strategy: Literal["constant", "median", "mean", "most_frequent"] = Field("median", description="Statistic of the training split, or a constant.")
    value: float | int | str | None = Field(None, description="Fill value for strategy: constant.")
    indicator: bool = Field(False, description="Add a <column>_missing 0/1 column before filling.")

    @model_validator(mode="after")
    def _constant_needs_value(self) -> FillMissing:
        if self.strategy == "constant" and self.value is None:
            raise ValueError("strategy 'constant' needs a 'value'")
        if isinstance(self.value, float) and not math.isfinite(self.value):
            raise ValueError(f"fill value must be a finite number, got {self.value}")
        return self

    def statistics(self, frame: Any, backend: Backend) -> dict[str, Any]:
        wanted = {}
        for col in self.columns:
            series = frame[col]
            if self.strategy == "most_frequent":
                wanted[col] = series.value_counts(dropna=True)
            elif self.strategy in ("median", "mean"):
                if not backend.is_numeric(series):
                    raise DataError(f"fill_missing: strategy '{self.strategy}' needs a numeric column; "
                                    f"'{col}' is {series.dtype}")
                if self.strategy == "median":
                    wanted[col] = _median(series)
                else:
                    wanted.update(_moments(series, ("mean",), col))
        return wanted

    def fit_from(self, stats: dict[str, Any], backend: Backend) -> FillMissingState:
        fills: dict[str, Any] = {}
        for col in self.columns:
            if self.strategy == "constant":
                fills[col] = self.value
            elif self.strategy == "most_frequent":
                counts = _count_pairs(stats[col])
                fills[col] = counts[0][0] if counts else None
            else:
                stat = _plain(stats[col]) if self.strategy == "median" else _stable(stats, f"{col}.mean")
                fills[col] = None if _missing_value(stat) else _require_finite(
                    "fill_missing", col, self.strategy, float(stat))
            if fills[col] is None:
                raise DataError(f"fill_missing: column '{col}' has no non-missing value in the training split")
        return FillMissingState(fill=fills)

    def transform(self, frame: Any, backend: Backend, state: FillMissingState) -> Any:
        self.check_columns(frame)
        new, drop = {}, []
        for col in self.columns:
            if self.indicator:
                new[f"{col}_missing"] = frame[col].isna().astype("float32")
            new[col] = _as_fillable(frame[col], state.fill[col], backend).fillna(state.fill[col])
            drop.append(col)
        out = _replace_columns(frame, backend, new, drop)
        return out[self.output_columns(list(frame.columns), state)]

    def output_columns(self, columns: list[str], state: OpState) -> list[str]:
        if not self.indicator:
            return columns
        out = []
        for c in columns:
            out.append(c)
            if c in self.columns:
                out.append(f"{c}_missing")
        return out

    def columns_after(self, columns: ColumnSet, why: str) -> ColumnSet:
        return columns.plus(f"{c}_missing" for c in self.columns) if self.indicator else columns

    def written_columns(self) -> set[str]:
        """The filled columns and, with ``indicator``, their ``<column>_missing`` columns."""
        written = set(self.columns)
        if self.indicator:
            written |= {f"{c}_missing" for c in self.columns}
        return written


class OneHot(FeatureOp):
    """One 0/1 column per category seen in training; unseen values get all zeros.

    A missing value (null, NaN, or a string listed in the load's ``na_values``) is never a
    category: it is not counted at fit, and at transform it gets all zeros, in the
    ``<col>=__rare__`` column too (missing is not rare). Add ``fill_missing`` before this op
    to give missing values a column of their own (``strategy: constant, value: missing``).
    """

    op: ClassVar[str] = "one_hot"
    state_model: ClassVar[type[OpState]] = OneHotState
    min_frequency: int = Field(1, ge=1, description="Categories rarer than this share one '<col>=__rare__' column.")
    max_categories: int | None = Field(None, ge=1, description="Keep at most this many most-frequent categories.")
    drop_binary: bool = Field(False, description="For a two-category column keep only the second column.")

    def statistics(self, frame: Any, backend: Backend) -> dict[str, Any]:
        return {col: frame[col].value_counts(dropna=True) for col in self.columns}

    def fit_from(self, stats: dict[str, Any], backend: Backend) -> OneHotState:
        cats, rare = {}, {}
        for col in self.columns:
            counts = _count_pairs(stats[col])
            kept = [v for v, n in counts if n >= self.min_frequency][: self.max_categories]
            rare[col] = len(kept) < len(counts)
            kept.sort(key=str)
            if self.drop_binary and len(kept) == 2 and not rare[col]:
                kept = kept[1:]
            cats[col] = kept
        return OneHotState(categories=cats, rare=rare)

    def transform(self, frame: Any, backend: Backend, state: OneHotState) -> Any:
        self.check_columns(frame)
        new = {}
        for col in self.columns:
            series = frame[col]
            cats = state.categories[col]
            for cat in cats:
                new[f"{col}={cat}"] = (series == cat).fillna(False).astype("float32")
            if state.rare[col]:
                known = series.isin(cats) | series.isna()
                new[f"{col}=__rare__"] = (~known).astype("float32")
        return _replace_columns(frame, backend, new, list(self.columns))

    def columns_after(self, columns: ColumnSet, why: str) -> ColumnSet:
        """Each column becomes ``<column>=<value>`` columns, whose values fitting finds."""
        return columns.without(self.columns, why).plus(patterns=[f"{c}=" for c in self.columns])

    def output_columns(self, columns: list[str], state: OneHotState) -> list[str]:
        out = [c for c in columns if c not in self.columns]
        for col in self.columns:
            out += [f"{col}={cat}" for cat in state.categories[col]]
            if state.rare[col]:
                out.append(f"{col}=__rare__")
        return out


class Categorify(FeatureOp):
    """Integer codes 1..n by training frequency; 0 for missing, unseen and rare values.

    A missing value is not counted at fit (it never gets a code of its own) and is code 0 at
    transform, on both devices; ``fill_missing`` with a constant before this op gives it one.

    The shared 0 bucket and the frequency threshold keep high-cardinality columns small (the
    GPU out-of-memory NVTabular users hit), and codes feed embeddings later.
    """

    op: ClassVar[str] = "categorify"
    state_model: ClassVar[type[OpState]] = CategorifyState
    min_frequency: int = Field(1, ge=1, description="Values seen fewer times than this go to code 0.")
    max_categories: int | None = Field(None, ge=1, description="Keep at most this many most-frequent values.")

    def statistics(self, frame: Any, backend: Backend) -> dict[str, Any]:
        return {col: frame[col].value_counts(dropna=True) for col in self.columns}

    def fit_from(self, stats: dict[str, Any], backend: Backend) -> CategorifyState:
        cats = {}
        for col in self.columns:
            counts = _count_pairs(stats[col])
            cats[col] = [v for v, n in counts if n >= self.min_frequency][: self.max_categories]
        return CategorifyState(categories=cats)

    def transform(self, frame: Any, backend: Backend, state: CategorifyState) -> Any:
        self.check_columns(frame)
        new = {col: backend.category_codes(frame[col], state.categories[col]).astype(
                   code_dtype(len(state.categories[col]))) for col in self.columns}
        out = _replace_columns(frame, backend, new, list(self.columns))
        return out[list(frame.columns)]

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


class Standardize(FeatureOp):
    """Zero mean, unit variance with the training split's statistics (population std)."""

    op: ClassVar[str] = "standardize"
    state_model: ClassVar[type[OpState]] = StandardizeState

    def statistics(self, frame: Any, backend: Backend) -> dict[str, Any]:
        wanted = {}
        for col in self.columns:
            series = frame[col]
            if not backend.is_numeric(series):
                raise DataError(f"standardize: column '{col}' is {series.dtype}, not numeric")
            wanted.update(_moments(series, ("mean", "std"), col))
        return wanted

    def fit_from(self, stats: dict[str, Any], backend: Backend) -> StandardizeState:
        mean_std = {}
        for col in self.columns:
            mean = _require_finite("standardize", col, "mean", _stable(stats, f"{col}.mean"))
            std = _require_finite("standardize", col, "standard deviation", _stable(stats, f"{col}.std"))
            mean_std[col] = (mean, std if std > 0 else 1.0)
        return StandardizeState(mean_std=mean_std)

    def transform(self, frame: Any, backend: Backend, state: StandardizeState) -> Any:
        self.check_columns(frame)
        new = {}
        for col in self.columns:
            mean, std = state.mean_std[col]
            new[col] = (frame[col].astype("float64") - mean) / std
        out = _replace_columns(frame, backend, new, list(self.columns))
        return out[list(frame.columns)]


class Log1p(FeatureOp):
    """log(1 + x) for skewed non-negative columns; values below -1 are an error at fit."""

    op: ClassVar[str] = "log1p"

    def statistics(self, frame: Any, backend: Backend) -> dict[str, Any]:
        return {col: frame[col].min() for col in self.columns}

    def fit_from(self, stats: dict[str, Any], backend: Backend) -> EmptyState:
        for col in self.columns:
            low = _plain(stats[col])
            if not _missing_value(low) and low <= -1:
                raise DataError(f"log1p: column '{col}' has values <= -1 (min {low})")
        return EmptyState()

    def transform(self, frame: Any, backend: Backend, state: OpState) -> Any:
        self.check_columns(frame)
        new = {}
        for col in self.columns:
            values = frame[col].astype("float64")
            if bool(backend.to_host((values <= -1).any())):
                # log1p gives -inf at -1 and NaN below it: name the cause, not a missing value later.
                raise DataError(f"log1p: column '{col}' has values <= -1 (min {_plain(backend.to_host(values.min()))}), "
                                "outside the domain it was fitted on")
            new[col] = np.log1p(values)
        out = _replace_columns(frame, backend, new, list(self.columns))
        return out[list(frame.columns)]


class Drop(FeatureOp):
    """Remove columns the models should not see."""

    op: ClassVar[str] = "drop"

    def transform(self, frame: Any, backend: Backend, state: OpState) -> Any:
        # Columns it drops are not required to score (``read_columns``), so they may be absent.
        return frame.drop(columns=[c for c in self.columns if c in frame.columns])

    def read_columns(self) -> set[str]:
        """None: a dropped column's values are never read."""
        return set()

    def output_columns(self, columns: list[str], state: OpState) -> list[str]:
        return [c for c in columns if c not in self.columns]

    def columns_after(self, columns: ColumnSet, why: str) -> ColumnSet:
        return columns.without(self.columns, why)


class DateParts(DatePartsRules, FeatureOp):
    """Calendar parts of date columns as numbers (``pipeline.features.date_ops``)."""

    op: ClassVar[str] = "date_parts"

    def columns_after(self, columns: ColumnSet, why: str) -> ColumnSet:
        return columns.without(self.columns, why).plus(self.part_columns())


class DateDiff(DateDiffRules, FeatureOp):
    """Time from date columns to a date or a date column (``pipeline.features.date_ops``)."""

    op: ClassVar[str] = "date_diff"

    def columns_after(self, columns: ColumnSet, why: str) -> ColumnSet:
        return columns.without(self.columns, why).plus(self.diff_columns())

    def named_columns(self) -> list[tuple[tuple[str | int, ...], str]]:
        """The date columns, and ``until`` when it names a column rather than a date."""
        until = [(("until",), self.until)] if self.until_date() is None else []
        return [*super().named_columns(), *until]


OPS: dict[str, type[FeatureOp]] = {
    cls.op: cls for cls in (FillMissing, OneHot, Categorify, Standardize, Log1p, Drop, DateParts, DateDiff)
}


def _op_name(value: Any) -> str | None:
    if isinstance(value, dict) and len(value) == 1:
        return str(next(iter(value)))
    if isinstance(value, BaseModel) and len(type(value).model_fields) == 1:
        return next(iter(type(value).model_fields))
    return None


def _step_model(name: str, cls: type[FeatureOp]) -> type[BaseModel]:
    return create_model(f"{cls.__name__}Step", __config__=ConfigDict(extra="forbid"), **{name: (cls, ...)})


# One YAML list item, ``{op_name: {params}}``: a tagged union so each op's parameters are
# validated by its own model, with error paths like ops[1].one_hot.columns.
OpStep = Annotated[
    Union[tuple(Annotated[_step_model(n, c), Tag(n)] for n, c in OPS.items())],  # type: ignore[misc]
    Discriminator(_op_name),
]


def op_of_step(step: BaseModel) -> FeatureOp:
    return next(iter(step.__dict__.values()))
