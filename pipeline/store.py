"""The run directory and safe artifact writes.

Every file is written to a temporary name in the same folder, fsynced, then renamed over the
final name, so a reader sees either the old file or the whole new one, never half of one.
Run folders are created once and never reused, so an earlier run is never overwritten.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from pipeline.errors import StorageError
from pipeline.layout import PipelineLayout, RunLayout, format_run_id


@contextmanager
def atomic_destination(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success fsync it and rename it over ``path``.

    On any error the temporary file is removed and ``path`` is left as it was.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


@contextmanager
def atomic_folder(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield an empty temporary folder beside ``path``; on success it replaces ``path``.

    An existing folder at ``path`` is renamed aside first and deleted only after the new one
    is in place, so readers see the old folder or the new one, never a mix; on any error the
    temporary folder is removed and ``path`` is left as it was.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent))
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = path.with_name(f".{path.name}.{secrets.token_hex(4)}.old")
    if path.exists():
        os.replace(path, old)
    os.replace(tmp, path)
    _fsync_dir(path.parent)
    shutil.rmtree(old, ignore_errors=True)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    with atomic_destination(path) as tmp:
        tmp.write_bytes(data)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_parquet(frame: Any, path: str | os.PathLike[str]) -> None:
    """Write a pandas frame to Parquet atomically."""
    with atomic_destination(path) as tmp:
        frame.to_parquet(tmp, index=False)


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def sha256_file(path: str | os.PathLike[str]) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


class RunStore:
    """Creates run folders of one pipeline (``pipeline.layout`` says where everything goes)."""

    _last_stamp: datetime | None = None

    def __init__(self, root: str | os.PathLike[str], pipeline_name: str) -> None:
        self.layout = PipelineLayout(Path(root).absolute(), pipeline_name)
        self.root = self.layout.runs_dir
        self.pipeline_dir = self.layout.path

    def new_run(self) -> RunDir:
        try:
            return self._new_run()
        except OSError as exc:
            raise StorageError(f"cannot create a run folder under {self.pipeline_dir}: {exc.strerror or exc}") from exc

    def _new_run(self) -> RunDir:
        self.pipeline_dir.mkdir(parents=True, exist_ok=True)
        while True:
            # Millisecond stamps keep run ids in start order when sorted as text; within one
            # process they are made strictly increasing so two quick runs never tie.
            raw = datetime.now(timezone.utc)
            now = raw.replace(microsecond=raw.microsecond // 1000 * 1000)
            if RunStore._last_stamp is not None and now <= RunStore._last_stamp:
                now = RunStore._last_stamp + timedelta(milliseconds=1)
            RunStore._last_stamp = now
            run = self.layout.run(format_run_id(now))
            try:
                run.path.mkdir()  # fails if it exists: a run folder is never reused
            except FileExistsError:
                continue
            return RunDir(run.path)

    def mark_latest(self, run: RunDir) -> None:
        """Point ``latest`` at a finished run, atomically (symlink swap by rename)."""
        link = self.layout.latest_link
        tmp = self.pipeline_dir / f".latest.{os.getpid()}.tmp"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(run.path.name)
        os.replace(tmp, link)


class RunDir:
    def __init__(self, path: Path) -> None:
        self.layout = RunLayout(path)
        self.path = path
        self.run_id = path.name

    def stage_dir(self, stage: str) -> Path:
        return self.layout.stage_dir(stage)

    def write_manifest(self, manifest: Any) -> None:
        """Write the run record (a ``pipeline.record.RunManifest``) atomically."""
        atomic_write_text(self.layout.manifest, manifest.to_json())

    def write_config(self, text: str) -> None:
        atomic_write_text(self.layout.config, text)

    def checksums(self) -> dict[str, str]:
        """sha256 of every artifact file, by path relative to the run folder."""
        out = {}
        for file in sorted(self.path.rglob("*")):
            if file.is_file() and file != self.layout.manifest and not file.name.startswith("."):
                out[str(file.relative_to(self.path))] = sha256_file(file)
        return out


def host_name() -> str:
    return socket.gethostname()
