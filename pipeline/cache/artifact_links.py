"""A stage's artifact files in a cache entry and back in a run: hard links, copies where a link
is impossible (another file system, symbolic links).

Linking shares the run's files: artifacts are replaced by rename, never edited in place, and
one that was edited would fail the entry's verification, not load.
"""

from __future__ import annotations

import os
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
    paths restored."""
    restored = []
    for path in sorted(source.rglob("*")):
        if not path.is_file():
            continue
        target = destination / path.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(path, target)            # artifacts are replaced by rename, never edited
        except OSError:
            shutil.copy2(path, target)
        restored.append(str(target))
    return restored


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
