"""The one fit driver (pipeline.features.fitting) and the ops' typed states.

The driver must give exactly the states the op-by-op fit gives (each op fitted on the output
of every op before it), apply each op about once in memory, and workflow.json must keep its
format while states are validated on load.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.conftest import assert_nested_close

from pipeline.core.errors import DataError
from pipeline.features import OPS, FeatureWorkflow
from pipeline.features.ops import (
    Categorify, CategorifyState, Drop, EmptyState, FillMissing, FillMissingState, Log1p, OneHot, OneHotState,
    Standardize, StandardizeState,
)

ONE_HOT = ["gender", "Partner", "Dependents", "PhoneService", "PaperlessBilling", "InternetService",
           "OnlineSecurity", "OnlineBackup", "DeviceProtection", "TechSupport", "StreamingTV",
           "StreamingMovies"]
# Every op kind, with dependencies of each sort: on a filled column, on an indicator column
# known before fitting, and on a one-hot column named only after fitting (depends on all).
EVERY_KIND = [
    FillMissing(columns=["TotalCharges"], strategy="median", indicator=True),
    FillMissing(columns=["MultipleLines"], strategy="most_frequent"),
    FillMissing(columns=["SeniorCitizen"], strategy="constant", value=0),
    Log1p(columns=["TotalCharges"]),
    OneHot(columns=ONE_HOT + ["MultipleLines"], drop_binary=True, min_frequency=50),
    Categorify(columns=["Contract", "PaymentMethod"], max_categories=3),
    FillMissing(columns=["MonthlyCharges"], strategy="mean"),
    Standardize(columns=["tenure", "MonthlyCharges", "TotalCharges"]),
    Standardize(columns=["TotalCharges_missing"]),
    Standardize(columns=["gender=Male"]),
    Drop(columns=["customerID"]),
]
TEXT = ONE_HOT + ["MultipleLines", "Contract", "PaymentMethod", "customerID"]
# Phases whose views do not extend one another: phase 2's view is rebuilt from the input.
INTERLEAVED = [
    FillMissing(columns=["TotalCharges"], strategy="median"),      # phase 0
    Log1p(columns=["TotalCharges"]),                               # 1
    Standardize(columns=["tenure"]),                               # 0
    FillMissing(columns=["MonthlyCharges"], strategy="mean"),      # 0
    Standardize(columns=["MonthlyCharges"]),                       # 1
    Standardize(columns=["TotalCharges"]),                         # 2
    Drop(columns=TEXT),                                            # 0
]


def op_by_op(ops, frame, backend):
    """The reference fit: each op's statistics on the output of every op before it."""
    states = []
    for op in ops:
        state = op.fit(frame, backend)
        frame = op.transform(frame, backend, state)
        states.append(state)
    return states, frame


@pytest.fixture(scope="module")
def churn_features(telco_pandas) -> pd.DataFrame:
    return telco_pandas.drop(columns=["Churn"])


@pytest.mark.parametrize(("ops", "passes"), [(EVERY_KIND, 4), (INTERLEAVED, 3)], ids=["every-kind", "interleaved"])
def test_the_fit_driver_gives_the_op_by_op_states(churn_features, backend, ops, passes):
    frame = backend.from_pandas(churn_features)
    expected_states, expected = op_by_op(ops, frame, backend)
    wf = FeatureWorkflow(ops, backend=backend)
    out = wf.fit_transform(frame)
    assert wf.op_states_ == expected_states             # exactly: the same values, the same types
    assert [type(s) for s in wf.op_states_] == [op.state_model for op in ops]
    assert wf.passes_ == passes
    pd.testing.assert_frame_equal(backend.to_host(out), backend.to_host(expected))


def test_the_driver_fits_partitioned_frames_with_the_same_ops(churn_features):
    """The same driver on Dask: one pass per phase, states equal up to summation order."""
    import dask.dataframe as dd

    from pipeline.backends import get_backend
    from pipeline.features.fitting import fit_ops

    # Dask's median is approximate: the mean instead.
    ops = [FillMissing(columns=["TotalCharges"], strategy="mean", indicator=True), *EVERY_KIND[1:]]
    cpu = get_backend("cpu")
    expected, _ = op_by_op(ops, churn_features, cpu)
    fitted = fit_ops(ops, dd.from_pandas(churn_features, npartitions=4), cpu)
    assert fitted.passes == 4
    assert [type(s) for s in fitted.states] == [type(s) for s in expected]
    for got, want in zip(fitted.states, expected):
        assert_close(got.model_dump(mode="json"), want.model_dump(mode="json"))


