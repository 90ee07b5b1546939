from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from pipeline.core.errors import DataError
from pipeline.features import (
    Categorify, Drop, FeatureWorkflow, FillMissing, Log1p, OneHot, Standardize,
)

TRAIN = pd.DataFrame({
    "num": [1.0, 2.0, np.nan, 4.0, 100.0],
    "cat": ["a", "a", "b", "c", None],
    "big": [0.0, 1.0, 3.0, 7.0, 15.0],
})
TEST = pd.DataFrame({"num": [np.nan, 3.0], "cat": ["z", "b"], "big": [1.0, np.nan]})


def run(backend, ops, train=TRAIN, test=TEST):
    wf = FeatureWorkflow(ops, backend=backend)
    fitted = backend.to_host(wf.fit_transform(backend.from_pandas(train)))
    applied = backend.to_host(wf.transform(backend.from_pandas(test)))
    return wf, fitted, applied


def test_fill_missing_uses_training_median_and_adds_indicator(backend):
    ops = [FillMissing(columns=["num", "big"], strategy="median", indicator=True), Drop(columns=["cat"])]
    wf, fitted, applied = run(backend, ops)
    assert wf.states_[0]["fill"] == {"num": 3.0, "big": 3.0}
    assert applied["num"].tolist() == [3.0, 3.0]
    assert applied["num_missing"].tolist() == [1.0, 0.0]
    assert list(fitted.columns) == ["num", "num_missing", "big", "big_missing"]


def test_fill_missing_constant_and_most_frequent(backend):
    ops = [FillMissing(columns=["num"], strategy="constant", value=-1),
           FillMissing(columns=["cat"], strategy="most_frequent"), OneHot(columns=["cat"]), Drop(columns=["big"])]
    wf, fitted, _ = run(backend, ops)
    assert fitted["num"].tolist()[2] == -1
    assert wf.states_[1]["fill"] == {"cat": "a"}
    assert fitted["cat=a"].tolist() == [1.0, 1.0, 0.0, 0.0, 1.0]


def test_constant_needs_value():
    with pytest.raises(ValueError, match="needs a 'value'"):
        FillMissing(columns=["x"], strategy="constant")


def test_one_hot_unseen_is_all_zero_and_rare_bucket(backend):
    ops = [OneHot(columns=["cat"], min_frequency=2), Drop(columns=["num", "big"])]
    wf, fitted, applied = run(backend, ops)
    assert list(fitted.columns) == ["cat=a", "cat=__rare__"]
    assert fitted["cat=__rare__"].tolist() == [0.0, 0.0, 1.0, 1.0, 0.0]  # None is missing, not rare
    assert applied.to_dict("list") == {"cat=a": [0.0, 0.0], "cat=__rare__": [1.0, 1.0]}


def test_one_hot_drop_binary_keeps_one_column(backend):
    frame = pd.DataFrame({"yn": ["Yes", "No", "Yes"]})
    wf, fitted, _ = run(backend, [OneHot(columns=["yn"], drop_binary=True)], frame, frame)
    assert list(fitted.columns) == ["yn=Yes"]
    assert fitted["yn=Yes"].tolist() == [1.0, 0.0, 1.0]


def test_categorify_orders_by_frequency_and_zero_is_unknown(backend):
    ops = [Categorify(columns=["cat"]), Drop(columns=["num", "big"])]
    wf, fitted, applied = run(backend, ops)
    assert wf.states_[0]["categories"]["cat"] == ["a", "b", "c"]
    assert fitted["cat"].tolist() == [1, 1, 2, 3, 0]
    assert applied["cat"].tolist() == [0, 2]
    assert wf.categorical_cardinalities() == {"cat": 4}


def test_categorify_min_frequency_sends_rare_to_zero(backend):
    wf, fitted, _ = run(backend, [Categorify(columns=["cat"], min_frequency=2), Drop(columns=["num", "big"])])
    assert fitted["cat"].tolist() == [1, 1, 0, 0, 0]


def test_standardize_uses_training_statistics(backend):
    frame = pd.DataFrame({"x": [1.0, 2.0, 3.0, 4.0]})
    wf, fitted, applied = run(backend, [Standardize(columns=["x"])], frame, pd.DataFrame({"x": [2.5]}))
    assert np.isclose(fitted["x"].mean(), 0) and np.isclose(fitted["x"].std(ddof=0), 1)
    assert applied["x"].tolist() == [0.0]


def test_standardize_constant_column_does_not_divide_by_zero(backend):
    frame = pd.DataFrame({"x": [5.0, 5.0]})
    _, fitted, _ = run(backend, [Standardize(columns=["x"])], frame, frame)
    assert fitted["x"].tolist() == [0.0, 0.0]


def test_log1p_and_its_domain(backend):
    frame = pd.DataFrame({"x": [0.0, np.e - 1]})
    _, fitted, _ = run(backend, [Log1p(columns=["x"])], frame, frame)
    assert np.allclose(fitted["x"], [0.0, 1.0])
    with pytest.raises(DataError, match="<= -1"):
        run(backend, [Log1p(columns=["x"])], pd.DataFrame({"x": [-2.0]}), frame)


