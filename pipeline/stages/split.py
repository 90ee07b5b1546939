"""``split``: a seeded train / valid / test split: stratified, by group, or out of time.

Row positions are drawn on the host (from the label vector, the group column or the order
column), then taken on the device, so the same seed selects the same rows on CPU and GPU.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field, model_validator

from pipeline.backends import Backend, backend_for, compute_lazy, is_partitioned
from pipeline.backends.headers import HeaderReader
from pipeline.core.dtypes import dtype_kind, is_number
from pipeline.core.errors import ConfigError, DataError, UsageError
from pipeline.core.option_objects import Options
from pipeline.core.problems import BINARY, MAX_INFERRED_CLASSES, REGRESSION, TASK_KINDS, Task
from pipeline.featuresets.split_positions import FOLDS_NEED_MEMORY, shuffled_split
from pipeline.stages.spec import (
    ColumnRef,
    Preview,
    StageContext,
    StageSpec,
    Table,
    only_input,
    register_stage,
)

log = logging.getLogger("pipeline")

SPLITS = ("train", "valid", "test")
DEFAULT_TEST = 0.2
TEST_LATEST_NEEDS_ORDER_BY = ("test_latest needs order_by: the column whose latest values (cut-offs, dates) "
                              "are held out as the test split")
MISSING_TARGETS = ("error", "drop")
MISSING_TARGET_HINT = ("set missing_target: drop on the split stage to split the other rows (the run record "
                       "counts the dropped ones)")
FOLDS_WITH_VALID = ("folds use every non-test row (each fold scores the rows the others fit on, and the "
                    "final model fits on all of them); set valid: 0")


@dataclass
class SplitData:
    """Frames per split; the target column holds the task's labels (``pipeline.core.problems``):
    0/1 for binary (1 = ``positive``), class codes for multiclass, numbers for regression."""

    frames: dict[str, Any]
    target: str
    positive: Any
    backend: Backend
    task: Task = BINARY
    # ``folds: k``: per fold, (positions fitted on, positions scored) into ``frames["train"]``,
    # which then holds every non-test row. None without cross-validation.
    folds: list[tuple[np.ndarray, np.ndarray]] | None = None

    @property
    def partitioned(self) -> bool:
        return is_partitioned(self.frames["train"])

    def sizes(self) -> dict[str, int]:
        return {name: int(len(frame)) for name, frame in self.frames.items()}


class SplitSpec(StageSpec):
    kind: Literal["split"]
    target: str = Field(description="Label column.")
    task: Literal["binary", "multiclass", "regression"] | None = Field(None, description=(
        "What is predicted. Default: inferred from the target (positive: given or two values -> "
        "binary; other numbers -> regression; text or categories -> multiclass)."))
    positive: str | int | float | bool | None = Field(
        None, description="Label value that means the positive class. Default: 1 / True."
    )
    test: float | None = Field(None, ge=0, lt=1, allow_inf_nan=False, description=(
        "Fraction of rows for the test split. Default: 0.2 (0 with test_latest, which replaces it)."))
    test_latest: int | None = Field(None, ge=1, description=(
        "With order_by: the rows of the N latest distinct order_by values are the test split "
        "(out-of-time validation on a table stacked from rolling cut-offs: test_latest: 1 holds "
        "out the latest cut-off). Replaces test; valid is then a share of the other rows, newest first."))
    valid: float = Field(0.0, ge=0, lt=1, allow_inf_nan=False, description="Fraction of rows for the validation split.")
    stratify: bool = Field(True, description="Keep the label ratio equal across splits (a random split only).")
    group: str | None = Field(None, min_length=1, description=(
        "Column whose rows stay together: no value of it falls in two splits (one patient's visits, "
        "one customer's orders)."))
    order_by: str | None = Field(None, min_length=1, description=(
        "Column of times (numbers, dates or date text): the oldest rows train, the newest test "
        "(out-of-time validation). With group, each group goes by its newest row."))
    folds: int | None = Field(None, ge=2, le=100, description=(
        "k-fold cross-validation on the non-test rows: the feature workflow and each model are "
        "fitted per fold and scored on the fold they did not see; then the final model is fitted on "
        "every non-test row. Folds are seeded, stratified for a class target (stratify: true), keep "
        "each group in one fold (group:), and with order_by: chain forward in time (fold i fits on "
        "the i oldest of k + 1 blocks of times and scores the next; the oldest block is never scored). "
        "Needs valid: 0 (every non-test row is used) and in-memory data."))
    missing_target: Literal["error", "drop"] = Field("error", description=(
        "Rows whose target is missing: error (refuse the data, naming the count) or drop (split the "
        "other rows; the run record counts the dropped ones as the split's dropped_missing_target)."))
    min_inputs = 1
    max_inputs = 1

    @model_validator(mode="after")
    def _fractions(self) -> SplitSpec:
        if self.test_latest is None and self.test_share() + self.valid >= 1:
            raise ValueError(f"test + valid must be below 1 (got {self.test_share()} + {self.valid})")
        return self

    @model_validator(mode="after")
    def _latest_cutoffs_need_order_by(self) -> SplitSpec:
        if self.test_latest is None:
            return self
        if self.order_by is None:
            raise ValueError(TEST_LATEST_NEEDS_ORDER_BY)
        if self.test is not None:
            raise ValueError(f"set test or test_latest, not both: test_latest: {self.test_latest} holds out the "
                             f"rows of the latest order_by values, test: {self.test} a share of the rows")
        return self

    def test_share(self) -> float:
        """The fraction of rows for test: ``test``, else 0.2, or 0 with ``test_latest``."""
        if self.test is not None:
            return self.test
        return 0.0 if self.test_latest is not None else DEFAULT_TEST

    @model_validator(mode="after")
    def _folds_use_every_non_test_row(self) -> SplitSpec:
        if self.folds and self.valid:
            raise ValueError(FOLDS_WITH_VALID)
        return self

    @model_validator(mode="after")
    def _positive_means_binary(self) -> SplitSpec:
        if self.positive is not None and self.task not in (None, "binary"):
            raise ValueError(positive_conflict(self.task))
        return self

    def declared_task(self) -> str | None:
        """The task this split fixes for the stages downstream, known before any data is read
        (``task:``, or ``positive:``, which only a binary task has); None when it is inferred.
        The config loader checks it against the models downstream."""
        return self.task or ("binary" if self.positive is not None else None)

    def columns_read(self, inputs: Any, headers: HeaderReader) -> list[ColumnRef]:
        named = (("target", self.target, "target"), ("group", self.group, "group column"),
                 ("order_by", self.order_by, "order_by column"))
        return [ColumnRef((key,), column, what) for key, column, what in named if column is not None]

    def preview(self, stage: str, inputs: Any, headers: HeaderReader) -> Preview:
        """The input's columns (the target among them); valid rows and folds as configured."""
        (table,) = inputs.values()
        return Preview(columns=table.columns, valid=self.valid > 0, folds=self.folds or 0, target=self.target,
                       test=self.test_share() > 0 or self.test_latest is not None)


