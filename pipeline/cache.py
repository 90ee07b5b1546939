"""The content-addressed stage cache: skip a stage whose inputs, params and code are unchanged.

A stage's key is a hash of everything its output depends on:

- its resolved params (``description`` aside) and the keys of its input stages, so a change
  reruns the stage and everything downstream of it, nothing else;
- what its kind declares beyond that (``register_stage(fingerprint=...)``): a ``load``
  declares the *contents* of the files it reads (SHA-256 over every byte; size + mtime would
  miss a file rewritten in place within the same second), a ``python`` stage the source of
  the user's module. A kind whose fingerprint is None for a spec is never cached (stages on
  partitioned Dask data: their outputs are lazy views of files in one run's folder), and
  neither is anything downstream of it;
- the source of the whole ``pipeline`` package and its version: any code change
  invalidates the cache. Coarse, but it never misses an edit in a helper function;
- the backend and the versions of its libraries, and the run's seed.

An entry is a folder ``<runs_dir>/<pipeline>/.cache/<key>/`` holding the pickled output
(``output.pkl``, pickle protocol 5, with its large buffers beside it in ``buffers/``), the
stage's artifact files (hard links to the run's) and ``record.json`` with the sha256 of each.
It is built under a temporary name and renamed into place, so an entry is complete or absent
(a write that dies leaves a hidden ``.tmp-`` folder, removed later); on lookup
every checksum is verified and an entry that fails is moved aside and recomputed, never
loaded; so is one whose ``record.json`` is not the object ``store`` writes (``null``, a list,
missing or wrong-typed fields): a bad entry costs a recomputation, never the run.

The cache has a size limit (``cache.max_size`` in the config, ``$PIPELINE_CACHE_MAX_SIZE``
overrides it; default 5 GiB). After a run, the least recently used entries are evicted until
the cache fits, except the entries that run wrote or used; a hit marks an entry used by
touching its folder's mtime (no file is rewritten). A fixed default rather than a share of
free disk: the limit must not move when other files fill or free the disk, or the same run
would evict differently from one night to the next. Entries, like runs, are removed by
renaming them aside first (``.corrupt-``/``.evicted-``), so a concurrent reader sees a whole
entry or none; leftovers of interrupted removals and writes are removed later.

The cache folder is mode 0700 whatever the umask: entries hold pickled outputs (copies of
the input data among them), and loading a pickle runs code, so a user who could write an
entry could run code as whoever runs the pipeline next, and one who could read it could
read the data.

Signed entries: the checksums sit beside the files they protect, so a writer of the runs
folder could replace an output and its checksum together. With a signing key set
(``PIPELINE_SIGNING_KEY``/``_FILE``, ``pipeline.runs.signing``) ``store`` signs ``record.json``
(``record.json.sig``, HMAC-SHA256, written in the temporary folder before the rename), and
``lookup`` sets aside, like a corrupt one, an entry whose record is unsigned, signed with
another key or changed, or that holds a file its record does not list: checked before
anything is unpickled, and the record parsed is the bytes whose signature was checked. The
record lists every file's sha256, so its signature covers them all. Without a key nothing is
signed or checked.
"""

from __future__ import annotations

import copyreg
import hashlib
import json
import logging
import os
import pickle
import secrets
import shutil
import stat
import sys
import time
from collections.abc import Collection, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Any

from pipeline.version import __version__
from pipeline.core.errors import ConfigError, ConfigIssue, StorageError
from pipeline.core.interrupts import Terminated, termination_requested
from pipeline.core.fingerprints import code_fingerprint
from pipeline.core.sizes import DEFAULT_CACHE_SIZE, parse_size
from pipeline.runs.signing import signature_path, signature_problem, signature_text, signing_key
from pipeline.runs.store import json_text, sha256_file, utc_now

log = logging.getLogger("pipeline")

CACHE_MODE = 0o700                 # private: entries are pickles (see the module docstring)
ENV_MAX_SIZE = "PIPELINE_CACHE_MAX_SIZE"
DEFAULT_MAX_SIZE = DEFAULT_CACHE_SIZE
TMP_PREFIX = ".tmp-"               # an entry being written (store)
ASIDE_PREFIXES = (".corrupt-", ".evicted-")   # renamed aside to be removed: nobody reads them
# A ``.tmp-`` folder this old is a write that died (a killed run); younger ones may be in progress
# (a worker of a run on another host storing a large entry).
STALE_TMP_SECONDS = 3600.0