def test_a_value_outside_log1ps_domain_when_scoring_names_its_row(backend):
    """predict said "log1p: column 'total_rooms' has values <= -1 (min -5.0)" naming no row, and
    the server's 422 named no rows[i].field."""
    from pipeline.core.errors import RowsError

    frame = pd.DataFrame({"x": [0.0, np.e - 1]})
    workflow = FeatureWorkflow([Log1p(columns=["x"])], backend=backend).fit(frame)
    with pytest.raises(RowsError, match=r"min -5.0, first at row 3: -2.0\), outside the domain") as caught:
        workflow.transform(pd.DataFrame({"x": [1.0, 2.0, -2.0, -5.0]}))
    assert caught.value.rows == (("x", 2, "-2.0 is <= -1, outside log1p's domain (it was fitted on values above -1)"),)


def test_a_value_past_float32_says_to_scale_at_fit_and_to_check_the_row_when_scoring():
    """At scoring, "scale it with standardize or log1p" was said of a column already standardized."""
    from pipeline.core.errors import RowsError

    frame = pd.DataFrame({"x": [1.0, 2.0, 3.0]})
    workflow = FeatureWorkflow([Standardize(columns=["x"])]).fit(frame)
    with pytest.raises(RowsError, match=r"in the input after the feature ops \(first at row 2: .*\), and the models "
                                        r"read float32; the training rows stayed within it, so this row is far "
                                        r"outside them: check its value"):
        workflow.transform(pd.DataFrame({"x": [1.0, 1e308]}))
    with pytest.raises(RowsError, match=r"in the training split .*; scale it with standardize or log1p"):
        FeatureWorkflow([]).fit_transform(pd.DataFrame({"x": [1.0, 1e300]}))


def test_a_missing_value_no_op_fills_names_its_first_row_and_what_to_do_at_scoring():
    """At scoring, "add these columns to a fill_missing op" was the advice for a model already
    fitted, and no row was named."""
    from pipeline.core.errors import RowsError

    workflow = FeatureWorkflow([Standardize(columns=["x"])]).fit(pd.DataFrame({"x": [1.0, 2.0, 3.0]}))
    with pytest.raises(RowsError, match=r"missing values remain in the input after the feature ops: \{'x': 1\} "
                                        r"\(first: 'x' at row 3\); the fitted workflow fills none there"):
        workflow.transform(pd.DataFrame({"x": [1.0, 2.0, np.nan]}))
    with pytest.raises(RowsError, match=r"in the training split .*\(first: 'x' at row 2\); add these columns to a "
                                        r"fill_missing op"):
        FeatureWorkflow([]).fit_transform(pd.DataFrame({"x": [1.0, np.nan]}))


def test_workflow_state_is_json_and_reloads_identically(backend, tmp_path):
    ops = [FillMissing(columns=["num", "big"]), Categorify(columns=["cat"]), Standardize(columns=["num"]),
           Log1p(columns=["big"])]
    wf, _, applied = run(backend, ops)
    wf.save(tmp_path / "wf.json")
    json.loads((tmp_path / "wf.json").read_text())
    reloaded = FeatureWorkflow.load(tmp_path / "wf.json", backend="cpu")  # any device applies it
    again = reloaded.transform(TEST)
    pd.testing.assert_frame_equal(again.reset_index(drop=True), applied.reset_index(drop=True), check_dtype=False)


def test_text_columns_left_over_are_named():
    with pytest.raises(DataError, match=r"\['cat'\].*one_hot or categorify"):
        FeatureWorkflow([FillMissing(columns=["num", "big"])]).fit(TRAIN)


def test_missing_values_left_over_are_named():
    with pytest.raises(DataError, match="'num': 1"):
        FeatureWorkflow([Drop(columns=["cat"]), FillMissing(columns=["big"])]).fit(TRAIN)


def test_missing_input_column_is_named():
    wf = FeatureWorkflow([Drop(columns=["cat"]), FillMissing(columns=["num"])]).fit(TRAIN)
    with pytest.raises(DataError, match=r"missing column\(s\) \['big'\]"):
        wf.transform(TEST.drop(columns=["big"]))
    with pytest.raises(DataError, match=r"column\(s\) \['nope'\] not in the data"):
        FeatureWorkflow([Standardize(columns=["nope"])]).fit(TRAIN)


def test_transform_before_fit_is_an_error():
    from pipeline.core.errors import UsageError

    with pytest.raises(UsageError, match="not fitted"):
        FeatureWorkflow([Drop(columns=["cat"])]).transform(TEST)


def test_yaml_form_builds_the_same_ops():
    wf = FeatureWorkflow([{"standardize": {"columns": ["num"]}}, {"drop": {"columns": ["cat"]}}])
    assert [type(op) for op in wf.ops] == [Standardize, Drop]
    with pytest.raises(ValueError, match="unknown feature op 'scale'"):
        FeatureWorkflow([{"scale": {"columns": ["num"]}}])
