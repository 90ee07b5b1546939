"""The CPU table engine: the event windows, horizon targets and join matching as Polars lazy
queries (every core), on pandas frames in and out.

pandas stays the frame stages hand each other; Polars is used inside: the columns a query
reads go pandas -> Polars (zero-copy for NumPy numbers and dates), one lazy query runs, and
its (small) result comes back as pandas. The caller (``pipeline.events``, the ``join`` stage)
keeps the contract: dtypes of the outputs, missing keys, row order. Every method takes plain
parameters (names, integers, Timedeltas) so this layer knows nothing of the specs above it.

A method returns None where the data holds a column kind the engine does not take (a
category, an object column of anything but text): the caller then runs the pandas code, so
the answer never depends on which engine ran.

Semantics that must equal the pandas engine's (``tests/backends/test_table_engines.py`` holds them):
nulls never match in a join and are skipped by every aggregate except ``first`` / ``last``
(the value at the earliest / latest row, missing or not); ties in time go to the earlier input
row (a stable sort, or the ``order`` column on Dask); days are integer time differences divided
in float64, as pandas divides timedelta64 values.

**Repeatable to the bit** (``repeatable``, the default): Polars' streaming group-by adds its
threads' partial float sums in the order they finish, so two runs on the same events differed
in the last bits of up to 12% of the sums. Here a float column's ``sum`` and ``mean`` are exact
instead: each value becomes an integer (``_FixedSums``: of its last decimal place where every
value has at most 6, else a 128-bit integer at a fixed scale from the column's largest
magnitude), the integers are summed per group (exact, so in any order) and the sum is scaled
back in float64. The result is the same in every run
and within an ulp or two of the true sum (pandas' own sum is within its rounding). A column
where some value is not a whole number of that scale's unit (its magnitudes span more than
about 29 digits: one sentinel 1e30 beside prices) would lose those bits in every group, so it
is summed in row order on the in-memory engine instead, as ``std`` is. ``std`` of a
float column has no such split here: a query with one runs on Polars' in-memory engine, which
adds each group's rows in row order. ``repeatable=False`` runs the streaming engine's own float
sums (``PIPELINE_REDUCTIONS=fast``). Polars before 2.0 collects on its in-memory engine by
default, which repeats itself: there the sums are Polars' own in both modes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import math

import numpy as np
import pandas as pd

from pipeline.core.dtypes import is_number_or_bool

@dataclass(frozen=True)
class HorizonTarget:
    """What ``aggregate_horizons`` computes per entity and cut-off: ``aggregate`` of ``column``
    (None: the count of events) into the column ``output``."""

    aggregate: str
    column: str | None
    output: str


_TIME = "__engine_time"        # the time column as Int64 in its own unit
_INSIDE = "__engine_inside"    # stands for "1 where the row is in the window" in a window's columns
_LEFT, _RIGHT = "__engine_left_row", "__engine_right_row"
_NS_PER_UNIT = {"s": 1_000_000_000, "ms": 1_000_000, "us": 1_000, "ns": 1}

# One window feature: (output name, aggregate, value column or None, window length or None = all).
WindowAggregate = tuple[str, str, "str | None", "pd.Timedelta | None"]


# A float column's values as 128-bit integers in units of 2**(e - 96), ``e`` the exponent of its
# largest magnitude: each below 2**96, so up to 2**31 of them sum without overflow.
_FIXED_BITS = 96
_MOST_ROWS = 2**31
# A column whose values all have at most this many decimal places (prices, amounts) is summed as
# float64 integers of its last place instead: exact, in any order, while rows x the largest
# integer stay below 2**53 (checked on up to this many values at a time, then the next run).
_MOST_DECIMALS = 6
_EXACT_FLOAT_INTEGERS = 2.0**53
_CHECK_RUN = 1 << 20
_SAMPLE = 4096


class _FixedSums:
    """Exact sums of float columns (see the module), by one of two integer forms:

    - ``decimals``: where every finite value has at most ``k`` decimal places (``x ==
      round(x * 10**k) / 10**k`` in float64: prices, amounts, whole numbers), the integers
      ``round(x * 10**k)`` as float64; while rows x the largest stay below 2**53 every partial
      sum is an integer float64 holds exactly, so any order gives the same sum, which is
      scaled back by 10**-k. Polars' float sums are vectorised: 0.2 s less than the 128-bit
      form on the events benchmark's 10M amounts.
    - ``exponent``: any other column whose largest magnitude is below ``2**e``, the 128-bit
      integers ``trunc(x * 2**(96-e))`` (an exact scaling by a power of 2; only bits below
      ``2**(e-96)`` are cut, the same in every run), summed per group and scaled back in float64.
    """

    def __init__(self, frame: Any, columns: Sequence[str]) -> None:
        import polars as pl

        self.exponent: dict[str, int] = {}
        self.decimals: dict[str, int] = {}
        self.infinite: set[str] = set()           # columns holding an infinity
        # Columns the 128-bit form would cut: a value with bits below the column's unit (one
        # 1e30 beside 11.77 made every other group's sum 0). Summed by Polars in row order.
        self.inexact: set[str] = set()
        if frame.height >= _MOST_ROWS:            # a group's integer sum could overflow: Polars' own
            return
        if not columns:
            return
        # Decimal columns first (NumPy, which also finds their infinities); one Polars pass for
        # the others: each one's largest finite magnitude, and whether it holds an infinity.
        others = []
        for column in columns:
            found = _decimal_places(frame[column], frame.height)
            if found is None:
                others.append(column)
                continue
            self.decimals[column], infinite = found
            if infinite:
                self.infinite.add(column)
        if not others:
            return
        found = frame.select(*(pl.col(c).filter(pl.col(c).is_finite()).abs().max().alias(f"largest {i}")
                               for i, c in enumerate(others)),
                             *(pl.col(c).is_infinite().any().alias(f"infinite {i}") for i, c in enumerate(others))).row(0)
        exponents = {column: math.frexp(found[i] or 0.0)[1] for i, column in enumerate(others)}
        for i, column in enumerate(others):
            if found[len(others) + i]:
                self.infinite.add(column)
        # Each finite value must be a whole number of its column's units 2**(e - 96): scaling by a
        # power of 2 is exact, so the scaled value's fraction is what truncation would cut.
        whole = frame.select(*((_in_units(c, e).floor() == _in_units(c, e)).or_(~pl.col(c).is_finite()).all()
                               .alias(f"whole {i}") for i, (c, e) in enumerate(exponents.items()))).row(0)
        for (column, exponent), exact in zip(exponents.items(), whole):
            if exact:
                self.exponent[column] = exponent
            else:
                self.inexact.add(column)

    def __contains__(self, column: object) -> bool:
        return column in self.exponent or column in self.decimals

    @staticmethod
    def name(column: str) -> str:
        return f"__engine_fixed_{column}"

    def columns(self) -> list[Any]:
        """The 128-bit integer column of every column summed in that form (a decimal column's
        integers are made inside each sum: measured 0.05 s less than a column of them at 10M)."""
        import polars as pl

        return [pl.when(pl.col(column).is_finite()).then(_in_units(column, exponent))
                .cast(pl.Int128).alias(self.name(column)) for column, exponent in self.exponent.items()]

    def sum(self, column: str, masked: Callable[[str], Any]) -> Any:
        """The exact sum of ``column`` over a group's rows (``masked`` keeps a window's)."""
        import polars as pl

        if column in self.decimals:
            scale = float(10 ** self.decimals[column])
            total = (masked(column) * scale).round().sum() / scale
        else:
            total = (masked(self.name(column)).sum().cast(pl.Float64)
                     * (2.0 ** (self.exponent[column] - _FIXED_BITS)))
        if column in self.infinite:         # with an infinity the sum is inf (or NaN) in any order
            values = masked(column)
            total = pl.when(values.is_infinite().any()).then(values.sum()).otherwise(total)
        return total


def _in_units(column: str, exponent: int) -> Any:
    """``column`` in units of ``2**(exponent - 96)``: an exact scaling by a power of 2, whose
    whole part is the 128-bit form's integer."""
    import polars as pl

    return pl.col(column) * (2.0 ** (_FIXED_BITS - exponent))


