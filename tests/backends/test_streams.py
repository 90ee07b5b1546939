"""Inputs read once: a named pipe, ``/dev/fd/N`` and ``-`` (standard input) are spooled into the
run and read as a file, never cached; a pipe that stays silent ends the run within its
``stream_timeout`` with exit 3 naming it, instead of a run that waits forever."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

from pipeline.backends.streams import is_stream, spool
from pipeline.core.errors import DataError, ExitCode
from tests.conftest import TELCO
from tests.support.cli import run_cli

ROWS = pd.read_csv(TELCO, na_values=[" "]).head(600)


def feed(path: Path | int, data: bytes, *, delay: float = 0.0) -> threading.Thread:
    """Write ``data`` to a named pipe (opened when a reader comes) or a pipe's write end."""

    def write() -> None:
        time.sleep(delay)
        if isinstance(path, int):
            with os.fdopen(path, "wb") as out:
                out.write(data)
        else:
            with open(path, "wb") as out:
                out.write(data)

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    return thread


def config(folder: Path, path: str, timeout: float = 60.0) -> Path:
    (folder / "c.yaml").write_text(
        "name: piped\ndevice: cpu\nstages:\n"
        f"  raw:\n    kind: load\n    path: '{path}'\n    na_values: [' ']\n    stream_timeout: {timeout}\n"
        "  split:\n    kind: split\n    inputs: [raw]\n    target: Churn\n    positive: 'Yes'\n    test: 0.25\n")
    return folder / "c.yaml"


def raw_rows(folder: Path) -> int:
    manifests = sorted((folder / "runs" / "piped").glob("*/manifest.json"))
    return json.loads(manifests[-1].read_text())["stages"]["raw"]["facts"]["rows"]


def test_a_named_pipe_is_read_once_into_the_run_and_never_cached(tmp_path):
    fifo = tmp_path / "rows.csv"
    os.mkfifo(fifo)
    assert is_stream(str(fifo)) and not is_stream(str(TELCO)) and is_stream("-")
    config(tmp_path, str(fifo))
    for rows in (600, 250):             # the second run reads the second feed, not a cached first
        writer = feed(fifo, ROWS.head(rows).to_csv(index=False).encode())
        proc = run_cli("run", "c.yaml", cwd=tmp_path)
        writer.join(timeout=10)
        assert proc.returncode == 0, proc.stderr
        assert raw_rows(tmp_path) == rows
    leftovers = [p.name for p in (tmp_path / "runs").rglob(".stream-*")]
    assert leftovers == []


def test_a_dev_fd_descriptor_is_read_as_a_file(tmp_path):
    read_end, write_end = os.pipe()
    try:
        writer = feed(write_end, ROWS.to_csv(index=False).encode(), delay=0.3)
        config(tmp_path, f"/dev/fd/{read_end}")
        proc = run_cli("run", "c.yaml", cwd=tmp_path)
        writer.join(timeout=10)
        assert proc.returncode == 0, proc.stderr
        assert raw_rows(tmp_path) == 600
    finally:
        os.close(read_end)


def test_standard_input_is_read_with_a_dash(tmp_path):
    config(tmp_path, "-")
    proc = run_cli("run", "c.yaml", cwd=tmp_path, input=ROWS.to_csv(index=False), process=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert raw_rows(tmp_path) == 600


def test_a_pipe_that_never_sends_ends_within_its_timeout_naming_it(tmp_path):
    fifo = tmp_path / "silent.csv"
    os.mkfifo(fifo)
    config(tmp_path, str(fifo), timeout=1.0)
    started = time.monotonic()
    proc = run_cli("run", "c.yaml", cwd=tmp_path)
    assert proc.returncode == ExitCode.DATA, proc.stderr
    assert time.monotonic() - started < 30
    assert f"{fifo}: nothing arrived within 1s (stream_timeout on the load stage)" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_spool_refuses_an_empty_stream_and_a_writer_that_stalls(tmp_path):
    fifo = tmp_path / "p"
    os.mkfifo(fifo)
    feed(fifo, b"", delay=0.2)
    with pytest.raises(DataError, match="sent no bytes"):
        spool(str(fifo), tmp_path / "spool", timeout=5)
    read_end, write_end = os.pipe()
    os.write(write_end, b"a,b\n1,2\n")                 # then silence, the write end held open
    try:
        with pytest.raises(DataError, match=r"nothing more arrived after 8 bytes within 0.5s"):
            spool(f"/dev/fd/{read_end}", tmp_path / "spool", timeout=0.5)
    finally:
        os.close(write_end)
        os.close(read_end)
    assert list((tmp_path / "spool").iterdir()) == []     # nothing half-written is left
