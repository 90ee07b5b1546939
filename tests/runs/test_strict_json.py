"""Every JSON file a run writes is strict JSON: no NaN or Infinity, which jq, browsers, log
shippers and ``json.loads(..., parse_constant=...)`` refuse. An undefined number (an AUC on a
test split holding one class) is null, in manifest.json as in metrics.json.

One real pipeline of each task runs through the CLI; the multiclass one is split by time so
that its test split holds a single class (its ``roc_auc_ovr_macro`` is undefined)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.support.cli import run_cli as _pipeline
from pipeline.runs.store import atomic_write_json, json_text

ROWS = 240


def strict_load(path: Path):
    def refuse(constant: str):
        raise ValueError(f"{path}: {constant} is not JSON")

    return json.loads(path.read_text(encoding="utf-8"), parse_constant=refuse)


def write_data(folder: Path) -> dict[str, Path]:
    rng = np.random.default_rng(7)
    a, b = rng.normal(size=ROWS), rng.normal(size=ROWS)
    base = {"id": np.arange(ROWS), "t": np.arange(ROWS), "a": a.round(4), "b": b.round(4)}
    files = {}
    binary = pd.DataFrame({**base, "y": np.where(a + rng.normal(scale=0.5, size=ROWS) > 0, "yes", "no")})
    # Three classes in the older rows, only "c" in the newest quarter: the test split of an
    # order_by split holds one class.
    classes = np.where(a > 0.4, "a", np.where(a < -0.4, "b", "c"))
    classes[-ROWS // 4:] = "c"
    multiclass = pd.DataFrame({**base, "y": classes})
    regression = pd.DataFrame({**base, "y": (3 * a - b + rng.normal(scale=0.1, size=ROWS)).round(4)})
    for name, frame in (("binary", binary), ("multiclass", multiclass), ("regression", regression)):
        files[name] = folder / f"{name}.csv"
        frame.to_csv(files[name], index=False)
    return files


def config(name: str, data: Path, task: str) -> str:
    split = {"binary": "positive: \"yes\"\n    test: 0.25\n",
             "multiclass": "task: multiclass\n    order_by: t\n    test: 0.2\n",
             "regression": "task: regression\n    test: 0.25\n"}[task]
    models = {"binary": ("logistic_regression", "xgboost"), "multiclass": ("logistic_regression", "xgboost"),
              "regression": ("ridge", "xgboost")}[task]
    trains = "".join(f"  {model}:\n    kind: train\n    inputs: [features]\n    model: {model}\n"
                     + ("    params: {n_estimators: 20}\n" if model == "xgboost" else "") for model in models)
    return (f"name: {name}\ndevice: cpu\nstages:\n"
            f"  raw:\n    kind: load\n    path: {data}\n"
            f"  split:\n    kind: split\n    inputs: [raw]\n    target: y\n    {split}"
            "  features:\n    kind: features\n    inputs: [split]\n    id: id\n    ops:\n"
            "      - standardize: {columns: [a, b]}\n"
            + trains
            + f"  evaluate:\n    kind: evaluate\n    inputs: [{', '.join(models)}]\n"
            + f"  export:\n    kind: export\n    inputs: [{', '.join(models)}]\n")


@pytest.mark.parametrize("task", ["binary", "multiclass", "regression"])
def test_every_json_file_of_a_run_is_strict(tmp_path, task):
    files = write_data(tmp_path)
    cfg = tmp_path / f"{task}.yaml"
    cfg.write_text(config(f"strict_{task}", files[task], task))
    done = _pipeline("run", cfg, "--runs-dir", tmp_path / "runs", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    run_dir = (tmp_path / "runs" / f"strict_{task}" / "latest").resolve()
    found = sorted(run_dir.rglob("*.json"))
    assert any(p.name == "manifest.json" for p in found) and any(p.name == "metrics.json" for p in found)
    everything = sorted((tmp_path / "runs").rglob("*.json"))    # the stage cache's records too
    assert len(everything) > len(found)
    for path in everything:
        strict_load(path)                                   # raises on NaN / Infinity
    if task == "multiclass":
        manifest = strict_load(run_dir / "manifest.json")
        values = manifest["metrics"]["models"]["logistic_regression"]
        assert "roc_auc_ovr_macro" in values and values["roc_auc_ovr_macro"] is None    # undefined: null
        metrics = strict_load(next(p for p in found if p.name == "metrics.json"))
        assert metrics["models"]["logistic_regression"]["roc_auc_ovr_macro"] is None


def test_the_writer_turns_non_finite_numbers_into_null_everywhere(tmp_path):
    class Holder:
        def model_dump(self, mode: str = "python"):
            return {"auc": math.nan}

    text = json_text({"a": np.float32("nan"), "b": [np.float64("inf"), 1.5], "c": Holder(),
                      "d": np.array([1.0, np.nan]), "e": Path("x/y")})
    assert json.loads(text, parse_constant=lambda c: pytest.fail(c)) == {
        "a": None, "b": [None, 1.5], "c": {"auc": None}, "d": [1.0, None], "e": "x/y"}
    atomic_write_json(tmp_path / "x.json", {"v": -math.inf})
    assert strict_load(tmp_path / "x.json") == {"v": None}
