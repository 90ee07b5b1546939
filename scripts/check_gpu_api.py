#!/usr/bin/env python3
"""GPU-API conformance check: does our GPU code bind to the installed RAPIDS, without a GPU?

The RAPIDS wheels install and import on a machine with no NVIDIA driver; only data operations
need one. So this script, run in a virtualenv with a GPU extra (``make check-gpu``), checks
everything that can be checked before a GPU is involved. Every list of calls it checks is read
from the code (``ast``), never kept by hand, and it covers every module of ``pipeline/`` (and
``scripts/gpu_kit/`` when there is one):

1. Direct calls: every call or attribute reference rooted at an import of cuDF, CuPy, cuML,
   Dask-CUDA, Dask-cuDF, RMM, RAFT-Dask or XGBoost, resolved on the installed library and bound
   to its signature with placeholder arguments (``**options`` built by a helper of the module
   are expanded to their keys).
2. Calls on backend values: shared code reaches cuDF and CuPy only through the backend. A flow
   scan follows ``backend.frame`` / ``backend.array`` (cudf / cupy, read from the GPU backend's
   class) and the frames, series and arrays the backend's methods return (typed by the GPU
   backend's annotations) through each function, including ``is_partitioned`` branches and
   ``map_partitions`` callbacks, where they are Dask-cuDF collections. Each method, operator
   and attribute used on them is bound on the installed type; calls whose arguments are
   constants are also made for real on an empty ``cudf.DataFrame`` (it needs no GPU).
3. The DLPack hand-off: what ``torch.from_dlpack`` passes to ``__dlpack__`` (found by calling
   torch on a recording stand-in) is bound and then passed for real to
   ``cupy.ndarray.__dlpack__`` on an array with no memory, which parses its arguments before it
   stops at the driver.
4. Dask readers under the cudf Dask backend, subclasses of library classes (``DataIter``,
   ``TrainingCallback``: ``super().__init__`` and overrides), ``"module:Class"`` strings (the
   model registry) and distribution names written in the code.
5. Every registry model, for every task it serves (a regressor where the entry has one):
   parameters translated for each device bind to the estimator's constructor, the estimator
   constructs, ``get_params()`` returns what was passed, ``fit`` and the scoring method
   (``predict_proba``, or ``predict`` for regression) bind; the cuml.dask estimators are
   constructed on a local cluster.
6. ``get_backend("gpu")`` loads on this CPU-only machine.

It prints one line per check, a coverage line per module, ``N call sites checked in M modules``
and ``N passed, M failed``; the exit status is 1 if anything failed, 2 if RAPIDS is not
installed here. Nothing at module level imports RAPIDS, so the scanners and the bind checker
are unit-tested in the CPU-only dev environment.
"""

from __future__ import annotations

import argparse
import ast
import collections
import contextlib
import difflib
import importlib
import inspect
import re
import sys
import textwrap
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The scan walks each module's tree (and each function's statements) many times over; a walk is
# listed once per node object and reused, which makes the whole-package scan several times faster.
_WALKS: collections.OrderedDict[int, tuple[ast.AST, list[ast.AST]]] = collections.OrderedDict()
_WALKS_KEPT = 4096


def walk(node: ast.AST) -> list[ast.AST]:
    """``ast.walk(node)`` as a list, from a cache of recent walks (keyed by the node object)."""
    hit = _WALKS.get(id(node))
    if hit is not None and hit[0] is node:
        _WALKS.move_to_end(id(node))
        return hit[1]
    nodes = list(ast.walk(node))
    _WALKS[id(node)] = (node, nodes)
    if len(_WALKS) > _WALKS_KEPT:
        _WALKS.popitem(last=False)
    return nodes

_PARSED: dict[tuple[str, str], ast.Module] = {}


def parse(source: str, filename: str = "<string>") -> ast.Module:
    """``ast.parse`` of a module's source, once per (source, filename): the scan's passes read the
    same files, and one tree per file lets ``walk`` reuse its walks. Callers do not modify it."""
    key = (filename, source)
    tree = _PARSED.get(key)
    if tree is None:
        tree = _PARSED[key] = ast.parse(source, filename=filename)
    return tree


REPO = Path(__file__).resolve().parents[1]
GPU_BACKEND = REPO / "pipeline" / "backends" / "gpu.py"
# Where the code that calls GPU libraries lives: the package, and the GPU kit's scripts if present.
SCAN_ROOTS = (REPO / "pipeline", REPO / "scripts" / "gpu_kit")

# Top-level modules whose API this check verifies.
GPU_MODULES = ("cudf", "cupy", "cuml", "dask_cuda", "dask_cudf", "rmm", "raft_dask")
# Also checked against the installed build: the GPU extras install XGBoost's CUDA build, and
# nvidia-ml-py's pynvml is what GPU detection and usage sampling read the driver through.
OTHER_MODULES = ("xgboost", "pynvml")
LIBRARY_MODULES = (*GPU_MODULES, *OTHER_MODULES)
# Top-level packages whose functions the flow scan follows across modules.
PACKAGE_ROOTS = ("pipeline",)


# --------------------------------------------------------------------------- 1. direct library calls (static scan)
@dataclass(frozen=True)
class CallSite:
    """One use of a GPU-library name in the source: a call, or a bare attribute reference."""

    path: str
    line: int
    dotted: str                      # alias expanded: "cupy.asnumpy", not "cp.asnumpy"
    source: str                      # as written: "cp.asnumpy"
    is_call: bool
    n_args: int = 0                  # positional arguments before any *starred one
    keywords: tuple[str, ...] = ()
    star_args: bool = False          # the call passes *args
    star_kwargs: bool = False        # the call passes **kwargs

    def describe(self) -> str:
        if not self.is_call:
            return self.dotted
        parts = [f"<{self.n_args} arg{'s' if self.n_args != 1 else ''}>"] if self.n_args else []
        parts += ["*..."] if self.star_args else []
        parts += [f"{k}=" for k in self.keywords]
        parts += ["**..."] if self.star_kwargs else []
        return f"{self.dotted}({', '.join(parts)})"


def gpu_aliases(tree: ast.AST, modules: Sequence[str] = GPU_MODULES) -> dict[str, str]:
    """Local names bound by ``import``/``from ... import`` of a GPU module → their dotted target.

    ``import cupy as cp`` → {"cp": "cupy"}; ``import cuml.ensemble`` → {"cuml": "cuml"};
    ``from dask_cuda import LocalCUDACluster`` → {"LocalCUDACluster": "dask_cuda.LocalCUDACluster"}.
    Imports anywhere in the module count (lazy imports inside functions included).
    """
    aliases: dict[str, str] = {}
    for node in walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] not in modules:
                    continue
                if alias.asname:
                    aliases[alias.asname] = alias.name
                else:
                    top = alias.name.split(".")[0]
                    aliases[top] = top
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] not in modules:
                continue
            for alias in node.names:
                if alias.name != "*":
                    aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return aliases


