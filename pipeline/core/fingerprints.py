"""Content fingerprints for the stage cache: of files, of Python modules, of the code a stage runs.

Kept apart from ``pipeline.cache`` so stage kinds can declare what their output depends on
(``register_stage(fingerprint=...)``) without importing the cache.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.util
import os
import sys
import types
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from glob import glob
from pathlib import Path
from typing import Any

from pipeline.core.import_graph import PACKAGE, file_import_names, file_imports, imported_closure, package_modules


@dataclass(frozen=True)
class ModuleName:
    """A module named by a string (a ``python`` stage's ``module:function``), for
    ``defining_modules``: counted as code without importing it."""

    name: str


def code_fingerprint(modules: Iterable[str]) -> str:
    """Hash of the source of ``modules`` and of every module of the package they import,
    transitively (``pipeline.core.import_graph``): a stage's code, so an edit anywhere else (the
    report, the CLI) leaves its key alone. A module outside the package (a plugin's, a
    ``python`` stage's) counts by its own file, its author's own modules that it imports
    (``local_modules``) and the modules of the package they import. Computed once per process
    for each set of modules and state of its author's files: a long-lived process (a notebook,
    a Dask worker) sees an edit to a ``python`` stage's module or its helper."""
    modules = frozenset(modules)
    return _code_fingerprint(modules, local_stamps(modules))


def local_stamps(modules: Iterable[str]) -> tuple[tuple[Any, ...], ...]:
    """``file_stamp`` of the author's own modules among ``modules`` and those they import
    (``local_modules``); empty for the package's own."""
    package = package_modules()
    outside = [m for m in modules if m not in package]
    if not outside:
        return ()
    return tuple(sorted(filter(None, (file_stamp(_source_path(m)) for m in local_modules(outside)))))


def file_stamp(path: str | os.PathLike[str] | None) -> tuple[Any, ...] | None:
    """``(path, *file_identity)``: what tells an edited or replaced file from the one read
    before; None without a file."""
    if path is None:
        return None
    try:
        return (str(path), *file_identity(os.stat(path)))
    except OSError:
        return None


def file_identity(stat: os.stat_result) -> tuple[int, int, int, int]:
    """Device, inode, size and mtime (ns): the same file, unedited, while all four hold."""
    return stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns


@cache
def _code_fingerprint(modules: frozenset[str], stamps: tuple[tuple[Any, ...], ...]) -> str:
    outside = local_modules(modules)
    imported = {name for m in outside if (path := _source_path(m)) for name in file_imports(str(path))}
    digest = hashlib.blake2b(digest_size=16)
    for name in sorted(imported_closure(modules | imported) | outside):
        digest.update(f"{name}\0{_source_digest(name)}\0".encode())
    return digest.hexdigest()


# The most of an author's own modules one key follows (a plugin that imports a large project of
# its own: the rest of it counts by the versions of what is installed, as libraries do).
MAX_LOCAL_MODULES = 500


def local_modules(modules: Iterable[str]) -> frozenset[str]:
    """``modules`` outside the package, and the modules they import, transitively, from files of
    their author's own: not the package's, not the standard library's, not installed ones (under
    the interpreter's prefix or a site-packages folder). A plugin's helper module is code its
    stage runs: an edit there must change the key as an edit to the plugin does."""
    package = package_modules()
    found: set[str] = set()
    todo = [m for m in modules if m not in package]
    while todo and len(found) < MAX_LOCAL_MODULES:
        module = todo.pop()
        if module in found:
            continue
        found.add(module)
        path = _source_path(module)
        if path is None:
            continue
        for name in file_import_names(str(path), module):
            if name not in found and name not in package and name.split(".")[0] not in _STANDARD \
                    and _is_local(_source_path(name)):
                todo.append(name)
    return frozenset(found)


def plugin_digest(module: str) -> str:
    """Hash of a plugin module's own code: its file and its author's modules it imports
    (``local_modules``), not the package's or installed libraries' (those have versions). What a
    run records of each plugin, so scoring with edited plugin code later can say so."""
    digest = hashlib.blake2b(digest_size=16)
    for name in sorted(local_modules([module])):
        digest.update(f"{name}\0{_source_digest(name)}\0".encode())
    return digest.hexdigest()


def _is_local(path: Path | None) -> bool:
    """Whether a source file is its author's own (not under an installation's folders)."""
    return path is not None and not is_installed(path)


