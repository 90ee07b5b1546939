"""scripts/same_metrics.py: the comparison that proves a refactoring left every metric alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import script_module


def write_run(runs: Path, side: str, config: str, metrics: dict, status: str = "succeeded") -> None:
    folder = runs / side / config / "pipe" / "20261127-000000-abcd"
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(json.dumps({"status": status, "duration_s": 1.0, "metrics": metrics}))


def test_numbers_flattens_a_metrics_tree():
    with script_module("same_metrics") as script:
        tree = {"models": {"xgb": {"roc_auc": 0.9, "curve": [1, 2]}}, "best": "xgb"}
        assert script.numbers(tree) == {"models.xgb.roc_auc": 0.9, "models.xgb.curve.0": 1,
                                        "models.xgb.curve.1": 2, "best": "xgb"}


def test_floats_agree_within_the_tolerance_only():
    with script_module("same_metrics") as script:
        assert script.agree(0.8121973473661396, 0.8121973473661398, 1e-12)     # the last bits
        assert not script.agree(0.8121, 0.8122, 1e-12)
        assert not script.agree(0.8121973473661396, 0.8121973473661398, 0.0)   # --rel-tol 0: exact
        assert script.agree("xgb", "xgb", 1e-12) and not script.agree("xgb", "forest", 1e-12)
        assert not script.agree(None, 0.5, 1e-12)                              # a metric that went missing


@pytest.mark.parametrize(("after", "expected"), [
    ({"models": {"xgb": {"roc_auc": 0.9}}, "best": "xgb"}, 0),
    ({"models": {"xgb": {"roc_auc": 0.9 + 1e-16}}, "best": "xgb"}, 0),
    ({"models": {"xgb": {"roc_auc": 0.91}}, "best": "xgb"}, 1),
    ({"models": {"xgb": {}}, "best": "xgb"}, 1),
])
def test_the_exit_status_says_whether_every_metric_agrees(tmp_path, after, expected):
    write_run(tmp_path, "before", "a.yaml", {"models": {"xgb": {"roc_auc": 0.9}}, "best": "xgb"})
    write_run(tmp_path, "after", "a.yaml", after)
    with script_module("same_metrics") as script:
        code = script.main(["--before", str(tmp_path), "--after", str(tmp_path), "--configs", "a.yaml",
                            "--runs-dir", str(tmp_path), "--output", str(tmp_path / "out.json")])
    assert code == expected
    report = json.loads((tmp_path / "out.json").read_text())
    assert report["same"] is (expected == 0) and report["configs"][0]["config"] == "a.yaml"