def _decimal_places(series: Any, rows: int) -> tuple[int, bool] | None:
    """The fewest decimal places (at most ``_MOST_DECIMALS``) that write every finite value of
    ``series`` exactly in float64, where the integers of that place sum exactly in any order
    (``rows`` x the largest below 2**53), and whether the column holds an infinity; None where
    there is no such place. The places a sample needs come first, then the whole column is
    checked in runs (stopping at the first value that needs more), each run in a thread."""
    from pipeline.core.threads import map_in_threads

    values = series.to_numpy()                    # missing values as NaN
    sample = values[:_SAMPLE]
    for places in range(_MOST_DECIMALS + 1):
        scale = float(10**places)
        if _written_with(sample, scale) is None:
            continue
        runs = map_in_threads(lambda start: _written_with(values[start:start + _CHECK_RUN], scale),
                              range(0, len(values), _CHECK_RUN))
        if all(run is not None for run in runs):
            largest = max((run[0] for run in runs), default=0.0)
            if rows * largest >= _EXACT_FLOAT_INTEGERS:
                return None
            return places, any(run[1] for run in runs)
    return None


def _written_with(values: np.ndarray, scale: float) -> tuple[float, bool] | None:
    """(the largest ``|round(x * scale)|`` of the finite values, whether one is infinite) where
    every finite value is ``round(x * scale) / scale`` in float64; None where one is not."""
    with np.errstate(over="ignore", invalid="ignore"):      # float max x 10 is inf: not written so
        scaled = np.rint(values * scale)
    finite = np.isfinite(values)
    with np.errstate(invalid="ignore"):
        if not (np.equal(scaled / scale, values) | ~finite).all():
            return None
    largest = float(np.max(np.abs(scaled, out=scaled), where=finite, initial=0.0))
    return largest, not bool(finite.all()) and bool(np.isinf(values).any())


