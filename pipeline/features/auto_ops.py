"""An op list for any table, written with selectors only: ``default_ops(task_kind)``.

For stages that fit models on a table nobody has described (an ``auto`` stage: tree models,
a linear model, an MLP), it turns every column into numbers without naming one:

1. ``date_parts`` on the date columns (year, month, day, day of week), first, so a missing
   date's missing parts are filled by the next op;
2. ``fill_missing`` with the training median on every numeric column, the date parts
   included (a column without gaps is left as it is);
3. ``categorify`` on the categorical and bool columns: integer codes by frequency, values
   seen fewer than ``RARE_CODE`` times and missing ones sharing code 0.

No ``standardize``: trees need none, and a stage that also fits a linear model or an MLP
scales the matrix it gives them. Columns are typed by ``pipeline.features.column_types``;
text holding dates is categorical unless the load parses it (``dates:``). A kind of column a
table lacks skips its op (resolution logs it), so the list works on any table.
"""

from __future__ import annotations

from typing import Any

from pipeline.core.problems import TASK_KINDS

__all__ = ["RARE_CODE", "default_ops"]

# categorify: values seen fewer times than this in the training split share code 0.
RARE_CODE = 5


def default_ops(task_kind: str) -> list[dict[str, Any]]:
    """The op list (the YAML form, ``[{op_name: {params}}]``) that makes a valid numeric matrix
    of any table for a ``task_kind`` task (binary, multiclass or regression). The list is the
    same for every task today; the argument is there so that a task may get its own (target
    encodings need the task), and it is checked."""
    if task_kind not in TASK_KINDS:
        raise ValueError(f"task kind must be one of {', '.join(TASK_KINDS)}, not {task_kind!r}")
    return [
        {"date_parts": {"columns": {"type": "date"}}},
        {"fill_missing": {"columns": {"type": "numeric"}, "strategy": "median"}},
        {"categorify": {"columns": {"type": ["categorical", "bool"]}, "min_frequency": RARE_CODE}},
    ]