def _chain(node: ast.AST) -> list[str] | None:
    """``a.b.c`` as ["a", "b", "c"]; None if the chain is not rooted at a plain name."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return parts[::-1]



def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(REPO))
    except ValueError:
        return str(path)


def scan_source(source: str, path: str = "<string>", modules: Sequence[str] = LIBRARY_MODULES) -> list[CallSite]:
    """Every call and attribute reference rooted at a library alias, in source order.

    Only maximal chains count: ``cp.cuda.runtime.memGetInfo()`` is one call site, not four.
    A bare alias (``frame = cudf``) is not a site: importing the module checks it. ``**options``
    adds the keys the code gives ``options`` (a local dict, or a dict a function of the module
    returns); the call is bound partially only where some keys stay unknown.
    """
    tree = parse(source, filename=path)
    aliases = gpu_aliases(tree, modules)
    parents: dict[ast.AST, ast.AST] = {}
    for parent in walk(tree):
        for child in ast.iter_child_nodes(parent):
            parents[child] = parent

    sites: list[CallSite] = []
    for node in walk(tree):
        if not isinstance(node, (ast.Attribute, ast.Name)):
            continue
        parent = parents.get(node)
        if isinstance(parent, ast.Attribute) and parent.value is node:
            continue                                   # part of a longer chain
        parts = _chain(node)
        if not parts or parts[0] not in aliases:
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            continue
        if isinstance(parent, ast.ClassDef) and node in parent.bases:
            continue                                   # a base class: checked as a subclass
        dotted = ".".join([aliases[parts[0]], *parts[1:]])
        written = ".".join(parts)
        if isinstance(parent, ast.Call) and parent.func is node:
            n_args, star_args, keywords, star_kwargs = _call_shape(parent)
            expanded: list[str] = list(keywords)
            if star_kwargs:
                unknown = False
                for keyword in (k for k in parent.keywords if k.arg is None):
                    keys, more = star_kwargs_keys(keyword.value, parent, tree, parents)
                    expanded += sorted(k for k in keys if k not in expanded)
                    unknown = unknown or more
                star_kwargs = unknown
            sites.append(CallSite(
                path=path, line=node.lineno, dotted=dotted, source=written, is_call=True,
                n_args=n_args, keywords=tuple(expanded), star_args=star_args, star_kwargs=star_kwargs,
            ))
        elif isinstance(node, ast.Attribute):
            sites.append(CallSite(path=path, line=node.lineno, dotted=dotted, source=written, is_call=False))
    sites.sort(key=lambda s: (s.line, s.dotted))
    return sites


def scan_file(path: Path, modules: Sequence[str] = LIBRARY_MODULES) -> list[CallSite]:
    return scan_source(path.read_text(encoding="utf-8"), _shown(path), modules)


def package_files(roots: Sequence[Path] = SCAN_ROOTS) -> list[Path]:
    """Every Python file of the scanned trees (a root that does not exist adds nothing)."""
    return sorted(p for root in roots if root.is_dir() for p in root.rglob("*.py"))


def imports_library(path: Path, modules: Sequence[str] = LIBRARY_MODULES) -> bool:
    try:
        tree = parse(path.read_text(encoding="utf-8"), filename=str(path))
    except SyntaxError:
        return False
    return bool(gpu_aliases(tree, modules))


def default_scan_targets(roots: Sequence[Path] = SCAN_ROOTS) -> list[Path]:
    """The GPU backend, plus every other scanned module that imports a GPU library or XGBoost
    (modules added later are picked up without editing this script)."""
    targets = [GPU_BACKEND]
    for path in package_files(roots):
        if path.resolve() != GPU_BACKEND.resolve() and imports_library(path):
            targets.append(path)
    return targets


@dataclass
class ModuleScan:
    """Everything found in one module."""

    path: str
    imports_library: bool = False
    direct: list[CallSite] = field(default_factory=list)         # rooted at a library import
    via_backend: list[CallSite] = field(default_factory=list)    # through backend.frame / backend.array
    members: list[MemberSite] = field(default_factory=list)      # on frames, series, arrays, library objects
    dlpack: list[DlpackSite] = field(default_factory=list)
    dask_reads: list[DaskReadSite] = field(default_factory=list)
    subclasses: list[SubclassSite] = field(default_factory=list)
    class_paths: list[ClassPathSite] = field(default_factory=list)
    distributions: list[ClassPathSite] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        return {"direct": len(self.direct), "via backend": len(self.via_backend), "on objects": len(self.members),
                "dlpack": len(self.dlpack), "dask readers": len(self.dask_reads),
                "subclasses": len(self.subclasses), "strings": len(self.class_paths) + len(self.distributions)}

    @property
    def total(self) -> int:
        return sum(self.counts().values())


def _module_name(path: Path) -> str:
    """``pipeline/backends/contract.py`` -> ``pipeline.backends.contract`` (a package's ``__init__`` -> the package)."""
    parts = list(Path(_shown(path)).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _module_scan(path: Path, source: str, flow: FlowScanner) -> ModuleScan:
    shown = _shown(path)
    tree = flow.tree
    aliases = gpu_aliases(tree, LIBRARY_MODULES)
    direct = scan_source(source, shown)
    seen = {(s.line, s.dotted) for s in direct}
    return ModuleScan(
        path=shown, imports_library=bool(aliases), direct=direct,
        via_backend=[c for c in flow.calls if (c.line, c.dotted) not in seen],
        members=flow.members, dlpack=flow.dlpack, dask_reads=flow.dask_reads,
        subclasses=scan_subclasses(tree, shown, aliases),
        class_paths=scan_class_paths(tree, shown, LIBRARY_MODULES),
        distributions=scan_distribution_names(tree, shown, (*LIBRARY_MODULES, "torch"))
        if "backends" in Path(shown).parts else [],
    )


def _callee(flows: Mapping[str, FlowScanner], module: str, name: str) -> tuple[FlowScanner, tuple[None, str]] | None:
    """The scanner and key of a package function, following re-exports (``pipeline.backends``)."""
    for _ in range(4):
        flow = flows.get(module)
        if flow is None:
            return None
        if (None, name) in flow.functions:
            return flow, (None, name)
        if name not in flow.imported:
            return None
        module, name = flow.imported[name]
    return None


def scan_package(paths: Sequence[Path] | None = None, facts: GpuFacts | None = None, *, rounds: int = 4) -> list[ModuleScan]:
    """Every kind of site in every file; device values passed to a function of another module
    of the package type its parameters there (``row_major_matrix(cp, ...)``)."""
    facts = facts or read_gpu_facts()
    dask_only = dask_only_members()
    files = list(paths or package_files())
    sources = {p: p.read_text(encoding="utf-8") for p in files}
    flows = {p: scan_flow_source(sources[p], _shown(p), facts, dask_only=dask_only) for p in files}
    by_module = {_module_name(p): flow for p, flow in flows.items()}
    for _ in range(rounds):
        changed: dict[int, FlowScanner] = {}
        for flow in flows.values():
            for (module, name), args, kwargs in flow.external:
                target = _callee(by_module, module, name)
                if target is not None and target[0].absorb(target[1], args, dict(kwargs)):
                    changed[id(target[0])] = target[0]
        if not changed:
            break
        for flow in changed.values():
            flow.run()
    return [_module_scan(p, sources[p], flows[p]) for p in files]


def scan_module(path: Path, facts: GpuFacts) -> ModuleScan:
    """One file on its own (calls from other modules do not type its parameters)."""
    return scan_package([path], facts)[0]


# --------------------------------------------------------------------------- 1b. calls on backend values
# Shared code never imports a GPU library: it reaches cuDF and CuPy through the backend
# (``backend.frame.concat``, ``backend.read(...)`` and the frames it returns). The flow scan
# below follows those values through each function of every module, so the calls made on them
# are found in the code rather than kept in a table. What it knows about the GPU backend (which
# attribute is which module, what each method returns) it reads from the backend's own source.

BACKEND = "<backend>"            # kind of a Backend object (the GPU one, for this check)
MODULE = "module:"               # kind prefix: a module reached through the backend (module:cudf)
ATTR = "->"                      # kind "T->attr": the value of T.attr, typed when checked (accessors, indexers)

# Names that hold frames, series or device arrays by this code base's convention. Used only
# in functions that deal with a backend and only where the flow gives the name no kind; a
# receiver typed this way is "guessed": its member must exist and bind on at least one of the
# in-memory and partitioned (Dask) types, not on each.
RECEIVER_NAMES = {"frame": "frame", "part": "frame", "df": "frame", "frames": "frames",
                  "series": "series", "array": "array", "matrix": "array"}
# Results of member calls, by pandas semantics (which cuDF and Dask-cuDF follow): reductions
# give a scalar on a Series and a Series on a DataFrame; these give something else than the
# receiver's kind; every other method returns the receiver's kind.
REDUCTIONS = frozenset({"sum", "mean", "median", "median_approximate", "std", "var", "min", "max", "any",
                        "all", "count", "nunique", "prod", "idxmin", "idxmax"})
TO_SERIES = frozenset({"value_counts"})
TO_ARRAY = frozenset({"to_cupy", "values"})
UNTRACKED_RESULTS = frozenset({"to_pandas", "to_numpy", "to_arrow", "tolist", "to_list", "item", "unique",
                               "compute", "to_parquet", "to_csv", "random_split", "columns", "index",
                               "dtype", "dtypes", "shape", "npartitions", "ndim", "size", "name", "nbytes",
                               "strides", "flags", "data", "ptr", "items", "keys"})
# What ``groupby`` returns, by the receiver's role and whether it is a Dask collection: members
# used on a group-by are checked on these (a frame's ``size`` is a property, a group-by's a method);
# what those members return is not followed.
GROUP_BY_TYPES: dict[tuple[str, bool], str] = {
    ("frame", False): "cudf.core.groupby.groupby.DataFrameGroupBy",
    ("series", False): "cudf.core.groupby.groupby.SeriesGroupBy",
    ("frame", True): "dask_cudf._expr.groupby.GroupBy",
    ("series", True): "dask_cudf._expr.groupby.SeriesGroupBy",
}
# Attributes whose value has its own type (resolved in the installed library when checked).
ACCESSOR_ATTRS = frozenset({"cat", "str", "dt", "list", "struct", "iloc", "loc"})
# Types of attributes the installed library cannot tell (compiled descriptors without annotations).
ATTRIBUTE_TYPES: dict[str, str] = {"cupy.ndarray->data": "cupy.cuda.MemoryPointer"}
_BINOPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "truediv", ast.FloorDiv: "floordiv",
           ast.Mod: "mod", ast.Pow: "pow", ast.BitAnd: "and", ast.BitOr: "or", ast.BitXor: "xor"}
_CMPOPS = {ast.Eq: "__eq__", ast.NotEq: "__ne__", ast.Lt: "__lt__", ast.LtE: "__le__", ast.Gt: "__gt__",
           ast.GtE: "__ge__"}
_UNARY = {ast.Invert: "__invert__", ast.USub: "__neg__"}


@dataclass(frozen=True)
class Kinds:
    """What a value may be: type paths ("cudf.DataFrame"), and whether the flow proved it."""

    types: frozenset[str] = frozenset()
    certain: bool = True

    def __bool__(self) -> bool:
        return bool(self.types)

    def union(self, other: Kinds) -> Kinds:
        if not self:
            return other
        if not other:
            return self
        return Kinds(self.types | other.types, self.certain and other.certain)

    def map(self, fn: Any) -> Kinds:
        out = frozenset(t for t in (fn(k) for k in self.types) if t)
        return Kinds(out, self.certain) if out else NOTHING


NOTHING = Kinds()


@dataclass(frozen=True)
class MemberSite:
    """A member used on a value of a GPU-library type: a method call, an operator, an attribute."""

    path: str
    line: int
    receivers: tuple[str, ...]       # the types the receiver may have
    certain: bool                    # False: typed by its name; it must work on one of them
    member: str                      # "isna", "__getitem__", "__eq__", "cat", "__len__"
    written: str                     # the expression as written (shortened)
    is_call: bool = True
    n_args: int = 0
    keywords: tuple[str, ...] = ()
    star_args: bool = False
    star_kwargs: bool = False
    literal: tuple[tuple[str, ...], tuple[tuple[str, str], ...]] | None = None   # constant arguments (source), to call for real
    guarded: bool = False            # under ``hasattr(x, member)``: optional, not required

    def describe(self) -> str:
        if not self.is_call:
            return f".{self.member}"
        parts = [f"<{self.n_args} arg{'s' if self.n_args != 1 else ''}>"] if self.n_args else []
        parts += ["*..."] if self.star_args else []
        parts += [f"{k}=" for k in self.keywords]
        parts += ["**..."] if self.star_kwargs else []
        return f".{self.member}({', '.join(parts)})"


@dataclass(frozen=True)
class DlpackSite:
    """``torch.from_dlpack(x, ...)`` on a device array: torch then calls ``x.__dlpack__``."""

    path: str
    line: int
    producer: str                    # the array type
    keywords: tuple[str, ...]


@dataclass(frozen=True)
class DaskReadSite:
    """``dd.read_*`` under ``dask.config.set({"dataframe.backend": backend.dask_backend})``:
    Dask dispatches it to the backend's reader (Dask-cuDF's on the GPU)."""

    path: str
    line: int
    function: str                    # "read_csv"
    n_args: int
    keywords: tuple[str, ...]


@dataclass
class GpuFacts:
    """What the GPU backend's source says: its modules, its Dask backend, what its methods return."""

    module_attrs: dict[str, str]                   # backend attribute -> module ("frame" -> "cudf")
    method_returns: dict[str, Kinds]               # backend method -> kinds of its result
    dask_backend: str | None                       # "cudf"
    backend_classes: set[str]                      # classes whose ``self`` is the GPU backend
    other_backend_classes: set[str]                # backend classes of other devices (not scanned)

    @property
    def frame_module(self) -> str:
        return self.module_attrs.get("frame", "cudf")

    @property
    def array_module(self) -> str:
        return self.module_attrs.get("array", "cupy")

    @property
    def dask_module(self) -> str | None:
        return f"dask_{self.dask_backend}" if self.dask_backend else None

    def type_of(self, role: str, dask: bool = False) -> str | None:
        """The type path of a frame / series / array on the GPU (a Dask collection with ``dask``)."""
        if role == "array":
            return None if dask else f"{self.array_module}.ndarray"
        name = {"frame": "DataFrame", "series": "Series"}[role]
        if dask:
            return f"{self.dask_module}.{name}" if self.dask_module else None
        return f"{self.frame_module}.{name}"

    def role_of(self, type_path: str) -> tuple[str, bool] | None:
        for role in ("frame", "series", "array"):
            for dask in (False, True):
                if self.type_of(role, dask) == type_path:
                    return role, dask
        return None

    def as_dask(self, type_path: str) -> str | None:
        role = self.role_of(type_path)
        return self.type_of(role[0], True) if role else None

    def in_memory(self, type_path: str) -> str | None:
        role = self.role_of(type_path)
        return self.type_of(role[0], False) if role else None

    def seed(self, role: str) -> Kinds:
        """A guessed receiver: in memory or partitioned."""
        types = {self.type_of(role), self.type_of(role, True)}
        return Kinds(frozenset(t for t in types if t), certain=False)



def _annotation_types(node: ast.AST | None, aliases: Mapping[str, str]) -> frozenset[str]:
    """Type paths of GPU-library types named in an annotation (``cudf.DataFrame | None``)."""
    if node is None:
        return frozenset()
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:
            node = ast.parse(node.value, mode="eval").body
        except SyntaxError:
            return frozenset()
    found = set()
    inner = {id(sub.value) for sub in walk(node) if isinstance(sub, ast.Attribute)}
    for sub in walk(node):
        if isinstance(sub, (ast.Attribute, ast.Name)) and id(sub) not in inner:     # whole chains only
            parts = _chain(sub)
            if parts and parts[0] in aliases and len(parts) > 1:
                found.add(".".join([aliases[parts[0]], *parts[1:]]))
            elif parts and len(parts) == 1 and parts[0] in aliases and "." in aliases[parts[0]]:
                found.add(aliases[parts[0]])
    return frozenset(found)


def read_gpu_facts(backends_dir: Path = REPO / "pipeline" / "backends") -> GpuFacts:
    """Read the GPU backend class(es) from the source: the class attributes bound to GPU modules,
    ``dask_backend`` and the annotated results of its methods; then the base class's methods
    (``read``, ``asarray``, ...) are typed by following their bodies."""
    module_attrs: dict[str, str] = {}
    returns: dict[str, Kinds] = {}
    dask_backend = None
    gpu_classes: set[str] = set()
    other_classes: set[str] = set()
    base_names: set[str] = set()
    for path in sorted(backends_dir.glob("*.py")):
        tree = parse(path.read_text(encoding="utf-8"), filename=str(path))
        aliases = gpu_aliases(tree)
        for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
            attrs = {t.id: stmt.value for stmt in cls.body if isinstance(stmt, ast.Assign)
                     for t in stmt.targets if isinstance(t, ast.Name)}
            frame = attrs.get("frame")
            if not isinstance(frame, ast.Name):
                continue
            if frame.id not in aliases:
                other_classes.add(cls.name)
                continue
            gpu_classes.add(cls.name)
            base_names |= {b.id for b in cls.bases if isinstance(b, ast.Name)}
            for name, value in attrs.items():
                if isinstance(value, ast.Name) and value.id in aliases:
                    module_attrs[name] = aliases[value.id]
                elif name == "dask_backend" and isinstance(value, ast.Constant):
                    dask_backend = str(value.value)
            for fn in (n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
                types = _annotation_types(fn.returns, aliases)
                if types:
                    returns[fn.name] = Kinds(types)
    facts = GpuFacts(module_attrs, returns, dask_backend, gpu_classes | base_names, other_classes)
    # The base class's methods: typed by their bodies, with ``self`` as the GPU backend.
    for _ in range(3):
        for path in sorted(backends_dir.glob("*.py")):
            tree = parse(path.read_text(encoding="utf-8"), filename=str(path))
            flow = FlowScanner(facts, tree, str(path), only_classes=base_names)
            flow.run()
            for (cls, name), kinds in flow.function_returns.items():
                if cls in base_names and kinds and name not in returns:
                    facts.method_returns[name] = kinds
    return facts


@dataclass
class _Function:
    node: ast.FunctionDef | ast.AsyncFunctionDef
    cls: str | None
    params: list[str]
    backend_aware: bool
    bound: bool = False              # a method called on an instance or class (its first parameter is implied)


class FlowScanner:
    """Follows backend values through the functions of one module and records what is done to them."""

    def __init__(self, facts: GpuFacts, tree: ast.Module, path: str, *,
                 library_aliases: Mapping[str, str] | None = None, only_classes: set[str] | None = None,
                 dask_only: frozenset[str] | None = None) -> None:
        self.facts = facts
        self.tree = tree
        self.path = path
        self.aliases = dict(library_aliases or {})
        self.only_classes = only_classes
        self.dask_only = dask_only if dask_only is not None else dask_only_members()
        self.numpy_names = {a.asname or a.name for n in walk(tree) if isinstance(n, ast.Import)
                            for a in n.names if a.name == "numpy"}
        self.torch_names = {a.asname or a.name for n in walk(tree) if isinstance(n, ast.Import)
                            for a in n.names if a.name == "torch"}
        # Aliases of other imported modules (pandas, NumPy, ...): what they return is on the host.
        self.host_modules = {(a.asname or a.name).split(".")[0] for n in walk(tree) if isinstance(n, ast.Import)
                             for a in n.names if a.name.split(".")[0] not in LIBRARY_MODULES}
        self.dask_df_names = {a.asname or a.name.split(".")[-1] for n in walk(tree) if isinstance(n, ast.Import)
                              for a in n.names if a.name == "dask.dataframe" and a.asname} | {
                              a.asname or a.name for n in walk(tree) if isinstance(n, ast.ImportFrom)
                              and n.module == "dask" for a in n.names if a.name == "dataframe"}
        # Names imported from other modules of the package -> (module, name), and the calls made
        # to them with device values (``scan_package`` hands those to the callee's module).
        self.imported: dict[str, tuple[str, str]] = {
            a.asname or a.name: (n.module, a.name) for n in walk(tree) if isinstance(n, ast.ImportFrom)
            and n.level == 0 and n.module and n.module.split(".")[0] in PACKAGE_ROOTS for a in n.names}
        self.external: list[tuple[tuple[str, str], tuple[Kinds, ...], tuple[tuple[str, Kinds], ...]]] = []
        self.functions: dict[tuple[str | None, str], _Function] = {}
        self.param_kinds: dict[tuple[str | None, str], dict[str, Kinds]] = {}
        self.function_returns: dict[tuple[str | None, str], Kinds] = {}
        self.members: list[MemberSite] = []
        self.calls: list[CallSite] = []
        self.dlpack: list[DlpackSite] = []
        self.dask_reads: list[DaskReadSite] = []
        self.recording = True
        self._collect_functions()

    # ---------------------------------------------------------------- structure
    def _collect_functions(self) -> None:
        def add(node: Any, cls: str | None) -> None:
            args = node.args
            params = [a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]]
            aware = any(p == "backend" or self._is_backend_annotation(a.annotation)
                        for p, a in zip(params, [*args.posonlyargs, *args.args, *args.kwonlyargs])) or any(
                (isinstance(n, ast.Name) and n.id == "backend") or (isinstance(n, ast.Attribute) and n.attr == "backend")
                for n in walk(node)) or cls in self.facts.backend_classes
            static = any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in node.decorator_list)
            self.functions[(cls, node.name)] = _Function(node, cls, params, aware, bound=cls is not None and not static)

        for node in self.tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                add(node, None)
            elif isinstance(node, ast.ClassDef):
                if node.name in self.facts.other_backend_classes:
                    continue
                if self.only_classes is not None and node.name not in self.only_classes:
                    continue
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        add(item, node.name)
        if self.only_classes is not None:
            self.functions = {k: v for k, v in self.functions.items() if k[0] in self.only_classes}

    @staticmethod
    def _is_backend_annotation(node: ast.AST | None) -> bool:
        return node is not None and any(isinstance(n, ast.Name) and n.id == "Backend" for n in walk(node))

    def run(self, rounds: int = 4) -> FlowScanner:
        """Analyse every function, feeding argument kinds to same-module callees, until stable."""
        for _ in range(rounds):
            before = ({k: dict(v) for k, v in self.param_kinds.items()}, dict(self.function_returns))
            self.members, self.calls, self.dlpack, self.dask_reads, self.external = [], [], [], [], []
            for key, fn in self.functions.items():
                self._analyse(key, fn)
            if before == (self.param_kinds, self.function_returns):
                break
        self.members = sorted(set(self.members), key=lambda s: (s.line, s.member, s.receivers))
        self.calls = sorted(set(self.calls), key=lambda s: (s.line, s.dotted))
        self.dlpack = sorted(set(self.dlpack), key=lambda s: s.line)
        self.dask_reads = sorted(set(self.dask_reads), key=lambda s: s.line)
        return self

    def absorb(self, key: tuple[str | None, str], args: Sequence[Kinds], kwargs: Mapping[str, Kinds]) -> bool:
        """Argument kinds from a call in another module; True if they add anything."""
        fn = self.functions.get(key)
        if fn is None:
            return False
        found = self.param_kinds.setdefault(key, {})
        changed = False
        for param, kinds in [*zip(fn.params, args), *kwargs.items()]:
            if not _passes(kinds) or param not in fn.params:
                continue
            merged = found[param].union(kinds) if param in found else kinds
            if merged != found.get(param):
                found[param], changed = merged, True
        return changed

    # ---------------------------------------------------------------- one function
    def _analyse(self, key: tuple[str | None, str], fn: _Function) -> None:
        node = fn.node
        env: dict[str, Kinds] = {}
        aliases = self.aliases
        all_args = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
        called = self.param_kinds.get(key, {})
        for i, arg in enumerate(all_args):
            annotated = _annotation_types(arg.annotation, aliases)
            if i == 0 and fn.bound:
                if fn.cls in self.facts.backend_classes:
                    env[arg.arg] = Kinds(frozenset({BACKEND}))
                continue
            if annotated:
                env[arg.arg] = Kinds(annotated)
            elif called.get(arg.arg):
                env[arg.arg] = called[arg.arg]
            elif arg.arg == "backend" or self._is_backend_annotation(arg.annotation):
                env[arg.arg] = Kinds(frozenset({BACKEND}))
        state = _FunctionState(self, fn, aliases, self._dask_receivers(node.body))
        state.block(node.body, env)
        self.function_returns[key] = state.returns

    def _dask_receivers(self, body: list[ast.stmt]) -> set[str]:
        """Names used with a member only Dask collections have (``_meta``, ``map_partitions``) outside
        ``is_partitioned`` branches: those names hold Dask collections in this function."""
        names: set[str] = set()
        skipped: set[int] = set()
        for stmt in body:
            for sub in walk(stmt):
                # Inside ``is_partitioned`` branches the guard types the name; under ``hasattr`` the
                # member is optional: neither says what the name holds elsewhere.
                if isinstance(sub, (ast.If, ast.IfExp)) and (
                        _partition_guard(sub.test, {}) is not None or _hasattr_guard(sub.test) is not None):
                    branch = sub.body if isinstance(sub.body, list) else [sub.body]
                    skipped |= {id(n) for part in branch for n in walk(part)}
        for stmt in body:
            for sub in walk(stmt):
                if (id(sub) not in skipped and isinstance(sub, ast.Attribute) and sub.attr in self.dask_only
                        and isinstance(sub.value, ast.Name)):
                    names.add(sub.value.id)
        return names

    # ---------------------------------------------------------------- recording
    @contextlib.contextmanager
    def silenced(self) -> Any:
        """Analyse without recording (a loop body's first pass)."""
        self.recording, before = False, self.recording
        try:
            yield
        finally:
            self.recording = before

    def record_member(self, node: ast.AST, receiver: Kinds, member: str, *, call: ast.Call | None = None,
                      n_args: int | None = None, guarded: bool = False) -> None:
        types = tuple(sorted(t for t in receiver.types if _is_type(t)))
        if not types or not self.recording:
            return
        n, star_args, keywords, star_kwargs, literal = 0, False, (), False, None
        if call is not None:
            n, star_args, keywords, star_kwargs = _call_shape(call)
            literal = _literal_arguments(call)
        if n_args is not None:
            n = n_args
        self.members.append(MemberSite(
            path=self.path, line=getattr(node, "lineno", 0), receivers=types, certain=receiver.certain,
            member=member, written=_short(node), is_call=call is not None or n_args is not None, n_args=n,
            keywords=keywords, star_args=star_args, star_kwargs=star_kwargs, literal=literal, guarded=guarded,
        ))

    def record_library_call(self, call: ast.Call, dotted: str, written: str) -> None:
        if not self.recording:
            return
        n, star_args, keywords, star_kwargs = _call_shape(call)
        self.calls.append(CallSite(path=self.path, line=call.lineno, dotted=dotted, source=written, is_call=True,
                                   n_args=n, keywords=keywords, star_args=star_args, star_kwargs=star_kwargs))


