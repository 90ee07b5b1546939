"""The one rule of rare levels, shared by ``one_hot``, ``categorify`` and ``group_rare``.

A level is rare when the training split holds it fewer times than ``min_frequency``: a count
(a whole number, 1 or more) or, below 1, a share of the training split's rows (missing ones
included), so ``min_frequency: 0.01`` keeps the levels of at least 1% of the rows. Then
``max_categories`` keeps at most that many of the frequent levels, most frequent first (ties by
value, ``count_pairs``). A missing value is never a level, so it is never rare either.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Union

from pydantic import AfterValidator

from pipeline.features.ops.op_support import count_pairs, plain

# The level rare values become in ``group_rare``, and the suffix of ``one_hot``'s shared column.
RARE = "__rare__"


def _valid_min_frequency(value: int | float) -> int | float:
    if isinstance(value, bool) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"min_frequency must be a count of rows (1 or more) or a share of them (between 0 and 1), "
                         f"not {value!r}")
    if value >= 1:
        if value != int(value):
            raise ValueError(f"min_frequency {value} is a count of rows and must be a whole number "
                             "(or a share below 1)")
        return int(value)
    return float(value)


MinFrequency = Annotated[Union[int, float], AfterValidator(_valid_min_frequency)]


def rare_statistics(series: Any, col: str, min_frequency: int | float) -> dict[str, Any]:
    """What the rule needs of ``series``: its level counts under ``col`` and, for a share,
    its missing values under ``<col>.missing`` (the share is of every training row)."""
    wanted = {col: series.value_counts(dropna=True)}
    if isinstance(min_frequency, float):
        wanted[f"{col}.missing"] = series.isna().sum()
    return wanted


def frequent_levels(stats: dict[str, Any], col: str, min_frequency: int | float,
                    max_categories: int | None = None) -> tuple[list[Any], bool]:
    """The levels ``rare_statistics`` counted that are kept (most frequent first), and whether
    any level was left out as rare."""
    counts = count_pairs(stats[col])
    threshold = min_threshold(min_frequency, sum(n for _, n in counts) + int(plain(stats.get(f"{col}.missing", 0))))
    kept = [v for v, n in counts if n >= threshold][:max_categories]
    return kept, len(kept) < len(counts)


def min_threshold(min_frequency: int | float, rows: int) -> int:
    """The fewest rows a kept level has: the count itself, or the share of ``rows`` rounded up."""
    if isinstance(min_frequency, int):
        return min_frequency
    return max(1, math.ceil(min_frequency * rows - 1e-9))
