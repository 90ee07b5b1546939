"""Bad data ends in a DataError (exit 3) that names the column, the file or the path.

Each test reproduces one defect found by feeding adversarial inputs to ``run`` and
``predict``: a target with one class, repeated column names, values near the float limits,
empty or unreadable inputs, infinities, and predict input read differently from training.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from tests.support.cli import run_cli as _pipeline
from pipeline.backends import get_backend
from pipeline.core.errors import DataError, ExitCode
from pipeline.features import Categorify, Drop, FeatureWorkflow, FillMissing, Log1p, OneHot, Standardize
from pipeline.stages import load_table, split_frame
from tests.conftest import TELCO, working_directory

CPU = get_backend("cpu")


# ------------------------------------------------------------------ the target (split)
@pytest.mark.parametrize(("labels", "positive"), [([1] * 8, None), (["Yes"] * 8, "Yes"), ([0] * 8, None)])
def test_a_target_with_one_class_names_the_column_and_the_counts(labels, positive):
    frame = pd.DataFrame({"y": labels, "x": range(8)})
    with pytest.raises(DataError, match=r"target column 'y' has one class.*8"):
        split_frame(frame, "y", positive=positive)


def test_a_one_value_text_target_says_so_not_which_value_is_positive():
    frame = pd.DataFrame({"y": ["Yes"] * 8, "x": range(8)})
    with pytest.raises(DataError, match=r"target column 'y' has one value, 'Yes', in every row"):
        split_frame(frame, "y", task="binary")


def test_a_label_that_differs_from_positive_only_in_case_or_spaces_is_named(caplog):
    """One-vs-rest counts ``yes`` as 0 beside ``positive: "Yes"``: most likely the same class
    written another way, so the run says so (it trained on them as negatives without a word)."""
    frame = pd.DataFrame({"y": ["Yes", "No", "yes", " Yes", "No", "Yes", "No", "No"] * 4, "x": range(32)})
    with caplog.at_level("WARNING", logger="pipeline"):
        split_frame(frame, "y", positive="Yes", stratify=False)
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any("' Yes', 'yes' differ(s) from positive: 'Yes' only in case or spaces" in m for m in warned), warned
    caplog.clear()
    with caplog.at_level("WARNING", logger="pipeline"):
        split_frame(frame.assign(y=frame["y"].str.strip().str.title()), "y", positive="Yes", stratify=False)
    assert not [r for r in caplog.records if "only in case" in r.getMessage()]


def test_a_target_with_only_missing_values_names_the_column():
    frame = pd.DataFrame({"y": [np.nan] * 4, "x": range(4)})
    with pytest.raises(DataError, match="target column 'y' has 4 missing values"):
        split_frame(frame, "y")


def test_a_class_too_small_to_stratify_names_the_column_and_the_counts():
    frame = pd.DataFrame({"y": [0] * 9 + [1], "x": range(10)})
    with pytest.raises(DataError, match=r"'y'.*\{0: 9, 1: 1\}"):
        split_frame(frame, "y", test=0.2)
    # The class by its value, not scikit-learn's position among the labels ("[3]").
    classes = pd.DataFrame({"y": ["hi"] * 40 + ["lo"] * 40 + ["rare"] * 2, "x": range(82)})
    with pytest.raises(DataError, match=r"'rare' has too few; add rows of it, .* or set stratify: false") as info:
        split_frame(classes, "y", test=0.2, valid=0.1)
    assert "[2]" not in str(info.value)


def test_an_empty_table_and_a_missing_target_are_named():
    with pytest.raises(DataError, match="no rows"):
        split_frame(pd.DataFrame({"y": pd.Series([], dtype="int64")}), "y")
    with pytest.raises(DataError, match="target column 'Churn' not in the data"):
        split_frame(pd.DataFrame({"y": [0, 1]}), "Churn")


# ------------------------------------------------------------------ reading files
def test_repeated_column_names_in_a_csv_name_the_columns_and_the_file(tmp_path):
    path = tmp_path / "dup.csv"
    path.write_text("tenure,x,tenure\n1,2,3\n4,5,6\n")
    with pytest.raises(DataError, match=r"dup\.csv.*'tenure'.*more than once"):
        load_table(path)


def test_repeated_column_names_in_a_parquet_file_are_named(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "dup.parquet"
    pq.write_table(pa.table([pa.array([1, 2]), pa.array([3, 4])], names=["tenure", "tenure"]), path)
    with pytest.raises(DataError, match=r"dup\.parquet.*'tenure'.*more than once"):
        load_table(path)


def test_a_filter_comparing_text_with_a_number_names_the_filter(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("a,b\nx,1\ny,2\n")
    with pytest.raises(DataError, match=r"t\.csv: filter \['a', '>', 1\] cannot compare column 'a'"):
        load_table(path, filters=[("a", ">", 1)])


def test_an_op_output_named_like_an_input_column_is_named():
    frame = pd.DataFrame({"c": ["a", "b"], "c=a": [1.0, 2.0]})
    with pytest.raises(DataError, match=r"feature ops\[0\] \(one_hot\) adds column\(s\) \['c=a'\], which the "
                                        r"table already has"):
        FeatureWorkflow([OneHot(columns=["c"])]).fit(frame)


def test_an_empty_folder_names_the_path(tmp_path):
    folder = tmp_path / "incoming"
    folder.mkdir()
    with pytest.raises(DataError, match=rf"no \.parquet files in {folder}"):
        load_table(folder)
    (folder / "notes.txt").write_text("x")
    with pytest.raises(DataError, match=rf"no \.parquet files in {folder}"):
        load_table(folder)
    with pytest.raises(DataError, match=rf"{folder} is a folder"):
        load_table(folder, format="csv")


def test_a_partitioned_read_of_nothing_names_the_pattern(tmp_path):
    with pytest.raises(DataError, match=r"no files match .*\*\.csv"):
        CPU.read_partitioned(str(tmp_path / "*.csv"))
    with pytest.raises(DataError, match=rf"no \.parquet files in {tmp_path}"):
        CPU.read_partitioned(tmp_path)


@pytest.mark.parametrize("partitioned", [False, True], ids=["in-memory", "partitioned"])
def test_na_values_apply_to_a_parquet_files_text_as_to_a_csvs(tmp_path, partitioned):
    """A table exported to Parquet with ' ' for a missing number holds it as text; na_values was
    ignored for Parquet (and the error then said to add ' ' to na_values, where it already was)."""
    rows = pd.DataFrame({"charges": ["1.5", " ", "2.5"], "plan": ["a", " ", "b"], "n": [1, 2, 3]})
    folder = tmp_path / "parts"
    folder.mkdir()
    for part in ("a", "b"):
        rows.to_parquet(folder / f"{part}.parquet", index=False)
    how = {"na_values": [" "], "dtypes": {"charges": "float64"}}
    frame = (CPU.read_partitioned(folder, **how).compute() if partitioned
             else CPU.read(folder / "a.parquet", **how))
    assert frame["charges"].dtype == "float64" and frame["charges"].isna().sum() == frame["plan"].isna().sum() > 0
    assert frame["n"].tolist()[:3] == [1, 2, 3]


@pytest.mark.parametrize("bad", ["renamed", "empty", "text", "csv-renamed"])
def test_a_partitioned_part_unlike_the_first_is_named_with_what_differs(tmp_path, bad):
    """A fourth Parquet part with tenure renamed, or of 0 bytes, failed in the features stage
    ("KeyError: ['tenure'] not in index", "Parquet file size is 0 bytes", exit 4) naming
    neither the file nor the column: Dask takes the columns from the first part."""
    rows = pd.DataFrame({"tenure": [1, 2, 3], "plan": ["a", "b", "c"]})
    ext = "csv" if bad.startswith("csv") else "parquet"
    for i in range(3):
        (rows.to_csv if ext == "csv" else rows.to_parquet)(tmp_path / f"part-{i}.{ext}", index=False)
    last = tmp_path / f"part-3.{ext}"
    if bad == "empty":
        last.write_bytes(b"")
    elif bad == "text":
        rows.astype({"tenure": str}).to_parquet(last, index=False)
    elif ext == "csv":
        rows.rename(columns={"tenure": "Tenure"}).to_csv(last, index=False)
    else:
        rows.rename(columns={"tenure": "Tenure"}).to_parquet(last, index=False)
    words = {"renamed": r"part-3\.parquet: its columns differ .* it lacks \['tenure'\]; it has \['Tenure'\]",
             "csv-renamed": r"part-3\.csv: its columns differ .* it lacks \['tenure'\]",
             "empty": r"cannot read .*part-3\.parquet as parquet",
             "text": r"part-3\.parquet: column 'tenure' holds text here and numbers in .*part-0\.parquet"}[bad]
    source = str(tmp_path / "*.csv") if ext == "csv" else tmp_path
    with pytest.raises(DataError, match=words):
        CPU.read_partitioned(source)


@pytest.mark.parametrize(("content", "problem"), [
    (b"", "empty"),
    (b"\x00\x01\x02\xff\xfe\x00binary\x00", "not a text CSV"),
    (b"a,b\n1,2\n3,4,5\n", "line 3"),
])
def test_unreadable_csv_files_name_the_file(tmp_path, content, problem):
    path = tmp_path / "bad.csv"
    path.write_bytes(content)
    with pytest.raises(DataError, match=rf"bad\.csv.*{problem}") as info:
        load_table(path)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("columns", [None, ["a", "b"]])
def test_a_row_with_more_fields_than_the_header_is_refused_whatever_is_read(tmp_path, columns):
    path = tmp_path / "ragged.csv"
    path.write_text("a,b,c\n1,2,3\n4,5,6,7\n8,9,10\n")
    with pytest.raises(DataError, match="ragged.csv") as caught:
        get_backend("cpu").read(path, columns=columns)
    assert "4" in str(caught.value)       # the field count (all columns) or the row (some)


def test_quoted_separators_and_blank_lines_read_when_some_columns_are_read(tmp_path):
    path = tmp_path / "fine.csv"
    path.write_text('a,b,c\n1,"x,y",3\n\n7,8,9\n')
    frame = get_backend("cpu").read(path, columns=["a", "b"])
    assert frame["a"].tolist() == [1, 7] and frame["b"].tolist() == ["x,y", "8"]


def test_a_short_row_is_refused_not_filled_with_missing_values(tmp_path):
    """pandas fills a line cut short with NaN, which a fill_missing op then fills as unknown."""
    path = tmp_path / "cut.csv"
    path.write_text('a,b,c\n1,"x,y",3\n4,5\n\n7,8,9\n')
    with pytest.raises(DataError, match=r"cut\.csv: line 3 has 2 fields where the header has 3"):
        get_backend("cpu").read(path, columns=["a", "b"])


def test_a_binary_parquet_file_names_the_file(tmp_path):
    path = tmp_path / "bad.parquet"
    path.write_bytes(b"PAR1 not really")
    with pytest.raises(DataError, match=r"bad\.parquet"):
        load_table(path)


# ------------------------------------------------------------------ the run: exit 3, not 4 or 1
def write_project(tmp_path: Path, frame: pd.DataFrame, *, load: dict | None = None) -> Path:
    frame.to_csv(tmp_path / "data.csv", index=False)
    config = {
        "name": "hard", "device": "cpu", "seed": 1,
        "stages": {
            "raw": {"kind": "load", "path": "data.csv", **(load or {})},
            "split": {"kind": "split", "inputs": ["raw"], "target": "y", "test": 0.25, "stratify": False},
            "features": {"kind": "features", "inputs": ["split"], "ops": [{"standardize": {"columns": ["x"]}}]},
            "logreg": {"kind": "train", "inputs": ["features"], "model": "logistic_regression"},
        },
    }
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    return tmp_path / "config.yaml"


def run_cli(config: Path) -> subprocess.CompletedProcess[str]:
    return _pipeline("run", config, "--runs-dir", "runs", cwd=config.parent, env={"COLUMNS": "200"})


@pytest.mark.slow
def test_a_one_class_target_fails_the_run_in_split_with_exit_3(tmp_path):
    config = write_project(tmp_path, pd.DataFrame({"y": [1] * 20, "x": np.arange(20.0)}))
    proc = run_cli(config)
    assert proc.returncode == ExitCode.DATA, proc.stderr
    assert "target column 'y' has one class" in proc.stderr


def test_a_table_without_rows_fails_the_load_stage(tmp_path):
    from pipeline import run_pipeline

    config = write_project(tmp_path, pd.DataFrame({"y": [0, 1], "x": [1.0, 2.0]}),
                           load={"filters": [["x", ">", 5]]})
    with working_directory(tmp_path), pytest.raises(DataError, match=r"data\.csv.*no rows.*filters") as info:
        run_pipeline(config, runs_dir=tmp_path / "runs")
    assert getattr(info.value, "stage", None) == "raw"
    (tmp_path / "data.csv").write_text("y,x\n")
    with working_directory(tmp_path), pytest.raises(DataError, match=r"data\.csv.*no rows"):
        run_pipeline(config, runs_dir=tmp_path / "runs")


def test_one_class_left_in_the_training_split_is_named():
    frame = pd.DataFrame({"y": [0] * 9 + [1], "x": range(10)})
    # Unstratified, seed 0 puts the one positive row in the test split.
    for seed in range(50):
        try:
            data = split_frame(frame, "y", test=0.3, stratify=False, seed=seed)
        except DataError as exc:
            assert "training split" in str(exc) and "'y'" in str(exc)
            return
        assert data.frames["train"]["y"].nunique() == 2
    pytest.fail("no seed put the only positive row outside the training split")


# ------------------------------------------------------------------ fitting near the float limits
def test_standardize_fits_values_near_1e200_stably(tmp_path):
    frame = pd.DataFrame({"x": [1e200, 2e200, 3e200, 4e200]})
    wf = FeatureWorkflow([Standardize(columns=["x"])])
    out = wf.fit_transform(frame)
    mean, std = wf.op_states_[0].mean_std["x"]
    assert mean == pytest.approx(2.5e200) and std == pytest.approx(np.std([1.0, 2.0, 3.0, 4.0]) * 1e200)
    np.testing.assert_allclose(out["x"], (np.arange(1, 5) - 2.5) / np.std([1, 2, 3, 4]))
    wf.save(tmp_path / "wf.json")
    json.loads((tmp_path / "wf.json").read_text(), parse_constant=lambda c: pytest.fail(f"{c} in workflow.json"))


def test_values_at_the_float64_limit_still_standardize():
    frame = pd.DataFrame({"x": [-1.7e308, 1.7e308, 0.0]})      # the variance is far above the limit
    out = FeatureWorkflow([Standardize(columns=["x"])]).fit_transform(frame)
    np.testing.assert_allclose(out["x"], [-1.2247449, 1.2247449, 0.0], rtol=1e-6)


def test_a_statistic_that_is_not_a_finite_number_names_the_column_and_the_op():
    frame = pd.DataFrame({"x": [np.nan, np.nan], "z": [1.0, 2.0]})
    with pytest.raises(DataError, match=r"standardize: the mean of column 'x' .* is nan.*no values"):
        FeatureWorkflow([Standardize(columns=["x"])]).fit(frame)
    with pytest.raises(DataError, match=r"standardize: the mean of column 'z' .* is inf"):
        Standardize(columns=["z"]).fit(pd.DataFrame({"z": [1.0, np.inf]}), CPU)   # the op alone


def test_fill_missing_mean_of_huge_values_is_finite():
    frame = pd.DataFrame({"x": [1.5e308, 1.5e308, np.nan]})
    wf = FeatureWorkflow([FillMissing(columns=["x"], strategy="mean"), Log1p(columns=["x"])]).fit(frame)
    assert wf.op_states_[0].fill["x"] == pytest.approx(1.5e308)


def test_infinity_in_training_input_names_the_column_and_the_row():
    frame = pd.DataFrame({"x": [1.0, 2.0, np.inf, 4.0], "c": ["a", "b", "a", "b"]})
    for ops in ([Standardize(columns=["x"]), OneHot(columns=["c"])], [OneHot(columns=["c", "x"])],
                [OneHot(columns=["c"])]):
        with pytest.raises(DataError, match=r"'x'.*infinite.*row 3"):
            FeatureWorkflow(ops).fit(frame)


def test_infinity_in_a_dropped_column_is_not_read():
    frame = pd.DataFrame({"x": [1.0, 2.0, np.inf, 4.0], "z": [1.0, 2.0, 3.0, 4.0]})
    wf = FeatureWorkflow([Drop(columns=["x"])]).fit(frame)
    assert wf.output_columns_ == ["z"]


def test_values_beyond_float32_reaching_the_matrix_are_named():
    frame = pd.DataFrame({"x": [1.0, 1e200, 3.0]})
    with pytest.raises(DataError, match=r"'x'.*float32.*\(first at row 2: 1e\+200\).*standardize or log1p"):
        FeatureWorkflow([]).fit(frame)
    FeatureWorkflow([Log1p(columns=["x"])]).fit(frame)                # within range after the op
    scored = FeatureWorkflow([]).fit(frame.assign(x=[1.0, 2.0, 3.0]))
    with pytest.raises(DataError, match=r"'x'.*in the input after the feature ops \(first at row 3: -1e\+300\)"):
        scored.transform(pd.DataFrame({"x": [1.0, 2.0, -1e300]}))


def test_log1p_of_values_at_or_below_minus_one_at_transform_names_the_column():
    wf = FeatureWorkflow([Log1p(columns=["x"])]).fit(pd.DataFrame({"x": [0.0, 1.0]}))
    with pytest.raises(DataError, match=r"log1p.*'x'.*<= -1"):
        wf.transform(pd.DataFrame({"x": [0.0, -3.0]}))


def test_a_constant_fill_must_be_finite():
    with pytest.raises(ValueError, match="finite"):
        FillMissing(columns=["x"], strategy="constant", value=float("inf"))


def test_workflow_json_never_holds_infinity(tmp_path):
    frame = pd.DataFrame({"x": [1.0, 2.0]})
    wf = FeatureWorkflow([Standardize(columns=["x"])]).fit(frame)
    data = wf.to_dict()
    data["ops"][0]["state"]["mean_std"]["x"] = [float("inf"), 1.0]
    (tmp_path / "wf.json").write_text(json.dumps(data))                 # hand-edited: Infinity
    with pytest.raises(DataError, match=r"op 1 \('standardize'\).*mean_std\.x"):
        FeatureWorkflow.load(tmp_path / "wf.json")
    object.__setattr__(wf.op_states_[0], "mean_std", {"x": (float("nan"), 1.0)})   # past validation
    with pytest.raises(DataError, match=r"standardize.*'x'.*not a finite number"):
        wf.save(tmp_path / "again.json")
    assert not (tmp_path / "again.json").exists()


# ------------------------------------------------------------------ missing values in categories
@pytest.mark.parametrize("missing", [None, np.nan])
def test_missing_categories_are_no_category_at_fit_and_at_transform(backend, missing):
    train = pd.DataFrame({"c": ["a", "b", missing, "a"], "d": ["x", missing, "y", "x"]})
    wf = FeatureWorkflow([OneHot(columns=["c"], min_frequency=2), Categorify(columns=["d"])], backend=backend)
    fitted = backend.to_host(wf.fit_transform(backend.from_pandas(train)))
    assert wf.op_states_[0].categories == {"c": ["a"]} and wf.op_states_[1].categories == {"d": ["x", "y"]}
    assert fitted["c=a"].tolist() == [1.0, 0.0, 0.0, 1.0]
    assert fitted["c=__rare__"].tolist() == [0.0, 1.0, 0.0, 0.0]      # missing is not rare: all zeros
    assert fitted["d"].tolist() == [1, 0, 2, 1]                          # missing is code 0
    test = pd.DataFrame({"c": [missing, "z"], "d": [missing, "z"]})
    out = backend.to_host(wf.transform(backend.from_pandas(test)))
    assert out.to_dict("list") == {"c=a": [0.0, 0.0], "c=__rare__": [0.0, 1.0], "d": [0, 0]}


def test_a_constant_fill_gives_missing_values_a_category_of_their_own(backend):
    train = pd.DataFrame({"c": ["a", None, "a"]})
    wf = FeatureWorkflow([FillMissing(columns=["c"], strategy="constant", value="missing"), OneHot(columns=["c"])],
                         backend=backend)
    fitted = backend.to_host(wf.fit_transform(backend.from_pandas(train)))
    assert fitted.to_dict("list") == {"c=a": [1.0, 0.0, 1.0], "c=missing": [0.0, 1.0, 0.0]}


def test_a_nan_key_in_category_counts_is_not_a_category():
    from pipeline.features.ops import OneHot as Op

    state = Op(columns=["c"]).fit_from({"c": pd.Series({1.0: 3, float("nan"): 2})}, CPU)
    assert state.categories == {"c": [1.0]}


# ------------------------------------------------------------------ predict
@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A run trained on Telco rows with a label-side column that the features drop."""
    from pipeline import run_pipeline

    project = tmp_path_factory.mktemp("hard_predict")
    raw = pd.read_csv(TELCO, dtype=str, keep_default_na=False).iloc[:1200]
    raw["FutureSpend"] = np.arange(len(raw)).astype(str)
    raw.to_csv(project / "train.csv", index=False)
    config = {
        "name": "hard", "device": "cpu", "seed": 3,
        "stages": {
            "raw": {"kind": "load", "path": "train.csv", "na_values": [" "], "dtypes": {"customerID": "str"}},
            "split": {"kind": "split", "inputs": ["raw"], "target": "Churn", "positive": "Yes", "test": 0.2},
            "features": {"kind": "features", "inputs": ["split"], "id": "customerID", "ops": [
                {"drop": {"columns": ["FutureSpend", "gender"]}},
                {"fill_missing": {"columns": ["TotalCharges"], "strategy": "median"}},
                {"one_hot": {"columns": ["Contract", "PaymentMethod"]}},
                {"categorify": {"columns": ["InternetService"]}},
                {"drop": {"columns": ["Partner", "Dependents", "PhoneService", "MultipleLines", "OnlineSecurity",
                                      "OnlineBackup", "DeviceProtection", "TechSupport", "StreamingTV",
                                      "StreamingMovies", "PaperlessBilling"]}},
                {"standardize": {"columns": ["tenure", "MonthlyCharges", "TotalCharges"]}},
            ]},
            "logreg": {"kind": "train", "inputs": ["features"], "model": "logistic_regression"},
            "evaluate": {"kind": "evaluate", "inputs": ["logreg"]},
            "export": {"kind": "export", "inputs": ["logreg"]},
        },
    }
    (project / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    with working_directory(project):
        result = run_pipeline(project / "config.yaml", runs_dir=project / "runs")
    return Path(result.run_dir)


def scoring_rows(run_dir: Path) -> pd.DataFrame:
    """The run's test rows as the CSV has them, then the Telco rows whose TotalCharges is a
    blank " ", without the target and without columns the features drop."""
    project = run_dir.parents[2]
    raw = pd.read_csv(project / "train.csv", dtype=str, keep_default_na=False)
    ids = pd.read_parquet(run_dir / "export" / "predictions.parquet")["customerID"]
    rows = raw.set_index("customerID").loc[ids].reset_index()
    telco = pd.read_csv(TELCO, dtype=str, keep_default_na=False)
    rows = pd.concat([rows, telco[telco["TotalCharges"] == " "]], ignore_index=True)
    return rows.drop(columns=["Churn", "FutureSpend", "gender", "StreamingTV"])


def test_the_workflow_needs_only_the_columns_its_features_read(run_dir):
    workflow = json.loads((run_dir / "export" / "models" / "logreg" / "workflow.json").read_text())
    assert set(workflow["input_columns"]) == {"SeniorCitizen", "tenure", "MonthlyCharges", "TotalCharges",
                                              "Contract", "PaymentMethod", "InternetService"}


def test_predict_reads_input_as_training_did_and_without_dropped_columns(run_dir, tmp_path):
    from pipeline.predict.batch import predict_batch

    rows = scoring_rows(run_dir)
    assert (rows["TotalCharges"] == " ").any()                      # the blank placeholder is there
    source = tmp_path / "new.csv"
    rows.to_csv(source, index=False)
    predict_batch(run_dir, source, tmp_path / "scores.parquet")      # no na_values: the run's own
    scores = pd.read_parquet(tmp_path / "scores.parquet")
    expected = pd.read_parquet(run_dir / "export" / "predictions.parquet")
    assert scores["customerID"].tolist()[:len(expected)] == expected["customerID"].tolist()
    np.testing.assert_allclose(scores["score"][:len(expected)], expected["score_logreg"], rtol=0, atol=1e-6)
    predict_batch(run_dir, source, tmp_path / "explicit.parquet", na_values=[" "])
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "explicit.parquet"), scores)
    # A flag overrides the run's options: without " " the blank makes TotalCharges text.
    with pytest.raises(DataError, match=r"'TotalCharges'.*--na-values"):
        predict_batch(run_dir, source, tmp_path / "other.parquet", na_values=["?"])
    assert not (tmp_path / "other.parquet").exists()


