"""The task from the target column: binary, multiclass or regression, and the positive class."""

from __future__ import annotations

import difflib
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pipeline.core.dtypes import dtype_kind
from pipeline.core.errors import DataError, UsageError
from pipeline.core.problems import MAX_INFERRED_CLASSES
from pipeline.features.column_roles import plain_value
from pipeline.features.column_types import column_type
from pipeline.scaffold.rules import INTEGER_CLASSES, SEED, TEST_SHARE, VALID_FROM_ROWS, VALID_SHARE, YES_WORDS
from pipeline.scaffold.sampling import Sample
from pipeline.stages.split import ZERO_ONE, SplitSpec, split_frame


@dataclass
class TaskChoice:
    """The task chosen for the target, why, and what the split stage needs written for it."""

    kind: str
    reason: str
    positive: Any = None
    write_positive: bool = False
    missing: int = 0
    declared: bool = False
    # False where a class has too few rows for a stratified split (``stratify_why`` says which).
    stratify: bool = True
    stratify_why: str = ""


def check_target(frame: pd.DataFrame, target: str, path: Path) -> None:
    names = [str(c) for c in frame.columns]
    if target in names:
        return
    close = difflib.get_close_matches(target, names, n=1, cutoff=0.6)
    if not close:
        lowered = {n.lower(): n for n in names}
        match = difflib.get_close_matches(target.lower(), list(lowered), n=1, cutoff=0.6)
        close = [lowered[match[0]]] if match else []
    hint = f"; did you mean '{close[0]}'?" if close else ""
    shown = ", ".join(names[:30]) + (", ..." if len(names) > 30 else "")
    raise UsageError(f"--target '{target}' is not a column of {path}{hint} (columns: {shown})")