def _streams_by_default() -> bool:
    """Whether ``collect()`` runs Polars' streaming engine (Polars 2 and later), whose group-by
    adds partial sums in thread order; before 2.0 it ran the in-memory engine, which adds each
    group's rows in row order and needs no exact sums to repeat itself."""
    import polars as pl

    return int(pl.__version__.split(".")[0]) >= 2


def _collect(query: Any, *, in_order: bool) -> Any:
    """``query`` collected; on the in-memory engine where ``in_order`` (each group's rows
    aggregated in row order: repeatable std), else on Polars' default engine."""
    return query.collect(engine="in-memory") if in_order else query.collect()


class PolarsTableEngine:
    """Table work for ``CpuBackend`` on Polars; stateless, one per process and mode:
    ``repeatable`` gives the same bits on every run (see the module)."""

    name = "polars"

    def __init__(self, repeatable: bool = True) -> None:
        self.repeatable = repeatable

    def _exact(self, frame: Any, sums: Sequence[str], spreads: Sequence[str]) -> tuple[_FixedSums | None, bool]:
        """The exact sums of the float columns in ``sums`` (summed or averaged), and whether
        the query runs in row order (a float column in ``spreads``: std); nothing in fast mode."""
        if not self.repeatable or not _streams_by_default():
            return None, False
        floats = {name for name, dtype in frame.schema.items() if dtype.is_float()}
        fixed = _FixedSums(frame, [c for c in dict.fromkeys(sums) if c in floats])
        in_order = bool(fixed.inexact) or any(c in floats for c in spreads)
        return (fixed if fixed.exponent or fixed.decimals else None), in_order

    # ------------------------------------------------------------------ windows
    def aggregate_windows(self, events: pd.DataFrame, *, keys: Sequence[str], time: str,
                          cutoffs: Sequence[pd.Timestamp], aggregates: Sequence[WindowAggregate],
                          cutoff_column: str, order: str | None = None) -> pd.DataFrame | None:
        """Per cut-off, one row per entity with an event before it: the keys, ``cutoff_column``
        (the cut-off, in the time column's unit), then each aggregate's output, in the order
        given; rows sorted by (cut-off, keys). A window keeps the events with ``cutoff - length
        <= time < cutoff``. ``events`` has no missing key or time (the caller dropped and
        checked them). ``order``, when given, is the column breaking ties in time for
        ``first`` / ``last`` (input positions); otherwise input order does."""
        import polars as pl

        values = [c for c in dict.fromkeys(a[2] for a in aggregates if a[2] is not None)]
        columns = list(dict.fromkeys([*keys, time, *values, *([order] if order else [])]))
        frame = _to_polars(events, columns)
        if frame is None:
            return None
        unit = frame.schema[time].time_unit          # Polars' own (datetime64[s] arrives as ms)
        fixed, in_order = self._exact(frame, [a[2] for a in aggregates if a[1] in ("sum", "mean") and a[2]],
                                      [a[2] for a in aggregates if a[1] == "std" and a[2]])
        lazy = frame.lazy().with_columns(pl.col(time).cast(pl.Int64).alias(_TIME), *(fixed.columns() if fixed else ()))
        if any(a[1] in ("first", "last") for a in aggregates):
            lazy = (lazy.sort([_TIME, order]) if order else lazy.sort(_TIME, maintain_order=True))
        queries = [self._snapshot(lazy, keys, _in_unit(cutoff, unit), unit, aggregates, cutoff_column, fixed)
                   for cutoff in cutoffs]
        result = _collect(pl.concat(queries, how="vertical"), in_order=in_order)
        order = _key_order(result, keys, cutoff_column)
        out = _with_times(_to_pandas(result, order), cutoff_column, events[time].dtype, unit)
        return _like_source(out, events, {name: column for name, agg, column, _ in aggregates
                                          if agg in ("min", "max", "first", "last")}, keys)

    def _snapshot(self, lazy: Any, keys: Sequence[str], cutoff: int, unit: str,
                  aggregates: Sequence[WindowAggregate], cutoff_column: str, fixed: _FixedSums | None = None) -> Any:
        """One cut-off: one group-by of the statistics every output needs (each (statistic,
        column, window) once: recency, tenure and interval_mean share a window's count and time
        range), then the outputs derived from them.

        A window's values are its column masked outside the window (``when(inside).then(x)``:
        missing there) and aggregated plainly, as every aggregate but first skips missing
        values: at 10M events that took 0.8x the CPU of a ``filter`` inside the aggregation,
        at the same peak memory (masking in a ``with_columns`` first cost 1 GiB more)."""
        import polars as pl

        day = float(_in_unit(pd.Timedelta(days=1), unit))
        stats: dict[tuple[str, str | None, int | None], Any] = {}

        def masked(column: str, window: int | None) -> Any:
            if window is None:
                return pl.col(column)
            inside = pl.col(_TIME) >= window
            return inside.cast(pl.UInt32) if column == _INSIDE else pl.when(inside).then(pl.col(column))

        def stat(func: str, column: str | None, length: pd.Timedelta | None) -> Any:
            window = None if length is None else cutoff - _in_unit(length, unit)
            key = (func, column, window)
            if key not in stats:
                if func == "count":
                    expr = pl.len() if window is None else masked(_INSIDE, window).sum()
                elif func == "nunique":
                    values = masked(column, window)
                    expr = values.n_unique() - (values.null_count() > 0).cast(pl.UInt32)
                elif func == "std":
                    expr = masked(column, window).std(ddof=1)
                elif func in ("sum", "mean") and fixed is not None and column in fixed:
                    expr = fixed.sum(column, lambda name: masked(name, window))
                    if func == "mean":                           # NaN where the window is empty
                        expr = expr / masked(column, window).count().cast(pl.Float64)
                elif func == "first" and window is not None:     # the earliest row inside the window
                    expr = pl.col(column).filter(pl.col(_TIME) >= window).first()
                elif func == "max" and column == _TIME and window is not None:
                    # Windows end at the cut-off, so a window's latest time is the latest of
                    # all, where that is inside it: one max for every window, not one each.
                    latest = stat("max", _TIME, None)
                    expr = pl.when(latest >= window).then(latest)
                elif func == "last":                              # windows end at the cut-off
                    expr = pl.col(column).last()
                    if window is not None:
                        expr = pl.when(masked(_INSIDE, window).sum() > 0).then(expr)
                else:                                             # sum, mean, min, max, first of all
                    expr = getattr(masked(column, window), func)()
                stats[key] = expr
            return stats[key]

        outputs = []
        for output, aggregate, column, length in aggregates:
            if aggregate == "count":
                expr = stat("count", None, length).cast(pl.Int64)
            elif aggregate == "nunique":
                expr = stat("nunique", column, length).cast(pl.Int64)
            elif aggregate == "recency":
                expr = (pl.lit(cutoff) - stat("max", _TIME, length)).cast(pl.Float64) / day
            elif aggregate == "tenure":
                expr = (pl.lit(cutoff) - stat("min", _TIME, length)).cast(pl.Float64) / day
            elif aggregate == "interval_mean":
                count = stat("count", None, length)
                span = (stat("max", _TIME, length) - stat("min", _TIME, length)).cast(pl.Float64) / day
                expr = pl.when(count >= 2).then(span / (count - 1).cast(pl.Float64))
            else:
                expr = stat(aggregate, column, length)
            outputs.append(expr.alias(output))
        # The outputs are computed inside the aggregation (Polars shares the statistics they
        # have in common): a group-by of the statistics then a select of the outputs held both
        # at once. No sort here: the caller's copy to pandas gathers the rows in key order.
        return (lazy.filter(pl.col(_TIME) < cutoff).group_by(list(keys)).agg(outputs)
                .select([*keys, pl.lit(cutoff).alias(cutoff_column), *(a[0] for a in aggregates)]))

    # ------------------------------------------------------------------ horizons
    def aggregate_horizons(self, events: pd.DataFrame, *, keys: Sequence[str], time: str,
                           cutoffs: Sequence[pd.Timestamp], horizon: pd.Timedelta, target: HorizonTarget,
                           cutoff_column: str) -> pd.DataFrame | None:
        """Per (entity, cut-off) with an event in ``cutoff <= time < cutoff + horizon``: the
        keys, ``target.output`` (``count`` of the events when ``target.column`` is None, else its
        aggregate: sum / mean / min / max / nunique), then ``cutoff_column``; rows in no set
        order (they are looked up)."""
        import polars as pl

        aggregate, column, output = target.aggregate, target.column, target.output

        columns = list(dict.fromkeys([*keys, time, *([column] if column else [])]))
        frame = _to_polars(events, columns)
        if frame is None:
            return None
        unit = frame.schema[time].time_unit          # Polars' own (datetime64[s] arrives as ms)
        lazy = frame.lazy().with_columns(pl.col(time).cast(pl.Int64).alias(_TIME))
        fixed, in_order = self._exact(frame, [column] if column and aggregate in ("sum", "mean") else [],
                                      [column] if column and aggregate == "std" else [])
        if fixed is not None:
            lazy = lazy.with_columns(fixed.columns())
        if column is None:
            expr = pl.len().cast(pl.Int64)
        elif aggregate == "nunique":
            expr = pl.col(column).drop_nulls().n_unique().cast(pl.Int64)
        elif fixed is not None and column in fixed:
            expr = fixed.sum(column, pl.col)
            if aggregate == "mean":
                expr = expr / pl.col(column).count().cast(pl.Float64)
        else:
            expr = getattr(pl.col(column), aggregate)()
        queries = []
        for cutoff in cutoffs:
            start = _in_unit(cutoff, unit)
            end = start + _in_unit(horizon, unit)
            queries.append(lazy.filter((pl.col(_TIME) >= start) & (pl.col(_TIME) < end)).group_by(list(keys))
                           .agg(expr.alias(output)).with_columns(pl.lit(start).alias(cutoff_column)))
        out = _with_times(_to_pandas(_collect(pl.concat(queries, how="vertical"), in_order=in_order)),
                          cutoff_column, events[time].dtype, unit)
        kept = {output: column} if column is not None and aggregate in ("min", "max") else {}
        return _like_source(out, events, kept, keys)

    # ------------------------------------------------------------------ joins
    def join_rows(self, left: pd.DataFrame, right: pd.DataFrame, keys: Sequence[str],
                  how: str) -> tuple[np.ndarray, np.ndarray] | None:
        """Which left row and which right row make each joined row (-1: none), in the join's
        row order: left rows in left order, each with its matches in right order, then (right,
        outer) the right-only rows in right order. A missing key matches nothing. ``left`` and
        ``right`` hold the key columns, in matching dtypes."""
        import polars as pl

        lhs, rhs = _to_polars(left, list(keys)), _to_polars(right, list(keys))
        if lhs is None or rhs is None:
            return None
        lhs = lhs.lazy().with_row_index(_LEFT).with_columns(pl.col(_LEFT).cast(pl.Int64))
        rhs = rhs.lazy().with_row_index(_RIGHT).with_columns(pl.col(_RIGHT).cast(pl.Int64))
        # Nulls never match (Polars' default join_nulls=False), as the pandas engine's guard keys.
        joined = (lhs.join(rhs, on=list(keys), how="full" if how in ("right", "outer") else how, coalesce=True)
                  .select(_LEFT, _RIGHT))
        if how == "right":
            joined = joined.filter(pl.col(_RIGHT).is_not_null())
        rows = joined.sort([_LEFT, _RIGHT], nulls_last=True).fill_null(-1).collect()
        return rows[_LEFT].to_numpy(), rows[_RIGHT].to_numpy()


