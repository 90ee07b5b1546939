"""``runs prune`` and the aliases: an alias that is not a link spares every run, a failed
deletion is counted and reported, a missing runs folder is said; ``runs show`` of an alias that
leads elsewhere; wrongly typed metric values make a manifest unreadable.

The run folders are written by hand (a manifest each, no training): what is tested is how the
history commands treat them."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from pipeline.core.errors import DataError, ExitCode
from pipeline.runs import history
from pipeline.runs.record import RunManifest
from tests.support.cli import run_cli

OLD, MID, NEW = "20261201T000000.000Z-000001", "20261202T000000.000Z-000002", "20261203T000000.000Z-000003"


def make_run(pipeline_dir: Path, run_id: str, **fields) -> Path:
    folder = pipeline_dir / run_id
    folder.mkdir(parents=True)
    metrics = {"split": "test", "threshold": 0.5, "rank_by": "roc_auc", "best": "m",
               "models": {"m": {"roc_auc": 0.8, "log_loss": None}}}
    manifest = RunManifest(pipeline=pipeline_dir.name, run_id=run_id, status="succeeded",
                           started="2026-12-01T00:00:00.000+00:00", ended="2026-12-01T00:00:01.000+00:00",
                           metrics=metrics, **fields)
    (folder / "manifest.json").write_text(manifest.to_json())
    return folder


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    """``runs/small`` with three succeeded runs, ``latest`` at the newest."""
    pipeline_dir = tmp_path / "runs" / "small"
    for run_id in (OLD, MID, NEW):
        make_run(pipeline_dir, run_id)
    (pipeline_dir / "latest").symlink_to(NEW)
    return tmp_path / "runs"


def names(pipeline_dir: Path) -> set[str]:
    return {p.name for p in pipeline_dir.iterdir() if not p.name.startswith(".")}


def prune(runs: Path, *args: str):
    return run_cli("runs", "prune", "--runs-dir", runs, *args, cwd=runs.parent)


# ---------------------------------------------------------------------------- an alias that is not a link
@pytest.mark.parametrize("dry_run", [False, True])
def test_prune_deletes_nothing_while_an_alias_is_a_plain_file(runs, dry_run):
    """The plain file names OLD: pruned as "no latest", that run was deleted (exit 0)."""
    pipeline_dir = runs / "small"
    (pipeline_dir / "latest").unlink()
    (pipeline_dir / "latest").write_text(OLD + "\n")
    proc = prune(runs, "--keep", "0", *(["--dry-run"] if dry_run else []))
    assert proc.returncode == ExitCode.DATA, proc.stdout + proc.stderr
    assert names(pipeline_dir) == {OLD, MID, NEW, "latest"}
    assert "is a plain file, not a link" in proc.stderr and "no run deleted" in proc.stderr
    assert "every run kept" in proc.stdout and "deleted" not in proc.stdout.replace("no run deleted", "")
    assert (pipeline_dir / "latest").read_text() == OLD + "\n"


def test_prune_goes_on_with_the_other_pipelines(runs):
    other = runs / "other"
    for run_id in (OLD, NEW):
        make_run(other, run_id)
    (runs / "small" / "champion").mkdir()               # a folder in the alias's place
    proc = prune(runs, "--keep", "1")
    assert proc.returncode == ExitCode.DATA
    assert names(runs / "small") == {OLD, MID, NEW, "latest", "champion"}
    assert names(other) == {NEW}
    assert "is a folder, not a link" in proc.stderr


def test_delete_run_refuses_while_an_alias_is_not_a_link(runs):
    pipeline_dir = runs / "small"
    (pipeline_dir / "champion").write_text(MID)
    run = next(r for r in history.runs_in(pipeline_dir) if r.run_id == MID)
    with pytest.raises(DataError, match="plain file"):
        history.delete_run(run)
    assert (pipeline_dir / MID).is_dir()


# ---------------------------------------------------------------------------- failures are counted and reported
def test_a_read_only_runs_folder_deletes_nothing_and_says_so(runs, monkeypatch):
    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    from pipeline.runs.locks import RunLock

    monkeypatch.setattr(os, "rename", read_only)          # how delete_run hides a run first
    monkeypatch.setattr(RunLock, "__enter__", read_only)  # nor can the run lock be made
    (runs / "small" / ".cache").mkdir()
    proc = prune(runs, "--keep", "1")
    assert proc.returncode == ExitCode.STORAGE, proc.stdout + proc.stderr
    assert names(runs / "small") == {OLD, MID, NEW, "latest"}
    assert "small: 1 kept, 0 deleted, 2 could not be deleted" in proc.stdout
    assert not [line for line in proc.stdout.splitlines() if line.startswith("deleted")]
    assert "runs prune: 3 problems" in proc.stderr
    for run_id in (OLD, MID):
        assert f"cannot delete {runs / 'small' / run_id}: Read-only file system" in proc.stderr
    assert "cache not pruned" in proc.stderr


@pytest.mark.parametrize("command", [["runs", "prune", "--keep", "1"], ["cache", "clear"], ["cache", "prune"]])
def test_a_missing_runs_folder_is_said_as_runs_list_says_it(tmp_path, command):
    proc = run_cli(*command, "--runs-dir", tmp_path / "nonexistent", cwd=tmp_path)
    listed = run_cli("runs", "list", "--runs-dir", tmp_path / "nonexistent", cwd=tmp_path)
    assert proc.returncode == listed.returncode == 0
    assert f"no runs under {tmp_path / 'nonexistent'}" in proc.stderr
    assert f"no runs under {tmp_path / 'nonexistent'}" in listed.stderr


# ---------------------------------------------------------------------------- an alias that leads elsewhere
def test_show_champion_linked_into_another_runs_folder_says_so(runs, tmp_path):
    elsewhere = make_run(tmp_path / "elsewhere" / "small", MID)     # the same id as a run here
    (runs / "small" / "champion").symlink_to(elsewhere)
    proc = run_cli("runs", "show", "champion", "--runs-dir", runs, cwd=tmp_path)
    assert proc.returncode == ExitCode.CONFIG
    assert f"points to '{elsewhere}', outside the folder of pipeline 'small'" in proc.stderr
    assert "not a run folder" not in proc.stderr

    (runs / "small" / "champion").unlink()
    (runs / "small" / "champion").symlink_to("20261204T000000.000Z-000004")
    gone = run_cli("runs", "show", "champion", "--runs-dir", runs, cwd=tmp_path)
    assert gone.returncode == ExitCode.CONFIG and "which is not there" in gone.stderr

    (runs / "small" / "champion").unlink()
    (runs / "small" / "champion").symlink_to(runs / "small" / MID)   # absolute, but into its own folder
    shown = run_cli("runs", "show", "champion", "--runs-dir", runs, "--json", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["run_id"] == MID


# ---------------------------------------------------------------------------- metric values are numbers
@pytest.mark.parametrize(("value", "named"), [("0.99", "str"), (True, "bool"), ({"a": 1}, "dict"), ([1], "list")])
def test_a_metric_value_that_is_not_a_number_makes_the_manifest_unreadable(runs, value, named):
    manifest = runs / "small" / MID / "manifest.json"
    data = json.loads(manifest.read_text())
    data["metrics"]["models"]["m"]["roc_auc"] = value
    manifest.write_text(json.dumps(data))
    listed = run_cli("runs", "list", "--runs-dir", runs, "--json", cwd=runs.parent)
    row = next(r for r in json.loads(listed.stdout) if r["run_id"] == MID)
    assert row["status"] == "unreadable"
    assert f"metrics.models.m.roc_auc: must be a number or null, not {named}" in row["error"]
    shown = run_cli("runs", "show", MID, "--runs-dir", runs, cwd=runs.parent)
    assert shown.returncode == ExitCode.DATA and "metrics.models.m.roc_auc" in shown.stderr
    diffed = run_cli("runs", "diff", OLD, MID, "--runs-dir", runs, cwd=runs.parent)
    assert diffed.returncode == ExitCode.DATA


def test_null_and_numpy_metric_values_are_numbers():
    import numpy as np

    metrics = {"models": {"m": {"roc_auc": None, "f1": np.float32(0.5), "n": np.int64(3), "r2": float("nan")}}}
    RunManifest(pipeline="p", run_id=OLD, status="succeeded", metrics=metrics)
