"""Features of each entity from its events before a cut-off, over trailing windows.

For cut-off ``c`` and window ``w`` a feature sees the events with ``c - w <= time < c``
(``all``: ``time < c``). Each (cut-off, window) is ONE ``groupby(keys).agg(...)`` of named
aggregations over the rows in the window: every feature of that window comes out of the same
pass, and recency, tenure and the mean gap between events are read from the min / max / count
of the time column in that pass rather than from a per-entity loop. ``first`` / ``last`` take
the value at the row of the smallest / largest rank after one sort by (time, row position); a
total order, so the answer does not depend on a sort's stability (cuDF's is not stable).

The same functions run on pandas and cuDF frames (the frame API only). A Dask frame is
shuffled once on the keys (every event of an entity lands in one partition; the task-based
shuffle's pieces spill to disk, so events larger than the workers' memory complete, see
``frames.shuffle_method``) and each partition goes through the in-memory engine: every
aggregate is exact there, ``nunique`` / ``first`` / ``last`` / ``std`` included, which Dask's own
``groupby.agg`` either lacks (``nunique``) or computes in partition order (``first`` / ``last``).
One shuffle serves every window and cut-off.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from pipeline.backends import Backend, backend_for, is_partitioned
from pipeline.core.errors import ConfigError
from pipeline.events.checks import check_has_columns, check_no_missing_times, check_time_column, check_value_columns
from pipeline.events.durations import ALL, DAY, parse_cutoffs, parse_duration
from pipeline.events.frames import (
    POSITION, cast_output, drop_rows_without_key, key_list, remember_key_partitioned, rows_before,
    set_constant, shuffle_on_keys, side_by_side, with_positions,
)
from pipeline.events.specs import NUMERIC_AGGREGATES, ZERO_WHEN_EMPTY, EventFeature, check_output_names, parse_features

RANK = "__event_rank"
_ORDERED = ("first", "last")


@dataclass(frozen=True)
class AggregationPlan:
    """Everything the engine needs, parsed once (and shipped to Dask workers as it is)."""

    keys: tuple[str, ...]
    time: str
    cutoffs: tuple[pd.Timestamp, ...]
    features: tuple[EventFeature, ...]
    cutoff_column: str

    @property
    def windows(self) -> list[str]:
        """Every window some feature uses, in first-use order."""
        return list(dict.fromkeys(w for f in self.features for w in f.windows))

    @property
    def needs_order(self) -> bool:
        return any(f.aggregate in _ORDERED for f in self.features)

    @property
    def value_columns(self) -> list[str]:
        columns = [f.column for f in self.features if f.column is not None]
        return [c for c in dict.fromkeys(columns) if c not in (*self.keys, self.time)]

    @property
    def columns(self) -> list[str]:
        """The event columns the features read."""
        return [*self.keys, self.time, *self.value_columns]

    @property
    def output_names(self) -> list[str]:
        return [name for f in self.features for name in f.output_names()]


def plan_aggregation(*, by: str | Sequence[str], time: str, as_of: Any, features: Mapping[str, Any],
                     windows: Sequence[str] = (ALL,), cutoff_column: str = "as_of") -> AggregationPlan:
    """The parsed plan; a ConfigError naming the parameter when one is wrong."""
    keys = key_list(by)
    try:
        cutoffs = sorted(parse_cutoffs(as_of))
        parsed = parse_features(features, windows)
        check_output_names(parsed, [*keys, cutoff_column])
    except ValueError as exc:
        raise ConfigError(f"aggregate: {exc}") from None
    if cutoff_column in keys or cutoff_column == time:
        raise ConfigError(f"aggregate: cutoff_column {cutoff_column!r} is also a key or the time column")
    return AggregationPlan(tuple(keys), time, tuple(cutoffs), tuple(parsed), cutoff_column)


def aggregate_events(events: Any, plan: AggregationPlan | None = None, /, *, backend: Backend | str | None = None,
                     facts: dict[str, Any] | None = None, **aggregation: Any) -> Any:
    """One row per (entity, cut-off) for entities with an event before the cut-off: the keys,
    the cut-off column, then ``<feature>_<window>`` per feature and window, sorted by (cut-off,
    keys) (within each partition on Dask). As ``plan`` says, or the plan of ``aggregation``
    (``plan_aggregation``'s ``by``, ``time``, ``as_of``, ``features``, ``windows``,
    ``cutoff_column``). ``facts``, when given, receives counts for the run record
    (``rows_without_key``: events dropped for a missing key, in memory only)."""
    if plan is None:
        plan = plan_aggregation(**aggregation)
    elif aggregation:
        raise TypeError(f"aggregate_events takes a plan or its parts, not both ({', '.join(aggregation)})")
    backend = backend_for(events, backend)
    check_events(events, plan)
    if is_partitioned(events):
        return _aggregate_partitioned(events, plan, backend)
    return aggregate_frame(events, plan, backend, facts=facts)


def check_events(events: Any, plan: AggregationPlan) -> None:
    """Columns and dtypes (no values: cheap on Dask)."""
    check_has_columns(events, plan.keys, table="events", role="by")
    check_time_column(events, plan.time)
    check_value_columns(events, [(f.name, f.aggregate, f.column) for f in plan.features if f.column is not None],
                        numeric=NUMERIC_AGGREGATES)


def _aggregate_partitioned(events: Any, plan: AggregationPlan, backend: Backend) -> Any:
    """Shuffle on the keys, then the in-memory engine on each partition."""
    # Events from the last cut-off on make no feature: they are not shuffled.
    frame = rows_before(events[plan.columns], plan.time, plan.cutoffs[-1])
    if plan.needs_order:
        # Row positions before the shuffle (which reorders rows): first/last ties keep input order.
        frame = frame.map_partitions(with_positions, backend, meta=with_positions(frame._meta, backend))
    shuffled = shuffle_on_keys(frame, plan.keys)
    # Meta from Dask's stand-in rows, not an empty frame: the path real partitions take.
    meta = aggregate_frame(frame._meta_nonempty, plan, backend).iloc[:0]
    return remember_key_partitioned(shuffled.map_partitions(aggregate_frame, plan, backend, meta=meta), plan.keys)


def aggregate_frame(events: Any, plan: AggregationPlan, backend: Backend, *,
                    facts: dict[str, Any] | None = None) -> Any:
    """The engine on one in-memory frame (pandas or cuDF; a partition on Dask)."""
    frame = drop_rows_without_key(events[[*plan.columns, *([POSITION] if POSITION in events.columns else [])]],
                                  plan.keys, facts)
    check_no_missing_times(frame, plan.time)
    engine = backend.table_engine
    if engine is not None:
        found = _aggregate_on_engine(engine, frame, plan, backend)
        if found is not None:
            return found
    if plan.needs_order:
        frame = _ranked(frame, plan, backend)
    # Cut-offs ascending, each snapshot sorted by the keys: the stack is in (cut-off, keys) order.
    snapshots = [_snapshot(frame, plan, cutoff, backend) for cutoff in plan.cutoffs]
    return snapshots[0] if len(snapshots) == 1 else backend.frame.concat(snapshots, ignore_index=True)


def _aggregate_on_engine(engine: Any, frame: Any, plan: AggregationPlan, backend: Backend) -> Any:
    """Every cut-off and window in the backend's table engine (one query), then the same output
    casts as the frame code; None where the engine leaves the data to the frame code."""
    lengths = dict(_windows_longest_first(plan))
    aggregates = [(f.output_name(w), f.aggregate, f.column, lengths[w]) for f in plan.features for w in f.windows]
    order = POSITION if POSITION in frame.columns else None
    found = engine.aggregate_windows(frame, keys=plan.keys, time=plan.time, cutoffs=plan.cutoffs,
                                     aggregates=aggregates, cutoff_column=plan.cutoff_column, order=order)
    if found is None:
        return None
    for name, column in _cast_outputs(found, plan, frame, backend).items():
        found[name] = column
    return found


def _cast_outputs(columns: Any, plan: AggregationPlan, frame: Any, backend: Backend) -> dict[str, Any]:
    """Every feature's column (from ``columns``, by output name) in its documented dtype, in
    spec order x window order, filled for empty windows (0 for count / nunique / sum, missing
    otherwise): one rule for every engine, backend and partition."""
    cast = {}
    for feature in plan.features:
        zero = feature.aggregate in ZERO_WHEN_EMPTY
        source = frame[feature.column].dtype if feature.column is not None else None
        for name in feature.output_names():
            cast[name] = cast_output(columns[name], feature.aggregate, zero_when_missing=zero, source_dtype=source,
                                     bool_dtype=backend.bool_dtype)
    return cast


def _ranked(frame: Any, plan: AggregationPlan, backend: Backend) -> Any:
    """Rows sorted by (time, input position) with their rank: the order first/last read."""
    if POSITION not in frame.columns:
        frame = with_positions(frame, backend)
    frame = frame.sort_values([plan.time, POSITION]).reset_index(drop=True)
    frame[RANK] = backend.array.arange(len(frame), dtype="int64")
    return frame


def _snapshot(frame: Any, plan: AggregationPlan, cutoff: pd.Timestamp, backend: Backend) -> Any:
    """The features of every entity with an event before ``cutoff``, sorted by the keys.

    The ``all`` pass (a sorted group-by) decides the rows; every shorter window's pass is
    aligned onto its index by a reindex (one hash lookup per window, no merge, no copy of the
    columns already built). Windows go longest first, each filtering the rows of the last:
    they all end at the cut-off, so each is inside the one before."""
    rows = rows_before(frame, plan.time, cutoff)
    index = None
    columns: dict[str, Any] = {}
    for window, length in _windows_longest_first(plan):
        if length is not None:
            rows = rows[rows[plan.time] >= cutoff - length]
        features = [f for f in plan.features if window in f.windows]
        part = _window_features(rows, frame, plan, features, window, cutoff, backend)
        if index is None:
            index = part.index
        elif len(part.columns):
            part = backend.reindex(part, index)
        columns.update((name, part[name]) for name in part.columns)
    return _output_columns(columns, index, plan, cutoff, frame, backend)


def _output_columns(columns: dict[str, Any], index: Any, plan: AggregationPlan, cutoff: pd.Timestamp,
                    frame: Any, backend: Backend) -> Any:
    """Keys, the cut-off, then the features in their documented dtypes (``_cast_outputs``)."""
    result = side_by_side(_cast_outputs(columns, plan, frame, backend), index, backend).reset_index()
    set_constant(result, plan.cutoff_column, cutoff, frame[plan.time].dtype, loc=len(plan.keys))
    return result


def _windows_longest_first(plan: AggregationPlan) -> list[tuple[str, pd.Timedelta | None]]:
    """``all`` first: its pass decides the rows (every entity with an event before the cut-off),
    whether or not a feature uses it; then the other windows, longest first."""
    lengths = {w: parse_duration(w) for w in plan.windows if w != ALL}
    return [(ALL, None), *sorted(lengths.items(), key=lambda item: item[1], reverse=True)]


def _window_features(rows: Any, frame: Any, plan: AggregationPlan, features: list[EventFeature], window: str,
                     cutoff: pd.Timestamp, backend: Backend) -> Any:
    """One group-by pass over the rows of one window: every feature of that window, indexed
    by the keys (sorted)."""
    stats = _named_aggregations(features, plan)
    if not stats:                                   # `all` kept only for its rows
        stats = {"__rows": (plan.time, "count")}
    grouped = rows.groupby(list(plan.keys), sort=True).agg(**stats)
    columns = {feature.output_name(window): _feature_values(grouped, frame, feature, plan, cutoff)
               for feature in features}
    return side_by_side(columns, grouped.index, backend)


def _stat(column: str, func: str) -> str:
    return f"__{func}:{column}"


def _needed_stats(feature: EventFeature, plan: AggregationPlan) -> list[tuple[str, str]]:
    """(column, aggregation) pairs a feature is computed from."""
    time = plan.time
    if feature.aggregate == "count":
        return [(time, "count")]
    if feature.aggregate == "recency":
        return [(time, "max")]
    if feature.aggregate == "tenure":
        return [(time, "min")]
    if feature.aggregate == "interval_mean":
        return [(time, "min"), (time, "max"), (time, "count")]
    if feature.aggregate == "first":
        return [(RANK, "min")]
    if feature.aggregate == "last":
        return [(RANK, "max")]
    return [(feature.column, feature.aggregate)]


def _named_aggregations(features: list[EventFeature], plan: AggregationPlan) -> dict[str, tuple[str, str]]:
    """Named aggregations for ``groupby(...).agg(**...)``, each (column, function) once."""
    pairs = dict.fromkeys(pair for f in features for pair in _needed_stats(f, plan))
    return {_stat(column, func): (column, func) for column, func in pairs}


def _feature_values(grouped: Any, frame: Any, feature: EventFeature, plan: AggregationPlan,
                    cutoff: pd.Timestamp) -> Any:
    """A feature's column for the groups of one window pass."""
    time = plan.time
    agg = feature.aggregate
    if agg == "count":
        return grouped[_stat(time, "count")]
    if agg == "recency":
        return _days(grouped[_stat(time, "max")] - cutoff) * -1.0
    if agg == "tenure":
        return _days(grouped[_stat(time, "min")] - cutoff) * -1.0
    if agg == "interval_mean":
        count = grouped[_stat(time, "count")]
        span = _days(grouped[_stat(time, "max")] - grouped[_stat(time, "min")])
        return (span / (count - 1).astype("float64")).where(count >= 2)
    if agg in _ORDERED:
        positions = grouped[_stat(RANK, "min" if agg == "first" else "max")]
        values = frame[feature.column].take(positions.values)
        values.index = grouped.index
        return values
    return grouped[_stat(feature.column, agg)]


def _days(delta: Any) -> Any:
    """A timedelta column in days (float64; fractions for times of day)."""
    return (delta / DAY).astype("float64")
