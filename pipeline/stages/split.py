"""``split``: a seeded train / valid / test split: stratified, by group, or out of time.

Row positions are drawn on the host (from the label vector, the group column or the order
column), then taken on the device, so the same seed selects the same rows on CPU and GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from pydantic import Field, model_validator

from pipeline.backends import Backend, backend_for, is_partitioned
from pipeline.errors import DataError
from pipeline.stages.base import StageContext, StageSpec, Table, only_input, register_stage
from pipeline.tasks import BINARY, Task

SPLITS = ("train", "valid", "test")


@dataclass
class SplitData:
    """Frames per split; the target column holds the task's labels (``pipeline.tasks``):
    0/1 for binary (1 = ``positive``), class codes for multiclass, numbers for regression."""

    frames: dict[str, Any]
    target: str
    positive: Any
    backend: Backend
    task: Task = BINARY
    # ``folds: k``: per fold, (positions fitted on, positions scored) into ``frames["train"]``,
    # which then holds every non-test row. None without cross-validation.
    folds: list[tuple[np.ndarray, np.ndarray]] | None = None

    @property
    def partitioned(self) -> bool:
        return is_partitioned(self.frames["train"])

    def sizes(self) -> dict[str, int]:
        return {name: int(len(frame)) for name, frame in self.frames.items()}


class SplitSpec(StageSpec):
    kind: Literal["split"]
    target: str = Field(description="Label column.")
    task: Literal["binary", "multiclass", "regression"] | None = Field(None, description=(
        "What is predicted. Default: inferred from the target (positive: given or two values -> "
        "binary; other numbers -> regression; text or categories -> multiclass)."))
    positive: str | int | float | bool | None = Field(
        None, description="Label value that means the positive class. Default: 1 / True."
    )
    test: float = Field(0.2, ge=0, lt=1, allow_inf_nan=False, description="Fraction of rows for the test split.")
    valid: float = Field(0.0, ge=0, lt=1, allow_inf_nan=False, description="Fraction of rows for the validation split.")
    stratify: bool = Field(True, description="Keep the label ratio equal across splits (a random split only).")
    group: str | None = Field(None, min_length=1, description=(
        "Column whose rows stay together: no value of it falls in two splits (one patient's visits, "
        "one customer's orders)."))
    order_by: str | None = Field(None, min_length=1, description=(
        "Column of times (numbers, dates or date text): the oldest rows train, the newest test "
        "(out-of-time validation). With group, each group goes by its newest row."))
    folds: int | None = Field(None, ge=2, le=100, description=(
        "k-fold cross-validation on the non-test rows: the feature workflow and each model are "
        "fitted per fold and scored on the fold they did not see."))
    min_inputs = 1
    max_inputs = 1

    @model_validator(mode="after")
    def _fractions(self) -> SplitSpec:
        if self.test + self.valid >= 1:
            raise ValueError(f"test + valid must be below 1 (got {self.test} + {self.valid})")
        return self


def binary_labels(series: Any, positive: Any, backend: Backend, *, column: str) -> Any:
    """0/1 int8 labels: 1 where the value is ``positive`` (every other value is 0), or the
    target's own 0/1 / True/False; raises naming the column otherwise."""
    if series.isna().any():
        raise DataError(f"target column '{column}' has {int(series.isna().sum())} missing values")
    values = sorted(map(str, backend.to_host(series.unique()).tolist()))
    if positive is None:
        if set(values) <= {"0", "1", "True", "False", "0.0", "1.0"}:
            return series.astype("int8")
        raise DataError(f"target column '{column}' has values {values[:10]}; set positive: to the one that means 1")
    if str(positive) not in values:
        raise DataError(f"positive value {positive!r} does not occur in target column '{column}' (values: {values[:10]})")
    # More than two values: one-vs-rest, ``positive`` against every other value (the user
    # named the class that means 1; the partitioned path labels the same way).
    return (series == positive).astype("int8")


def class_counts(series: Any, backend: Backend) -> dict[Any, int]:
    """Rows per target value, for messages: ``{'No': 9, 'Yes': 1}``."""
    counts = backend.to_host(series.value_counts(dropna=False))
    pairs = [(v.item() if isinstance(v, np.generic) else v, int(n)) for v, n in counts.items()]
    return dict(sorted(pairs, key=lambda vc: str(vc[0])))


def check_two_classes(series: Any, labels: Any, backend: Backend, *, column: str) -> None:
    """Both classes must have rows: a one-class target passes every later check and fails
    inside the model, as a stage error that does not name the column."""
    if int(backend.to_host(labels.nunique())) < 2:
        raise DataError(f"target column '{column}' has one class (rows per value: "
                        f"{class_counts(series, backend)}); a binary classifier needs rows of both classes")


