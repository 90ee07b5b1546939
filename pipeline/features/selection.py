"""Selectors resolved to names, once, on the training split (``columns: {type: numeric}``).

Each selector op is resolved on the frame as it reaches the op: the training split after the
ops before it, fitted. So ``{type: numeric}`` after ``categorify`` sees the codes, and after
``date_parts`` the date parts. The op becomes a copy holding the names
(``model_copy(update={"columns": [...]})``); the workflow fits and records those, so
workflow.json holds names and scoring never types a column again. A selector that takes no
column drops its op (a generic op list must work on any table), and the resolution says so.

Cost: the ops between two selectors are fitted on the frame once more to see what they output
(in memory: one extra application of each; on partitioned data: their passes once more). A
list without selectors costs nothing here.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pipeline.backends import Backend
from pipeline.features.fitting import fit_ops
from pipeline.features.ops.op_base import Target
from pipeline.features.ops import FeatureOp
from pipeline.features.ops.column_selector import describe_selector, select_columns

log = logging.getLogger(__name__)

__all__ = ["Selection", "resolve_selectors"]


@dataclass(frozen=True)
class Selection:
    """What one selector resolved to: its op's position in the configured list, the op, the
    selector in words and the names it took (empty: the op was skipped)."""

    position: int
    op: str
    selector: str
    columns: list[str]

    def as_json(self) -> dict[str, Any]:
        return {"position": self.position, "op": self.op, "selector": self.selector, "columns": self.columns,
                "skipped": not self.columns}


def resolve_selectors(ops: Sequence[FeatureOp], frame: Any, backend: Backend,
                      target: Target | None = None) -> tuple[list[FeatureOp], list[Selection]]:
    """``ops`` with every selector replaced by the names it takes on ``frame`` (the training
    split as the workflow receives it), ops whose selector takes nothing left out; and what
    each selector resolved to, in order. ``target``: the frame's labels, for the ops before a
    selector that learn from them (``target_encode``)."""
    if all(op.selector is None for op in ops):
        return list(ops), []
    explicit = set().union(*(_named(op) for op in ops if op.selector is None))
    resolved: list[FeatureOp] = []
    given: list[int] = []                  # each resolved op's position in ``ops``, for an op's failure
    selections: list[Selection] = []
    taken: set[str] = set()
    current, fitted_upto = frame, 0
    for position, op in enumerate(ops):
        selector = op.selector
        if selector is None:
            resolved.append(op)
            given.append(position)
            continue
        pending = resolved[fitted_upto:]
        if pending:                        # the frame as it reaches this op: the ops since the last selector, fitted
            current = fit_ops(pending, current, backend, target, given[fitted_upto:]).transformed(pending)
            fitted_upto = len(resolved)
        names = select_columns(selector, current, backend, explicit=explicit, taken=taken)
        words = describe_selector(selector)
        selections.append(Selection(position, op.op, words, names))
        if not names:
            log.log(logging.INFO if selector.optional else logging.WARNING,
                    "feature ops[%d] (%s): %s matched no column of the training split; the op is skipped",
                    position, op.op, words)
            continue
        log.info("feature ops[%d] (%s): %s -> %s", position, op.op, words, ", ".join(names))
        for name, count, total, first in numbers_read_as_text(current, names, backend):
            if not count:
                log.warning("feature ops[%d] (%s): column '%s' is text, but every value looked at is a number; "
                            "integers past int64 such as %s are read as text: set the column's dtype to float64 "
                            "in the load's dtypes to type it as numeric", position, op.op, name, first)
                continue
            log.warning("feature ops[%d] (%s): column '%s' is text, but %s of the %s values looked at are numbers "
                        "(the first that is not: %r); fix the values, or add the placeholder to the load's "
                        "na_values, to type it as numeric", position, op.op, name, f"{total - count:,}",
                        f"{total:,}", first)
        taken.update(names)
        resolved.append(op.model_copy(update={"columns": names}))
        given.append(position)
    return resolved, selections


# How many values of a text column are looked at for numbers, and the share that makes it a
# column of numbers with a stray word in it rather than words with a number among them.
NUMBERS_SAMPLE = 10_000
NUMBERS_SHARE = 0.95


def numbers_read_as_text(frame: Any, names: Sequence[str], backend: Backend) -> list[tuple[str, int, int, str]]:
    """Text columns among ``names`` whose values (the first ``NUMBERS_SAMPLE``) are nearly all
    numbers: a column of numbers that one stray word ('12a') made text, which a type selector
    then takes as categorical (a one-hot column per number). (name, values that are not
    numbers, values looked at, the first of them) for each."""
    from pipeline.core.dtypes import dtype_kind
    from pipeline.features.ops.op_support import values_not_numbers

    found = []
    for name in names:
        if dtype_kind(frame[name].dtype) != "text":
            continue
        head = frame[name].head(NUMBERS_SAMPLE)
        bad, present, first = values_not_numbers(head, backend)
        if 0 < bad <= (1 - NUMBERS_SHARE) * present:
            found.append((name, bad, present, first))
        elif present and not bad:
            long = _integer_past_int64(head, backend)
            if long is not None:
                found.append((name, 0, present, long))
    return found


def _integer_past_int64(series: Any, backend: Backend) -> str | None:
    """The first value of a column of numbers that is an integer past int64: a CSV reader keeps
    the whole column as text for it (the value, as written), or None."""
    import pandas as pd

    for value in pd.Series(backend.to_host(series)).dropna():
        text = str(value).strip()
        if text.lstrip("+-").isdigit() and abs(int(text)) >= 2**63:
            return text
    return None


def _named(op: FeatureOp) -> set[str]:
    """The columns an op's parameters name by hand (its list, and e.g. date_diff's ``until``)."""
    return {column for _, column in op.named_columns()}
