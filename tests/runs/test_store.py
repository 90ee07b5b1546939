from __future__ import annotations

import os

import pandas as pd
import pytest

from pipeline.runs.record import RunManifest
from pipeline.runs.store import RunStore, atomic_destination, atomic_write_parquet, atomic_write_text, sha256_file


def test_failed_write_leaves_the_old_file_and_no_temp(tmp_path):
    target = tmp_path / "out.json"
    atomic_write_text(target, "old")
    with pytest.raises(RuntimeError):
        with atomic_destination(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("killed mid-write")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_parquet_written_atomically(tmp_path):
    atomic_write_parquet(pd.DataFrame({"a": [1, 2]}), tmp_path / "sub" / "t.parquet")
    assert pd.read_parquet(tmp_path / "sub" / "t.parquet")["a"].tolist() == [1, 2]


def test_run_folders_are_unique_sorted_and_latest_moves(tmp_path):
    store = RunStore(tmp_path, "p")
    runs = [store.new_run() for _ in range(5)]
    assert len({r.path for r in runs}) == 5
    assert sorted(r.run_id for r in runs) == [r.run_id for r in runs]
    store.mark_latest(runs[1])
    store.mark_latest(runs[3])
    assert os.readlink(tmp_path / "p" / "latest") == runs[3].run_id
    assert not [p for p in (tmp_path / "p").iterdir() if p.name.startswith(".")]


def test_checksums_cover_artifacts_not_the_manifest(tmp_path):
    run = RunStore(tmp_path, "p").new_run()
    atomic_write_text(run.path / "a" / "x.txt", "hello")
    run.write_manifest(RunManifest(pipeline="p", run_id=run.run_id, status="running"))
    sums = run.checksums()
    assert sums == {"a/x.txt": sha256_file(run.path / "a" / "x.txt")}


def test_json_artifacts_are_strict_json(tmp_path):
    """NaN/Infinity are not JSON: an undefined number is written as null, and the file parses
    with a strict reader."""
    import json as json_module

    from pipeline.runs.store import atomic_write_json

    path = tmp_path / "metrics.json"
    atomic_write_json(path, {"roc_auc": float("nan"), "nested": [1.0, float("inf"), {"x": -float("inf")}], "n": 3})

    def refuse(name):
        raise ValueError(f"not JSON: {name}")

    value = json_module.loads(path.read_text(), parse_constant=refuse)
    assert value == {"roc_auc": None, "nested": [1.0, None, {"x": None}], "n": 3}


def test_export_refuses_a_model_with_non_finite_coefficients():
    from pipeline.core.errors import DataError
    from pipeline.stages.export import _refuse_non_finite

    _refuse_non_finite({"coef": [0.5, 1.0], "intercept": [0.0]}, "logreg")
    with pytest.raises(DataError, match="logreg.*coef"):
        _refuse_non_finite({"coef": [0.5, float("nan")], "intercept": [0.0]}, "logreg")
