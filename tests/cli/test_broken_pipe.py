"""stdout closed by its reader (``pipeline runs list | head``): exit 141 and nothing more said,
for every command, whether it prints through rich or click; a real process, since what is
tested is a pipe whose reading end is gone."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.core.errors import ExitCode
from pipeline.runs.record import RunManifest

ROOT = Path(__file__).resolve().parents[2]
RUN_ID = "20261201T000000.000Z-000001"


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("pipe") / "runs" / "small" / RUN_ID
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(RunManifest(pipeline="small", run_id=RUN_ID, status="succeeded").to_json())
    return folder.parents[1]


def closed_stdout(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """``pipeline ARGS`` with stdout a pipe whose reader has already gone."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run([sys.executable, "-m", "pipeline", *map(str, args)], cwd=ROOT, stdout=write,
                              stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, timeout=120)
    finally:
        os.close(write)


@pytest.mark.parametrize("args", [
    ["runs", "list"],                     # rich
    ["runs", "list", "--json"],           # click.echo
    ["runs", "show", RUN_ID, "--json"],
    ["cache", "list", "--json"],
    ["dag", "configs/churn.yaml"],
    ["runs", "list", "--help"],           # before any command runs
], ids=" ".join)
def test_a_closed_stdout_is_exit_141_and_nothing_said(runs, args):
    extra = ["--runs-dir", runs] if args[0] in ("runs", "cache") and "--help" not in args else []
    proc = closed_stdout(*args, *extra)
    assert proc.returncode == ExitCode.BROKEN_PIPE, proc.stderr
    assert proc.stderr == ""
