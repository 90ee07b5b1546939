"""Column roles: what a column of a table nobody has described is for, from its values.

One rule, used by ``pipeline init`` (which writes the config's ops from it) and by the
``auto`` stage (which leaves the same columns out of its features and logs them): each column
is an identifier, a constant, a likely leak, free text, nested values (lists, records), a date,
a number or a category (of few or many values). Roles build on the basic type of
``pipeline.features.column_types`` (the rule column selectors use) and read a sample, so every
threshold is a constant below and docs/guides/init.md states the rules.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from pipeline.core.dtypes import dtype_kind
from pipeline.features.column_types import column_type

__all__ = ["Column", "LEFT_OUT_ROLES", "ROLE_LABELS", "classify", "date_format", "is_nested", "is_text",
           "left_out_columns", "mark_leaks", "plain_value"]

# ---------------------------------------------------------------- the rules' thresholds
LOW_CARDINALITY = 20           # text columns with at most this many values: one 0/1 column each
NEAR_UNIQUE = 0.9              # share of distinct values from which an id-like column is a likely leak
MIN_ROWS_FOR_UNIQUENESS = 30   # fewer sampled rows: "every value differs" says nothing
FREE_TEXT_WORDS = 4.0          # mean words per value from which a varied text column is prose
SKEWED = 2.0                   # sample skewness past which a non-negative column gets log1p
LEAK_PURITY = 0.995            # the target read off a column in this share of rows: a likely leak
LEAK_MAX_BASELINE = 0.95       # ... when the majority class alone is right less often than this
LEAK_MAX_LEVELS = 50           # ... checked on columns with at most this many values
LEAK_CORRELATION = 0.995       # regression: |correlation| with the target past this: a likely leak
MIN_ROWS_FOR_LEAKS = 100

# The roles that are never features: init drops them (or writes the id beside predictions), and
# auto leaves them out of its features.
LEFT_OUT_ROLES = ("identifier", "constant", "leak", "free_text", "nested")
# How a role is written for a person (the summary, the config's comments, docs/guides/init.md).
ROLE_LABELS = {"leak": "likely leak", "free_text": "free text", "high_cardinality": "high cardinality"}
# How many rows of a table the roles are read from (init reads a bounded sample of the file).
ROLE_SAMPLE_ROWS = 20_000

_ID_NAME = re.compile(r"(?:^|[_\s.-])(?:id|uuid|guid|key)$|^(?:id|uuid|guid|key)(?:$|[_\s.-])", re.IGNORECASE)
_CAMEL_ID = re.compile(r"[a-z0-9](?:ID|Id)$")
_DATE_TEXT = re.compile(r"^\s*\d{1,4}[-/.]\d{1,2}[-/.]\d{1,4}(?:[ T]\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?)?"
                        r"(?:Z|[+-]\d{2}:?\d{2})?\s*$")
DATE_FORMATS = ("%Y-%m-%d", "%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M", "%Y/%m/%d",
                "%m/%d/%Y", "%d/%m/%Y", "%d.%m.%Y", "%d-%m-%Y", "%m/%d/%Y %H:%M", "%d/%m/%Y %H:%M")


@dataclass
class Column:
    """One column's role, why, and what the config does with it."""

    name: str
    role: str
    reason: str
    action: str = ""
    missing: int = 0
    skewed: bool = False
    # The load's dates: format: a strptime format, None (the first value's layout), or False
    # for a column the file already holds as naive datetimes (nothing to parse).
    date_format: str | None | bool = False
    date_parts: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        """The role as the docs name it: ``likely leak``, ``free text``, ``high cardinality``."""
        return ROLE_LABELS.get(self.role, self.role.replace("_", " "))

    def line(self) -> str:
        return f"{self.name}: {self.label} ({self.reason}) — {self.action}"