def is_installed(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` lies under the interpreter's own folders or a site-packages folder."""
    real = os.path.realpath(path)
    return any((real + os.sep).startswith(root) for root in _installed_roots())


@cache
def _installed_roots() -> tuple[str, ...]:
    import site
    import sysconfig

    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, *site.getsitepackages(),
             site.getusersitepackages(), *sysconfig.get_paths().values()}
    return tuple(os.path.realpath(root).rstrip(os.sep) + os.sep for root in roots if root)


def _source_path(module: str) -> Path | None:
    """A module's source file: the package's own, else a loaded module's, else where the import
    system would find it (its parent packages are imported for that, as ``module_fingerprint``
    does); None without a ``.py`` file."""
    path = package_modules().get(module)
    if path is not None:
        return path
    origin = getattr(sys.modules.get(module), "__file__", None)
    if origin is None:
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            return None
        origin = spec.origin if spec is not None else None
    return Path(origin) if origin and origin.endswith(".py") and os.path.isfile(origin) else None


def _source_digest(module: str) -> str:
    """Hash of a module's source file, read once per process for each state of the file
    ("unresolved" without one)."""
    stamp = file_stamp(_source_path(module))
    return _file_digest(stamp) if stamp else "unresolved"


@cache
def _file_digest(stamp: tuple[Any, ...]) -> str:
    path = stamp[0]
    try:
        return hashlib.blake2b(Path(path).read_bytes(), digest_size=16).hexdigest()
    except OSError:
        return "unresolved"


def defining_modules(*objects: Any) -> set[str]:
    """The modules whose code defines ``objects``, for ``code_fingerprint``: a class's or a
    function's own module; for a pydantic model, a dataclass (a registry entry) or a container,
    its class's and those of what it holds (a feature op in a stage's ``ops``, a model entry's
    format and rules); for any other object its class's. A ``"module:Class"`` string counts when
    it names a module of the package (estimators of other libraries are in the key by their
    versions). The standard library is left out."""
    found: set[str] = set()
    todo = list(objects)
    seen: set[int] = set()
    while todo:
        obj = todo.pop()
        if id(obj) in seen or obj is None or isinstance(obj, (bool, int, float, complex, bytes)):
            continue
        seen.add(id(obj))
        if isinstance(obj, ModuleName):
            found.add(obj.name)
        elif isinstance(obj, str):
            module = obj.partition(":")[0]
            if ":" in obj and module in package_modules():
                found.add(module)
        elif isinstance(obj, (type, types.FunctionType, types.BuiltinFunctionType, types.MethodType)):
            found.add(getattr(obj, "__module__", None) or "")
        elif isinstance(obj, functools.partial):
            todo.extend([obj.func, obj.args, obj.keywords])
        elif isinstance(obj, Mapping):
            todo.extend(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset)):
            todo.extend(obj)
        else:
            found.add(type(obj).__module__)
            fields = getattr(type(obj), "model_fields", None)           # a pydantic model
            if isinstance(fields, Mapping):
                todo.extend(getattr(obj, name, None) for name in fields)
            elif dataclasses.is_dataclass(obj):
                todo.extend(getattr(obj, f.name) for f in dataclasses.fields(obj))
    return {m for m in found if m and (m.split(".")[0] == PACKAGE or m.split(".")[0] not in _STANDARD)}


_STANDARD = frozenset(sys.stdlib_module_names) | {"builtins"}


def files_fingerprint(pattern: str) -> dict[str, str]:
    """SHA-256 of each file a path, glob or folder names (a folder: every file below it).

    SHA-256, not BLAKE2b: with the SHA extensions of current x86 and ARM CPUs (which OpenSSL
    uses) it hashes 2-2.5x faster, and a large input is hashed on every run, cached or not.
    Each file's identity (inode, size, mtime) as it was hashed is kept in this process, for
    ``changed_since_hashed``.
    """
    out = {}
    for file in _files_of(pattern):
        try:
            with open(file, "rb") as fh:
                before = file_identity(os.fstat(fh.fileno()))
                out[str(file)] = hashlib.file_digest(fh, "sha256").hexdigest()
            _hashed[str(file)] = (before, out[str(file)])
        except OSError:
            out[str(file)] = "missing"          # the stage itself will report it
    return out


# A file hashed for a cache key in this process -> (its identity then, its SHA-256).
_hashed: dict[str, tuple[tuple[int, ...], str]] = {}


def forget_hashed() -> None:
    """Start a run's record afresh: only files hashed for this run's keys are checked."""
    _hashed.clear()


def changed_since_hashed(pattern: str) -> list[str]:
    """The files of ``pattern`` whose bytes differ from when ``files_fingerprint`` hashed them
    in this process for a cache key (a nightly export rewritten or renamed into place while the
    run read it): a file whose identity changed is hashed again; one never hashed here (no key
    was made: ``--no-cache``, a stage on a Dask worker) is not checked."""
    changed = []
    for file in _files_of(pattern):
        seen = _hashed.get(str(file))
        if seen is None:
            continue
        try:
            with open(file, "rb") as fh:
                if file_identity(os.fstat(fh.fileno())) == seen[0]:
                    continue
                digest = hashlib.file_digest(fh, "sha256").hexdigest()
        except OSError:
            digest = "missing"
        if digest != seen[1]:
            changed.append(str(file))
    return changed


def _files_of(pattern: str) -> list[Path]:
    path = Path(pattern)
    if path.is_dir():
        return sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith("."))
    if any(ch in pattern for ch in "*?["):
        return sorted(Path(p) for p in glob(pattern))
    return [path]



def module_fingerprint(target: str) -> str:
    """Hash of the source file of the module in ``module.path[:attribute]`` ("unresolved" if none)."""
    module = target.partition(":")[0]
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return "unresolved"
    if spec is None or not spec.origin or not os.path.isfile(spec.origin):
        return "unresolved"
    return hashlib.blake2b(Path(spec.origin).read_bytes(), digest_size=16).hexdigest()
