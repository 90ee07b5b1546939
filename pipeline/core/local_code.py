"""A config's own code in a process that runs many configs: a notebook, a service, a Dask worker.

Modules beside a config file import without installing them: the config's folder goes on
``sys.path``, behind everything installed, so it shadows no library. In a process that runs
one config and ends, that is all. In one that lives on, Python's module cache would keep the
first module of a name for good: a second project's ``stagefn`` ran the first project's, and
an edited module ran as first imported, under the key of its new source. So:

- ``use_config_folders`` puts the folders of the config being run ahead of other configs'
  folders (still behind everything else), so a name resolves to this config's module;
- ``refresh`` drops a ``python`` stage's module, and the author's modules it imports, from the
  module cache when one of them now resolves to another file or its file has changed since it
  was imported (``remember``), so the stage imports what a new process would.

A config's plugins (``plugins: [...]``) are refreshed the same way when the config is read
(``refresh_plugins``): a second project's plugin of the same name, or an edited one, is
imported again, and what it registers replaces what the earlier import registered.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pipeline.core.fingerprints import file_stamp, local_modules
from pipeline.core.plugins import forget_plugin, loaded_plugins

# Folders of configs this process has run, in the order first seen.
_config_folders: list[str] = []
# A module's file -> its ``file_stamp`` when the module was imported.
_imported: dict[str, tuple[Any, ...]] = {}


def use_config_folders(folders: Sequence[str | os.PathLike[str]]) -> None:
    """Put ``folders`` on ``sys.path`` ahead of other configs' folders, behind everything else."""
    current = list(dict.fromkeys(str(Path(folder).resolve()) for folder in folders))
    _config_folders.extend(folder for folder in current if folder not in _config_folders)
    others = [entry for entry in sys.path if entry not in current]
    at = next((i for i, entry in enumerate(others) if entry in _config_folders), len(others))
    wanted = others[:at] + current + others[at:]
    if wanted != sys.path:              # every stage asks: the import caches are kept when nothing moves
        sys.path[:] = wanted
        importlib.invalidate_caches()


def refresh(module: str) -> None:
    """Drop ``module`` and the author's modules it imports from the module cache when one of
    them is stale: it now resolves to another file, or its file changed since its import."""
    _drop_if_stale(_family(module))


def refresh_plugins(modules: Sequence[str]) -> None:
    """Drop those of a config's plugin ``modules`` already imported that are stale (``refresh``'s
    test, over the plugin and the author's modules it imports) from the module cache and from
    the plugins loaded, so that loading them imports them again."""
    for module in modules:
        if module in loaded_plugins() and _drop_if_stale(_family(module, plugins=True)):
            forget_plugin(module)


def _drop_if_stale(family: set[str]) -> bool:
    names = sorted(family)
    stale = [name for name in names if _stale(name)]
    if not stale:
        return False
    for name in stale:                  # an edited file: its next import is its new state
        path = sys.modules[name].__file__
        if _changed(path):
            _imported.pop(path, None)
            _forget_bytecode(sys.modules[name])
    for name in names:
        for loaded in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
            del sys.modules[loaded]
    importlib.invalidate_caches()
    return True


def remember(module: str, *, plugin: bool = False) -> None:
    """Note the files of ``module`` and the author's modules it imports, as just imported."""
    for name in _family(module, plugins=plugin):
        stamp = file_stamp(getattr(sys.modules.get(name), "__file__", None))
        if stamp is not None:
            _imported.setdefault(stamp[0], stamp)


def _family(module: str, *, plugins: bool = False) -> set[str]:
    """``module`` (its top package too) and the author's modules it imports, less plugins
    (other than ``module`` itself when ``plugins``)."""
    skipped = set() if plugins else set(loaded_plugins())
    names = set(local_modules([module])) | {module.split(".")[0]}
    return {name for name in names if name not in skipped and name.split(".")[0] != "pipeline"}


def _stale(name: str) -> bool:
    """Whether the loaded ``name`` is not what a new process would import: its file changed
    since it was imported (a module first seen here counts as imported now), or the name
    resolves to another file."""
    path = getattr(sys.modules.get(name), "__file__", None)
    if path is None:
        return False
    if _changed(path):
        return True
    if "." in name:
        return False
    found = importlib.machinery.PathFinder.find_spec(name)
    return found is not None and found.origin is not None and \
        os.path.realpath(found.origin) != os.path.realpath(path)


def _changed(path: str) -> bool:
    """Whether the file changed since its module was imported (first seen here: imported now)."""
    stamp = file_stamp(path)
    return stamp is None or _imported.setdefault(stamp[0], stamp) != stamp


def _forget_bytecode(module: object) -> None:
    """Remove a changed module's cached bytecode: Python checks it against the source's mtime
    in whole seconds and its size, so an edit of the same size within the second would load
    the old code again."""
    cached = getattr(module, "__cached__", None)
    if isinstance(cached, str):
        try:
            os.remove(cached)
        except OSError:
            pass
