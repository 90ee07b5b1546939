"""The promotion gate: the ``promote`` stage's decisions on real runs of a small generated table,
the runner moving the aliases a succeeded run's stages list, and ``pipeline runs promote``.

Every run is a few hundred rows and a few small trees, so each takes a second or two."""

from __future__ import annotations

import json
import logging
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from pipeline import run_pipeline
from pipeline.cli.app import main
from pipeline.config import load_config
from pipeline.core.errors import ConfigError, PipelineError
from pipeline.runs.history import alias_target
from pipeline.runs.record import read_manifest
from pipeline.stages.promote import decide_promotion

TINY = ["stages.model.params.n_estimators=1", "stages.model.params.max_depth=1"]

HELPERS = '''
def ask_aliases(ctx, inputs, names):
    """A stage that asks the runner to point aliases at its run."""
    ctx.facts["aliases"] = list(names)
    return None


def fail(ctx, inputs):
    raise ValueError("this stage fails after the gate")
'''


def generated(rows: int, seed: int) -> pd.DataFrame:
    """A binary target with an interaction a deeper tree finds and a stump does not."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, 3))
    signal = x[:, 0] + 1.5 * x[:, 1] * x[:, 2] + rng.normal(scale=0.5, size=rows)
    return pd.DataFrame({"id": [f"c{seed}-{i}" for i in range(rows)], "x1": x[:, 0], "x2": x[:, 1], "x3": x[:, 2],
                         "y": np.where(signal > 0, "yes", "no")})


def project(folder: Path, *, promote: str = "inputs: [split, evaluate, export]", extra: str = "") -> Path:
    """A config over a generated table; ``extra`` adds stages after the gate."""
    generated(500, 0).to_csv(folder / "rows.csv", index=False)
    (folder / "promote_helpers.py").write_text(HELPERS)
    text = textwrap.dedent(f"""\
        name: nightly
        device: cpu
        seed: 7
        stages:
          raw: {{kind: load, path: {folder / 'rows.csv'}}}
          split: {{kind: split, inputs: [raw], target: y, positive: "yes", test: 0.3}}
          features:
            kind: features
            inputs: [split]
            id: id
            ops: [{{standardize: {{columns: [x1, x2, x3]}}}}]
          model:
            kind: train
            inputs: [features]
            model: xgboost
            params: {{n_estimators: 40, max_depth: 3, learning_rate: 0.3, n_jobs: 1}}
          evaluate: {{kind: evaluate, inputs: [model], importance: false}}
          export: {{kind: export, inputs: [model]}}
          promote:
            kind: promote
        """) + textwrap.indent(promote + "\n", "    ") + textwrap.indent(textwrap.dedent(extra), "  ")
    path = folder / "nightly.yaml"
    path.write_text(text)
    return path


def run(config: Path, *overrides: str, **kwargs):
    return run_pipeline(config, runs_dir=config.parent / "runs", overrides=list(overrides), **kwargs)


def champion_of(config: Path) -> str | None:
    return alias_target(config.parent / "runs" / "nightly", "champion")


def promotion(result) -> dict:
    return result.manifest.stages["promote"].facts["promotion"]


def test_the_first_run_is_promoted_and_an_equal_run_with_min_improvement_is_kept(tmp_path):
    config = project(tmp_path)
    first = run(config)
    decided = promotion(first)
    assert decided["decision"] == "promoted" and decided["reason"].startswith("first")
    assert decided["champion"] is None and decided["new"]["run_id"] == first.run_id
    assert decided["new"]["model"] == "model" and decided["rows"] == 150 and decided["metric"] == "roc_auc"
    assert first.manifest.stages["promote"].facts["aliases"] == ["champion"]
    assert champion_of(config) == first.run_id
    written = json.loads((first.run_dir / "promote" / "promotion.json").read_text())
    assert {k: written[k] for k in decided} == decided
    assert "promote/promotion.json" in first.manifest.artifacts         # checksummed like every artifact

    second = run(config, "stages.promote.min_improvement=0.01")
    decided = promotion(second)
    assert decided["decision"] == "kept" and "min_improvement 0.01" in decided["reason"]
    # The same model on the same rows: the champion scored through its own folder gives the
    # evaluation's number.
    assert decided["champion"]["run_id"] == first.run_id
    assert decided["champion"]["value"] == pytest.approx(decided["new"]["value"], abs=1e-9)
    assert "aliases" not in second.manifest.stages["promote"].facts
    from pipeline.report.build import build_report

    page = build_report(second.run_dir).read_text()
    assert "Promotion gate <b>promote</b>: <b>kept</b>" in page and first.run_id in page
    assert champion_of(config) == first.run_id
    assert alias_target(tmp_path / "runs" / "nightly", "latest") == second.run_id


def test_a_worse_model_is_kept_within_max_regression_rules_and_a_better_one_promoted(tmp_path):
    config = project(tmp_path, promote="inputs: [split, evaluate, export]\nmax_regression: 0.01")
    stump = run(config, *TINY)
    assert champion_of(config) == stump.run_id
    better = run(config)
    decided = promotion(better)
    assert decided["decision"] == "promoted" and decided["max_regression"] == 0.01
    assert decided["min_improvement"] is None
    assert decided["new"]["value"] > decided["champion"]["value"] + 0.05
    assert champion_of(config) == better.run_id
    worse = run(config, *TINY)
    decided = promotion(worse)
    assert decided["decision"] == "kept" and "max_regression 0.01" in decided["reason"]
    assert decided["champion"]["run_id"] == better.run_id
    assert champion_of(config) == better.run_id


def test_the_decision_is_never_taken_from_the_cache(tmp_path):
    config = project(tmp_path)
    first = run(config)
    second = run(config)                       # every stage before the gate comes from the cache
    assert second.manifest.stages["export"].status == "cached"
    assert second.manifest.stages["promote"].status == "succeeded"
    decided = promotion(second)
    assert decided["champion"]["run_id"] == first.run_id          # not the first run's "first" decision
    assert decided["decision"] == "promoted"                      # a tie: the newer model serves
    assert champion_of(config) == second.run_id


def test_a_run_that_fails_after_the_gate_leaves_the_champion_where_it_was(tmp_path):
    config = project(tmp_path, extra="""\
        after: {kind: python, inputs: [promote], function: "promote_helpers:fail"}
        """)
    first = run(config, only=["promote"])
    assert champion_of(config) == first.run_id
    with pytest.raises(PipelineError, match="fails after the gate"):
        run(config)
    runs = sorted(p for p in (tmp_path / "runs" / "nightly").iterdir() if p.name.startswith("20"))
    failed = read_manifest(runs[-1])
    assert failed.status == "failed" and failed.stages["promote"].facts["promotion"]["decision"] == "promoted"
    assert champion_of(config) == first.run_id


def test_a_holdout_file_is_what_both_models_are_scored_on(tmp_path):
    holdout = tmp_path / "holdout.csv"
    generated(200, 1).to_csv(holdout, index=False)
    config = project(tmp_path, promote=f"inputs: [split, evaluate, export]\nholdout: {holdout}")
    first = run(config, *TINY)
    assert promotion(first)["rows"] == 200
    second = run(config)
    decided = promotion(second)
    assert decided["rows"] == 200 and decided["decision"] == "promoted"
    assert decided["champion"]["run_id"] == first.run_id
    assert decided["new"]["value"] > decided["champion"]["value"]
    written = json.loads((second.run_dir / "promote" / "promotion.json").read_text())
    assert written["rows_from"] == str(holdout)
    # A holdout without the target is refused by name.
    generated(50, 2).drop(columns=["y"]).to_csv(holdout, index=False)
    with pytest.raises(PipelineError, match="no target column 'y'"):
        run(config)
    assert champion_of(config) == second.run_id


def test_a_holdout_gate_reads_this_runs_model_when_the_export_came_from_the_cache(tmp_path):
    """The cached export named the files of the run that first wrote them: once that run was
    pruned (a nightly `runs prune --keep 1`) the gate failed every night, exit 3, "... is not an
    exported model folder"."""
    import shutil

    holdout = tmp_path / "holdout.csv"
    generated(200, 1).to_csv(holdout, index=False)
    config = project(tmp_path, promote=f"inputs: [split, evaluate, export]\nholdout: {holdout}")
    first = run(config)
    shutil.rmtree(first.run_dir)                     # pruned; the cache keeps the export's entry
    second = run(config)
    assert second.manifest.stages["export"].status == "cached"
    assert promotion(second)["rows"] == 200