def binary_labels(series: Any, positive: Any, backend: Backend, *, column: str) -> Any:
    """0/1 int8 labels: 1 where the value is ``positive`` (every other value is 0), or the
    target's own 0/1 / True/False; raises naming the column otherwise."""
    if series.isna().any():
        raise DataError(f"target column '{column}' has {int(series.isna().sum())} missing values; "
                        f"{MISSING_TARGET_HINT}")
    values = sorted(map(str, backend.to_host(series.unique()).tolist()))
    if positive is None:
        if set(values) <= {"0", "1", "True", "False", "0.0", "1.0"}:
            return series.astype("int8")
        if len(values) == 1:
            raise one_value(column, values[0])
        raise DataError(f"target column '{column}' has values {values[:10]}; set positive: to the one that means 1")
    if str(positive) not in values:
        raise DataError(f"positive value {positive!r} does not occur in target column '{column}' (values: {values[:10]})")
    # More than two values: one-vs-rest, ``positive`` against every other value (the user
    # named the class that means 1; the partitioned path labels the same way).
    warn_near_positive(values, positive, column)
    labels = (series == positive).astype("int8")
    if not int(backend.to_host(labels.sum())):
        # It is a value as text only: "1" for the number 1 (positive: "1" in YAML); the column
        # was said to have one class.
        held = next(v for v in backend.to_host(series.unique()).tolist() if str(v) == str(positive))
        kind = ("text" if isinstance(held, str) else "a number" if isinstance(held, (int, float))
                else type(held).__name__)
        raise DataError(f"positive: {positive!r} is not a value of target column '{column}', which holds {held!r} "
                        f"({kind}); write positive: {held!r}")
    return labels


