"""The pure-Python parts of scripts/check_gpu_api.py, on the CPU-only dev environment.

The full check needs RAPIDS installed (``make check-gpu``); its scanner, bind checker and the
CPU half of the model checks do not, and are tested here so the check itself stays correct.
"""

from __future__ import annotations

import inspect
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import script_module



@pytest.fixture(scope="module")
def check():
    with script_module("check_gpu_api") as module:
        yield module


def test_importing_the_script_does_not_import_rapids(check):
    for name in ("cudf", "cuml", "cupy", "dask_cuda", "dask_cudf"):
        assert name not in vars(check)


def test_scanning_the_package_imports_no_gpu_library(check):
    check.scan_package()
    assert not {"cudf", "cuml", "cupy", "dask_cudf", "rmm"} & set(sys.modules)


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



# --------------------------------------------------------------------------- the derived scan
@pytest.fixture(scope="module")
def facts(check):
    return check.read_gpu_facts()


@pytest.fixture(scope="module")
def package(check, facts):
    return {scan.path: scan for scan in check.scan_package(facts=facts)}


def _flow(check, facts, source: str):
    return check.scan_flow_source(textwrap.dedent(source), "t.py", facts)


def _members(scan) -> set[tuple[str, str]]:
    """(receiver type, member) pairs of a module's sites on GPU-library objects."""
    return {(kind, site.member) for site in scan.members for kind in site.receivers}


def test_gpu_facts_are_read_from_the_gpu_backend_source(facts):
    assert facts.module_attrs == {"frame": "cudf", "array": "cupy"}
    assert facts.dask_module == "dask_cudf"
    assert "GpuBackend" in facts.backend_classes and "CpuBackend" in facts.other_backend_classes
    returns = {name: set(kinds.types) for name, kinds in facts.method_returns.items()}
    assert returns["to_matrix"] == {"cupy.ndarray"}                 # annotated in gpu.py
    assert returns["read"] == {"cudf.DataFrame"}                    # followed through base.read
    assert returns["read_partitioned"] == {"dask_cudf.DataFrame"}   # dd.read_* under the cudf Dask backend
    assert returns["asarray"] == {"cupy.ndarray"}                   # self.array.asarray


def test_every_module_that_imports_a_gpu_library_has_checked_call_sites(package):
    importing = [path for path, scan in package.items() if scan.imports_library]
    assert {"pipeline/backends/gpu.py", "pipeline/backends/clusters/startup.py",
            "pipeline/distributed/xgboost_external.py"} <= set(importing)
    assert [path for path in importing if not package[path].total] == []


def test_shared_code_on_backend_values_is_covered(package):
    """The modules the old check never read: Dask training, Dask-cuDF paths, tensors/."""
    for path in ("pipeline/features/ops/encoding.py", "pipeline/features/ops/scaling.py",
                 "pipeline/features/ops/imputation.py", "pipeline/features/ops/date_ops.py",
                 "pipeline/features/ops/op_support.py", "pipeline/stages/split.py", "pipeline/features/workflow.py",
                 "pipeline/tensors/handoff.py", "pipeline/featuresets/partitioned.py",
                 "pipeline/distributed/predictions.py"):
        assert package[path].members, path


def _op_modules(package) -> list:
    """The scans of the feature ops' package, one module per op family."""
    return [scan for path, scan in package.items() if path.startswith("pipeline/features/ops/")]


def test_the_derived_method_list_holds_the_calls_shared_code_makes(package):
    ops = _op_modules(package)
    value_counts = [s for scan in ops for s in scan.members if s.member == "value_counts"]
    assert value_counts and all(s.keywords == ("dropna",) for s in value_counts)
    assert {"cudf.Series", "dask_cudf.Series"} <= {k for s in value_counts for k in s.receivers}
    assert ("cudf.Series", "__array_ufunc__") in set().union(*(_members(scan) for scan in ops))   # np.log1p(series)
    assert {c.dotted for scan in ops for c in scan.via_backend} >= {"cudf.concat", "cupy.log1p"}
    # The ops' new columns become a frame in the backend (``columns_frame``), checked there.
    assert "cudf.DataFrame" in {c.dotted for c in package["pipeline/backends/contract.py"].via_backend}
    assert ("cudf.Series", "assign") not in _members(package["pipeline/stages/split.py"])
    assert ("cudf.DataFrame", "assign") in _members(package["pipeline/stages/split.py"])
    assert ("dask_cudf.DataFrame", "random_split") in _members(package["pipeline/stages/split.py"])
    gpu = _members(package["pipeline/backends/gpu.py"])
    assert {("cudf.Series", "to_cupy"), ("cudf.Series->cat", "codes"), ("cupy.cuda.MemoryPointer", "ptr"),
            ("cudf.DataFrame->iloc", "__getitem__")} <= gpu