# ---------------------------------------------------------------------- conversions
def _to_polars(frame: pd.DataFrame, columns: list[str]) -> Any:
    """``columns`` of ``frame`` as a Polars frame (NaN read as missing), or None where a column
    is of a kind the engine leaves to pandas."""
    import polars as pl

    for name in columns:
        dtype = frame[name].dtype
        if isinstance(dtype, pd.CategoricalDtype) or isinstance(dtype, pd.DatetimeTZDtype):
            return None
        if dtype == object and pd.api.types.infer_dtype(frame[name], skipna=True) not in ("string", "empty"):
            return None
    try:
        return pl.from_pandas(frame[columns], nan_to_null=True)
    except (TypeError, ValueError, pl.exceptions.PolarsError, ImportError):
        return None


def _to_pandas(frame: Any, order: np.ndarray | None = None) -> pd.DataFrame:
    """A query's result (``frame``, emptied on the way) as pandas, its rows taken in ``order``
    (positions) when given: numbers, bools and dates through NumPy (ints with nulls come out
    float64 with NaN, as pyarrow gives them), other kinds (text) through pyarrow.

    Each column is copied once, into a writable array (Polars' buffers are read-only, and
    pandas writes into its columns in place), by the gather that puts the rows in order, and
    its Polars buffer is let go as soon as it is copied: the result is held about once, not twice
    (3.4M entities x 26 columns is 0.7 GiB), and sorting it in Polars first would have been a
    second copy. The columns stay separate blocks (no consolidating copy). Polars' own writable
    copy of a float column took 5x NumPy's copy of its read-only view."""
    from pipeline.core.threads import map_in_threads

    pl = _polars()
    height = frame.height
    names = list(frame.columns)
    pending = [frame.drop_in_place(name) for name in names]

    def convert(position: int) -> Any:
        series, pending[position] = pending[position], None      # its buffer goes with this copy
        dtype = series.dtype
        if dtype.is_float() or dtype.is_integer():
            if series.null_count():          # NaN for missing (ints widen to float64, as pyarrow's)
                series = (series if dtype.is_float() else series.cast(pl.Float64)).fill_null(float("nan"))
            values = series.to_numpy()
            return np.array(values, copy=True) if order is None else values.take(order)
        if dtype.is_numeric() or dtype.is_temporal() or dtype == pl.Boolean:
            values = series.to_numpy()
            return np.array(values, copy=True) if order is None else values.take(order)
        return (series if order is None else series.gather(order)).to_pandas()

    # Columns on the process's column threads (NumPy's gather lets the GIL go): at 16 cores the
    # one-thread gather of 3.4M entities x 27 columns was a fifth of the engine's time.
    columns = dict(zip(names, map_in_threads(convert, range(len(names)))))
    return pd.DataFrame(columns, index=pd.RangeIndex(height), copy=False)