def one_value(column: str, value: Any) -> DataError:
    """A target with one value in every row: no model learns from it (CatBoost refused it with
    "All train targets are equal"; a classifier, as a stage error naming no column)."""
    return DataError(f"target column '{column}' has one value, {str(value)!r}, in every row: a model needs at least two "
                     "different target values to learn from")


def warn_near_positive(values: list[str], positive: Any, column: str) -> None:
    """One-vs-rest counts every other value as 0, ``yes`` beside ``positive: "Yes"`` too: a
    value that differs from ``positive`` only in case or surrounding spaces is most likely the
    same class written another way, so it is named (a warning: it may be a class of its own)."""
    key = str(positive).strip().casefold()
    near = [v for v in values if v != str(positive) and v.strip().casefold() == key]
    if near:
        log.warning("target column '%s': %s differ(s) from positive: %r only in case or spaces and count(s) as the "
                    "other class (0); if they mean the same, write them alike in the data", column,
                    ", ".join(map(repr, near)), positive)


def misspelt_classes_note(counts: Mapping[Any, int], column: str) -> str | None:
    """Classes of a few rows spelt like a class of many (``Yse``: 3 rows beside ``Yes``: 1,869),
    most likely typos that make a binary target multiclass: one sentence naming them, or None."""
    import difflib

    total = sum(counts.values())
    texts = {str(v): int(n) for v, n in counts.items() if isinstance(v, str)}
    found = []
    for value, rows in texts.items():
        if rows > 0.01 * total:
            continue
        bigger = [v for v, n in texts.items() if n >= 20 * rows and v.strip().casefold() != value.strip().casefold()]
        close = difflib.get_close_matches(value, bigger, n=1, cutoff=0.6)
        if close:
            found.append(f"{value!r} ({rows:,} row{'s' if rows > 1 else ''}) is spelt like {close[0]!r} "
                         f"({texts[close[0]]:,})")
    if not found:
        return None
    return (f"target column '{column}': {'; '.join(found)}: typos make classes of their own; if they mean the same, "
            "correct them in the data (or leave those rows out with a load filter)")


def classes_alike_note(values: list[Any], column: str) -> str | None:
    """Classes that differ only in case or surrounding spaces (``Yes``, ``yes ``, `` YES``),
    most likely one class written several ways, each now a class of its own: one sentence
    naming the column, or None."""
    groups: dict[str, list[str]] = {}
    for value in values:
        if isinstance(value, str):
            groups.setdefault(value.strip().casefold(), []).append(value)
    alike = [group for group in groups.values() if len(group) > 1]
    if not alike:
        return None
    shown = "; ".join(", ".join(map(repr, group)) for group in alike)
    return (f"target column '{column}' has classes that differ only in case or spaces ({shown}): each is a class of "
            "its own; if they mean the same, write them alike in the data")


def check_regression_labels(labels: Any, backend: Backend, *, column: str) -> None:
    """One pass over the labels on the host: a target with one value is refused (``one_value``),
    and one whose values are large against their spread is named. XGBoost and LightGBM hold
    labels as float32 (7 digits), as CatBoost does, and scikit-learn's ridge casts them to the
    float32 feature matrix's type: 1e12 + 1e4 * x loses its spread there, and those models
    learn steps of 65,536; a forest's squared sums lose it to rounding (test R^2 0.26). The
    labels and every metric stay float64; the warning says what to do."""
    values = np.asarray(backend.to_host(labels), dtype="float64")
    if not values.size:
        return
    infinite = np.flatnonzero(np.isinf(values))
    if len(infinite):
        # An infinite label fits nothing and scores every metric as inf or NaN (exit 0 before).
        raise DataError(f"target column '{column}' holds infinite values in {len(infinite)} row(s) (first at row "
                        f"{int(infinite[0]) + 1}, {values[infinite[0]]:g}): a regression cannot fit or be scored "
                        "against them; leave those rows out (a load filter) or replace the values")
    if values.min() == values.max():
        raise one_value(column, f"{values[0]:g}")
    spread, largest = float(values.std()), float(np.abs(values).max())
    step = float(np.spacing(np.float32(largest)))
    if step > 1e-3 * spread:
        log.warning("target column '%s': its values (up to %.6g) are large against their spread (std %.6g): "
                    "models that hold labels as float32 (XGBoost, LightGBM, CatBoost, ridge) see steps of %.6g, and "
                    "trees that sum squared labels (random forests, extra trees) lose their spread to rounding; "
                    "subtract a constant from the target (a python stage) or predict a difference",
                    column, largest, spread, step)