def test_the_first_promotion_reads_the_holdout_as_this_run_read_its_rows(tmp_path):
    """With no champion yet, the holdout was read without the run's na_values: a ' ' the load
    stage reads as missing made x1 text, and the first gate failed (exit 3)."""
    holdout = tmp_path / "holdout.csv"
    rows = generated(200, 1).astype({"x1": object})
    rows.loc[:4, "x1"] = " "
    rows.to_csv(holdout, index=False)
    config = project(tmp_path, promote=f"inputs: [split, evaluate, export]\nholdout: {holdout}")
    config.write_text(config.read_text().replace("path: " + str(tmp_path / "rows.csv") + "}",
                                                 "path: " + str(tmp_path / "rows.csv") + ', na_values: [" "]}')
                      .replace("ops: [{standardize", "ops: [{fill_missing: {columns: [x1]}}, {standardize"))
    assert 'na_values: [" "]' in config.read_text()
    first = run(config)
    assert promotion(first)["rows"] == 200 and champion_of(config) == first.run_id


def test_a_champion_that_cannot_be_compared_with_is_kept_with_a_warning(tmp_path, caplog):
    import shutil

    config = project(tmp_path)
    first = run(config)
    workflow = first.run_dir / "export" / "models" / "model" / "workflow.json"
    workflow.write_text(workflow.read_text().replace("x1", "x9", 1))          # no longer what the manifest lists
    with caplog.at_level(logging.WARNING, logger="pipeline"):
        corrupt = run(config)
    decided = promotion(corrupt)
    assert decided["decision"] == "kept" and decided["champion"] is None
    assert first.run_id in decided["reason"] and "corrupt" in decided["reason"]
    assert any("pipeline runs promote" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    assert champion_of(config) == first.run_id

    shutil.rmtree(first.run_dir)
    gone = run(config)
    assert promotion(gone)["decision"] == "kept" and "is gone" in promotion(gone)["reason"]
    assert champion_of(config) == first.run_id


def test_with_a_signing_key_the_champion_is_verified_and_the_gate_still_reads_its_own_run(tmp_path, monkeypatch):
    monkeypatch.setenv("PIPELINE_SIGNING_KEY", "promote-tests-signing-key-0123456789abcdef")
    holdout = tmp_path / "holdout.csv"
    generated(100, 3).to_csv(holdout, index=False)
    config = project(tmp_path, promote=f"inputs: [split, evaluate, export]\nholdout: {holdout}")
    first = run(config)
    second = run(config)
    assert promotion(second)["champion"]["run_id"] == first.run_id
    assert promotion(second)["champion"]["value"] == pytest.approx(promotion(second)["new"]["value"], abs=1e-9)
    # A champion whose signed manifest was edited is not believed: kept.
    manifest = second.run_dir / "manifest.json"
    manifest.write_text(manifest.read_text().replace('"succeeded"', '"succeeded" ', 1))
    third = run(config)
    assert promotion(third)["decision"] == "kept" and second.run_id in promotion(third)["reason"]
    assert champion_of(config) == second.run_id


def test_runs_promote_moves_the_champion_by_hand_and_refuses_what_cannot_serve(tmp_path):
    config = project(tmp_path, extra="""\
        after: {kind: python, inputs: [promote], function: "promote_helpers:fail"}
        """)
    first = run(config, only=["promote"])
    second = run(config, "stages.promote.min_improvement=0.5", only=["promote"])
    assert champion_of(config) == first.run_id
    runs_dir = str(tmp_path / "runs")
    moved = CliRunner().invoke(main, ["runs", "promote", second.run_id, "--runs-dir", runs_dir])
    assert moved.exit_code == 0, moved.output
    assert f"from nightly/{first.run_id} to nightly/{second.run_id}" in moved.output
    assert champion_of(config) == second.run_id
    back = CliRunner().invoke(main, ["runs", "promote", first.run_id, "--runs-dir", runs_dir, "--pipeline", "nightly"])
    assert back.exit_code == 0 and champion_of(config) == first.run_id
    # A folder path names its run whatever --pipeline says: a rollback of another pipeline is
    # refused, and one given by path into another runs folder says which folder's champion moved.
    folder = str(tmp_path / "runs" / "nightly" / second.run_id)
    other = CliRunner().invoke(main, ["runs", "promote", folder, "--runs-dir", runs_dir, "--pipeline", "weekly"])
    assert other.exit_code == 2 and "is of pipeline 'nightly', not 'weekly' (--pipeline)" in other.output
    assert champion_of(config) == first.run_id
    elsewhere = CliRunner().invoke(main, ["runs", "promote", folder, "--runs-dir", str(tmp_path / "other-runs")])
    assert elsewhere.exit_code == 0 and f"in {tmp_path / 'runs'} (the run folder's own runs folder" in elsewhere.output
    assert champion_of(config) == second.run_id
    CliRunner().invoke(main, ["runs", "promote", first.run_id, "--runs-dir", runs_dir])

    unexported = run(config, until=["evaluate"])
    refused = CliRunner().invoke(main, ["runs", "promote", unexported.run_id, "--runs-dir", runs_dir])
    assert refused.exit_code == 3 and "exported no models" in refused.output
    with pytest.raises(PipelineError):
        run(config)
    failed = sorted(p for p in (tmp_path / "runs" / "nightly").iterdir() if p.name.startswith("20"))[-1]
    refused = CliRunner().invoke(main, ["runs", "promote", failed.name, "--runs-dir", runs_dir])
    assert refused.exit_code == 3 and "did not succeed (status: failed); promote with a succeeded" in refused.output
    assert champion_of(config) == first.run_id

    shown = CliRunner().invoke(main, ["runs", "show", "champion", "--runs-dir", runs_dir])
    assert shown.exit_code == 0 and "champion" in shown.output and "promote: promoted" in shown.output


@pytest.mark.parametrize(("overrides", "key", "words"), [
    (["stages.promote.min_improvement=0.01", "stages.promote.max_regression=0.01"], "stages.promote.max_regression",
     "set one of them"),
    (["stages.promote.metric=auc"], "stages.promote.metric", "unknown metric 'auc'"),
    (["stages.promote.min_improvement=-0.1"], "stages.promote.min_improvement", "greater than or equal to 0"),
    (["stages.promote.holdout=''"], "stages.promote.holdout", "at least 1 character"),
    (["stages.promote.threshold=0.5"], "stages.promote.threshold", "unknown key"),
])
def test_bad_keys_are_config_errors_naming_the_key(tmp_path, overrides, key, words):
    config = project(tmp_path)
    with pytest.raises(ConfigError) as caught:
        load_config(config, overrides=overrides)
    assert any(issue.path == key and words in issue.message for issue in caught.value.issues), caught.value


def test_wiring_and_a_metric_of_another_task_are_config_errors_naming_the_key(tmp_path):
    config = project(tmp_path, promote="inputs: [evaluate]")
    with pytest.raises(ConfigError) as caught:               # before any data is read
        load_config(config)
    issues = [issue for issue in caught.value.issues if issue.path == "stages.promote.inputs"]
    line = next(n for n, text in enumerate(config.read_text().splitlines(), 1) if "inputs: [evaluate]" in text)
    assert len(issues) == 2 and all(issue.line == line for issue in issues)
    assert "split stage" in issues[0].message and "export stage" in issues[1].message
    (tmp_path / "other").mkdir()
    load_config(project(tmp_path / "other", promote=f"inputs: [evaluate, export]\nholdout: {tmp_path / 'rows.csv'}"))
    with pytest.raises(ConfigError, match="stages.promote.inputs"):
        run(config)
    assert champion_of(config) is None
    config = project(tmp_path, promote="inputs: [split, evaluate, export]\nmetric: rmse")
    with pytest.raises(PipelineError, match=r"stages\.promote\.metric.*rmse"):
        run(config)


def test_the_runner_points_the_aliases_a_stage_lists_and_ignores_other_names(tmp_path, caplog):
    config = project(tmp_path, extra="""\
        mark:
          kind: python
          inputs: [raw]
          function: "promote_helpers:ask_aliases"
          params: {names: [champion, staging, latest]}
        """)
    with caplog.at_level(logging.WARNING, logger="pipeline"):
        result = run(config, only=["mark"])
    assert champion_of(config) == result.run_id
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("'staging'" in line and "ignored" in line for line in warned), warned
    assert any("'latest'" in line and "ignored" in line for line in warned), warned


@pytest.mark.parametrize(("metric", "new", "champion", "rule", "decision"), [
    ("roc_auc", 0.80, None, {}, "promoted"),
    ("roc_auc", 0.80, 0.80, {}, "promoted"),
    ("roc_auc", 0.80, 0.80, {"min_improvement": 0.01}, "kept"),
    ("roc_auc", 0.795, 0.80, {"max_regression": 0.01, "min_improvement": None}, "promoted"),
    ("roc_auc", 0.78, 0.80, {"max_regression": 0.01, "min_improvement": None}, "kept"),
    ("log_loss", 0.40, 0.45, {"min_improvement": 0.04}, "promoted"),       # lower is better
    ("log_loss", 0.44, 0.45, {"min_improvement": 0.04}, "kept"),
    ("rmse", float("nan"), 1.0, {}, "kept"),
])
def test_the_decision_follows_the_metric_direction(metric, new, champion, rule, decision):
    assert decide_promotion(metric, new, champion, **rule)[0] == decision


def test_a_champion_that_is_a_plain_file_is_refused_named_and_left_untouched(tmp_path):
    """Read as "no champion yet", a plain file in the alias's place was promoted over and lost."""
    from pipeline.core.errors import DataError
    from pipeline.runs.store import RunStore

    config = project(tmp_path)
    pipeline_dir = tmp_path / "runs" / "nightly"
    pipeline_dir.mkdir(parents=True)
    (pipeline_dir / "champion").write_text("run-2026-11-30 # chosen by hand\n")
    with pytest.raises(DataError, match=r"champion' is a plain file, not a link to a run folder.*mv .*champion\.bak"):
        run(config)
    assert (pipeline_dir / "champion").read_text() == "run-2026-11-30 # chosen by hand\n"
    finished = next(p for p in pipeline_dir.iterdir() if p.is_dir() and not p.is_symlink()
                    and not p.name.startswith("."))
    with pytest.raises(DataError, match="is a plain file"):        # nor replaced by a direct move
        RunStore(pipeline_dir.parent, "nightly").mark_alias(finished, "champion")
    assert (pipeline_dir / "champion").read_text() == "run-2026-11-30 # chosen by hand\n"


def test_a_run_of_several_models_without_an_evaluation_is_promoted_and_predict_takes_model(tmp_path):
    """It was refused: "names no best model; pass --model", an option runs promote has not."""
    generated(300, 1).to_csv(tmp_path / "rows.csv", index=False)
    config = tmp_path / "two.yaml"
    config.write_text(textwrap.dedent(f"""\
        name: nightly
        device: cpu
        stages:
          raw: {{kind: load, path: {tmp_path / 'rows.csv'}}}
          split: {{kind: split, inputs: [raw], target: y, positive: "yes", test: 0.3}}
          features: {{kind: features, inputs: [split], id: id, ops: [{{standardize: {{columns: [x1, x2, x3]}}}}]}}
          logreg: {{kind: train, inputs: [features], model: logistic_regression}}
          model: {{kind: train, inputs: [features], model: xgboost, params: {{n_estimators: 5, n_jobs: 1}}}}
          export: {{kind: export, inputs: [logreg, model]}}
        """))
    result = run(config)
    runs_dir = str(tmp_path / "runs")
    moved = CliRunner().invoke(main, ["runs", "promote", result.run_id, "--runs-dir", runs_dir])
    assert moved.exit_code == 0, moved.output
    assert "models logreg, model: no evaluation chose a best, so predict and serve take --model" in moved.output
    assert champion_of(config) == result.run_id
    generated(20, 2).drop(columns="y").to_csv(tmp_path / "new.csv", index=False)
    scored = CliRunner().invoke(main, ["predict", "--run", "champion", "--runs-dir", runs_dir, "--input",
                                       str(tmp_path / "new.csv"), "--output", str(tmp_path / "s.csv"), "--model", "logreg"])
    assert scored.exit_code == 0, scored.output


def test_rows_that_rank_the_champion_below_chance_keep_it(tmp_path, caplog):
    """An extract with its labels swapped (yes for no) scored the champion below chance on this
    run's test split and promoted a model that ranks rows backwards, exit 0. Without holdout:
    those rows cannot judge either model: the champion is kept, with a warning saying why."""
    config = project(tmp_path)
    first = run(config)
    assert promotion(first)["decision"] == "promoted"
    swapped = generated(500, 0)
    swapped["y"] = swapped["y"].map({"yes": "no", "no": "yes"})
    swapped.to_csv(tmp_path / "rows.csv", index=False)
    with caplog.at_level("WARNING", logger="pipeline"):
        second = run(config)
    decided = promotion(second)
    assert decided["decision"] == "kept" and champion_of(config) == first.run_id
    assert "below chance (0.5): their labels look inverted or scrambled" in decided["reason"]
    assert any("below chance" in r.getMessage() for r in caplog.records)
