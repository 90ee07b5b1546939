"""Features and labels from event tables (purchases, sessions, claims) at cut-off dates.

``aggregate_events`` turns events before each cut-off into one row per entity (counts, sums,
recency... over trailing windows); ``label_events`` labels an entity table from the events
in the horizon after each cut-off. Features never see an event at or after the cut-off and
labels never see one before it, by construction. Both take pandas, cuDF or Dask frames.
"""

from pipeline.events.windows import AggregationPlan, aggregate_events, plan_aggregation
from pipeline.events.durations import check_windows, normalize_duration, parse_cutoff, parse_cutoffs, parse_duration
from pipeline.events.horizon_labels import LabelPlan, label_events, plan_label
from pipeline.events.specs import (
    COLUMN_AGGREGATES, EVENT_AGGREGATES, TARGET_COLUMN_AGGREGATES, TARGET_EVENT_KINDS, EventFeature, EventTarget,
    check_feature_value, check_output_names, parse_features, parse_target,
)

__all__ = [
    "COLUMN_AGGREGATES", "EVENT_AGGREGATES", "TARGET_COLUMN_AGGREGATES", "TARGET_EVENT_KINDS", "AggregationPlan",
    "EventFeature", "EventTarget", "LabelPlan", "aggregate_events", "check_feature_value", "check_output_names",
    "check_windows", "label_events", "normalize_duration", "parse_cutoff", "parse_cutoffs", "parse_duration",
    "parse_features", "parse_target", "plan_aggregation", "plan_label",
]
