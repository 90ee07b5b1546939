"""The pure-Python parts of scripts/check_gpu_api.py, on the CPU-only dev environment.

The full check needs RAPIDS installed (``make check-gpu``); its scanner, bind checker and the
CPU half of the model checks do not, and are tested here so the check itself stays correct.
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "check_gpu_api.py"


@pytest.fixture(scope="module")
def check():
    spec = importlib.util.spec_from_file_location("check_gpu_api", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module          # dataclasses look their module up by name
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)


def test_importing_the_script_does_not_import_rapids(check):
    for name in ("cudf", "cuml", "cupy", "dask_cuda", "dask_cudf"):
        assert name not in vars(check)


def test_scan_finds_read_csv_in_the_gpu_backend_with_its_keywords(check):
    sites = check.scan_file(check.GPU_BACKEND)
    read_csv = [s for s in sites if s.dotted == "cudf.read_csv"]
    assert len(read_csv) == 1
    site = read_csv[0]
    assert site.is_call and site.n_args == 1
    assert set(site.keywords) == {"usecols", "dtype", "na_values"}
    assert site.path == "pipeline/backends/gpu.py" and site.line > 0
    # Aliases are expanded (cp -> cupy), and only GPU-library chains are collected.
    dotted = {s.dotted for s in sites}
    assert "cupy.asnumpy" in dotted
    assert not any(d.startswith(("np.", "numpy.", "pd.", "pandas.")) for d in dotted)


def test_scan_resolves_aliases_and_keeps_maximal_chains(check):
    source = (
        "import numpy as np\n"
        "import cupy as cp\n"
        "import cuml.ensemble\n"
        "from dask_cuda import LocalCUDACluster as LC\n"
        "def f(x, extra, cudf):\n"
        "    import cudf\n"
        "    free, total = cp.cuda.runtime.memGetInfo()\n"
        "    LC(n_workers=2, **extra)\n"
        "    cuml.ensemble.RandomForestClassifier(*x, n_bins=8)\n"
        "    np.log1p(x)\n"
        "    return isinstance(x, cudf.DataFrame)\n"
    )
    sites = check.scan_source(source, "t.py")
    calls = {s.dotted: s for s in sites if s.is_call}
    refs = {s.dotted for s in sites if not s.is_call}
    assert set(calls) == {"cupy.cuda.runtime.memGetInfo", "dask_cuda.LocalCUDACluster",
                          "cuml.ensemble.RandomForestClassifier"}
    assert calls["dask_cuda.LocalCUDACluster"].keywords == ("n_workers",)
    assert calls["dask_cuda.LocalCUDACluster"].star_kwargs
    assert calls["cuml.ensemble.RandomForestClassifier"].star_args
    assert calls["cuml.ensemble.RandomForestClassifier"].n_args == 0
    assert refs == {"cudf.DataFrame"}
    assert calls["cupy.cuda.runtime.memGetInfo"].source == "cp.cuda.runtime.memGetInfo"


def test_default_targets_include_the_gpu_backend(check):
    assert check.GPU_BACKEND in check.default_scan_targets()


def test_bind_reports_a_wrong_keyword(check):
    def read(path, *, columns=None, filters=None):
        return path

    good = check.check_bind(read, 1, ["columns", "filters"])
    assert good.ok and good.checked
    bad = check.check_bind(read, 1, ["colums"])
    assert not bad.ok
    assert "colums" in bad.detail
    assert not check.check_bind(read, 2).ok               # too many positional arguments
    assert not check.check_bind(read, 0).ok               # missing the required one


def test_bind_flags_keywords_swallowed_by_var_keyword(check):
    def to_parquet(path, compression="snappy", **kwargs):
        return path

    strict = check.check_bind(to_parquet, 1, ["index"])
    assert not strict.ok and "index" in strict.detail and "**kwargs" in strict.detail
    lenient = check.check_bind(to_parquet, 1, ["index"], allow_var_keyword=True)
    assert lenient.ok and lenient.via_var_keyword == ("index",)


def test_bind_on_unbound_methods_needs_self(check):
    class Frame:
        def drop(self, labels=None, *, columns=None):
            return self

        @classmethod
        def build(cls, data):
            return cls()

    assert check._needs_self(Frame, "drop") and not check._needs_self(Frame, "build")
    assert check.check_bind(Frame.drop, 0, ["columns"], prepend_self=True).ok
    assert check.check_bind(Frame.build, 1).ok


def test_signature_from_a_compiled_functions_docstring(check):
    class Compiled:
        """Stands in for a Cython function with no introspectable signature."""

        __name__ = "memGetInfo"
        __doc__ = "memGetInfo(stream=None, *, flags=0)\n\nFree and total device memory."

        @property
        def __signature__(self):
            raise ValueError("no signature found for builtin")

    sig = check._docstring_signature(Compiled())
    assert sig is not None and list(sig.parameters) == ["stream", "flags"]
    assert sig.parameters["flags"].kind is inspect.Parameter.KEYWORD_ONLY
    assert check.check_bind(Compiled(), 0, ["flags"]).ok
    assert not check.check_bind(Compiled(), 0, ["flag"]).ok


def test_signature_from_a_cython_method_docstring_with_class_prefix_and_types(check):
    class Dlpack:
        __name__ = "__dlpack__"
        __doc__ = "_ndarray_base.__dlpack__(self, *, stream=None, tuple max_version=None, dl_device=None, copy=None)"

    sig = check._docstring_signature(Dlpack())
    assert sig is not None and list(sig.parameters) == ["self", "stream", "max_version", "dl_device", "copy"]
    assert check.check_bind(Dlpack(), 0, ["stream", "max_version", "copy"], prepend_self=True).ok
    assert not check.check_bind(Dlpack(), 0, ["streams"], prepend_self=True).ok


def test_resolve_dotted_names_the_missing_attribute(check):
    import os.path

    assert check.resolve_dotted("os.path.join") is os.path.join
    with pytest.raises(LookupError, match=r"os\.path has no attribute 'joinx' \(close: join"):
        check.resolve_dotted("os.path.joinx")
    with pytest.raises(LookupError, match="cannot import"):
        check.resolve_dotted("no_such_module_xyz.f")


def test_every_renamed_model_param_has_a_representative_value(check):
    from pipeline.models import MODELS

    for spec in MODELS.values():
        params = check.representative_params(spec)
        assert set(check.renamed_params(spec)) <= set(params), spec.name


def test_named_init_params_walk_the_mro(check):
    class Base:
        def __init__(self, *, max_depth=None, learning_rate=None, **kwargs):
            self.kwargs = kwargs

    class Child(Base):
        def __init__(self, *, objective="binary", **kwargs):
            super().__init__(**kwargs)

    assert {"objective", "max_depth", "learning_rate"} <= check.named_init_params(Child)
    assert check._bind_constructor(Child, {"max_depth": 3}).ok
    bad = check._bind_constructor(Child, {"max_dept": 3})
    assert not bad.ok and "max_dept" in bad.detail


def test_cpu_model_checks_pass_here(check, capsys):
    """The model half of the check runs for CPU classes on the dev environment too."""
    report = check.Report(verbose=False)
    check.check_models(report, devices=("cpu",))
    assert report.failed == [], report.failed
    assert report.passed >= 5 * 3


# Short module names the table's ``where=`` notes use, and the files they mean.
WHERE_MODULES = {
    "base": "backends/base.py", "gpu": "backends/gpu.py", "cpu": "backends/cpu.py", "ops": "features/ops.py",
    "workflow": "features/workflow.py", "fitting": "features/fitting.py", "split": "stages/split.py",
    "handoff": "tensors/handoff.py",
}


def _defined_names(path: Path) -> set[str]:
    import ast

    tree = ast.parse(path.read_text())
    return {node.name for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.ClassDef))} | {
        target.id for node in ast.walk(tree) if isinstance(node, ast.Assign)
        for target in node.targets if isinstance(target, ast.Name)}


def test_every_place_the_call_table_names_exists(check):
    """The table of cuDF calls says where each call is made; a renamed or moved function
    leaves a note pointing nowhere, so the table would drift from the code unnoticed."""
    import re

    stale = []
    for call in check.CUDF_METHOD_CALLS:
        for module, name in re.findall(r"\b([a-z_]+)\.(\w+)", call.where):
            if module in WHERE_MODULES and name not in _defined_names(ROOT / "pipeline" / WHERE_MODULES[module]):
                stale.append(f"{module}.{name} ({call.member})")
    assert stale == []