def test_dask_readers_dlpack_subclasses_and_registry_strings_are_found(package):
    base = package["pipeline/backends/contract.py"]
    reads = {r.function: r.keywords for r in base.dask_reads}
    assert set(reads["read_csv"]) == {"usecols", "dtype", "na_values", "blocksize"}
    assert {d.path for scan in package.values() for d in scan.dlpack} >= {"pipeline/backends/gpu.py"}
    subclasses = package["pipeline/distributed/xgboost_external.py"].subclasses
    init = next(s for s in subclasses if s.method == "__init__")
    assert init.base == "xgboost.DataIter" and set(init.keywords) == {"cache_prefix", "release_data"}
    assert {"next", "reset", "after_iteration"} <= {s.method for s in subclasses}
    targets = {c.target for c in package["pipeline/models/catalogue/forests.py"].class_paths}
    assert "cuml.dask.ensemble:RandomForestClassifier" in targets


def test_keywords_built_by_a_helper_are_expanded(package):
    cluster = next(s for s in package["pipeline/backends/clusters/startup.py"].direct if s.dotted == "dask_cuda.LocalCUDACluster")
    assert {"rmm_pool_size", "resources", "enable_cudf_spill", "n_workers", "protocol"} <= set(cluster.keywords)
    assert not cluster.star_kwargs                                          # every key is known
    config = next(s for s in package["pipeline/distributed/xgboost_external.py"].direct
                  if s.dotted == "xgboost.config_context")
    assert set(config.keywords) == {"nthread", "use_rmm"}