def class_counts(series: Any, backend: Backend) -> dict[Any, int]:
    """Rows per target value, for messages: ``{'No': 9, 'Yes': 1}``."""
    counts = backend.to_host(series.value_counts(dropna=False))
    pairs = [(v.item() if isinstance(v, np.generic) else v, int(n)) for v, n in counts.items()]
    return dict(sorted(pairs, key=lambda vc: str(vc[0])))


def check_two_classes(series: Any, labels: Any, backend: Backend, *, column: str) -> None:
    """Both classes must have rows: a one-class target passes every later check and fails
    inside the model, as a stage error that does not name the column."""
    if int(backend.to_host(labels.nunique())) < 2:
        raise DataError(f"target column '{column}' has one class (rows per value: "
                        f"{class_counts(series, backend)}); a binary classifier needs rows of both classes")


# A target whose values all read as one of these is 0/1 (binary without ``positive:``).
ZERO_ONE = frozenset({"0", "1", "True", "False", "0.0", "1.0"})


def positive_conflict(task: str | None) -> str:
    return (f"positive: applies to task: binary (that value against every other); with task: {task} "
            "remove positive")


def resolve_task(series: Any, backend: Backend, *, column: str, declared: str | None = None,
                 positive: Any = None) -> Task:
    """The task of target ``series``: ``declared`` (checked against the values where they can
    contradict it), or inferred from the values when None.

    Inference: ``positive`` given, a bool target or 0/1 values are binary; other numbers are
    regression; text or categories are multiclass, up to ``MAX_INFERRED_CLASSES`` values. Two
    other values are refused (which one is the positive class?), as are more text values than
    that (an id or free text, most likely): ``task:`` says what was meant.
    """
    if positive is not None:
        if declared not in (None, "binary"):
            raise ConfigError(positive_conflict(declared))
        return Task("binary", positive=positive)
    if declared == "binary" or (declared is None and _is_bool(series)):
        return BINARY                  # ``binary_labels`` refuses values that are not 0/1
    if declared == "regression":
        check_numeric_target(series, column=column)
        return REGRESSION
    if declared == "multiclass":
        values = distinct_values(series, backend)
        if len(values) < 2:
            raise DataError(f"task: multiclass needs at least 2 classes; target column '{column}' has "
                            f"{_shown(values)}")
        return _multiclass(values, column)
    return _inferred_task(series, backend, column=column)


def _inferred_task(series: Any, backend: Backend, *, column: str) -> Task:
    values = distinct_values(series, backend, limit=MAX_INFERRED_CLASSES + 1)
    if len(values) < 2 or {str(v) for v in values} <= ZERO_ONE:
        return BINARY                  # one value: the binary checks name the column and counts
    if len(values) == 2:
        raise DataError(f"target column '{column}' has values {_shown(values)}; set positive: to the one that "
                        "means 1 (or task: multiclass to predict both as classes)")
    if backend.is_numeric(series):
        return REGRESSION
    if len(values) > MAX_INFERRED_CLASSES:
        raise DataError(f"target column '{column}' has more than {MAX_INFERRED_CLASSES} distinct values, too many "
                        "to take as classes without being told (an id or free text?); set task: multiclass to "
                        "predict every value as a class")
    return _multiclass(values, column)


def _multiclass(values: list[Any], column: str) -> Task:
    """The multiclass task of ``values``, warning of classes written alike."""
    note = classes_alike_note(values, column)
    if note:
        log.warning("%s", note)
    return Task("multiclass", classes=tuple(values))


def _is_bool(series: Any) -> bool:
    return dtype_kind(series.dtype) == "bool"


def check_numeric_target(series: Any, *, column: str) -> None:
    """A regression target holds numbers (bools are a binary task's)."""
    if not is_number(series.dtype):
        raise DataError(f"target column '{column}' is {series.dtype}; task: regression needs numbers (a text or "
                        "yes/no target is task: multiclass or binary)")


def _shown(values: list[Any]) -> str:
    return "[" + ", ".join(repr(v) for v in values[:10]) + (", ...]" if len(values) > 10 else "]")


