"""``join``: two tables side by side on key columns (inner, left, right or outer).

A frame's ``merge`` alone is not enough here, for four reasons:

- pandas matches a missing key to a missing key (NaN == NaN); cuDF too (nulls compare equal).
  Rows with a missing key never match here: each gets a guard key of its own;
- cuDF returns merged rows in no set order (and pandas' order depends on ``how``). Row positions
  travel through the merge and the result is sorted by them: left rows in left order (each
  with its matches in right order), then right-only rows in right order, on every backend;
- a key duplicated where the user expects one row per key silently multiplies rows (cuDF's
  merge has no ``validate``): each side ``validate`` calls unique is checked first, and a
  many-to-many join is refused;
- keys of different kinds (text against numbers) match nothing, silently; keys of one kind
  but different widths (int32 against int64) are cast to a common dtype so cuDF merges them.

On partitioned (Dask) data the right table is broadcast to every partition of the left one (it
is the lookup side: demographics for customers), so each partition joins in memory by the same
code, and right-only rows (right / outer joins) come last in a partition of their own: the
computed result equals the in-memory one, row for row.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd
from pydantic import Field, field_validator

from pipeline.backends import Backend, backend_for, compute_lazy, is_partitioned
from pipeline.core.errors import DataError
from pipeline.events.checks import key_kind
from pipeline.events.frames import (
    is_key_partitioned, lookup_indexed, matching_key_dtypes, remember_key_partitioned, shuffle_on_keys,
)
from pipeline.backends.headers import ColumnSet, HeaderReader
from pipeline.stages.spec import ColumnRef, Preview, StageContext, StageSpec, Table, register_stage

__all__ = ["JoinSpec", "join_tables"]

HOWS = ("inner", "left", "right", "outer")
VALIDATES = ("one_to_one", "one_to_many", "many_to_one")
# The sides each ``validate`` says hold every key once.
UNIQUE_SIDES = {"one_to_one": ("left", "right"), "one_to_many": ("left",), "many_to_one": ("right",)}
MANY_TO_MANY = ("a many-to-many join is refused: it repeats each left row once per matching right row "
                "(and the other way round), which is rarely meant; aggregate one table first so its key "
                "is unique there, and set validate: one_to_many (left unique) or many_to_one (right unique)")

# Helper columns carried through the merge (renamed if a table already has such a column).
LEFT_ROW, RIGHT_ROW, GUARD = "__join_left_row__", "__join_right_row__", "__join_null_guard__"

Kinds = dict[str, str]


class _JoinFields(StageSpec):
    kind: Literal["join"]
    on: str | list[str] = Field(description="Key column(s) both tables have.")
    how: Literal["inner", "left", "right", "outer"] = Field("left", description=(
        "Which rows to keep: left (every left row), inner (rows with a match), right (every right "
        "row), outer (every row of both). Missing keys never match."))
    suffixes: tuple[str, str] = Field(("", "_right"), description=(
        "Added to the names of non-key columns that both tables have: [left, right]."))
    input_roles = ("left", "right")
    min_inputs = 2
    max_inputs = 2

    @field_validator("on")
    @classmethod
    def _keys(cls, on: str | list[str]) -> str | list[str]:
        key_list(on)
        return on

    def columns_read(self, inputs: Mapping[str, Preview], headers: HeaderReader) -> list[ColumnRef]:
        """Each key in both tables (input 0: left, 1: right)."""
        keys = [((), self.on)] if isinstance(self.on, str) else [((i,), k) for i, k in enumerate(self.on)]
        return [ColumnRef(("on", *where), key, f"join key (the {side} table's)", input=position)
                for position, side in enumerate(("left", "right")) for where, key in keys]

    def preview(self, stage: str, inputs: Mapping[str, Preview], headers: HeaderReader) -> Preview:
        """The keys, the left table's other columns, then the right's; suffixed where both have one."""
        left, right = (inputs[name].columns for name in self.inputs)
        if left is None or right is None:
            return Preview()
        keys = key_list(self.on)
        clashing = {c for c in left.names if c in right.names and c not in keys}
        names = [f"{c}{self.suffixes[0]}" if c in clashing else c for c in left.names]
        names += [f"{c}{self.suffixes[1]}" if c in clashing else c for c in right.names if c not in keys]
        joined = ColumnSet(tuple(dict.fromkeys(names)), source=f"the output of join '{stage}'")
        unsure = left.open or right.open or left.patterns or right.patterns
        return Preview(columns=joined.opened() if unsure else joined)

    @field_validator("suffixes")
    @classmethod
    def _distinct_suffixes(cls, suffixes: tuple[str, str]) -> tuple[str, str]:
        check_suffixes(suffixes)
        return suffixes


# The key ``validate`` (pandas' name for it) shadows pydantic's deprecated ``BaseModel.validate``
# classmethod, and pydantic warns about that at class creation; the field is what a user reads.
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message='Field name "validate"', category=UserWarning)

    class JoinSpec(_JoinFields):
        validate: Literal["one_to_one", "one_to_many", "many_to_one"] = Field("many_to_one", description=(
            "Which side has each key once (checked before joining): many_to_one (the right: a lookup "
            "table), one_to_many (the left), one_to_one (both). Many-to-many is refused."))

        @field_validator("validate", mode="before")
        @classmethod
        def _no_many_to_many(cls, value: Any) -> Any:
            if isinstance(value, str) and value.replace("-", "_").lower() in ("many_to_many", "m:m"):
                raise ValueError(MANY_TO_MANY)
            return value


def key_list(on: str | Sequence[str]) -> list[str]:
    """``on`` as a list of key names; refuses an empty or repeated one."""
    keys = [on] if isinstance(on, str) else list(on)
    if not keys or any(not isinstance(k, str) or not k for k in keys):
        raise ValueError("on: name one key column or a list of them (each a non-empty name)")
    if len(set(keys)) < len(keys):
        raise ValueError(f"on: a key column is named twice ({keys})")
    return keys


def check_suffixes(suffixes: Sequence[str]) -> None:
    if len(suffixes) != 2 or suffixes[0] == suffixes[1]:
        raise ValueError(f"suffixes: two different texts [left, right] are needed to tell clashing column "
                         f"names apart (got {list(suffixes)})")


def join_tables(left: Any, right: Any, *, on: str | Sequence[str], how: str = "left",
                suffixes: Sequence[str] = ("", "_right"), validate: str = "many_to_one",
                backend: Backend | str | None = None) -> Any:
    """Join two frames you already have (pandas, cuDF, or a partitioned Dask left table).

    Row order: left rows in left order, each with its matches in right order, then (``right``,
    ``outer``) right-only rows in right order. Missing keys match nothing. ``validate`` names
    the side(s) whose keys must be unique (checked; many-to-many is refused). Non-key columns
    both tables have get ``suffixes``. The result has a fresh 0..n-1 index."""
    return _join(left, right, on=on, how=how, suffixes=suffixes, validate=validate, backend=backend)[0]


def _join(left: Any, right: Any, *, on: str | Sequence[str], how: str, suffixes: Sequence[str], validate: str,
          backend: Backend | str | None) -> tuple[Any, dict[str, int]]:
    """The joined frame and, in memory, its counts (rows per side, unmatched rows)."""
    keys = key_list(on)
    _check_options(how, validate, suffixes)
    for side, frame in (("left", left), ("right", right)):
        missing = [k for k in keys if k not in frame.columns]
        if missing:
            raise DataError(f"join: key column(s) {missing} not in the {side} table (its columns: "
                            f"{', '.join(map(str, frame.columns))})")
    _check_key_kinds(left, right, keys)
    backend = backend_for(left if not is_partitioned(right) or is_partitioned(left) else right, backend)
    if is_partitioned(left):
        return _join_partitioned(left, right, keys, how, tuple(suffixes), validate, backend), {}
    if is_partitioned(right):             # the broadcast side: one in-memory table
        (right,) = compute_lazy(right)
    return _join_in_memory(left, right, keys, how, tuple(suffixes), validate, backend)


def _check_options(how: str, validate: str, suffixes: Sequence[str]) -> None:
    if how not in HOWS:
        raise ValueError(f"how: {how!r} is not a join; use one of {', '.join(HOWS)}")
    if str(validate).replace("-", "_").lower() in ("many_to_many", "m:m"):
        raise ValueError(MANY_TO_MANY)
    if validate not in VALIDATES:
        raise ValueError(f"validate: {validate!r}; use one of {', '.join(VALIDATES)}")
    check_suffixes(suffixes)


# ------------------------------------------------------------------------------ key dtypes
def _check_key_kinds(left: Any, right: Any, keys: list[str]) -> None:
    for key in keys:
        a, b = left[key].dtype, right[key].dtype
        if key_kind(a) != key_kind(b):
            raise DataError(f"join: key '{key}' holds {key_kind(a)} on the left ({a}) and {key_kind(b)} on the "
                            f"right ({b}); such keys never match. Read both as one kind (load: dtypes: "
                            f"{{{key}: ...}}, or dates: for a date column)")


# ------------------------------------------------------------------------------ in memory
def _join_in_memory(left: Any, right: Any, keys: list[str], how: str, suffixes: tuple[str, str], validate: str,
                    backend: Backend, *, check: tuple[str, ...] | None = None) -> tuple[Any, dict[str, int]]:
    """The join on in-memory frames: checked, merged with positions and a null guard, sorted."""
    left, right = left.reset_index(drop=True), right.reset_index(drop=True)
    left, right = matching_key_dtypes(left, right, keys)
    left_ok, right_ok = _complete_keys(left, keys), _complete_keys(right, keys)
    for side in UNIQUE_SIDES[validate] if check is None else check:
        frame, ok = (left, left_ok) if side == "left" else (right, right_ok)
        _check_unique(frame[ok], keys, side, validate, backend)
    if how in ("left", "inner") and "right" in UNIQUE_SIDES[validate]:
        return _lookup_join(left, _lookup_table(right, left, keys, suffixes, backend), how, backend)
    left, right = _suffixed(left, right, keys, suffixes)
    engine = backend.table_engine
    rows = engine.join_rows(left[keys], right[keys], keys, how) if engine is not None else None
    if rows is not None:
        return _gathered(left, right, keys, *rows, backend), _row_counts(*rows, len(left), len(right))
    lrow, rrow, guard = _helper_names(left, right)
    n_left, n_right = len(left), len(right)
    left = left.assign(**{lrow: backend.asarray(np.arange(n_left, dtype=np.int64))})
    right = right.assign(**{rrow: backend.asarray(np.arange(n_right, dtype=np.int64))})
    left = left.assign(**{guard: _guard(left[lrow], left_ok, -1)})
    right = right.assign(**{guard: _guard(right[rrow], right_ok, 1)})
    merged = left.merge(right, on=[*keys, guard], how=how, sort=False)
    if not _in_order(merged, lrow, how, validate):
        merged = merged.sort_values([lrow, rrow], na_position="last")
    counts = _counts(merged, lrow, rrow, n_left, n_right)
    return merged.drop(columns=[lrow, rrow, guard]).reset_index(drop=True), counts


def _gathered(left: Any, right: Any, keys: list[str], left_rows: np.ndarray, right_rows: np.ndarray,
              backend: Backend) -> Any:
    """The joined table from the rows the engine matched (-1: none): left columns, then the
    right's other columns, each gathered with missing values where a side has no row (dtypes
    widen as a merge widens them: int with a gap -> float64); a key comes from the right row
    where there is no left one (right / outer joins), as a merge coalesces it."""
    taken_left = backend.reindex(left, pd.Index(left_rows)).reset_index(drop=True)
    taken_right = backend.reindex(right, pd.Index(right_rows)).reset_index(drop=True)
    no_left = left_rows < 0
    if no_left.any():
        from_right = np.where(right_rows < 0, 0, right_rows)
        for key in keys:
            value = right[key].take(from_right).reset_index(drop=True)
            if len(left):
                kept = left[key].take(np.where(no_left, 0, left_rows)).reset_index(drop=True)
                value = kept.where(~no_left, value)
            taken_left[key] = value
    others = [c for c in right.columns if c not in keys]
    return pd.concat([taken_left, taken_right[others]], axis=1)          # the engine runs on the CPU: pandas


def _row_counts(left_rows: np.ndarray, right_rows: np.ndarray, n_left: int, n_right: int) -> dict[str, int]:
    both = (left_rows >= 0) & (right_rows >= 0)
    return {"rows": int(len(left_rows)), "left_rows": n_left, "right_rows": n_right,
            "unmatched_left_rows": n_left - int(np.unique(left_rows[both]).size),
            "unmatched_right_rows": n_right - int(np.unique(right_rows[both]).size)}


@dataclass(frozen=True)
class LookupTable:
    """A right table holding each key once, ready to be probed by left rows: its rows with
    complete keys, indexed on the keys (dtypes already matched to the left's), with its row
    positions in ``row`` (to count the right rows matched). Built once: a Dask worker probes the
    same object for every partition, so the index's hash table is built once too."""

    indexed: Any
    rows: int
    row: str
    left_renames: dict[str, str]
    left_dtypes: dict[str, Any]


def _lookup_table(right: Any, left_meta: Any, keys: list[str], suffixes: tuple[str, str],
                  backend: Backend) -> LookupTable:
    """``right`` as a :class:`LookupTable` for left tables shaped like ``left_meta``."""
    right = right.reset_index(drop=True)
    left_keys, right = matching_key_dtypes(left_meta[keys].iloc[:0], right, keys)
    renamed_left, right = _suffixed(left_meta.iloc[:0], right, keys, suffixes)
    left_renames = {old: new for old, new in zip(left_meta.columns, renamed_left.columns) if old != new}
    left_dtypes = {k: left_keys[k].dtype for k in keys if left_keys[k].dtype != left_meta[k].dtype}
    _, row, _ = _helper_names(renamed_left, right)
    n_right = len(right)
    right = right[_complete_keys(right, keys)]
    right = right.assign(**{row: backend.asarray(np.arange(len(right), dtype=np.int64))})
    return LookupTable(right.set_index(keys), n_right, row, left_renames, left_dtypes)


def _lookup_join(left: Any, table: LookupTable, how: str, backend: Backend) -> tuple[Any, dict[str, int]]:
    """A left or inner join onto a right table with each key once (checked), as a lookup: the
    left rows stay as they are, in their order, and only the right's columns are written (a
    merge would copy every left column too, then sort them back into order). A missing left
    key finds nothing: the table holds only complete keys."""
    left = left.reset_index(drop=True)
    if table.left_dtypes:
        left = left.astype(table.left_dtypes)
    if table.left_renames:
        left = left.rename(columns=table.left_renames)
    keys = [str(name) for name in table.indexed.index.names]
    found = lookup_indexed(left[keys], table.indexed, backend)
    positions = found[table.row]
    matched = positions.notna()
    joined = backend.frame.concat([left, found.drop(columns=[table.row])], axis=1)
    if how == "inner":
        joined = joined[matched].reset_index(drop=True)
    matched_left = int(matched.sum())
    counts = {"rows": int(len(joined)), "left_rows": int(len(left)), "right_rows": table.rows,
              "unmatched_left_rows": int(len(left)) - matched_left,
              "unmatched_right_rows": table.rows - int(positions[matched].nunique())}
    return joined, counts


def _complete_keys(frame: Any, keys: list[str]) -> Any:
    """A row mask: True where no key is missing."""
    mask = ~frame[keys[0]].isna()            # isna: pandas, cuDF and Dask all have it
    for key in keys[1:]:
        mask = mask & ~frame[key].isna()
    return mask


def _guard(rows: Any, complete: Any, sign: int) -> Any:
    """An extra join key: 0 on rows whose keys are complete, a value of the row's own elsewhere
    (negative on the left, positive on the right), so a missing key matches nothing."""
    return ((rows + 1) * sign).where(~complete, 0)


def _in_order(merged: Any, lrow: str, how: str, validate: str) -> bool:
    """Whether the merge already gave the row order (pandas keeps left order on a left or inner
    join; with a unique right key each left row appears once), saving the sort."""
    if how not in ("left", "inner") or "right" not in UNIQUE_SIDES[validate]:
        return False
    return bool(merged[lrow].is_monotonic_increasing)


def _counts(merged: Any, lrow: str, rrow: str, n_left: int, n_right: int) -> dict[str, int]:
    both = ~merged[lrow].isna() & ~merged[rrow].isna()
    matched_left = int(merged[lrow][both].nunique())
    matched_right = int(merged[rrow][both].nunique())
    return {"rows": int(len(merged)), "left_rows": n_left, "right_rows": n_right,
            "unmatched_left_rows": n_left - matched_left, "unmatched_right_rows": n_right - matched_right}


def _check_unique(frame: Any, keys: list[str], side: str, validate: str, backend: Backend) -> None:
    """Refuse a key that repeats on a side ``validate`` says is unique, naming an example."""
    # The counts as a frame's column: cuDF cannot mask a Series on a MultiIndex (two keys) by a
    # boolean Series (it reads the mask as row labels), and every library masks a frame's rows.
    count = "__rows_of_key__"
    sizes = frame.groupby(keys, sort=True).size().rename(count).reset_index()
    repeated = sizes[sizes[count] > 1]
    if is_partitioned(repeated):
        extra, example = compute_lazy((repeated[count] - 1).sum(), repeated.head(1, npartitions=-1, compute=False))
    else:
        extra, example = (repeated[count] - 1).sum(), repeated.head(1)
    extra = int(backend.to_host(extra))
    if not extra:
        return
    example = backend.to_host(example)
    values = [example[k].iloc[0] for k in keys]
    shown = ", ".join(f"{k}={v.item() if isinstance(v, np.generic) else v!r}" for k, v in zip(keys, values))
    key_text = f"key '{keys[0]}'" if len(keys) == 1 else f"keys {keys}"
    raise DataError(
        f"join: {key_text} is not unique in the {side} table, which validate: {validate} says has each key "
        f"once: {extra} row(s) repeat a key, e.g. {shown} ({int(example[count].iloc[0])} rows). Aggregate the {side} "
        f"table first so each key has one row, or set validate: to the side that is unique (one_to_many: the "
        f"left, many_to_one: the right); a many-to-many join is refused")


def _suffixed(left: Any, right: Any, keys: list[str], suffixes: tuple[str, str]) -> tuple[Any, Any]:
    """Non-key columns both tables have, renamed with the suffixes; refuses names that clash
    even so (``a_right`` already in the left table)."""
    clashing = [c for c in left.columns if c in set(right.columns) and c not in keys]
    if clashing:
        left = left.rename(columns={c: f"{c}{suffixes[0]}" for c in clashing})
        right = right.rename(columns={c: f"{c}{suffixes[1]}" for c in clashing})
    names = [*map(str, left.columns), *(str(c) for c in right.columns if c not in keys)]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise DataError(f"join: the result would have column(s) {twice} twice: columns {clashing} are in both "
                        f"tables and suffixes {list(suffixes)} make names one table has already; choose other "
                        "suffixes")
    return left, right


def _helper_names(left: Any, right: Any) -> tuple[str, str, str]:
    taken = {str(c) for c in (*left.columns, *right.columns)}

    def free(name: str) -> str:
        while name in taken:
            name += "_"
        return name

    return free(LEFT_ROW), free(RIGHT_ROW), free(GUARD)


# ------------------------------------------------------------------------------ partitioned
def _join_partitioned(left: Any, right: Any, keys: list[str], how: str, suffixes: tuple[str, str],
                      validate: str, backend: Backend) -> Any:
    """A partitioned left table joined with a right one broadcast to each of its partitions.

    The right table is one partition (an in-memory one is wrapped as one; a partitioned one is
    gathered into one): the lookup side of a join must fit a worker. A left side ``validate``
    calls unique costs one pass over the left keys, here, before the join."""
    import dask
    import dask.dataframe as dd

    if "left" in UNIQUE_SIDES[validate]:
        meta_keys = left[keys]
        _check_unique(meta_keys[_complete_keys(meta_keys, keys)], keys, "left", validate, backend)
    check_right = ("right",) if "right" in UNIQUE_SIDES[validate] else ()
    if how in ("left", "inner") and is_key_partitioned(left, keys) and _same_key_dtypes(left, right, keys):
        return _join_lined_up(left, right, keys, how, suffixes, validate, check_right, backend)
    right_partitioned = is_partitioned(right)
    if right_partitioned:
        right_meta = right._meta
        broadcast = right.repartition(npartitions=1) if right.npartitions > 1 else right
    else:
        if check_right:                  # in memory: checked once, here, not in every partition
            _check_unique(right[_complete_keys(right, keys)], keys, "right", validate, backend)
            check_right = ()
        right_meta = right.iloc[:0]
        broadcast = dask.delayed(right, pure=False)      # not hashed: its key is a fresh name
    # Per partition: every left row (left / outer) or only matched ones (inner / right).
    part_how = "left" if how in ("left", "outer") else "inner"
    if how in ("left", "inner") and check_right:
        return _lookup_join_partitioned(left, broadcast, right_meta, keys, how, suffixes, validate, backend)
    meta = _join_in_memory(left._meta, right_meta, keys, part_how, suffixes, validate, backend, check=())[0]
    joined = left.map_partitions(_join_partition, broadcast, keys, part_how, suffixes, validate, check_right,
                                 meta=meta, align_dataframes=False)
    if how in ("left", "inner"):
        return joined
    left_keys = left[keys]
    left_keys = left_keys[_complete_keys(left_keys, keys)].drop_duplicates().repartition(npartitions=1)
    right_frame = broadcast if right_partitioned else dd.from_delayed([broadcast], meta=right_meta)
    only = right_frame.map_partitions(_right_only_rows, left_keys, left._meta, keys, suffixes, meta=meta,
                                      align_dataframes=False)
    return dd.concat([joined, only])


def _same_key_dtypes(left: Any, right: Any, keys: list[str]) -> bool:
    right_meta = right._meta if is_partitioned(right) else right
    return all(left._meta[k].dtype == right_meta[k].dtype for k in keys)


def _join_lined_up(left: Any, right: Any, keys: list[str], how: str, suffixes: tuple[str, str], validate: str,
                   check_right: tuple[str, ...], backend: Backend) -> Any:
    """A left table already hash-partitioned on the keys (an aggregate's or a label's output)
    joined with the right table shuffled the same way: partition i of one meets partition i of
    the other, and no worker holds the whole right table. Each key's rows are all in one
    partition, so the per-partition uniqueness check is the whole check (made as partitions
    are computed)."""
    import dask.dataframe as dd

    if not is_partitioned(right):
        right = dd.from_pandas(right, npartitions=1)
    pieces = shuffle_on_keys(right, keys, int(left.npartitions))
    meta = _join_in_memory(left._meta, right._meta, keys, how, suffixes, validate, backend, check=())[0]
    joined = left.map_partitions(_join_partition, pieces, keys, how, suffixes, validate, check_right, meta=meta)
    return remember_key_partitioned(joined, keys)


def _lookup_join_partitioned(left: Any, broadcast: Any, right_meta: Any, keys: list[str], how: str,
                             suffixes: tuple[str, str], validate: str, backend: Backend) -> Any:
    """A left / inner join onto a right table that must hold each key once: the right table is
    checked and made a :class:`LookupTable` once, in one task, and every partition of the left
    probes it (the alternative, a join per partition, re-checks and re-indexes the whole right
    table in every partition: memory a worker below the data's size does not have)."""
    import dask

    if is_partitioned(broadcast):
        _check_unique(broadcast[_complete_keys(broadcast, keys)], keys, "right", validate, backend)
        broadcast = broadcast.to_delayed()[0]
    table = dask.delayed(_lookup_table)(broadcast, left._meta, keys, suffixes, backend)
    meta = _lookup_join(left._meta, _lookup_table(right_meta, left._meta, keys, suffixes, backend), how, backend)[0]
    return left.map_partitions(_lookup_join_partition, table, how, meta=meta, align_dataframes=False)


def _lookup_join_partition(part: Any, table: LookupTable, how: str) -> Any:
    return _lookup_join(part, table, how, backend_for(part))[0]


def _join_partition(part: Any, right: Any, keys: list[str], how: str, suffixes: tuple[str, str], validate: str,
                    check: tuple[str, ...]) -> Any:
    return _join_in_memory(part, right, keys, how, suffixes, validate, backend_for(part), check=check)[0]


def _right_only_rows(right: Any, left_keys: Any, left_meta: Any, keys: list[str], suffixes: tuple[str, str]) -> Any:
    """The right rows no left row matches (a missing key included), in right order, in the
    joined table's columns (left ones missing)."""
    backend = backend_for(right)
    hit = "__join_hit__"
    marked = left_keys.assign(**{hit: backend.asarray(np.ones(len(left_keys), dtype=np.int8))})
    looked_up = _join_in_memory(right, marked, keys, "left", ("", "_"), "many_to_one", backend, check=())[0]
    unmatched = backend.take(right, np.flatnonzero(np.asarray(backend.to_host(looked_up[hit].isna()), dtype=bool)))
    return _join_in_memory(left_meta, unmatched, keys, "right", suffixes, "many_to_one", backend, check=())[0]


# ------------------------------------------------------------------------------ stage
@register_stage("join", JoinSpec, produces=Table, accepts=(Table,))
def run_join(spec: JoinSpec, ctx: StageContext, inputs) -> Any:
    left, right = (inputs[name] for name in spec.inputs)     # a table joined with itself: one input twice
    joined, counts = _join(left, right, on=spec.on, how=spec.how, suffixes=spec.suffixes, validate=spec.validate,
                           backend=ctx.backend)
    if is_partitioned(joined):
        ctx.facts["partitions"] = int(joined.npartitions)
    else:
        ctx.facts.update(counts)
        if counts["left_rows"] and counts["unmatched_left_rows"] == counts["left_rows"]:
            # No key matched at all: most likely keys written differently on the two sides
            # (zero-padded, another case); every joined column is then missing.
            ctx.logger.warning("%s: none of the %d left rows has a match on %s among the %d right rows; check that "
                               "the keys are written alike on both sides", ctx.stage, counts["left_rows"], spec.on,
                               counts["right_rows"])
        elif counts["unmatched_left_rows"]:
            ctx.logger.info("%s: %d of %d left rows have no match on %s", ctx.stage, counts["unmatched_left_rows"],
                            counts["left_rows"], spec.on)
    return joined