def stage_key(spec: Any, input_keys: dict[str, str | None], *, fingerprint: Mapping[str, Any] | None,
              backend: str, versions: dict[str, str], seed: int) -> str | None:
    """The cache key of a stage, or None when it cannot be cached (its kind's ``fingerprint``
    is None, or an input cannot be cached)."""
    if fingerprint is None or any(key is None for key in input_keys.values()):
        return None
    payload: dict[str, Any] = {
        "kind": spec.kind,
        "params": spec.model_dump(mode="json", exclude={"description", "inputs", "budget"}),
        "inputs": input_keys,
        "declared": dict(fingerprint),
        "code": code_fingerprint(), "pipeline": __version__,
        "backend": backend, "versions": versions, "seed": seed,
    }
    text = json.dumps(payload, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


@dataclass
class CacheEntry:
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
        restored = []
        for source in sorted(self.artifacts.rglob("*")):
            if not source.is_file():
                continue
            target = destination / source.relative_to(self.artifacts)
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(source, target)          # artifacts are replaced by rename, never edited
            except OSError:
                shutil.copy2(source, target)
            restored.append(str(target))
        return restored


@dataclass
class PendingEntry:
    """An entry being written: its pickle stream and checksums are done, its large buffers (views
    of the stage's output, which they keep alive), artifacts and record are not. Absent until
    ``finish`` renames it into place; ``discard`` or a failure leaves nothing."""

    root: Path
    key: str
    tmp: Path
    files: dict[str, str]
    buffers: list[tuple[str, str, memoryview]]
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


class StageCache:
    """Entries under one folder (per pipeline); safe with concurrent writers."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def lookup(self, key: str, stage: str | None = None) -> CacheEntry | None:
        """The verified entry for ``key``, or None (absent, or corrupt and set aside).

        ``stage`` names the stage asking, for the warning; without it the record's own name is used.
        A hit marks the entry used now (its folder's mtime), which is what eviction orders by.
        """
        path = self.root / key
        try:
            if not path.is_symlink() and not path.exists():
                return None
            signing = signing_key()             # set: only entries signed with it ("Signed entries" above)
            record, problem = read_record(path, key, signing=signing)
            if problem is None:
                problem = self._verify(path, record, signed=signing is not None)
        except OSError as exc:                  # e.g. a cache folder another user made private
            problem = f"{type(exc).__name__}: {exc}"
            record = None
        if problem:
            named = stage or (record.get("stage") if isinstance(record, dict) else None) or "(unknown)"
            log.warning("cache entry %s for stage %s failed verification (%s); recomputing",
                        key, named, problem)
            self._discard(path)
            return None
        mark_used(path)
        return CacheEntry(key, path, record)

    @staticmethod
    def _verify(path: Path, record: dict[str, Any], *, signed: bool = False) -> str | None:
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

    def store(self, key: str, output: Any, artifacts_dir: Path | None, record: dict[str, Any]) -> None:
        """Write an entry for ``key`` under a temporary name, then rename it into place."""
        self.prepare(key, output).finish(artifacts_dir, record)

    def prepare(self, key: str, output: Any) -> PendingEntry:
        """The part of storing that reads ``output``: its pickle stream, written to a temporary
        folder, and the sha256 of its large buffers, hashed from memory. ``PendingEntry.finish``
        writes the rest (it may run on another thread while the next stage runs): whatever
        happens to the output meanwhile, the entry holds it as it is now or fails verification.

        Every file is hashed as it is written (never read back) and nothing is fsynced: every
        lookup verifies every checksum, so an entry that a power loss truncated costs a
        recomputation, like any corrupt one. With a signing key set the record is signed too
        (``record.json.sig``, "Signed entries" above); the key is read here, in the caller's thread.
        """
        signing = signing_key()
        self.root.mkdir(parents=True, exist_ok=True)
        make_private(self.root)
        tmp = self.root / f"{TMP_PREFIX}{key}-{os.getpid()}-{secrets.token_hex(3)}"
        try:
            tmp.mkdir()
            files, buffers = pickle_output(tmp, output)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return PendingEntry(self.root, key, tmp, files, buffers, signing)

    def _discard(self, path: Path) -> None:
        """Set a corrupt entry aside and remove it; a reader that got there first keeps nothing."""
        try:
            self._set_aside(path, ".corrupt-")
        except OSError:
            return

    def _set_aside(self, path: Path, prefix: str) -> bool:
        """Rename ``path`` to a hidden name (atomic: readers see the entry or nothing), then remove it.

        False when it was already gone (another process removed it first). A removal that stops
        half way leaves a hidden folder that ``remove_leftovers`` finishes.
        """
        aside = self.root / f"{prefix}{path.name}-{secrets.token_hex(3)}"
        forget_buffers(path)
        try:
            os.rename(path, aside)
        except FileNotFoundError:
            return False
        remove_tree(aside)
        return True

    # ------------------------------------------------------------------ size limit and housekeeping
    def entries(self) -> list[EntryInfo]:
        """Every entry, complete or not (hidden names are writes and removals in progress)."""
        try:
            names = sorted(p for p in self.root.iterdir() if not p.name.startswith("."))
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as exc:
            raise StorageError(f"cannot read the stage cache {self.root}: {exc.strerror or exc}") from exc
        return [entry_info(path) for path in names]

    def evict(self, entry: EntryInfo) -> bool:
        """Remove one entry (False if it was already gone); StorageError if it cannot be."""
        try:
            return self._set_aside(entry.path, ".evicted-")
        except OSError as exc:
            raise StorageError(f"cannot remove cache entry {entry.path}: {exc.strerror or exc}") from exc

    def over_limit(self, max_bytes: int | None, keep: Collection[str] = ()) -> list[EntryInfo]:
        """The entries to evict so that the cache fits ``max_bytes`` (see ``least_recently_used``)."""
        return least_recently_used(self.entries() if max_bytes is not None else [], max_bytes, keep)

    def unreferenced(self, referenced: Collection[str]) -> list[EntryInfo]:
        """Entries whose key no run in ``referenced`` names."""
        return [e for e in self.entries() if e.key not in referenced]

    def remove_leftovers(self, *, dry_run: bool = False, now: float | None = None) -> list[Path]:
        """Hidden remains: entries set aside but not yet removed, and writes older than an hour."""
        now = time.time() if now is None else now
        try:
            hidden = sorted(p for p in self.root.iterdir() if p.name.startswith("."))
        except OSError:
            return []
        found = []
        for path in hidden:
            if path.name.startswith(TMP_PREFIX):
                try:
                    if now - path.lstat().st_mtime < STALE_TMP_SECONDS:
                        continue
                except OSError:
                    continue
            elif not path.name.startswith(ASIDE_PREFIXES):
                continue
            if not dry_run:
                remove_tree(path)
            found.append(path)
        return found

    def trim(self, max_bytes: int | None, keep: Collection[str] = ()) -> list[EntryInfo]:
        """After a run: remove leftovers, then evict down to ``max_bytes`` sparing ``keep`` (the
        run's own keys). Never raises: a cache that cannot be trimmed only warns."""
        evicted: list[EntryInfo] = []
        try:
            if not self.root.is_dir():
                return evicted
            make_private(self.root)
            self.remove_leftovers()
            for entry in self.over_limit(max_bytes, keep):
                if self.evict(entry):
                    evicted.append(entry)
        except (OSError, StorageError) as exc:
            log.warning("stage cache %s not trimmed: %s", self.root, exc)
        if evicted:
            log.info("stage cache: evicted %d least recently used entr%s (%s) to stay within %s",
                     len(evicted), "y" if len(evicted) == 1 else "ies",
                     format_size(sum(e.size for e in evicted)), format_size(max_bytes))
        return evicted


@dataclass
class EntryInfo:
    """What ``pipeline cache list`` shows of one entry; ``problem`` says why its record is unusable."""

    key: str
    path: Path
    size: int
    last_used: float                    # epoch seconds: the folder's mtime, touched on each hit
    created: str | None = None
    stage: str | None = None
    kind: str | None = None
    problem: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"key": self.key, "stage": self.stage, "kind": self.kind, "size_bytes": self.size,
                "created": self.created, "last_used": iso_time(self.last_used), "path": str(self.path),
                "problem": self.problem}


def least_recently_used(entries: list[EntryInfo], max_bytes: int | None,
                        keep: Collection[str] = ()) -> list[EntryInfo]:
    """Which of ``entries`` to evict so the rest fit ``max_bytes`` (None: none): least recently
    used first, entries whose record is unusable before all others; never those in ``keep``."""
    if max_bytes is None:
        return []
    total = sum(e.size for e in entries)
    chosen: list[EntryInfo] = []
    for entry in sorted(entries, key=lambda e: (e.problem is None, e.last_used, e.key)):
        if total <= max_bytes:
            break
        if entry.key not in keep:
            chosen.append(entry)
            total -= entry.size
    return chosen


def entry_info(path: Path) -> EntryInfo:
    """One entry as listed, whatever state it is in (a junk file under ``.cache`` is one too)."""
    try:
        info = path.lstat()
    except OSError:
        return EntryInfo(path.name, path, 0, 0.0, problem="vanished")
    if not stat.S_ISDIR(info.st_mode):
        return EntryInfo(path.name, path, info.st_size, info.st_mtime, problem="not a folder")
    record, problem = read_record(path, path.name)
    fields = record if isinstance(record, dict) and problem is None else {}
    return EntryInfo(path.name, path, tree_size(path), info.st_mtime, created=fields.get("created"),
                     stage=fields.get("stage"), kind=fields.get("kind"), problem=problem)


# ---------------------------------------------------------------------------- an entry's files
OUTPUT_FILE = "output.pkl"         # the pickle stream (protocol 5)
BUFFERS_DIR = "buffers"            # its large buffers, out of band: 000000.bin, 000001.bin...
ARTIFACTS_DIR = "artifacts"
RECORD_FILE = "record.json"
# Buffers (NumPy arrays, Arrow columns) this large are files of their own beside the pickle
# stream: hashed from memory, written without passing through the pickler, and linked rather
# than written again when this process has stored the same bytes (a train stage's output
# carries the feature matrices the features stage stored). Smaller ones stay in the stream.
OUT_OF_BAND_MIN_BYTES = 1 << 20
# A column whose Arrow buffers exceed what it uses by more than this is a slice of a larger
# array: pickled chunk by chunk it would carry the whole buffers, so pandas' own way is kept.
SLICE_SLACK = 1 << 16
HASH_THREADS = 4

# (sha256, size) -> a buffer file of an entry this process stored, and its identity (device,
# inode, mtime): what ``link_stored`` reuses while that path still names that very file. Entries
# this process removes are forgotten at once (``forget_buffers``); one another process removed
# and stored again can at worst be linked to other bytes, which its checksum then refuses.
_stored_buffers: dict[tuple[str, int], tuple[Path, tuple[int, int, int]]] = {}
_STORED_BUFFERS_MAX = 4096


class _HashingFile:
    """A write-only file that hashes what passes through it: the checksum without a second read."""

    def __init__(self, fh: Any) -> None:
        self._fh = fh
        self.sha256 = hashlib.sha256()

    def write(self, data: Any) -> int:
        self.sha256.update(data)
        return self._fh.write(data)


class _OutputPickler(pickle.Pickler):
    """Protocol 5, with pandas' Arrow-backed columns pickled as their chunks (``arrow_column_reduction``)."""

    def __init__(self, file: Any, buffer_callback: Any) -> None:
        super().__init__(file, protocol=5, buffer_callback=buffer_callback)
        pandas = sys.modules.get("pandas")        # no pandas loaded: no pandas object to pickle
        self._arrow_array = getattr(getattr(pandas, "arrays", None), "ArrowExtensionArray", None)

    def reducer_override(self, obj: Any) -> Any:
        if self._arrow_array is not None and isinstance(obj, self._arrow_array):
            return arrow_column_reduction(obj)
        return NotImplemented


def arrow_column_reduction(column: Any) -> Any:
    """How to pickle a pandas Arrow-backed column (``str`` columns in pandas 3) without a copy.

    pandas pickles one by first combining its chunks into one new array
    (``ArrowExtensionArray.__getstate__``, even for a single chunk): a second copy of every
    string column of a table while it is stored, which stays in the Arrow allocator's pool
    afterwards. Its chunks pickle as they are, their buffers out of band; pandas' own
    ``__setstate__`` rebuilds the column from them. NotImplemented (pandas' way) for a slice.
    """
    state = dict(vars(column))
    chunked = state.get("_pa_array")
    try:
        sliced = chunked.get_total_buffer_size() > chunked.nbytes + SLICE_SLACK
    except (AttributeError, TypeError):           # another pandas layout: its own way
        return NotImplemented
    if sliced:
        return NotImplemented
    return copyreg.__newobj__, (type(column),), state


def pickle_output(folder: Path, output: Any) -> tuple[dict[str, str], list[tuple[str, str, memoryview]]]:
    """Write ``output``'s pickle stream into ``folder``: the sha256 of the stream, and its large
    buffers as (path relative to ``folder``, sha256, view of the output's memory), still to write."""
    views: list[memoryview] = []

    def out_of_band(buffer: pickle.PickleBuffer) -> bool:
        try:
            view = buffer.raw()
        except BufferError:                       # not contiguous: in the stream
            return True
        if view.nbytes < OUT_OF_BAND_MIN_BYTES:
            return True
        views.append(view)
        return False

    with open(folder / OUTPUT_FILE, "wb") as fh:
        stream = _HashingFile(fh)
        _OutputPickler(stream, out_of_band).dump(output)
    buffers = [(f"{BUFFERS_DIR}/{index:06d}.bin", digest, view)
               for index, (digest, view) in enumerate(zip(sha256_all(views), views))]
    return {OUTPUT_FILE: stream.sha256.hexdigest()}, buffers


def sha256_all(views: list[memoryview]) -> list[str]:
    """The sha256 of each buffer; several at once on as many cores (up to ``HASH_THREADS``):
    hashlib releases the GIL, and the stage that produced them waits for this."""
    threads = min(len(views), HASH_THREADS, os.cpu_count() or 1)
    if threads < 2:
        return [hashlib.sha256(view).hexdigest() for view in views]
    with ThreadPoolExecutor(threads, thread_name_prefix="pipeline-cache-hash") as pool:
        return list(pool.map(lambda view: hashlib.sha256(view).hexdigest(), views))


def write_buffers(folder: Path, buffers: list[tuple[str, str, memoryview]]) -> list[tuple[str, str, int]]:
    """Write each buffer to its file, or link an equal one this process stored: (relative path,
    sha256, size) of each. Raises Terminated on SIGTERM, between files."""
    if buffers:
        (folder / BUFFERS_DIR).mkdir()
    written = []
    for relative, digest, view in buffers:
        if termination_requested():
            raise Terminated()
        if not link_stored(digest, view.nbytes, folder / relative):
            with open(folder / relative, "wb") as fh:
                fh.write(view)
        written.append((relative, digest, view.nbytes))
    return written


def read_output(folder: Path, files: Mapping[str, Any]) -> Any:
    """Unpickle an entry's output; its buffer files are read into writable memory, as pickle
    itself would read in-stream buffers (an entry without any was stored in one stream)."""
    names = sorted(name for name in files if name.startswith(f"{BUFFERS_DIR}/"))
    buffers = [read_buffer(folder / name) for name in names]
    with open(folder / OUTPUT_FILE, "rb") as fh:
        return pickle.load(fh, buffers=buffers)


def read_buffer(path: Path) -> bytearray:
    with open(path, "rb", buffering=0) as fh:
        data = bytearray(os.fstat(fh.fileno()).st_size)
        view, done = memoryview(data), 0
        while done < len(data):
            read = fh.readinto(view[done:])
            if not read:
                raise pickle.UnpicklingError(f"{path} is shorter than when it was stored")
            done += read
    return data


def link_stored(digest: str, size: int, target: Path) -> bool:
    """Link ``target`` to a stored buffer file with these bytes, if this process stored one that
    still exists (entries are never edited; a removed one is simply written again)."""
    found = _stored_buffers.get((digest, size))
    if found is None:
        return False
    source, identity = found
    try:
        os.link(source, target)
        info = target.stat()
    except OSError:
        _stored_buffers.pop((digest, size), None)
        return False
    if _identity(info) != identity or info.st_size != size:     # the path names another file now
        _stored_buffers.pop((digest, size), None)
        target.unlink()
        return False
    return True


def remember_buffers(entry: Path, buffers: list[tuple[str, str, int]]) -> None:
    """The buffer files of an entry now in place, for later entries of this process to link."""
    if len(_stored_buffers) + len(buffers) > _STORED_BUFFERS_MAX:
        _stored_buffers.clear()
    for relative, digest, size in buffers:
        try:
            info = (entry / relative).stat()
        except OSError:
            continue
        _stored_buffers[(digest, size)] = (entry / relative, _identity(info))


def forget_buffers(entry: Path) -> None:
    """An entry is being removed: link nothing to its buffer files any more."""
    for key, (path, _) in list(_stored_buffers.items()):
        if path.parent.parent == entry:
            _stored_buffers.pop(key, None)


def _identity(info: os.stat_result) -> tuple[int, int, int]:
    return info.st_dev, info.st_ino, info.st_mtime_ns


def link_artifacts(source: Path, entry: Path, name: str) -> dict[str, str]:
    """Hard-link a stage's artifact files into ``entry/name`` (copies where links are impossible:
    another file system, symbolic links): the sha256 of each, by path relative to ``entry``.

    Linking shares the run's files: artifacts are replaced by rename, never edited in place,
    and one that was edited would fail the entry's verification, not load.
    """
    files = {}
    for folder, subfolders, names in os.walk(source):
        for sub in subfolders:
            if os.path.islink(os.path.join(folder, sub)):
                names.append(sub)                     # a linked folder: copied as copytree would
        for file in sorted(names):
            path = Path(folder, file)
            target = entry / name / path.relative_to(source)
            target.parent.mkdir(parents=True, exist_ok=True)
            if path.is_dir():
                shutil.copytree(path, target)
                copied = [p for p in target.rglob("*") if p.is_file()]
            else:
                _link_or_copy(path, target)
                copied = [target]
            for file_path in copied:
                files[str(file_path.relative_to(entry))] = sha256_file(file_path)
    return files


def _link_or_copy(source: Path, target: Path) -> None:
    if not source.is_symlink():
        try:
            os.link(source, target)
            return
        except OSError:
            pass
    shutil.copy2(source, target)


# ---------------------------------------------------------------------------- records
RECORD_TEXT_FIELDS = ("key", "stage", "kind", "created")
RECORD_OBJECT_FIELDS = ("facts", "run_record")


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


# ---------------------------------------------------------------------------- files and sizes
def make_private(root: Path) -> None:
    """Mode 0700 whatever the umask (see the module docstring for why)."""
    if stat.S_IMODE(root.stat().st_mode) != CACHE_MODE:
        os.chmod(root, CACHE_MODE)


def mark_used(path: Path) -> None:
    """A hit: the entry folder's mtime becomes now (no file is rewritten; a folder's mtime changes
    otherwise only when a file is added to or removed from it, which entries never see)."""
    try:
        os.utime(path)
    except OSError:
        pass                          # a cache on a read-only mount still serves hits


def tree_size(path: Path) -> int:
    """Bytes of the files under ``path`` (apparent sizes; links not followed)."""
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:
                pass
    return total


def remove_tree(path: Path) -> None:
    if path.is_symlink() or not path.is_dir():
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path, ignore_errors=True)


def format_size(size: int | None) -> str:
    """``1.1 GiB``; None (no limit) as ``no limit``."""
    if size is None:
        return "no limit"
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def iso_time(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=timezone.utc).isoformat(timespec="seconds")


def resolve_max_size(configured: object, override: object = None, environ: Mapping[str, str] | None = None,
                     *, option: str = "--cache-max-size") -> int | None:
    """The cache limit in bytes (None: no limit): an explicit override (the command-line ``option``),
    else ``$PIPELINE_CACHE_MAX_SIZE``, else the config's ``cache.max_size``."""
    environ = os.environ if environ is None else environ
    if override is not None:
        source, value = option, override
    elif environ.get(ENV_MAX_SIZE, "").strip():
        source, value = f"${ENV_MAX_SIZE}", environ[ENV_MAX_SIZE]
    else:
        source, value = "cache.max_size", configured
    try:
        return parse_size(value)
    except ValueError as exc:
        raise ConfigError([ConfigIssue(source, str(exc))]) from None