def _passes(kinds: Kinds) -> bool:
    """Whether an argument's kinds are worth handing to the callee's parameter."""
    return any(k not in ("frames", "builtins.list") for k in kinds.types)


def _is_type(kind: str) -> bool:
    """Whether a kind names a library type (not the backend, a module or a container)."""
    return kind not in (BACKEND, "frames", "builtins.list") and not kind.startswith(MODULE)


def _call_shape(call: ast.Call) -> tuple[int, bool, tuple[str, ...], bool]:
    n, star = 0, False
    for arg in call.args:
        if isinstance(arg, ast.Starred):
            star = True
            break
        n += 1
    return (n, star, tuple(k.arg for k in call.keywords if k.arg is not None),
            any(k.arg is None for k in call.keywords))


def _literal_arguments(call: ast.Call) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]] | None:
    """The call's arguments as source text when every one is a constant (so it can be made for real)."""
    if any(k.arg is None for k in call.keywords) or any(isinstance(a, ast.Starred) for a in call.args):
        return None
    try:
        for node in [*call.args, *(k.value for k in call.keywords)]:
            ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError):
        return None
    return (tuple(ast.unparse(a) for a in call.args),
            tuple((str(k.arg), ast.unparse(k.value)) for k in call.keywords))


def _short(node: ast.AST, limit: int = 70) -> str:
    text = " ".join(ast.unparse(node).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _partition_guard(test: ast.AST, guards: Mapping[str, str]) -> tuple[str, bool] | None:
    """``is_partitioned(x)`` (or a name bound to it, or their negation) -> (x, polarity)."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _partition_guard(test.operand, guards)
        return (inner[0], not inner[1]) if inner else None
    if (isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and test.func.id == "is_partitioned"
            and test.args and isinstance(test.args[0], ast.Name)):
        return test.args[0].id, True
    if isinstance(test, ast.Name) and test.id in guards:
        return guards[test.id], True
    return None


def _hasattr_guard(test: ast.AST) -> tuple[str, str] | None:
    if (isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and test.func.id == "hasattr"
            and len(test.args) == 2 and isinstance(test.args[0], ast.Name)
            and isinstance(test.args[1], ast.Constant) and isinstance(test.args[1].value, str)):
        return test.args[0].id, test.args[1].value
    return None


def _ends_flow(stmts: list[ast.stmt]) -> bool:
    return bool(stmts) and isinstance(stmts[-1], (ast.Return, ast.Raise, ast.Continue, ast.Break))


def _looks_like_columns(node: ast.AST, env: Mapping[str, Kinds]) -> bool:
    """Whether a subscript selects several columns (a frame) rather than one (a series)."""
    if isinstance(node, (ast.List, ast.ListComp, ast.Tuple)):
        return True
    if isinstance(node, ast.Call):
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        return name in ("list", "sorted") or name.endswith(("columns", "names"))
    if isinstance(node, ast.Name) and env.get(node.id) is not None and "builtins.list" in env[node.id].types:
        return True
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return name.rstrip("_").endswith("s")


def dask_only_members() -> frozenset[str]:
    """Members Dask collections have and pandas frames do not (``map_partitions``, ``_meta``):
    using one on a name says the name holds a Dask collection."""
    try:
        import dask.dataframe as dd
        import pandas as pd
    except ImportError:
        return frozenset({"_meta", "map_partitions", "npartitions", "random_split", "partitions"})
    extra = set(dir(dd.DataFrame)) - set(dir(pd.DataFrame))
    return frozenset(m for m in extra if not m.startswith("__")) | {"_meta"}


class _FunctionState:
    """Walks one function body in order, keeping the kinds of its local names."""

    def __init__(self, scanner: FlowScanner, fn: _Function, aliases: Mapping[str, str],
                 dask_names: set[str] | None = None) -> None:
        self.s = scanner
        self.dask_names = dask_names or set()     # names used with Dask-only members here
        self.facts = scanner.facts
        self.fn = fn
        self.aliases = aliases
        self.returns = NOTHING
        self.guards: dict[str, str] = {}          # name bound to is_partitioned(x) -> x
        self.hasattr: set[tuple[str, str]] = set()
        self.dask_backend_depth = 0               # inside ``with dask.config.set({"dataframe.backend": ...})``

    # ---------------------------------------------------------------- statements
    def block(self, stmts: list[ast.stmt], env: dict[str, Kinds]) -> dict[str, Kinds]:
        for stmt in stmts:
            env = self.stmt(stmt, env)
        return env

    def stmt(self, stmt: ast.stmt, env: dict[str, Kinds]) -> dict[str, Kinds]:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return self.nested_function(stmt, env)
        if isinstance(stmt, ast.ClassDef):
            return env
        if isinstance(stmt, ast.Assign):
            kinds = self.expr(stmt.value, env)
            for target in stmt.targets:
                self.bind(target, kinds, env, stmt.value)
            return env
        if isinstance(stmt, ast.AnnAssign):
            annotated = _annotation_types(stmt.annotation, self.aliases)
            kinds = self.expr(stmt.value, env) if stmt.value is not None else NOTHING
            if annotated:
                kinds = Kinds(annotated)
            elif self.s._is_backend_annotation(stmt.annotation):
                kinds = Kinds(frozenset({BACKEND}))
            self.bind(stmt.target, kinds, env, stmt.value)
            return env
        if isinstance(stmt, ast.AugAssign):
            left = self.expr(stmt.target, env)
            self.expr(stmt.value, env)
            op = _BINOPS.get(type(stmt.op))
            if left and op:
                self.s.record_member(stmt, left, f"__{op}__", n_args=1)
            return env
        if isinstance(stmt, ast.Return):
            if stmt.value is not None:
                self.returns = self.returns.union(self.expr(stmt.value, env))
            return env
        if isinstance(stmt, ast.If):
            return self.if_(stmt, env)
        if isinstance(stmt, (ast.For, ast.AsyncFor)):
            self.expr(stmt.iter, env)
            self.bind_loop(stmt.target, env)
            with self.s.silenced():                   # a first pass gives names their loop-carried kinds
                carried = self.block(stmt.body, dict(env))
            start = dict(env)
            for name, kinds in carried.items():
                start[name] = start[name].union(kinds) if name in start else kinds
            env = self.block(stmt.body, start)
            return self.block(stmt.orelse, env)
        if isinstance(stmt, ast.While):
            self.expr(stmt.test, env)
            env = self.block(stmt.body, env)
            return self.block(stmt.orelse, env)
        if isinstance(stmt, (ast.With, ast.AsyncWith)):
            dask_backend = False
            for item in stmt.items:
                self.expr(item.context_expr, env)
                dask_backend = dask_backend or self._sets_dask_backend(item.context_expr)
            self.dask_backend_depth += dask_backend
            env = self.block(stmt.body, env)
            self.dask_backend_depth -= dask_backend
            return env
        if isinstance(stmt, ast.Try):
            env = self.block(stmt.body, env)
            for handler in stmt.handlers:
                env = self.block(handler.body, env)
            env = self.block(stmt.orelse, env)
            return self.block(stmt.finalbody, env)
        for child in ast.iter_child_nodes(stmt):
            if isinstance(child, ast.expr):
                self.expr(child, env)
        return env

    def nested_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef, env: dict[str, Kinds]) -> dict[str, Kinds]:
        """A function defined inside this one (a per-column closure the ops hand to
        ``per_column``): its body is scanned with the names it closes over, as a lambda's is,
        its own parameters unknown. Its returns are its own; the enclosing scope is unchanged."""
        params = {a.arg for a in walk(node.args) if isinstance(a, ast.arg)}
        local = {k: v for k, v in env.items() if k not in params}
        outer_returns = self.returns
        self.block(node.body, local)
        self.returns = outer_returns
        return env

    def if_(self, stmt: ast.If, env: dict[str, Kinds]) -> dict[str, Kinds]:
        self.expr(stmt.test, env)
        guard = _partition_guard(stmt.test, self.guards)
        has = _hasattr_guard(stmt.test)
        body_env, else_env = dict(env), dict(env)
        narrowed = self._isinstance_guard(stmt.test)
        if narrowed is not None:
            body_env[narrowed[0]] = narrowed[1]
        if guard is not None:
            name, positive = guard
            self._refine(body_env, name, dask=positive)
            self._refine(else_env, name, dask=not positive)
        if has:
            self.hasattr.add(has)
        body_env = self.block(stmt.body, body_env)
        if has:
            self.hasattr.discard(has)
        else_env = self.block(stmt.orelse, else_env)
        if _ends_flow(stmt.body):
            return else_env
        if _ends_flow(stmt.orelse):
            return body_env
        merged = dict(body_env)
        for name, kinds in else_env.items():
            merged[name] = merged[name].union(kinds) if name in merged else kinds
        return merged

    def _isinstance_guard(self, test: ast.AST) -> tuple[str, Kinds] | None:
        """``isinstance(x, (cudf.DataFrame, cudf.Series))`` -> x holds one of those types."""
        if not (isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and test.func.id == "isinstance"
                and len(test.args) == 2 and isinstance(test.args[0], ast.Name)):
            return None
        types = _annotation_types(test.args[1], self.aliases)
        return (test.args[0].id, Kinds(types)) if types else None

    def _refine(self, env: dict[str, Kinds], name: str, *, dask: bool) -> None:
        current = env.get(name) or self.seed(name)
        convert = self.facts.as_dask if dask else self.facts.in_memory
        refined = current.map(lambda t: convert(t) or (t if not self.facts.role_of(t) else None))
        if refined:
            env[name] = Kinds(refined.types, certain=True)

    def _sets_dask_backend(self, node: ast.AST) -> bool:
        """``dask.config.set({"dataframe.backend": <backend>.dask_backend})``."""
        if not (isinstance(node, ast.Call) and _chain(node.func) in (["dask", "config", "set"],)):
            return False
        for arg in node.args:
            if isinstance(arg, ast.Dict):
                for key in arg.keys:
                    if isinstance(key, ast.Constant) and key.value == "dataframe.backend":
                        return True
        return False

    def bind(self, target: ast.AST, kinds: Kinds, env: dict[str, Kinds], value: ast.AST | None) -> None:
        if isinstance(target, ast.Name):
            if value is not None and _partition_guard(value, {}) is not None:
                self.guards[target.id] = _partition_guard(value, {})[0]
            if isinstance(value, (ast.List, ast.ListComp)) or (
                    isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in ("list", "sorted")):
                env[target.id] = Kinds(frozenset({"builtins.list"}))
                return
            if kinds:
                env[target.id] = kinds
            elif value is not None and self._host_value(value):
                env[target.id] = NOTHING              # known not to be a device value
            else:
                env.pop(target.id, None)              # unknown: its name may say what it holds
        elif isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                self.bind(element, NOTHING, env, None)
        elif isinstance(target, ast.Subscript):
            receiver = self.expr(target.value, env)
            self.expr(target.slice, env)
            if self._tracked(receiver):
                self.s.record_member(target, receiver, "__setitem__", n_args=2)
        elif isinstance(target, ast.Attribute):
            self.expr(target.value, env)

    def bind_loop(self, target: ast.AST, env: dict[str, Kinds]) -> None:
        """``for name, frame in frames.items()``: loop names are unknown, so their names may say
        what they hold (``frame``)."""
        names = [target] if isinstance(target, ast.Name) else list(getattr(target, "elts", []))
        for element in names:
            self.bind(element, NOTHING, env, None)

    def _host_value(self, value: ast.AST) -> bool:
        """Literals, containers and results of host libraries (pandas, NumPy, ...)."""
        if isinstance(value, (ast.Constant, ast.List, ast.Tuple, ast.Dict, ast.Set, ast.ListComp, ast.DictComp,
                              ast.SetComp, ast.GeneratorExp, ast.JoinedStr, ast.Compare, ast.BoolOp)):
            return True
        if isinstance(value, ast.Call):
            chain = _chain(value.func)
            return bool(chain) and chain[0] in self.s.host_modules
        return False

    # ---------------------------------------------------------------- expressions
    def seed(self, name: str) -> Kinds:
        role = RECEIVER_NAMES.get(name)
        if role is None or not self.fn.backend_aware:
            return NOTHING
        if role == "frames":
            return NOTHING
        return self.facts.seed(role)

    def _tracked(self, kinds: Kinds) -> bool:
        return any(_is_type(t) for t in kinds.types)

    def expr(self, node: ast.AST | None, env: dict[str, Kinds]) -> Kinds:
        if node is None:
            return NOTHING
        method = getattr(self, f"expr_{type(node).__name__}", None)
        if method is not None:
            return method(node, env)
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                self.expr(child, env)
            elif isinstance(child, ast.comprehension):
                self.expr(child.iter, env)
                for cond in child.ifs:
                    self.expr(cond, env)
        return NOTHING

    def expr_Name(self, node: ast.Name, env: dict[str, Kinds]) -> Kinds:
        if node.id in env:
            kinds = env[node.id]
        elif node.id == "backend":
            return Kinds(frozenset({BACKEND}))
        elif node.id in self.aliases and "." not in self.aliases[node.id]:
            return Kinds(frozenset({MODULE + self.aliases[node.id]}))    # the module itself (cp, passed on)
        else:
            kinds = self.seed(node.id)
        if node.id in self.dask_names and not kinds.certain:
            # A guessed frame used with a member only Dask collections have: a Dask collection.
            dask = frozenset(t for t in kinds.types if (self.facts.role_of(t) or ("", False))[1])
            if dask:
                return Kinds(dask)
        return kinds

    def expr_Attribute(self, node: ast.Attribute, env: dict[str, Kinds]) -> Kinds:
        receiver = self.expr(node.value, env)
        return self.attribute(node, receiver, env, read=True)

    def attribute(self, node: ast.Attribute, receiver: Kinds, env: dict[str, Kinds], *, read: bool) -> Kinds:
        attr = node.attr
        if attr == "backend" and not receiver:
            return Kinds(frozenset({BACKEND}))
        if BACKEND in receiver.types:
            if attr in self.facts.module_attrs:
                return Kinds(frozenset({MODULE + self.facts.module_attrs[attr]}))
            return NOTHING
        modules = [t for t in receiver.types if t.startswith(MODULE)]
        if modules:
            return Kinds(frozenset(f"{m}.{attr}" for m in modules))
        if not self._tracked(receiver):
            if isinstance(node.value, ast.Name) and attr == "frames" and self.fn.backend_aware:
                return Kinds(frozenset({"frames"}), certain=False)
            return NOTHING
        if read:
            guarded = isinstance(node.value, ast.Name) and (node.value.id, attr) in self.hasattr
            self.s.record_member(node, receiver, attr, guarded=guarded)
        return self.attribute_result(receiver, attr)

    def attribute_result(self, receiver: Kinds, attr: str) -> Kinds:
        if attr == "_meta":
            return receiver.map(lambda t: self.facts.in_memory(t) if self.facts.role_of(t) else None)
        if attr in ACCESSOR_ATTRS:
            return receiver.map(lambda t: f"{t}{ATTR}{attr}" if self.facts.role_of(t) else None)
        typed = receiver.map(lambda t: ATTRIBUTE_TYPES.get(f"{t}{ATTR}{attr}"))
        if typed:
            return typed
        if attr in UNTRACKED_RESULTS:
            return NOTHING
        if attr in TO_ARRAY:
            return receiver.map(lambda t: self.facts.type_of("array") if self.facts.role_of(t) else None)
        if attr == "T":
            return receiver
        return NOTHING

    def method_result(self, receiver: Kinds, member: str) -> Kinds:
        def one(t: str) -> str | None:
            owner, _, accessor = t.partition(ATTR)
            if accessor in ("iloc", "loc"):
                return None                               # calling an indexer: not done
            if accessor:                                  # .cat.codes, .str.len(): a series of the owner's family
                role = self.facts.role_of(owner)
                return self.facts.type_of("series", role[1]) if role else None
            role = self.facts.role_of(t)
            if role is None:
                return None
            kind, dask = role
            if member in UNTRACKED_RESULTS:
                return None
            if member == "groupby":
                return GROUP_BY_TYPES.get((kind, dask))
            if member in TO_ARRAY:
                return self.facts.type_of("array")
            if member in REDUCTIONS:
                return self.facts.type_of("series", dask) if kind == "frame" else None
            if member in TO_SERIES:
                return self.facts.type_of("series", dask)
            return t
        return receiver.map(one)

    def expr_Subscript(self, node: ast.Subscript, env: dict[str, Kinds]) -> Kinds:
        receiver = self.expr(node.value, env)
        index = self.expr(node.slice, env)
        if "frames" in receiver.types:
            return self.facts.seed("frame")
        if not self._tracked(receiver):
            return NOTHING
        self.s.record_member(node, receiver, "__getitem__", n_args=1)

        def one(t: str) -> str | None:
            owner, _, accessor = t.partition(ATTR)
            if accessor in ("iloc", "loc"):
                return owner
            role = self.facts.role_of(t)
            if role is None:
                return None
            kind, dask = role
            if kind == "frame":
                mask = any((self.facts.role_of(k) or ("", False))[0] == "series" for k in index.types)
                return t if mask or _looks_like_columns(node.slice, env) else self.facts.type_of("series", dask)
            return t
        return receiver.map(one)

    def expr_BinOp(self, node: ast.BinOp, env: dict[str, Kinds]) -> Kinds:
        left, right = self.expr(node.left, env), self.expr(node.right, env)
        op = _BINOPS.get(type(node.op))
        if op is None:
            return NOTHING
        if self._tracked(left):
            self.s.record_member(node, left, f"__{op}__", n_args=1)
            return left
        if self._tracked(right):
            self.s.record_member(node, right, f"__r{op}__", n_args=1)
            return right
        return NOTHING

    def expr_Compare(self, node: ast.Compare, env: dict[str, Kinds]) -> Kinds:
        left = self.expr(node.left, env)
        result = NOTHING
        for op, comparator in zip(node.ops, node.comparators):
            right = self.expr(comparator, env)
            dunder = _CMPOPS.get(type(op))
            if dunder and self._tracked(left):
                self.s.record_member(node, left, dunder, n_args=1)
                result = left
            elif isinstance(op, (ast.In, ast.NotIn)) and self._tracked(right):
                self.s.record_member(node, right, "__contains__", n_args=1)
            left = right
        return result

    def expr_UnaryOp(self, node: ast.UnaryOp, env: dict[str, Kinds]) -> Kinds:
        operand = self.expr(node.operand, env)
        dunder = _UNARY.get(type(node.op))
        if dunder and self._tracked(operand):
            self.s.record_member(node, operand, dunder, n_args=0)
            return operand
        return NOTHING

    def expr_IfExp(self, node: ast.IfExp, env: dict[str, Kinds]) -> Kinds:
        self.expr(node.test, env)
        has = _hasattr_guard(node.test)
        guard = _partition_guard(node.test, self.guards)
        body_env, else_env = env, env
        if guard is not None:                 # ``x._meta if is_partitioned(x) else x.iloc[:0]``
            name, positive = guard
            body_env, else_env = dict(env), dict(env)
            self._refine(body_env, name, dask=positive)
            self._refine(else_env, name, dask=not positive)
        if has:
            self.hasattr.add(has)
        body = self.expr(node.body, body_env)
        if has:
            self.hasattr.discard(has)
        return body.union(self.expr(node.orelse, else_env))

    def expr_DictComp(self, node: ast.DictComp, env: dict[str, Kinds]) -> Kinds:
        local = dict(env)
        for gen in node.generators:
            self.expr(gen.iter, local)
            self.bind(gen.target, NOTHING, local, None)
        self.expr(node.key, local)
        self.expr(node.value, local)
        return NOTHING

    def expr_ListComp(self, node: ast.ListComp, env: dict[str, Kinds]) -> Kinds:
        return self._comprehension(node, env)

    def expr_SetComp(self, node: ast.SetComp, env: dict[str, Kinds]) -> Kinds:
        return self._comprehension(node, env)

    def expr_GeneratorExp(self, node: ast.GeneratorExp, env: dict[str, Kinds]) -> Kinds:
        return self._comprehension(node, env)

    def _comprehension(self, node: Any, env: dict[str, Kinds]) -> Kinds:
        local = dict(env)
        for gen in node.generators:
            self.expr(gen.iter, local)
            self.bind(gen.target, NOTHING, local, None)
            for cond in gen.ifs:
                self.expr(cond, local)
        self.expr(node.elt, local)
        return NOTHING

    def expr_Lambda(self, node: ast.Lambda, env: dict[str, Kinds]) -> Kinds:
        local = {k: v for k, v in env.items() if k not in {a.arg for a in walk(node.args) if isinstance(a, ast.arg)}}
        self.expr(node.body, local)
        return NOTHING

    def expr_Call(self, node: ast.Call, env: dict[str, Kinds]) -> Kinds:
        func = node.func
        arg_kinds = [self.expr(a.value if isinstance(a, ast.Starred) else a, env) for a in node.args]
        kw_kinds = {k.arg: self.expr(k.value, env) for k in node.keywords}
        if isinstance(func, ast.Name):
            return self.call_name(node, func.id, arg_kinds, kw_kinds, env)
        if not isinstance(func, ast.Attribute):
            self.expr(func, env)
            return NOTHING
        chain = _chain(func)
        if chain and chain[0] in self.s.numpy_names and len(chain) == 2 and arg_kinds:
            return self.numpy_call(node, chain[1], arg_kinds)
        if chain and chain[0] in self.s.torch_names and chain[1:] == ["from_dlpack"] and arg_kinds:
            for t in arg_kinds[0].types:
                if (self.facts.role_of(t) or ("", False))[0] == "array":
                    self.s.dlpack.append(DlpackSite(self.s.path, node.lineno, t,
                                                    tuple(k.arg for k in node.keywords if k.arg)))
            return NOTHING
        if chain and chain[0] in self.s.dask_df_names and len(chain) == 2 and self.s.facts.dask_module:
            if self.dask_backend_depth and chain[1].startswith("read_"):
                n, _, keywords, _ = _call_shape(node)
                self.s.dask_reads.append(DaskReadSite(self.s.path, node.lineno, chain[1], n, keywords))
                return Kinds(frozenset({self.facts.type_of("frame", True)}))
            return NOTHING
        receiver = self.expr(func.value, env)
        if BACKEND in receiver.types:
            return self.facts.method_returns.get(func.attr, NOTHING)
        modules = [t[len(MODULE):] for t in receiver.types if t.startswith(MODULE)]
        if modules:
            for module in modules:
                dotted = f"{module}.{func.attr}"
                self.s.record_library_call(node, dotted, ast.unparse(func))
            return self.library_result(f"{modules[0]}.{func.attr}")
        if self.fn.cls is not None and isinstance(func.value, ast.Name) and func.value.id == "self" \
                and (self.fn.cls, func.attr) in self.s.functions:
            key = (self.fn.cls, func.attr)
            self.propagate(key, node, arg_kinds, kw_kinds, skip_self=True)
            if not self._tracked(receiver):
                annotated = _annotation_types(self.s.functions[key].node.returns, self.aliases)
                return Kinds(annotated) if annotated else self.s.function_returns.get(key, NOTHING)
        if not self._tracked(receiver):
            return self.library_instance(chain)
        guarded = isinstance(func.value, ast.Name) and (func.value.id, func.attr) in self.hasattr
        self.s.record_member(func, receiver, func.attr, call=node, guarded=guarded)
        if func.attr == "map_partitions" and node.args and isinstance(node.args[0], ast.Name):
            partition = receiver.map(self.facts.in_memory)
            callee = node.args[0].id
            self.propagate((None, callee), node, [partition, *arg_kinds[1:]], kw_kinds, skip_self=False)
            return receiver.map(lambda t: t if (self.facts.role_of(t) or ("", False))[1] else None)
        return self.method_result(receiver, func.attr)

    def library_instance(self, chain: list[str] | None) -> Kinds:
        """An instance of a GPU-library (or XGBoost) class constructed directly: ``RabitTracker(...)``."""
        if chain and chain[0] in self.aliases:
            dotted = ".".join([self.aliases[chain[0]], *chain[1:]])
            if chain[-1][:1].isupper():
                return Kinds(frozenset({dotted}))
        return NOTHING

    def library_result(self, dotted: str) -> Kinds:
        module, _, name = dotted.rpartition(".")
        if module == self.facts.frame_module and (name.startswith(("read_", "from_")) or name == "concat"):
            return Kinds(frozenset({self.facts.type_of("frame")}))
        if module == self.facts.frame_module and name in ("DataFrame", "Series"):
            return Kinds(frozenset({f"{module}.{name}"}))
        if module == self.facts.array_module and not name.startswith(("asnumpy", "get_")):
            return Kinds(frozenset({self.facts.type_of("array")}))
        if name[:1].isupper():                        # a class: an instance of it
            return Kinds(frozenset({dotted}))
        return NOTHING

    def call_name(self, node: ast.Call, name: str, arg_kinds: list[Kinds], kw_kinds: dict[str | None, Kinds],
                  env: dict[str, Kinds]) -> Kinds:
        if name == "len" and arg_kinds and self._tracked(arg_kinds[0]):
            self.s.record_member(node, arg_kinds[0], "__len__", n_args=0)
            return NOTHING
        if name in ("isinstance", "hasattr", "getattr", "type", "str", "repr", "int", "float", "bool"):
            return NOTHING
        if name in self.aliases:
            return self.library_instance([name])
        if (None, name) in self.s.functions:
            self.propagate((None, name), node, arg_kinds, kw_kinds, skip_self=False)
            key = (None, name)
            fn = self.s.functions[key].node
            annotated = _annotation_types(fn.returns, self.aliases)
            return Kinds(annotated) if annotated else self.s.function_returns.get(key, NOTHING)
        if name in self.s.imported and any(_passes(k) for k in [*arg_kinds, *kw_kinds.values()]):
            # A function of another module of the package: its parameters get these kinds there.
            self.s.external.append((self.s.imported[name], tuple(arg_kinds),
                                    tuple((k, v) for k, v in kw_kinds.items() if k)))
        return NOTHING

    def numpy_call(self, node: ast.Call, name: str, arg_kinds: list[Kinds]) -> Kinds:
        """``np.log1p(series)``: a ufunc on a cuDF object dispatches to ``__array_ufunc__``, which
        forwards to the same-named CuPy ufunc."""
        import numpy as np

        if not isinstance(getattr(np, name, None), np.ufunc):
            return NOTHING
        first = arg_kinds[0]
        if not self._tracked(first):
            return NOTHING
        self.s.record_member(node, first, "__array_ufunc__", n_args=2)
        self.s.calls.append(CallSite(path=self.s.path, line=node.lineno, dotted=f"{self.facts.array_module}.{name}",
                                     source=f"{ast.unparse(node.func)} (ufunc dispatch)", is_call=True,
                                     n_args=len(node.args)))
        return first

    def propagate(self, key: tuple[str | None, str], node: ast.Call, arg_kinds: list[Kinds],
                  kw_kinds: Mapping[str | None, Kinds], *, skip_self: bool) -> None:
        """Argument kinds at a call of a function of this module become its parameters' kinds."""
        fn = self.s.functions.get(key)
        if fn is None:
            return
        params = fn.params[1:] if fn.bound else fn.params
        found = self.s.param_kinds.setdefault(key, {})
        for param, kinds in [*zip(params, arg_kinds), *((k, v) for k, v in kw_kinds.items() if k)]:
            if _passes(kinds) and param in fn.params:
                found[param] = found[param].union(kinds) if param in found else kinds


def scan_flow_source(source: str, path: str, facts: GpuFacts, *,
                     dask_only: frozenset[str] | None = None) -> FlowScanner:
    """The flow scan of one module's source: its calls on backend values and through backend modules."""
    tree = parse(source, filename=path)
    aliases = gpu_aliases(tree, LIBRARY_MODULES)
    return FlowScanner(facts, tree, path, library_aliases=aliases, dask_only=dask_only).run()


# --------------------------------------------------------------------------- 1c. subclasses, class paths, names
@dataclass(frozen=True)
class SubclassSite:
    """A class of ours deriving from a library class: ``super().__init__(...)`` must bind to the
    base's ``__init__``, and each method it overrides must take what the library passes."""

    path: str
    line: int
    cls: str
    base: str                        # dotted, alias expanded: "xgboost.DataIter"
    method: str                      # "__init__" for the super() call, else the overriding method
    params: str = ""                 # the override's parameter list, as written
    n_args: int = 0                  # super().__init__ call shape
    keywords: tuple[str, ...] = ()
    star: bool = False


def scan_subclasses(tree: ast.AST, path: str, aliases: Mapping[str, str]) -> list[SubclassSite]:
    sites: list[SubclassSite] = []
    for cls in (n for n in walk(tree) if isinstance(n, ast.ClassDef)):
        bases = []
        for base in cls.bases:
            parts = _chain(base)
            if parts and parts[0] in aliases:
                bases.append(".".join([aliases[parts[0]], *parts[1:]]))
        if not bases:
            continue
        for item in cls.body:
            if not isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if item.name != "__init__" and not (item.name.startswith("__") and item.name.endswith("__")):
                for base in bases:
                    sites.append(SubclassSite(path, item.lineno, cls.name, base, item.name, ast.unparse(item.args)))
            for call in (n for n in walk(item) if isinstance(n, ast.Call)):
                func = call.func
                if (isinstance(func, ast.Attribute) and func.attr == "__init__" and isinstance(func.value, ast.Call)
                        and isinstance(func.value.func, ast.Name) and func.value.func.id == "super"):
                    n, star, keywords, star_kwargs = _call_shape(call)
                    sites.append(SubclassSite(path, call.lineno, cls.name, bases[0], "__init__", n_args=n,
                                              keywords=keywords, star=star or star_kwargs))
    return sites


@dataclass(frozen=True)
class ClassPathSite:
    """A GPU-library object named in a string: ``"cuml.dask.ensemble:RandomForestClassifier"`` in
    the model registry, or a module given to ``importlib.import_module``."""

    path: str
    line: int
    target: str                      # "module:attr" or "module"


_CLASS_PATH = re.compile(r"^([A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)*):([A-Za-z_]\w*)$")


def scan_class_paths(tree: ast.AST, path: str, modules: Sequence[str]) -> list[ClassPathSite]:
    sites = []
    for node in walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            match = _CLASS_PATH.match(node.value)
            if match and match.group(1).split(".")[0] in modules:
                sites.append(ClassPathSite(path, node.lineno, node.value))
        elif (isinstance(node, ast.Call) and _chain(node.func) in (["importlib", "import_module"], ["import_module"])
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
              and node.args[0].value.split(".")[0] in modules):
            sites.append(ClassPathSite(path, node.lineno, node.args[0].value))
    return sorted(set(sites), key=lambda s: s.line)


def scan_distribution_names(tree: ast.AST, path: str, modules: Sequence[str]) -> list[ClassPathSite]:
    """``{"cudf": "cudf-cu13"}`` or ``{"cudf": ("cudf-cu13", "cudf-cu12")}``: distribution names the
    code records for GPU modules (alternatives joined by "|": one of them must be installed)."""
    sites = []
    for node in walk(tree):
        if not isinstance(node, ast.Dict):
            continue
        for key, value in zip(node.keys, node.values):
            if not (isinstance(key, ast.Constant) and key.value in modules):
                continue
            elements = value.elts if isinstance(value, (ast.Tuple, ast.List)) else [value]
            names = [e.value for e in elements if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            if names and len(names) == len(elements):
                sites.append(ClassPathSite(path, value.lineno, "|".join(names)))
    return sites


def check_subclasses(report: Report, sites: Sequence[SubclassSite]) -> None:
    if not sites:
        return
    report.section(f"Our subclasses of library classes ({len(sites)} sites)")
    for site in sites:
        try:
            base = resolve_dotted(site.base)
        except LookupError as exc:
            report.fail(f"{site.path}:{site.line} {site.cls}({site.base})", str(exc))
            continue
        if site.method == "__init__":
            label = (f"{site.path}:{site.line} {site.cls}: super().__init__("
                     f"{', '.join([f'<{site.n_args} args>'] * bool(site.n_args) + [k + '=' for k in site.keywords])})"
                     f" -> {site.base}.__init__")
            report.record(label, check_bind(base.__init__, site.n_args, site.keywords, prepend_self=True,
                                            partial=site.star))
            continue
        label = f"{site.path}:{site.line} {site.cls}.{site.method}({site.params}) overrides {site.base}.{site.method}"
        if not hasattr(base, site.method):
            report.note(label, f"{site.base} has no {site.method}, so the library never calls it: fine for a "
                               "helper, a misspelling if it is meant to override one")
            continue
        report.record(label, check_override(getattr(base, site.method), site.params))


def check_override(base_method: Any, params_text: str) -> BindResult:
    """Our override must accept the positional arguments (and required keywords) the base takes."""
    ours = _signature_from_params(params_text)
    if ours is None:
        return BindResult(False, f"cannot read our signature ({params_text})")
    try:
        theirs = inspect.signature(base_method)
    except (TypeError, ValueError):
        return BindResult(True, "base signature not introspectable; exists", checked=False)
    P = inspect.Parameter
    positional = [p for p in theirs.parameters.values() if p.kind in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD)]
    required_kw = [p.name for p in theirs.parameters.values() if p.kind is P.KEYWORD_ONLY and p.default is P.empty]
    try:
        ours.bind(*([PLACEHOLDER] * len(positional)), **{k: None for k in required_kw})
    except TypeError as exc:
        return BindResult(False, f"the library calls it as {theirs}; ours does not take that: {exc}")
    return BindResult(True, f"takes what {theirs} passes")


def check_class_paths(report: Report, sites: Sequence[ClassPathSite]) -> None:
    if not sites:
        return
    report.section(f"GPU-library objects named in strings ({len(sites)} sites)")
    for site in sites:
        label = f"{site.path}:{site.line} '{site.target}'"
        module_name, _, attr = site.target.partition(":")
        try:
            module = importlib.import_module(module_name)
        except Exception as exc:  # noqa: BLE001 - an import can fail in many ways
            report.fail(label, f"cannot import {module_name}: {_first_line(exc)}")
            continue
        if attr and not hasattr(module, attr):
            report.fail(label, _missing(module_name, module, attr))
        else:
            report.ok(label, f"imports{'; has ' + attr if attr else ''}")


def check_distribution_names(report: Report, sites: Sequence[ClassPathSite]) -> None:
    from importlib.metadata import PackageNotFoundError, version

    if not sites:
        return
    report.section(f"Distribution names written in the code ({len(sites)})")
    for site in sites:
        label = f"{site.path}:{site.line} '{site.target}'"
        found = []
        for name in site.target.split("|"):
            with contextlib.suppress(PackageNotFoundError):
                found.append(f"{name} {version(name)}")
        if found:
            report.ok(label, f"installed: {', '.join(found)}")
        else:
            report.fail(label, "not installed under " + ("that name" if "|" not in site.target else "any of these names")
                        + " (the GPU extra installs other names)")


# --------------------------------------------------------------------------- keyword dicts
def _function_of(node: ast.AST, parents: Mapping[ast.AST, ast.AST]) -> ast.AST | None:
    while node in parents:
        node = parents[node]
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return node
    return None


def dict_keys(name: str, scope: ast.AST) -> tuple[set[str], bool]:
    """Constant keys a dict called ``name`` gets in ``scope``: its literal, ``d["k"] = ...`` and
    ``for k in ("a", "b"): d[k] = ...``; and whether some keys are unknown (``**other``)."""
    keys: set[str] = set()
    unknown = False
    found = False
    loops: dict[str, list[str]] = {}
    for node in walk(scope):
        if isinstance(node, ast.For) and isinstance(node.target, ast.Name) and isinstance(node.iter, (ast.Tuple, ast.List)):
            loops[node.target.id] = [e.value for e in node.iter.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    for node in walk(scope):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        for target in targets:
            if isinstance(target, ast.Name) and target.id == name and isinstance(node.value, ast.Dict):
                found = True
                for key in node.value.keys:
                    if key is None:
                        unknown = True
                    elif isinstance(key, ast.Constant) and isinstance(key.value, str):
                        keys.add(key.value)
                    else:
                        unknown = True
            elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name) and target.value.id == name:
                index = target.slice
                if isinstance(index, ast.Constant) and isinstance(index.value, str):
                    keys.add(index.value)
                elif isinstance(index, ast.Name) and index.id in loops:
                    keys.update(loops[index.id])
                else:
                    unknown = True
    return keys, unknown or not found


def returned_dict_keys(fn: ast.AST) -> tuple[set[str], bool]:
    """Keys of the dict a function returns (a dict it builds, or a comprehension over one)."""
    keys: set[str] = set()
    unknown = False
    returns = [n.value for n in walk(fn) if isinstance(n, ast.Return) and n.value is not None]
    if not returns:
        return keys, True
    for value in returns:
        if isinstance(value, ast.DictComp) and isinstance(value.generators[0].iter, ast.Call):
            inner = value.generators[0].iter.func
            if isinstance(inner, ast.Attribute) and inner.attr == "items" and isinstance(inner.value, ast.Name):
                value = inner.value
        if isinstance(value, ast.Name):
            found, more = dict_keys(value.id, fn)
            keys |= found
            unknown = unknown or more
        elif isinstance(value, ast.Dict):
            found, more = dict_keys("<literal>", ast.Module(body=[ast.Assign(targets=[ast.Name("<literal>")], value=value)],
                                                           type_ignores=[]))
            keys |= found
            unknown = unknown or more
        else:
            unknown = True
    return keys, unknown


def star_kwargs_keys(value: ast.AST, call: ast.AST, tree: ast.AST, parents: Mapping[ast.AST, ast.AST]) -> tuple[set[str], bool]:
    """The keywords ``**value`` passes, where the code says: a local dict, or a function of the
    module that returns one. Returns (keys, some unknown)."""
    if isinstance(value, ast.Name):
        scope = _function_of(call, parents) or tree
        return dict_keys(value.id, scope)
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
        for node in walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == value.func.id:
                return returned_dict_keys(node)
    return set(), True


# --------------------------------------------------------------------------- resolving, binding
class _Placeholder:
    def __repr__(self) -> str:
        return "<arg>"


PLACEHOLDER = _Placeholder()


def resolve_dotted(dotted: str) -> Any:
    """Import the module prefix of ``dotted`` and walk the rest with getattr.

    Raises ``LookupError`` with a message that names the missing piece and close matches.
    """
    parts = dotted.split(".")
    try:
        obj: Any = importlib.import_module(parts[0])
    except ImportError as exc:
        raise LookupError(f"cannot import {parts[0]}: {exc}") from exc
    done = parts[0]
    for part in parts[1:]:
        if hasattr(obj, part):
            obj = getattr(obj, part)
        elif inspect.ismodule(obj):
            try:
                obj = importlib.import_module(f"{done}.{part}")
            except ImportError:
                raise LookupError(_missing(done, obj, part)) from None
        else:
            raise LookupError(_missing(done, obj, part))
        done = f"{done}.{part}"
    return obj


def _missing(owner_name: str, owner: Any, name: str) -> str:
    close = difflib.get_close_matches(name, [n for n in dir(owner) if not n.startswith("__")], n=3)
    hint = f" (close: {', '.join(close)})" if close else ""
    return f"{owner_name} has no attribute '{name}'{hint}"


def _docstring_signature(obj: Any) -> inspect.Signature | None:
    """A signature from a compiled function's first docstring line, e.g. ``memGetInfo()``.

    Cython embeds one when the C signature is not introspectable; it is parsed with ``ast``
    (never evaluated). Lines that are not valid Python parameter lists give None.
    """
    name = getattr(obj, "__name__", None)
    doc = inspect.getdoc(obj) or ""
    if not name or not doc:
        return None
    # Cython may prefix the class (``_ndarray_base.__dlpack__(...)``) and type the parameters
    # (``tuple max_version=None``): drop both before parsing.
    match = re.match(rf"^\s*(?:[\w.]+\.)?{re.escape(name)}\((.*)\)\s*(->.*)?$", doc.splitlines()[0])
    if not match:
        return None
    params_text = re.sub(r"\b[A-Za-z_][\w.]*\s+(?=[A-Za-z_]\w*\s*(?:=|,|$))", "", match.group(1))
    return _signature_from_params(params_text)


def _signature_from_params(params_text: str) -> inspect.Signature | None:
    """A signature from a parameter list as written (``self, *, stream=None``); never evaluated."""
    try:
        fn = ast.parse(f"def _({params_text}): pass").body[0]
    except SyntaxError:
        return None
    assert isinstance(fn, ast.FunctionDef)
    a = fn.args
    P = inspect.Parameter
    params: list[inspect.Parameter] = []
    positional = [(x, P.POSITIONAL_ONLY) for x in a.posonlyargs] + [(x, P.POSITIONAL_OR_KEYWORD) for x in a.args]
    first_default = len(positional) - len(a.defaults)
    for i, (arg, kind) in enumerate(positional):
        params.append(P(arg.arg, kind, default=PLACEHOLDER if i >= first_default else P.empty))
    if a.vararg:
        params.append(P(a.vararg.arg, P.VAR_POSITIONAL))
    for arg, default in zip(a.kwonlyargs, a.kw_defaults):
        params.append(P(arg.arg, P.KEYWORD_ONLY, default=P.empty if default is None else PLACEHOLDER))
    if a.kwarg:
        params.append(P(a.kwarg.arg, P.VAR_KEYWORD))
    try:
        return inspect.Signature(params)
    except ValueError:
        return None


def signature_of(obj: Any) -> tuple[inspect.Signature | None, str]:
    """The signature of ``obj`` and where it came from ("" or " (from docstring)")."""
    try:
        return inspect.signature(obj), ""
    except (ValueError, TypeError):
        pass
    sig = _docstring_signature(obj)
    return (sig, " (signature from docstring)") if sig is not None else (None, "")


@dataclass(frozen=True)
class BindResult:
    ok: bool
    detail: str
    via_var_keyword: tuple[str, ...] = ()
    checked: bool = True             # False: the signature could not be read; only existence checked


def check_bind(
    obj: Any,
    n_args: int = 0,
    keywords: Iterable[str] = (),
    *,
    prepend_self: bool = False,
    allow_var_keyword: bool = False,
    partial: bool = False,
) -> BindResult:
    """Bind placeholders for ``n_args`` positional args and ``keywords`` to ``obj``'s signature.

    A keyword that binds only because the callee takes ``**kwargs`` is a failure unless
    ``allow_var_keyword``: cuDF's ``**kwargs`` mostly exist to reject pandas arguments it does
    not implement, so such a call binds here and raises on a GPU.
    """
    keywords = tuple(keywords)
    sig, how = signature_of(obj)
    if sig is None and isinstance(getattr(obj, "nin", None), int):
        # NumPy / CuPy ufuncs: no signature, but they say how many inputs they take.
        nin = obj.nin
        if n_args == nin or (n_args == nin + 1 and "out" not in keywords):
            return BindResult(True, f"binds (ufunc, {nin} input{'s' if nin != 1 else ''})")
        return BindResult(False, f"ufunc takes {nin} input(s), called with {n_args}")
    if sig is None:
        return BindResult(True, "exists; signature not introspectable (compiled), arguments unchecked",
                          checked=False)
    args = [PLACEHOLDER] * (n_args + (1 if prepend_self else 0))
    kwargs = {k: None for k in keywords}
    try:
        bound = (sig.bind_partial if partial else sig.bind)(*args, **kwargs)
    except TypeError as exc:
        return BindResult(False, f"does not bind: {exc}; signature {sig}")
    var_kw = next((p.name for p in sig.parameters.values() if p.kind is inspect.Parameter.VAR_KEYWORD), None)
    absorbed = tuple(bound.arguments.get(var_kw, {})) if var_kw else ()
    if absorbed and not allow_var_keyword:
        return BindResult(False, f"{', '.join(absorbed)}: not a named parameter (accepted only through "
                                 f"**{var_kw}); signature {sig}", absorbed)
    return BindResult(True, "binds" + how, absorbed)


def _needs_self(owner: Any, name: str) -> bool:
    """Whether ``getattr(owner, name)`` is an unbound method that still expects ``self``."""
    if not inspect.isclass(owner):
        return False
    try:
        static = inspect.getattr_static(owner, name)
    except AttributeError:
        return False
    if isinstance(static, (staticmethod, classmethod)) or inspect.isclass(static):
        return False
    return callable(static)



# --------------------------------------------------------------------------- report
@dataclass
class Report:
    passed: int = 0
    failed: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)   # skipped constructions, unchecked signatures
    called: list[str] = field(default_factory=list)  # calls made for real (no GPU needed)
    verbose: bool = True

    def section(self, title: str) -> None:
        print(f"\n== {title}")

    def ok(self, label: str, detail: str = "") -> None:
        self.passed += 1
        if self.verbose:
            print(f"  OK    {label}" + (f": {detail}" if detail else ""))

    def fail(self, label: str, detail: str) -> None:
        self.failed.append(f"{label}: {detail}")
        print(f"  FAIL  {label}: {detail}")

    def note(self, label: str, detail: str) -> None:
        self.notes.append(f"{label}: {detail}")
        print(f"  NOTE  {label}: {detail}")

    def made(self, what: str) -> None:
        """A call made for real (once per distinct call)."""
        if what not in self.called:
            self.called.append(what)

    def record(self, label: str, result: BindResult) -> None:
        if not result.ok:
            self.fail(label, result.detail)
            return
        self.ok(label, result.detail)
        if not result.checked:
            self.notes.append(f"{label}: {result.detail}")


