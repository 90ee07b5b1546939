"""The feature ops for the columns' roles, the models for the task, and the pipeline's name."""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from pipeline.config.schema import NAME_MAX_LENGTH
from pipeline.core.errors import DataError
from pipeline.features import OPS
from pipeline.features.column_roles import (
    DATE_FORMATS,
    LOW_CARDINALITY,
    Column,
)
from pipeline.models.registry import get_model_spec, init_choices, models_for
from pipeline.scaffold.rules import RARE_CODE
from pipeline.scaffold.sampling import format_of


# ---------------------------------------------------------------- the columns
def pick_identifier(columns: list[Column]) -> str | None:
    ids = [c for c in columns if c.role == "identifier"]
    if not ids:
        return None
    ids.sort(key=lambda c: "named like an id" not in c.reason)   # named ids first, then file order
    ids[0].action = "features.id (written beside predictions, not a feature)"
    for other in ids[1:]:
        other.action = "dropped"
    return ids[0].name


# ---------------------------------------------------------------- ops and models
@dataclass
class Op:
    """One feature op as the YAML writes it, with the comment that says why."""

    name: str
    params: dict[str, Any]
    why: str


def feature_ops(columns: list[Column]) -> list[Op]:
    """Ops per role, in an order each op's input is ready for: drop, dates to numbers, fill the
    gaps, transform the numbers, encode the categories."""
    by_role: dict[str, list[Column]] = {}
    for c in columns:
        by_role.setdefault(c.role, []).append(c)
    ops: list[Op] = []
    dropped = [c.name for c in columns if c.action == "dropped"]
    if dropped:
        ops.append(Op("drop", {"columns": dropped},
                      "the constant, id-like, leaking, free-text and nested columns above"))
    dates = by_role.get("date", [])
    numbers = [c.name for c in by_role.get("numeric", [])]
    for c in dates:
        parts = c.date_parts
        ops.append(Op("date_parts", {"columns": [c.name], "parts": parts},
                      f"{c.name} as numbers: {', '.join(parts)} (a missing date gives missing parts)"))
        numbers += [f"{c.name}_{p}" for p in parts]
    with_gaps = [c.name for c in by_role.get("numeric", []) if c.missing]
    with_gaps += [f"{c.name}_{c.date_parts[0]}" for c in dates if c.missing]   # one indicator per date
    # A table that has a "<column>_missing" already (an earlier pipeline's export) gets no second one.
    taken = {c.name for c in columns}
    with_gaps = [name for name in with_gaps if f"{name}_missing" not in taken]
    if with_gaps:
        ops.append(Op("fill_missing", {"columns": with_gaps, "strategy": "median", "indicator": True},
                      "gaps in the sample: the training median, and a <column>_missing 0/1 column"))
    guarded = [n for n in numbers if n not in with_gaps]
    if guarded:
        ops.append(Op("fill_missing", {"columns": guarded, "strategy": "median"},
                      "no gaps in the sample; models refuse missing values, so rows the sample did not read "
                      "and new rows to score are covered too"))
    text_gaps = [c.name for r in ("categorical", "high_cardinality") for c in by_role.get(r, [])
                 if c.missing and "true/false" not in c.reason]
    if text_gaps:
        ops.append(Op("fill_missing", {"columns": text_gaps, "strategy": "constant", "value": "missing"},
                      "a missing category becomes the value 'missing', a category of its own"))
    skewed = [c.name for c in by_role.get("numeric", []) if c.skewed]
    if skewed:
        ops.append(Op("log1p", {"columns": skewed}, "non-negative and skewed in the sample: log(1 + x) evens them"))
    if numbers:
        ops.append(Op("standardize", {"columns": numbers},
                      "zero mean, unit variance (the linear model needs it; trees do not mind)"))
    low = [c.name for c in by_role.get("categorical", [])]
    if low:
        ops.append(Op("one_hot", {"columns": low, "drop_binary": True},
                      f"at most {LOW_CARDINALITY} values: one 0/1 column each (one column for two values); "
                      "a value not seen in training gets zeros"))
    high = [c.name for c in by_role.get("high_cardinality", [])]
    if high:
        ops.append(Op("categorify", {"columns": high, "min_frequency": RARE_CODE},
                      f"many values: integer codes by frequency, values seen under {RARE_CODE} times share code 0"))
    unknown = {op.name for op in ops} - set(OPS)
    assert not unknown, f"ops not in the registry: {unknown}"
    for c in columns:
        if c.action == "dropped" or c.action.startswith("features.id"):
            continue
        own = {c.name} | {f"{c.name}_{p}" for p in c.date_parts}
        steps = list(dict.fromkeys(o.name for o in ops if own & set(o.params["columns"])))
        c.action = ", ".join((["load dates:"] if c.date_format is not False else []) + steps)
    return ops


def choose_models(task: str) -> tuple[list[tuple[str, dict[str, Any], str]], list[str]]:
    """The task's models that the registry's entries choose for ``init`` (``ModelSpec.
    init_choices``: a linear baseline, a forest, boosted trees, and any plugin's), by rank, that
    serve the task and whose CPU estimator imports here."""
    chosen, notes = [], []
    offered = set(models_for(task))
    for name, choice in init_choices(task):
        params, why = dict(choice.params), choice.why
        if name not in offered:
            continue
        path = get_model_spec(name).class_path("cpu", task=task)
        module = path.split(":")[0] if path else None
        if module is None or importlib.util.find_spec(module.split(".")[0]) is None:
            notes.append(f"model {name} is left out: {module or 'its estimator'} is not installed here")
            continue
        chosen.append((name, params, why))
    if not chosen:
        raise DataError(f"no model for a {task} task imports here (registry: {', '.join(sorted(offered))})")
    return chosen, notes


def pipeline_name(data: Path) -> str:
    """A pipeline name (a plain folder name) from the file's name."""
    stem = data.name.split(".")[0] if data.name else "pipeline"
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", stem).lstrip(".-") or "pipeline"
    return name[:NAME_MAX_LENGTH]


def load_dates(columns: list[Column]) -> dict[str, str | None]:
    """The load's ``dates:``: date columns the file holds as text (or with a time zone)."""
    return {c.name: c.date_format for c in columns  # type: ignore[misc]
            if c.role == "date" and c.date_format is not False}


def other_date_readings(text: pd.Series, chosen: str) -> list[str]:
    """The layouts of ``DATE_FORMATS`` other than ``chosen`` that read every value of ``text`` too,
    and give another date for some (``03/04/2024``: March 4th, or 3 April): the first listed
    layout that reads them all is the one chosen, month first before day first."""
    values = text.dropna().astype(str)
    read = pd.to_datetime(values, format=chosen, errors="coerce")
    others = []
    for fmt in DATE_FORMATS:
        if fmt == chosen:
            continue
        other = pd.to_datetime(values, format=fmt, errors="coerce")
        if other.notna().all() and not other.equals(read):
            others.append(fmt)
    return others


def first_part(fmt: str) -> str:
    """``month first`` or ``day first``: which of the two a layout writes first."""
    return "month first" if fmt.find("%m") < fmt.find("%d") else "day first"


def format_by_name(path: str) -> str | None:
    try:
        return format_of(Path(path))
    except DataError:
        return None
