"""Three GPU defects, reproduced on the CPU where the CPU can show them.

- fill_missing's mean/median into an integer column with nulls: cuDF keeps such a column
  int64 (pandas' nullable ``Int64`` behaves the same) and refuses a non-integral fill.
- The GPU feature matrix must be row-major like the CPU's: the fill is one function over the
  array module, run here with NumPy.
- logistic regression's ``l1_ratio`` only acts with ``penalty: elasticnet``; anything else is
  refused at validation, and elasticnet translates for scikit-learn (saga) and cuML.
"""

from __future__ import annotations

import importlib.util
import warnings

import numpy as np
import pandas as pd
import pytest

from pipeline.backends import available_devices, get_backend
from pipeline.config import load_config
from pipeline.core.errors import ConfigError
from pipeline.features import FeatureWorkflow, FillMissing
from pipeline.models import get_model_spec
from pipeline.models.catalogue import linear as linear_entries
from pipeline.tensors.handoff import matrix_handoff

# ----------------------------------------------------------------- 4: fill_missing dtypes
# The same training column three ways: nullable Int64 (a Parquet file written from nullable
# ints, and what cuDF holds), NumPy float64 with NaN (pandas reading a CSV), and cuDF's int64.
INTS_WITH_NULLS = [1, 2, None, 3, 4]          # median and mean 2.5: not an integer


def _fitted(backend, frame: pd.DataFrame, ops) -> tuple[FeatureWorkflow, pd.DataFrame]:
    workflow = FeatureWorkflow(ops, backend=backend)
    out = backend.to_host(workflow.fit_transform(backend.from_pandas(frame)))
    return workflow, out


@pytest.mark.parametrize("strategy", ["median", "mean"])
def test_statistic_fills_a_nullable_int_column_as_float64(backend, strategy):
    frame = pd.DataFrame({"n": pd.array(INTS_WITH_NULLS, dtype="Int64")})
    workflow, out = _fitted(backend, frame, [FillMissing(columns=["n"], strategy=strategy)])
    assert workflow.states_[0]["fill"] == {"n": 2.5}
    assert str(out["n"].dtype) == "float64"
    assert out["n"].tolist() == [1.0, 2.0, 2.5, 3.0, 4.0]


def test_nullable_ints_from_parquet_fill_like_ints_from_csv(tmp_path):
    """The CPU's two readings of one integer column with a gap give one dtype and one value."""
    cpu = get_backend("cpu")
    written = pd.DataFrame({"n": pd.array(INTS_WITH_NULLS, dtype="Int64"), "k": 0})
    written.to_parquet(tmp_path / "n.parquet")
    written.to_csv(tmp_path / "n.csv", index=False)
    from_parquet, from_csv = (cpu.read(tmp_path / name, columns=["n"]) for name in ("n.parquet", "n.csv"))
    assert str(from_parquet["n"].dtype) == "Int64" and str(from_csv["n"].dtype) == "float64"
    outs = [_fitted(cpu, f, [FillMissing(columns=["n"], strategy="median")])[1] for f in (from_parquet, from_csv)]
    pd.testing.assert_frame_equal(outs[0], outs[1])


def test_statistic_fill_dtype_does_not_depend_on_the_split_having_nulls(backend):
    """A split without nulls comes out float64 too: scoring data keeps the training dtype."""
    train = pd.DataFrame({"n": pd.array(INTS_WITH_NULLS, dtype="Int64")})
    workflow, fitted = _fitted(backend, train, [FillMissing(columns=["n"], strategy="median")])
    for complete in (pd.array([5, 6], dtype="Int64"), np.array([5, 6], dtype="int64")):
        applied = backend.to_host(workflow.transform(backend.from_pandas(pd.DataFrame({"n": complete}))))
        assert str(applied["n"].dtype) == str(fitted["n"].dtype) == "float64"
        assert applied["n"].tolist() == [5.0, 6.0]


def test_reloaded_workflow_fills_with_the_same_dtype(backend, tmp_path):
    """The fill's type survives workflow.json, so a reloaded workflow casts the same way."""
    frame = pd.DataFrame({"n": pd.array(INTS_WITH_NULLS, dtype="Int64")})
    workflow, fitted = _fitted(backend, frame, [FillMissing(columns=["n"], strategy="median")])
    workflow.save(tmp_path / "workflow.json")
    again = FeatureWorkflow.load(tmp_path / "workflow.json", backend=backend)
    pd.testing.assert_frame_equal(backend.to_host(again.transform(backend.from_pandas(frame))), fitted)