# --------------------------------------------------------------------------- 1. library calls
def _config_keys_result(site: CallSite) -> BindResult | None:
    """``xgboost.config_context(**settings)``: each key must be one of XGBoost's global settings."""
    if site.dotted not in ("xgboost.config_context", "xgboost.set_config"):
        return None
    import xgboost

    config = xgboost.get_config()
    unknown = [k for k in site.keywords if k not in config]
    if unknown:
        return BindResult(False, f"{', '.join(unknown)}: not in xgboost.get_config() ({', '.join(sorted(config))})")
    return BindResult(True, f"global settings {', '.join(site.keywords) or '(none resolved)'} exist")


def check_call_site(site: CallSite, strict_modules: Sequence[str]) -> BindResult:
    """Resolve a library call and bind it. A keyword that only a ``**kwargs`` takes fails for
    the strict modules (cuDF rejects pandas options through it) and is noted elsewhere."""
    obj = resolve_dotted(site.dotted)
    special = _config_keys_result(site)
    if special is not None:
        return special
    owner_name, _, attr = site.dotted.rpartition(".")
    owner = resolve_dotted(owner_name) if owner_name else None
    strict = site.dotted.split(".")[0] in strict_modules
    result = check_bind(obj, site.n_args, site.keywords, prepend_self=bool(owner_name) and _needs_self(owner, attr),
                        partial=site.star_args or site.star_kwargs, allow_var_keyword=not strict)
    if result.ok and result.via_var_keyword and not strict:
        return BindResult(True, f"{result.detail}; through **kwargs: {', '.join(result.via_var_keyword)}",
                          result.via_var_keyword, result.checked)
    return result


