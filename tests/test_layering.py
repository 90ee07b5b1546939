"""Only pipeline/backends may import GPU libraries (import-linter checks the same in `make test`)."""

from __future__ import annotations

import ast
from pathlib import Path

GPU_MODULES = {"cudf", "cuml", "cupy", "dask_cuda", "dask_cudf"}
PACKAGE = Path(__file__).resolve().parents[1] / "pipeline"


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
        if "backends" not in path.relative_to(PACKAGE).parts:
            offenders += gpu_imports(path)
    assert offenders == []


def test_the_check_sees_gpu_imports():
    assert any(" cudf" in hit for hit in gpu_imports(PACKAGE / "backends" / "gpu.py"))
