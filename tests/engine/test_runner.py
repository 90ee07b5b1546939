"""The runner used as a library: run folders, manifest, selection, failure bookkeeping."""

from __future__ import annotations

import os

import pytest

from pipeline import ConfigError, DataError, StageError, load_config, run_pipeline
from pipeline.runs.record import read_manifest

FAST = ["stages.forest.params.n_estimators=20", "stages.xgb.params.n_estimators=20", "stages.mlp.epochs=3",
        "device=cpu"]


def test_run_writes_manifest_config_and_artifacts(in_project):
    result = run_pipeline("configs/churn.yaml", overrides=FAST)
    run_dir = result.run_dir
    assert run_dir.parent == in_project / "runs" / "churn"
    manifest = read_manifest(run_dir)
    assert manifest.status == "succeeded" and manifest.device.name == "cpu"
    assert set(manifest.stages) == {"raw", "split", "features", "logreg", "forest", "xgb", "mlp", "evaluate", "export"}
    for record in manifest.stages.values():
        assert record.status == "succeeded" and record.seconds >= 0 and record.peak_rss_bytes > 0
    assert manifest.versions["scikit-learn"] and manifest.versions["pandas"]
    assert manifest.metrics["best"] in ("logreg", "forest", "xgb", "mlp")
    assert "export/predictions.parquet" in manifest.artifacts
    assert (run_dir / "evaluate" / "metrics.json").exists()
    assert load_config(run_dir / "config.yaml").stages["forest"].params["n_estimators"] == 20
    assert os.readlink(run_dir.parent / "latest") == run_dir.name
    assert result.evaluation is not None and result.evaluation.best == manifest.metrics["best"]


def test_runs_never_overwrite_each_other(in_project):
    first = run_pipeline("configs/churn.yaml", overrides=FAST, until=["features"])
    second = run_pipeline("configs/churn.yaml", overrides=FAST, until=["features"])
    assert first.run_dir != second.run_dir and first.run_dir.exists() and second.run_dir.exists()


def test_selection_runs_needed_upstream_stages(in_project):
    result = run_pipeline("configs/churn.yaml", overrides=FAST, only=["xgb"])
    stages = result.manifest.stages
    assert list(stages) == ["raw", "split", "features", "xgb"]
    assert stages["xgb"].selected and not stages["features"].selected
    with pytest.raises(ConfigError, match="unknown stage"):
        run_pipeline("configs/churn.yaml", overrides=FAST, only=["nope"])


MINI = """name: churn
device: cpu
stages:
  raw: {kind: load, path: data/telco_customer_churn.csv, na_values: [" "]}
  split: {kind: split, inputs: [raw], target: Churn, positive: "Yes"}
"""


def test_failed_stage_is_recorded_and_latest_untouched(in_project):
    (in_project / "configs" / "mini.yaml").write_text(MINI)
    ok = run_pipeline("configs/mini.yaml")
    with pytest.raises(DataError) as info:
        run_pipeline("configs/mini.yaml", overrides=["stages.split.target=Nope"])
    assert info.value.stage == "split"
    runs = sorted(p for p in (in_project / "runs" / "churn").iterdir() if p.name[0].isdigit())
    failed = read_manifest(runs[-1])
    assert failed.status == "failed" and "Nope" in failed.error
    # raw is unchanged since the first run: it comes from the stage cache.
    assert failed.stages["split"].status == "failed" and failed.stages["raw"].status == "cached"
    assert os.readlink(in_project / "runs" / "churn" / "latest") == ok.run_dir.name


@pytest.mark.parametrize("selection", [{"until": ["raw"]}, {"only": ["split"]}, {"from_": ["split"]},
                                       {"mark_latest": False}])
def test_a_run_of_some_stages_leaves_latest_at_the_last_whole_run(in_project, selection):
    """Nightly scoring names 'latest': a look at part of the DAG (--until raw) must not become
    the run it scores with (it has no models; predict and serve refused it), nor a run told not
    to (parity --sample's, on a sample of the rows, moved it)."""
    (in_project / "configs" / "mini.yaml").write_text(MINI)
    whole = run_pipeline("configs/mini.yaml")
    part = run_pipeline("configs/mini.yaml", **selection)
    assert part.manifest.status == "succeeded" and part.run_dir != whole.run_dir
    assert os.readlink(in_project / "runs" / "churn" / "latest") == whole.run_dir.name
    again = run_pipeline("configs/mini.yaml", until=["split"])        # selects every stage: a whole run
    assert os.readlink(in_project / "runs" / "churn" / "latest") == again.run_dir.name