def check_call_sites(report: Report, scans: Sequence[ModuleScan], strict_modules: Sequence[str] = ("cudf",)) -> None:
    for scan in scans:
        sites = [*scan.direct, *scan.via_backend]
        if not sites:
            continue
        report.section(f"Library calls in {scan.path} ({len(scan.direct)} direct, "
                       f"{len(scan.via_backend)} through the backend's modules)")
        refs: dict[str, list[int]] = {}
        for site in sites:
            if not site.is_call:
                refs.setdefault(site.dotted, []).append(site.line)
                continue
            label = f"line {site.line:<4} {site.describe()}" + (f"  [{site.source}]" if site in scan.via_backend else "")
            try:
                result = check_call_site(site, strict_modules)
            except LookupError as exc:
                report.fail(label, str(exc))
                continue
            report.record(label, result)
        for dotted, lines in refs.items():
            label = f"line {','.join(map(str, lines))} {dotted} (reference)"
            try:
                resolve_dotted(dotted)
            except LookupError as exc:
                report.fail(label, str(exc))
            else:
                report.ok(label, "exists")


# --------------------------------------------------------------------------- 2. calls on GPU-library objects
# Types of attribute values that are not their own class attribute: accessors and indexers. Tried
# in order: cuDF's ``_<attr>_indexer_type``, a pandas-style accessor descriptor, the class a
# property's body constructs; these are the last resort.
ACCESSOR_FALLBACKS: dict[str, tuple[str, ...]] = {
    "cat": ("cudf.core.accessors.categorical.CategoricalAccessor", "cudf.core.column.categorical.CategoricalAccessor"),
}