@pytest.mark.parametrize("text", ["inf", "-inf", "Infinity", "-Infinity"])
def test_infinite_values_in_predict_input_name_the_column_and_the_row(run_dir, tmp_path, text):
    from pipeline.predict.batch import predict_batch

    rows = scoring_rows(run_dir)
    rows.loc[4, "MonthlyCharges"] = text
    source = tmp_path / "new.csv"
    rows.to_csv(source, index=False)
    with pytest.raises(DataError, match=r"new\.csv.*'MonthlyCharges'.*infinite.*row 5"):
        predict_batch(run_dir, source, tmp_path / "scores.csv")
    assert not (tmp_path / "scores.csv").exists()


@pytest.mark.slow
def test_infinite_values_in_predict_input_exit_3_through_the_cli(run_dir, tmp_path):
    rows = scoring_rows(run_dir)
    rows.loc[0, "tenure"] = "inf"
    source = tmp_path / "new.csv"
    rows.to_csv(source, index=False)
    out = tmp_path / "scores.csv"
    proc = _pipeline("predict", "--run", run_dir, "--input", source, "--output", out, cwd=tmp_path,
                     env={"COLUMNS": "200"})
    assert proc.returncode == ExitCode.DATA, proc.stderr
    assert "'tenure'" in proc.stderr and "row 1" in proc.stderr
    assert not out.exists()