def distinct_values(series: Any, backend: Backend, *, limit: int | None = None) -> list[Any]:
    """The target's distinct non-missing values, sorted, as plain Python values.

    Partitioned data takes one pass over the column: with ``limit``, each partition keeps its
    first ``limit`` distinct values, so the pass stays small on a numeric target with millions
    of values, and the result is exact whenever it holds fewer than ``limit`` values (a
    partition cut short alone has ``limit``); without, ``series.unique()`` computed.
    """
    import pandas as pd

    if is_partitioned(series):
        if limit is None:
            (values,) = compute_lazy(series.dropna().unique())
        else:
            (values,) = compute_lazy(series.map_partitions(_first_distinct, limit, meta=series._meta))
    else:
        values = series.dropna().unique()
    host = backend.to_host(values)
    unique = pd.Series(host.tolist() if hasattr(host, "tolist") else list(host), dtype=object).dropna()
    out = [v.item() if isinstance(v, np.generic) else v for v in unique.drop_duplicates().tolist()]
    try:
        return sorted(out)
    except TypeError:                  # mixed types in an object column: a stable order anyway
        return sorted(out, key=lambda v: (type(v).__name__, str(v)))


def _first_distinct(part: Any, limit: int) -> Any:
    return part.dropna().drop_duplicates().iloc[:limit]


def task_labels(series: Any, task: Task, backend: Backend, *, column: str) -> Any:
    """The target as the task's labels (``pipeline.core.problems``): 0/1 int8 (binary, as before tasks),
    class codes int32 in ``task.classes`` order (multiclass), float64 (regression: float32 keeps
    7 digits, and a target of 1e12 + 1e4 * x came back as two distinct values)."""
    if task.kind == "binary":
        return binary_labels(series, task.positive, backend, column=column)
    missing = int(backend.to_host(series.isna().sum()))
    if missing:
        raise DataError(f"target column '{column}' has {missing} missing values; {MISSING_TARGET_HINT}")
    if task.kind == "regression":
        check_numeric_target(series, column=column)
        return series.astype(task.label_dtype)
    return (backend.category_codes(series, task.classes) - 1).astype("int32")


def check_training_classes(train_labels: np.ndarray, task: Task, original: Any, backend: Backend, *,
                           column: str, advice: str) -> None:
    """Every class must have training rows: a model cannot learn one it never saw (a
    classifier fitted on one class fails inside the estimator, without naming the column)."""
    if not task.is_classification:
        return
    seen = set(np.unique(train_labels).tolist())
    if task.kind == "binary":
        if len(seen) < 2:
            raise DataError(f"target column '{column}' has one class in the training split (rows per class in all: "
                            f"{class_counts(original, backend)}); {advice}")
        return
    absent = [c for code, c in enumerate(task.classes) if code not in seen]
    if absent:
        raise DataError(f"target column '{column}' has no rows of class {_shown(absent)} in the training split "
                        f"(rows per class in all: {class_counts(original, backend)}); {advice}")


@dataclass(frozen=True)
class SplitPlan(Options):
    """How ``split_frame`` divides the rows: the shares, the seed, and what keeps rows together.

    Examples:
        >>> from pipeline.stages.split import SplitPlan
        >>> plan = SplitPlan(test=0.25, seed=1).replace(valid=0.1)
        >>> plan.test, plan.valid, plan.stratify
        (0.25, 0.1, True)
    """

    test: float = 0.2
    valid: float = 0.0
    seed: int = 42
    stratify: bool = True
    group: str | None = None
    order_by: str | None = None
    folds: int | None = None
    test_latest: int | None = None
    missing_target: str = "error"

    what: ClassVar[str] = "split option"