def resolve_kind(kind: str) -> Any:
    """The class a kind names: ``cudf.DataFrame``, or ``cudf.Series->cat`` (the accessor's class)."""
    owner_path, _, attr = kind.partition(ATTR)
    owner = resolve_dotted(owner_path)
    if not attr:
        return owner
    if kind in ATTRIBUTE_TYPES:
        return resolve_dotted(ATTRIBUTE_TYPES[kind])
    indexer = getattr(owner, f"_{attr}_indexer_type", None)
    if inspect.isclass(indexer):
        return indexer
    try:
        static = inspect.getattr_static(owner, attr)
    except AttributeError:
        raise LookupError(_missing(owner_path, owner, attr)) from None
    accessor = getattr(static, "_accessor", None)
    if inspect.isclass(accessor):
        return accessor
    built = _class_built_by_property(static)
    if built is not None:
        return built
    for candidate in ACCESSOR_FALLBACKS.get(attr, ()):
        try:
            return resolve_dotted(candidate)
        except LookupError:
            continue
    raise LookupError(f"cannot tell the type of {owner_path}.{attr}")


def _class_built_by_property(static: Any) -> type | None:
    """``return CategoricalAccessor(parent=self)`` in a property's body -> that class."""
    fget = getattr(static, "fget", None)
    if fget is None:
        return None
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fget)))
    except (OSError, TypeError, SyntaxError):
        return None
    for node in walk(tree):
        if isinstance(node, ast.Return) and isinstance(node.value, ast.Call):
            parts = _chain(node.value.func)
            if not parts:
                continue
            obj = fget.__globals__.get(parts[0])
            for part in parts[1:]:
                obj = getattr(obj, part, None)
            if inspect.isclass(obj):
                return obj
    return None


def instance_attribute_setter(cls: type, name: str) -> str | None:
    """Where a class (or a base) assigns ``self.<name>``: attributes made in ``__init__`` are not
    on the class, so their existence is read from the source."""
    for klass in getattr(cls, "__mro__", ()):
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError, SyntaxError):
            continue
        for node in walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and node.attr == name
                    and isinstance(node.value, ast.Name) and node.value.id == "self"):
                return f"{klass.__module__}.{klass.__qualname__}"
    return None


def check_member_on(kind: str, site: MemberSite, strict_modules: Sequence[str] = ("cudf",)) -> BindResult:
    """Whether ``site``'s member exists on the type ``kind`` names and, for a call, binds. A keyword
    only ``**kwargs`` takes fails on the strict modules' types (cuDF), and is named elsewhere."""
    try:
        owner = resolve_kind(kind)
    except LookupError as exc:
        return BindResult(False, str(exc))
    name = kind.rpartition(".")[2] if ATTR not in kind else kind
    if not hasattr(owner, site.member):
        setter = None if site.is_call else instance_attribute_setter(owner, site.member)
        if setter:
            return BindResult(True, f"an instance attribute (set in {setter})")
        return BindResult(False, _missing(name, owner, site.member))
    if not site.is_call:
        try:
            what = type(inspect.getattr_static(owner, site.member)).__name__
        except AttributeError:
            what = "attribute"
        return BindResult(True, f"exists ({what})")
    target = getattr(owner, site.member)
    if not callable(target):
        return BindResult(False, f"{name}.{site.member} is a {type(target).__name__}, not callable")
    strict = kind.split(".")[0] in strict_modules
    result = check_bind(target, site.n_args, site.keywords, prepend_self=_needs_self(owner, site.member),
                        allow_var_keyword=not strict, partial=site.star_args or site.star_kwargs)
    if result.ok and result.via_var_keyword:
        return BindResult(True, f"{result.detail}; through **kwargs: {', '.join(result.via_var_keyword)}",
                          result.via_var_keyword, result.checked)
    return result


def check_member_site(site: MemberSite, strict_modules: Sequence[str] = ("cudf",)) -> BindResult:
    """Proven receivers: the member must work on each type. Guessed ones (typed by their name):
    on at least one of them. Under ``hasattr``: a missing member is fine."""
    results = {kind: check_member_on(kind, site, strict_modules) for kind in site.receivers}
    good = [k for k, r in results.items() if r.ok]
    bad = {k: r for k, r in results.items() if not r.ok}
    unchecked = all(not r.checked for r in results.values() if r.ok) and good
    if site.guarded and bad:
        return BindResult(True, f"optional (under hasattr); absent on {', '.join(sorted(bad))}")
    if site.certain and bad:
        return BindResult(False, "; ".join(f"{k}: {r.detail}" for k, r in bad.items()))
    if not good:
        return BindResult(False, "on none of " + "; ".join(f"{k}: {r.detail}" for k, r in bad.items()))
    detail = results[good[0]].detail
    if len(site.receivers) > 1:
        detail = f"{detail} [on {', '.join(_short_type(k) for k in good)}" + (
            f"; not on {', '.join(_short_type(k) for k in bad)}]" if bad else "]")
    return BindResult(True, detail, checked=not unchecked)


def _short_type(kind: str) -> str:
    """``cudf.core.x.DataFrame`` -> ``cudf.DataFrame``; ``cudf.Series->cat`` -> ``cudf.Series.cat``."""
    owner, _, attr = kind.partition(ATTR)
    short = f"{owner.split('.')[0]}.{owner.rpartition('.')[2]}" if "." in owner else owner
    return f"{short}.{attr}" if attr else short


def _is_driver_error(exc: BaseException) -> bool:
    return bool(_NO_DRIVER.search(f"{type(exc).__name__} {exc}"))


def call_on_empty_frame(frame_type: Any, site: MemberSite) -> tuple[bool | None, str]:
    """Make the call for real on an empty frame (cuDF builds one without a GPU).

    (True, how): the arguments were accepted; (False, why): they were refused (a TypeError);
    (None, why): it could not be tried."""
    if site.literal is None or site.member.startswith("__") or not site.is_call:
        return None, "arguments are not constants"
    args_text, kwargs_text = site.literal
    args = [ast.literal_eval(a) for a in args_text]
    kwargs = {k: ast.literal_eval(v) for k, v in kwargs_text}
    try:
        frame = frame_type()
    except Exception as exc:  # noqa: BLE001
        return None, f"no empty frame here ({_first_line(exc)})"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            getattr(frame, site.member)(*args, **kwargs)
    except TypeError as exc:
        return False, _first_line(exc)
    except Exception as exc:  # noqa: BLE001 - what an empty frame or a missing driver raises
        if _is_driver_error(exc):
            return True, "called: arguments accepted, stopped at the driver"
        return True, f"called: arguments accepted ({_first_line(exc)} on an empty frame)"
    return True, "called on an empty frame: ran"


def check_member_sites(report: Report, sites_by_module: Mapping[str, Sequence[MemberSite]],
                       facts: GpuFacts) -> None:
    frame_path = facts.type_of("frame")
    frame_type = None
    with contextlib.suppress(LookupError):
        frame_type = resolve_dotted(frame_path)
    for module, sites in sites_by_module.items():
        if not sites:
            continue
        report.section(f"Calls on cuDF / CuPy / Dask-cuDF objects in {module} (flow scan: {len(sites)} sites)")
        for site in sites:
            who = "|".join(_short_type(k) for k in site.receivers) + ("" if site.certain else "?")
            label = f"line {site.line:<4} {who}{site.describe()}  [{site.written}]"
            result = check_member_site(site, (facts.frame_module,))
            report.record(label, result)
            if result.ok and frame_type is not None and frame_path in site.receivers and site.literal is not None:
                called, how = call_on_empty_frame(frame_type, site)
                if called is True:
                    report.ok(f"line {site.line:<4} {_short_type(frame_path)}(){site.describe()} for real", how)
                    report.made(f"{frame_path}(){site.describe()}: {how}")
                elif called is False:
                    report.fail(f"line {site.line:<4} {_short_type(frame_path)}(){site.describe()} for real", how)


# --------------------------------------------------------------------------- 2b. DLPack, for real
def dlpack_keywords(call_keywords: Sequence[str]) -> tuple[dict[str, Any], str]:
    """The keywords ``torch.from_dlpack`` passes to a CUDA producer's ``__dlpack__``, found by
    calling it on a stand-in that records them (torch asks the current CUDA stream for the
    ``stream`` argument: a stand-in stream answers, so this works on a CPU build of torch)."""
    import torch
    import torch.utils.dlpack
    from unittest import mock

    seen: dict[str, Any] = {}

    class Stop(Exception):
        pass

    class CudaProducer:
        def __dlpack_device__(self) -> tuple[int, int]:
            return (2, 0)                 # kDLCUDA, device 0

        def __dlpack__(self, **kwargs: Any) -> Any:
            seen.setdefault("first", dict(kwargs))
            raise Stop

    class Stream:
        cuda_stream = 0

    values = {"copy": False, "device": None}
    with mock.patch.object(torch.cuda, "current_stream", lambda *a, **k: Stream()):
        try:
            torch.from_dlpack(CudaProducer(), **{k: values.get(k) for k in call_keywords if k in values})
        except Stop:
            pass
    return seen.get("first", {}), f"torch {torch.__version__}"


_DLPACK_PROBE = r"""
import json, sys
import cupy
from cupy._core import core
kwargs = json.loads(sys.argv[1])
if "max_version" in kwargs:
    kwargs["max_version"] = tuple(kwargs["max_version"])
array = core._ndarray_base.__new__(cupy.ndarray)     # no device memory: nothing to allocate
out = {}
for name, call in (("__dlpack__", lambda: array.__dlpack__(**kwargs)), ("__dlpack_device__", array.__dlpack_device__)):
    try:
        call()
        out[name] = ["ran", ""]
    except TypeError as exc:
        out[name] = ["TypeError", str(exc)]
    except Exception as exc:
        out[name] = [type(exc).__name__, str(exc).splitlines()[0] if str(exc) else ""]
print(json.dumps(out))
"""


def call_dlpack(kwargs: Mapping[str, Any]) -> dict[str, tuple[str, str]]:
    """Call ``cupy.ndarray.__dlpack__(**kwargs)`` for real on an array with no memory, in a child
    process (it stops at the driver after parsing its arguments; a refused keyword is a TypeError)."""
    import json
    import subprocess

    proc = subprocess.run([sys.executable, "-c", _DLPACK_PROBE, json.dumps(dict(kwargs))],
                          capture_output=True, text=True, timeout=120)
    if proc.returncode != 0 or not proc.stdout.strip():
        tail = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
        return {"__dlpack__": ("probe failed", tail)}
    return {k: tuple(v) for k, v in json.loads(proc.stdout.strip().splitlines()[-1]).items()}