def test_a_module_added_later_is_scanned(check, facts, tmp_path):
    """A temporary source tree: modules importing any GPU library, and shared code on frames."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "pool.py").write_text("import rmm\n\ndef setup():\n    rmm.reinitialize(pool_allocator=True)\n")
    (tmp_path / "pkg" / "comms.py").write_text("from raft_dask.common import Comms\n\ndef c():\n    return Comms(verbose=True)\n")
    (tmp_path / "pkg" / "plain.py").write_text("import json\n\ndef f(x):\n    return json.dumps(x)\n")
    (tmp_path / "pkg" / "shared.py").write_text(textwrap.dedent("""
        def top(frame, backend, n):
            best = frame.nlargest(n, columns="score")
            return backend.frame.concat([best, frame.tail(2)], ignore_index=True)
    """))
    targets = check.default_scan_targets([tmp_path])
    assert {p.name for p in targets} >= {"pool.py", "comms.py"} and "plain.py" not in {p.name for p in targets}
    scans = {Path(s.path).name: s for s in check.scan_package(check.package_files([tmp_path]), facts)}
    assert [s.dotted for s in scans["pool.py"].direct] == ["rmm.reinitialize"]
    assert [s.dotted for s in scans["comms.py"].direct] == ["raft_dask.common.Comms"]
    assert scans["plain.py"].total == 0
    nlargest = [s for s in scans["shared.py"].members if s.member == "nlargest"]
    assert nlargest and nlargest[0].n_args == 1 and nlargest[0].keywords == ("columns",)
    assert not nlargest[0].certain                        # typed by its name: in memory or partitioned
    assert [c.dotted for c in scans["shared.py"].via_backend] == ["cudf.concat"]


def test_flow_follows_partition_guards_callbacks_and_isinstance(check, facts):
    flow = _flow(check, facts, """
        import numpy as np
        import cudf
        from pipeline.backends import is_partitioned

        def fit(frame, backend):
            if is_partitioned(frame):
                return frame.map_partitions(part_fn, 3, meta=frame._meta)
            return frame.iloc[backend.asarray([0])]

        def part_fn(part, k):
            return part.head(k)

        def host(x):
            if isinstance(x, cudf.Series):
                return x.to_arrow()
            return np.log1p(x)
    """)
    by_member = {s.member: s for s in flow.members}
    assert by_member["map_partitions"].receivers == ("dask_cudf.DataFrame",) and by_member["map_partitions"].certain
    assert by_member["iloc"].receivers == ("cudf.DataFrame",) and by_member["iloc"].certain
    assert by_member["head"].receivers == ("cudf.DataFrame",)      # the callback's partition, in memory
    assert by_member["to_arrow"].receivers == ("cudf.Series",)     # narrowed by isinstance
    assert "__array_ufunc__" not in by_member                      # x is not a device value there


def test_flow_records_dlpack_dask_readers_and_optional_members(check, facts):
    flow = _flow(check, facts, """
        import dask
        import dask.dataframe as dd
        import torch

        def read(backend, path):
            with dask.config.set({"dataframe.backend": backend.dask_backend}):
                frame = dd.read_csv(path, usecols=["a"], blocksize=None)
            return frame.astype("float32")

        def hand(backend, frame):
            matrix = backend.to_matrix(frame)
            return torch.from_dlpack(matrix, copy=False)

        def median(series, backend):
            return series.median_approximate() if hasattr(series, "median_approximate") else series.median()
    """)
    assert [(r.function, r.keywords) for r in flow.dask_reads] == [("read_csv", ("usecols", "blocksize"))]
    assert {s.receivers for s in flow.members if s.member == "astype"} == {("dask_cudf.DataFrame",)}
    assert [(d.producer, d.keywords) for d in flow.dlpack] == [("cupy.ndarray", ("copy",))]
    optional = next(s for s in flow.members if s.member == "median_approximate")
    assert optional.guarded and not next(s for s in flow.members if s.member == "median").guarded


def test_a_host_frame_is_not_taken_for_a_device_frame(check, facts):
    flow = _flow(check, facts, """
        import pandas as pd

        def report(backend, rows):
            frame = pd.DataFrame(rows)
            return frame.to_markdown()
    """)
    assert flow.members == []


# --------------------------------------------------------------------------- checking derived sites
def _site(check, member, receivers, *, certain=True, **kw):
    return check.MemberSite(path="t.py", line=1, receivers=tuple(receivers), certain=certain, member=member,
                            written=member, **kw)


def test_member_checks_proven_types_on_each_and_guessed_ones_on_one(check):
    most_common = _site(check, "most_common", ["collections.Counter", "collections.OrderedDict"], n_args=1)
    assert not check.check_member_site(most_common).ok
    guessed = _site(check, "most_common", ["collections.Counter", "collections.OrderedDict"], certain=False, n_args=1)
    assert check.check_member_site(guessed).ok
    typo = _site(check, "most_commn", ["collections.Counter", "collections.OrderedDict"], certain=False)
    result = check.check_member_site(typo)
    assert not result.ok and "most_common" in result.detail              # close match named
    optional = _site(check, "most_common", ["collections.OrderedDict"], guarded=True)
    assert check.check_member_site(optional).ok


def test_member_keywords_only_kwargs_takes_fail_on_strict_modules(check):
    site = _site(check, "update", ["collections.Counter"], n_args=1, keywords=("extra",))
    assert check.check_member_site(site, strict_modules=("collections",)).ok is False
    lenient = check.check_member_site(site, strict_modules=())
    assert lenient.ok and "extra" in lenient.detail


def test_instance_attributes_are_read_from_the_source(check):
    class Cluster:
        def __init__(self):
            self.workers = {}

    assert check.instance_attribute_setter(Cluster, "workers")
    assert check.instance_attribute_setter(Cluster, "scheduler") is None


def test_calls_with_constant_arguments_are_made_for_real(check):
    class Frame:
        def reset_index(self, drop=False):
            return self

    good = _site(check, "reset_index", ["t.Frame"], keywords=("drop",), literal=((), (("drop", "True"),)))
    assert check.call_on_empty_frame(Frame, good)[0] is True
    bad = _site(check, "reset_index", ["t.Frame"], keywords=("drops",), literal=((), (("drops", "True"),)))
    refused = check.call_on_empty_frame(Frame, bad)
    assert refused[0] is False and "drops" in refused[1]


def test_torch_tells_which_keywords_from_dlpack_passes(check):
    pytest.importorskip("torch")
    kwargs, _ = check.dlpack_keywords(("copy",))
    assert {"stream", "max_version", "copy"} <= set(kwargs) and kwargs["copy"] is False


def test_an_override_must_take_what_the_library_passes(check):
    class Base:
        def after_iteration(self, model, epoch, evals_log):
            return False

    assert check.check_override(Base.after_iteration, "self, model, epoch, evals_log").ok
    assert not check.check_override(Base.after_iteration, "self, model, epoch").ok


def test_distribution_names_with_alternatives(check):
    import ast

    tree = ast.parse('NAMES = {"cudf": ("cudf-cu13", "cudf-cu12"), "torch": "torch", "other": "x"}')
    sites = check.scan_distribution_names(tree, "t.py", ("cudf", "torch"))
    assert [s.target for s in sites] == ["cudf-cu13|cudf-cu12", "torch"]


def test_a_function_defined_inside_another_is_scanned_with_the_names_it_closes_over(check, facts):
    """The ops hand per-column closures to ``per_column``; the calls inside them are checked."""
    scan = _flow(check, facts, """
        import cudf

        def transform(frame: cudf.DataFrame, backend):
            def scaled(col):
                return frame[col].astype("float64").clip(lower=0)
            return backend.map_columns(scaled, list(frame.columns))
    """)
    assert ("cudf.Series", "clip") in _members(scan)