def classify(series: pd.Series, name: str, *, n_rows: int) -> Column:
    """One column's role from its sampled values (see ``ROLES`` and docs/guides/init.md)."""
    values = series.dropna()
    missing = int(series.isna().sum())
    seen = len(values)
    gaps = f", {missing:,} missing" if missing else ""
    if seen == 0:
        return Column(name, "constant", "no values in the sample", "dropped", missing)
    nested = is_nested(series)
    if nested:                          # before counting values: a list or a record is not hashable
        return Column(name, "nested", f"{nested}{gaps}: no feature op reads nested values", "dropped", missing)
    distinct = int(values.nunique())
    if distinct == 1:
        return Column(name, "constant", f"one value, {plain_value(values.iloc[0])!r}{gaps}", "dropped", missing)
    hinted = bool(_ID_NAME.search(name)) or bool(_CAMEL_ID.search(name))
    enough = n_rows >= MIN_ROWS_FOR_UNIQUENESS
    unique_per_row = distinct == n_rows
    # The basic type is the one column selectors use ({type: numeric}); the roles refine it.
    basic = column_type(series)
    if basic == "date":
        # Naive datetimes need no parsing; zone-aware ones are read as UTC by the load (dates: null).
        aware = isinstance(series.dtype, pd.DatetimeTZDtype)
        return _date_column(name, values.dt.tz_convert(None) if aware else values, None if aware else False, missing)
    if basic == "bool":
        return Column(name, "categorical", f"true/false{gaps}", "one_hot", missing)
    if basic == "numeric":
        whole = bool(np.all(np.mod(values.to_numpy(dtype="float64"), 1) == 0))
        if whole and unique_per_row and (hinted or (enough and series.is_monotonic_increasing)):
            why = "unique per row" + (", named like an id" if hinted else ", counts up row by row")
            return Column(name, "identifier", why, "not a feature", missing)
        if whole and hinted and enough and distinct / seen >= NEAR_UNIQUE:
            return Column(name, "leak", f"near-unique id: {distinct / seen:.0%} of values distinct{gaps}",
                          "dropped", missing)
        if whole and hinted:
            role = "categorical" if distinct <= LOW_CARDINALITY else "high_cardinality"
            return Column(name, role, f"{distinct:,} whole numbers named like an id: codes, not quantities{gaps}",
                          "", missing)
        finite = values.to_numpy(dtype="float64")
        skew = float(pd.Series(finite).skew()) if distinct > 2 else 0.0
        skewed = distinct > LOW_CARDINALITY // 2 and finite.min() >= 0 and math.isfinite(skew) and skew > SKEWED
        what = f"numbers, {distinct:,} distinct{gaps}" + (f", skewed ({skew:.1f})" if skewed else "")
        return Column(name, "numeric", what, "", missing, skewed=skewed)
    text = values.astype(str)
    fmt = date_format(text)
    if fmt is not False:
        return _date_column(name, pd.Series(pd.to_datetime(text, format=fmt or "ISO8601", errors="coerce")),
                            fmt, missing)
    words = float(text.head(2_000).str.split().str.len().mean())
    if distinct / seen > 0.5 and words >= FREE_TEXT_WORDS:
        return Column(name, "free_text", f"about {words:.0f} words per value, {distinct / seen:.0%} distinct",
                      "dropped", missing)
    if unique_per_row and (enough or hinted):
        return Column(name, "identifier", "unique per row" + (", named like an id" if hinted else ""),
                      "not a feature", missing)
    if enough and distinct / seen >= NEAR_UNIQUE:
        return Column(name, "leak", f"near-unique id: {distinct / seen:.0%} of values distinct{gaps}", "dropped",
                      missing)
    if distinct <= LOW_CARDINALITY:
        return Column(name, "categorical", f"{distinct} values{gaps}", "one_hot", missing)
    return Column(name, "high_cardinality", f"{distinct:,} values{gaps}", "categorify", missing)


def date_format(text: pd.Series) -> str | None | bool:
    """The strptime format every sampled value of ``text`` has, None for ISO 8601 layouts no
    listed format covers (the load then reads the first value's layout), False: not dates."""
    head = text.head(200)
    if head.empty or not head.str.match(_DATE_TEXT).all():
        return False
    for fmt in DATE_FORMATS:
        if pd.to_datetime(text, format=fmt, errors="coerce").notna().all():
            return fmt
    if pd.to_datetime(text, format="ISO8601", errors="coerce").notna().all():
        return None
    return False


def _date_column(name: str, dates: pd.Series, fmt: str | None | bool, missing: int) -> Column:
    stamps = pd.to_datetime(dates)
    parts = ["year", "month", "day", "dayofweek"]
    if (stamps.dt.hour != 0).any():
        parts.append("hour")
    span = f"{stamps.min():%Y-%m-%d} to {stamps.max():%Y-%m-%d}"
    how = "datetimes" if fmt is False else f"format {fmt}" if fmt else "ISO 8601"
    gaps = f", {missing:,} missing" if missing else ""
    return Column(name, "date", f"{how}, {span}{gaps}", "date_parts", missing, date_format=fmt, date_parts=parts)


