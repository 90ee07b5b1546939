"""A stage's artifact files in a cache entry and back in a run: hard links, copies where a link
is impossible (another file system, symbolic links).

Linking shares the run's files: artifacts are replaced by rename, never edited in place, and
one that was edited would fail the entry's verification, not load.
"""

from __future__ import annotations

import os
import secrets
import shutil
from pathlib import Path

from pipeline.runs.store import sha256_file


def link_artifacts(source: Path, entry: Path, name: str) -> dict[str, str]:
    """Hard-link a stage's artifact files into ``entry/name`` (copies where links are impossible):
    the sha256 of each, by path relative to ``entry``."""
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
                link_or_copy(path, target)
                copied = [target]
            for file_path in copied:
                files[str(file_path.relative_to(entry))] = sha256_file(file_path)
    return files


def restore_artifacts(source: Path, destination: Path) -> list[str]:
    """Hard-link (or copy) an entry's artifact folder ``source`` into a run's stage folder: the
    paths restored. A file is linked only where its mode is the one this process gives a new
    file there (0666 less the umask, or a default ACL's): a link shares the mode of the run that
    first wrote it, so one run under umask 077 made every later run's models unreadable to the
    group or the scoring service, and a copy gets this run's mode, as the files it writes do."""
    restored = []
    fresh = _new_file_mode(destination)
    for path in sorted(source.rglob("*")):
        if not path.is_file():
            continue
        target = destination / path.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        if fresh is None or (path.stat().st_mode & 0o7777) == fresh:
            try:
                os.link(path, target)            # artifacts are replaced by rename, never edited
                restored.append(str(target))
                continue
            except OSError:
                pass
        shutil.copyfile(path, target)            # a new file: this process's mode, not the entry's
        shutil.copystat(path, target, follow_symlinks=True)
        if fresh is not None:
            os.chmod(target, fresh)
        restored.append(str(target))
    return restored


def _new_file_mode(folder: Path) -> int | None:
    """The mode a file created in ``folder`` with 0666 gets (the umask, a default ACL), found by
    making one; None where none can be made (the copy then keeps its own)."""
    folder.mkdir(parents=True, exist_ok=True)
    probe = folder / f".mode-probe-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except OSError:
        return None
    try:
        os.close(fd)
        return os.stat(probe).st_mode & 0o7777
    finally:
        probe.unlink(missing_ok=True)


def link_or_copy(source: Path, target: Path) -> None:
    """A hard link to ``source`` at ``target``; a copy of a symbolic link's target, or where the
    file system refuses the link."""
    if not source.is_symlink():
        try:
            os.link(source, target)
            return
        except OSError:
            pass
    shutil.copy2(source, target)