def test_constant_fill_casts_only_for_a_float_value(backend):
    frame = pd.DataFrame({"a": pd.array(INTS_WITH_NULLS, dtype="Int64"),
                          "b": pd.array(INTS_WITH_NULLS, dtype="Int64")})
    ops = [FillMissing(columns=["a"], strategy="constant", value=0.5),
           FillMissing(columns=["b"], strategy="constant", value=0)]
    _, out = _fitted(backend, frame, ops)
    assert str(out["a"].dtype) == "float64" and out["a"].tolist()[2] == 0.5
    assert pd.api.types.is_integer_dtype(out["b"].dtype) and out["b"].tolist()[2] == 0


def test_filled_int_column_reaches_the_matrix(backend):
    frame = pd.DataFrame({"n": pd.array(INTS_WITH_NULLS, dtype="Int64"), "x": [0.5] * 5})
    workflow = FeatureWorkflow([FillMissing(columns=["n"])], backend=backend)
    matrix = backend.to_matrix(workflow.fit_transform(backend.from_pandas(frame)))
    assert np.asarray(backend.to_host(matrix))[:, 0].tolist() == [1.0, 2.0, 2.5, 3.0, 4.0]


# ----------------------------------------------------------------- 5: row-major matrices
def test_row_major_matrix_fills_columns_into_a_c_contiguous_array():
    from pipeline.backends.matrices import row_major_matrix

    frame = pd.DataFrame({"f": np.arange(4, dtype="float64") / 2, "i": np.arange(4, dtype="int8"),
                          "b": [True, False, True, False]})
    matrix = row_major_matrix(np, len(frame), list(frame.columns), lambda name: frame[name].to_numpy(), "float32")
    assert matrix.flags.c_contiguous and not matrix.flags.f_contiguous
    assert matrix.dtype == np.float32 and matrix.shape == (4, 3)
    np.testing.assert_array_equal(matrix, frame.to_numpy(dtype="float32"))


def test_row_major_matrix_of_no_columns_or_rows():
    from pipeline.backends.matrices import row_major_matrix

    assert row_major_matrix(np, 3, [], lambda name: None, "float32").shape == (3, 0)
    assert row_major_matrix(np, 0, ["a"], lambda name: np.empty(0), "int64").shape == (0, 1)


def test_to_matrix_is_row_major_and_its_record_counts_one_copy(backend):
    frame = backend.from_pandas(pd.DataFrame({"a": [1.0, 2.0, 3.0], "b": [4, 5, 6], "c": [7.0, 8.0, 9.0]}))
    matrix = backend.to_matrix(frame, columns=["c", "a"], dtype="float32")
    assert matrix.flags.c_contiguous and matrix.shape == (3, 2)
    assert np.asarray(backend.to_host(matrix)).tolist() == [[7.0, 1.0], [8.0, 2.0], [9.0, 3.0]]
    record = matrix_handoff("train.X", frame[["c", "a"]], matrix, backend)
    assert record.bytes_copied == matrix.nbytes == 3 * 2 * 4
    assert "row-major" in record.note


@pytest.mark.gpu
@pytest.mark.skipif("gpu" not in available_devices(), reason="needs an NVIDIA GPU with RAPIDS installed")
def test_gpu_feature_matrix_is_c_contiguous():
    gpu = get_backend("gpu")
    frame = gpu.from_pandas(pd.DataFrame({"a": np.arange(1000, dtype="float64"), "b": np.arange(1000),
                                          "c": np.arange(1000, dtype="float32")}))
    matrix = gpu.to_matrix(frame, dtype="float32")
    assert matrix.flags.c_contiguous and not matrix.flags.f_contiguous
    assert gpu.data_address(matrix) == gpu.to_torch(matrix).data_ptr()
    np.testing.assert_array_equal(gpu.to_host(matrix), gpu.to_host(frame).to_numpy(dtype="float32"))


# ----------------------------------------------------------------- 7: l1_ratio / penalty
def _train_config(params: str) -> str:
    return ("name: t\nstages:\n  raw:\n    kind: load\n    path: data.csv\n"
            "  split:\n    kind: split\n    inputs: [raw]\n    target: y\n"
            "  f:\n    kind: features\n    inputs: [split]\n"
            f"  logreg:\n    kind: train\n    inputs: [f]\n    model: logistic_regression\n    params: {params}\n")


@pytest.mark.parametrize("params", ["{l1_ratio: 0.5}", "{l1_ratio: 0.5, penalty: l2}", "{l1_ratio: 1, penalty: l1}"])
def test_l1_ratio_without_elasticnet_is_refused_naming_stage_and_key(params):
    with pytest.raises(ConfigError) as info:
        load_config(text=_train_config(params))
    (issue,) = info.value.issues
    assert issue.path == "stages.logreg.params" and issue.line == 17
    assert "l1_ratio" in issue.message and "penalty: elasticnet" in issue.message


