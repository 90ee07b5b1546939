"""``pipeline predict``: batch scoring with a run's exported models.

One real (small) CPU run is built per module and shared; tests that damage a run work on a
copy of its folder. The main paths go through the real CLI in a subprocess, as a cron job
would run it; checks of single rules call ``predict_batch`` in this process.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.support.cli import run_cli as _pipeline
from pipeline.core.errors import ConfigError, DataError, ExitCode, StorageError
from pipeline.predict.batch import predict_batch
from pipeline.runs.record import read_manifest
from pipeline.runs.store import sha256_file
from tests.conftest import copy_project, dump_unloadable, working_directory

OVERRIDES = ["device=cpu", "stages.forest.params.n_estimators=10", "stages.xgb.params.n_estimators=10",
             "stages.mlp.epochs=2"]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def churn_run(tmp_path_factory) -> dict:
    """A finished churn run (CPU, small models) in a project folder of its own."""
    from pipeline import run_pipeline

    project = copy_project(tmp_path_factory.mktemp("predict_project"))
    with working_directory(project):
        result = run_pipeline("configs/churn.yaml", runs_dir=project / "runs", overrides=OVERRIDES)
    run_dir = Path(result.run_dir)
    predictions = pd.read_parquet(run_dir / "export" / "predictions.parquet")
    metrics = json.loads((run_dir / "evaluate" / "metrics.json").read_text())
    # The test rows exactly as they are in the CSV (blanks included), in the predictions' order.
    raw = pd.read_csv(project / "data" / "telco_customer_churn.csv", dtype=str, keep_default_na=False)
    test_rows = raw.set_index("customerID").loc[predictions["customerID"]].reset_index()
    return {"project": project, "run_dir": run_dir, "predictions": predictions, "metrics": metrics,
            "test_rows": test_rows}


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return _pipeline("predict", *args, cwd=cwd, env={"COLUMNS": "200"})


def write_rows(frame: pd.DataFrame, path: Path) -> Path:
    frame.to_csv(path, index=False)
    return path


def copy_run(run_dir: Path, runs_root: Path) -> Path:
    """A copy of the run folder under ``runs_root``/churn/, with its own ``latest``."""
    target = runs_root / "churn" / run_dir.name
    shutil.copytree(run_dir, target)
    (runs_root / "churn" / "latest").symlink_to(run_dir.name)
    return target


# ---------------------------------------------------------------- the main path, through the CLI
def test_default_model_scores_equal_the_runs_own_predictions(churn_run, tmp_path):
    project, predictions, metrics = churn_run["project"], churn_run["predictions"], churn_run["metrics"]
    source = write_rows(churn_run["test_rows"], tmp_path / "new.csv")
    out = tmp_path / "scores.parquet"
    proc = cli("--run", "latest", "--input", str(source), "--output", str(out), "--na-values", " ", cwd=project)
    assert proc.returncode == 0, proc.stderr
    best = metrics["best"]
    table = pd.read_parquet(out)
    assert list(table.columns) == ["customerID", "score", "prediction", "model"]
    assert table["customerID"].tolist() == predictions["customerID"].tolist()
    np.testing.assert_allclose(table["score"], predictions[f"score_{best}"], rtol=0, atol=1e-6)
    assert (table["prediction"] == (table["score"] >= metrics["threshold"]).astype(int)).all()
    assert set(table["model"]) == {best}
    # One summary line on stderr: rows, model, output, seconds.
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and f"scored {len(predictions)} rows with {best}" in lines[0], proc.stderr
    assert str(out) in lines[0] and lines[0].rstrip().endswith("s")


@pytest.mark.parametrize("model, suffix", [("logreg", ".csv"), ("xgb", ".parquet"), ("mlp", ".parquet")])
def test_each_model_by_name_by_run_id(churn_run, tmp_path, model, suffix):
    project, run_dir, predictions = churn_run["project"], churn_run["run_dir"], churn_run["predictions"]
    source = write_rows(churn_run["test_rows"], tmp_path / "new.csv")
    out = tmp_path / f"scores{suffix}"
    proc = cli("--run", run_dir.name, "--runs-dir", "runs", "--pipeline", "churn", "--model", model,
               "--input", str(source), "--output", str(out), "--na-values", " ", "--threshold", "0.3",
               cwd=project)
    assert proc.returncode == 0, proc.stderr
    table = pd.read_csv(out, dtype={"customerID": str}) if suffix == ".csv" else pd.read_parquet(out)
    assert table["customerID"].tolist() == predictions["customerID"].tolist()
    np.testing.assert_allclose(table["score"], predictions[f"score_{model}"], rtol=0, atol=1e-6)
    assert (table["prediction"] == (table["score"] >= 0.3).astype(int)).all()
    assert set(table["model"]) == {model}


def test_a_folder_of_files_is_read_in_name_order(churn_run, tmp_path):
    project, predictions = churn_run["project"], churn_run["predictions"]
    rows = churn_run["test_rows"]
    folder = tmp_path / "batch"
    folder.mkdir()
    # b.parquet sorts after a.csv; typed like the CSV reader would type them.
    write_rows(rows.iloc[:500], folder / "a.csv")
    typed = pd.read_csv(write_rows(rows.iloc[500:], tmp_path / "rest.csv"), na_values=[" "])
    typed.to_parquet(folder / "b.parquet", index=False)
    (folder / "notes.txt").write_text("not a table")
    out = tmp_path / "scores.csv"
    proc = cli("--run", "latest", "--model", "xgb", "--input", str(folder), "--output", str(out),
               "--na-values", " ", cwd=project)
    assert proc.returncode == 0, proc.stderr
    table = pd.read_csv(out, dtype={"customerID": str})
    assert table["customerID"].tolist() == predictions["customerID"].tolist()
    np.testing.assert_allclose(table["score"], predictions["score_xgb"], rtol=0, atol=1e-6)


def test_missing_columns_exit_3_and_nothing_is_written(churn_run, tmp_path):
    project = churn_run["project"]
    source = write_rows(churn_run["test_rows"].drop(columns=["tenure", "Contract"]), tmp_path / "new.csv")
    out = tmp_path / "scores.parquet"
    proc = cli("--run", "latest", "--input", str(source), "--output", str(out), "--na-values", " ", cwd=project)
    assert proc.returncode == ExitCode.DATA, proc.stderr
    assert "'tenure'" in proc.stderr and "'Contract'" in proc.stderr and "new.csv" in proc.stderr
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["new.csv"]          # no temporary file left

    existing = tmp_path / "old.csv"
    existing.write_text("customerID,score\nx,0.5\n")
    proc = cli("--run", "latest", "--input", str(source), "--output", str(existing), cwd=project)
    assert proc.returncode == ExitCode.DATA, proc.stderr
    assert existing.read_text() == "customerID,score\nx,0.5\n"


def test_missing_id_column_is_a_data_error(churn_run, tmp_path):
    source = write_rows(churn_run["test_rows"].drop(columns=["customerID"]), tmp_path / "new.csv")
    with pytest.raises(DataError, match="customerID"):
        predict_batch(churn_run["run_dir"], source, tmp_path / "out.csv", na_values=[" "])
    assert not (tmp_path / "out.csv").exists()


def test_wrong_dtype_exit_3_names_the_column(churn_run, tmp_path):
    rows = churn_run["test_rows"].copy()
    rows.loc[3, "tenure"] = "twelve"
    source = write_rows(rows, tmp_path / "new.csv")
    out = tmp_path / "scores.parquet"
    proc = cli("--run", "latest", "--input", str(source), "--output", str(out), "--na-values", " ",
               cwd=churn_run["project"])
    assert proc.returncode == ExitCode.DATA, proc.stderr
    assert "'tenure' is str" in proc.stderr and "int64 at fit" in proc.stderr
    assert not out.exists()


def test_a_blank_no_op_fills_names_the_file_its_row_and_advice_for_a_fitted_model(churn_run, tmp_path):
    """One blank tenure: the message named neither the file nor the row, and told the user to add
    a fill_missing op, which a fitted model cannot take."""
    rows = churn_run["test_rows"].head(6).copy()
    rows.loc[4, "tenure"] = ""
    source = write_rows(rows, tmp_path / "blank.csv")
    out = tmp_path / "scores.parquet"
    proc = cli("--run", "latest", "--input", str(source), "--output", str(out), cwd=churn_run["project"])
    assert proc.returncode == ExitCode.DATA, proc.stderr
    assert f"{source}: missing values remain in the input after the feature ops: {{'tenure': 1}} (first: 'tenure' " \
           "at row 5); the fitted workflow fills none there" in proc.stderr
    assert not out.exists()


def test_wrong_dtype_names_the_first_value_that_is_not_a_number(churn_run, tmp_path):
    rows = churn_run["test_rows"].copy()
    rows.loc[3, "tenure"] = "twelve"
    with pytest.raises(DataError, match=r"'tenure' is \S+ now, int64 at fit: 1 of its \S+ values are not numbers "
                                        r"\(the first: 'twelve'\)"):
        predict_batch(churn_run["run_dir"], write_rows(rows, tmp_path / "new.csv"), tmp_path / "s.csv",
                      na_values=[" "], device="cpu")


def test_a_file_of_another_separator_says_which_option_to_pass(churn_run, tmp_path):
    """It said "set sep: ',' on the load stage that reads it", a key of the run's config."""
    rows = churn_run["test_rows"].iloc[:5]
    with pytest.raises(DataError, match=r"looks ','-separated: pass --sep ',' to pipeline predict"):
        predict_batch(churn_run["run_dir"], write_rows(rows, tmp_path / "new.csv"), tmp_path / "s.csv",
                      device="cpu", csv_options={"sep": ";"})