def assert_close(a, b) -> None:
    """Equal, floats nearly: partial sums add up in another order, and the indicator column
    is float32 (its mean in float32 partial sums differs from pandas' in the 9th digit)."""
    assert_nested_close(a, b, rel=1e-6)


def test_each_op_is_applied_once_while_fitting_a_chain(monkeypatch):
    """Thirty ops, each depending on the one before: views are extended, not rebuilt, so the
    fit applies each op once (rebuilding from the input would apply 465 times)."""
    calls = []
    original = Standardize.transform

    def counted(self, frame, backend, state):
        calls.append(1)
        return original(self, frame, backend, state)

    monkeypatch.setattr(Standardize, "transform", counted)
    frame = pd.DataFrame({"x": np.arange(100, dtype="float64")})
    wf = FeatureWorkflow([Standardize(columns=["x"]) for _ in range(30)])
    wf.fit_transform(frame)
    assert wf.passes_ == 30
    assert len(calls) == 30


def test_ops_declare_written_columns_and_cardinalities():
    assert FillMissing(columns=["a"], indicator=True).written_columns() == {"a", "a_missing"}
    assert FillMissing(columns=["a"]).written_columns() == {"a"}
    assert OneHot(columns=["c"]).written_columns() == {"c"}
    categorify = Categorify(columns=["c"])
    assert categorify.categorical_cardinalities(CategorifyState(categories={"c": ["x", "y"]})) == {"c": 3}
    assert Standardize(columns=["a"]).categorical_cardinalities(StandardizeState(mean_std={"a": (0, 1)})) == {}


# ------------------------------------------------------------------ typed state and workflow.json
SMALL = pd.DataFrame({"num": [1.0, 2.0, np.nan, 4.0], "cat": ["a", "a", "b", None], "flag": [True, False, True, True]})
SMALL_OPS = [FillMissing(columns=["num"], indicator=True), FillMissing(columns=["cat"], strategy="most_frequent"),
             OneHot(columns=["cat"]), Categorify(columns=["flag"]), Standardize(columns=["num"]),
             Log1p(columns=["num_missing"])]
# workflow.json of SMALL_OPS fitted on SMALL, as format 1 has always written it.
SAVED = {
    "format_version": 1,
    "input_columns": {name: str(dtype) for name, dtype in SMALL.dtypes.items()},
    "output_columns": ["num", "num_missing", "flag", "cat=a", "cat=b"],
    "ops": [
        {"op": "fill_missing", "params": {"columns": ["num"], "strategy": "median", "value": None, "indicator": True},
         "state": {"fill": {"num": 2.0}}},
        {"op": "fill_missing",
         "params": {"columns": ["cat"], "strategy": "most_frequent", "value": None, "indicator": False},
         "state": {"fill": {"cat": "a"}}},
        {"op": "one_hot", "params": {"columns": ["cat"], "min_frequency": 1, "max_categories": None,
                                     "drop_binary": False},
         "state": {"categories": {"cat": ["a", "b"]}, "rare": {"cat": False}}},
        {"op": "categorify", "params": {"columns": ["flag"], "min_frequency": 1, "max_categories": None},
         "state": {"categories": {"flag": [True, False]}}},
        {"op": "standardize", "params": {"columns": ["num"]},
         "state": {"mean_std": {"num": [2.25, 1.0897247358851685]}}},
        {"op": "log1p", "params": {"columns": ["num_missing"]}, "state": {}},
    ],
}


