"""Buffer files this process stored, so that an equal buffer of a later entry is a hard link.

(sha256, size) -> a buffer file of an entry this process stored, and its identity (device,
inode, size, mtime: ``fingerprints.file_identity``): what ``link_stored`` reuses while that path still names that very file. Entries
are never edited; one this process removes is forgotten at once (``forget_buffers``); one
another process removed and stored again can at worst be linked to other bytes, which its
checksum then refuses.
"""

from __future__ import annotations

import os
from pathlib import Path

from pipeline.core.fingerprints import file_identity

_stored_buffers: dict[tuple[str, int], tuple[Path, tuple[int, int, int, int]]] = {}
_STORED_BUFFERS_MAX = 4096


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
    if file_identity(info) != identity or info.st_size != size:     # the path names another file now
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
        _stored_buffers[(digest, size)] = (entry / relative, file_identity(info))


def forget_buffers(entry: Path) -> None:
    """An entry is being removed: link nothing to its buffer files any more."""
    for key, (path, _) in list(_stored_buffers.items()):
        if path.parent.parent == entry:
            _stored_buffers.pop(key, None)

