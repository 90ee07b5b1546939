"""The ``auto`` stage: a time-limited portfolio, bagged and blended on out-of-fold scores, from a
config that names no column and no model."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.support.cli import run_cli as _pipeline
from pipeline.config import load_config
from pipeline.core.errors import ConfigError
from pipeline.features.auto_ops import default_ops
from pipeline.metrics import task_metrics
from pipeline.stages import build_features, split_frame
from pipeline.stages.auto import fit_auto, portfolio

ROOT = Path(__file__).resolve().parents[2]


def table(n: int = 900, task: str = "binary", seed: int = 0) -> pd.DataFrame:
    """Numbers (one with gaps), a text column, a flag: what a table nobody described holds."""
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({"id": np.arange(n), "x1": rng.normal(size=n), "x2": rng.normal(size=n),
                          "plan": rng.choice(["basic", "plus", "pro"], n), "flag": rng.random(n) < 0.4})
    signal = frame.x1 + 0.8 * (frame.plan == "pro") - 0.5 * frame.flag + 0.3 * frame.x2 ** 2
    frame.loc[rng.random(n) < 0.1, "x2"] = np.nan
    noise = rng.normal(scale=0.8, size=n)
    if task == "binary":
        frame["target"] = np.where(signal + noise > 0.4, "yes", "no")
    elif task == "multiclass":
        frame["target"] = pd.cut(signal + noise, [-np.inf, -0.3, 0.7, np.inf], labels=["low", "mid", "high"]).astype(str)
    else:
        frame["target"] = 10 * signal + noise
    return frame


def features_of(frame: pd.DataFrame, task: str):
    split = split_frame(frame, "target", test=0.25, seed=1, backend="cpu", task=task,
                        positive="yes" if task == "binary" else None)
    return build_features(split, default_ops(task), id_column="id")


@pytest.mark.parametrize("task", ["binary", "multiclass", "regression"])
def test_every_task_gets_a_blend_that_is_scored_out_of_fold(task):
    features = features_of(table(task=task), task)
    result = fit_auto(features, time_limit=120, models=["linear", "extra_trees"], bag=3, seed=3)
    fitted = [r for r in result.leaderboard if r.status == "fitted"]
    assert [r.model for r in fitted] and {r.model for r in fitted} == {"linear", "extra_trees"}
    labels = np.asarray(features.labels("train"))
    for record, member in ((r, next(m for m in result.model.members if m.name == r.model)) for r in fitted):
        # The leaderboard's score is the member's out-of-fold score, one per training row.
        assert member.oof_scores.shape[0] == len(labels)
        assert record.oof == pytest.approx(task_metrics(features.task, labels, member.oof_scores)[result.metric])
    weights = result.model.weights
    assert abs(sum(weights.values()) - 1) < 1e-9 and all(w >= 0 for w in weights.values())
    # The blend is fitted on the out-of-fold rows, never worse there than its best member.
    blend_oof = task_metrics(features.task, labels, result.model.oof_scores)[result.metric]
    best = max if result.metric == "roc_auc" else min
    assert blend_oof == best(blend_oof, *(r.oof for r in fitted)) or np.isclose(blend_oof, best(r.oof for r in fitted))
    test = task_metrics(features.task, np.asarray(features.labels("test")), result.model.scores["test"])
    assert np.isfinite(test[result.metric])


# ------------------------------------------------------------------ the plan (no bag: given)
def test_the_plan_screens_every_member_on_the_holdout_then_bags_those_that_earn_weight():
    features = features_of(table(), "binary")
    models = ["linear", "extra_trees", "random_forest"]
    result = fit_auto(features, time_limit=300, models=models, seed=3)
    assert result.mode == "planned"
    # The whole stage is the blend's fit: evaluate sizes its importance by it.
    assert result.model.fit_seconds == result.seconds >= sum(s.seconds or 0 for s in result.plan)
    screens = [s for s in result.plan if s.step == "screen"]
    assert [s.model for s in screens] == models and all(s.decision == "fitted on the holdout" for s in screens)
    assert screens[0].projected is None and all(s.projected > 0 and s.seconds > 0 for s in screens[1:])
    weights = {r.model: r.weight for r in result.leaderboard}
    folds = {r.model: r.folds for r in result.leaderboard}
    bagged = {s.model: s.decision for s in result.plan if s.step == "bag"}
    assert set(bagged) == set(models)
    for model in models:                    # with time to spare: what earned weight has every fold
        earned = not bagged[model].startswith("not bagged")
        assert folds[model] == (5 if earned else 1), (model, bagged[model])
    # Weight-0 members are left out of the model; the others are bags of their folds.
    assert list(result.model.weights) == [m for m in models if weights[m] > 0]
    assert all(m.model == "bagged" and len(m.estimator.members) == folds[m.name] for m in result.model.members)
    assert result.plan[-1].step == "blend"
    labels = np.asarray(features.labels("train"))
    for record in result.leaderboard:      # holdout: fold 0's rows; oof: every row its folds held out
        assert 0.5 < record.holdout <= 1 and record.oof is not None
    assert result.model.oof_scores is None or len(result.model.oof_scores) == len(labels)


def test_a_member_projected_past_the_time_left_is_skipped_with_its_projection(monkeypatch):
    import dataclasses

    from pipeline.stages import auto

    heavy = [dataclasses.replace(m, cost=1e6) if m.model == "random_forest" else m for m in auto.portfolio()]
    monkeypatch.setattr(auto, "portfolio", lambda: heavy)
    features = features_of(table(), "binary")
    result = fit_auto(features, time_limit=60, models=["linear", "random_forest"])
    forest = next(r for r in result.leaderboard if r.model == "random_forest")
    assert forest.status == "skipped" and "projected at" in forest.reason
    step = next(s for s in result.plan if s.model == "random_forest")
    assert step.projected > 60 and step.seconds is None
    assert list(result.model.weights) == ["linear"]


def test_the_time_left_goes_to_second_configurations_of_the_best_model_first(monkeypatch):
    """After the bags, each second configuration is tried (best base model's first) while its
    five fits are projected to fit; one that earns weight beside the bagged members is bagged."""
    import dataclasses

    from pipeline.stages import auto

    base = [m for m in auto.portfolio() if m.label in ("linear", "extra_trees")]
    extras = [auto.PortfolioMember("linear", {"*": {"C": 0.05}}, name="linear_tight", extra=True, cost=0.3),
              auto.PortfolioMember("extra_trees", {"*": {"n_estimators": 50, "max_features": 1.0}},
                                   name="extra_trees_all", extra=True, cost=1.0),
              auto.PortfolioMember("extra_trees", {"*": {"n_estimators": 50}}, name="extra_trees_huge", extra=True,
                                   cost=1e6)]
    monkeypatch.setattr(auto, "portfolio", lambda: [*base, *extras])
    features = features_of(table(), "binary")
    result = fit_auto(features, time_limit=300, seed=3)
    board = {r.model: r for r in result.leaderboard}
    tried = [s.model for s in result.plan if s.step == "extra"]
    better_first = ["extra_trees_all", "linear_tight"] if board["extra_trees"].holdout > board["linear"].holdout \
        else ["linear_tight", "extra_trees_all"]
    assert [m for m in tried if m != "extra_trees_huge"] == better_first
    huge = next(s for s in result.plan if s.model == "extra_trees_huge")
    assert huge.decision.startswith("skipped: its 5 fits were projected at") and huge.seconds is None
    assert board["extra_trees_huge"].status == "skipped"
    screens = [s.model for s in result.plan if s.step == "screen"]
    assert screens == [m.label for m in base]             # the extras only after the bags
    for name in ("linear_tight", "extra_trees_all"):
        bagged = next(s.decision for s in result.plan if s.step == "bag" and s.model == name)
        assert board[name].folds == (1 if bagged.startswith("not bagged") else 5), bagged
        assert board[name].params == next(m for m in extras if m.label == name).params["*"]
    assert set(result.model.weights) <= {"linear", "extra_trees", "linear_tight", "extra_trees_all"}
    # Fixed mode fits the portfolio without them; naming one fits it as any member.
    fixed = fit_auto(features, time_limit=300, bag=2, seed=3)
    assert {r.model for r in fixed.leaderboard} == {"linear", "extra_trees"}
    named = fit_auto(features, time_limit=300, models=["linear_tight", "linear"], seed=3)
    assert [s.model for s in named.plan if s.step == "screen"] == ["linear_tight", "linear"]
    assert dataclasses.replace(extras[0], extra=False) in auto.portfolio_for("binary", "auto", ["linear_tight"])


def test_a_boosters_projection_grows_with_the_classes_and_the_others_do_not():
    """A booster grows a tree per class each round: on a 26-class table LightGBM's first fit took
    17 s and the MLP 6 s, and the MLP, projected at 6x LightGBM, was skipped."""
    import time

    from pipeline.stages.auto import _Run, portfolio_for

    features = features_of(table(task="multiclass"), "multiclass")          # 3 classes
    run = _Run(features, portfolio_for("multiclass", "auto"), time_limit=60, seed=0, name="auto",
               log=lambda _: None, started=time.perf_counter())
    units = {m.label: run._units(m) for m in portfolio_for("multiclass", "auto")}
    assert units["lightgbm"] == 3 and units["xgboost"] == 3 * 1.2 and units["lightgbm_xt"] == 3
    assert units["mlp"] == 6.0 and units["random_forest"] == 9.0 and units["linear"] == 0.3
    binary = _Run(features_of(table(), "binary"), [], time_limit=60, seed=0, name="auto", log=lambda _: None,
                  started=time.perf_counter())
    assert binary._units(portfolio_for("binary", "auto")[0]) == 1


def test_a_gpu_runs_projection_uses_each_members_device_cost():
    """On a GPU run the members with CUDA builds fit on the device, LightGBM on the host: their
    multiples of LightGBM's fit differ from the CPU's (the H200's: the MLP 0.54x its CPU multiple,
    cuML's forest 1.4x), so the plan projects them with ``device_cost``; a member without one
    (LightGBM, on the host either way) keeps ``cost``. Through the backend seam: the CPU
    backend under the GPU's name."""
    import dataclasses
    import time

    from pipeline.backends.cpu import CpuBackend
    from pipeline.stages.auto import _Run, portfolio_for

    class DeviceStandIn(CpuBackend):
        name = "gpu"

    features = features_of(table(), "binary")
    members = portfolio_for("binary", "auto")
    on_gpu = _Run(dataclasses.replace(features, backend=DeviceStandIn()), members, time_limit=60, seed=0,
                  name="auto", log=lambda _: None, started=time.perf_counter())
    on_cpu = _Run(features, members, time_limit=60, seed=0, name="auto", log=lambda _: None,
                  started=time.perf_counter())
    by_label = {m.label: m for m in members}
    assert on_gpu._units(by_label["mlp"]) == by_label["mlp"].device_cost < by_label["mlp"].cost
    assert on_cpu._units(by_label["mlp"]) == by_label["mlp"].cost
    assert on_gpu._units(by_label["random_forest"]) > on_cpu._units(by_label["random_forest"])
    assert by_label["lightgbm"].device_cost is None and on_gpu._units(by_label["lightgbm"]) == 1
    plugin = dataclasses.replace(by_label["mlp"], device_cost=None)
    assert on_gpu._units(plugin) == plugin.cost                 # a member without a measured device cost


def test_the_leaderboard_ranks_members_on_the_rows_every_one_of_them_scored():
    """A member fitted on one fold has out-of-fold scores on a fifth of the rows, a bagged one
    on all: ranking by each one's own rows listed a 1-fold xgboost above a lightgbm that was
    better on the rows both scored."""
    features = features_of(table(), "binary")
    result = fit_auto(features, time_limit=120, models=["linear", "random_forest", "extra_trees"], seed=1)
    fitted = [r for r in result.leaderboard if r.status == "fitted"]
    assert len(fitted) == 3 and all(r.shared is not None for r in fitted)
    assert [r.shared for r in fitted] == sorted((r.shared for r in fitted), reverse=True)
    least = min(r.folds for r in fitted)
    for record in fitted:           # the rows all scored: fold 0's if one was fitted on it alone
        assert record.shared == pytest.approx(record.holdout if least == 1 else record.oof)
        assert record.to_dict()["shared"] == round(record.shared, 6)


def test_a_member_projected_past_a_quarter_of_the_limit_is_skipped_however_much_time_is_left(monkeypatch):
    from pipeline.stages import auto

    monkeypatch.setattr(auto, "FIRST_FIT_SHARE", 1e-9)      # any projection is past the share
    features = features_of(table(), "binary")
    result = fit_auto(features, time_limit=600, models=["linear", "extra_trees"])
    extra = next(r for r in result.leaderboard if r.model == "extra_trees")
    assert extra.status == "skipped" and "past a quarter of the 600s limit" in extra.reason


@pytest.mark.parametrize("bag", [None, 2], ids=["planned", "fixed"])
def test_a_missing_library_is_a_plan_step_and_members_are_scored_on_the_valid_split(monkeypatch, bag):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "xgboost" else real(name, *a))
    frame = table()
    split = split_frame(frame, "target", test=0.2, valid=0.2, seed=1, backend="cpu", task="binary", positive="yes")
    features = build_features(split, default_ops("binary"), id_column="id")
    result = fit_auto(features, time_limit=120, models=["xgboost", "linear"], bag=bag)
    xgb = next(r for r in result.leaderboard if r.model == "xgboost")
    assert xgb.status == "skipped" and "not installed" in xgb.reason
    if bag is None:
        assert next(s for s in result.plan if s.model == "xgboost").decision == f"skipped: {xgb.reason}"
    logistic = next(r for r in result.leaderboard if r.model == "linear")
    labels = np.asarray(features.labels("valid"))
    scores = next(m for m in result.model.members if m.name == "linear").scores["valid"]
    assert logistic.valid == pytest.approx(task_metrics(features.task, labels, scores)["roc_auc"])


def test_with_no_time_left_the_first_member_alone_is_the_model_fitted_on_its_holdout():
    features = features_of(table(), "binary")
    result = fit_auto(features, time_limit=1e-6, models=["linear", "extra_trees"])
    first = result.leaderboard[0]
    assert (first.model, first.status, first.folds) == ("linear", "fitted", 1)
    extra = next(r for r in result.leaderboard if r.model == "extra_trees")
    assert extra.status == "skipped" and extra.reason
    bag = next(s for s in result.plan if s.step == "bag")
    assert bag.decision.startswith("bagged on 1 of 5 folds (its next fold was projected")
    # Scored out of fold on fold 0's rows only: a later stage must not fit on the others.
    assert result.model.oof_scores is None and result.model.fitted_on == "holdout"
    test = task_metrics(features.task, np.asarray(features.labels("test")), result.model.scores["test"])
    assert 0.5 < test["roc_auc"] <= 1


def test_a_time_limit_keeps_the_first_member_and_stops_or_skips_the_rest():
    features = features_of(table(), "binary")
    result = fit_auto(features, time_limit=1e-6, models=["linear", "extra_trees", "random_forest"],
                      bag=3)
    status = {r.model: r.status for r in result.leaderboard}
    assert status["linear"] == "fitted"          # the first member always finishes
    assert status["extra_trees"] in ("stopped", "skipped") and status["random_forest"] in ("stopped", "skipped")
    assert all(r.reason for r in result.leaderboard if r.status != "fitted")
    assert list(result.model.weights) == ["linear"]


def test_a_member_without_its_library_is_skipped_with_the_reason(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "xgboost" else real(name, *a))
    features = features_of(table(), "binary")
    result = fit_auto(features, time_limit=60, models=["xgboost", "linear"], bag=2)
    xgb = next(r for r in result.leaderboard if r.model == "xgboost")
    assert xgb.status == "skipped" and "xgboost" in xgb.reason and "not installed" in xgb.reason
    assert list(result.model.weights) == ["linear"]


def test_the_stack_option_fits_a_meta_model_on_the_members_out_of_fold_scores():
    features = features_of(table(), "binary")
    result = fit_auto(features, time_limit=120, models=["linear", "extra_trees"], bag=3,
                      ensemble="stack")
    assert result.model.model == "stacked"
    assert result.model.oof_scores is not None and len(result.model.oof_scores) == features.rows()["train"]


def test_config_errors_name_the_key(tmp_path):
    table().to_csv(tmp_path / "rows.csv", index=False)
    base = (f"name: t\nstages:\n  raw: {{kind: load, path: {tmp_path / 'rows.csv'}}}\n"
            "  split: {kind: split, inputs: [raw], target: target, positive: 'yes'}\n")
    with pytest.raises(ConfigError, match=r"stages\.auto\.models.*not in the portfolio: lightgbn"):
        load_config(text=base + "  auto: {kind: auto, inputs: [split], models: [lightgbn]}\n")
    with pytest.raises(ConfigError, match=r"stages\.auto\.time_limit"):
        load_config(text=base + "  auto: {kind: auto, inputs: [split], time_limit: soon}\n")
    config = load_config(text=base + "  auto: {kind: auto, inputs: [split], time_limit: 2m}\n")
    assert config.stages["auto"].time_limit == 120
    # The target as the id: it was accepted, and the predictions held the label beside its score.
    with pytest.raises(ConfigError, match=r"stages\.auto\.id.*is the split's target: the label cannot be the id"):
        load_config(text=base + "  auto: {kind: auto, inputs: [split], id: target}\n", check_data=True)


def test_the_portfolio_names_only_registered_models():
    from pipeline.models import MODELS

    members = portfolio()
    assert members and all(member.model in MODELS for member in members), [m.model for m in members]


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return _pipeline(*args, cwd=cwd, env={"COLUMNS": "200", "PYTHONPATH": str(ROOT)})


@pytest.mark.slow
def test_a_config_with_no_column_and_no_model_runs_exports_and_predicts(tmp_path):
    frame = table(n=700)
    # Columns that are not features, by init's rule: auto leaves them out and says so.
    words = np.array(["late", "payment", "called", "twice", "about", "the", "bill", "and", "router"])
    rng = np.random.default_rng(3)
    frame["row"] = np.arange(len(frame)) * 3 + 100                      # counts up row by row
    frame["country"] = "NZ"
    frame["surname"] = [f"name{i:04d}x" for i in rng.permutation(len(frame))]
    frame["note"] = [" ".join(rng.choice(words, 6)) + f" {i}" for i in range(len(frame))]
    frame.to_csv(tmp_path / "rows.csv", index=False)
    (tmp_path / "auto.yaml").write_text(
        "name: auto_demo\nseed: 7\nstages:\n"
        "  raw: {kind: load, path: rows.csv}\n"
        "  split: {kind: split, inputs: [raw], target: target, positive: 'yes', test: 0.25}\n"
        "  auto: {kind: auto, inputs: [split], id: id, time_limit: 2m,\n"
        "         models: [linear, lightgbm]}\n"
        "  evaluate: {kind: evaluate, inputs: [auto]}\n"
        "  export: {kind: export, inputs: [auto]}\n")
    proc = run_cli("run", "auto.yaml", "--runs-dir", "runs", "-q", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    run_dir = (tmp_path / "runs" / "auto_demo" / "latest").resolve()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    board = manifest["stages"]["auto"]["facts"]["leaderboard"]
    assert board["metric"] == "roc_auc" and {m["model"] for m in board["members"]} == {"linear",
                                                                                       "lightgbm"}
    assert json.loads((run_dir / "auto" / "leaderboard.json").read_text()) == board
    assert board["mode"] == "planned" and [s["step"] for s in board["plan"]][:2] == ["screen", "screen"]
    assert board["plan"][-1]["step"] == "blend" and all("seconds" in s for s in board["plan"][:2])
    left_out = {c["column"]: c["role"] for c in manifest["stages"]["auto"]["facts"]["left_out"]}
    assert left_out == {"row": "identifier", "country": "constant", "surname": "identifier", "note": "free_text"}
    workflow = json.loads(next((run_dir / "export").rglob("workflow.json")).read_text())
    assert {"x1", "x2", "plan", "flag"} <= set(workflow["input_columns"])     # the selectors' names, recorded
    assert not set(left_out) & set(workflow["output_columns"])
    # The exported blend scores new rows as the run scored its test rows.
    predictions = pd.read_parquet(run_dir / "export" / "predictions.parquet")
    rows = frame.set_index("id").loc[predictions["id"]].reset_index().drop(columns=["target"])
    rows.to_csv(tmp_path / "new.csv", index=False)
    out = tmp_path / "scored.parquet"
    proc = run_cli("predict", "--run", "latest", "--runs-dir", "runs", "--pipeline", "auto_demo", "--model", "auto",
                   "--input", "new.csv", "--output", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_allclose(pd.read_parquet(out)["score"], predictions["score_auto"], rtol=0, atol=1e-6)
    # The report shows the leaderboard.
    assert run_cli("report", str(run_dir), cwd=tmp_path).returncode == 0
    page = next(run_dir.rglob("report.html")).read_text()
    assert "auto: leaderboard" in page and "lightgbm" in page and "auto: the plan" in page
    assert "fitted on the holdout" in page


def test_an_mlp_fold_that_reaches_the_limit_is_stopped_while_it_trains():
    """The MLP checks the clock after each epoch: a fold that reaches the limit stops there, not
    after its last epoch (the run would overrun the limit by a whole fold)."""
    import time

    from pipeline.stages.auto import _Clock, _OutOfTime, _torch_trainer

    features = features_of(table(), "binary")
    epochs: list[int] = []
    clock = _Clock(deadline=time.perf_counter() - 1, folds=3)
    clock.after_epoch = lambda epoch: (epochs.append(epoch), _Clock.after_epoch(clock, epoch))  # type: ignore
    with pytest.raises(_OutOfTime, match="while it trained"):
        _torch_trainer(features, "mlp", {"hidden": [8], "epochs": 30}, seed=1, clock=clock)
    assert epochs == [1]                                   # stopped after its first epoch of 30
    exempt = _Clock(deadline=time.perf_counter() - 1, folds=3, exempt=True)
    trained = _torch_trainer(features, "mlp", {"hidden": [8], "epochs": 2}, seed=1, clock=exempt)
    assert trained.scores["test"].shape[0] == features.rows()["test"]     # the first member runs to the end


def test_an_mlp_whose_next_epoch_would_pass_its_cap_ends_there_with_its_best_weights():
    """Its time per epoch is projected: a fold whose next epoch would end past the member's cap
    (a quarter of the limit) stops after the epoch it is in and keeps its best epoch."""
    import time

    from pipeline.stages.auto import _Clock, _timed, _torch_trainer

    features = features_of(table(), "binary")
    clock = _Clock(deadline=time.perf_counter() + 600, folds=1)
    clock.start_member(exempt=False, seconds=0.0)          # the cap is already here: one epoch, then stop
    trained = _timed(_torch_trainer, clock)(features, "mlp", {"hidden": [8], "epochs": 30}, seed=1)
    assert len(trained.history) == 1 and trained.fit_result["stopped_early"]
    (note,) = [n for n in trained.fit_result["notes"] if n.startswith("stopped after epoch 1")]
    assert "would end past a quarter of the time limit" in note
    assert np.isfinite(trained.scores["test"]).all()
    # With room for every epoch, every epoch runs (early stopping permitting).
    roomy = _Clock(deadline=time.perf_counter() + 600, folds=1)
    roomy.start_member(exempt=False, seconds=600)
    full = _timed(_torch_trainer, roomy)(features, "mlp", {"hidden": [8], "epochs": 3}, seed=1)
    assert len(full.history) == 3


def test_a_bagged_mlp_scores_new_rows_with_its_category_codes(tmp_path):
    """The MLP embeds the category codes beside the matrix: its bag must score valid and test rows
    (and, exported inside the blend, new rows) as the MLP does, not as a plain estimator on the
    matrix alone ("this model embeds categorical columns: pass their int64 codes")."""
    from pipeline.scoring.model_folder import load_model
    from pipeline.stages import save_model

    frame = table()
    features = features_of(frame, "binary")
    result = fit_auto(features, time_limit=300, models=["mlp", "linear"], bag=2)
    assert {r.model for r in result.leaderboard if r.status == "fitted"} == {"mlp", "linear"}
    mlp = next(m for m in result.model.members if m.name == "mlp")
    assert mlp.export_meta()["categorical_columns"] == features.categorical_columns
    test = np.asarray(mlp.scores["test"])
    assert test.shape == (features.rows()["test"],) and np.isfinite(test).all()
    save_model(result.model, tmp_path / "auto")
    raw = frame.set_index("id").loc[features.host_ids("test")].reset_index()
    np.testing.assert_allclose(load_model(tmp_path / "auto").score(raw), result.model.scores["test"], rtol=0,
                               atol=1e-6)


def test_the_presets_and_the_models_key_choose_members_in_portfolio_order():
    from pipeline.stages.auto import portfolio_for

    assert [m.model for m in portfolio_for("binary", "quick")] == ["lightgbm", "xgboost", "random_forest",
                                                                   "linear"]
    assert [m.model for m in portfolio_for("regression", "quick")][-1] == "linear"      # one member, every task
    full = [m.label for m in portfolio_for("multiclass", "auto") if not m.extra]
    assert full[:3] == ["lightgbm", "catboost", "xgboost"] and full[-2:] == ["mlp", "linear"]
    extras = [m for m in portfolio_for("multiclass", "auto") if m.extra]
    assert [m.label for m in extras] == ["lightgbm_large", "lightgbm_xt", "xgboost_deep", "linear_log"]
    assert not any(m.extra for m in portfolio_for("binary", "quick"))
    assert [m.model for m in portfolio_for("binary", "auto", ["mlp", "lightgbm"])] == ["mlp", "lightgbm"]


def test_each_members_threads_are_the_cores_free_when_it_starts(monkeypatch):
    """Re-planned per member: a library that takes a thread count gets the cores free at its
    start (other work on the machine is measured, not assumed); the plan records them."""
    from pipeline.stages import auto

    free = iter([1, 2])
    monkeypatch.setattr(auto, "free_cores", lambda: next(free))
    monkeypatch.setattr(auto, "available_cores", lambda: 2)
    models = ["lightgbm", "extra_trees", "linear"]      # the linear model starts no threads
    given: dict[str, set] = {}
    fit = auto._TRAINERS["registry"]

    def recording(features, model, params=None, **kwargs):
        given.setdefault(model, set()).add(params.get("n_jobs"))
        return fit(features, model, params, **kwargs)

    monkeypatch.setitem(auto._TRAINERS, "registry", recording)
    lines: list[str] = []
    features = features_of(table(), "binary")
    result = fit_auto(features, time_limit=120, models=models, log=lines.append)
    assert given == {"lightgbm": {1}, "extra_trees": {2}, "linear": {None}}   # every fold of each
    screens = {s.model: s for s in result.plan if s.step == "screen"}
    assert (screens["lightgbm"].threads, screens["extra_trees"].threads) == (1, 2)
    assert screens["lightgbm"].to_dict()["threads"] == 1 and "threads" not in screens["linear"].to_dict()
    assert "lightgbm: 1 of 2 cores free: 1 thread(s)" in lines
    assert not any(line.startswith("extra_trees: 2 of 2") for line in lines)


# ------------------------------------------------------------------ columns of many levels
def shops(n: int = 1200, seed: int = 0) -> pd.DataFrame:
    """``table`` with a column of 150 shops, each with its own rate: a column ``default_ops``
    keeps twice (its target encoding and its codes)."""
    frame = table(n=n, seed=seed)
    rng = np.random.default_rng(seed + 1)
    rate = rng.normal(scale=1.5, size=150)
    shop = rng.integers(0, 150, n)
    frame["shop"] = [f"s{i:03d}" for i in shop]
    signal = rate[shop] + frame.x1 + rng.normal(scale=0.8, size=n)
    frame["target"] = np.where(signal > 0.3, "yes", "no")
    return frame


@pytest.mark.slow
def test_catboost_reads_a_column_of_many_levels_as_codes_and_the_others_as_its_encoding(tmp_path):
    """Each member is trained and scored on its own columns of the one matrix, in the run and
    from the exported blend (each member's model.json names its columns)."""
    from pipeline.core.errors import DataError
    from pipeline.scoring.model_folder import load_model
    from pipeline.stages import save_model

    frame = shops()
    features = features_of(frame, "binary")
    assert {"shop", "shop=te"} <= set(features.feature_names) and "shop" in features.categorical_columns
    result = fit_auto(features, time_limit=300, models=["catboost", "lightgbm", "mlp"], bag=2, seed=2)
    members = {m.name: m for m in result.model.members}
    assert set(members) == {"catboost", "lightgbm", "mlp"}
    catboost, lightgbm, mlp = members["catboost"].features, members["lightgbm"].features, members["mlp"].features
    assert "shop" in catboost.feature_names and "shop=te" not in catboost.feature_names
    assert "shop" in catboost.categorical_columns
    for view in (lightgbm, mlp):
        assert "shop=te" in view.feature_names and "shop" not in view.feature_names
        assert "shop" not in view.categorical_columns
    assert {"x1", "x2", "plan", "flag"} <= set(catboost.feature_names) & set(lightgbm.feature_names)
    # The members of a kind share one view (one copy of the matrix), whatever their number.
    assert lightgbm.X["train"] is mlp.X["train"] and lightgbm.X["train"] is not catboost.X["train"]
    assert result.model.features is features            # the blend reads the whole matrix
    # Scored again from the whole matrix (what permutation importance does), each member reads its columns.
    np.testing.assert_allclose(result.model.scorer_for(features)("test"), result.model.scores["test"], atol=1e-9)
    save_model(result.model, tmp_path / "auto")
    raw = frame.set_index("id").loc[features.host_ids("test")].reset_index()
    np.testing.assert_allclose(load_model(tmp_path / "auto").score(raw), result.model.scores["test"], rtol=0,
                               atol=1e-6)
    # A member that names a column its ensemble lacks is refused, with its file named.
    meta_path = tmp_path / "auto" / "members" / "catboost" / "model.json"
    meta = json.loads(meta_path.read_text())
    meta["features"] = [*meta["features"], "nowhere"]
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(DataError, match=r"catboost/model.json: the member reads column\(s\) \['nowhere'\]"):
        load_model(tmp_path / "auto", verify_signature=False).score(raw)


def test_member_views_split_a_column_kept_beside_its_encoding_and_leave_the_rest_to_both():
    from pipeline.features.auto_ops import CODES, ENCODED, member_views

    names = ["x", "shop", "plan", "shop=te_a", "shop=te_b"]
    views = member_views(names, ["shop", "plan"])
    assert views == {ENCODED: ["x", "plan", "shop=te_a", "shop=te_b"], CODES: ["x", "shop", "plan"]}
    # Without a kept column (a user's op list), every member reads every column.
    assert member_views(["x", "shop", "plan"], ["shop", "plan"]) == {ENCODED: ["x", "shop", "plan"],
                                                                       CODES: ["x", "shop", "plan"]}


@pytest.mark.parametrize("models", [["lightgbm", "logistic_regression"], ["lightgmb"], [], ["linear", "linear"]])
def test_fit_auto_refuses_the_member_names_a_config_refuses(models):
    """A name that is not a portfolio member (a registry name that is not one, a typo) was
    dropped in silence by the function while the YAML refused it: one check, one message."""
    from pipeline.core.errors import UsageError

    features = features_of(table(200), "binary")
    with pytest.raises(ConfigError) as library:
        fit_auto(features, time_limit=30, models=models)
    assert isinstance(library.value, UsageError) and "fit_auto models:" in str(library.value)
    base = ("name: t\nstages:\n  raw: {kind: load, path: rows.csv}\n"
            "  split: {kind: split, inputs: [raw], target: target, positive: 'yes'}\n")
    with pytest.raises(ConfigError) as config:
        load_config(text=base + f"  auto: {{kind: auto, inputs: [split], models: {models}}}\n")
    assert str(library.value).split("fit_auto models: ", 1)[1] in str(config.value)
