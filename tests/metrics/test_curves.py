"""The report's curves (pipeline.metrics.curves) against scikit-learn's definitions."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn import metrics as skm
from sklearn.calibration import calibration_curve

from pipeline.metrics.curves import POINTS, SWEEP, binary_curves, regression_curves


def _data(n: int, seed: int, distinct: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    scores = np.clip(y * 0.3 + rng.random(n) * 0.7, 0, 1)
    if distinct is not None:
        scores = np.round(scores * distinct) / distinct          # ties
    return y, scores


@pytest.mark.parametrize("seed", range(3))
def test_roc_and_pr_points_are_scikit_learns_and_give_its_areas(seed):
    y, scores = _data(500, seed, distinct=50)                   # fewer distinct scores than POINTS: every point
    curves = binary_curves(y, scores)
    fpr, tpr, _ = skm.roc_curve(y, scores, drop_intermediate=False)
    assert np.allclose(curves["roc"]["fpr"], fpr, atol=1e-6) and np.allclose(curves["roc"]["tpr"], tpr, atol=1e-6)
    assert np.trapezoid(curves["roc"]["tpr"], curves["roc"]["fpr"]) == pytest.approx(skm.roc_auc_score(y, scores),
                                                                                      abs=1e-5)
    precision, recall, _ = skm.precision_recall_curve(y, scores, drop_intermediate=False)
    # scikit-learn lists thresholds from the lowest and ends with (recall 0, precision 1)
    assert np.allclose(curves["pr"]["recall"], recall[:-1][::-1], atol=1e-6)
    assert np.allclose(curves["pr"]["precision"], precision[:-1][::-1], atol=1e-6)


def test_a_large_split_keeps_at_most_POINTS_exact_points():
    y, scores = _data(20_000, 7)
    curves = binary_curves(y, scores)
    assert len(curves["roc"]["fpr"]) <= POINTS + 1 and curves["roc"]["fpr"][-1] == 1.0
    fpr, tpr, _ = skm.roc_curve(y, scores, drop_intermediate=False)
    exact = set(zip(np.round(fpr, 6), np.round(tpr, 6)))
    assert all((round(a, 6), round(b, 6)) in exact for a, b in zip(curves["roc"]["fpr"], curves["roc"]["tpr"]))


def test_gain_lift_calibration_and_the_threshold_sweep():
    y, scores = _data(3000, 11)
    curves = binary_curves(y, scores)
    gain = curves["gain"]
    assert gain["fraction_rows"][-1] == 1.0 and gain["fraction_positives"][-1] == 1.0
    assert np.all(np.diff(gain["fraction_positives"]) >= 0)
    top = int(round(gain["fraction_rows"][5] * len(y)))          # positives among the top-k rows by score
    found = y[np.argsort(-scores, kind="stable")[:top]].sum() / y.sum()
    assert gain["fraction_positives"][5] == pytest.approx(found, abs=1e-6)
    assert curves["lift"]["lift"][-1] == pytest.approx(1.0)       # every row: the base rate
    prob_true, prob_pred = calibration_curve(y, scores, n_bins=10, strategy="uniform")
    assert np.allclose(curves["calibration"]["fraction_positive"], prob_true, atol=1e-6)
    assert np.allclose(curves["calibration"]["mean_score"], prob_pred, atol=1e-6)
    assert sum(curves["calibration"]["rows"]) == len(y)
    sweep = curves["thresholds"]
    for i in (0, 30, 49, 98):
        predicted = (scores >= SWEEP[i]).astype(int)
        if predicted.any():
            assert sweep["precision"][i] == pytest.approx(skm.precision_score(y, predicted), abs=1e-6)
        else:
            assert sweep["precision"][i] is None                  # undefined, drawn as a gap
        assert sweep["recall"][i] == pytest.approx(skm.recall_score(y, predicted), abs=1e-6)
        assert sweep["f1"][i] == pytest.approx(skm.f1_score(y, predicted), abs=1e-6)
        assert sweep["positive_rate"][i] == pytest.approx(predicted.mean(), abs=1e-6)


def test_precision_past_the_top_score_is_undefined():
    sweep = binary_curves(np.array([0, 1, 1, 0]), np.array([0.1, 0.4, 0.3, 0.2]))["thresholds"]
    assert sweep["precision"][SWEEP.tolist().index(0.4)] == 1.0
    assert sweep["precision"][SWEEP.tolist().index(0.41)] is None and sweep["recall"][-1] == 0.0


def test_one_class_split_has_no_roc_but_the_rest():
    curves = binary_curves(np.zeros(40), np.linspace(0, 1, 40))
    assert "roc" not in curves and "pr" not in curves and curves["positives"] == 0
    assert curves["calibration"]["fraction_positive"] == [0.0] * len(curves["calibration"]["rows"])


def test_regression_scatter_and_residuals():
    rng = np.random.default_rng(5)
    actual = rng.normal(size=5000) * 10
    predicted = actual + rng.normal(size=5000)
    predicted[3] = np.nan                                          # unusable rows are left out
    curves = regression_curves(actual, predicted)
    assert curves["rows"] == 4999
    pairs = set(zip(np.round(actual, 6), np.round(predicted, 6)))
    scatter = curves["scatter"]
    assert 1000 < len(scatter["actual"]) <= 2000 and np.all(np.diff(scatter["actual"]) >= 0)
    assert all((a, p) in pairs for a, p in zip(scatter["actual"], scatter["predicted"]))
    assert sum(curves["residuals"]["counts"]) == 4999
    assert curves["residuals"]["mean"] == pytest.approx(np.nanmean(predicted - actual))