def _key_order(result: Any, keys: Sequence[str], cutoff_column: str) -> np.ndarray:
    """Positions that put ``result``'s rows in (cut-off, keys) order. Each cut-off's rows are
    contiguous and the cut-offs ascend (one query per cut-off, concatenated in that order), so
    each cut-off's block is sorted on its keys alone: at 3.4M rows Polars' two-column
    ``arg_sort_by`` took 5x a one-column ``arg_sort`` (2.5 s against 0.45 s on two cores)."""
    pl = _polars()
    cuts = result[cutoff_column].to_numpy()
    bounds = [0, *(np.flatnonzero(cuts[1:] != cuts[:-1]) + 1).tolist(), len(cuts)]
    parts = []
    for start, stop in zip(bounds[:-1], bounds[1:]):
        block = result.slice(start, stop - start)
        local = _dense_order(block[keys[0]]) if len(keys) == 1 else None
        if local is None:
            local = (block[keys[0]].arg_sort() if len(keys) == 1
                     else block.select(pl.arg_sort_by(list(keys))).to_series()).to_numpy()
        parts.append(local.astype(np.int64) + start)
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)


def _dense_order(keys: Any) -> np.ndarray | None:
    """Positions that sort ``keys`` (a block's: one row per entity, none missing) where they are
    integers spanning at most twice their count, as row ids do: each row's position written into
    a slot per value, then the filled slots read in order. At 3.4M keys 0.04 s against 0.15 s
    for Polars' ``arg_sort``. None for any other keys."""
    if not keys.dtype.is_integer() or keys.null_count() or len(keys) < 2:
        return None
    values = keys.to_numpy()
    low, high = int(values.min()), int(values.max())
    span = high - low + 1
    if span > 2 * len(values) or span >= 2**31:
        return None
    slots = np.full(span, -1, dtype=np.int32)
    slots[values.astype(np.int64) - low] = np.arange(len(values), dtype=np.int32)
    return slots[slots >= 0]


