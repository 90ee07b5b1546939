"""The README's library examples, run as written."""

from __future__ import annotations

import os

import pandas as pd

from tests.conftest import TELCO


def test_feature_workflow_on_a_pandas_frame(tmp_path):
    from pipeline import FeatureWorkflow
    from pipeline.features import FillMissing, OneHot, Standardize

    df = pd.read_csv(TELCO, na_values=[" "])
    train, test = df.iloc[:5000], df.iloc[5000:]
    wf = FeatureWorkflow([
        FillMissing(columns=["TotalCharges"], strategy="median"),
        OneHot(columns=["Contract", "InternetService"]),
        Standardize(columns=["tenure", "MonthlyCharges", "TotalCharges"]),
    ])
    X_train = wf.fit_transform(train[["tenure", "MonthlyCharges", "TotalCharges", "Contract", "InternetService"]])
    X_test = wf.transform(test)
    wf.save(tmp_path / "workflow.json")
    assert list(X_test.columns) == list(X_train.columns) and len(X_test) == len(test)
    assert abs(X_train["tenure"].mean()) < 1e-9


def test_load_a_config_and_run_it(project):
    from pipeline import load_config, run_pipeline

    cwd = os.getcwd()
    os.chdir(project)
    try:
        config = load_config("configs/churn.yaml", overrides=["device=cpu", "stages.forest.params.n_estimators=50"])
        result = run_pipeline(config)
    finally:
        os.chdir(cwd)
    assert result.status == "succeeded"
    assert result.evaluation.metrics[result.evaluation.best]["roc_auc"] > 0.83
    assert result.outputs["xgb"].scores["test"].shape == (1409,)


def test_a_hook_watches_a_run(in_project, capsys):
    from pipeline import run_pipeline
    from pipeline.hooks.protocol import MetricEvent, RunEvent, RunHook

    class PrintMetrics(RunHook):
        def metric(self, event: MetricEvent) -> None:          # per epoch (step) and per model
            print(event.stage, event.step or event.model, dict(event.values))

        def run_finished(self, event: RunEvent) -> None:       # run folder + typed run record
            print(event.run.run_dir, event.status, event.manifest.metrics["best"])

    result = run_pipeline("configs/churn.yaml", hooks=[PrintMetrics()],
                          overrides=["device=cpu", "stages.mlp.epochs=2", "stages.forest.params.n_estimators=20"])
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == f"{result.run_dir} succeeded {result.manifest.metrics['best']}"
    assert any(line.startswith("mlp 2 {'loss'") for line in out)
    assert any(line.startswith("evaluate xgb {'roc_auc'") for line in out)


def test_the_auto_example_fits_both_members_it_names(project):
    """The library page's bagging/auto block as written: every name in its ``models=`` is a
    portfolio member (a registry name that is not one is refused), and both are on the leaderboard."""
    import ast
    import re

    from tests.docs.test_readme import SETUP_EXAMPLE, file_blocks
    from tests.support.cli import run_script

    (block,) = [b for b in file_blocks(SETUP_EXAMPLE, "python") if "fit_auto(" in b.text]
    models = re.search(r"fit_auto\(features, .*models=(\[[^]]*\])", block.text).group(1)
    script = project / "auto_example.py"
    script.write_text(block.text, encoding="utf-8")
    done = run_script(script, cwd=project)
    assert done.returncode == 0, done.stderr[-3000:]
    board = done.stdout.strip().splitlines()[-1]
    for name in ast.literal_eval(models):
        assert f"('{name}', 'fitted'" in board, board
