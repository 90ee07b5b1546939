"""Which modules of the ``pipeline`` package a module imports, directly and transitively, read
from the source with ``ast`` (nothing is imported): the code a stage's cache key covers
(``pipeline.core.fingerprints.code_fingerprint``).

An edge is any import a module runs: at the top, inside a function (a lazy import is still
code the module calls), ``importlib.import_module("pipeline.x")``, and any string that names a
module of the package (``"pipeline.x"``, ``"pipeline.x:Name"``: the lazy names of a package's
``__init__``, a registry's class paths). ``from pipeline.a import b`` is an edge to
``pipeline.a.b`` where that is a module, else to ``pipeline.a``. Not edges: imports under
``if TYPE_CHECKING:`` (annotations only, never run) and the parent packages of an imported
module: importing ``pipeline.a.b`` runs ``pipeline/a/__init__.py``, but what of it a module
uses, it imports by name (as grimp and import-linter count imports too).

Each file is parsed once per process, and only when a closure reaches it.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any

PACKAGE = "pipeline"
PACKAGE_DIR = Path(__file__).resolve().parents[1]
# "pipeline.a.b" or 'pipeline.a.b:Name' in quotes: a string that names a module of the package.
_MODULE_STRING = re.compile(rf"""(["'])({PACKAGE}(?:\.\w+)+(?::[\w.]+)?)\1""")


@cache
def package_modules() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its ``__init__.py``)."""
    modules = {}
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        parts = path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if all(part.isidentifier() for part in parts):
            modules[".".join(parts)] = path
    return modules


@cache
def direct_imports(module: str) -> frozenset[str]:
    """The modules of the package that ``module`` imports itself (see the module docstring)."""
    path = package_modules()[module]
    return _package_imports(path.read_bytes(), str(path), module, is_package=path.name == "__init__.py")


@cache
def file_imports(path: str) -> frozenset[str]:
    """The modules of the package that a source file outside it imports (a plugin's module, a
    ``python`` stage's); nothing for a file that cannot be read or parsed."""
    try:
        return _package_imports(Path(path).read_bytes(), path, None, is_package=False)
    except (OSError, SyntaxError, ValueError):
        return frozenset()


def _package_imports(source: bytes, filename: str, module: str | None, *, is_package: bool) -> frozenset[str]:
    modules = package_modules()
    named: list[str] = []
    for base, names in _imported(ast.parse(source, filename=filename).body, module, is_package):
        if not names:
            named.append(base)
        else:                             # ``from a import b``: a.b where it is a module, else a
            named += [f"{base}.{name}" if f"{base}.{name}" in modules else base for name in names]
    named += [match.group(2).partition(":")[0] for match in _MODULE_STRING.finditer(source.decode("utf-8"))]
    return frozenset(name for name in named if name in modules and name != module)


@cache
def file_import_names(path: str, module: str | None = None) -> frozenset[str]:
    """Every module name a source file's run-time imports name, of any package (``from a import
    b``: ``a.b`` and ``a``, which may be a module or hold the name): what a plugin's module uses
    of its author's own files; nothing for a file that cannot be read or parsed."""
    try:
        body = ast.parse(Path(path).read_bytes(), filename=path).body
    except (OSError, SyntaxError, ValueError):
        return frozenset()
    named: set[str] = set()
    for base, names in _imported(body, module, Path(path).name == "__init__.py"):
        named.add(base)
        named.update(f"{base}.{name}" for name in names if name != "*")
    return frozenset(named)


def _imported(body: list[ast.stmt], module: str | None, is_package: bool) -> Iterable[tuple[str, list[str]]]:
    """``(module, names)`` of each run-time import of ``body``: ``import a.b`` as ``("a.b", [])``,
    ``from a import b, c`` as ``("a", ["b", "c"])`` (relative ones resolved against ``module``;
    one that cannot be is left out)."""
    for node in _run_time_imports(body):
        if isinstance(node, ast.Import):
            yield from ((alias.name, []) for alias in node.names)
        else:
            base = _absolute(node, module, is_package)
            if base is not None:
                yield base, [alias.name for alias in node.names]


def imported_closure(modules: Iterable[str]) -> frozenset[str]:
    """``modules`` (those of the package) and every module of the package they import, transitively."""
    known = package_modules()
    return frozenset().union(*(_closure(m) for m in modules if m in known))


@cache
def _closure(module: str) -> frozenset[str]:
    seen = {module}
    todo = [module]
    while todo:
        for name in direct_imports(todo.pop()):
            if name not in seen:
                seen.add(name)
                todo.append(name)
    return frozenset(seen)


def _run_time_imports(body: list[ast.stmt]) -> Iterable[ast.Import | ast.ImportFrom]:
    """The import statements of ``body`` and of every block in it (functions, classes, ``try``,
    ``if``...), but those under ``if TYPE_CHECKING:``. Only statements are walked: an import is
    one, and walking every expression of a module costs as much as parsing it."""
    todo = list(reversed(body))
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
            continue
        blocks: list[list[Any]] = []
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            blocks = [node.orelse]
        else:
            blocks = [getattr(node, name, None) or [] for name in ("body", "orelse", "finalbody", "handlers", "cases")]
        for block in blocks:
            for child in reversed(block):
                if isinstance(child, (ast.excepthandler, ast.match_case)):
                    todo.extend(reversed(child.body))
                elif isinstance(child, ast.stmt):
                    todo.append(child)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _absolute(node: ast.ImportFrom, module: str | None, is_package: bool) -> str | None:
    """The module a ``from ... import`` names, relative imports resolved against ``module`` (None:
    a file outside the package, whose relative imports are not the package's)."""
    if not node.level:
        return node.module
    if module is None:
        return None
    parts = module.split(".") if is_package else module.split(".")[:-1]
    if node.level > 1:
        parts = parts[:-(node.level - 1)]
    if not parts:
        return None
    return ".".join([*parts, node.module] if node.module else parts)
