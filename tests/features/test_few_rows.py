"""The few-rows path (NumPy columns, ``backends.few_rows``) gives the frame path's bits: every
registered op on its own, and whole workflows into the model's matrix, on random rows with
missing values, unseen categories and extreme numbers; an error is the same error."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pipeline import FeatureWorkflow
from pipeline.backends import backend_for, get_backend
from pipeline.backends.few_rows import FEW_ROWS, Column, ColumnFrame, FewRowsBackend
from pipeline.core.dtypes import dtype_kind
from pipeline.core.problems import Task
from pipeline.features.ops import OPS
from pipeline.features.ops.op_base import Target
from pipeline.testing.ops import sample_target

CPU = get_backend("cpu")
LEVELS = ["a", "b", "c", "d", "e"]


def training_frame(rows: int, seed: int) -> pd.DataFrame:
    """The conformance kit's sample columns (num, count, cat, flag, when, until), more rows."""
    rng = np.random.default_rng(seed)
    num = rng.normal(3, 2, rows)
    num[rng.random(rows) < 0.1] = np.nan
    cat = pd.array(rng.choice(LEVELS, rows, p=[0.4, 0.3, 0.2, 0.08, 0.02]), dtype="str")
    cat[rng.random(rows) < 0.1] = None
    when = pd.Series(pd.to_datetime("2020-01-01") + pd.to_timedelta(rng.integers(0, 900, rows), unit="D"))
    when[rng.random(rows) < 0.1] = pd.NaT
    return pd.DataFrame({
        "num": num, "count": rng.integers(0, 30, rows).astype("int64"), "cat": cat,
        "flag": rng.random(rows) < 0.6, "when": when,
        "until": pd.Series(pd.to_datetime("2022-01-01") + pd.to_timedelta(rng.integers(0, 9, rows), unit="h")),
    })


def scoring_rows(rows: int, seed: int) -> pd.DataFrame:
    """New rows as a served request brings them: missing values, an unseen level, large and
    tiny numbers, a count past the training range."""
    frame = training_frame(rows, seed)
    rng = np.random.default_rng(seed + 100)
    frame.loc[rng.random(rows) < 0.2, "cat"] = "never-seen"
    frame.loc[rng.random(rows) < 0.2, "num"] = rng.choice([1e12, -1e12, 1e-300, 0.0, -0.0])
    frame.loc[rng.random(rows) < 0.1, "count"] = 10**6
    return frame


def same(got, expected, where: str) -> None:
    """Column for column: the same names in order, numbers to the bit (NaN where NaN), text and
    dates equal with missing where missing."""
    got, expected = FewRowsBackend().to_host(got), expected
    assert list(got.columns) == list(expected.columns), where
    for name in expected.columns:
        a, b = got[name].to_numpy(), expected[name].to_numpy()
        kind = dtype_kind(expected[name].dtype)
        if kind in ("float", "integer", "bool"):
            assert a.dtype == b.dtype, (where, name, a.dtype, b.dtype)
            assert np.array_equal(a.view(np.uint8), b.view(np.uint8)), (where, name, a, b)
        else:
            missing = pd.isna(b)
            assert (pd.isna(a) == missing).all(), (where, name)
            assert list(a[~missing]) == list(b[~missing]), (where, name)


def outcome(call):
    try:
        return call(), None
    except Exception as exc:  # noqa: BLE001 - compared below
        return None, exc


@pytest.mark.parametrize("name", sorted(n for n, op in OPS.items() if op.example is not None))
@pytest.mark.parametrize("rows", [1, 3, 40])
def test_every_op_gives_the_frame_paths_bits_on_few_rows(name, rows):
    op = OPS[name](**OPS[name].example)
    train = training_frame(400, seed=1)
    target = Target.of(sample_target(len(train)), CPU, Task("binary"))
    state = op.fit(train, CPU, target)
    for seed in range(4):
        frame = scoring_rows(rows, seed)
        expected, error = outcome(lambda: op.transform(frame, CPU, state))
        few = ColumnFrame.of(frame)
        got, few_error = outcome(lambda: op.transform(few, backend_for(few), state))
        if error is not None:
            assert type(few_error) is type(error) and str(few_error) == str(error), (name, seed)
            continue
        assert few_error is None, (name, seed, few_error)
        same(got, expected, f"{name}, seed {seed}")


