"""``pipeline doctor``'s CUDA check: which CUDA major each GPU wheel needs, read from package
metadata alone, and the verdict against the driver (tested on fake metadata: no GPU here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from pipeline.backends.devices.detect import CudaNeed, DistMeta, cuda_need, module_distributions
from pipeline.cli.doctor import cuda_verdict, gpu_ready

TORCH_CU13_REQUIRES = (
    "filelock",
    'cuda-toolkit[cublas,cudart,cufft,cufile,cupti,curand,cusolver,cusparse,nvjitlink,nvrtc,nvtx]==13.0.3; '
    'platform_system == "Linux"',
    'cuda-bindings<14,>=13.0.3; platform_system == "Linux" and python_version < "3.15"',
    'nvidia-cudnn-cu13==9.20.0.48; platform_system == "Linux"',
    'optree>=0.13.0; extra == "optree"',
)
TORCH_CU12_REQUIRES = (
    "filelock",
    'cuda-bindings==12.9.4; platform_system == "Linux" and platform_machine == "x86_64"',
    'nvidia-cuda-runtime-cu12==12.8.90; platform_system == "Linux" and platform_machine == "x86_64"',
)
TORCH_CPU_REQUIRES = ("filelock", "typing-extensions>=4.10.0", 'opt-einsum>=3.3; extra == "opt-einsum"')


def need(module: str, name: str, ver: str, requires: tuple[str, ...] = ()) -> CudaNeed:
    return cuda_need(module, DistMeta(name, ver, requires))


def cu13_stack() -> list[CudaNeed]:
    return [need("cudf", "cudf-cu13", "26.10.2"), need("cuml", "cuml-cu13", "26.10.0"),
            need("cupy", "cupy-cuda13x", "14.0.1"), need("rmm", "rmm-cu13", "26.10.0"),
            need("xgboost", "xgboost-cu13", "3.2.0"), need("torch", "torch", "2.13.0", TORCH_CU13_REQUIRES)]


def cu12_stack() -> list[CudaNeed]:
    return [need("cudf", "cudf-cu12", "26.10.2"), need("cuml", "cuml-cu12", "26.10.0"),
            need("cupy", "cupy-cuda12x", "14.2.0"), need("xgboost", "xgboost-cu12", "3.2.0"),
            need("torch", "torch", "2.10.0", TORCH_CU12_REQUIRES)]


# --------------------------------------------------------------------------- reading metadata
@pytest.mark.parametrize(("ver", "requires", "major"), [
    ("2.13.0+cu130", (), 13),
    ("2.10.0+cu128", (), 12),
    ("2.7.1+cu118", (), 11),
    ("2.13.0", TORCH_CU13_REQUIRES, 13),                                   # public index, no label
    ("2.10.0", TORCH_CU12_REQUIRES, 12),
    ("2.13.0", ("cuda-bindings<14,>=13.0.3; platform_system == 'Linux'",), 13),
])
def test_torch_cuda_major_from_label_or_requirements(ver, requires, major):
    got = need("torch", "torch", ver, requires)
    assert (got.needs_cuda, got.cuda_major) == (True, major)
    assert got.basis


@pytest.mark.parametrize(("ver", "requires"), [
    ("2.13.0+cpu", ()),
    ("2.13.0+cpu", TORCH_CU13_REQUIRES),           # the label wins over anything else
    ("2.13.0", TORCH_CPU_REQUIRES),                # macOS or a CPU build without a label
    ("2.13.0", ('nvidia-cudnn-cu13==9.20.0.48; extra == "cuda"',)),   # optional extras do not count
])
def test_torch_cpu_builds_need_no_cuda(ver, requires):
    got = need("torch", "torch", ver, requires)
    assert got.needs_cuda is False and got.cuda_major is None


@pytest.mark.parametrize(("module", "name", "needs_cuda", "major"), [
    ("cupy", "cupy-cuda12x", True, 12),
    ("cupy", "cupy-cuda13x", True, 13),
    ("cupy", "cupy", True, None),                   # built from source: a CUDA build, major unknown
    ("cudf", "cudf-cu12", True, 12),
    ("cuml", "cuml_cu13", True, 13),                # names are compared in canonical form
    ("dask_cudf", "dask-cudf-cu13", True, 13),
    ("raft_dask", "raft-dask-cu12", True, 12),
    ("rmm", "rmm-cu13", True, 13),
    ("cudf", "cudf", True, None),                   # conda: no suffix
    ("xgboost", "xgboost-cpu", False, None),
    ("xgboost", "xgboost-cu13", True, 13),
    ("xgboost", "xgboost-cu12", True, 12),
    ("xgboost", "xgboost", True, 12),               # the plain wheel is the CUDA 12 build
])
def test_cuda_major_from_distribution_name(module, name, needs_cuda, major):
    got = need(module, name, "1.0")
    assert (got.needs_cuda, got.cuda_major) == (needs_cuda, major)


def test_module_distributions_reads_installed_metadata_by_canonical_name():
    found = module_distributions("torch", {"torch": ["torch", "Torch"]})
    assert [d.name for d in found] == ["torch"] and found[0].version == version("torch")
    assert module_distributions("torch", {"torch": ["no-such-distribution-here"]})[0].name == "torch"
    assert module_distributions("no_such_module_here", {}) == []


# --------------------------------------------------------------------------- the verdict
@pytest.mark.parametrize(("stack", "driver"), [(cu13_stack, "13.0"), (cu12_stack, "12.2"), (cu12_stack, "13.1")])
def test_one_cuda_major_the_driver_supports_is_ok(stack, driver):
    verdict = cuda_verdict(stack(), driver)
    assert verdict.status == "ok" and not verdict.problems
    assert f"CUDA {stack()[0].cuda_major}" in verdict.summary and driver in verdict.summary
    assert set(verdict.rows.values()) == {"ok"}


def test_cu12_rapids_beside_torch_cuda13_is_a_mismatch_naming_both():
    needs = [*cu12_stack()[:4], need("torch", "torch", "2.13.0", TORCH_CU13_REQUIRES)]
    verdict = cuda_verdict(needs, "13.0")
    assert verdict.status == "mismatch"
    [problem] = verdict.problems
    assert problem.kind == "mixed-cuda"
    assert "cudf-cu12 26.10.2" in problem.message and "torch 2.13.0" in problem.message
    assert "CUDA 12" in problem.message and "CUDA 13" in problem.message
    # A CUDA 13 driver: the default flavour, with the CUDA 12 wheels removed first (other names).
    assert problem.fix.startswith("pip uninstall -y cudf-cu12 cuml-cu12 cupy-cuda12x xgboost-cu12 && ")
    assert problem.fix.endswith("pip install -e '.[gpu]'")
    assert verdict.rows["cudf-cu12"] != "ok" and verdict.rows["torch"] != "ok"


def test_mixed_majors_on_a_cuda12_driver_recommend_the_cuda12_flavour():
    needs = [*cu12_stack()[:4], need("torch", "torch", "2.13.0", TORCH_CU13_REQUIRES)]
    verdict = cuda_verdict(needs, "12.4")
    kinds = {p.kind: p for p in verdict.problems}
    assert set(kinds) == {"mixed-cuda", "driver-too-old"}
    assert kinds["mixed-cuda"].fix == "pip uninstall -y torch && pip install -e '.[gpu-cu12]'"


def test_two_cupy_builds_overwrite_each_other():
    needs = [need("cupy", "cupy-cuda12x", "13.6.0"), need("cupy", "cupy-cuda13x", "14.0.1")]
    verdict = cuda_verdict(needs, "13.0")
    kinds = {p.kind: p for p in verdict.problems}
    assert set(kinds) == {"mixed-cuda", "same-module-twice"}
    twice = kinds["same-module-twice"]
    assert "cupy-cuda12x 13.6.0" in twice.message and "cupy-cuda13x 14.0.1" in twice.message
    # Both go: removing one deletes files the other wrote too.
    assert twice.fix == "pip uninstall -y cupy-cuda12x cupy-cuda13x && pip install -e '.[gpu]'"
    assert kinds["mixed-cuda"].fix == twice.fix   # removing the cu12 build takes the cu13 one with it
    assert verdict.fix == twice.fix


def test_cuda13_wheels_on_an_older_driver_need_a_driver_upgrade_or_the_cuda12_flavour():
    verdict = cuda_verdict(cu13_stack(), "12.4")
    assert verdict.status == "mismatch"
    [problem] = verdict.problems
    assert problem.kind == "driver-too-old"
    assert "cudf-cu13 26.10.2" in problem.message and "torch 2.13.0" in problem.message
    assert "CUDA 13.0" in problem.message and "580" in problem.message and "12.4" in problem.message
    assert "580" in problem.fix and problem.fix.endswith("pip install -e '.[gpu-cu12]'")
    assert "pip uninstall -y cudf-cu13 cuml-cu13 cupy-cuda13x rmm-cu13 xgboost-cu13 torch" in problem.fix
    assert verdict.rows["cudf-cu13"] == "needs a newer driver"


def test_cuda12_wheels_on_a_cuda11_driver_need_driver_525():
    verdict = cuda_verdict(cu12_stack(), "11.8")
    [problem] = verdict.problems
    assert problem.kind == "driver-too-old" and "525" in problem.message
    assert "525" in problem.fix and "pip install" not in problem.fix   # no flavour runs on it


@pytest.mark.parametrize("other", ["xgboost-cu13", "xgboost-cpu"])
def test_plain_xgboost_beside_another_build_is_the_same_module_twice(other):
    needs = [need("xgboost", "xgboost", "3.2.0"), need("xgboost", other, "3.1.2")]
    verdict = cuda_verdict(needs, "13.0")
    twice = [p for p in verdict.problems if p.kind == "same-module-twice"]
    assert len(twice) == 1 and verdict.status == "mismatch"
    assert "xgboost 3.2.0" in twice[0].message and f"{other} 3.1.2" in twice[0].message
    assert twice[0].fix == f"pip uninstall -y {' '.join(sorted(['xgboost', other]))} && pip install -e '.[gpu]'"


def test_same_module_twice_without_a_driver_offers_every_flavour():
    needs = [need("xgboost", "xgboost", "3.2.0"), need("xgboost", "xgboost-cpu", "3.2.0")]
    verdict = cuda_verdict(needs, None)
    [problem] = verdict.problems
    assert "'.[cpu]'" in problem.fix and "'.[gpu]'" in problem.fix and "'.[gpu-cu12]'" in problem.fix


def test_no_driver_says_what_the_wheels_need_and_is_not_an_error():
    needs = [need("torch", "torch", "2.13.0+cpu"), need("xgboost", "xgboost", "3.2.0")]
    verdict = cuda_verdict(needs, None)
    assert verdict.status == "no-driver" and not verdict.problems
    assert "CUDA 12" in verdict.summary and "xgboost 3.2.0" in verdict.summary
    assert "no NVIDIA driver" in verdict.summary
    assert verdict.rows == {"torch": "ok", "xgboost": "no driver to check"}


def test_cpu_builds_only_without_a_driver_are_ok():
    verdict = cuda_verdict([need("torch", "torch", "2.13.0+cpu"), need("xgboost", "xgboost-cpu", "3.2.0")], None)
    assert verdict.status == "ok" and "no installed wheel needs CUDA" in verdict.summary


def test_require_gpu_fails_on_a_cuda_mismatch_even_when_auto_picks_the_gpu():
    assert gpu_ready({"auto_device": "gpu", "cuda": {"status": "ok"}})
    assert not gpu_ready({"auto_device": "gpu", "cuda": {"status": "mismatch"}})
    assert not gpu_ready({"auto_device": "cpu", "cuda": {"status": "ok"}})


# --------------------------------------------------------------------------- the command
@pytest.mark.slow
def test_doctor_json_reports_each_wheels_cuda_need(tmp_path: Path):
    command = Path(sys.executable).parent / "pipeline"
    proc = subprocess.run([str(command), "doctor", "--json"], cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "200"}, timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    cuda = report["cuda"]
    assert {"driver_cuda", "status", "summary", "fix", "wheels", "problems"} <= set(cuda)
    assert cuda["status"] in ("ok", "mismatch", "no-driver") and cuda["summary"]
    assert report["gpu_ready"] is gpu_ready(report)
    wheels = {w["distribution"]: w for w in cuda["wheels"]}
    torch = wheels["torch"]
    assert torch["version"] == version("torch")
    assert {"module", "needs_cuda", "cuda_major", "basis", "verdict"} <= set(torch)
    if version("torch").endswith("+cpu"):           # this CPU machine's build
        assert torch["needs_cuda"] is False and torch["cuda_major"] is None
    if report["cuda_driver"] is None:             # no driver: nothing to check the wheels against
        assert cuda["driver_cuda"] is None
        expected = ("no-driver", "mismatch") if any(w["needs_cuda"] for w in cuda["wheels"]) else ("ok", "mismatch")
        assert cuda["status"] in expected
