"""An op list for any table, written with selectors only: ``default_ops(task_kind)``.

For stages that fit models on a table nobody has described (an ``auto`` stage: tree models,
a linear model, an MLP), it turns every column into numbers without naming one:

1. ``date_parts`` on the date columns (year, month, day, day of week), first, so a missing
   date's missing parts are filled by the next op;
2. ``fill_missing`` with the training median on every numeric column, the date parts
   included (a column without gaps is left as it is);
3. ``target_encode`` on the categorical columns of at least ``TARGET_ENCODE_LEVELS`` distinct
   values: the label's smoothed mean per level, out of fold on the training rows (one column
   per class for a multiclass task), so trees do not split on hundreds of codes one by one.
   The columns are kept (``keep: true``) beside their encodings (``<col>=te``);
4. ``categorify`` on the categorical and bool columns (those kept by 3 too): integer codes by
   frequency, values seen fewer than ``RARE_CODE`` times and missing ones sharing code 0.

So a column of many levels is in the matrix twice, and a model reads one of the two
(``member_views``): its encoding (``ENCODED``: LightGBM, XGBoost, the forests, the linear model,
the MLP) or its codes (``CODES``: CatBoost, whose ordered target statistics are its own
encoding, 0.874 against 0.864 on Amazon).

Why target encoding from 100 levels (``scripts/bench_highcard.py``, docs/benchmarks.md): on a
100,000-row table with four categoricals of 300 to 700 levels, test ROC AUC went from 0.854 to
0.911 (LightGBM) and 0.846 to 0.910 (XGBoost), CatBoost's native handling from 0.917 to 0.918
in two thirds of the time; on the Amazon access table (eight columns of 128 to 7,518 levels)
LightGBM was level (0.857, 0.855), XGBoost gained (0.839 to 0.859), CatBoost lost 0.010 (0.874 to
0.864) but fitted five times faster.

No ``standardize``: trees need none, and a stage that also fits a linear model or an MLP
scales the matrix it gives them. Columns are typed by ``pipeline.features.column_types``;
text holding dates is categorical unless the load parses it (``dates:``). A kind of column a
table lacks skips its op (resolution logs it), so the list works on any table.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pipeline.core.problems import TASK_KINDS

__all__ = ["CODES", "ENCODED", "RARE_CODE", "TARGET_ENCODE_LEVELS", "default_ops", "member_views"]

# categorify: values seen fewer times than this in the training split share code 0.
RARE_CODE = 5
# target_encode: categorical columns with at least this many distinct values in the training split.
TARGET_ENCODE_LEVELS = 100
# What a model reads of a column of many levels: its target encoding, or its codes.
ENCODED, CODES = "encoded", "codes"


def default_ops(task_kind: str) -> list[dict[str, Any]]:
    """The op list (the YAML form, ``[{op_name: {params}}]``) that makes a valid numeric matrix
    of any table for a ``task_kind`` task (binary, multiclass or regression). The list is the
    same for every task (``target_encode`` reads the task from the split); the argument is
    there so that a task may get its own, and it is checked."""
    if task_kind not in TASK_KINDS:
        raise ValueError(f"task kind must be one of {', '.join(TASK_KINDS)}, not {task_kind!r}")
    # optional: a table without dates (or without many-level columns) is the common case, so an
    # op that finds nothing is an info line, not a warning about an op the user never wrote.
    return [
        {"date_parts": {"columns": {"type": "date", "optional": True}}},
        {"fill_missing": {"columns": {"type": "numeric", "optional": True}, "strategy": "median"}},
        {"target_encode": {"columns": {"type": "categorical", "min_levels": TARGET_ENCODE_LEVELS, "optional": True},
                           "keep": True}},
        {"categorify": {"columns": {"type": ["categorical", "bool"], "optional": True}, "min_frequency": RARE_CODE}},
    ]


def member_views(feature_names: Sequence[str], categorical_columns: Sequence[str]) -> dict[str, list[str]]:
    """The columns each kind of model reads of a matrix ``default_ops`` made: a categorical
    column kept beside its target encoding (``<col>=te``, ``<col>=te_<class>``) is read as
    the encoding by ``ENCODED`` models and as codes by ``CODES`` models; every other column by
    both. On a matrix without such columns both are every column."""
    names = list(feature_names)
    encodings = {column: [n for n in names if n == f"{column}=te" or n.startswith(f"{column}=te_")]
                 for column in categorical_columns}
    twice = {column for column, encoded in encodings.items() if encoded}
    encoded = {n for column in twice for n in encodings[column]}
    return {ENCODED: [n for n in names if n not in twice], CODES: [n for n in names if n not in encoded]}
