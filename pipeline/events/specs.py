"""What an ``aggregate`` feature and a ``label`` target are, parsed from their YAML forms.

A feature is ``name: count`` (an aggregate of the events themselves: count, recency, tenure,
interval_mean) or ``name: {sum: column}`` (an aggregate of a column); the mapping form takes its
own ``windows`` (``{sum: column, windows: [all]}``, and ``{recency: true, windows: [all]}`` for
an aggregate of the events). A target is ``name: no_event | any_event | count`` or ``name: {sum: column}``.
Parsing raises ``ValueError`` naming the entry, so a config error points at the key.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pipeline.events.durations import check_windows

# Aggregates of the events themselves (no column): counted or read from the time column.
EVENT_AGGREGATES = ("count", "recency", "tenure", "interval_mean")
# Aggregates of a column of the events.
COLUMN_AGGREGATES = ("sum", "mean", "min", "max", "std", "nunique", "first", "last")
# Those that need numbers (min / max / first / last / nunique also take text or dates).
NUMERIC_AGGREGATES = ("sum", "mean", "std")
# An empty window gives 0 for these, missing for every other aggregate.
ZERO_WHEN_EMPTY = ("count", "nunique", "sum")

TARGET_EVENT_KINDS = ("no_event", "any_event", "count")
TARGET_COLUMN_AGGREGATES = ("sum", "mean", "min", "max", "nunique")


@dataclass(frozen=True)
class EventFeature:
    """One feature: an aggregate (of ``column``, or of the events when None) over ``windows``."""

    name: str
    aggregate: str
    column: str | None
    windows: tuple[str, ...]

    def output_name(self, window: str) -> str:
        return f"{self.name}_{window}"

    def output_names(self) -> list[str]:
        return [self.output_name(w) for w in self.windows]


@dataclass(frozen=True)
class EventTarget:
    """The label: an event kind (no_event / any_event / count) or an aggregate of ``column``."""

    name: str
    aggregate: str
    column: str | None = None

    @property
    def drops_unlabelled(self) -> bool:
        """Whether an entity without events in the horizon has no value (a mean of nothing)."""
        return self.aggregate in ("mean", "min", "max")


def check_feature_value(value: Any) -> Any:
    """The YAML value of one feature, checked for shape (its windows against the stage's are
    checked by ``parse_features``); returned unchanged so the config dumps as written."""
    _feature_parts(value)
    return value


def _feature_parts(value: Any) -> tuple[str, str | None, list[str] | None]:
    """(aggregate, column, windows or None) of a feature's YAML value."""
    if isinstance(value, str):
        if value in EVENT_AGGREGATES:
            return value, None, None
        if value in COLUMN_AGGREGATES:
            raise ValueError(f"'{value}' needs a column: write {{{value}: <column>}}")
        raise ValueError(f"unknown aggregate '{value}' (use one of {', '.join(EVENT_AGGREGATES)}, or "
                         f"{{<aggregate>: <column>}} with one of {', '.join(COLUMN_AGGREGATES)})")
    if not isinstance(value, Mapping):
        raise ValueError(f"a feature is an aggregate name or {{<aggregate>: <column>}}, not {value!r}")
    windows = value.get("windows")
    if windows is not None:
        if not isinstance(windows, list):
            raise ValueError(f"windows must be a list such as [30d, all], not {windows!r}")
        windows = check_windows(windows)
    aggregates = [k for k in value if k != "windows"]
    unknown = [k for k in aggregates if k not in COLUMN_AGGREGATES and k not in EVENT_AGGREGATES]
    if unknown:
        raise ValueError(f"unknown aggregate '{unknown[0]}' (use one of {', '.join(COLUMN_AGGREGATES)} with a "
                         f"column, or one of {', '.join(EVENT_AGGREGATES)} with true)")
    if len(aggregates) != 1:
        raise ValueError("a feature takes exactly one {<aggregate>: <column>} entry "
                         f"(got {len(aggregates)}: {', '.join(map(str, aggregates)) or 'none'})")
    aggregate = aggregates[0]
    column = value[aggregate]
    if aggregate in EVENT_AGGREGATES:
        # {recency: true, windows: [all]}: an aggregate of the events themselves, with its own windows.
        if column is not True:
            raise ValueError(f"'{aggregate}' takes no column: write {{{aggregate}: true, windows: [...]}} "
                             f"or the name alone")
        return aggregate, None, windows
    if not isinstance(column, str) or not column:
        raise ValueError(f"{aggregate}: the column must be a name, not {column!r}")
    return aggregate, column, windows


def parse_features(features: Mapping[str, Any], windows: Iterable[str]) -> list[EventFeature]:
    """Features in spec order, each with its windows (its own, else the stage's)."""
    default = tuple(check_windows(windows))
    if not features:
        raise ValueError("features is empty: name at least one, such as {orders: count}")
    out = []
    for name, value in features.items():
        try:
            aggregate, column, own = _feature_parts(value)
        except ValueError as exc:
            raise ValueError(f"features.{name}: {exc}") from None
        out.append(EventFeature(str(name), aggregate, column, tuple(own) if own else default))
    return out


def check_output_names(features: list[EventFeature], reserved: Iterable[str]) -> list[str]:
    """The output feature columns; ValueError when two features, or a feature and a key or the
    cut-off column, would make the same column name."""
    taken = {str(r): "a key or the cut-off column" for r in reserved}
    names = []
    for feature in features:
        for name in feature.output_names():
            if name in taken:
                raise ValueError(f"features.{feature.name} makes the column '{name}', which is also {taken[name]}; "
                                 "rename the feature")
            taken[name] = f"made by features.{feature.name}"
            names.append(name)
    return names


def parse_target(target: Mapping[str, Any]) -> EventTarget:
    """The one ``name: kind`` entry of a label's target."""
    if not isinstance(target, Mapping) or len(target) != 1:
        count = len(target) if isinstance(target, Mapping) else 0
        raise ValueError(f"target takes exactly one entry <name>: <kind> such as {{churn: no_event}} (got {count})")
    ((name, value),) = target.items()
    if isinstance(value, str):
        if value in TARGET_EVENT_KINDS:
            return EventTarget(str(name), value)
        raise ValueError(f"target.{name}: unknown kind '{value}' (use one of {', '.join(TARGET_EVENT_KINDS)}, or "
                         f"{{<aggregate>: <column>}} with one of {', '.join(TARGET_COLUMN_AGGREGATES)})")
    if not isinstance(value, Mapping) or len(value) != 1:
        raise ValueError(f"target.{name}: write one of {', '.join(TARGET_EVENT_KINDS)} or {{<aggregate>: <column>}}")
    ((aggregate, column),) = value.items()
    if aggregate not in TARGET_COLUMN_AGGREGATES:
        raise ValueError(f"target.{name}: unknown aggregate '{aggregate}' (use one of "
                         f"{', '.join(TARGET_COLUMN_AGGREGATES)})")
    if not isinstance(column, str) or not column:
        raise ValueError(f"target.{name}: {aggregate} needs a column name, not {column!r}")
    return EventTarget(str(name), str(aggregate), column)
