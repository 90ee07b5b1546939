from __future__ import annotations

import os

import pandas as pd
import pytest

from pipeline.record import RunManifest
from pipeline.store import RunStore, atomic_destination, atomic_write_parquet, atomic_write_text, sha256_file


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
