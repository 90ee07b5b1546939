"""Population stability index (PSI): how far the rows a model scores have moved from the rows
it was trained on, feature by feature.

``export`` profiles the training split's feature matrix (the columns the model sees, after the
fitted workflow): per feature, the buckets and the share of training rows in each. ``predict``
counts the scored rows into the same buckets and compares the shares::

    PSI = sum over buckets of (a - e) * ln(a / e)

``a`` the scored share, ``e`` the training share, both floored at ``EPSILON`` so that a bucket
empty on one side stays finite. A partition returns counts, not shares, so partitioned scoring
adds its partitions' counts and takes the PSI once.

The buckets of a feature:

- numeric (more than ``bins`` distinct training values): bins between the training quantiles
  (fewer where quantiles coincide); a value below or above the training range falls in the
  first or last bin;
- categorical (at most ``bins`` distinct values: a category code, a one-hot column, a
  constant): one bucket per training value, then ``other`` for a value training never saw
  (its training share is 0, so the floor);
- then, for both, one bucket for missing values (NaN).

Host NumPy only: a device matrix is copied to the host by the caller.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = [
    "DEFAULT_BINS", "DRIFT_THRESHOLD", "EPSILON", "Counts", "bin_counts", "check_profile", "over_threshold", "psi",
    "reference_profile", "sum_counts",
]

# PSI above which a feature counts as shifted. The usual rule of thumb: below 0.1 stable, 0.1 to
# 0.2 a moderate shift, above 0.2 a significant one (worth a look before trusting the scores).
DRIFT_THRESHOLD = 0.2
# Floor of both shares in a bucket: an empty bucket on either side gives a large but finite term.
EPSILON = 1e-4
DEFAULT_BINS = 10
# A scored value within this of a training value is that value: the same category code or
# standardized constant computed on another device may differ in the last float32 digit.
_RTOL, _ATOL = 1e-5, 1e-6

Counts = dict[str, np.ndarray]          # per feature: rows per bucket (the last bucket: missing)


# ---------------------------------------------------------------------------- the training profile
def reference_profile(matrix: np.ndarray, names: Sequence[str], *, bins: int = DEFAULT_BINS) -> dict[str, Any]:
    """The buckets of each column of ``matrix`` (training rows, columns ``names``) and the
    share of its rows in each: strict JSON (finite numbers only), for ``reference.json``."""
    matrix = np.asarray(matrix)
    if matrix.ndim != 2 or matrix.shape[1] != len(names):
        raise ValueError(f"a profile needs one column per name: {matrix.shape} for {len(names)} names")
    if bins < 1:
        raise ValueError(f"bins must be at least 1, got {bins}")
    rows = int(matrix.shape[0])
    features = {}
    for name, column in zip(names, matrix.T):
        column = column.astype("float64")
        buckets = _buckets(column, bins)
        shares = (_bucket_counts(buckets, column) / max(rows, 1)).tolist()
        features[str(name)] = {**buckets, "share": shares[:_value_buckets(buckets)], "missing": shares[-1]}
    return {"rows": rows, "bins": bins, "features": features}


def _buckets(column: np.ndarray, bins: int) -> dict[str, list[float]]:
    """``values`` (a categorical column) or ``edges`` (the cut points of a numeric one)."""
    finite = column[np.isfinite(column)]
    distinct = np.unique(finite)
    if 0 < len(distinct) <= bins:
        return {"values": distinct.tolist()}
    if not len(finite):
        return {"edges": []}
    cuts = np.quantile(finite, np.linspace(0.0, 1.0, bins + 1)[1:-1])
    return {"edges": np.unique(cuts).tolist()}


def _value_buckets(feature: Mapping[str, Any]) -> int:
    """Buckets with a training share: bins of a numeric feature, values of a categorical one."""
    return len(feature["values"]) if "values" in feature else len(feature["edges"]) + 1


def check_profile(profile: Any, names: Sequence[str]) -> dict[str, Any]:
    """``profile`` (read from a file: data, not trusted code) when it profiles exactly ``names``
    in order with well-formed buckets; a ``ValueError`` saying what is wrong otherwise."""
    features = profile.get("features") if isinstance(profile, dict) else None
    if not isinstance(features, dict) or list(features) != list(names):
        raise ValueError("its features are not the model's features")
    rows = profile.get("rows")
    if not isinstance(rows, int) or isinstance(rows, bool) or rows < 0:
        raise ValueError("it has no row count")
    for name, feature in features.items():
        points = feature.get("values", feature.get("edges")) if isinstance(feature, dict) else None
        if not _finite_list(points) or points != sorted(points) or ("values" in feature and not points):
            raise ValueError(f"feature '{name}' has no sorted list of finite values or edges")
        if not _finite_list(feature.get("share")) or len(feature["share"]) != _value_buckets(feature) \
                or not _finite_list([feature.get("missing")]):
            raise ValueError(f"feature '{name}' has no share per bucket")
    return profile


def _finite_list(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value)


# ---------------------------------------------------------------------------- scored rows
def bin_counts(profile: Mapping[str, Any], matrix: np.ndarray) -> Counts:
    """Rows of ``matrix`` (columns in the profile's feature order) per bucket of each feature:
    the value buckets, ``other`` for a categorical feature, then missing."""
    features = profile["features"]
    matrix = np.asarray(matrix)
    if matrix.ndim != 2 or matrix.shape[1] != len(features):
        raise ValueError(f"a matrix of shape {matrix.shape} for a profile of {len(features)} features")
    return {name: _bucket_counts(feature, matrix[:, i].astype("float64"))
            for i, (name, feature) in enumerate(features.items())}


def _bucket_counts(feature: Mapping[str, Any], column: np.ndarray) -> np.ndarray:
    """Rows of one column (float64) per bucket of its feature, in ``bin_counts``' order."""
    if "values" in feature:
        index, buckets = _category_index(np.asarray(feature["values"], dtype="float64"), column)
    else:
        edges = np.asarray(feature["edges"], dtype="float64")
        index, buckets = np.searchsorted(edges, column, side="right"), len(edges) + 1
    index[np.isnan(column)] = buckets                # the missing bucket, last
    return np.bincount(index, minlength=buckets + 1).astype("int64")


def _category_index(values: np.ndarray, column: np.ndarray) -> tuple[np.ndarray, int]:
    """Per row, the position of its training value, or ``len(values)`` (other); and the number
    of buckets before the missing one. The nearest value is found by bisecting the midpoints
    between values (one pass, no rows x values matrix), then must lie within the tolerance."""
    nearest = np.searchsorted((values[1:] + values[:-1]) / 2, column)
    seen = np.abs(column - values[nearest]) <= (_ATOL + _RTOL * np.abs(values))[nearest]
    return np.where(seen, nearest, len(values)), len(values) + 1


def sum_counts(parts: Sequence[Counts]) -> Counts:
    """The counts of all ``parts`` (partitions of one input, at least one) together."""
    total = {name: counts.copy() for name, counts in parts[0].items()}
    for part in parts[1:]:
        for name in total:
            total[name] += part[name]
    return total


# ---------------------------------------------------------------------------- the index
def psi(profile: Mapping[str, Any], counts: Mapping[str, np.ndarray]) -> dict[str, float]:
    """PSI per feature of the scored rows ``counts`` (``bin_counts``) against the training
    shares in ``profile``; a ``ValueError`` when no row was counted (there is no share)."""
    out = {}
    for name, feature in profile["features"].items():
        observed = np.asarray(counts[name], dtype="float64")
        if observed.sum() == 0:
            raise ValueError("no rows were counted: the PSI of an empty input is undefined")
        actual = np.maximum(observed / observed.sum(), EPSILON)
        expected = np.maximum(_expected(feature), EPSILON)
        out[name] = float(np.sum((actual - expected) * np.log(actual / expected)))
    return out


def _expected(feature: Mapping[str, Any]) -> np.ndarray:
    """Training shares in ``bin_counts``' bucket order (``other``: none)."""
    other = [0.0] if "values" in feature else []
    return np.asarray([*feature["share"], *other, feature["missing"]], dtype="float64")


def over_threshold(values: Mapping[str, float], threshold: float = DRIFT_THRESHOLD) -> list[str]:
    """The features whose PSI is above ``threshold``, the largest first (ties by name)."""
    return sorted((name for name, value in values.items() if value > threshold), key=lambda n: (-values[n], n))