def split_frame(frame: Any, target: str, plan: SplitPlan | None = None, /, *, positive: Any = None,
                backend: Backend | str | None = None, task: str | None = None, facts: dict[str, Any] | None = None,
                **changes: Any) -> SplitData:
    """Split a frame you already have; the target becomes the task's labels (``task``: binary,
    multiclass or regression; None infers it from the target, see ``resolve_task``).

    ``group``: every row with one value of that column lands in one split. ``order_by``: the
    newest rows are the test split, the next newest valid, the oldest train. Neither is
    stratified (the groups or the times decide where a row goes). ``folds``: k-fold positions
    over the training split, which then holds every non-test row (``valid`` must be 0); see
    ``train_folds``. ``test_latest`` (with ``order_by``): the rows of that many latest distinct
    times are the test split, in place of ``test``; ``valid`` is a share of the other rows.
    ``missing_target``: ``error`` refuses rows whose target is missing, ``drop`` leaves them out
    (in memory, ``facts["dropped_missing_target"]`` counts them when ``facts`` is given).
    Those are the fields of ``plan`` (a ``SplitPlan``), given by name here (``changes``) or as one
    object.

    Examples:
        >>> from pipeline.stages import split_frame
        >>> data = split_frame(frame, "Churn", positive="Yes", seed=0)
        >>> data.task.kind, {split: len(rows) for split, rows in data.frames.items()}
        ('binary', {'train': 5634, 'valid': 0, 'test': 1409})
    """
    plan = SplitPlan.build(plan, **changes)
    if task is not None and task not in TASK_KINDS:      # a config's task is checked by its schema
        raise UsageError(f"split_frame task: {task!r} is not a task; use one of {', '.join(TASK_KINDS)}, or None "
                         "to infer it from the target")
    test, valid, seed, group, order_by = plan.test, plan.valid, plan.seed, plan.group, plan.order_by
    folds, test_latest, missing_target, stratify = plan.folds, plan.test_latest, plan.missing_target, plan.stratify
    backend = backend_for(frame, backend)
    if target not in frame.columns:
        raise DataError(f"target column '{target}' not in the data (columns: {', '.join(map(str, frame.columns))})")
    for role, column in (("group", group), ("order_by", order_by)):
        if column is not None and column not in frame.columns:
            raise DataError(f"{role} column '{column}' not in the data (columns: {', '.join(map(str, frame.columns))})")
    if folds and valid:
        raise ValueError(FOLDS_WITH_VALID)
    if test_latest is not None and order_by is None:
        raise ValueError(TEST_LATEST_NEEDS_ORDER_BY)
    if missing_target not in MISSING_TARGETS:
        raise ValueError(f"missing_target: {missing_target!r}; use one of {', '.join(MISSING_TARGETS)}")
    if missing_target == "drop":
        frame = _drop_missing_target(frame, target, backend, facts)
    if is_partitioned(frame):
        if folds:
            raise DataError(FOLDS_NEED_MEMORY)
        if order_by:
            raise DataError("order_by: is not available on partitioned data yet (an out-of-time cut needs the "
                            "whole table's order); read the table in memory (partitioned: false) or drop the key")
        return _split_partitioned(frame, target, positive, plan, backend, task=task)
    if not len(frame):
        raise DataError(f"no rows to split on '{target}': the input table is empty")
    original = frame[target]
    resolved = resolve_task(original, backend, column=target, declared=task, positive=positive)
    labels = task_labels(original, resolved, backend, column=target)
    if resolved.kind == "regression":     # in memory only: one partition of many may be constant
        check_regression_labels(labels, backend, column=target)
    if resolved.kind == "binary":
        check_two_classes(original, labels, backend, column=target)
    frame = frame.assign(**{target: labels})
    y = np.asarray(backend.to_host(labels))
    if group or order_by:
        from pipeline.featuresets.split_positions import ordered_positions

        groups = _host_column(frame, group, backend) if group else None
        times = _host_column(frame, order_by, backend) if order_by else None
        train_pos, valid_pos, test_pos = ordered_positions(len(y), test=test, valid=valid, seed=seed,
                                                           groups=groups, times=times, test_latest=test_latest)
        missing_rows = "the other class" if resolved.kind == "binary" else "those classes"
        advice = f"the {'groups' if group else 'times'} put every row of {missing_rows} outside it"
    else:
        positions = np.arange(len(y))
        stratify = stratify and resolved.is_classification      # numbers have no class shares to keep
        strat = y if stratify else None
        try:
            # scikit-learn's train_test_split, row for row (``shuffled_split``), twice: test, then valid.
            rest, test_pos = shuffled_split(positions, test, seed, strat) if test else (positions, positions[:0])
            if valid:
                strat_rest = y[rest] if stratify else None
                train_pos, valid_pos = shuffled_split(rest, valid / (1 - test), seed, strat_rest)
            else:
                train_pos, valid_pos = rest, rest[:0]
        except ValueError as exc:
            # scikit-learn names classes by their position among the labels ("[3]"): the counts
            # say which value, and what to do is said in the pipeline's own words.
            counts = class_counts(original, backend)
            few = [value for value, rows in counts.items() if rows < 3]
            raise DataError(f"cannot split {len(y)} rows on target column '{target}' by class (rows per class: "
                            f"{counts}): a stratified split needs at least 2 rows of every class in each part it "
                            f"cuts" + (f", and {', '.join(map(repr, few))} has too few" if few else f" ({exc})")
                            + "; add rows of it, drop those rows (a load filter), or set stratify: false") from exc
        advice = "use stratify: true, or more rows of the smaller class"
    check_training_classes(y[train_pos], resolved, original, backend, column=target, advice=advice)
    frames = {name: backend.take(frame, np.sort(pos)) for name, pos in zip(SPLITS, (train_pos, valid_pos, test_pos))}
    fold_pairs = train_folds(frame, np.sort(train_pos), plan.replace(stratify=stratify), target=target,
                             task=resolved, backend=backend) if folds else None
    return SplitData(frames=frames, target=target, positive=positive, backend=backend, task=resolved,
                     folds=fold_pairs)


