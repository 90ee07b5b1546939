"""One cache entry's folder: written under a temporary name and renamed into place
(``PendingEntry``), read back only once every checksum, and with a signing key the record's
signature, is verified (``read_record``, ``verify_files``), set aside before it is removed.

An entry is ``<key>/`` holding ``output.pkl`` and ``buffers/`` (``pipeline.cache.output_pickling``),
``artifacts/`` (``pipeline.cache.artifact_links``) and ``record.json``: the stage's record with
the sha256 of every file, signed in ``record.json.sig`` when a signing key is set.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from pipeline.cache.artifact_links import link_artifacts, restore_artifacts
from pipeline.cache.output_pickling import PendingBuffer, read_output, write_buffers
from pipeline.cache.stored_buffers import forget_buffers, remember_buffers
from pipeline.runs.signing import signature_path, signature_problem, signature_text
from pipeline.runs.store import json_text, sha256_file, utc_now

CACHE_MODE = 0o700                 # private: entries are pickles (see ``pipeline.cache``)
TMP_PREFIX = ".tmp-"               # an entry being written (``PendingEntry``)
ASIDE_PREFIXES = (".corrupt-", ".evicted-")   # renamed aside to be removed: nobody reads them
ARTIFACTS_DIR = "artifacts"
RECORD_FILE = "record.json"
RECORD_TEXT_FIELDS = ("key", "stage", "kind", "created")
RECORD_OBJECT_FIELDS = ("facts", "run_record")


@dataclass
class CacheEntry:
    """A verified entry, found by ``StageCache.lookup``."""

    key: str
    path: Path
    record: dict[str, Any]

    @property
    def artifacts(self) -> Path:
        return self.path / ARTIFACTS_DIR

    def load_output(self) -> Any:
        """The stored output: the pickle stream with its large buffers read back from their files."""
        return read_output(self.path, self.record.get("files") or {})

    def restore_artifacts(self, destination: Path) -> list[str]:
        """Hard-link (or copy) the entry's artifacts into a run's stage folder."""
        return restore_artifacts(self.artifacts, destination)


@dataclass
class PendingEntry:
    """An entry being written: its pickle stream and checksums are done, its large buffers (views
    of the stage's output, which they keep alive), artifacts and record are not. Absent until
    ``finish`` renames it into place; ``discard`` or a failure leaves nothing."""

    root: Path
    key: str
    tmp: Path
    files: dict[str, str]
    buffers: list[PendingBuffer]
    signing: bytes | None = None          # the signing key read by ``prepare``: sign the record with it

    def finish(self, artifacts_dir: Path | None, record: dict[str, Any]) -> None:
        """Write the buffers (or link them to equal ones stored before), link the artifacts, write
        the record and rename the folder into place. Stops, leaving nothing, on SIGTERM."""
        try:
            stored = write_buffers(self.tmp, self.buffers)
            self.buffers = []                     # the output's memory is no longer held here
            self.files.update({relative: digest for relative, digest, _ in stored})
            if artifacts_dir is not None and artifacts_dir.is_dir():
                self.files.update(link_artifacts(artifacts_dir, self.tmp, ARTIFACTS_DIR))
            data = json_text(
                {**record, "key": self.key, "created": utc_now(), "files": dict(sorted(self.files.items()))},
                default=str).encode("utf-8")
            (self.tmp / RECORD_FILE).write_bytes(data)
            if self.signing is not None:         # signs the very bytes written, before the rename
                signature_path(self.tmp / RECORD_FILE).write_text(
                    signature_text(RECORD_FILE, data, self.signing), encoding="utf-8")
            try:
                os.rename(self.tmp, self.root / self.key)
            except OSError:                       # another run stored the same key first
                shutil.rmtree(self.tmp, ignore_errors=True)
            else:
                remember_buffers(self.root / self.key, stored)
        except BaseException:
            self.discard()
            raise

    def discard(self) -> None:
        self.buffers = []
        shutil.rmtree(self.tmp, ignore_errors=True)


def temporary_folder(root: Path, key: str) -> Path:
    """A fresh hidden name to write the entry for ``key`` under (this process's, never reused)."""
    return root / f"{TMP_PREFIX}{key}-{os.getpid()}-{secrets.token_hex(3)}"


# ---------------------------------------------------------------------------- records
def read_record(path: Path, key: str, *, signing: bytes | None = None) -> tuple[Any, str | None]:
    """``(record, None)``, or ``(what was read, why it is unusable)``: never raises but for OSError
    on the folder itself, so no record.json content can crash a run. With a ``signing`` key the
    record must carry its signature (checked before parsing, and what is parsed is what was
    checked); one that does not is ``(None, why)``."""
    if path.is_symlink() or not path.is_dir():
        return None, "not a folder"
    try:
        data = (path / RECORD_FILE).read_bytes()
        if signing is not None:
            problem = signature_problem(path / RECORD_FILE, data, signing)
            if problem is not None:
                return None, problem
        text = data.decode("utf-8")
    except FileNotFoundError:
        return None, "record.json is missing"
    except (OSError, ValueError) as exc:          # UnicodeDecodeError is a ValueError
        return None, f"record.json is unreadable ({type(exc).__name__}: {exc})"
    try:
        record = json.loads(text)
    except (ValueError, RecursionError) as exc:
        return None, f"record.json is not JSON ({type(exc).__name__}: {str(exc)[:200]})"
    return record, record_problem(record, key)


def record_problem(record: Any, key: str) -> str | None:
    """Why ``record`` is not a record ``store`` would write for ``key``, or None."""
    if not isinstance(record, dict):
        return f"record.json holds {_json_type(record)}, not an object"
    files = record.get("files")
    if not isinstance(files, dict) or not files:
        return f"record.json 'files' is {_json_type(files)}, not a non-empty object"
    for relative, digest in files.items():
        parts = PurePosixPath(relative).parts
        if not relative or relative.startswith("/") or ".." in parts:
            return f"record.json names a file outside its entry: {relative!r}"
        if not isinstance(digest, str):
            return f"record.json checksum of {relative!r} is {_json_type(digest)}, not a string"
    for name in RECORD_TEXT_FIELDS:
        if record.get(name) is not None and not isinstance(record[name], str):
            return f"record.json '{name}' is {_json_type(record[name])}, not a string"
    for name in RECORD_OBJECT_FIELDS:
        if record.get(name) is not None and not isinstance(record[name], dict):
            return f"record.json '{name}' is {_json_type(record[name])}, not an object"
    if record.get("key") not in (None, key):
        return f"record.json is the record of entry {record['key']}"
    return None


def verify_files(path: Path, record: dict[str, Any], *, signed: bool = False) -> str | None:
    """Why the entry's files do not match the record's checksums, or None. A ``signed`` entry
    must also hold nothing its record does not list: artifacts are restored by walking the
    folder, so an added file would pass into the run (and into its signed manifest)."""
    if signed:
        unlisted = unlisted_file(path, record["files"])
        if unlisted is not None:
            return f"{unlisted} is not in the signed record"
    for relative, expected in record["files"].items():
        file = path / relative
        if not file.is_file():
            return f"{relative} is missing"
        if sha256_file(file) != expected:
            return f"{relative} does not match its checksum"
    return None


def unlisted_file(path: Path, files: Mapping[str, Any]) -> str | None:
    """The first thing in entry ``path`` that is neither listed in ``files`` nor the record and its
    signature, or None (a folder counts only through what it holds; a link to one is a thing)."""
    allowed = {*files, RECORD_FILE, signature_path(RECORD_FILE).name}
    for folder, subfolders, names in os.walk(path):
        linked = [sub for sub in subfolders if os.path.islink(os.path.join(folder, sub))]
        for name in sorted([*names, *linked]):
            relative = Path(folder, name).relative_to(path).as_posix()
            if relative not in allowed:
                return relative
    return None


def _json_type(value: Any) -> str:
    names = {type(None): "null", bool: "a boolean", int: "a number", float: "a number", str: "a string",
             list: "a list", dict: "an object"}
    return names.get(type(value), type(value).__name__)


# ---------------------------------------------------------------------------- folders
def make_private(root: Path) -> None:
    """Mode 0700 whatever the umask (``pipeline.cache`` says why)."""
    if stat.S_IMODE(root.stat().st_mode) != CACHE_MODE:
        os.chmod(root, CACHE_MODE)


def mark_used(path: Path) -> None:
    """A hit: the entry folder's mtime becomes now (no file is rewritten; a folder's mtime changes
    otherwise only when a file is added to or removed from it, which entries never see)."""
    try:
        os.utime(path)
    except OSError:
        pass                          # a cache on a read-only mount still serves hits


def set_aside(root: Path, path: Path, prefix: str) -> bool:
    """Rename entry ``path`` to a hidden name under ``root`` (atomic: readers see the entry or
    nothing), then remove it. ``prefix`` is one of ``ASIDE_PREFIXES``.

    False when it was already gone (another process removed it first). A removal that stops
    half way leaves a hidden folder that ``remove_leftovers`` finishes.
    """
    aside = root / f"{prefix}{path.name}-{secrets.token_hex(3)}"
    forget_buffers(path)
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return False
    remove_tree(aside)
    return True


def remove_tree(path: Path) -> None:
    if path.is_symlink() or not path.is_dir():
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path, ignore_errors=True)