@pytest.mark.parametrize(("params", "words"), [
    ({"penalty": "elasticnet"}, "needs l1_ratio"),
    ({"penalty": "elasticnet", "l1_ratio": 1.5}, "between 0 and 1"),
    ({"penalty": "elasticnet", "l1_ratio": 0.5, "solver": "lbfgs"}, "solver 'saga'"),
    ({"penalty": "ridge"}, "'l1', 'l2', 'elasticnet'"),
])
def test_penalty_combinations_that_cannot_work_are_refused(params, words):
    problems = get_model_spec("logistic_regression").check_params(params)
    assert len(problems) == 1 and words in problems[0]


def test_elasticnet_is_accepted_by_validation():
    config = load_config(text=_train_config("{penalty: elasticnet, l1_ratio: 0.5, C: 0.1}"))
    assert config.stages["logreg"].params == {"penalty": "elasticnet", "l1_ratio": 0.5, "C": 0.1}


def test_elasticnet_translates_for_cuml():
    """cuML 26.10 takes penalty and l1_ratio by name and has only solver='qn'."""
    gpu, dropped = get_model_spec("logistic_regression").translate(
        {"penalty": "elasticnet", "l1_ratio": 0.3, "solver": "saga"}, "gpu", seed=1)
    assert gpu["penalty"] == "elasticnet" and gpu["l1_ratio"] == 0.3
    assert "solver" not in gpu and dropped == ["solver"]


@pytest.mark.parametrize(("params", "l1_ratio"), [
    ({"penalty": "elasticnet", "l1_ratio": 0.3}, 0.3), ({"penalty": "l1"}, 1.0), ({"penalty": "l2"}, 0.0),
])
def test_penalty_translates_for_scikit_learn_from_1_8(monkeypatch, params, l1_ratio):
    """scikit-learn 1.8 deprecated ``penalty`` (gone in 1.10): l1_ratio alone says it."""
    monkeypatch.setattr(linear_entries, "_sklearn_version", lambda: (1, 9))
    cpu, _ = get_model_spec("logistic_regression").translate(params, "cpu", seed=1)
    assert "penalty" not in cpu and cpu["l1_ratio"] == l1_ratio
    assert cpu.get("solver") == ("saga" if l1_ratio else None)


def test_penalty_translates_for_scikit_learn_before_1_8(monkeypatch):
    monkeypatch.setattr(linear_entries, "_sklearn_version", lambda: (1, 7))
    cpu, _ = get_model_spec("logistic_regression").translate({"penalty": "elasticnet", "l1_ratio": 0.3}, "cpu", seed=1)
    assert cpu["penalty"] == "elasticnet" and cpu["l1_ratio"] == 0.3 and cpu["solver"] == "saga"


def test_user_solver_is_kept():
    cpu, _ = get_model_spec("logistic_regression").translate({"penalty": "l1", "solver": "liblinear"}, "cpu", seed=1)
    assert cpu["solver"] == "liblinear"


def _features():
    from pipeline.stages import build_features, split_frame

    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 6))
    frame = pd.DataFrame(x, columns=[f"x{i}" for i in range(6)])
    frame["y"] = (x[:, 0] + 0.5 * x[:, 1] + rng.normal(scale=0.5, size=400) > 0).astype(int)
    data = split_frame(frame, "y", test=0.25, seed=0, backend="cpu")
    return build_features(data, [])


def test_elasticnet_trains_on_the_cpu_through_train_model():
    from pipeline.stages import train_model

    features = _features()
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # no deprecation or "l1_ratio unused" warning
        net = train_model(features, "logistic_regression", {"penalty": "elasticnet", "l1_ratio": 0.9, "C": 0.05})
        ridge = train_model(features, "logistic_regression", {"C": 0.05})
    got = net.estimator.get_params()
    assert got["solver"] == "saga" and got["l1_ratio"] == 0.9 and net.ignored_params == []
    # The L1 part zeroes the noise features; the default L2 penalty does not.
    assert (net.estimator.coef_ == 0).sum() > (ridge.estimator.coef_ == 0).sum()
    assert 0.0 <= net.scores["test"].min() <= net.scores["test"].max() <= 1.0


def test_l1_ratio_without_elasticnet_is_refused_by_train_model():
    from pipeline.stages import train_model

    with pytest.raises(ValueError, match="l1_ratio.*penalty: elasticnet"):
        train_model(_features(), "logistic_regression", {"l1_ratio": 0.5})


@pytest.mark.skipif(importlib.util.find_spec("cuml") is None, reason="needs cuML installed")
def test_elasticnet_binds_to_cumls_logistic_regression():
    """Construction needs no GPU: the translated keywords are cuML's own."""
    from cuml.linear_model import LogisticRegression

    gpu, _ = get_model_spec("logistic_regression").translate({"penalty": "elasticnet", "l1_ratio": 0.3}, "gpu", seed=1)
    got = LogisticRegression(**gpu).get_params()
    assert got["penalty"] == "elasticnet" and got["l1_ratio"] == 0.3 and got["solver"] == "qn"
