"""``pipeline.metrics.drift``: the training profile, bucket counts and the PSI per feature."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from pipeline.metrics.drift import (
    DRIFT_THRESHOLD, EPSILON, bin_counts, check_profile, over_threshold, psi, reference_profile, sum_counts,
)

NAMES = ["income", "age", "plan", "is_member", "constant"]


def training_like(rows: int, seed: int) -> np.ndarray:
    """Two continuous columns, a category code (0..3), a one-hot column and a constant, with a
    few missing incomes: float32, as the feature matrices are."""
    rng = np.random.default_rng(seed)
    matrix = np.column_stack([
        rng.normal(50_000, 12_000, rows), rng.normal(40, 10, rows), rng.integers(0, 4, rows),
        rng.integers(0, 2, rows), np.full(rows, 1.5),
    ]).astype("float32")
    matrix[rng.random(rows) < 0.02, 0] = np.nan
    return matrix


@pytest.fixture(scope="module")
def profile() -> dict:
    return reference_profile(training_like(20_000, seed=0), NAMES)


def test_the_profile_is_strict_json_with_a_bucket_per_value_for_low_cardinality_columns(profile):
    assert json.loads(json.dumps(profile, allow_nan=False)) == profile
    assert profile["rows"] == 20_000 and list(profile["features"]) == NAMES
    features = profile["features"]
    assert features["plan"]["values"] == [0.0, 1.0, 2.0, 3.0]
    assert features["is_member"]["values"] == [0.0, 1.0]
    assert features["constant"] == {"values": [1.5], "share": [1.0], "missing": 0.0}
    assert len(features["age"]["edges"]) == 9 and len(features["age"]["share"]) == 10
    assert features["income"]["missing"] == pytest.approx(0.02, abs=0.005)
    for feature in features.values():
        assert sum(feature["share"]) + feature["missing"] == pytest.approx(1.0)
    assert check_profile(profile, NAMES) is profile


def test_quantile_edges_are_deduplicated_when_values_repeat():
    column = np.r_[np.zeros(900), np.arange(1, 101)].astype("float32")[:, None]   # 90% zeros, 101 values
    edges = reference_profile(column, ["spend"])["features"]["spend"]["edges"]
    assert edges == sorted(set(edges)) and 0.0 in edges and len(edges) < 9


def test_identical_rows_have_no_drift(profile):
    values = psi(profile, bin_counts(profile, training_like(20_000, seed=0)))
    assert list(values) == NAMES
    assert all(value == pytest.approx(0.0, abs=1e-12) for value in values.values()), values


def test_a_shifted_feature_is_over_the_threshold_and_the_others_stay_stable(profile):
    scored = training_like(5_000, seed=1)                # new rows from the same population
    scored[:, 1] += 2 * 10                               # age: two standard deviations up
    values = psi(profile, bin_counts(profile, scored))
    assert values["age"] > DRIFT_THRESHOLD
    assert all(values[name] < 0.1 for name in NAMES if name != "age"), values
    assert over_threshold(values) == ["age"]


def test_values_outside_the_training_range_fall_in_the_first_and_last_bins(profile):
    edges = profile["features"]["age"]["edges"]
    scored = training_like(4, seed=2)
    scored[:, 1] = [-1e6, edges[0] - 1, edges[-1] + 1, 1e6]
    counts = bin_counts(profile, scored)["age"]
    assert counts.tolist() == [2, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0]     # 10 bins, then missing


def test_missing_values_and_unseen_categories_have_buckets_of_their_own(profile):
    scored = training_like(6, seed=3)
    scored[:, 0] = np.nan
    scored[:, 2] = [0, 1, 2, 3, 7, np.nan]               # 7: a code training never saw
    counts = bin_counts(profile, scored)
    assert counts["income"].tolist() == [0] * 10 + [6]
    assert counts["plan"].tolist() == [1, 1, 1, 1, 1, 1]             # 4 values, other, missing
    values = psi(profile, counts)
    assert all(math.isfinite(value) for value in values.values())
    assert values["income"] > DRIFT_THRESHOLD and values["plan"] > DRIFT_THRESHOLD


def test_a_value_off_by_float32_rounding_is_still_its_category():
    profile = reference_profile(np.array([[0.1], [0.7]], dtype="float32"), ["scaled"])
    scored = np.array([[np.nextafter(np.float32(0.7), np.float32(1))], [0.5]], dtype="float32")
    assert bin_counts(profile, scored)["scaled"].tolist() == [0, 1, 1, 0]


def test_counts_of_two_halves_add_up_to_the_counts_of_the_whole(profile):
    scored = training_like(3_001, seed=4)
    whole = bin_counts(profile, scored)
    halves = sum_counts([bin_counts(profile, scored[:1_500]), bin_counts(profile, scored[1_500:])])
    assert list(halves) == list(whole)
    for name in NAMES:
        np.testing.assert_array_equal(halves[name], whole[name])
    assert psi(profile, halves) == psi(profile, whole)


def test_psi_equals_a_hand_computed_value():
    train = np.array([[1, 0], [2, 0], [3, 1], [4, 1]], dtype="float32")
    profile = reference_profile(train, ["x", "code"], bins=2)
    # x: 4 distinct values > 2 bins, so one cut at the median 2.5; code: values 0 and 1.
    assert profile["features"]["x"] == {"edges": [2.5], "share": [0.5, 0.5], "missing": 0.0}
    assert profile["features"]["code"] == {"values": [0.0, 1.0], "share": [0.5, 0.5], "missing": 0.0}
    scored = np.array([[1, 0], [1, 1], [1, 5], [4, np.nan]], dtype="float32")
    # x: shares 3/4, 1/4, missing 0 (floored) against 1/2, 1/2, 0: the missing term is 0.
    x = (0.75 - 0.5) * math.log(0.75 / 0.5) + (0.25 - 0.5) * math.log(0.25 / 0.5)
    # code: 1/4 in each of 0, 1, other, missing against 1/2, 1/2, 0, 0 (both floored at EPSILON).
    code = 2 * (0.25 - 0.5) * math.log(0.25 / 0.5) + 2 * (0.25 - EPSILON) * math.log(0.25 / EPSILON)
    values = psi(profile, bin_counts(profile, scored))
    assert values == {"x": pytest.approx(x, rel=1e-12), "code": pytest.approx(code, rel=1e-12)}
    assert values["x"] == pytest.approx(0.274653, abs=1e-6)


def test_no_rows_and_a_matrix_of_another_width_are_refused(profile):
    with pytest.raises(ValueError, match="no rows"):
        psi(profile, bin_counts(profile, np.empty((0, len(NAMES)))))
    with pytest.raises(ValueError, match=r"shape \(3, 2\) for a profile of 5 features"):
        bin_counts(profile, np.zeros((3, 2)))


def test_over_threshold_lists_the_largest_first():
    assert over_threshold({"a": 0.3, "b": 0.05, "c": 0.9, "d": 0.3}, 0.2) == ["c", "a", "d"]
    assert over_threshold({"a": 0.3}, 0.5) == []


@pytest.mark.parametrize("damage, why", [
    (lambda p: p["features"].pop("age"), "not the model's features"),
    (lambda p: p.pop("rows"), "row count"),
    (lambda p: p["features"]["age"].update(edges=[3.0, 1.0]), "sorted"),
    (lambda p: p["features"]["plan"].update(values=[]), "sorted"),
    (lambda p: p["features"]["plan"]["share"].pop(), "share per bucket"),
    (lambda p: p["features"]["income"].update(missing="x"), "share per bucket"),
])
def test_a_damaged_profile_is_refused(profile, damage, why):
    damaged = json.loads(json.dumps(profile))
    damage(damaged)
    with pytest.raises(ValueError, match=why):
        check_profile(damaged, NAMES)
