#!/usr/bin/env python3
"""GPU-API conformance check: does our GPU code bind to the installed RAPIDS, without a GPU?

The RAPIDS wheels install and import on a machine with no NVIDIA driver; only data operations
need one. So this script, run in a virtualenv with the ``gpu`` extra (``make check-gpu``),
checks everything that can be checked before a GPU is involved:

1. A static scan (``ast``) of the GPU backend: every call or attribute reference rooted at a
   cuDF / CuPy / cuML / Dask-CUDA import is resolved on the installed library and, for calls,
   bound to its signature with placeholder arguments. The scan finds the call sites itself, so
   it stays in sync with the code.
2. Method calls on cuDF objects, whose receiver type a static scan cannot know, through the
   short table ``CUDF_METHOD_CALLS`` that mirrors the calls the shared code makes when the
   backend's frame module is cudf.
3. Every registry model: parameters translated for each device bind to the estimator's
   constructor, the estimator constructs, ``get_params()`` returns what was passed, and
   ``fit`` / ``predict_proba`` take the arguments ``train`` and the backend give them.
4. ``get_backend("gpu")`` loads on this CPU-only machine.

It prints one line per check and ``N passed, M failed``; the exit status is 1 if anything
failed, 2 if RAPIDS is not installed here. Nothing at module level imports RAPIDS, so the
scanner and the bind checker are unit-tested in the CPU-only dev environment.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import importlib
import inspect
import re
import sys
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
GPU_BACKEND = REPO / "pipeline" / "backends" / "gpu.py"

# Top-level modules whose API this check verifies.
GPU_MODULES = ("cudf", "cupy", "cuml", "dask_cuda", "dask_cudf")


# --------------------------------------------------------------------------- static scan
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
    for node in ast.walk(tree):
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


def scan_source(source: str, path: str = "<string>", modules: Sequence[str] = GPU_MODULES) -> list[CallSite]:
    """Every call and attribute reference rooted at a GPU-module alias, in source order.

    Only maximal chains count: ``cp.cuda.runtime.memGetInfo()`` is one call site, not four.
    A bare alias (``frame = cudf``) is not a site: importing the module checks it.
    """
    tree = ast.parse(source, filename=path)
    aliases = gpu_aliases(tree, modules)
    parents: dict[ast.AST, ast.AST] = {}
    for parent in ast.walk(tree):
        for child in ast.iter_child_nodes(parent):
            parents[child] = parent

    sites: list[CallSite] = []
    for node in ast.walk(tree):
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
        dotted = ".".join([aliases[parts[0]], *parts[1:]])
        written = ".".join(parts)
        if isinstance(parent, ast.Call) and parent.func is node:
            n_args, star_args = 0, False
            for arg in parent.args:
                if isinstance(arg, ast.Starred):
                    star_args = True
                    break
                n_args += 1
            sites.append(CallSite(
                path=path, line=node.lineno, dotted=dotted, source=written, is_call=True,
                n_args=n_args, keywords=tuple(k.arg for k in parent.keywords if k.arg is not None),
                star_args=star_args, star_kwargs=any(k.arg is None for k in parent.keywords),
            ))
        elif isinstance(node, ast.Attribute):
            sites.append(CallSite(path=path, line=node.lineno, dotted=dotted, source=written, is_call=False))
    sites.sort(key=lambda s: (s.line, s.dotted))
    return sites


def scan_file(path: Path, modules: Sequence[str] = GPU_MODULES) -> list[CallSite]:
    try:
        shown = str(path.relative_to(REPO))
    except ValueError:
        shown = str(path)
    return scan_source(path.read_text(encoding="utf-8"), shown, modules)


def default_scan_targets(root: Path = REPO / "pipeline") -> list[Path]:
    """The GPU backend, plus any other module of the package that imports a GPU library.

    Today that is only ``backends/gpu.py``; a Dask-CUDA cluster factory added later is picked
    up without editing this script.
    """
    targets = [GPU_BACKEND]
    for path in sorted(root.rglob("*.py")):
        if path.resolve() == GPU_BACKEND.resolve():
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        except SyntaxError:
            continue
        if gpu_aliases(tree):
            targets.append(path)
    return targets


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

    def record(self, label: str, result: BindResult) -> None:
        if not result.ok:
            self.fail(label, result.detail)
            return
        self.ok(label, result.detail)
        if not result.checked:
            self.notes.append(f"{label}: {result.detail}")


# --------------------------------------------------------------------------- 1. static scan
def check_call_sites(report: Report, paths: Sequence[Path]) -> None:
    for path in paths:
        sites = scan_file(path)
        report.section(f"GPU-library calls in {sites[0].path if sites else path} (static scan: {len(sites)} sites)")
        refs: dict[str, list[int]] = {}
        for site in sites:
            if not site.is_call:
                refs.setdefault(site.dotted, []).append(site.line)
                continue
            label = f"line {site.line:<4} {site.describe()}"
            try:
                obj = resolve_dotted(site.dotted)
            except LookupError as exc:
                report.fail(label, str(exc))
                continue
            owner_name, _, attr = site.dotted.rpartition(".")
            owner = resolve_dotted(owner_name) if owner_name else None
            result = check_bind(
                obj, site.n_args, site.keywords,
                prepend_self=bool(owner_name) and _needs_self(owner, attr),
                partial=site.star_args or site.star_kwargs,
            )
            report.record(label, result)
        for dotted, lines in refs.items():
            label = f"line {','.join(map(str, lines))} {dotted} (reference)"
            try:
                resolve_dotted(dotted)
            except LookupError as exc:
                report.fail(label, str(exc))
            else:
                report.ok(label, "exists")


# --------------------------------------------------------------------------- 2. cuDF methods
@dataclass(frozen=True)
class MethodCall:
    """A call (or attribute read) on an object of a GPU-library type, as the code makes it.

    ``owner`` lists candidate dotted paths of the type (first one that resolves wins: cuDF
    moves private classes between releases); ``member`` may be dotted (``cat`` then the
    accessor's ``codes``: give the accessor class as owner instead).
    """

    owner: tuple[str, ...]
    member: str
    n_args: int = 0
    keywords: tuple[str, ...] = ()
    where: str = ""
    attribute: bool = False          # only checks that it exists (properties, data attributes)
    allow_var_keyword: bool = False  # e.g. DataFrame.assign(**columns)


def _m(owner: str | tuple[str, ...], member: str, n_args: int = 0, keywords: tuple[str, ...] = (),
       where: str = "", **kw: Any) -> MethodCall:
    return MethodCall((owner,) if isinstance(owner, str) else owner, member, n_args, keywords, where, **kw)


_DF, _S = "cudf.DataFrame", "cudf.Series"
_CAT_ACCESSOR = ("cudf.core.accessors.categorical.CategoricalAccessor",
                 "cudf.core.column.categorical.CategoricalAccessor")

# Mirrors the calls that reach cuDF through ``self.frame`` / frames of the GPU backend, in
# backends/base.py and gpu.py, features/ops.py, features/workflow.py, stages/split.py and
# stages/features.py. Keep it in step with that code (each row says where the call is).
CUDF_METHOD_CALLS: tuple[MethodCall, ...] = (
    # backends/gpu.py (receivers the static scan cannot type)
    _m(_DF, "astype", 1, where="base.read: frame.astype(dict)"),
    _m(_DF, "to_cupy", 0, ("dtype",), where="gpu.to_matrix: .to_cupy(dtype=np.dtype(dtype))"),
    _m(_DF, "to_pandas", where="gpu.to_host"),
    _m(_S, "to_pandas", where="gpu.to_host"),
    _m(_S, "astype", 1, where="gpu.category_codes (CategoricalDtype, 'int32'); ops; split.binary_labels"),
    _m(_S, "to_cupy", 0, ("dtype", "copy"), where="gpu.to_vector: series.to_cupy(dtype=..., copy=True)"),
    _m(_DF, "iloc", where="gpu.take: frame.iloc[...]", attribute=True),
    # cuDF's iloc property returns self._iloc_indexer_type(self); its __getitem__ takes the positions.
    _m(_DF, "_iloc_indexer_type.__getitem__", 1, where="gpu.take: frame.iloc[cp.asarray(positions)]"),
    _m(_DF, "reset_index", 0, ("drop",), where="gpu.take; base.apply_filters: .reset_index(drop=True)"),
    _m("cupy", "asarray", 1, where="base.asarray: self.array.asarray(values)"),
    # backends/base.py
    _m(_DF, "columns", where="base.read/apply_filters, ops.check_columns: frame.columns", attribute=True),
    _m(_DF, "__getitem__", 1, where="frame[col], frame[list], frame[mask]"),
    _m(_DF, "to_parquet", 1, ("index",), where="base.write_parquet: frame.to_parquet(path, index=False)"),
    _m(_S, "cat", where="gpu.category_codes: .cat.codes", attribute=True),
    _m(_CAT_ACCESSOR, "codes", where="gpu.category_codes: series.astype(dtype).cat.codes", attribute=True),
    _m(_S, "__add__", 1, where="gpu.category_codes: codes + 1"),
    _m(_S, "isin", 1, where="base.apply_filters; ops.OneHot: series.isin(list)"),
    _m(_S, "fillna", 1, where="base.apply_filters: mask.fillna(False); ops: fillna(value); gpu.category_codes: fillna(-1)"),
    *(_m(_S, op, 1, where="base.apply_filters comparisons; ops.OneHot: series == cat")
      for op in ("__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__")),
    _m(_S, "__and__", 1, where="base.apply_filters: mask & cond"),
    _m(_S, "__or__", 1, where="ops.OneHot: series.isin(cats) | series.isna()"),
    _m(_S, "__invert__", 0, where="base.apply_filters / ops.OneHot: ~mask"),
    _m(_S, "dtype", where="base.is_numeric: series.dtype", attribute=True),
    # features/ops.py
    _m(_S, "value_counts", 0, ("dropna",), where="ops.FillMissing/OneHot/Categorify statistics: value_counts(dropna=True)"),
    _m(_S, "isna", where="ops.FillMissing/OneHot, split.binary_labels"),
    _m(_S, "median", where="ops.FillMissing: series.median()"),
    _m(_S, "mean", where="ops.FillMissing/Standardize: series.mean()"),
    _m(_S, "std", 0, ("ddof",), where="ops.Standardize: series.std(ddof=0)"),
    _m(_S, "min", where="ops.Log1p.fit: frame[col].min()"),
    _m(_S, "__sub__", 1, where="ops.Standardize: x - mean"),
    _m(_S, "__truediv__", 1, where="ops.Standardize: (x - mean) / std"),
    _m(_S, "__array_ufunc__", 2, where="ops.Log1p: np.log1p(cudf.Series) dispatches here"),
    _m("cupy", "log1p", 1, where="cudf.Series.__array_ufunc__ forwards np.log1p to cupy.log1p"),
    _m(_DF, "drop", 0, ("columns",), where="ops._replace_columns/Drop, stages.features: drop(columns=)"),
    _m(_DF, "index", where="ops._replace_columns: index=frame.index", attribute=True),
    _m("cudf", "DataFrame", 1, ("index",), where="ops._replace_columns: DataFrame(new, index=frame.index)"),
    _m("cudf", "concat", 1, ("axis",), where="ops._replace_columns: concat([kept, added], axis=1)"),
    # features/workflow.py
    _m(_DF, "isna", where="workflow._check_no_missing: frame.isna().sum()"),
    _m(_DF, "sum", where="workflow._check_no_missing: frame.isna().sum()"),
    # stages/split.py
    _m(_S, "any", where="split.binary_labels: series.isna().any()"),
    _m(_S, "sum", where="split.binary_labels: series.isna().sum()"),
    _m(_S, "unique", where="split.binary_labels: series.unique()"),
    _m(_DF, "assign", 0, ("Churn",), where="split.split_frame: frame.assign(**{target: labels})",
       allow_var_keyword=True),
    _m(_DF, "__len__", where="split.SplitData.sizes: len(frame)"),
    # the PyTorch hand-off (backends/gpu.py to_torch/data_address, tensors/handoff.py)
    _m("cupy.ndarray", "__dlpack__", 0, ("stream", "max_version", "copy"),
       where="gpu.to_torch: torch.from_dlpack(array, copy=False) calls __dlpack__(stream=, max_version=, copy=)"),
    _m("cupy.ndarray", "__dlpack_device__", 0, where="torch.from_dlpack: the producer's device"),
    _m("cupy.ndarray", "data", where="gpu.data_address: array.data.ptr", attribute=True),
    _m("cupy.cuda.MemoryPointer", "ptr", where="gpu.data_address: array.data.ptr", attribute=True),
    _m("cupy.ndarray", "strides", where="handoff._unshareable: array.strides", attribute=True),
    _m("cupy", "array", 1, ("dtype", "copy"),
       where="handoff.to_torch fallback: backend.array.array(array, dtype=..., copy=True)"),
)


def check_method_calls(report: Report, table: Sequence[MethodCall] = CUDF_METHOD_CALLS) -> None:
    report.section(f"Calls on cuDF / CuPy objects (table of {len(table)})")
    for call in table:
        owner, owner_name, errors = None, "", []
        for candidate in call.owner:
            try:
                owner, owner_name = resolve_dotted(candidate), candidate
                break
            except LookupError as exc:
                errors.append(str(exc))
        args = [f"<{call.n_args} args>"] if call.n_args else []
        shape = "" if call.attribute else "(" + ", ".join(args + [f"{k}=" for k in call.keywords]) + ")"
        label = f"{(owner_name or call.owner[0])}.{call.member}{shape}  [{call.where}]"
        if owner is None:
            report.fail(label, "; ".join(errors))
            continue
        try:
            parent = resolve_dotted_from(owner, owner_name, call.member.rpartition(".")[0])
            name = call.member.rpartition(".")[2]
            target = resolve_dotted_from(parent, owner_name, name)
        except LookupError as exc:
            report.fail(label, str(exc))
            continue
        if call.attribute:
            kind = type(inspect.getattr_static(parent, name)).__name__ if inspect.isclass(parent) else type(target).__name__
            report.ok(label, f"exists ({kind})")
            continue
        if not callable(target):
            report.fail(label, f"is a {type(target).__name__}, not callable")
            continue
        report.record(label, check_bind(
            target, call.n_args, call.keywords,
            prepend_self=_needs_self(parent, name), allow_var_keyword=call.allow_var_keyword,
        ))


def resolve_dotted_from(obj: Any, name: str, member: str) -> Any:
    """``obj`` followed by getattr along ``member`` ("" = obj itself)."""
    for part in [p for p in member.split(".") if p]:
        if not hasattr(obj, part):
            raise LookupError(_missing(name, obj, part))
        obj, name = getattr(obj, part), f"{name}.{part}"
    return obj


# --------------------------------------------------------------------------- 3. models
# Parameters like the ones in configs/churn.yaml.
REPRESENTATIVE_PARAMS: dict[str, dict[str, Any]] = {
    "logistic_regression": {"C": 0.5, "max_iter": 500, "tol": 1e-4},
    "random_forest": {"n_estimators": 300, "min_samples_leaf": 5, "max_features": 0.5, "max_depth": 12},
    "xgboost": {"n_estimators": 300, "learning_rate": 0.05, "max_depth": 4, "subsample": 0.8},
}
# A valid value for every parameter whose name differs between the devices; added to every
# model that has it, so each rename is constructed for real at least once.
RENAMED_PARAM_VALUES: dict[str, Any] = {"criterion": "entropy"}

_NO_DRIVER = re.compile(r"cuda|driver|nvml|no (cuda[- ]capable )?device|libcuda|cudart", re.IGNORECASE)


def renamed_params(spec: Any) -> list[str]:
    """Common names that map to a different name on the GPU than on the CPU."""
    return sorted(k for k, (cpu, gpu) in spec.params.items() if cpu and gpu and cpu != gpu)


def representative_params(spec: Any) -> dict[str, Any]:
    params = dict(REPRESENTATIVE_PARAMS.get(spec.name, {}))
    for key in renamed_params(spec):
        if key in RENAMED_PARAM_VALUES:
            params.setdefault(key, RENAMED_PARAM_VALUES[key])
    return params


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


def _bind_constructor(cls: type, kwargs: Mapping[str, Any]) -> BindResult:
    result = check_bind(cls, 0, kwargs.keys(), allow_var_keyword=True)
    if result.ok and result.via_var_keyword:
        unknown = sorted(set(result.via_var_keyword) - named_init_params(cls))
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
    class_path = spec.gpu_class if device == "gpu" else spec.cpu_class
    if class_path is None:
        report.note(f"{spec.name} [{device}]", "no estimator on this device in the registry")
        return
    module_name, _, class_name = class_path.partition(":")
    prefix = f"{spec.name} [{device}] {module_name}.{class_name}"
    cls = _import_class(report, class_path, prefix)
    if cls is None:
        return

    # Every parameter the registry maps for this device, by name (values do not matter to bind).
    everything, dropped = spec.translate({k: PLACEHOLDER for k in spec.params}, device, seed=42)
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
    params = representative_params(spec)
    missing = [k for k in renamed_params(spec) if k not in params]
    if missing:
        report.fail(f"{prefix} representative params", f"no value for renamed param(s) {missing}: add them to "
                                                        "RENAMED_PARAM_VALUES")
    kwargs, _ = spec.translate(params, device, seed=42)
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

    # What train_model and Backend.predict_scores call on the estimator.
    fit_kwargs = ("eval_set", "verbose") if spec.supports_eval_set else ()
    for method, n_args, keywords in (("fit", 2, fit_kwargs), ("predict_proba", 1, ())):
        label = f"{prefix}.{method}({', '.join(['<X>', '<y>'][:n_args] + [k + '=' for k in keywords])})"
        if not hasattr(cls, method):
            report.fail(label, f"{class_name} has no {method}")
            continue
        report.record(label, check_bind(getattr(cls, method), n_args, keywords,
                                        prepend_self=_needs_self(cls, method)))


def check_models(report: Report, devices: Sequence[str] = ("gpu", "cpu")) -> None:
    from pipeline.models import get_model_spec, trainable_models
    from pipeline.plugins import load_plugins

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
    from importlib.metadata import PackageNotFoundError, version

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
    for dist in backend._distributions:
        try:
            report.ok(f"manifest distribution {dist}", version(dist))
        except PackageNotFoundError:
            report.fail(f"manifest distribution {dist}", "not installed under that name (versions() would skip it)")


def check_distributed(report: Report) -> None:
    """LocalCUDACluster's options and the Dask estimators for partitioned data (cuml.dask
    needs raft-dask, which the gpu extra installs)."""
    report.section("Dask-CUDA cluster and distributed estimators")
    from pipeline.backends.cluster import local_cuda_cluster_options
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
        path = spec.class_path("gpu", distributed=True)
        if path is None:
            continue
        module_name, _, class_name = path.partition(":")
        label = f"{spec.name} [gpu, partitioned] {module_name}.{class_name}"
        cls = _import_class(report, path, label)
        if cls is None:
            continue
        kwargs, _ = spec.translate(representative_params(spec), "gpu", seed=42, distributed=True)
        own = {k: v for k, v in kwargs.items() if k in named_init_params(cls)}
        forwarded = {k: v for k, v in kwargs.items() if k not in own}
        report.record(f"{label}({', '.join(sorted(own))})", _bind_constructor(cls, own))
        if forwarded:
            # cuml.dask passes the rest through **kwargs to the single-GPU estimator on each worker.
            local_module, _, local_name = spec.gpu_class.partition(":")
            local = getattr(importlib.import_module(local_module), local_name)
            report.record(f"{label} forwards ({', '.join(sorted(forwarded))}) to {local_module}.{local_name}",
                          _bind_constructor(local, forwarded))
        for method, n_args in (("fit", 2), ("predict_proba", 1)):
            target = getattr(cls, method, None)
            if target is None:
                report.fail(f"{label}.{method}", f"{class_name} has no {method} (scoring needs it)")
            else:
                report.record(f"{label}.{method}", check_bind(target, n_args, prepend_self=True))


def check_external_memory(report: Report) -> None:
    """The XGBoost calls of external-memory training (pipeline/distributed/xgboost_external.py) in
    this environment's XGBoost, with the GPU settings it adds (RMM where XGBoost has it)."""
    report.section("XGBoost external memory (partitioned training)")
    import xgboost

    report.record("xgboost.ExtMemQuantileDMatrix(data, max_bin=, nthread=, ref=)",
                  check_bind(xgboost.ExtMemQuantileDMatrix, 1, ("max_bin", "nthread", "ref")))
    report.record("xgboost.DataIter(cache_prefix=, release_data=)",
                  check_bind(xgboost.DataIter.__init__, 0, ("cache_prefix", "release_data"), prepend_self=True))
    report.record("xgboost.collective.CommunicatorContext(**tracker args)",
                  check_bind(xgboost.collective.CommunicatorContext, 0, ("dmlc_task_id", "dmlc_timeout"),
                             allow_var_keyword=True))
    config = xgboost.get_config()
    for key in ("nthread", "use_rmm"):
        ok = key in config
        report.record(f"xgboost.config_context({key}=...)",
                      BindResult(ok, "a global setting" if ok else f"not in xgboost.get_config(): {sorted(config)}"))


# --------------------------------------------------------------------------- main
def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", type=Path, help="Python files to scan (default: the GPU backend "
                        "and any package module that imports a GPU library)")
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
    check_call_sites(report, [p.resolve() for p in args.files] or default_scan_targets())
    check_method_calls(report)
    check_models(report)
    check_distributed(report)
    check_external_memory(report)
    check_backend(report)

    if report.notes:
        print(f"\nNotes ({len(report.notes)}):")
        for line in report.notes:
            print(f"  - {line}")
    if report.failed:
        print(f"\nFailures ({len(report.failed)}):")
        for line in report.failed:
            print(f"  - {line}")
    print(f"\n{report.passed} passed, {len(report.failed)} failed")
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