@pytest.mark.parametrize("task", ["binary", "multiclass", "regression"])
def test_a_workflow_of_many_ops_gives_the_same_matrix_bit_for_bit(task):
    train = training_frame(600, seed=3)
    rng = np.random.default_rng(4)
    labels = {"binary": rng.integers(0, 2, 600), "multiclass": rng.integers(0, 3, 600),
              "regression": rng.normal(size=600)}[task]
    ops = [
        {"date_diff": {"columns": ["when"], "until": "until", "unit": "days"}},
        {"date_parts": {"columns": ["until"], "parts": ["year", "month", "dayofweek", "week", "hour"]}},
        {"fill_missing": {"columns": ["num", "when_days"], "strategy": "median", "indicator": True}},
        {"clip": {"columns": ["num"], "lower": 0.01, "upper": 0.99}},
        {"standardize": {"columns": ["num", "when_days"]}},
        {"quantile_bin": {"columns": ["num"], "bins": 5}},
        {"log1p": {"columns": ["count"]}},
        {"hash_encode": {"columns": ["count"], "buckets": 16}},
        {"target_encode": {"columns": ["cat"], "keep": True}},
        {"frequency_encode": {"columns": ["flag"]}},
        {"group_rare": {"columns": ["cat"], "min_frequency": 30}},
        {"one_hot": {"columns": ["cat"]}},
    ]
    workflow = FeatureWorkflow(ops)
    task_of = Task("multiclass", classes=(0, 1, 2)) if task == "multiclass" else Task(task)
    workflow.fit_transform(train, labels, task=task_of)
    for rows in (1, 5, FEW_ROWS):
        frame = scoring_rows(rows, seed=rows)
        frame.loc[frame["num"].abs() > 1e6, "num"] = 7.0          # within float32 after the ops
        expected = CPU.to_matrix(workflow.transform(frame))
        few = ColumnFrame.of(frame)
        out = workflow.transform(few)
        assert backend_for(few) is not CPU and isinstance(out, ColumnFrame)
        got = backend_for(out).to_matrix(out)
        assert got.dtype == expected.dtype and got.shape == expected.shape
        assert np.array_equal(got.view(np.uint32), expected.view(np.uint32)), (task, rows)


def test_errors_name_the_same_column_and_row_on_both_paths():
    workflow = FeatureWorkflow([{"fill_missing": {"columns": ["num"], "strategy": "mean"}},
                                {"standardize": {"columns": ["num"]}}, {"drop": {"columns": ["cat", "when", "until"]}},
                                {"categorify": {"columns": ["flag"]}}])
    workflow.fit_transform(training_frame(200, seed=5))
    frame = scoring_rows(3, seed=6)
    frame.loc[1, "num"] = np.inf
    _, error = outcome(lambda: workflow.transform(frame))
    _, few_error = outcome(lambda: workflow.transform(ColumnFrame.of(frame)))
    assert error is not None and "row 2" in str(error)
    assert type(few_error) is type(error) and str(few_error) == str(error)


def test_a_column_answers_as_pandas_does_where_numpy_would_differ():
    values = Column(np.array([1.0, np.nan, 3.0]))
    assert values.min() == 1.0 and values.max() == 3.0                    # NaN skipped, as pandas does
    assert values.isna().tolist() == [False, True, False]
    assert values.fillna(0.5).tolist() == [1.0, 0.5, 3.0]
    assert (values > 2).any() is np.True_ or bool((values > 2).any())    # a scalar, not a 0-d column
    text = Column(np.array(["a", None, "b"], dtype=object))
    assert text.isin(["a"]).tolist() == [True, False, False]
    assert text.where(text.isin(["a"]) | text.isna(), "rare").tolist() == ["a", None, "rare"]
    with pytest.raises(ValueError):                                       # NaN into integers: pandas refuses
        values.astype("int64")
    assert isinstance(values.astype("float32"), Column)