@pytest.mark.parametrize(("function", "message"), [("nomod_here:fn", "cannot import module 'nomod_here'"),
                                                   ("boom2:nope", "module 'boom2' has no function 'nope'")])
def test_a_python_stage_naming_code_that_is_not_there_is_a_config_error(in_project, function, message):
    """Exit 2, as for a plugin that does not import, in one paragraph (it was exit 4, a stage
    failure, with a ValueError)."""
    (in_project / "configs" / "boom2.py").write_text("def explode(ctx, inputs):\n    return None\n")
    (in_project / "configs" / "boom2.yaml").write_text(
        f"name: boom2\nstages:\n  b:\n    kind: python\n    function: {function}\n")
    with pytest.raises(ConfigError) as info:
        run_pipeline("configs/boom2.yaml")
    assert info.value.exit_code == 2 and info.value.stage == "b"
    assert str(info.value).startswith(f"function: {message}") and "\n" not in str(info.value)


def test_unexpected_exception_becomes_stage_error(in_project, tmp_path):
    (in_project / "configs" / "boom.py").write_text(
        "def explode(ctx, inputs, **params):\n    raise RuntimeError('kaboom ' + params['word'])\n")
    (in_project / "configs" / "boom.yaml").write_text(
        "name: boom\nstages:\n  b:\n    kind: python\n    function: boom:explode\n    params: {word: now}\n")
    with pytest.raises(StageError, match="stage 'b' failed: RuntimeError: kaboom now"):
        run_pipeline("configs/boom.yaml")


def test_python_stage_gets_inputs_and_context(in_project):
    (in_project / "configs" / "custom_stage.py").write_text(
        "def rows(ctx, inputs, *, factor):\n"
        "    (frame,) = inputs.values()\n"
        "    return {'rows': len(frame) * factor, 'device': ctx.backend.name}\n")
    (in_project / "configs" / "custom.yaml").write_text(
        "name: custom\ndevice: cpu\nstages:\n  raw:\n    kind: load\n    path: data/telco_customer_churn.csv\n"
        "  count:\n    kind: python\n    function: custom_stage:rows\n    inputs: [raw]\n    params: {factor: 2}\n")
    result = run_pipeline("configs/custom.yaml")
    assert result.outputs["count"] == {"rows": 14086, "device": "cpu"}


@pytest.mark.parametrize("value", ["high", "-1"])
def test_a_model_param_value_scikit_learn_refuses_is_a_config_error_at_its_key(in_project, value):
    """scikit-learn checks a value's type and range as it fits: that was exit 4, a stage failure."""
    with pytest.raises(ConfigError) as info:
        run_pipeline("configs/churn.yaml", overrides=[*FAST, f"stages.logreg.params.C={value}"], until=["logreg"])
    (issue,) = info.value.issues
    assert issue.path == "stages.logreg.params.C" and "The 'C' parameter of LogisticRegression" in issue.message
    assert info.value.exit_code == 2 and info.value.stage == "logreg"


@pytest.mark.parametrize(("model", "params", "message"), [
    ("xgb", "n_estimators=abc", "parameter 'n_estimators' of model 'xgboost' takes an integer, not 'abc'"),
    ("xgb", "learning_rate=fast", "parameter 'learning_rate' of model 'xgboost' takes a number, not 'fast'"),
])
def test_text_where_xgboost_takes_a_number_is_a_config_error_before_the_fit(in_project, model, params, message):
    """XGBoost checks a value's type deep in its fit: a TypeError naming no key (exit 4)."""
    with pytest.raises(ConfigError) as info:
        run_pipeline("configs/churn.yaml", overrides=[*FAST, f"stages.{model}.params.{params}"], until=[model])
    (issue,) = info.value.issues
    key = params.partition("=")[0]
    assert issue.path == f"stages.{model}.params.{key}" and message in issue.message and info.value.exit_code == 2