def test_integers_past_int64_in_a_numeric_column_are_scored_as_the_numbers_they_are(churn_run, tmp_path):
    """A CSV reader keeps 99999999999999999999 (past int64) as text, so the column came back as
    text and predict refused it (exit 3, with a hint about blank placeholders), while the same
    value written 1e20 was scored: both now score, the same."""
    rows = churn_run["test_rows"].iloc[:20].copy()
    rows.loc[3, "tenure"] = "99999999999999999999"
    predict_batch(churn_run["run_dir"], write_rows(rows, tmp_path / "long.csv"), tmp_path / "long.csv.out.csv",
                  na_values=[" "], device="cpu", model="xgb")
    rows.loc[3, "tenure"] = "1e20"
    predict_batch(churn_run["run_dir"], write_rows(rows, tmp_path / "float.csv"), tmp_path / "float.csv.out.csv",
                  na_values=[" "], device="cpu", model="xgb")
    long, floats = pd.read_csv(tmp_path / "long.csv.out.csv"), pd.read_csv(tmp_path / "float.csv.out.csv")
    pd.testing.assert_frame_equal(long, floats)
    assert len(long) == 20


@pytest.mark.parametrize("nested", [[{"a": "One year"}], [["One year"]]], ids=["struct", "list"])
def test_nested_values_in_a_parquet_feature_are_a_data_error(churn_run, tmp_path, nested):
    """A struct column where text was: both are ``object`` to pandas, so the type check let it
    through and the encoder failed with "unhashable type: 'dict'" (exit 1, "this is a bug")."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = churn_run["test_rows"].iloc[:5]
    table = pa.Table.from_pandas(rows, preserve_index=False)
    index = table.schema.get_field_index("Contract")
    table = table.set_column(index, "Contract", pa.array(nested * len(rows)))
    pq.write_table(table, tmp_path / "new.parquet")
    with pytest.raises(DataError, match=r"new\.parquet: column\(s\) 'Contract' \((struct|list)<.*nested values"):
        predict_batch(churn_run["run_dir"], tmp_path / "new.parquet", tmp_path / "s.csv", device="cpu")
    assert not (tmp_path / "s.csv").exists()


def test_blank_placeholders_without_na_values_name_the_column_and_the_option(churn_run, tmp_path):
    source = write_rows(churn_run["test_rows"], tmp_path / "new.csv")   # TotalCharges holds " "
    # The run's own na_values ([" "]) apply by default; a list given replaces them.
    with pytest.raises(DataError, match=r"'TotalCharges'.*float64.*--na-values"):
        predict_batch(churn_run["run_dir"], source, tmp_path / "out.parquet", na_values=["?"])


def test_an_unseen_category_scores(churn_run, tmp_path):
    rows = churn_run["test_rows"].copy()
    predictions = churn_run["predictions"]
    rows.loc[0, "Contract"] = "Ten year"                     # never seen at fit: one_hot all zeros
    rows.loc[1, "PaymentMethod"] = "Bitcoin"
    source = write_rows(rows, tmp_path / "new.csv")
    out = tmp_path / "scores.parquet"
    proc = cli("--run", "latest", "--model", "logreg", "--input", str(source), "--output", str(out),
               "--na-values", " ", cwd=churn_run["project"])
    assert proc.returncode == 0, proc.stderr
    table = pd.read_parquet(out)
    assert len(table) == len(rows) and np.isfinite(table["score"]).all()
    assert table["score"].iloc[0] != pytest.approx(predictions["score_logreg"].iloc[0], abs=1e-6)
    np.testing.assert_allclose(table["score"].iloc[2:], predictions["score_logreg"].iloc[2:], rtol=0, atol=1e-6)


@pytest.mark.parametrize("partitioned", [False, True], ids=["in memory", "partitioned"])
def test_ids_that_look_like_numbers_come_back_as_written(churn_run, tmp_path, partitioned):
    """An id is a label: read as a number, 0001800 came back as 1800 and a 19-digit id beside
    a blank one as 1.2345678901234568e+18, and the scores could not be joined back."""
    rows = churn_run["test_rows"].iloc[:6].copy()
    ids = ["0001800", "0000000", "1234567890123456789", "", "1234567890123456790", "-07"]
    rows["customerID"] = ids
    folder = tmp_path / "in"
    folder.mkdir()
    source = write_rows(rows, folder / "new.csv")
    out = tmp_path / ("scores" if partitioned else "scores.parquet")
    proc = cli("--run", "latest", "--model", "logreg", "--input", str(folder if partitioned else source),
               "--output", str(out), "--na-values", " ", *(["--partitioned"] if partitioned else []),
               cwd=churn_run["project"])
    assert proc.returncode == 0, proc.stderr
    table = pd.read_parquet(out)
    assert table["customerID"].fillna("").tolist() == ids
    np.testing.assert_allclose(table["score"], churn_run["predictions"]["score_logreg"].iloc[:6], rtol=0, atol=1e-6)


def test_integer_ids_in_parquet_and_plain_integer_ids_in_csv_stay_integers(churn_run, tmp_path):
    """A Parquet file's integer ids keep their type (exit 1 once: the text check ran on them);
    a CSV file beside it whose ids are plain integers reads them as integers too."""
    rows = pd.read_csv(write_rows(churn_run["test_rows"].iloc[:8], tmp_path / "all.csv"), na_values=[" "])
    rows["customerID"] = range(100, 108)
    folder = tmp_path / "in"
    folder.mkdir()
    rows.iloc[:4].to_csv(folder / "a.csv", index=False)
    rows.iloc[4:].to_parquet(folder / "b.parquet", index=False)
    predict_batch(churn_run["run_dir"], folder / "b.parquet", tmp_path / "b.parquet", device="cpu", model="logreg")
    predict_batch(churn_run["run_dir"], folder, tmp_path / "both.parquet", device="cpu", model="logreg")
    assert pd.read_parquet(tmp_path / "b.parquet")["customerID"].tolist() == [104, 105, 106, 107]
    both = pd.read_parquet(tmp_path / "both.parquet")["customerID"]
    assert both.dtype == "int64" and both.tolist() == list(range(100, 108))


def test_a_file_with_a_header_and_no_rows_scores_to_an_empty_output(churn_run, tmp_path):
    """A night with nothing new to score is not a failure: exit 0, the usual columns, no rows."""
    source = write_rows(churn_run["test_rows"].iloc[:0], tmp_path / "none.csv")
    predict_batch(churn_run["run_dir"], source, tmp_path / "s.parquet", device="cpu", model="logreg")
    table = pd.read_parquet(tmp_path / "s.parquet")
    assert len(table) == 0 and list(table.columns) == ["customerID", "score", "prediction", "model"]


def test_a_truncated_model_file_is_reported_corrupt_and_nothing_is_written(churn_run, tmp_path):
    run_copy = copy_run(churn_run["run_dir"], tmp_path / "runs")
    model_file = run_copy / "export" / "models" / "xgb" / "model.xgb.json"
    model_file.write_bytes(model_file.read_bytes()[:1000])
    source = write_rows(churn_run["test_rows"], tmp_path / "new.csv")
    existing = tmp_path / "scores.csv"
    existing.write_text("previous\n")
    proc = cli("--run", str(run_copy), "--model", "xgb", "--input", str(source), "--output", str(existing),
               "--na-values", " ", cwd=churn_run["project"])
    assert proc.returncode == ExitCode.DATA, proc.stderr
    assert "corrupt" in proc.stderr and "model.xgb.json" in proc.stderr
    assert existing.read_text() == "previous\n"
    fresh = tmp_path / "fresh.parquet"
    proc = cli("--run", "latest", "--runs-dir", str(tmp_path / "runs"), "--model", "xgb", "--input", str(source),
               "--output", str(fresh), "--na-values", " ", cwd=churn_run["project"])
    assert proc.returncode == ExitCode.DATA and "corrupt" in proc.stderr, proc.stderr
    assert not fresh.exists()


def test_a_corrupt_model_is_never_loaded(churn_run, tmp_path, monkeypatch):
    import pipeline.scoring.model_folder

    run_copy = copy_run(churn_run["run_dir"], tmp_path / "runs")
    (run_copy / "export" / "models" / "mlp" / "model.pt").write_bytes(b"not a state dict")
    monkeypatch.setattr(pipeline.scoring.model_folder, "load_model", lambda *a, **k: pytest.fail("loaded a corrupt model"))
    source = write_rows(churn_run["test_rows"].head(5), tmp_path / "new.csv")
    with pytest.raises(DataError, match="corrupt"):
        predict_batch(run_copy, source, tmp_path / "out.csv", model="mlp", na_values=[" "])


def test_a_missing_model_file_is_a_data_error(churn_run, tmp_path):
    run_copy = copy_run(churn_run["run_dir"], tmp_path / "runs")
    (run_copy / "export" / "models" / "logreg" / "workflow.json").unlink()
    source = write_rows(churn_run["test_rows"].head(5), tmp_path / "new.csv")
    with pytest.raises(DataError, match="workflow.json is missing"):
        predict_batch(run_copy, source, tmp_path / "out.csv", model="logreg", na_values=[" "])


# ---------------------------------------------------------------- choosing the run and the model
def test_latest_needs_pipeline_only_when_there_are_several(churn_run, tmp_path):
    runs = tmp_path / "runs"
    copy_run(churn_run["run_dir"], runs)
    source = write_rows(churn_run["test_rows"].head(20), tmp_path / "new.csv")
    out = tmp_path / "out.csv"
    result = predict_batch("latest", source, out, runs_dir=runs, model="logreg", na_values=[" "])
    assert result.rows == 20 and result.model == "logreg" and result.output == out
    assert result.run_dir == (runs / "churn" / churn_run["run_dir"].name).resolve()

    shutil.copytree(runs / "churn", runs / "other", symlinks=True)
    with pytest.raises(ConfigError, match="--pipeline") as info:
        predict_batch("latest", source, out, runs_dir=runs, model="logreg", na_values=[" "])
    assert info.value.exit_code == ExitCode.CONFIG
    result = predict_batch("latest", source, out, runs_dir=runs, pipeline="other", model="logreg",
                           na_values=[" "])
    assert result.run_dir.parent.name == "other"


def test_latest_resolves_through_the_cli(churn_run, tmp_path):
    runs = tmp_path / "runs"
    copy_run(churn_run["run_dir"], runs)
    # A newer run folder that failed: 'latest' is the link, not the newest name.
    newer = runs / "churn" / "29991231T235959.999Z-ffffff"
    shutil.copytree(churn_run["run_dir"], newer)
    manifest = read_manifest(newer).model_copy(update={"status": "failed"})
    (newer / "manifest.json").write_text(manifest.to_json())
    source = write_rows(churn_run["test_rows"].head(50), tmp_path / "new.csv")
    out = tmp_path / "out.parquet"
    proc = cli("--run", "latest", "--runs-dir", str(runs), "--input", str(source), "--output", str(out),
               "--na-values", " ", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert churn_run["run_dir"].name in proc.stderr and newer.name not in proc.stderr
    assert len(pd.read_parquet(out)) == 50

    proc = cli("--run", "latest", "--runs-dir", str(tmp_path / "nothing"), "--input", str(source),
               "--output", str(out), cwd=tmp_path)
    assert proc.returncode == ExitCode.CONFIG and "no runs under" in proc.stderr, proc.stderr


def test_unknown_model_and_bad_output_are_usage_errors(churn_run, tmp_path):
    source = write_rows(churn_run["test_rows"].head(5), tmp_path / "new.csv")
    proc = cli("--run", "latest", "--model", "svm", "--input", str(source), "--output", str(tmp_path / "o.csv"),
               cwd=churn_run["project"])
    assert proc.returncode == ExitCode.CONFIG, proc.stderr
    assert "svm" in proc.stderr and "forest, logreg, mlp, xgb" in proc.stderr
    proc = cli("--run", "latest", "--input", str(source), "--output", str(tmp_path / "o.json"),
               cwd=churn_run["project"])
    assert proc.returncode == ExitCode.CONFIG and ".parquet or .csv" in proc.stderr, proc.stderr
    assert not (tmp_path / "o.csv").exists() and not (tmp_path / "o.json").exists()


def test_an_output_that_is_the_input_is_refused_and_the_input_kept(churn_run, tmp_path):
    """`--output new.csv --input new.csv` replaced the rows with their scores, exit 0."""
    source = write_rows(churn_run["test_rows"].head(5), tmp_path / "new.csv")
    before = source.read_bytes()
    for output in (source, tmp_path / "." / "new.csv"):
        proc = cli("--run", "latest", "--input", str(source), "--output", str(output), cwd=churn_run["project"])
        assert proc.returncode == ExitCode.CONFIG, proc.stderr
        assert "--output" in proc.stderr and "is the input file" in proc.stderr
    assert source.read_bytes() == before


def test_a_drift_summary_that_cannot_be_written_warns_and_leaves_no_stale_one(churn_run, tmp_path, monkeypatch):
    """Drift only warns, so the exit is the scoring's: a summary that could not be written
    (here a folder in its way) was exit 6 with the new scores in place, and one left from an
    earlier scoring stayed beside them, describing other rows."""
    source = write_rows(churn_run["test_rows"].head(20), tmp_path / "new.csv")
    out = tmp_path / "s.csv"
    (tmp_path / "s.drift.json").mkdir()
    proc = cli("--run", "latest", "--input", str(source), "--output", str(out), cwd=churn_run["project"])
    assert proc.returncode == 0, proc.stderr
    assert len(pd.read_csv(out)) == 20
    assert "drift: cannot write" in proc.stderr and "s.drift.json" in proc.stderr
    (tmp_path / "s.drift.json").rmdir()
    first = predict_batch(churn_run["run_dir"], source, out, na_values=[" "])
    assert first.drift == tmp_path / "s.drift.json" and first.drift.exists()

    def disk_full(path, data):
        raise StorageError(f"cannot write {path}: No space left on device")

    monkeypatch.setattr("pipeline.runs.store.atomic_write_json", disk_full)
    again = predict_batch(churn_run["run_dir"], write_rows(churn_run["test_rows"].head(3), tmp_path / "few.csv"),
                          out, na_values=[" "])
    assert again.drift is None and len(pd.read_csv(out)) == 3
    assert not (tmp_path / "s.drift.json").exists()          # the earlier rows' summary is not left beside them


def test_a_failed_run_is_refused(churn_run, tmp_path):
    run_copy = copy_run(churn_run["run_dir"], tmp_path / "runs")
    manifest = read_manifest(run_copy)
    manifest.status = "failed"
    (run_copy / "manifest.json").write_text(manifest.to_json())
    source = write_rows(churn_run["test_rows"].head(5), tmp_path / "new.csv")
    with pytest.raises(DataError, match=r"did not succeed \(status: failed\); score with a succeeded run"):
        predict_batch(run_copy, source, tmp_path / "out.csv", na_values=[" "])
    manifest.status, manifest.pid = "running", 2**22 + 12345      # a run whose process is gone
    (run_copy / "manifest.json").write_text(manifest.to_json())
    with pytest.raises(DataError, match=r"did not succeed \(status: abandoned: .*\); score with"):
        predict_batch(run_copy, source, tmp_path / "out.csv", na_values=[" "])


def test_an_old_pickled_model_is_refused_with_what_to_do(churn_run, tmp_path, monkeypatch):
    """A model folder written before skops (a joblib pickle, here of a GPU library that is not
    installed): the pickle is never loaded, and the message says to export it again."""
    run_copy = copy_run(churn_run["run_dir"], tmp_path / "runs")
    folder = run_copy / "export" / "models" / "forest"
    (folder / "model.skops").unlink()
    dump_unloadable(folder / "model.joblib", "fake_gpu_forest", "RandomForestClassifier", tmp_path, monkeypatch)
    meta = json.loads((folder / "model.json").read_text())
    meta.update(device="gpu", estimator="cuml.ensemble.randomforestclassifier.RandomForestClassifier",
                file="model.joblib")
    del meta["files"], meta["format"]
    (folder / "model.json").write_text(json.dumps(meta))
    manifest = read_manifest(run_copy)
    del manifest.artifacts["export/models/forest/model.skops"]
    for name in ("model.joblib", "model.json"):
        manifest.artifacts[f"export/models/forest/{name}"] = sha256_file(folder / name)
    (run_copy / "manifest.json").write_text(manifest.to_json())

    source = write_rows(churn_run["test_rows"].head(5), tmp_path / "new.csv")
    with pytest.raises(DataError, match=r"model.joblib is not in a safe model format.*pickles are never loaded.*again"):
        predict_batch(run_copy, source, tmp_path / "out.csv", model="forest", device="cpu", na_values=[" "])
    assert not (tmp_path / "out.csv").exists()


def test_exported_models_come_from_the_run_record_else_from_old_artifact_lists(tmp_path):
    from pipeline.predict.batch import exported_models, run_metrics
    from pipeline.runs.record import RunManifest

    record = RunManifest(pipeline="churn", run_id="r", status="succeeded",
                         models={"xgb": "ship/models/xgb"},
                         artifacts={"ship/models/xgb/model.json": "0", "ship/models/old/model.json": "0"})
    assert exported_models(tmp_path, record) == {"xgb": "ship/models/xgb"}
    # Written before manifests had `models`: any stage's listed models/<name>/model.json counts.
    old = record.model_copy(update={"models": {}})
    assert exported_models(tmp_path, old) == {"old": "ship/models/old", "xgb": "ship/models/xgb"}
    with pytest.raises(DataError, match="exported no models"):
        exported_models(tmp_path, old.model_copy(update={"artifacts": {"ship/models/x/model.joblib": "0"}}))
    assert run_metrics(record) == {}
    assert run_metrics(record.model_copy(update={"metrics": {"best": "xgb"}})) == {"best": "xgb"}


def test_a_run_recorded_before_manifests_listed_models_still_scores(churn_run, tmp_path):
    run_copy = copy_run(churn_run["run_dir"], tmp_path / "runs")
    data = json.loads((run_copy / "manifest.json").read_text())
    assert data.pop("models")
    (run_copy / "manifest.json").write_text(json.dumps(data))
    source = write_rows(churn_run["test_rows"].head(5), tmp_path / "new.csv")
    result = predict_batch(run_copy, source, tmp_path / "out.csv", na_values=[" "])
    assert result.model == churn_run["metrics"]["best"] and result.rows == 5


# ---------------------------------------------------------------- partitioned input (Dask)
def _split_into_files(rows: pd.DataFrame, folder: Path, parts: int = 3) -> Path:
    folder.mkdir()
    size = -(-len(rows) // parts)
    for i in range(parts):
        write_rows(rows.iloc[i * size:(i + 1) * size], folder / f"part-{i}.csv")
    return folder


@pytest.mark.parametrize("model", ["xgb", "mlp"])
def test_partitioned_scoring_writes_a_parquet_folder_equal_to_the_runs_scores(churn_run, tmp_path, model):
    project, predictions = churn_run["project"], churn_run["predictions"]
    source = _split_into_files(churn_run["test_rows"], tmp_path / "batch")
    out = tmp_path / "scores"
    proc = cli("--run", "latest", "--model", model, "--input", str(source), "--output", str(out),
               "--partitioned", "--na-values", " ", cwd=project)
    assert proc.returncode == 0, proc.stderr
    names = sorted(p.name for p in out.iterdir())
    assert names == ["_drift.json", "part.0.parquet", "part.1.parquet", "part.2.parquet"]
    table = pd.read_parquet(out)                     # the drift summary is not read as a part
    assert list(table.columns) == ["customerID", "score", "prediction", "model"]
    merged = predictions.merge(table, on="customerID", validate="one_to_one")
    assert len(merged) == len(predictions)
    np.testing.assert_allclose(merged["score"], merged[f"score_{model}"], rtol=0, atol=1e-6)
    assert (merged["prediction"] == (merged["score"] >= 0.5)).all()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    # The partitions' counts add up to the counts of the same rows scored in memory.
    summary = json.loads((out / "_drift.json").read_text())
    whole = predict_batch(churn_run["run_dir"], source, tmp_path / "whole.parquet", model=model, na_values=[" "])
    in_memory = json.loads(whole.drift.read_text())
    assert summary["rows"] == in_memory["rows"] == len(predictions)
    assert summary["counts"] == in_memory["counts"] and summary["psi"] == in_memory["psi"]


def test_partitioned_scoring_replaces_an_output_only_when_complete(churn_run, tmp_path):
    project = churn_run["project"]
    out = tmp_path / "scores"
    out.mkdir()
    (out / "part.0.parquet").write_bytes(b"yesterday")
    rows = churn_run["test_rows"].copy()
    rows.loc[len(rows) - 1, "tenure"] = "twelve"        # in the last file only: found while scoring
    source = _split_into_files(rows, tmp_path / "batch")
    proc = cli("--run", "latest", "--input", str(source), "--output", str(out), "--partitioned",
               "--na-values", " ", cwd=project)
    assert proc.returncode == ExitCode.DATA, proc.stderr
    assert "batch" in proc.stderr and "Traceback" not in proc.stderr
    assert [p.name for p in out.iterdir()] == ["part.0.parquet"]
    assert (out / "part.0.parquet").read_bytes() == b"yesterday"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["batch", "scores"]     # no temporary folder

    fine = _split_into_files(churn_run["test_rows"], tmp_path / "fine")
    proc = cli("--run", "latest", "--input", str(fine), "--output", str(out), "--partitioned",
               "--na-values", " ", cwd=project)
    assert proc.returncode == 0, proc.stderr
    assert len(pd.read_parquet(out)) == len(churn_run["test_rows"])


def test_partitioned_scoring_checks_schema_and_options_first(churn_run, tmp_path):
    project = churn_run["project"]
    source = _split_into_files(churn_run["test_rows"].drop(columns=["Contract"]), tmp_path / "batch")
    proc = cli("--run", "latest", "--input", str(source), "--output", str(tmp_path / "o"), "--partitioned",
               "--na-values", " ", cwd=project)
    assert proc.returncode == ExitCode.DATA and "'Contract'" in proc.stderr and "part-0.csv" in proc.stderr
    proc = cli("--run", "latest", "--input", str(source), "--output", str(tmp_path / "o.csv"), "--partitioned",
               cwd=project)
    assert proc.returncode == ExitCode.CONFIG and "Parquet folder" in proc.stderr
    proc = cli("--run", "latest", "--input", str(source), "--output", str(tmp_path / "o.parquet"),
               "--scheduler", "tcp://127.0.0.1:1", cwd=project)
    assert proc.returncode == ExitCode.CONFIG and "--partitioned" in proc.stderr
    assert not (tmp_path / "o").exists()


def test_partitioned_scoring_names_a_later_file_whose_column_changed_type(churn_run, tmp_path):
    """Dask types each column from the first file: a later Parquet file with text where numbers
    were, or a later CSV part with '12a' among numbers, failed mid-scoring naming neither."""
    rows = pd.read_csv(write_rows(churn_run["test_rows"], tmp_path / "all.csv"), na_values=[" "])
    folder = tmp_path / "pq"
    folder.mkdir()
    rows.iloc[:300].to_parquet(folder / "a.parquet", index=False)
    rows.iloc[300:].astype({"MonthlyCharges": str}).to_parquet(folder / "b.parquet", index=False)
    with pytest.raises(DataError, match=r"b\.parquet: column type\(s\) differ from training: 'MonthlyCharges' is "
                                        r"text now, float64 at fit"):
        predict_batch(churn_run["run_dir"], folder, tmp_path / "o1", partitioned=True, device="cpu")
    raw = churn_run["test_rows"].copy()
    raw.loc[len(raw) - 1, "tenure"] = "12a"
    source = _split_into_files(raw, tmp_path / "csv")
    with pytest.raises(DataError, match=r"column 'tenure' holds \S+ values in a later part, int64 in the first "
                                        r"rows .*'12a'") as info:
        predict_batch(churn_run["run_dir"], source, tmp_path / "o2", partitioned=True, device="cpu", na_values=[" "])
    assert "\n" not in str(info.value) and "+---" not in str(info.value)
    assert not (tmp_path / "o1").exists() and not (tmp_path / "o2").exists()


def test_partitioned_scoring_runs_on_a_cluster(churn_run, tmp_path):
    from distributed import LocalCluster

    source = _split_into_files(churn_run["test_rows"], tmp_path / "batch")
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address="127.0.0.1:0") as cluster:
        result = predict_batch(churn_run["run_dir"], source, tmp_path / "scores", model="xgb",
                               na_values=[" "], partitioned=True, scheduler=cluster.scheduler_address)
        assert len(cluster.scheduler.workers) == 2                  # the cluster was not shut down
    table = pd.read_parquet(tmp_path / "scores")
    assert result.rows == len(table) == len(churn_run["test_rows"])
    merged = churn_run["predictions"].merge(table, on="customerID")
    np.testing.assert_allclose(merged["score"], merged["score_xgb"], rtol=0, atol=1e-6)


# ---------------------------------------------------------------- drift summary
def _training_rows(churn_run) -> pd.DataFrame:
    """Every row of the data the run trained on, as the CSV has them."""
    return pd.read_csv(churn_run["project"] / "data" / "telco_customer_churn.csv", dtype=str, keep_default_na=False)


def test_rows_like_the_training_rows_have_no_drift_and_a_psi_per_feature(churn_run, tmp_path):
    run_dir, best = churn_run["run_dir"], churn_run["metrics"]["best"]
    rows = _training_rows(churn_run)
    source = write_rows(rows, tmp_path / "new.csv")
    out = tmp_path / "scores.parquet"
    proc = cli("--run", "latest", "--input", str(source), "--output", str(out), cwd=churn_run["project"])
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr          # the summary line, no warning
    summary = json.loads((tmp_path / "scores.drift.json").read_text())
    features = json.loads((run_dir / "export" / "models" / best / "model.json").read_text())["features"]
    assert list(summary["psi"]) == features
    assert all(0.0 <= value < 0.1 for value in summary["psi"].values()), summary["psi"]
    assert summary["over_threshold"] == [] and summary["threshold"] == 0.2
    assert summary["rows"] == len(rows) and summary["model"] == best and summary["run"] == run_dir.name
    assert summary["reference_rows"] == read_manifest(run_dir).stages["features"].facts["rows"]["train"]
    assert all(sum(counts) == len(rows) for counts in summary["counts"].values())


def test_a_shifted_column_is_named_in_the_summary_and_on_stderr(churn_run, tmp_path):
    rows = _training_rows(churn_run)
    rows["tenure"] = (rows["tenure"].astype(int) + 200).astype(str)         # months: far past any at training
    source = write_rows(rows, tmp_path / "new.csv")
    out = tmp_path / "scores.csv"
    proc = cli("--run", "latest", "--input", str(source), "--output", str(out), cwd=churn_run["project"])
    assert proc.returncode == 0, proc.stderr                                # drift only warns
    summary = json.loads((tmp_path / "scores.drift.json").read_text())
    assert summary["over_threshold"] == ["tenure"] and summary["psi"]["tenure"] > 0.2
    warning = next(line for line in proc.stderr.splitlines() if line.startswith("drift:"))
    assert f"1 feature over PSI 0.2: tenure {summary['psi']['tenure']:.2f}" in warning
    assert "scores.drift.json" in warning

    proc = cli("--run", "latest", "--input", str(source), "--output", str(out), "--drift-threshold", "1000",
               "--log-format", "json", cwd=churn_run["project"])
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stderr.strip().splitlines()[-1])
    assert result["event"] == "predict_result" and result["over_threshold"] == []
    assert result["drift"] == str(tmp_path / "scores.drift.json")
    assert json.loads((tmp_path / "scores.drift.json").read_text())["threshold"] == 1000


def test_a_drift_threshold_of_zero_or_less_is_a_usage_error(churn_run, tmp_path):
    source = write_rows(churn_run["test_rows"].head(5), tmp_path / "new.csv")
    proc = cli("--run", "latest", "--input", str(source), "--output", str(tmp_path / "o.csv"), "--drift-threshold",
               "0", cwd=churn_run["project"])
    assert proc.returncode == ExitCode.CONFIG and "--drift-threshold" in proc.stderr, proc.stderr
    with pytest.raises(ConfigError, match="--drift-threshold must be above 0"):
        predict_batch(churn_run["run_dir"], source, tmp_path / "o.csv", na_values=[" "], drift_threshold=-0.5)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new.csv"]


def _without_reference(run_copy: Path, model: str) -> None:
    """``model``'s folder as exported before drift profiles: no reference.json, in no list."""
    folder = run_copy / "export" / "models" / model
    (folder / "reference.json").unlink()
    meta = json.loads((folder / "model.json").read_text())
    meta["files"].remove("reference.json")
    (folder / "model.json").write_text(json.dumps(meta))
    manifest = read_manifest(run_copy)
    del manifest.artifacts[f"export/models/{model}/reference.json"]
    manifest.artifacts[f"export/models/{model}/model.json"] = sha256_file(folder / "model.json")
    (run_copy / "manifest.json").write_text(manifest.to_json())