def split_frame(
    frame: Any,
    target: str,
    *,
    positive: Any = None,
    test: float = 0.2,
    valid: float = 0.0,
    seed: int = 42,
    stratify: bool = True,
    group: str | None = None,
    order_by: str | None = None,
    backend: Backend | str | None = None,
) -> SplitData:
    """Split a frame you already have; the target becomes 0/1.

    ``group``: every row with one value of that column lands in one split. ``order_by``: the
    newest rows are the test split, the next newest valid, the oldest train. Neither is
    stratified (the groups or the times decide where a row goes)."""
    from sklearn.model_selection import train_test_split  # scikit-learn costs ~1 s to import

    backend = backend_for(frame, backend)
    if target not in frame.columns:
        raise DataError(f"target column '{target}' not in the data (columns: {', '.join(map(str, frame.columns))})")
    for role, column in (("group", group), ("order_by", order_by)):
        if column is not None and column not in frame.columns:
            raise DataError(f"{role} column '{column}' not in the data (columns: {', '.join(map(str, frame.columns))})")
    if is_partitioned(frame):
        if order_by:
            raise DataError("order_by: is not available on partitioned data yet (an out-of-time cut needs the "
                            "whole table's order); read the table in memory (partitioned: false) or drop the key")
        return _split_partitioned(frame, target, positive, test, valid, seed, backend, group=group)
    if not len(frame):
        raise DataError(f"no rows to split on '{target}': the input table is empty")
    labels = binary_labels(frame[target], positive, backend, column=target)
    original = frame[target]
    check_two_classes(original, labels, backend, column=target)
    frame = frame.assign(**{target: labels})
    y = np.asarray(backend.to_host(labels))
    if group or order_by:
        from pipeline.stages.split_positions import ordered_positions

        groups = _host_column(frame, group, backend) if group else None
        times = _host_column(frame, order_by, backend) if order_by else None
        train_pos, valid_pos, test_pos = ordered_positions(len(y), test=test, valid=valid, seed=seed,
                                                           groups=groups, times=times,
                                                           group_name=group, order_name=order_by)
        advice = f"the {'groups' if group else 'times'} put every row of the other class outside it"
    else:
        positions = np.arange(len(y))
        strat = y if stratify else None
        try:
            rest, test_pos = train_test_split(positions, test_size=test, random_state=seed, stratify=strat) if test else (positions, positions[:0])
            if valid:
                strat_rest = y[rest] if stratify else None
                train_pos, valid_pos = train_test_split(rest, test_size=valid / (1 - test), random_state=seed, stratify=strat_rest)
            else:
                train_pos, valid_pos = rest, rest[:0]
        except ValueError as exc:
            raise DataError(f"cannot split {len(y)} rows on target column '{target}' (rows per class: "
                            f"{class_counts(original, backend)}): {exc}") from exc
        advice = "use stratify: true, or more rows of the smaller class"
    if len(np.unique(y[train_pos])) < 2:
        raise DataError(f"target column '{target}' has one class in the training split (rows per class in all: "
                        f"{class_counts(original, backend)}); {advice}")
    frames = {name: backend.take(frame, np.sort(pos)) for name, pos in zip(SPLITS, (train_pos, valid_pos, test_pos))}
    return SplitData(frames=frames, target=target, positive=positive, backend=backend)


def _host_column(frame: Any, column: str, backend: Backend) -> Any:
    """A column as a pandas Series on the host, for drawing positions there."""
    import pandas as pd

    values = backend.to_host(frame[column])
    return values if isinstance(values, pd.Series) else pd.Series(values, name=column)


def _split_partitioned(frame: Any, target: str, positive: Any, test: float, valid: float, seed: int,
                       backend: Backend, *, group: str | None = None) -> SplitData:
    """Dask's per-partition random split: seeded and one pass, but not stratified.

    With ``group``, each row goes where the seeded hash of its group value falls
    (``split_positions.group_draws``): no group in two splits, wherever its rows sit, and a
    group keeps its split as new data arrives. The shares are met on average, not exactly.
    Labels are checked partition by partition as the data streams through, not up front,
    which would cost a pass of its own.
    """
    if positive is None and not backend.is_numeric(frame._meta[target]):
        raise DataError(f"target column '{target}' is {frame._meta[target].dtype}; with partitioned data set "
                        "positive: to the value that means 1")
    labeled = frame.map_partitions(_label_partition, target, positive, meta=frame._meta.assign(
        **{target: frame._meta[target].astype("int8")}))
    train = 1.0 - test - valid
    if group is None:
        parts = labeled.random_split([train, valid, test], random_state=seed)
        return SplitData(frames=dict(zip(SPLITS, parts)), target=target, positive=positive, backend=backend)
    bounds = {"test": (0.0, test), "valid": (test, test + valid), "train": (test + valid, 1.0)}
    frames = {name: labeled.map_partitions(_group_share, group, seed, *bounds[name], meta=labeled._meta)
              for name in SPLITS}
    return SplitData(frames=frames, target=target, positive=positive, backend=backend)


def _group_share(part: Any, group: str, seed: int, low: float, high: float) -> Any:
    """The rows of a partition whose group's draw falls in [low, high)."""
    from pipeline.stages.split_positions import group_draws

    backend = backend_for(part, None)
    draws = group_draws(_host_column(part, group, backend), seed, group)
    return backend.take(part, np.flatnonzero((draws >= low) & (draws < high)))


def _label_partition(part: Any, target: str, positive: Any) -> Any:
    series = part[target]
    if series.isna().any():
        raise DataError(f"target column '{target}' has missing values")
    labels = (series == positive) if positive is not None else series.astype("int8") == 1
    return part.assign(**{target: labels.astype("int8")})


@register_stage("split", SplitSpec, produces=SplitData, accepts=(Table,))
def run_split(spec: SplitSpec, ctx: StageContext, inputs) -> SplitData:
    data = split_frame(
        only_input(inputs), spec.target, positive=spec.positive, test=spec.test, valid=spec.valid,
        seed=ctx.seed, stratify=spec.stratify, group=spec.group, order_by=spec.order_by, backend=ctx.backend,
    )
    if spec.group or spec.order_by:
        ctx.facts["split_by"] = [name for name, on in (("group", spec.group), ("order_by", spec.order_by)) if on]
        ctx.facts["stratified"] = False
    if data.partitioned:
        ctx.facts["partitions"] = int(data.frames["train"].npartitions)
        ctx.facts["stratified"] = False
    else:
        ctx.facts["rows"] = data.sizes()
    return data
