"""What model-ready data looks like per split, for the report's data section: the target's
balance and each feature's histogram, on host samples of a fixed size (``PROFILE_ROWS``), so
the cost does not grow with the table.

Histograms share one set of bins per feature, taken from the training split, so train, valid
and test read against each other bin by bin (a split that drifted shows as shifted bars).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pipeline.core.problems import Task

# Rows per split a profile reads: enough for stable shares at 20 bins, little to copy.
PROFILE_ROWS = 100_000
BINS = 20
REFERENCE = "train"


def feature_histograms(samples: Mapping[str, np.ndarray], names: Sequence[str], *,
                       bins: int = BINS) -> dict[str, dict[str, Any]]:
    """Per feature: ``edges`` (``bins`` + 1, from the training sample's finite range) or, for a
    feature with at most ``bins`` distinct values (codes, flags), its ``values``; then each
    split's share of rows per bin (``shares``, values outside the range counted in the end
    bins) and share of non-finite values (``missing``)."""
    reference = samples.get(REFERENCE)
    if reference is None:
        reference = next(iter(samples.values()))
    out: dict[str, dict[str, Any]] = {}
    for j, name in enumerate(names):
        column = reference[:, j]
        finite = column[np.isfinite(column)]
        distinct = np.unique(finite)
        entry: dict[str, Any]
        if distinct.size <= bins:
            entry = {"values": distinct.tolist()}
            count = _value_counter(distinct)
        else:
            edges = np.linspace(float(finite.min()), float(finite.max()), bins + 1)
            entry = {"edges": edges.tolist()}
            count = _bin_counter(edges)
        entry["shares"], entry["missing"] = {}, {}
        for split, sample in samples.items():
            values = sample[:, j]
            ok = np.isfinite(values)
            rows = max(int(values.size), 1)
            entry["shares"][split] = (count(values[ok]) / rows).tolist()
            entry["missing"][split] = float((~ok).sum() / rows)
        out[name] = entry
    return out


def _value_counter(values: np.ndarray):
    def count(column: np.ndarray) -> np.ndarray:
        return np.array([(column == value).sum() for value in values], dtype="float64")
    return count


def _bin_counter(edges: np.ndarray):
    def count(column: np.ndarray) -> np.ndarray:
        clipped = np.clip(column, edges[0], edges[-1])
        return np.histogram(clipped, bins=edges)[0].astype("float64")
    return count


def target_balance(task: Task, labels: Mapping[str, np.ndarray], *, bins: int = BINS) -> dict[str, Any]:
    """Classification: rows per class (original class values) per split. Regression: the
    target's summary and a histogram per split on the training split's bins."""
    if task.is_classification:
        classes = list(task.classes) if task.kind == "multiclass" else [0, 1]
        codes = range(len(classes))
        return {"kind": "classes", "classes": [_plain(c) for c in classes],
                "counts": {split: [int((y == code).sum()) for code in codes] for split, y in labels.items()}}
    reference = labels.get(REFERENCE)
    if reference is None:
        reference = next(iter(labels.values()))
    finite = reference[np.isfinite(reference)]
    low, high = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    edges = np.linspace(low, high if high > low else low + 1.0, bins + 1)
    count = _bin_counter(edges)
    summary = {split: {"mean": float(np.nanmean(y)) if y.size else None,
                       "std": float(np.nanstd(y)) if y.size else None,
                       "min": float(np.nanmin(y)) if y.size else None,
                       "max": float(np.nanmax(y)) if y.size else None} for split, y in labels.items()}
    return {"kind": "values", "edges": edges.tolist(), "summary": summary,
            "counts": {split: count(y[np.isfinite(y)]).astype(int).tolist() for split, y in labels.items()}}


def _plain(value: Any) -> Any:
    """A class value JSON keeps as it is (NumPy scalars as Python's)."""
    return value.item() if isinstance(value, np.generic) else value
