"""Only pipeline/backends may import GPU libraries (import-linter checks the same in `make test`)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

GPU_MODULES = {"cudf", "cuml", "cupy", "dask_cuda", "dask_cudf"}
PACKAGE = Path(__file__).resolve().parents[2] / "pipeline"


def gpu_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module":
            names = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        found += [f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {n}" for n in names if n.split(".")[0] in GPU_MODULES]
    return found


def test_no_gpu_imports_outside_backends():
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        if path.relative_to(PACKAGE).parts[0] != "backends":
            offenders += gpu_imports(path)
    assert offenders == []


def test_the_check_sees_gpu_imports():
    assert any(" cudf" in hit for hit in gpu_imports(PACKAGE / "backends" / "gpu.py"))
    assert any(" dask_cuda" in hit for hit in gpu_imports(PACKAGE / "backends" / "clusters" / "startup.py"))


# ------------------------------------------------------------------ layers and cycles
def _layer_modules() -> set[str]:
    import tomllib

    config = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())
    (layers,) = [c["layers"] for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers"]
    return {name.strip() for layer in layers for name in layer.split("|")}


def _top_level_modules() -> set[str]:
    import pkgutil

    return {f"pipeline.{info.name}" for info in pkgutil.iter_modules([str(PACKAGE)])}


def test_every_module_of_the_package_is_in_a_layer():
    assert _top_level_modules() - _layer_modules() == set()
    assert _layer_modules() - _top_level_modules() == set()         # no layer names a module that is gone


def test_no_two_modules_share_a_file_name():
    """A file name says which module it is (in a traceback, a search, an editor tab)."""
    from collections import Counter

    names = Counter(path.name for path in PACKAGE.rglob("*.py") if path.name != "__init__.py")
    assert sorted(name for name, count in names.items() if count > 1) == []


def import_cycles(graph) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan, iterative)."""
    modules = sorted(m for m in graph.modules if m.startswith("pipeline"))
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    for root in modules:
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next((c for c in children if c.startswith("pipeline")), None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    cycles.append(sorted(group))
    return cycles


@pytest.mark.parametrize("type_checking", [False, True], ids=["run-time imports", "with type-checking imports"])
def test_the_package_has_no_import_cycle(type_checking):
    """Not even through an import under ``if TYPE_CHECKING:``: a module that names another's type
    while that one imports it is one unit split in two (a Protocol, or the type moved, undoes it)."""
    import grimp

    graph = grimp.build_graph("pipeline", exclude_type_checking_imports=not type_checking, cache_dir=None)
    assert import_cycles(graph) == []


def test_the_cycle_check_finds_a_cycle():
    import grimp

    graph = grimp.ImportGraph()
    for name in ("pipeline.a", "pipeline.b", "pipeline.c"):
        graph.add_module(name)
    graph.add_import(importer="pipeline.a", imported="pipeline.b")
    graph.add_import(importer="pipeline.b", imported="pipeline.a")
    graph.add_import(importer="pipeline.b", imported="pipeline.c")
    assert import_cycles(graph) == [["pipeline.a", "pipeline.b"]]


# ------------------------------------------------------------------ the seams
# Paths under pipeline/ (globs): the run, the cache, predict, scoring and serve ask the registries.
NAME_BLIND = ("engine/runner.py", "engine/executors.py", "cache/*.py", "predict/batch.py", "predict/partition_scoring.py",
              "scoring/model_folder.py", "serve/*.py")


def name_blind_modules() -> list[Path]:
    # What predict shares with serving and the promotion gate (a run's model, input rows) is in scoring.
    found = {pattern: sorted(PACKAGE.glob(pattern)) for pattern in (*NAME_BLIND, "scoring/*.py")}
    assert [pattern for pattern, paths in found.items() if not paths] == []     # none is gone
    return [path for paths in found.values() for path in paths]


def compared_names(path: Path) -> list[str]:
    """String constants a module compares against (``x == "a"``, ``x in ("a", "b")``) or looks
    up (``table["a"]``, ``table.get("a")``): where a name would decide behaviour."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        operands: list[ast.AST] = []
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
        elif isinstance(node, ast.Subscript):
            operands = [node.slice]
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "get":
            operands = node.args[:1]
        for operand in operands:
            values = operand.elts if isinstance(operand, (ast.Tuple, ast.List, ast.Set)) else [operand]
            found += [v.value for v in values if isinstance(v, ast.Constant) and isinstance(v.value, str)]
    return found


def test_no_stage_kind_or_model_name_decides_behaviour_in_the_run_and_predict_modules():
    from pipeline.models import MODELS
    from pipeline.stages import STAGE_KINDS

    names = set(STAGE_KINDS) | set(MODELS)
    offenders = {str(path.relative_to(PACKAGE)): sorted(set(compared_names(path)) & names)
                 for path in name_blind_modules()}
    assert {module: hits for module, hits in offenders.items() if hits} == {}


def test_the_name_check_sees_a_comparison(tmp_path):
    module = tmp_path / "m.py"
    module.write_text('def f(kind, table):\n    return kind in ("train", "torch") or table.get("export")\n')
    assert compared_names(module) == ["train", "torch", "export"]


# ------------------------------------------------------------------ the runner knows no run-level output
# What the runner reaches only through the hook registry (pipeline.hooks.hook_registry).
RUN_LEVEL_OUTPUTS = ("pipeline.report", "pipeline.tracking", "pipeline.usage.budget", "pipeline.usage.costs",
                     "pipeline.usage.cost_hook", "pipeline.runs.signing", "pipeline.hooks.signature_hook")


def imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports, at any depth of the file (``from a import b`` counts as a
    and a.b: b may be a module)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def test_the_runner_imports_no_run_level_output():
    imported = imported_modules(PACKAGE / "engine" / "runner.py")
    named = sorted(m for m in imported for output in RUN_LEVEL_OUTPUTS if m == output or m.startswith(output + "."))
    assert named == []
    assert "pipeline.hooks.hook_registry" in imported           # they come from the registry instead


def test_the_import_check_sees_every_form(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("import pipeline.report\nfrom pipeline.usage import budget\n"
                      "def f():\n    from pipeline.runs.signing import sign_run\n")
    imported = imported_modules(module)
    assert {"pipeline.report", "pipeline.usage.budget", "pipeline.runs.signing"} <= imported
