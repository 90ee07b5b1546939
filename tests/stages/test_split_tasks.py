"""Task types through ``split`` and the feature sets: the task declared or inferred from the
target, the labels per task (one-vs-rest binary, multiclass codes, regression numbers),
stratification where it applies, partitioned data, and the task surviving the stage cache."""

from __future__ import annotations

import logging

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

from pipeline.backends import get_backend
from pipeline.core.errors import ConfigError, DataError
from pipeline.stages import STAGE_KINDS, build_features, split_frame
from pipeline.stages.spec import StageContext
from pipeline.core.problems import BINARY, MAX_INFERRED_CLASSES, REGRESSION, Task

CPU = get_backend("cpu")
READMITTED = ["NO", ">30", "<30"]


def frame_of(target) -> pd.DataFrame:
    values = list(target)
    return pd.DataFrame({"y": values, "x": np.arange(len(values), dtype="float64")})


def every_row(data) -> pd.DataFrame:
    """The split's rows back in their original order (x is the row number)."""
    return pd.concat([CPU.to_host(f) for f in data.frames.values()]).sort_values("x").reset_index(drop=True)


# ------------------------------------------------------------------ inference
@pytest.mark.parametrize(("values", "positive", "expected"), [
    (["NO", ">30", "<30"] * 20, "<30", Task("binary", positive="<30")),     # positive: one-vs-rest
    ([True, False] * 30, None, BINARY),                                      # bool
    ([0, 1, 1] * 20, None, BINARY),                                          # 0/1
    ([0.0, 1.0, 1.0] * 20, None, BINARY),                                    # 0/1 as floats
    (list(np.linspace(0, 5, 60)), None, REGRESSION),                         # other numbers
    ([1, 2, 3] * 20, None, REGRESSION),                                      # integers too
    (READMITTED * 20, None, Task("multiclass", classes=("<30", ">30", "NO"))),
])
def test_the_task_is_inferred_from_the_target(values, positive, expected):
    data = split_frame(frame_of(values), "y", positive=positive, test=0.2, seed=1)
    assert data.task == expected


def test_a_category_target_is_multiclass_with_its_values_sorted():
    frame = frame_of(READMITTED * 20).astype({"y": "category"})
    data = split_frame(frame, "y", test=0.2, seed=1)
    assert data.task == Task("multiclass", classes=("<30", ">30", "NO"))


def test_classes_written_alike_are_named_in_a_warning(caplog):
    """'Yes', 'yes ' and ' YES' in one target made a five-class problem with no word of it."""
    with caplog.at_level(logging.WARNING, logger="pipeline"):
        data = split_frame(frame_of(["Yes", "No", "yes ", " YES", "No "] * 20), "y", test=0.2, seed=1)
    assert data.task.kind == "multiclass" and len(data.task.classes) == 5
    assert "classes that differ only in case or spaces (' YES', 'Yes', 'yes '; 'No', 'No ')" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="pipeline"):
        split_frame(frame_of(READMITTED * 20), "y", test=0.2, seed=1)
    assert "differ only in case" not in caplog.text


@pytest.mark.parametrize("values", [["yes", "no"] * 10, [1, 2] * 10, [0.5, 1.5] * 10])
def test_two_values_that_are_not_0_1_still_ask_which_is_positive(values):
    with pytest.raises(DataError, match=r"target column 'y' has values .*set positive: .*task: multiclass"):
        split_frame(frame_of(values), "y")


def test_too_many_text_values_to_be_classes_name_the_limit_and_task():
    values = [f"id-{i}" for i in range(MAX_INFERRED_CLASSES + 1)] * 2
    with pytest.raises(DataError, match=rf"'y' has more than {MAX_INFERRED_CLASSES} distinct values.*task: multiclass"):
        split_frame(frame_of(values), "y", stratify=False)
    declared = split_frame(frame_of(values), "y", task="multiclass", stratify=False, test=0.1)
    assert len(declared.task.classes) == MAX_INFERRED_CLASSES + 1     # declared: the user's limit