# ---------------------------------------------------------------- the task
def choose_task(series: pd.Series, column: str, *, declared: str | None, positive: str | None,
                sample: Sample) -> TaskChoice:
    """The task and why: binary for two values, multiclass for a few text values or up to
    ``INTEGER_CLASSES`` whole numbers, regression for other numbers; ``declared`` wins where
    the values allow it."""
    missing = int(series.isna().sum())
    values = series.dropna()
    counts = values.value_counts()
    distinct = len(counts)
    where = f"in {sample.describe()} read"
    if distinct == 0:
        raise DataError(f"target column '{column}' has no values {where}: there is nothing to predict")
    if distinct == 1:
        only = counts.index[0]
        partial = "" if sample.complete else " (unless other rows differ: the sample saw one value)"
        raise DataError(f"target column '{column}' has one value ({plain_value(only)!r}) {where}: there is nothing to "
                        f"predict{partial}; choose another --target")
    numeric = column_type(values) == "numeric"
    shown = _shown_counts(counts)
    if positive is not None:
        if declared not in (None, "binary"):
            raise UsageError(f"--positive applies to --task binary (that value against every other); with --task "
                             f"{declared} leave it out")
        match = [v for v in counts.index if str(plain_value(v)) == positive]
        if not match:
            close = difflib.get_close_matches(positive, [str(plain_value(v)) for v in counts.index], n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            raise UsageError(f"--positive {positive!r} is not a value of target column '{column}'{hint} "
                             f"(values {where}: {shown})")
        return TaskChoice("binary", f"--positive {positive!r}: that value against every other ({shown})",
                          plain_value(match[0]), True, missing)
    if declared == "regression":
        if not numeric:
            raise UsageError(f"--task regression needs a numeric target; '{column}' holds {values.dtype} values "
                             f"({shown}): use --task binary or multiclass")
        return TaskChoice("regression", f"--task regression (given); {distinct} distinct values", missing=missing)
    if declared == "multiclass":
        return TaskChoice("multiclass", f"--task multiclass (given): {distinct} classes ({shown})", missing=missing)
    if distinct == 2 or declared == "binary":
        if distinct > 2:
            raise UsageError(f"--task binary: target column '{column}' has {distinct} values ({shown}); name the "
                             "one that means 1 with --positive VALUE (one against the rest), or use --task multiclass")
        given = " (given)" if declared else ""
        if {str(plain_value(v)) for v in counts.index} <= ZERO_ONE or dtype_kind(values.dtype) == "bool":
            return TaskChoice("binary", f"two values, 0/1 or true/false{given}: 1 is the positive class ({shown})",
                              missing=missing)
        chosen, why = _positive_of(counts, numeric)
        return TaskChoice("binary", f"two values{given} ({shown}); positive: {shown_value(chosen)!r}, {why}",
                          plain_value(chosen), True, missing)
    whole = numeric and bool(np.all(np.mod(values.to_numpy(dtype="float64"), 1) == 0))
    if numeric and not (whole and distinct <= INTEGER_CLASSES):
        return TaskChoice("regression", f"numbers with {distinct} distinct values; --task multiclass would "
                                        "take them as classes", missing=missing)
    if numeric:
        return TaskChoice("multiclass", f"{distinct} whole numbers ({shown}): taken as classes; --task regression "
                                        "predicts them as numbers", missing=missing)
    others = _non_numbers(counts)
    if distinct > MAX_INFERRED_CLASSES:
        if len(others):                 # numbers, and a few values that are not: "100+", "over 80"
            raise DataError(f"target column '{column}' holds numbers and {_shown_counts(others)}, which are not "
                            f"numbers and not a spelling of missing: {distinct} distinct values {where}, too many to "
                            "take as classes; to predict it as numbers, write those values as numbers in the file "
                            "(or add them to the load's na_values to leave those rows out), or pass --task "
                            "multiclass to predict each value as a class")
        raise DataError(f"target column '{column}' has {distinct} distinct text values {where}, too many to take as "
                        "classes without being told (an id or free text?); pass --task multiclass to predict each "
                        "value as a class, or choose another --target")
    mixed = (f"; {', '.join(repr(str(v)) for v in others.index)} {'is' if len(others) == 1 else 'are'} not a "
             "number, so every value is a class, as text") if len(others) else ""
    return TaskChoice("multiclass", f"{distinct} text values ({shown}): each one a class{mixed}", missing=missing)


def _non_numbers(counts: pd.Series) -> pd.Series:
    """The counts of the values that are not numbers, when the others are (by rows) at least 90%:
    a number column with a few labels in it (``3+``), else an empty series."""
    numbers = pd.to_numeric(pd.Series(counts.index.astype(str)), errors="coerce").notna().to_numpy()
    if not numbers.any() or counts[numbers].sum() < 0.9 * counts.sum():
        return counts.iloc[:0]
    return counts[~numbers]


def _positive_of(counts: pd.Series, numeric: bool) -> tuple[Any, str]:
    """The value that means 1: a yes-like word, else the larger number, else the rarer value."""
    for value in counts.index:
        if str(value).strip().lower() in YES_WORDS:
            return value, "the yes-like value"
    if numeric:
        return max(counts.index), "the larger value"
    return counts.index[-1], "the rarer value (usually the event to predict)"


def _shown_counts(counts: pd.Series, limit: int = 6) -> str:
    parts = [f"{shown_value(v)!r}: {int(n):,}" for v, n in counts.iloc[:limit].items()]
    return ", ".join(parts) + (", ..." if len(counts) > limit else "")


def shown_value(value: Any) -> Any:
    """A value as a person reads it: a whole float (a number column with gaps) as an int, ``0`` not ``0.0``."""
    value = plain_value(value)
    return int(value) if isinstance(value, float) and value.is_integer() else value


# ---------------------------------------------------------------- the split
def valid_share(rows: int) -> float:
    """The validation share the config's split gets for a file of ``rows`` rows."""
    return VALID_SHARE if rows >= VALID_FROM_ROWS else 0.0


def check_split(frame: pd.DataFrame, target: str, choice: TaskChoice, sample: Sample) -> None:
    """Make on the sample the split the config will make (``split_frame``, its shares and seed),
    so that the config runs as written. A class too small for a stratified split (a 5-row file, a
    class of one row) sets ``choice.stratify`` False with why; a class that the split leaves out
    of training stratified or not is refused, when the sample is the whole file (exit 3)."""
    if choice.kind == "regression":
        return
    plan = {"test": TEST_SHARE, "valid": valid_share(sample.total_rows), "seed": SEED, "missing_target": "drop",
            "task": choice.kind, "positive": choice.positive if choice.write_positive else None, "backend": "cpu"}
    rows = frame[[target]]
    try:
        with _split_warnings_unsaid():
            split_frame(rows, target, stratify=True, **plan)
        return
    except DataError:
        pass
    counts = rows[target].dropna().value_counts()
    few = counts[counts < 3] if (counts < 3).any() else counts.iloc[-1:]
    shown = ", ".join(f"{shown_value(v)!r} has {n} row{'s' if n > 1 else ''}" for v, n in few.head(5).items())
    said = shown if len(few) <= 5 else f"{len(few):,} classes have fewer than 3 rows ({shown}, ...)"
    try:
        with _split_warnings_unsaid():
            split_frame(rows, target, stratify=False, **plan)
    except DataError as exc:
        if sample.complete:
            value = shown_value(few.index[0]) if len(few) == 1 else "VALUE"
            raise DataError(f"target column '{target}': {said} of {int(counts.sum()):,}, too few to learn from: the "
                            f"split the config would make (seed {SEED}, a random {TEST_SHARE:.0%} for the test) "
                            "leaves no row of it in training, stratified or not, so no model could learn it. Add "
                            f"rows of it, or leave those rows out with a load filter: filters: [[{target}, \"!=\", "
                            f"{value}]]") from exc
    choice.stratify = False
    choice.stratify_why = f"{said}: too few to keep the class ratio in each part"


def missing_target_note(target: str, missing: int, rows: int) -> str:
    if "missing_target" in SplitSpec.model_fields:
        return (f"{missing:,} of {rows:,} sampled rows have no {target}: split has missing_target: drop, "
                "so they are left out of training and testing (the run record counts them)")
    return (f"{missing:,} of {rows:,} sampled rows have no {target}, and the split stage has no option to drop "
            f"such rows yet: the run will stop at split until they are removed from the file")


@contextmanager
def _split_warnings_unsaid() -> Iterator[None]:
    """The trial split's warnings (classes written alike...), left unsaid: init says them as
    notes of its own, in the summary and the config's comments. Only this thread's records are
    dropped, so a run in another thread of the process keeps its warnings."""
    import threading

    split_log = logging.getLogger("pipeline")               # the split logs on the package logger
    here = threading.get_ident()

    def keep(record: logging.LogRecord) -> bool:
        return record.thread != here

    split_log.addFilter(keep)
    try:
        yield
    finally:
        split_log.removeFilter(keep)
