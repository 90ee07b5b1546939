"""The cache's size limit and housekeeping: what is there (``EntryInfo``), which entries to
evict (least recently used first), the remains of interrupted writes and removals, the limit
itself (``resolve_max_size``).

A hit marks an entry used by touching its folder's mtime; ``trim`` runs after a run and evicts
the least recently used entries until the cache fits, sparing those the run wrote or used.
"""

from __future__ import annotations

import logging
import os
import stat
import time
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pipeline.cache.entries import ASIDE_PREFIXES, TMP_PREFIX, make_private, read_record, remove_tree, set_aside
from pipeline.core.errors import ConfigError, ConfigIssue, StorageError
from pipeline.core.settings import Settings, current_settings, register_check
from pipeline.core.sizes import DEFAULT_CACHE_SIZE, parse_size

log = logging.getLogger("pipeline")

ENV_MAX_SIZE = Settings.variable("cache_max_size")
DEFAULT_MAX_SIZE = DEFAULT_CACHE_SIZE
# A ``.tmp-`` folder this old is a write that died (a killed run); younger ones may be in progress
# (a worker of a run on another host storing a large entry).
STALE_TMP_SECONDS = 3600.0


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


def list_entries(root: Path) -> list[EntryInfo]:
    """Every entry under ``root``, complete or not (hidden names are writes and removals in progress)."""
    try:
        names = sorted(p for p in root.iterdir() if not p.name.startswith("."))
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as exc:
        raise StorageError(f"cannot read the stage cache {root}: {exc.strerror or exc}") from exc
    return [entry_info(path) for path in names]


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


def evict(root: Path, entry: EntryInfo) -> bool:
    """Remove one entry (False if it was already gone); StorageError if it cannot be."""
    try:
        return set_aside(root, entry.path, ".evicted-")
    except OSError as exc:
        raise StorageError(f"cannot remove cache entry {entry.path}: {exc.strerror or exc}") from exc


def remove_leftovers(root: Path, *, dry_run: bool = False, now: float | None = None) -> list[Path]:
    """Hidden remains: entries set aside but not yet removed, and writes older than an hour."""
    now = time.time() if now is None else now
    try:
        hidden = sorted(p for p in root.iterdir() if p.name.startswith("."))
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


def trim(root: Path, max_bytes: int | None, keep: Collection[str] = ()) -> list[EntryInfo]:
    """After a run: remove leftovers, then evict down to ``max_bytes`` sparing ``keep`` (the
    run's own keys). Never raises: a cache that cannot be trimmed only warns."""
    evicted: list[EntryInfo] = []
    try:
        if not root.is_dir():
            return evicted
        make_private(root)
        remove_leftovers(root)
        for entry in least_recently_used(list_entries(root) if max_bytes is not None else [], max_bytes, keep):
            if evict(root, entry):
                evicted.append(entry)
    except (OSError, StorageError) as exc:
        log.warning("stage cache %s not trimmed: %s", root, exc)
    if evicted:
        log.info("stage cache: evicted %d least recently used entr%s (%s) to stay within %s",
                 len(evicted), "y" if len(evicted) == 1 else "ies",
                 format_size(sum(e.size for e in evicted)), format_size(max_bytes))
    return evicted


# ---------------------------------------------------------------------------- sizes
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


def resolve_max_size(configured: object, override: object = None, settings: Settings | None = None,
                     *, option: str = "--cache-max-size") -> int | None:
    """The cache limit in bytes (None: no limit): an explicit override (the command-line ``option``),
    else ``$PIPELINE_CACHE_MAX_SIZE``, else the config's ``cache.max_size``."""
    settings = current_settings() if settings is None else settings
    if override is not None:
        source, value = option, override
    elif (settings.cache_max_size or "").strip():
        source, value = f"${ENV_MAX_SIZE}", settings.cache_max_size
    else:
        source, value = "cache.max_size", configured
    try:
        return parse_size(value)
    except ValueError as exc:
        raise ConfigError([ConfigIssue(source, str(exc))]) from None


register_check("cache_max_size", check=lambda settings: resolve_max_size(None, settings=settings))