def _drop_missing_target(frame: Any, target: str, backend: Backend, facts: dict[str, Any] | None) -> Any:
    """``frame`` without the rows whose target is missing. Partitioned data drops them lazily,
    uncounted: counting would take a pass over the data of its own."""
    present = ~frame[target].isna()            # Dask series have no notna()
    if is_partitioned(frame):
        return frame[present]
    dropped = int(len(frame) - int(backend.to_host(present.sum())))
    if facts is not None:
        facts["dropped_missing_target"] = dropped
    if not dropped:
        return frame
    if dropped == len(frame):
        raise DataError(f"missing_target: drop left no row to split: the target '{target}' is missing in all "
                        f"{dropped:,} rows of the input; check that the target column holds the labels (a "
                        "na_values entry or a join may have blanked them)")
    return backend.take(frame, np.flatnonzero(np.asarray(backend.to_host(present))))


def train_folds(frame: Any, train_pos: np.ndarray, plan: SplitPlan, *, target: str, task: Task,
                backend: Backend) -> list[tuple[np.ndarray, np.ndarray]]:
    """``plan.folds`` folds over the training rows (``frame``'s labelled rows at ``train_pos``,
    sorted: the order of ``frames["train"]``): (fit, score) positions into that frame. Stratified
    for a class target with ``plan.stratify``; by group and time as ``fold_positions`` says."""
    from pipeline.featuresets.split_positions import (
        check_fold_classes, classes_some_fold_scores_none_of, fold_positions,
    )

    k, seed, stratify, group, order_by = plan.folds, plan.seed, plan.stratify, plan.group, plan.order_by

    labels = np.asarray(backend.to_host(frame[target]))[train_pos]
    classification = task.is_classification
    pairs = fold_positions(
        len(train_pos), k, seed=seed, labels=labels if stratify and classification else None,
        groups=_host_column(frame, group, backend).iloc[train_pos].reset_index(drop=True) if group else None,
        times=_host_column(frame, order_by, backend).iloc[train_pos].reset_index(drop=True) if order_by else None,
        group_name=group, order_name=order_by)
    if classification:
        check_fold_classes(pairs, labels, target=target, names=task.classes or None)
        names = task.classes or (("not " + str(task.positive), task.positive) if task.positive is not None else None)
        short = classes_some_fold_scores_none_of(pairs, labels, names)
        if short:
            log.warning(
                "folds: %d folds, and some fold scores no row of class(es) %s of target '%s' (rows of each in the "
                "non-test rows: %s): a metric that needs every class (ROC AUC, log loss) is undefined on such a "
                "fold and in the folds' mean; use at most %d folds, or more rows of the rare class", k,
                list(short), target, short, max(2, min(short.values())))
    return pairs


def _host_column(frame: Any, column: str, backend: Backend) -> Any:
    """A column as a pandas Series on the host, for drawing positions there."""
    import pandas as pd

    values = backend.to_host(frame[column])
    return values.rename(column) if isinstance(values, pd.Series) else pd.Series(values, name=column)