# ------------------------------------------------------------------ a declared task that contradicts the data
def test_a_declared_binary_task_with_three_values_and_no_positive_names_column_and_values():
    with pytest.raises(DataError, match=r"target column 'y' has values \['<30', '>30', 'NO'\]; set positive"):
        split_frame(frame_of(READMITTED * 10), "y", task="binary")


def test_a_declared_multiclass_task_with_one_class_names_column_and_values():
    with pytest.raises(DataError, match=r"multiclass needs at least 2 classes; target column 'y' has \['NO'\]"):
        split_frame(frame_of(["NO"] * 10), "y", task="multiclass")


def test_a_declared_regression_task_on_text_names_the_column():
    with pytest.raises(DataError, match="target column 'y' is .*task: regression needs numbers"):
        split_frame(frame_of(READMITTED * 10), "y", task="regression")


@pytest.mark.parametrize("task", [None, "regression"])
def test_a_constant_numeric_target_says_it_has_one_value(task):
    """7.5 in every row: inferred, it was "a binary classifier needs rows of both classes";
    declared regression, CatBoost failed the stage with "All train targets are equal"."""
    with pytest.raises(DataError, match=r"target column 'y' has one value, '7.5', in every row: a model needs"):
        split_frame(frame_of([7.5] * 40), "y", task=task)


def test_an_infinite_regression_target_is_refused_naming_the_column_and_first_row():
    """One inf among the labels: the run ended exit 0 with inf and NaN metrics, and its cached
    rerun failed formatting the null metrics.json held (exit 1)."""
    values = [1.5, 2.5, 3.0, 4.0] * 10
    values[5] = np.inf
    values[9] = -np.inf
    with pytest.raises(DataError, match=r"target column 'y' holds infinite values in 2 row\(s\) \(first at row 6, "
                                        r"inf\)"):
        split_frame(frame_of(values), "y")
    with pytest.raises(DataError, match="holds infinite values"):
        split_frame(frame_of(values), "y", task="regression")


@pytest.mark.parametrize("task", ["multiclas", "Multiclass", "auto"])
def test_a_misspelt_task_is_a_usage_error_not_another_task(task):
    """``task="multiclas"`` was ignored and the task inferred (regression, for 0/1/2 labels)."""
    from pipeline.core.errors import UsageError

    with pytest.raises(UsageError, match=f"split_frame task: '{task}' is not a task; use one of binary, multiclass, "
                                         "regression"):
        split_frame(frame_of([0, 1, 2] * 20), "y", task=task)


def test_a_positive_written_as_text_for_a_number_is_named_not_called_one_class():
    """positive="1" on a 0/1 integer target matched no row, and the error said the column has one
    class while it plainly has two."""
    with pytest.raises(DataError, match=r"positive: '1' is not a value of target column 'y', which holds 1 "
                                        r"\(a number\); write positive: 1"):
        split_frame(frame_of([0, 1] * 20), "y", positive="1")
    assert split_frame(frame_of([0, 1] * 20), "y", positive=1).task.positive == 1


def test_a_regression_target_with_missing_values_names_the_column():
    values = [1.5, 2.5, np.nan, 4.0] * 10
    with pytest.raises(DataError, match="target column 'y' has 10 missing values"):
        split_frame(frame_of(values), "y", task="regression")
    with pytest.raises(DataError, match="target column 'y' has 10 missing values"):
        split_frame(frame_of(values), "y")                               # inferred regression too


def test_positive_with_a_task_other_than_binary_is_a_config_error():
    with pytest.raises(ConfigError, match="positive: applies to task: binary"):
        split_frame(frame_of(READMITTED * 10), "y", task="multiclass", positive="NO")
    spec = STAGE_KINDS["split"].spec
    with pytest.raises(ValueError, match="positive: applies to task: binary"):
        spec(kind="split", inputs=["raw"], target="y", task="regression", positive=1)


# ------------------------------------------------------------------ labels per task
def test_one_vs_rest_labels_are_unchanged():
    values = READMITTED * 20
    data = split_frame(frame_of(values), "y", positive="<30", test=0.25, seed=3)
    rows = every_row(data)
    assert rows["y"].tolist() == [int(v == "<30") for v in values]
    assert all(str(f["y"].dtype) == "int8" for f in data.frames.values())
    assert data.task.decode(np.array([0, 1])).tolist() == [0, 1]