def test_a_model_folder_without_reference_json_scores_without_a_summary(churn_run, tmp_path, caplog):
    run_copy = copy_run(churn_run["run_dir"], tmp_path / "runs")
    _without_reference(run_copy, "xgb")
    source = write_rows(churn_run["test_rows"], tmp_path / "new.csv")
    out = tmp_path / "scores.parquet"
    (tmp_path / "scores.drift.json").write_text("{}")          # an earlier scoring's: not these rows'
    with caplog.at_level("INFO", logger="pipeline"):
        result = predict_batch(run_copy, source, out, model="xgb", na_values=[" "])
    assert result.rows == len(pd.read_parquet(out)) == len(churn_run["test_rows"])
    assert result.drift is None and result.over_threshold == ()
    assert not (tmp_path / "scores.drift.json").exists()
    assert any("without a reference profile (reference.json)" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("damage, message", [
    (lambda path: path.write_text(path.read_text().replace('"rows": ', '"rows": 1')), "corrupt"),
    (lambda path: path.unlink(), "is missing"),
])
def test_a_changed_or_missing_reference_json_is_a_data_error(churn_run, tmp_path, damage, message):
    run_copy = copy_run(churn_run["run_dir"], tmp_path / "runs")
    damage(run_copy / "export" / "models" / "logreg" / "reference.json")
    source = write_rows(churn_run["test_rows"].head(5), tmp_path / "new.csv")
    with pytest.raises(DataError, match=f"reference.json.*{message}|{message}.*reference.json"):
        predict_batch(run_copy, source, tmp_path / "out.csv", model="logreg", na_values=[" "])
    assert not (tmp_path / "out.csv").exists()


def test_a_header_with_an_empty_name_scores_the_file_it_trained_on(tmp_path):
    """Training read the empty header cell as `Unnamed: 1`, as pandas names it; predict read
    the raw header and refused the very file the run trained on ("missing column(s)
    ['Unnamed: 1']")."""
    from tests.conftest import small_config

    rng = np.random.default_rng(3)
    rows = pd.DataFrame({"id": [f"c{i}" for i in range(200)], "": rng.normal(size=200), "b": rng.normal(size=200)})
    rows["churn"] = np.where(rows[""] + rng.normal(scale=0.5, size=200) > 0, "yes", "no")
    rows.to_csv(tmp_path / "data.csv", index=False)
    (tmp_path / "p.yaml").write_text(small_config("p", tmp_path / "data.csv", ops=("standardize: {columns: ['Unnamed: 1', b]}",),
                                                       after="  export: {kind: export, inputs: [logreg]}\n"))
    assert _pipeline("run", "p.yaml", "-q", cwd=tmp_path).returncode == 0
    proc = _pipeline("predict", "--run", "latest", "--input", "data.csv", "--output", "scores.csv", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert len(pd.read_csv(tmp_path / "scores.csv")) == 200


def trained_here(folder: Path, load: str, ops: str) -> None:
    """A run of a one-model pipeline over ``id``, features and ``churn`` (yes / no) in
    ``folder``: ``load`` is the load stage's keys, ``ops`` its feature ops (YAML flow)."""
    (folder / "p.yaml").write_text(
        "name: p\ndevice: cpu\nstages:\n"
        f"  raw: {{kind: load, {load}}}\n"
        "  split: {kind: split, inputs: [raw], target: churn, positive: 'yes'}\n"
        f"  features: {{kind: features, inputs: [split], id: id, ops: [{ops}]}}\n"
        "  m: {kind: train, inputs: [features], model: logistic_regression}\n"
        "  export: {kind: export, inputs: [m]}\n")
    proc = _pipeline("run", "p.yaml", "-q", cwd=folder)
    assert proc.returncode == 0, proc.stderr


def test_new_rows_in_utf8_for_a_run_that_read_cp1252_are_read_as_utf8(tmp_path):
    """Every accented category of a UTF-8 file read as cp1252 became other letters ('ChÃ¨que'),
    an unseen category: exit 0, scores moved by up to 0.10, a drift warning the only sign.
    A UTF-8 file with a byte order mark (Excel's "CSV UTF-8") lost its first column's name too."""
    rng = np.random.default_rng(4)
    pay = rng.choice(["Chèque électronique", "Carte", "Virement"], 300)
    rows = pd.DataFrame({"id": [f"c{i}" for i in range(300)], "pay": pay, "x": rng.normal(size=300)})
    rows["churn"] = np.where((rows["pay"] == "Chèque électronique") ^ (rng.random(300) < 0.1), "yes", "no")
    rows.to_csv(tmp_path / "train.csv", index=False, encoding="cp1252")
    rows.to_csv(tmp_path / "utf8.csv", index=False, encoding="utf-8")
    rows.to_csv(tmp_path / "bom.csv", index=False, encoding="utf-8-sig")
    trained_here(tmp_path, "path: train.csv, encoding: cp1252", "{one_hot: {columns: [pay]}}")
    scores = {}
    for name in ("train", "utf8", "bom"):
        proc = _pipeline("predict", "--run", "latest", "--input", f"{name}.csv", "--output", f"{name}.out.csv",
                         cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        scores[name] = pd.read_csv(tmp_path / f"{name}.out.csv")["score"]
        if name != "train":
            assert "read as UTF-8 (pass --encoding cp1252" in proc.stderr
    assert scores["utf8"].tolist() == scores["train"].tolist() == scores["bom"].tolist()
    # Told otherwise, it reads as told.
    told = _pipeline("predict", "--run", "latest", "--input", "utf8.csv", "--output", "told.csv",
                     "--encoding", "cp1252", cwd=tmp_path)
    assert told.returncode == 0 and "read as UTF-8" not in told.stderr


def test_a_tab_separated_file_scores_as_the_run_read_it(tmp_path):
    """A run that loaded a .tsv could not score a .tsv: "cannot tell the format from the name"."""
    rng = np.random.default_rng(6)
    rows = pd.DataFrame({"id": [f"c{i}" for i in range(200)], "a": rng.normal(size=200), "b": rng.normal(size=200)})
    rows["churn"] = np.where(rows["a"] + rng.normal(scale=0.5, size=200) > 0, "yes", "no")
    rows.to_csv(tmp_path / "data.tsv", index=False, sep="\t")
    trained_here(tmp_path, 'path: data.tsv, sep: "\\t"', "{standardize: {columns: [a, b]}}")
    proc = _pipeline("predict", "--run", "latest", "--input", "data.tsv", "--output", "s.csv", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert len(pd.read_csv(tmp_path / "s.csv")) == 200


def test_a_column_of_text_where_numbers_were_says_its_first_value_and_a_decimal_comma_the_option():
    """'MonthlyCharges' is str now, float64 at fit: no value shown when none was a number, and
    no word of --decimal for a file written 79,85."""
    from pipeline.backends import get_backend
    from pipeline.scoring.input_rows import check_types

    cpu = get_backend("cpu")
    with pytest.raises(DataError, match=r"'a' is \w+ now, float64 at fit: none of its values is a number "
                                        r"\(the first: '79,85'\) \(numbers written with a decimal comma, 79,85: "
                                        r"pass --decimal ',' to pipeline predict, decimal=, as a query "
                                        r"parameter of pipeline serve\)"):
        check_types(pd.DataFrame({"a": ["79,85", "12,5"]}), {"a": "float64"}, cpu, source=Path("x.csv"), fmt="csv")
    with pytest.raises(DataError, match=r"none of its values is a number \(the first: 'Yes'\)$"):
        check_types(pd.DataFrame({"a": ["Yes", "No"]}), {"a": "int64"}, cpu, source=Path("x.csv"), fmt="csv")


def test_sigterm_while_the_scores_are_written_is_exit_143_with_a_line_and_no_file_left(churn_run, tmp_path):
    """SIGTERM (a scheduler's timeout) ended predict silently (killed by the signal) and left its
    hidden temporary file in the output folder. The signal arrives while the parquet file is
    being written: a real process, since the test runner must not take it."""
    import sys

    out = tmp_path / "out"
    script = tmp_path / "term.py"
    script.write_text(
        "import os, signal, sys\n"
        "import pandas as pd\n"
        "real = pd.DataFrame.to_parquet\n"
        "def writing(self, path, *a, **k):\n"
        "    real(self, path, *a, **k)\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    sum(range(10**6))                      # the handler runs between bytecodes\n"
        "pd.DataFrame.to_parquet = writing\n"
        "from pipeline.cli.app import main\n"
        f"sys.argv = ['pipeline', 'predict', '--run', 'latest', '--output', {str(out / 's.parquet')!r},\n"
        f"            '--input', 'data/telco_customer_churn.csv']\n"
        "main()\n", encoding="utf-8")
    proc = subprocess.run([sys.executable, str(script)], cwd=churn_run["project"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == ExitCode.TERMINATED, (proc.returncode, proc.stderr)
    assert "terminated (SIGTERM)" in proc.stderr
    assert not out.exists() or list(out.iterdir()) == []