def check_dlpack(report: Report, sites: Sequence[DlpackSite]) -> None:
    """``torch.from_dlpack`` on CuPy arrays: what torch passes, bound and then called for real."""
    if not sites:
        return
    report.section(f"DLPack hand-off to PyTorch ({len(sites)} call site(s)), called for real")
    for shape in sorted({s.keywords for s in sites}):
        where = ", ".join(f"{s.path}:{s.line}" for s in sites if s.keywords == shape)
        try:
            kwargs, who = dlpack_keywords(shape)
        except ImportError as exc:
            report.fail(f"torch.from_dlpack({', '.join(k + '=' for k in shape)}) [{where}]", _first_line(exc))
            continue
        shown = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
        for producer in sorted({s.producer for s in sites if s.keywords == shape}):
            label = f"{producer}.__dlpack__({shown})  [{who} passes these for from_dlpack({', '.join(k + '=' for k in shape)}) at {where}]"
            try:
                method = resolve_dotted(f"{producer}.__dlpack__")
            except LookupError as exc:
                report.fail(label, str(exc))
                continue
            report.record(label + " binds", check_bind(method, 0, kwargs.keys(), prepend_self=True))
            outcome = call_dlpack(kwargs)
            for name, (what, message) in outcome.items():
                real = f"{producer}.{name}({shown if name == '__dlpack__' else ''}) called for real"
                if what == "TypeError" or what == "probe failed":
                    report.fail(real, f"{what}: {message}")
                elif what == "ran" or _NO_DRIVER.search(f"{what} {message}"):
                    how = "ran" if what == "ran" else f"arguments accepted, stopped at the driver ({what})"
                    report.ok(real, how)
                    report.made(f"{real}: {how}")
                else:
                    report.note(real, f"{what}: {message}")


# --------------------------------------------------------------------------- 2c. Dask-cuDF readers
def check_dask_reads(report: Report, sites: Sequence[DaskReadSite], facts: GpuFacts) -> None:
    """``dd.read_csv``/``read_parquet`` under the cudf Dask backend go to Dask-cuDF's backend
    entry point, which passes what it does not take itself on to ``cudf.read_*``."""
    if not sites:
        return
    report.section(f"Dask readers dispatched to the '{facts.dask_backend}' backend ({len(sites)} call sites)")
    try:
        from dask.dataframe.backends import dataframe_creation_dispatch

        entry = dataframe_creation_dispatch.dispatch(facts.dask_backend)
    except Exception as exc:  # noqa: BLE001
        report.fail(f"Dask backend '{facts.dask_backend}'", _first_line(exc))
        return
    for site in sites:
        label = (f"{site.path}:{site.line} dd.{site.function}(<{site.n_args} args>, "
                 f"{', '.join(k + '=' for k in site.keywords)}) -> {type(entry).__name__}.{site.function}")
        method = getattr(entry, site.function, None)
        if method is None:
            report.fail(label, f"the '{facts.dask_backend}' backend has no {site.function}")
            continue
        result = check_bind(method, site.n_args, site.keywords, allow_var_keyword=True)
        if not result.ok or not result.via_var_keyword:
            report.record(label, result)
            continue
        # What the entry point passes on: to Dask-cuDF's reader, then to cudf.read_*.
        takers = [named_parameters(f) for f in _dask_cudf_readers(facts, site.function)]
        final = f"{facts.frame_module}.{site.function}"
        try:
            takers.append(named_parameters(resolve_dotted(final)))
        except LookupError as exc:
            report.fail(label, str(exc))
            continue
        unknown = [k for k in result.via_var_keyword if not any(k in t for t in takers)]
        report.record(label, BindResult(not unknown, (
            f"{', '.join(unknown)}: taken by neither Dask-cuDF's reader nor {final}" if unknown else
            f"binds; {', '.join(result.via_var_keyword)} passed on to Dask-cuDF / {final}")))


def named_parameters(fn: Any) -> set[str]:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return set()
    return {p.name for p in params if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}


def _dask_cudf_readers(facts: GpuFacts, function: str) -> list[Any]:
    """Dask-cuDF's implementations of a reader (``dask_cudf.io.csv.read_csv``, ``read_parquet_expr``)."""
    found = []
    fmt = function.removeprefix("read_")
    for module, name in ((f"{facts.dask_module}.io.{fmt}", function), (f"{facts.dask_module}.io.{fmt}", f"{function}_expr")):
        with contextlib.suppress(ImportError, AttributeError):
            found.append(getattr(importlib.import_module(module), name))
    return found


# --------------------------------------------------------------------------- 3. models
# Parameters like the ones in configs/churn.yaml.
REPRESENTATIVE_PARAMS: dict[str, dict[str, Any]] = {
    "logistic_regression": {"C": 0.5, "max_iter": 500, "tol": 1e-4},
    "random_forest": {"n_estimators": 300, "min_samples_leaf": 5, "max_features": 0.5, "max_depth": 12},
    "xgboost": {"n_estimators": 300, "learning_rate": 0.05, "max_depth": 4, "subsample": 0.8},
    # lsqr is renamed lsmr for cuML: the value translation is constructed for real.
    "ridge": {"alpha": 0.5, "solver": "lsqr", "tol": 1e-4, "max_iter": 500},
}
# A valid value for every parameter whose name differs between the devices; added to every
# model that has it, so each rename is constructed for real at least once.
RENAMED_PARAM_VALUES: dict[str, Any] = {"criterion": "entropy"}
# Where the task decides which values are valid: a regression forest splits on squared error.
RENAMED_PARAM_VALUES_BY_TASK: dict[str, dict[str, Any]] = {"regression": {"criterion": "squared_error"}}
# Tasks of an entry written before tasks existed (it has no ``tasks`` field): a classifier's.
CLASSIFIER_TASKS = ("binary", "multiclass")

_NO_DRIVER = re.compile(r"cuda|driver|nvml|no (cuda[- ]capable )?device|libcuda|cudart", re.IGNORECASE)


def renamed_params(spec: Any) -> list[str]:
    """Common names that map to a different name on the GPU than on the CPU."""
    return sorted(k for k, (cpu, gpu) in spec.params.items() if cpu and gpu and cpu != gpu)


def representative_params(spec: Any, task: str = "binary") -> dict[str, Any]:
    params = dict(REPRESENTATIVE_PARAMS.get(spec.name, {}))
    values = {**RENAMED_PARAM_VALUES, **RENAMED_PARAM_VALUES_BY_TASK.get(task, {})}
    for key in renamed_params(spec):
        if key in values:
            params.setdefault(key, values[key])
    return params


def task_option(task: str) -> dict[str, str]:
    """``task=`` for a spec's ``class_path``: left out for binary, as the backend does, so a
    plugin's spec written before tasks is checked too."""
    return {} if task == "binary" else {"task": task}


def estimators_by_task(spec: Any, device: str, *, distributed: bool = False) -> list[tuple[tuple[str, ...], str]]:
    """The entry's estimator classes on ``device`` with the tasks each serves, in the order the
    tasks are listed (the classifier for binary and multiclass, a regressor for regression)."""
    grouped: dict[str, list[str]] = {}
    for task in getattr(spec, "tasks", CLASSIFIER_TASKS):
        path = spec.class_path(device, distributed=distributed, **task_option(task))
        if path is not None:
            grouped.setdefault(path, []).append(task)
    return [(tuple(tasks), path) for path, tasks in grouped.items()]


def refused_for_task(spec: Any, task: str) -> list[str]:
    """Parameter names the entry refuses for ``task`` whatever their value (a classifier's
    ``class_weight`` for regression): tried with a placeholder and with None."""
    problems = getattr(spec, "task_problems", None)
    if problems is None:
        return []
    return sorted(key for key in spec.params
                  if problems(task, {key: PLACEHOLDER}) and problems(task, {key: None}))


def scoring_method(tasks: Sequence[str]) -> str:
    """What ``Backend.predict_scores`` calls for these tasks (one estimator class serves
    classification or regression, never both)."""
    return "predict" if "regression" in tasks else "predict_proba"


def translate_for(spec: Any, params: Mapping[str, Any], device: str, task: str, *,
                  distributed: bool = False) -> tuple[dict[str, Any], list[str]]:
    """``spec.translate`` for ``task``, passing the task where the entry's translation takes it."""
    options: dict[str, Any] = {"seed": 42, "distributed": distributed}
    if "task" in inspect.signature(spec.translate).parameters:
        options["task"] = task
    return spec.translate(params, device, **options)


def named_init_params(cls: type) -> set[str]:
    """Parameter names declared by ``__init__`` along the MRO (for classes that pass **kwargs up).

    XGBClassifier's own ``__init__`` takes ``objective, **kwargs``; the names live on
    XGBModel's. A keyword absorbed by ``**kwargs`` must be declared somewhere on the way up.
    """
    names: set[str] = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        try:
            params = inspect.signature(init).parameters.values()
        except (TypeError, ValueError):
            continue
        names |= {p.name for p in params if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and p.name != "self"}
    return names


def forwarded_to_workers(cls: type) -> set[str]:
    """Keywords a local Dask cluster passes on: ``LocalCluster`` (``LocalCUDACluster`` too) hands
    those it does not declare to each worker's ``Nanny``, which hands its leftovers to the
    ``Worker`` (``preload``, for one)."""
    try:
        from distributed import LocalCluster, Nanny, Worker
    except ImportError:
        return set()
    if isinstance(cls, type) and issubclass(cls, LocalCluster):
        return named_init_params(Nanny) | named_init_params(Worker)
    return set()


def _bind_constructor(cls: type, kwargs: Mapping[str, Any]) -> BindResult:
    result = check_bind(cls, 0, kwargs.keys(), allow_var_keyword=True)
    if result.ok and result.via_var_keyword:
        unknown = sorted(set(result.via_var_keyword) - named_init_params(cls) - forwarded_to_workers(cls))
        if unknown:
            return BindResult(False, f"{', '.join(unknown)}: accepted only through **kwargs and declared by no "
                                     f"__init__ in {cls.__name__}'s MRO", result.via_var_keyword)
        return BindResult(True, f"binds ({len(result.via_var_keyword)} via **kwargs, declared up the MRO)",
                          result.via_var_keyword)
    return result


def _same_value(a: Any, b: Any) -> bool:
    if a is b:
        return True
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - exotic __eq__
        return False


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


def _import_class(report: Report, class_path: str, label: str) -> type | None:
    """The class at ``module:Class``, or None after reporting why it does not import."""
    module_name, _, class_name = class_path.partition(":")
    try:
        return getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        report.fail(f"{label} import", _first_line(exc))
        return None


def check_model(report: Report, spec: Any, device: str) -> None:
    """Every estimator class of the entry on ``device``, each for the tasks it serves."""
    found = estimators_by_task(spec, device)
    if not found:
        report.note(f"{spec.name} [{device}]", "no estimator on this device in the registry")
    for tasks, class_path in found:
        check_task_estimator(report, spec, device, tasks, class_path)


def check_task_estimator(report: Report, spec: Any, device: str, tasks: Sequence[str], class_path: str) -> None:
    module_name, _, class_name = class_path.partition(":")
    task = tasks[0]
    prefix = f"{spec.name} [{device}, {'/'.join(tasks)}] {module_name}.{class_name}"
    cls = _import_class(report, class_path, prefix)
    if cls is None:
        return

    # Every parameter the registry maps for this device and task, by name (values do not matter to
    # bind); a name the entry's task rules refuse whatever its value never reaches the estimator.
    refused = refused_for_task(spec, task)
    if refused:
        report.note(f"{prefix} refused for {task}", f"{', '.join(refused)} (the entry's task rules; not bound)")
    placeholders = {k: PLACEHOLDER for k in spec.params if k not in refused}
    try:
        everything, dropped = translate_for(spec, placeholders, device, task)
    except ValueError:
        # The entry's value rewrite refuses a placeholder (it checks values): names alone bind.
        import dataclasses

        everything, dropped = translate_for(dataclasses.replace(spec, adapt_params=None), placeholders, device, task)
    result = _bind_constructor(cls, everything)
    detail = result.detail + (f"; not on {device}: {', '.join(sorted(dropped))}" if dropped else "")
    report.record(f"{prefix} all {len(everything)} mapped params bind", BindResult(result.ok, detail, checked=result.checked))
    accepted = named_init_params(cls)
    for common in sorted(dropped):
        other = next((name for name in spec.params[common] if name), common)
        if other in accepted:
            report.note(f"{prefix} registry drops '{common}'", f"but {class_name} accepts '{other}' on {device} "
                                                               f"(the registry's mapping is {spec.params[common]})")

    # Representative values: construct and round-trip through get_params().
    params = representative_params(spec, task)
    missing = [k for k in renamed_params(spec) if k not in params]
    if missing:
        report.fail(f"{prefix} representative params", f"no value for renamed param(s) {missing}: add them to "
                                                        "RENAMED_PARAM_VALUES")
    kwargs, _ = translate_for(spec, params, device, task)
    shown = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
    bound = _bind_constructor(cls, kwargs)
    report.record(f"{prefix}({shown}) binds", bound)
    if bound.ok:
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                estimator = cls(**kwargs)
        except TypeError as exc:
            report.fail(f"{prefix} constructed", _first_line(exc))
            estimator = None
        except Exception as exc:  # noqa: BLE001 - driver errors come in many types
            if device == "gpu" and _NO_DRIVER.search(f"{type(exc).__name__} {exc}"):
                report.note(f"{prefix} constructed", f"skipped (no driver: {_first_line(exc)})")
            else:
                report.fail(f"{prefix} constructed", _first_line(exc))
            estimator = None
        if estimator is not None:
            for w in caught:
                report.note(f"{prefix} construction warning", f"{w.category.__name__}: {str(w.message).splitlines()[0]}")
            got = estimator.get_params(deep=False)
            lost = {k: got.get(k, "<absent>") for k, v in kwargs.items() if k not in got or not _same_value(got[k], v)}
            if lost:
                report.fail(f"{prefix} get_params() round-trip", f"differs for {lost}")
            else:
                report.ok(f"{prefix} constructed; get_params() round-trips {len(kwargs)} params")
                if device == "gpu":
                    report.made(f"{prefix}({shown}): constructed, get_params() round-trips")

    # What train_model and Backend.predict_scores call on the estimator.
    # The keywords the entry's fit_kwargs gives a fit with valid rows and a categorical column.
    from pipeline.models import FitInputs

    fit_kwargs = tuple(spec.fit_kwargs(FitInputs(eval_set=("<X>", "<y>"), categorical=(0,))))
    for method, n_args, keywords in (("fit", 2, fit_kwargs), (scoring_method(tasks), 1, ())):
        label = f"{prefix}.{method}({', '.join(['<X>', '<y>'][:n_args] + [k + '=' for k in keywords])})"
        if not hasattr(cls, method):
            report.fail(label, f"{class_name} has no {method}")
            continue
        report.record(label, check_bind(getattr(cls, method), n_args, keywords,
                                        prepend_self=_needs_self(cls, method)))
    format_name = getattr(spec.format, "name", None)
    if device == "gpu" and format_name == "skops":
        check_portable_estimator(report, spec, cls, prefix, spec.class_path("cpu", **task_option(task)))
    if format_name == "linear-coefficients":
        check_coefficient_attributes(report, cls, prefix)


def check_coefficient_attributes(report: Report, cls: type, prefix: str) -> None:
    """What the linear-coefficients format reads of a fitted estimator: ``coef_`` and
    ``intercept_`` (cuML declares them on the class; scikit-learn documents them)."""
    if cls.__module__.split(".")[0] != "cuml":
        return
    missing = [name for name in ("coef_", "intercept_") if not hasattr(cls, name)]
    if missing:
        report.fail(f"{prefix} coef_, intercept_", f"{cls.__name__} declares no {', '.join(missing)}: the "
                                                   "linear-coefficients format cannot export it")
    else:
        report.ok(f"{prefix} coef_, intercept_", "declared (the linear-coefficients format reads them)")


