"""The GPU extras resolve on a GPU host: checked offline against saved pip resolutions.

``scripts/resolve_gpu_extras.py refresh`` asks pip (metadata only, CPython 3.12, manylinux
x86-64) to resolve each extra and saves the result under tests/data/gpu_resolution/. These
tests re-check those resolutions against today's pyproject.toml, and show that the checker
catches the defect that shipped: the CUDA 12 RAPIDS wheels beside torch 2.13.0, a CUDA 13 build.
"""

from __future__ import annotations

import dataclasses

import pytest

from tests.conftest import script_module



@pytest.fixture(scope="module")
def res():
    with script_module("resolve_gpu_extras") as module:
        yield module


def snapshot(res, extra: str):
    return res.Snapshot.read(res.SNAPSHOTS / f"{extra}.json")


@pytest.mark.parametrize("extra", ["gpu", "gpu-cu12"])
def test_each_gpu_extra_resolves_for_a_gpu_host(res, extra):
    snap = snapshot(res, extra)
    assert res.check_snapshot(snap, res.project_requirements(extra)) == []
    majors = {res.cuda_major(d) for d in snap.resolved.values()} - {None}
    assert majors == {13 if extra == "gpu" else 12}


def test_the_default_gpu_extra_brings_a_cuda_13_torch_and_xgboost(res):
    snap = snapshot(res, "gpu")
    assert res.cuda_major(snap.resolved["torch"]) == 13
    assert "xgboost-cu13" in snap.resolved and "xgboost" not in snap.resolved


def test_cuda_12_rapids_beside_the_public_torch_2_13_is_caught(res):
    """The shipped `gpu` extra: cudf-cu12 & co. with the base torch==2.13.0 (CUDA 13)."""
    cu12, cu13 = snapshot(res, "gpu-cu12"), snapshot(res, "gpu")
    torch = cu13.resolved["torch"]
    assert torch.version == "2.13.0"
    mixed = {**cu12.resolved, "torch": torch}
    unmet = res.unmet_requirements(["torch==2.13.0", "cudf-cu12==26.10.*"], mixed)
    assert any(line.startswith("torch 2.13.0 requires cuda-bindings") for line in unmet), unmet
    assert any("CUDA 13: torch 2.13.0" in line for line in res.mixed_cuda_majors(mixed))


def test_the_cu12_extra_says_why_the_public_torch_does_not_fit(res):
    snap = snapshot(res, "gpu-cu12")
    assert snap.left_to_user == ["torch"]
    [torch] = snap.rejected
    roots = [r for r in snap.requirements if not r.startswith("torch")]
    reasons = res.why_rejected(torch, snap.resolved, roots)
    assert any("nvidia-nvjitlink-cu12==12.8.93; cuml-cu12" in r for r in reasons), reasons


def test_a_stale_snapshot_is_reported(res):
    snap = snapshot(res, "gpu")
    problems = res.check_snapshot(snap, [*res.project_requirements("gpu"), "polars>=1"])
    assert any("other requirements" in p and "polars>=1" in p for p in problems)


def test_two_builds_of_one_package_are_reported(res):
    snap = snapshot(res, "gpu")
    plain = res.Resolved("xgboost", "3.2.0", ("nvidia-nccl-cu12",))
    both = {**snap.resolved, "xgboost": plain}
    assert "xgboost and xgboost-cu13" in res.same_package_twice(both)
    assert res.same_package_twice(snap.resolved) == []


def test_an_unmet_version_is_named_with_who_asked(res):
    snap = snapshot(res, "gpu")
    old_pandas = dataclasses.replace(snap.resolved["pandas"], version="2.2.3")
    problems = res.unmet_requirements(["cudf-cu13==26.10.*"], {**snap.resolved, "pandas": old_pandas})
    assert any(p.startswith("cudf-cu13 26.10.2 requires pandas") and "2.2.3 was resolved" in p for p in problems)


@pytest.mark.parametrize(("version", "requires", "major"), [
    ("2.13.0", ('cuda-toolkit[cublas]==13.0.3; platform_system == "Linux"',), 13),
    ("2.10.0", ('nvidia-cuda-runtime-cu12==12.8.90; platform_system == "Linux"',), 12),
    ("2.11.0+cu130", (), 13),
    ("2.13.0+cpu", (), None),
    ("2.13.0", ("filelock",), None),
])
def test_torch_cuda_major_from_label_or_requirements(res, version, requires, major):
    assert res.cuda_major(res.Resolved("torch", version, requires)) == major