def mark_leaks(columns: list[Column], frame: pd.DataFrame, target: str, task_kind: str) -> None:
    """Columns the target can be read off in the sample: likely recorded after the outcome."""
    known = frame[target].notna()
    y = frame.loc[known, target]
    if len(y) < MIN_ROWS_FOR_LEAKS:
        return
    for column in columns:
        if column.role not in ("numeric", "categorical", "high_cardinality", "date"):
            continue
        x = frame.loc[known, column.name]
        if task_kind == "regression":
            if column.role == "numeric":
                numbers, target_values = pd.to_numeric(x, errors="coerce"), y.astype("float64")
                corr = numbers.corr(target_values)
                rank = numbers.corr(target_values, method="spearman")
                if corr is not None and math.isfinite(corr) and abs(corr) >= LEAK_CORRELATION:
                    _leak(column, f"moves with the target: correlation {corr:.3f}")
                elif rank is not None and math.isfinite(rank) and abs(rank) >= LEAK_CORRELATION:
                    # A monotone function of the target (a rounded log of it): in order with it.
                    _leak(column, f"in the target's order: rank correlation {rank:.3f}")
            continue
        baseline = float(y.value_counts(normalize=True).iloc[0])
        if baseline > LEAK_MAX_BASELINE:
            continue
        if 0 < x.isna().mean() < 1 and _purity(x.isna(), y) >= LEAK_PURITY:
            _leak(column, f"missing exactly when {target} is one value, in {_purity(x.isna(), y):.1%} of rows")
        elif x.nunique(dropna=False) <= LEAK_MAX_LEVELS and _purity(x.astype(str), y) >= LEAK_PURITY:
            _leak(column, f"{target} can be read off its value in {_purity(x.astype(str), y):.1%} of rows")
        elif column.role == "numeric":
            read = _read_off_by_cuts(pd.to_numeric(x, errors="coerce"), y)
            if read is not None and read[1] >= LEAK_PURITY:
                _leak(column, f"{target} can be read off it by {read[0]} cut point{'s' if read[0] > 1 else ''} in "
                              f"{read[1]:.1%} of rows (a score or a status recorded with the outcome?)")


def _read_off_by_cuts(x: pd.Series, y: pd.Series) -> tuple[int, float] | None:
    """(cut points, share of rows) for the few cuts of the numbers ``x`` that give the class of
    ``y`` best (``retention_score`` below 40 for every churner, and above for no one else): a
    tree on ``x`` alone with at most two leaves per class. None when ``x`` has gaps in more than
    a few rows (the missing-value rule covers those) or ``y`` has more than ten classes."""
    present = x.notna()
    classes = y[present].astype(str)
    if present.mean() < 0.99 or not 2 <= classes.nunique() <= 10:
        return None
    from sklearn.tree import DecisionTreeClassifier

    values = x[present].to_numpy(dtype="float64").reshape(-1, 1)
    tree = DecisionTreeClassifier(max_leaf_nodes=2 * classes.nunique(), random_state=0).fit(values, classes)
    return tree.get_n_leaves() - 1, float(tree.score(values, classes))


def _purity(x: pd.Series, y: pd.Series) -> float:
    """Share of rows whose target is the most common one for their value of ``x``."""
    pairs = pd.DataFrame({"x": x.to_numpy(), "y": y.astype(str).to_numpy()}).value_counts()
    return float(pairs.groupby(level=0).max().sum() / max(len(y), 1))


def _leak(column: Column, why: str) -> None:
    column.role, column.reason, column.action = "leak", why, "dropped"


def left_out_columns(frame: pd.DataFrame, target: str, task_kind: str, *, keep: tuple[str, ...] = ()) -> list[Column]:
    """The columns of ``frame`` (a pandas sample holding ``target``, in table order: the caller
    bounds it, to ``ROLE_SAMPLE_ROWS`` rows, before it leaves the device) that are not features
    by the rule ``init`` uses, in file order: identifiers, constants, likely leaks and free text.
    ``keep`` names columns the caller has already given a role (an id)."""
    columns = [classify(frame[c], str(c), n_rows=len(frame)) for c in frame.columns
               if str(c) != target and str(c) not in keep]
    mark_leaks(columns, frame, target, task_kind)
    return [c for c in columns if c.role in LEFT_OUT_ROLES]


def is_nested(series: pd.Series) -> str:
    """What ``series`` nests, as Parquet lists, structs and maps are read (``lists``, ``records``),
    or "" for plain values: from the dtype when pandas keeps Arrow's, else its first values."""
    dtype = series.dtype
    if isinstance(dtype, pd.ArrowDtype):
        import pyarrow as pa

        kind = dtype.pyarrow_dtype
        return ("records" if pa.types.is_struct(kind) else "lists" if pa.types.is_nested(kind) else "")
    if dtype != object:
        return ""
    for value in series.dropna().head(100):
        if isinstance(value, dict):
            return "records"
        if isinstance(value, (list, tuple, set, np.ndarray)):
            return "lists"
    return ""


def is_text(series: pd.Series) -> bool:
    """Whether ``series`` holds text (strings or Python objects), as pandas reads a CSV's text."""
    return dtype_kind(series.dtype) == "text"


def plain_value(value: Any) -> Any:
    """A NumPy scalar as its Python value (for messages and YAML)."""
    return value.item() if isinstance(value, np.generic) else value
