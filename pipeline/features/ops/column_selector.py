"""Column selectors: ``columns: {type: numeric}`` instead of a list of names.

A selector says which columns an op takes by what they are, so one config serves a table of
any width and a generic op list (``pipeline.features.auto_ops``) serves any table. It is
written so that it reads aloud: ``columns: {type: [categorical, bool], except: [customerID]}``
is "columns of type categorical or bool, except customerID". Its keys, combined as an
intersection (a column must pass every key given):

- ``type``: ``numeric``, ``categorical``, ``date`` or ``bool``, or a list of them (the rule is
  ``pipeline.features.column_types``: the dtype decides);
- ``matching``: a glob on the name (``amount_*``, case-sensitive, ``fnmatch`` syntax), or a
  list of globs (any one matches);
- ``except``: names left out;
- ``remaining: true``: the columns that no other op of the list names explicitly and no
  earlier selector took;
- ``min_levels`` / ``max_levels``: the columns with at least / at most that many distinct
  values in the training split (missing values not counted): ``{type: categorical,
  min_levels: 100}`` is the high-cardinality columns.

A selector is resolved once, on the training split's frame as it reaches the op, by the
workflow's fit (``pipeline.features.selection``): the op becomes a copy holding the names, and
workflow.json records those names, so scoring never types a column again.
"""

from __future__ import annotations

from collections.abc import Iterable
from fnmatch import fnmatchcase
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from pipeline.backends import Backend
from pipeline.features.column_types import COLUMN_TYPES, ColumnType, column_type

__all__ = ["ColumnSelector", "describe_selector", "select_columns"]


class ColumnSelector(BaseModel):
    """Which columns an op takes, by type, name pattern and position in the op list."""

    model_config = ConfigDict(extra="forbid", frozen=True, serialize_by_alias=True)

    type: ColumnType | list[ColumnType] | None = Field(
        None, description="Column type(s): numeric, categorical, date or bool (by dtype).")
    matching: str | list[str] | None = Field(
        None, description="Glob(s) on the column name (fnmatch, case-sensitive): amount_*.")
    except_: list[str] = Field(default_factory=list, alias="except", description="Column names left out.")
    remaining: Literal[True] | None = Field(
        None, description="Only the columns no other op names explicitly and no earlier selector took.")
    min_levels: int | None = Field(
        None, ge=1, description="Only columns with at least this many distinct values in the training split.")
    max_levels: int | None = Field(
        None, ge=1, description="Only columns with at most this many distinct values in the training split.")
    optional: Literal[True] | None = Field(
        None, description="The selector may match no column (an op list written for any table): the op is then "
                          "skipped with an info line, not a warning.")

    @field_validator("type", mode="before")
    @classmethod
    def _known_types(cls, value: Any) -> Any:
        values = [value] if isinstance(value, str) else value
        if isinstance(values, list):
            if not values:
                raise ValueError(f"lists no type; give one or more of: {', '.join(COLUMN_TYPES)}")
            unknown = [v for v in values if isinstance(v, str) and v not in COLUMN_TYPES]
            if unknown:
                raise ValueError(f"unknown column type {unknown[0]!r} (one of: {', '.join(COLUMN_TYPES)})")
        return values

    @field_validator("matching", mode="before")
    @classmethod
    def _globs(cls, value: Any) -> Any:
        values = [value] if isinstance(value, str) else value
        if isinstance(values, list):
            if not values:
                raise ValueError("lists no pattern; give a glob such as 'amount_*'")
            for pattern in values:
                if isinstance(pattern, str):
                    check_glob(pattern)
        return values

    @field_validator("remaining", mode="before")
    @classmethod
    def _only_true(cls, value: Any) -> Any:
        if value is False:
            raise ValueError("remaining takes only true; leave the key out to select among every column")
        return value

    @model_validator(mode="after")
    def _says_something(self) -> ColumnSelector:
        if (self.type is None and self.matching is None and not self.except_ and self.remaining is None
                and self.min_levels is None and self.max_levels is None):
            raise ValueError("a column selector needs at least one of: type, matching, except, remaining, "
                             "min_levels, max_levels")
        if self.min_levels is not None and self.max_levels is not None and self.min_levels > self.max_levels:
            raise ValueError(f"min_levels ({self.min_levels}) is above max_levels ({self.max_levels}): no column "
                             "can match")
        return self

    @property
    def types(self) -> list[str]:
        return [] if self.type is None else ([self.type] if isinstance(self.type, str) else list(self.type))

    @property
    def patterns(self) -> list[str]:
        return [] if self.matching is None else ([self.matching] if isinstance(self.matching, str)
                                                 else list(self.matching))


def check_glob(pattern: str) -> None:
    """A glob fnmatch reads as the user meant: not empty, and every ``[`` closed."""
    if not pattern:
        raise ValueError("an empty pattern matches no column name")
    depth = 0
    for char in pattern:
        if char == "[":
            depth += 1
        elif char == "]" and depth:
            depth -= 1
    if depth:
        raise ValueError(f"pattern {pattern!r} opens a '[' character class that it never closes")


def select_columns(selector: ColumnSelector, frame: Any, backend: Backend | None = None, *,
                   explicit: Iterable[str] = (), taken: Iterable[str] = ()) -> list[str]:
    """The columns of ``frame`` that ``selector`` takes, in the frame's order. ``explicit``:
    the names other ops of the list give by hand; ``taken``: the names earlier selectors took
    (both matter for ``remaining`` only)."""
    excluded = set(selector.except_)
    if selector.remaining:
        excluded |= set(explicit) | set(taken)
    types, patterns = selector.types, selector.patterns
    out = []
    for name in (str(c) for c in frame.columns):
        if name in excluded:
            continue
        if patterns and not any(fnmatchcase(name, p) for p in patterns):
            continue
        if types and column_type(frame[name], backend) not in types:
            continue
        if (selector.min_levels is not None or selector.max_levels is not None) and not _levels_within(
                frame[name], selector.min_levels, selector.max_levels):
            continue
        out.append(name)
    return out


def _levels_within(column: Any, least: int | None, most: int | None) -> bool:
    """Whether ``column``'s distinct values (missing ones not counted) are within the bounds; a
    lazy (Dask) column's count is computed, one pass over it."""
    count = column.nunique()
    count = int(count.compute() if hasattr(count, "compute") else count)
    return (least is None or count >= least) and (most is None or count <= most)


def describe_selector(selector: ColumnSelector) -> str:
    """The selector as words, for ``pipeline validate`` and the run log: "columns of type
    numeric matching amount_* except id"."""
    parts = ["remaining columns" if selector.remaining else "columns"]
    if selector.types:
        parts.append("of type " + " or ".join(selector.types))
    if selector.patterns:
        parts.append("matching " + " or ".join(selector.patterns))
    if selector.min_levels is not None:
        parts.append(f"with at least {selector.min_levels} levels")
    if selector.max_levels is not None:
        parts.append(f"with at most {selector.max_levels} levels")
    if selector.except_:
        parts.append("except " + ", ".join(selector.except_))
    return " ".join(parts)