def _split_partitioned(frame: Any, target: str, positive: Any, plan: SplitPlan, backend: Backend, *,
                       task: str | None = None) -> SplitData:
    """Dask's per-partition random split: seeded and one pass, but not stratified.

    The task costs no pass when ``positive`` is given, the target is bool or the task is
    declared binary or regression. A multiclass task's classes come from one pass over the
    target column (``frame[target].unique()``, computed), and so does inferring the task
    otherwise (a bounded one: each partition's first distinct values, ``distinct_values``).

    With ``group``, each row goes where the seeded hash of its group value falls
    (``split_positions.group_draws``): no group in two splits, wherever its rows sit, and a
    group keeps its split as new data arrives. The shares are met on average, not exactly.
    Labels are checked partition by partition as the data streams through, not up front,
    which would cost a pass of its own.
    """
    test, valid, seed, group = plan.test, plan.valid, plan.seed, plan.group
    resolved = resolve_task(frame[target], backend, column=target, declared=task, positive=positive)
    if resolved.kind == "binary" and positive is None and not backend.is_numeric(frame._meta[target]):
        raise DataError(f"target column '{target}' is {frame._meta[target].dtype}; with partitioned data set "
                        "positive: to the value that means 1")
    dtype = "int8" if resolved.kind == "binary" else resolved.label_dtype
    labeled = frame.map_partitions(_label_partition, target, resolved, meta=frame._meta.assign(
        **{target: frame._meta[target].astype(dtype)}))
    train = 1.0 - test - valid
    if group is None:
        parts = labeled.random_split([train, valid, test], random_state=seed)
        return SplitData(frames=dict(zip(SPLITS, parts)), target=target, positive=positive, backend=backend,
                         task=resolved)
    bounds = {"test": (0.0, test), "valid": (test, test + valid), "train": (test + valid, 1.0)}
    frames = {name: labeled.map_partitions(_group_share, group, seed, *bounds[name], meta=labeled._meta)
              for name in SPLITS}
    return SplitData(frames=frames, target=target, positive=positive, backend=backend, task=resolved)


def _group_share(part: Any, group: str, seed: int, low: float, high: float) -> Any:
    """The rows of a partition whose group's draw falls in [low, high)."""
    from pipeline.featuresets.split_positions import group_draws

    backend = backend_for(part, None)
    draws = group_draws(_host_column(part, group, backend), seed, group)
    return backend.take(part, np.flatnonzero((draws >= low) & (draws < high)))


def _label_partition(part: Any, target: str, task: Task) -> Any:
    """One partition's labels, checked as they stream through (binary without ``positive``:
    1 where the value is 1, as before tasks)."""
    series = part[target]
    if series.isna().any():
        raise DataError(f"target column '{target}' has missing values; {MISSING_TARGET_HINT}")
    if task.kind != "binary":
        return part.assign(**{target: task_labels(series, task, backend_for(part, None), column=target)})
    labels = (series == task.positive) if task.positive is not None else series.astype("int8") == 1
    return part.assign(**{target: labels.astype("int8")})


def other_value(frame: Any, target: str, task: Task, backend: Backend) -> Any:
    """A binary task's target value that label 0 stands for, where the target holds exactly one
    value besides ``positive`` (None otherwise, or for a partitioned table, where finding it
    would cost another pass over the data)."""
    if task.kind != "binary" or task.positive is None or is_partitioned(frame) or target not in frame.columns:
        return None
    others = [v for v in distinct_values(frame[target], backend) if str(v) != str(task.positive)]
    return others[0] if len(others) == 1 else None


@register_stage("split", SplitSpec, produces=SplitData, accepts=(Table,))
def run_split(spec: SplitSpec, ctx: StageContext, inputs) -> SplitData:
    plan = SplitPlan(test=spec.test_share(), valid=spec.valid, seed=ctx.seed, stratify=spec.stratify,
                     group=spec.group, order_by=spec.order_by, folds=spec.folds, test_latest=spec.test_latest,
                     missing_target=spec.missing_target)
    data = split_frame(only_input(inputs), spec.target, plan, positive=spec.positive, backend=ctx.backend,
                       task=spec.task, facts=ctx.facts)
    if spec.test_latest is not None:
        ctx.facts["test_latest"] = spec.test_latest
    if data.folds:
        ctx.facts["folds"] = len(data.folds)
        ctx.facts["fold_rows"] = [{"fit": len(fit), "scored": len(score)} for fit, score in data.folds]
    ctx.facts["task"] = data.task.to_dict()
    negative = other_value(only_input(inputs), spec.target, data.task, ctx.backend)
    if negative is not None:
        ctx.facts["negative"] = negative        # what label 0 stands for: the report names the classes by it
    if spec.declared_task() is None:
        ctx.logger.info("%s: task %s, inferred from target '%s' (task: sets it)", ctx.stage, data.task.describe(),
                        spec.target)
    if spec.group or spec.order_by:
        ctx.facts["split_by"] = [name for name, on in (("group", spec.group), ("order_by", spec.order_by)) if on]
        ctx.facts["stratified"] = False
    if data.partitioned:
        ctx.facts["partitions"] = int(data.frames["train"].npartitions)
        ctx.facts["stratified"] = False
    else:
        ctx.facts["rows"] = data.sizes()
    return data
