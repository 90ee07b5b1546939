"""How the report names things: classes by the target's own values, one-hot features by their
source column and level.

The record keeps what the models see (binary labels 0/1, one-hot columns ``Contract=Two year``);
a reader thinks in the data's terms ("Yes"/"No", "Contract = Two year"). Both are derived from
what the run recorded, never guessed from the data: the task (``metrics.json``/``profile.json``
``task``: the positive value, a multiclass task's classes), the split stage's ``negative`` fact
(the one value 0 stands for, recorded when the target holds exactly two values) and the read
tables' column names (``columns.json``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pipeline.report.html import plain

# What one_hot calls the column of a column's rare categories (``pipeline.features.ops``).
_RARE = "__rare__"


def class_namer(task: Mapping[str, Any] | None, facts: Iterable[Mapping[str, Any]]) -> Callable[[Any], str]:
    """A function from a recorded class label to the name a reader knows.

    Binary with a ``positive`` value: 1 is that value, 0 is the split's recorded ``negative``
    value (the target's only other value), else "not <positive>" (one value against several).
    A binary task without ``positive`` (a 0/1 or bool target) and a multiclass task (whose
    labels are already the class values) are shown as recorded."""
    task = task or {}
    positive = task.get("positive")
    if task.get("kind") != "binary" or positive is None:
        return plain
    negative = next((f["negative"] for f in facts if f.get("task") == dict(task) and f.get("negative") is not None),
                    None)
    zero = plain(negative) if negative is not None else f"not {plain(positive)}"
    names = {"1": plain(positive), "0": zero, "1.0": plain(positive), "0.0": zero,
             "True": plain(positive), "False": zero}

    def name(label: Any) -> str:
        return names.get(plain(label), plain(label))

    return name


def feature_namer(source_columns: Iterable[str]) -> Callable[[str], str]:
    """A function from a feature's name to how the report shows it: a one-hot column
    ``<column>=<level>`` as ``<column> = <level>`` (its rare bucket as ``(rare values)``),
    where ``<column>`` is a column of a read table; every other name as it is. Without any
    recorded columns, the first ``=`` splits."""
    known = set(source_columns)

    def name(feature: str) -> str:
        text = str(feature)
        cut = -1
        for at in (i for i, ch in enumerate(text) if ch == "="):
            if not known or text[:at] in known:
                cut = at
                break
        if cut <= 0:
            return text
        column, level = text[:cut], text[cut + 1:]
        return f"{column} = {'(rare values)' if level == _RARE else level}"

    return name