def test_typed_states_round_trip_through_workflow_json(tmp_path):
    wf = FeatureWorkflow(SMALL_OPS).fit(SMALL)
    assert [type(s) for s in wf.op_states_] == [FillMissingState, FillMissingState, OneHotState, CategorifyState,
                                                StandardizeState, EmptyState]
    wf.save(tmp_path / "wf.json")
    assert json.loads((tmp_path / "wf.json").read_text()) == SAVED
    text = (tmp_path / "wf.json").read_text()
    assert text == json.dumps(wf.to_dict(), indent=2)  # the same bytes the format always had
    again = FeatureWorkflow.load(tmp_path / "wf.json")
    assert again.op_states_ == wf.op_states_ and again.states_ == wf.states_
    pd.testing.assert_frame_equal(again.transform(SMALL), wf.transform(SMALL))


def test_a_workflow_json_written_before_typed_states_loads(tmp_path):
    (tmp_path / "wf.json").write_text(json.dumps(SAVED, indent=2))
    wf = FeatureWorkflow.load(tmp_path / "wf.json")
    assert wf.op_states_[4] == StandardizeState(mean_std={"num": (2.25, 1.0897247358851685)})
    assert wf.op_states_[3].categories == {"flag": [True, False]}          # bools stay bools
    out = wf.transform(SMALL)
    assert list(out.columns) == SAVED["output_columns"]
    assert out["flag"].tolist() == [1, 2, 1, 1]


@pytest.mark.parametrize(("index", "state", "problem"), [
    (4, {"mean_std": {"num": "wide"}}, "mean_std.num"),
    (2, {"categories": {"cat": ["a"]}}, "rare"),
    (0, {"fill": {"num": 2.0}, "extra": 1}, "extra"),
    (5, None, "state"),
])
def test_a_bad_state_in_workflow_json_is_a_data_error_naming_the_op(tmp_path, index, state, problem):
    data = json.loads(json.dumps(SAVED))
    data["ops"][index]["state"] = state
    (tmp_path / "wf.json").write_text(json.dumps(data))
    op = data["ops"][index]["op"]
    with pytest.raises(DataError, match=rf"op {index + 1} \('{op}'\) has an invalid fitted state: .*{problem}"):
        FeatureWorkflow.load(tmp_path / "wf.json")


# ------------------------------------------------------------------ no op-kind checks
FEATURES = Path(__file__).resolve().parents[2] / "pipeline" / "features"


def op_kind_checks(source: str, kinds: set[str]) -> list[str]:
    """``isinstance(x, SomeOp)`` calls naming one of ``kinds`` (or a tuple holding one)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "isinstance" and len(node.args) == 2:
            named = node.args[1].elts if isinstance(node.args[1], ast.Tuple) else [node.args[1]]
            found += [f"line {node.lineno}: {n.id}" for n in named if isinstance(n, ast.Name) and n.id in kinds]
    return found


def test_nothing_in_the_features_package_asks_which_op_it_holds():
    kinds = {cls.__name__ for cls in OPS.values()}
    offenders = {str(path.relative_to(FEATURES)): op_kind_checks(path.read_text(), kinds)
                 for path in FEATURES.rglob("*.py")}
    assert {name: hits for name, hits in offenders.items() if hits} == {}


def test_the_op_kind_check_sees_one():
    assert op_kind_checks("if isinstance(op, (Drop, FillMissing)):\n    pass\n", {"FillMissing"}) == [
        "line 1: FillMissing"]


def test_an_op_adding_a_column_the_table_has_is_a_data_error_naming_the_op():
    """fill_missing's indicator 'x_missing' beside an input 'x_missing' (a table an earlier
    pipeline exported): the next op read two columns under one name, and `pipeline init`
    ended in an internal error (exit 1, AttributeError: 'DataFrame' object has no attribute 'dtype')."""
    frame = pd.DataFrame({"x": [1.0, None, 3.0, 4.0], "x_missing": [0.5, 0.1, 0.2, 0.3]})
    workflow = FeatureWorkflow([{"fill_missing": {"columns": ["x"], "indicator": True}},
                                {"standardize": {"columns": ["x_missing"]}}], backend="cpu")
    with pytest.raises(DataError, match=r"feature ops\[0\] \(fill_missing\) adds column\(s\) \['x_missing'\], "
                                        r"which the table already has"):
        workflow.fit_transform(frame)