def _polars() -> Any:
    import polars

    return polars


def _like_source(out: pd.DataFrame, source: pd.DataFrame, kept: dict[str, str], keys: Sequence[str]) -> pd.DataFrame:
    """Keys in their source dtypes, and outputs that carry a source column's values (min / max /
    first / last) in the source column's dtype where the trip through Polars changed it (a
    date's unit, text's dtype); numbers and bools there are left to the caller's output casts."""
    for name, column in [*((k, k) for k in keys), *kept.items()]:
        dtype = source[column].dtype
        if out[name].dtype == dtype or (name not in keys and is_number_or_bool(dtype)):
            continue
        out[name] = out[name].astype(dtype)
    return out


def _with_times(out: pd.DataFrame, column: str, dtype: Any, unit: str) -> pd.DataFrame:
    """The cut-off column (integers in ``unit``) as date-times of the time column's dtype."""
    out[column] = pd.Series(out[column].to_numpy(dtype=np.int64).view(f"M8[{unit}]"), index=out.index).astype(dtype)
    return out


def _in_unit(value: pd.Timestamp | pd.Timedelta, unit: str) -> int:
    """A Timestamp (since the epoch) or Timedelta as an integer count of ``unit``."""
    return int(pd.Timestamp(value).value if isinstance(value, pd.Timestamp) else pd.Timedelta(value).value) \
        // _NS_PER_UNIT[unit]
