"""The run directory and safe artifact writes.

Every file is written to a temporary name in the same folder, fsynced, then renamed over the
final name, so a reader sees either the old file or the whole new one, never half of one.
Run folders are created once and never reused, so an earlier run is never overwritten.
Files and folders are created with the modes any program would use (0666 and 0777 less the
process umask), so a teammate or a scoring service can read runs where the umask allows.
Every failure to write (a full disk, a quota, a read-only or missing folder, a permission)
is a StorageError (exit 6) that names the file.
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import json
import math
import os
import secrets
import shutil
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from pipeline.core.errors import DataError, StorageError
from pipeline.runs.layout import LATEST, PipelineLayout, RunLayout, format_run_id


# errno values that only ever come from writing: raised inside a writer (the body of
# ``atomic_destination``), they are a storage failure whatever file the writer was at.
_WRITE_ERRNOS = frozenset(getattr(errno, name) for name in ("ENOSPC", "EDQUOT", "EROFS", "EFBIG")
                          if hasattr(errno, name))


def cannot_write(path: str | os.PathLike[str], exc: OSError, *, verb: str = "write") -> StorageError:
    """The StorageError (exit 6) for an OSError while writing ``path``: names the path and the reason."""
    blocker = _file_in_the_way(Path(path))
    if blocker is not None:
        reason = f"{blocker} is a file, not a folder"
    else:
        reason = exc.strerror or str(exc) or type(exc).__name__
        other = exc.filename if isinstance(exc.filename, str) and exc.filename != str(path) else None
        if other and not Path(other).name.startswith("."):       # not our temporary name
            reason = f"{reason} ({other})"
    error = StorageError(f"cannot {verb} {path}: {reason}")
    error.__cause__ = exc
    return error


def as_storage_error(exc: BaseException) -> StorageError | None:
    """The StorageError an OSError amounts to when it can only come from writing (a full disk,
    a quota, a read-only file system), naming its file when it has one; None for any other."""
    if not isinstance(exc, OSError) or exc.errno not in _WRITE_ERRNOS:
        return None
    if isinstance(exc.filename, str):
        return cannot_write(exc.filename, exc)
    error = StorageError(f"cannot write the run's files: {exc.strerror or exc}")
    error.__cause__ = exc
    return error


def _file_in_the_way(path: Path) -> Path | None:
    """The first ancestor of ``path`` that exists but is not a folder (so nothing can go under it)."""
    for parent in reversed(path.parents):
        try:
            if parent.exists() and not parent.is_dir():
                return parent
        except OSError:
            return None
    return None


def _is_write_failure(exc: BaseException, tmp: Path) -> bool:
    """True for an OSError that a writer got from the temporary file or from a full/read-only disk."""
    if not isinstance(exc, OSError):
        return False
    return exc.errno in _WRITE_ERRNOS or (exc.filename is not None and str(exc.filename) == str(tmp))


def _discard(tmp: Path) -> None:
    try:
        if tmp.is_dir() and not tmp.is_symlink():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.unlink(missing_ok=True)
    except OSError:
        pass


def _temporary_name(path: Path, suffix: str) -> Path:
    return path.with_name(f".{path.name}.{secrets.token_hex(4)}{suffix}")


def _create_temporary_file(path: Path) -> Path:
    """An empty file beside ``path`` made with mode 0666, so the process umask (and a default
    ACL) decides who may read it, as for any other file; ``mkstemp``'s 0600 would not."""
    while True:
        tmp = _temporary_name(path, ".tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
        except FileExistsError:
            continue
        os.close(fd)
        return tmp


def _create_temporary_folder(path: Path) -> Path:
    """An empty folder beside ``path`` made with mode 0777 less the umask (``mkdtemp`` gives 0700)."""
    while True:
        tmp = _temporary_name(path, ".partial")
        try:
            tmp.mkdir(0o777)
        except FileExistsError:
            continue
        return tmp


@contextmanager
def atomic_destination(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success fsync it and rename it over ``path``.

    On any error the temporary file is removed and ``path`` is left as it was. A failure to
    write (a full disk, a quota, a read-only or missing folder, a permission) is a StorageError
    naming ``path``; other errors of the writer pass through unchanged.
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = _create_temporary_file(path)
    except OSError as exc:
        raise cannot_write(path, exc) from exc
    try:
        yield tmp
    except BaseException as exc:
        _discard(tmp)
        if _is_write_failure(exc, tmp):
            raise cannot_write(path, exc) from exc  # type: ignore[arg-type]
        raise
    try:
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        _discard(tmp)
        if isinstance(exc, OSError):
            raise cannot_write(path, exc) from exc
        raise
    _fsync_dir(path.parent)


@contextmanager
def atomic_folder(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield an empty temporary folder beside ``path``; on success it replaces ``path``.

    An existing folder at ``path`` is renamed aside first and deleted only after the new one
    is in place, so readers see the old folder or the new one, never a mix; on any error the
    temporary folder is removed and ``path`` is left as it was (a failure to write is a
    StorageError naming ``path``, as in ``atomic_destination``).
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = _create_temporary_folder(path)
    except OSError as exc:
        raise cannot_write(path, exc) from exc
    try:
        yield tmp
    except BaseException as exc:
        _discard(tmp)
        if isinstance(exc, OSError) and exc.errno in _WRITE_ERRNOS:
            raise cannot_write(path, exc) from exc
        raise
    old = path.with_name(f".{path.name}.{secrets.token_hex(4)}.old")
    try:
        if path.exists():
            os.replace(path, old)
        os.replace(tmp, path)
    except OSError as exc:
        _discard(tmp)
        try:
            if old.exists() and not path.exists():
                os.replace(old, path)           # put the previous folder back
        except OSError:
            pass
        raise cannot_write(path, exc) from exc
    _fsync_dir(path.parent)
    shutil.rmtree(old, ignore_errors=True)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    with atomic_destination(path) as tmp:
        tmp.write_bytes(data)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def finite_or_null(value: Any) -> Any:
    """``value`` with every NaN or infinite float replaced by None: ``json.dumps`` would write
    ``NaN``/``Infinity``, which is not JSON (jq, log shippers and browsers reject the file).
    NumPy scalars count as the numbers they hold."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite_or_null(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_null(v) for v in value]
    if type(value).__module__ == "numpy" and hasattr(value, "item") and getattr(value, "ndim", None) == 0:
        return finite_or_null(value.item())     # a float32 metric is not a float
    return value


def plain_json_value(value: Any) -> Any:
    """What a value ``json`` cannot encode is written as: a dataclass or pydantic model as its
    fields, a path or anything else as text, a NumPy array or scalar as its numbers."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if hasattr(value, "model_dump") and not isinstance(value, type):
        return value.model_dump(mode="python")
    if hasattr(value, "tolist"):                # NumPy arrays and scalars
        return value.tolist()
    return str(value)


def json_text(value: Any, *, indent: int | None = 2, sort_keys: bool = False,
              default: Callable[[Any], Any] | None = plain_json_value) -> str:
    """The one way the project writes JSON: strict (``allow_nan=False``), with every NaN or
    infinite number as null, also inside what ``default`` turns an object into. Every JSON file
    in a run folder, the stage cache and the log lines is written through it, so a strict reader
    (``jq``, a browser, ``json.loads`` with ``parse_constant`` refusing) reads them all."""
    strict_default = None if default is None else (lambda obj: finite_or_null(default(obj)))
    return json.dumps(finite_or_null(value), indent=indent, sort_keys=sort_keys, allow_nan=False,
                      default=strict_default)


def atomic_write_json(path: str | os.PathLike[str], value: Any, *, indent: int | None = 2,
                      default: Callable[[Any], Any] | None = plain_json_value) -> None:
    """Strict JSON, atomically: an undefined number (a metric on one class) is written as null."""
    atomic_write_text(path, json_text(value, indent=indent, default=default))


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
    """Creates run folders of one pipeline (``pipeline.runs.layout`` says where everything goes)."""

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
        self.mark_alias(run, LATEST)

    def check_alias(self, alias: str) -> Path:
        """The link ``alias`` is, or would be; a ``DataError`` when something that is not a link
        is in its place (never replaced: it holds something of someone's)."""
        link = self.layout.alias_link(alias)
        if os.path.lexists(link) and not link.is_symlink():
            raise DataError(not_a_link(link))
        return link

    def mark_alias(self, run: RunDir | Path, alias: str) -> None:
        """Point ``alias`` (``pipeline.runs.layout.ALIASES``) at a run of this pipeline, atomically:
        a reader resolving it (``pipeline serve champion`` polling it) sees the old run or the
        new one, never a missing link."""
        link = self.check_alias(alias)
        name = run.path.name if isinstance(run, RunDir) else Path(run).name
        tmp = self.pipeline_dir / f".{alias}.{os.getpid()}.{threading.get_ident()}.tmp"
        try:
            tmp.unlink(missing_ok=True)
            tmp.symlink_to(name)
            os.replace(tmp, link)
        except OSError as exc:
            _discard(tmp)
            raise cannot_write(link, exc, verb="update") from exc


def not_a_link(path: Path) -> str:
    """The message for an alias that is a plain file or folder: what it is, and what to do
    (``latest`` is pointed by the next run of every stage; the others by ``runs promote``)."""
    kind = "a folder" if path.is_dir() else "a plain file"
    again = ("the next run of every stage points it again" if path.name == "latest"
             else "then point it with `pipeline runs promote RUN`, or let a promotion gate do it")
    return (f"'{path}' is {kind}, not a link to a run folder, so the run it means cannot be told; the pipeline "
            f"leaves it untouched. Move it away (mv '{path}' '{path}.bak'): {again}")


class RunDir:
    def __init__(self, path: Path) -> None:
        self.layout = RunLayout(path)
        self.path = path
        self.run_id = path.name

    def stage_dir(self, stage: str) -> Path:
        return self.layout.stage_dir(stage)

    def write_manifest(self, manifest: Any) -> None:
        """Write the run record (a ``pipeline.runs.record.RunManifest``) atomically, as strict JSON:
        an undefined metric (an AUC on a one-class split) is null, as in metrics.json."""
        atomic_write_json(self.layout.manifest, manifest.model_dump(mode="python"))

    def write_config(self, text: str) -> None:
        atomic_write_text(self.layout.config, text)

    def checksums(self) -> dict[str, str]:
        """sha256 of every artifact file, by path relative to the run folder."""
        out = {}
        file = self.path
        try:
            for file in sorted(self.path.rglob("*")):
                if file.is_file() and file != self.layout.manifest and not file.name.startswith("."):
                    out[str(file.relative_to(self.path))] = sha256_file(file)
        except OSError as exc:
            raise StorageError(f"cannot read {file} to record its checksum: {exc.strerror or exc}") from exc
        return out


def host_name() -> str:
    return socket.gethostname()


@dataclass(frozen=True)
class LockState:
    """What the run lock of a pipeline says (``pipeline.runs.locks`` takes it; this only looks).

    ``held``: True while a process holds it, False when free, None when that cannot be told
    (no lock file, or it cannot be opened). ``holder``: the note its last holder wrote (pid,
    host, since, run_id), ``{}`` when there is none or it cannot be read.
    """

    held: bool | None
    holder: dict[str, Any]


def read_lock_note(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The note of the last holder of the run lock at ``path`` (``{}`` if absent or unreadable)."""
    try:
        with open(path, "rb") as fh:
            data = json.loads(fh.read(64 * 1024) or b"{}")
    except (OSError, ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


def probe_lock(path: str | os.PathLike[str]) -> LockState:
    """Whether the run lock at ``path`` is held right now, without waiting and without creating it.

    A shared ``flock`` taken and dropped at once: it fails only while a run holds the lock
    (exclusively). Only decisive on this machine (see ``pipeline.runs.locks``).
    """
    import fcntl

    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return LockState(None, {})
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        held: bool | None = True
    except OSError:
        held = None
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        held = False
    finally:
        os.close(fd)
    return LockState(held, read_lock_note(path))