def test_multiclass_labels_are_codes_of_the_sorted_classes_and_decode_back():
    values = READMITTED * 20
    data = split_frame(frame_of(values), "y", test=0.25, valid=0.1, seed=3)
    assert data.task.classes == ("<30", ">30", "NO")
    rows = every_row(data)
    assert rows["y"].tolist() == [data.task.classes.index(v) for v in values]
    assert all(str(f["y"].dtype) == "int32" for f in data.frames.values())
    assert data.task.decode(rows["y"]).tolist() == values


def test_numeric_multiclass_codes_follow_the_numbers_order():
    values = [10, 2, 7] * 20
    data = split_frame(frame_of(values), "y", task="multiclass", test=0.25, seed=3)
    assert data.task.classes == (2, 7, 10)
    assert every_row(data)["y"].tolist() == [(2, 7, 10).index(v) for v in values]


def test_regression_labels_are_the_numbers_as_float64():
    """float32 labels kept 7 digits: 1e12 + 1e4 * a came back as two distinct values, and every
    model and metric used them."""
    values = list(np.random.default_rng(0).normal(50, 20, 200))
    data = split_frame(frame_of(values), "y", test=0.25, valid=0.1, seed=3)
    assert data.task == REGRESSION
    assert all(str(f["y"].dtype) == "float64" for f in data.frames.values())
    np.testing.assert_array_equal(every_row(data)["y"].to_numpy(), np.asarray(values, dtype="float64"))
    offset = [1e12 + 1e4 * v for v in values]
    exact = every_row(split_frame(frame_of(offset), "y", test=0.25, valid=0.1, seed=3))["y"].to_numpy()
    np.testing.assert_array_equal(exact, np.asarray(offset))
    assert len(np.unique(exact)) == len(np.unique(offset))


# ------------------------------------------------------------------ stratification
def test_a_stratified_multiclass_split_keeps_the_class_shares():
    values = ["a"] * 600 + ["b"] * 300 + ["c"] * 100
    data = split_frame(frame_of(values), "y", test=0.2, valid=0.1, seed=5)
    shares = {name: CPU.to_host(f["y"]).value_counts(normalize=True).sort_index().to_numpy()
              for name, f in data.frames.items()}
    for name, share in shares.items():
        np.testing.assert_allclose(share, [0.6, 0.3, 0.1], atol=0.011, err_msg=name)


def test_an_unstratified_multiclass_split_draws_other_shares():
    """The stratified shares above are the stratification's doing: with it off they drift."""
    values = ["a"] * 600 + ["b"] * 300 + ["c"] * 100
    drift = []
    for seed in range(5):
        data = split_frame(frame_of(values), "y", test=0.2, valid=0.1, seed=seed, stratify=False)
        share = CPU.to_host(data.frames["test"]["y"]).value_counts(normalize=True).sort_index().to_numpy()
        drift.append(np.abs(share - [0.6, 0.3, 0.1]).max())
    assert max(drift) > 0.011


def test_a_regression_split_is_random_and_keeps_every_row():
    values = list(np.arange(100.0))
    data = split_frame(frame_of(values), "y", test=0.2, valid=0.1, seed=5)    # stratify: true is ignored
    assert data.sizes() == {"train": 70, "valid": 10, "test": 20}
    again = split_frame(frame_of(values), "y", test=0.2, valid=0.1, seed=5, stratify=False)
    assert sorted(CPU.to_host(data.frames["test"]["x"])) == sorted(CPU.to_host(again.frames["test"]["x"]))


