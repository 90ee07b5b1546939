"""The report's sections from small hand-made records (no run): what each section says for the
cases a whole run rarely has (an interrupted run, a fully cached one, a tuned or auto stage,
an evaluation whose metrics.json was edited)."""

from __future__ import annotations

import hashlib
import json
import re
from datetime import datetime, timezone
from pathlib import Path

from pipeline.report.html import duration
from pipeline.report.page import _answer, _evaluation, _explanations, _leaderboard, _timeline, _training, render
from pipeline.report.sources import Evaluation, RunSources, read_sources
from pipeline.runs.record import RunManifest, StageRecord
from tests.report.test_report import Page

FOUR_DECIMAL_SECONDS = re.compile(r"\d\.\d{4}\b")


def sources(stages: dict[str, StageRecord] | None = None, **manifest) -> RunSources:
    record = RunManifest(pipeline="p", run_id="20261124T000000.000Z-abcdef", status=manifest.pop("status", "succeeded"),
                         stages=stages or {}, **manifest)
    return RunSources(run_dir=Path("."), manifest=record, config_text=None)


def test_an_interrupted_run_says_so_in_a_sentence():
    _, _, html_text = _answer(sources(status="interrupted", error="stopped by SIGTERM"), None)
    assert "The run was interrupted:</b> stopped by SIGTERM" in html_text
    _, _, html_text = _answer(sources(status="failed", error="no such file"), None)
    assert "The run failed:</b> no such file" in html_text


def test_tuning_and_leaderboard_times_are_rounded_as_every_other_time():
    tuning = {"metric": "roc_auc", "direction": "maximize", "best_trial": 1, "best_value": 0.81234,
              "best_params": {"max_depth": 3}, "seconds": 0.948, "trials": [{"number": 0, "value": 0.8},
                                                                            {"number": 1, "value": 0.81234}]}
    found = sources({"xgb": StageRecord(name="xgb", kind="train", status="succeeded", facts={"tuning": tuning})})
    _, _, html_text = _training(found)
    rows = {row[0]: row[1] for table in Page(html_text).tables for row in table if len(row) == 2}
    assert rows["time"] == "948 ms" and rows["best value"] == "0.8123"          # metrics keep their 4 decimals
    board = {"metric": "roc_auc", "scored_on": "out-of-fold", "seconds": 4.851, "time_limit": 45.0,
             "members": [{"model": "xgb", "status": "fitted", "seconds": 2.5}]}
    html_text = _leaderboard("auto", board)
    assert f"{duration(4.851)} of a {duration(45.0)} limit" in html_text and "4.85 s of a 45.0 s limit" in html_text
    assert not FOUR_DECIMAL_SECONDS.findall(html_text)


def test_a_cached_stage_shows_its_stored_compute_time_in_the_table_and_the_note_only_when_one_is_cached():
    cached = {name: StageRecord(name=name, kind="features", status="cached", seconds=0.0, computed_seconds=4.27,
                                started="2026-11-24T00:00:00+00:00", ended="2026-11-24T00:00:00+00:00")
              for name in ("split", "features")}
    _, _, html_text = _timeline(sources(cached))
    (table,) = [t for t in Page(html_text).tables if t and t[0][:3] == ["stage", "kind", "status"]]
    assert [row[3] for row in table[1:]] == ["0 s (computed in 4.27 s)"] * 2
    assert "shown beside it" in html_text
    ran = {"split": StageRecord(name="split", kind="split", status="succeeded", seconds=1.5,
                                started="2026-11-24T00:00:00+00:00", ended="2026-11-24T00:00:01.500000+00:00")}
    _, _, html_text = _timeline(sources(ran))
    assert "cached" not in html_text                                  # no note about what did not happen


def test_a_binary_evaluation_gets_its_per_class_table_at_the_threshold():
    """Precision, recall, F1 and support of both classes, from the confusion matrix recorded at
    the threshold (as the multiclass table is from its matrix), the classes by their values."""
    metrics = {"split": "test", "threshold": 0.5, "rank_by": "roc_auc", "best": "lr",
               "task": {"kind": "binary", "positive": "yes"},
               "models": {"lr": {"roc_auc": 0.8}},
               "confusion": {"lr": {"labels": [0, 1], "matrix": [[50, 10], [5, 35]]}}}
    found = sources({"split": StageRecord(name="split", kind="split", status="succeeded",
                                          facts={"task": {"kind": "binary", "positive": "yes"}, "negative": "no"})})
    found.evaluations.append(Evaluation("evaluate", metrics))
    _, _, html_text = _evaluation(found, found.evaluations[0])
    (table,) = [t for t in Page(html_text).tables if t and t[0][0] == "class"]
    assert table == [["class", "precision", "recall", "f1", "support"],
                     ["no", "0.9091", "0.8333", "0.8696", "60"],        # 50 / 55, 50 / 60
                     ["yes", "0.7778", "0.8750", "0.8235", "40"]]       # 35 / 45, 35 / 40
    assert "at threshold 0.5000" in html_text


def test_an_edited_metrics_json_is_named_in_the_result_and_the_intact_importances_are_still_read(tmp_path):
    importance = {"metric": "roc_auc", "split": "test", "repeats": 3, "rows": {"lr": 100},
                  "models": {"lr": {"permutation": {"mean": {"a": 0.1, "b": 0.02}, "std": {"a": 0.01, "b": 0.0}}}}}
    files = {"evaluate/metrics.json": {"models": {"lr": {"roc_auc": 0.8}}, "best": "lr", "rank_by": "roc_auc"},
             "evaluate/importance.json": importance}
    artifacts = {}
    for relative, content in files.items():
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(content))
        artifacts[relative] = hashlib.sha256(path.read_bytes()).hexdigest()
    manifest = RunManifest(pipeline="p", run_id="20261124T000000.000Z-abcdef", status="succeeded",
                           stages={"evaluate": StageRecord(name="evaluate", kind="evaluate", status="succeeded")},
                           artifacts=artifacts)
    (tmp_path / "manifest.json").write_text(manifest.model_dump_json())
    (tmp_path / "evaluate" / "metrics.json").write_text(json.dumps({**files["evaluate/metrics.json"], "best": "x"}))
    found = read_sources(tmp_path)
    assert found.changed == ["evaluate/metrics.json"]
    assert [(e.stage, e.metrics, e.importance is not None) for e in found.evaluations] == [("evaluate", {}, True)]
    _, _, result = _answer(found, None)
    assert "no evaluate stage ran" not in result and "evaluate/metrics.json" in result and "changed" in result
    page = Page(render(found, generated=datetime.now(timezone.utc), version="0"))
    assert "explanations-evaluate" in page.sections and "models-evaluate" not in page.sections


def test_the_explanations_say_why_fewer_features_were_permuted():
    reason = ("41 features x 2 repeats x 600 rows x 1 outputs would take longer than the 2.0 s permutation "
              "importance may take (a share of the model's fit)")
    importance = {"metric": "roc_auc", "split": "test", "repeats": 2, "rows": {"lr": 600},
                  "models": {"lr": {"permutation": {"mean": {"a": 0.1}, "std": {"a": 0.0}}}},
                  "permuted": {"lr": {"features": 10, "of": 41, "ranked_by": "correlation", "reason": reason}}}
    found = sources()
    found.evaluations.append(Evaluation("evaluate", {"models": {"lr": {"roc_auc": 0.8}}}, importance=importance))
    _, _, html_text = _explanations(found, found.evaluations[0])
    assert "permutation importance of 10 of 41 features" in html_text and "longer than the 2.0 s" in html_text