def check_portable_estimator(report: Report, spec: Any, cls: type, prefix: str, cpu_path: str | None) -> None:
    """What the skops format asks of the GPU backend: the estimator converts to its scikit-learn
    twin (``as_sklearn``) at export and back (``from_sklearn``) for scoring, and the backend finds
    this class as the twin of the registry's CPU class (through cuML's ``_cpu_class_path``)."""
    from cuml.internals import interop

    from pipeline.backends.gpu import _cuml_twin

    # What GpuBackend imports from there: the mixin and the exceptions around the two conversions.
    missing = [name for name in ("InteropMixin", "UnsupportedOnCPU", "UnsupportedOnGPU") if not hasattr(interop, name)]
    if missing:
        report.fail(f"{prefix} cuml.internals.interop", f"has no {', '.join(missing)}")
        return
    if not issubclass(cls, interop.InteropMixin):
        report.fail(f"{prefix} converts to scikit-learn", "not a cuML InteropMixin: no as_sklearn/from_sklearn, so "
                                                          "its model file cannot be stored in the skops format")
        return
    report.record(f"{prefix}.as_sklearn()", check_bind(cls.as_sklearn, 0, prepend_self=True))
    report.record(f"{prefix}.from_sklearn(<model>)", check_bind(cls.from_sklearn, 1))
    cpu = _import_class(report, cpu_path, f"{spec.name} [cpu] {cpu_path}") if cpu_path else None
    if cpu is None:
        return
    twin = _cuml_twin(cpu)
    if twin is cls:
        report.ok(f"{prefix} is the backend's twin of {cpu.__module__}.{cpu.__name__}")
    else:
        report.fail(f"{prefix} is the backend's twin of {cpu.__module__}.{cpu.__name__}",
                    f"GpuBackend.from_portable_estimator finds {twin!r}")


def check_models(report: Report, devices: Sequence[str] = ("gpu", "cpu")) -> None:
    from pipeline.models import get_model_spec, trainable_models
    from pipeline.core.plugins import load_plugins

    load_plugins()            # models of $PIPELINE_PLUGINS and installed plugins are checked too
    # Only entries with estimator classes: the MLP is an entry for its file format alone.
    names = trainable_models()
    report.section(f"Registry models ({', '.join(names)}) on {' and '.join(devices)}")
    for name in names:
        for device in devices:
            check_model(report, get_model_spec(name), device)


# --------------------------------------------------------------------------- 4. backend import
def check_backend(report: Report) -> None:
    report.section("GPU backend loads on this machine")

    try:
        from pipeline.backends import get_backend

        backend = get_backend("gpu")
    except Exception as exc:  # noqa: BLE001
        report.fail('get_backend("gpu")', _first_line(exc))
        return
    import cudf
    import cupy

    report.ok('get_backend("gpu")', repr(backend))
    for attr, expected in (("frame", cudf), ("array", cupy)):
        if getattr(backend, attr) is expected:
            report.ok(f"backend.{attr}", expected.__name__)
        else:
            report.fail(f"backend.{attr}", f"is {getattr(backend, attr)!r}, expected {expected.__name__}")
    from pipeline.backends.devices.detect import module_distributions

    recorded = backend.versions()
    for module in backend._distributions:
        builds = [d.name for d in module_distributions(module, provided={})]
        if len(builds) == 1 and builds[0] in recorded:
            report.ok(f"manifest version of {module}", f"{builds[0]} {recorded[builds[0]]}")
        else:
            report.fail(f"manifest version of {module}",
                        f"installed as {builds or 'nothing the backend knows'}; versions() records {sorted(recorded)}")


def check_distributed(report: Report) -> None:
    """LocalCUDACluster's options and the Dask estimators for partitioned data (cuml.dask
    needs raft-dask, which the gpu extra installs)."""
    report.section("Dask-CUDA cluster and distributed estimators")
    from pipeline.backends.clusters.startup import local_cuda_cluster_options
    from pipeline.config.schema import ClusterConfig
    from pipeline.models import MODELS

    full = ClusterConfig(n_workers=2, CUDA_VISIBLE_DEVICES="0,1", rmm_pool_size="8GB", device_memory_limit="20GB",
                         enable_cudf_spill=True, protocol="ucx", memory_limit="32GiB")
    try:
        from dask_cuda import LocalCUDACluster
    except ImportError as exc:
        report.fail("dask_cuda.LocalCUDACluster import", _first_line(exc))
    else:
        options = local_cuda_cluster_options(full)
        # `resources` rides LocalCluster's **worker_kwargs to each worker (a Nanny): check it there.
        worker_options = {k: options.pop(k) for k in ("resources",) if k in options}
        report.record(f"LocalCUDACluster({', '.join(sorted(options))})", _bind_constructor(LocalCUDACluster, options))
        from distributed import Nanny

        report.record(f"distributed.Nanny({', '.join(worker_options)}) [LocalCluster worker_kwargs]",
                      _bind_constructor(Nanny, worker_options))
    for spec in MODELS.values():
        for tasks, path in estimators_by_task(spec, "gpu", distributed=True):
            check_distributed_estimator(report, spec, tasks, path)


def check_distributed_estimator(report: Report, spec: Any, tasks: Sequence[str], path: str) -> None:
    """One Dask estimator of an entry on GPUs, for the tasks it serves."""
    module_name, _, class_name = path.partition(":")
    task = tasks[0]
    label = f"{spec.name} [gpu, partitioned, {'/'.join(tasks)}] {module_name}.{class_name}"
    cls = _import_class(report, path, label)
    if cls is None:
        return
    kwargs, _ = translate_for(spec, representative_params(spec, task), "gpu", task, distributed=True)
    own = {k: v for k, v in kwargs.items() if k in named_init_params(cls)}
    forwarded = {k: v for k, v in kwargs.items() if k not in own}
    report.record(f"{label}({', '.join(sorted(own))})", _bind_constructor(cls, own))
    local_path = spec.class_path("gpu", **task_option(task))
    if forwarded and local_path:
        # cuml.dask passes the rest through **kwargs to the single-GPU estimator on each worker.
        local_module, _, local_name = local_path.partition(":")
        local = getattr(importlib.import_module(local_module), local_name)
        report.record(f"{label} forwards ({', '.join(sorted(forwarded))}) to {local_module}.{local_name}",
                      _bind_constructor(local, forwarded))
    for method, n_args in (("fit", 2), (scoring_method(tasks), 1)):
        target = getattr(cls, method, None)
        if target is None:
            report.fail(f"{label}.{method}", f"{class_name} has no {method} (scoring needs it)")
        else:
            report.record(f"{label}.{method}", check_bind(target, n_args, prepend_self=True))
    if path.startswith("cuml."):
        construct_on_local_cluster(report, label, cls, kwargs)


def construct_on_local_cluster(report: Report, label: str, cls: type, kwargs: Mapping[str, Any]) -> None:
    """Construct a cuml.dask estimator for real: it builds the single-GPU estimator on each worker,
    which needs no GPU, so an in-process cluster of one worker shows the forwarded parameters
    land (``get_params()`` per worker)."""
    from distributed import Client, LocalCluster

    cluster = client = None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # In-process workers talking over inproc: no process, no socket.
            cluster = LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None)
            client = Client(cluster)
            estimator = cls(client=client, **kwargs)
            got = estimator.get_params()
            del estimator                  # it holds the workers' models: release them before closing
    except Exception as exc:  # noqa: BLE001 - a worker's construction fails in many ways
        if _is_driver_error(exc):
            report.note(f"{label} constructed on a local cluster", f"skipped (no driver: {_first_line(exc)})")
        else:
            report.fail(f"{label} constructed on a local cluster", _first_line(exc))
        return
    finally:
        for closable in (client, cluster):
            if closable is not None:
                closable.close()
    workers = got if isinstance(got, list) else [got]
    lost = {k: [w.get(k, "<absent>") for w in workers] for k, v in kwargs.items()
            if any(k not in w or not _same_value(w[k], v) for w in workers)}
    construct = f"{label}(client=, {', '.join(sorted(kwargs))}) constructed on a local cluster"
    if lost:
        report.fail(construct, f"the workers' estimators differ for {lost}")
    else:
        how = f"each worker's estimator has the {len(kwargs)} params"
        report.ok(construct, how)
        report.made(f"{construct}: {how}")


# --------------------------------------------------------------------------- 5. XGBoost build
def check_xgboost_build(report: Report) -> None:
    """The registry runs XGBoost with device="cuda" on the GPU: the installed XGBoost must be a
    CUDA build (``xgboost-cpu`` accepts the parameter and trains on the CPU)."""
    import xgboost

    from pipeline.models import MODELS

    report.section(f"XGBoost {xgboost.__version__} build")
    info = xgboost.build_info()
    cuda_models = sorted(name for name, spec in MODELS.items()
                         if str(spec.gpu_defaults.get("device", "")).startswith("cuda"))
    if cuda_models:
        ok = bool(info.get("USE_CUDA"))
        report.record(f"USE_CUDA (models with device='cuda' on the GPU: {', '.join(cuda_models)})",
                      BindResult(ok, f"CUDA {'.'.join(map(str, info.get('CUDA_VERSION') or []))}" if ok
                                 else "this XGBoost is a CPU build: device='cuda' would train on the CPU"))
    report.ok("USE_RMM", f"{bool(info.get('USE_RMM'))} (external-memory training asks XGBoost for RMM only where it has it)")


def check_ddp(report: Report) -> None:
    """The torch stage's DDP on GPUs, through its own code: a CUDA rank job asks for NCCL, local
    rank r trains on ``cuda:r``, a LocalCUDACluster worker sees its own GPU as device 0 (so a
    rank there trains on ``cuda:current_device()``), ranks go to the workers that advertise a
    GPU, and the calls a rank makes bind on the installed torch."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from pipeline.backends.clusters.startup import GPU_RESOURCE, local_cuda_cluster_options
    from pipeline.config.schema import ClusterConfig
    from pipeline.distributed import torch_ddp
    from pipeline.tensors.mlp import MLPArchitecture
    from pipeline.tensors.objectives import Objective
    from pipeline.tensors.fit_loop import FitOptions

    report.section(f"PyTorch {torch.__version__} DDP on GPUs")
    cuda = torch.device("cuda")
    import numpy as np

    shard = torch_ddp.ArraySplit(x=np.zeros((8, 2), "float32"), y=np.zeros(8, "int8"))
    shards = [torch_ddp.RankShard(r, shard, None) for r in range(2)]
    job = torch_ddp._job(MLPArchitecture(n_features=2, continuous_index=[0, 1]), Objective(), FitOptions(),
                         shards, cuda, torch_ddp.Placement("local", 2), ("file", "rendezvous"))
    report.record("a rank job on cuda uses NCCL", BindResult(job.backend == "nccl", f"backend {job.backend!r}"))
    devices = [str(torch_ddp._local_device(cuda, r)) for r in range(3)]
    report.record("local rank r trains on cuda:r", BindResult(devices == ["cuda:0", "cuda:1", "cuda:2"], str(devices)))
    try:
        from dask_cuda.utils import cuda_visible_devices
    except ImportError as exc:
        report.fail("dask_cuda.utils.cuda_visible_devices import", _first_line(exc))
    else:
        seen = [str(cuda_visible_devices(i, range(4))).split(",")[0] for i in range(4)]
        report.record("a LocalCUDACluster worker's own GPU is first in its CUDA_VISIBLE_DEVICES (its device 0)",
                      BindResult(seen == ["0", "1", "2", "3"], f"first visible per worker: {seen}"))
    resources = local_cuda_cluster_options(ClusterConfig(n_workers=2)).get("resources") or {}
    report.record("LocalCUDACluster workers advertise the GPU resource the ranks are placed by",
                  BindResult(GPU_RESOURCE in resources, f"resources {resources}"))
    report.record("DistributedDataParallel(module, device_ids=[device])",
                  check_bind(DistributedDataParallel.__init__, 1, ("device_ids",), prepend_self=True))
    report.record("dist.init_process_group(backend, store=, rank=, world_size=, timeout=)",
                  check_bind(dist.init_process_group, 1, ("store", "rank", "world_size", "timeout")))
    report.record("dist.TCPStore(host, port, is_master=, wait_for_workers=, timeout=)",
                  check_bind(dist.TCPStore, 2, ("is_master", "wait_for_workers", "timeout")))
    report.record("dist.FileStore(path, world_size)", check_bind(dist.FileStore, 2))
    report.record("torch.cuda.set_device(device)", check_bind(torch.cuda.set_device, 1))
    if dist.is_nccl_available():
        report.ok("NCCL", f"available in torch {torch.__version__} (CUDA {torch.version.cuda})")
    else:
        report.note("NCCL", f"not in this torch build ({torch.__version__}); a GPU image's CUDA build has it "
                            "(the GPU kit's torch_ddp probe runs it)")


# --------------------------------------------------------------------------- coverage
def print_coverage(report: Report, scans: Sequence[ModuleScan]) -> int:
    """One line per module with call sites; a module that imports a GPU library but yields no
    site is a failure (the scan missed it). Returns the number of call sites."""
    covered = [s for s in scans if s.total]
    total = sum(s.total for s in covered)
    print(f"\nCoverage: call sites checked per module ({len(covered)} of {len(scans)} modules scanned have some)")
    width = max((len(s.path) for s in covered), default=20)
    for scan in covered:
        parts = ", ".join(f"{n} {what}" for what, n in scan.counts().items() if n)
        print(f"  {scan.path:<{width}} {scan.total:>4}  ({parts})")
    for scan in scans:
        if scan.imports_library and not scan.total:
            report.fail(f"coverage {scan.path}", "imports a GPU library but no call site was found in it")
    print(f"{total} call sites checked in {len(covered)} modules")
    return total


# --------------------------------------------------------------------------- main
def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", type=Path, help="Python files to scan (default: every module of "
                        "pipeline/ and scripts/gpu_kit/)")
    parser.add_argument("-q", "--quiet", action="store_true", help="print failures and notes only")
    args = parser.parse_args(argv)

    # Check this checkout's code, whatever is installed in the venv.
    sys.path.insert(0, str(REPO))
    missing = []
    for module in ("cudf", "cupy", "cuml"):
        try:
            importlib.import_module(module)
        except ImportError as exc:
            missing.append(f"{module} ({exc})")
    if missing:
        print(f"RAPIDS is not importable here: {'; '.join(missing)}.\n"
              "Run this in the GPU-API virtualenv: make check-gpu", file=sys.stderr)
        return 2
    import cudf
    import cuml
    import cupy

    print(f"cudf {cudf.__version__}, cuml {cuml.__version__}, cupy {cupy.__version__}, python {sys.version.split()[0]}")
    report = Report(verbose=not args.quiet)
    facts = read_gpu_facts()
    scans = scan_package([p.resolve() for p in args.files] or None, facts)
    check_call_sites(report, scans, strict_modules=(facts.frame_module,))
    check_member_sites(report, {s.path: s.members for s in scans}, facts)
    check_dlpack(report, [d for s in scans for d in s.dlpack])
    check_dask_reads(report, [d for s in scans for d in s.dask_reads], facts)
    check_subclasses(report, [d for s in scans for d in s.subclasses])
    check_class_paths(report, [d for s in scans for d in s.class_paths])
    check_distribution_names(report, [d for s in scans for d in s.distributions])
    check_models(report)
    check_distributed(report)
    check_xgboost_build(report)
    check_ddp(report)
    check_backend(report)

    if report.called:
        print(f"\nMade for real without a GPU ({len(report.called)}):")
        for line in report.called:
            print(f"  - {line}")
    if report.notes:
        print(f"\nNotes ({len(report.notes)}):")
        for line in report.notes:
            print(f"  - {line}")
    sites = print_coverage(report, scans)
    if report.failed:
        print(f"\nFailures ({len(report.failed)}):")
        for line in report.failed:
            print(f"  - {line}")
    print(f"\n{sites} call sites checked in {sum(1 for s in scans if s.total)} modules; "
          f"{report.passed} passed, {len(report.failed)} failed")
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