# ------------------------------------------------------------------ group and order_by for every task
def test_group_and_order_by_work_for_multiclass_and_regression():
    n = 300
    frame = pd.DataFrame({"x": np.arange(n, dtype="float64"), "g": np.arange(n) // 3, "t": np.arange(n)})
    frame["y"] = np.array(READMITTED * (n // 3))
    data = split_frame(frame, "y", group="g", test=0.2, valid=0.1, seed=2)
    groups = [set(CPU.to_host(f["g"])) for f in data.frames.values()]
    assert not (groups[0] & groups[1]) and not (groups[0] & groups[2]) and not (groups[1] & groups[2])
    assert data.task.kind == "multiclass"
    frame["y"] = np.arange(n) * 0.5
    timed = split_frame(frame, "y", order_by="t", test=0.2, valid=0.1, seed=2)
    assert timed.task == REGRESSION
    assert CPU.to_host(timed.frames["train"]["t"]).max() < CPU.to_host(timed.frames["test"]["t"]).min()


def test_a_class_missing_from_the_training_split_is_named():
    n = 100
    values = ["a", "b"] * 40 + ["c"] * 20                                     # c only in the newest rows
    frame = pd.DataFrame({"y": values, "t": np.arange(n), "x": np.arange(n, dtype="float64")})
    with pytest.raises(DataError, match=r"target column 'y' has no rows of class \['c'\] in the training split"):
        split_frame(frame, "y", order_by="t", test=0.2)


def test_the_one_class_check_does_not_apply_to_regression():
    frame = pd.DataFrame({"y": np.arange(40) * 1.0, "t": np.arange(40), "x": np.zeros(40)})
    assert split_frame(frame, "y", order_by="t", test=0.25).task == REGRESSION


# ------------------------------------------------------------------ partitioned data
def test_partitioned_multiclass_and_regression_label_each_partition():
    values = READMITTED * 40
    frame = dd.from_pandas(frame_of(values), npartitions=4)
    data = split_frame(frame, "y", test=0.2, seed=3)
    assert data.task == Task("multiclass", classes=("<30", ">30", "NO"))
    rows = every_row(data)
    assert rows["y"].tolist() == [data.task.classes.index(v) for v in values] and rows["y"].dtype == "int32"
    numbers = list(np.linspace(-3, 3, 120))
    data = split_frame(dd.from_pandas(frame_of(numbers), npartitions=4), "y", test=0.2, seed=3)
    assert data.task == REGRESSION
    np.testing.assert_array_equal(every_row(data)["y"].to_numpy(), np.asarray(numbers, dtype="float64"))


def test_partitioned_inference_counts_classes_across_partitions():
    """Each partition holds 30 values; together they hold more than the inferable classes."""
    values = [f"v{i}" for i in range(240)]
    frame = dd.from_pandas(frame_of(values), npartitions=8)
    with pytest.raises(DataError, match=f"more than {MAX_INFERRED_CLASSES} distinct values"):
        split_frame(frame, "y")


def test_partitioned_declared_multiclass_reads_every_class_and_a_missing_target_is_named():
    frame = dd.from_pandas(frame_of([f"v{i}" for i in range(240)]), npartitions=8)
    assert len(split_frame(frame, "y", task="multiclass").task.classes) == 240
    gap = dd.from_pandas(frame_of([1.0, np.nan, 3.0, 4.0] * 10), npartitions=2)
    with pytest.raises(DataError, match="target column 'y' has missing values"):
        every_row(split_frame(gap, "y", task="regression"))


def test_partitioned_binary_without_positive_labels_as_before():
    values = [0, 1, 1, 0] * 30
    data = split_frame(dd.from_pandas(frame_of(values), npartitions=3), "y", test=0.2, seed=3)
    assert data.task == BINARY
    assert every_row(data)["y"].tolist() == values


def test_partitioned_multiclass_features_on_a_local_cluster_keep_the_task(tmp_path):
    from distributed import Client, LocalCluster

    from pipeline.features.ops import Standardize

    rng = np.random.default_rng(0)
    pdf = pd.DataFrame({"a": rng.normal(size=400), "y": rng.choice(READMITTED, 400)})
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster):
        data = split_frame(dd.from_pandas(pdf, npartitions=4), "y", test=0.25, seed=3)
        features = build_features(data, [Standardize(columns=["a"])], output_dir=tmp_path)
        assert features.task == data.task == Task("multiclass", classes=("<30", ">30", "NO"))
        labels = np.concatenate([features.labels(s) for s in ("train", "valid", "test")])
    assert labels.dtype == np.int32 and sorted(set(labels.tolist())) == [0, 1, 2]
    assert len(labels) == 400


# ------------------------------------------------------------------ the stage and the feature sets
def run_split_stage(spec_fields: dict, frame: pd.DataFrame, caplog) -> tuple[object, StageContext]:
    kind = STAGE_KINDS["split"]
    ctx = StageContext(backend=CPU, seed=4, stage="split", logger=logging.getLogger("pipeline.test_tasks"))
    spec = kind.spec(kind="split", inputs=["raw"], **spec_fields)
    with caplog.at_level(logging.INFO, logger="pipeline.test_tasks"):
        return kind.run(spec, ctx, {"raw": frame}), ctx


def test_the_split_stage_records_the_task_and_logs_an_inferred_one(caplog):
    data, ctx = run_split_stage({"target": "y"}, frame_of(READMITTED * 20), caplog)
    assert ctx.facts["task"] == {"kind": "multiclass", "classes": ["<30", ">30", "NO"]}
    assert "inferred" in caplog.text and "multiclass (3 classes" in caplog.text
    caplog.clear()
    data, ctx = run_split_stage({"target": "y", "task": "regression"}, frame_of(np.arange(60.0)), caplog)
    assert ctx.facts["task"] == {"kind": "regression"} and "inferred" not in caplog.text


@pytest.mark.parametrize(("values", "dtype"), [(READMITTED * 30, "int32"), (list(np.arange(90.0)), "float64"),
                                               (["yes", "no", "no"] * 30, "int32")])
def test_in_memory_features_carry_the_task_and_its_label_dtype(backend, values, dtype):
    frame = backend.from_pandas(frame_of(values))
    positive = "yes" if "yes" in values else None
    data = split_frame(frame, "y", positive=positive, test=0.2, valid=0.1, seed=1, backend=backend)
    features = build_features(data, [])
    assert features.task == data.task
    assert all(str(y.dtype) == dtype for y in features.y.values())


def test_a_feature_set_restored_from_the_stage_cache_keeps_its_task(tmp_path):
    from pipeline.cache import StageCache

    data = split_frame(frame_of(READMITTED * 30), "y", test=0.2, seed=1)
    features = build_features(data, [])
    cache = StageCache(tmp_path / ".cache")
    cache.store("k" * 32, features, None, {"stage": "features"})
    restored = cache.lookup("k" * 32).load_output()
    assert restored.task == features.task == Task("multiclass", classes=("<30", ">30", "NO"))
    np.testing.assert_array_equal(restored.y["train"], features.y["train"])


def test_a_regression_target_large_against_its_spread_is_named_for_float32_models(caplog):
    values = [1e12 + 1e4 * v for v in np.random.default_rng(0).normal(0, 1, 200)]
    with caplog.at_level("WARNING", logger="pipeline"):
        split_frame(frame_of(values), "y", test=0.25, seed=3)
        split_frame(frame_of([v - 1e12 for v in values]), "y", test=0.25, seed=3)
    warned = [r.getMessage() for r in caplog.records if "large against their spread" in r.getMessage()]
    assert len(warned) == 1 and "target column 'y'" in warned[0] and "XGBoost, LightGBM, CatBoost, ridge" in warned[0]
    assert "random forests" in warned[0]


def test_catboost_on_labels_float32_holds_as_one_value_is_the_data_problem_it_is():
    """CatBoost stopped with "catboost/libs/metrics/metric.cpp:7011: All train targets are
    equal" (exit 4) about labels that differ by thousands around 1e12."""
    from pipeline.models.catboost_estimators import CatBoostRegressor

    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 2)).astype("float32")
    quiet = {"iterations": 5, "verbose": False, "allow_writing_files": False}     # no catboost_info/ here
    with pytest.raises(DataError, match=r"CatBoost holds labels as float32, in which they are all one value; "
                                        r"subtract a constant"):
        CatBoostRegressor(**quiet).fit(X, 1e12 + 1e3 * X[:, 0].astype("float64"))
    fitted = CatBoostRegressor(**quiet).fit(X, 1e3 * X[:, 0].astype("float64"))
    assert fitted.predict(X).std() > 0
