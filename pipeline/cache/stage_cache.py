"""``StageCache``: the entries of one pipeline, under ``<runs_dir>/<pipeline>/.cache/``; safe with
concurrent writers. What an entry holds and how it is checked: ``pipeline.cache``."""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Collection
from pathlib import Path
from typing import Any

from pipeline.cache import eviction
from pipeline.cache.entries import (
    CacheEntry, PendingEntry, make_private, mark_used, read_record, set_aside, temporary_folder, verify_files,
)
from pipeline.cache.eviction import EntryInfo
from pipeline.cache.output_pickling import pickle_output
from pipeline.runs.signing import signing_key

log = logging.getLogger("pipeline")


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
            signing = signing_key()             # set: only entries signed with it ("Signed entries")
            record, problem = read_record(path, key, signing=signing)
            if problem is None:
                problem = verify_files(path, record, signed=signing is not None)
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
        (``record.json.sig``, "Signed entries"); the key is read here, in the caller's thread.
        """
        signing = signing_key()
        self.root.mkdir(parents=True, exist_ok=True)
        make_private(self.root)
        tmp = temporary_folder(self.root, key)
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
            set_aside(self.root, path, ".corrupt-")
        except OSError:
            return

    # ------------------------------------------------------------------ size limit and housekeeping
    def entries(self) -> list[EntryInfo]:
        """Every entry, complete or not (hidden names are writes and removals in progress)."""
        return eviction.list_entries(self.root)

    def evict(self, entry: EntryInfo) -> bool:
        """Remove one entry (False if it was already gone); StorageError if it cannot be."""
        return eviction.evict(self.root, entry)

    def over_limit(self, max_bytes: int | None, keep: Collection[str] = ()) -> list[EntryInfo]:
        """The entries to evict so that the cache fits ``max_bytes`` (see ``least_recently_used``)."""
        return eviction.least_recently_used(self.entries() if max_bytes is not None else [], max_bytes, keep)

    def unreferenced(self, referenced: Collection[str]) -> list[EntryInfo]:
        """Entries whose key no run in ``referenced`` names."""
        return [e for e in self.entries() if e.key not in referenced]

    def remove_leftovers(self, *, dry_run: bool = False, now: float | None = None) -> list[Path]:
        """Hidden remains: entries set aside but not yet removed, and writes older than an hour."""
        return eviction.remove_leftovers(self.root, dry_run=dry_run, now=now)

    def trim(self, max_bytes: int | None, keep: Collection[str] = ()) -> list[EntryInfo]:
        """After a run: remove leftovers, then evict down to ``max_bytes`` sparing ``keep`` (the
        run's own keys). Never raises: a cache that cannot be trimmed only warns."""
        return eviction.trim(self.root, max_bytes, keep)
