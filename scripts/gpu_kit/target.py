"""The GPU host the kit is made for, what its image already has, and the kit's size limits.

Kept in one place so that the resolver, the packer and the docs agree. The image is a typical
GPU image for this project: Python 3.12 on x86-64 Linux, NVIDIA driver 580 (CUDA 13), the
CUDA 13 build of torch 2.11, CuPy for CUDA 13, pandas, scikit-learn and pytest, and no RAPIDS.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = REPO / "pyproject.toml"

MiB = 1024 * 1024
# A transfer into the host carries at most 64 MiB; a part stays under 60 MiB so that one part
# plus the manifest (and any filesystem rounding on the way) never reaches that limit.
TRANSFER_LIMIT = 64 * MiB
PART_LIMIT = 60 * MiB
# Room kept in every transfer for manifest.json (which travels with each one).
MANIFEST_ALLOWANCE = 1 * MiB

# CPython 3.12 on x86-64 Linux. pip matches a manylinux tag's glibc version exactly, so every
# manylinux_2_N from 2.17 (the oldest the wheels here use) to 2.39 is listed, plus the legacy
# aliases; the host's glibc must be at least the newest tag of any chosen wheel (2.28 for
# RAPIDS and torch, which the image already needs).
PYTHON_VERSION = "3.12"
IMPLEMENTATION = "cp"
PLATFORMS = (
    *(f"manylinux_2_{n}_x86_64" for n in range(17, 40)),
    "manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64",
)
# PEP 508 marker values of the host, for evaluating Requires-Dist lines.
MARKERS = {
    "implementation_name": "cpython", "implementation_version": "3.12.0", "os_name": "posix",
    "platform_machine": "x86_64", "platform_python_implementation": "CPython",
    "platform_release": "", "platform_system": "Linux", "platform_version": "",
    "python_full_version": "3.12.0", "python_version": PYTHON_VERSION, "sys_platform": "linux",
}

# ----------------------------------------------------------------- present on the image
# What the image provides, as requirements: resolving them for the host gives the
# distributions (and versions) assumed present, CUDA libraries of torch and CuPy included.
# `prepare --image-freeze FILE` (the output of `python -m pip freeze` on the host) replaces
# this guess with the host's real versions.
IMAGE_REQUIREMENTS = (
    "torch==2.11.*",          # the index's torch 2.11 for Linux is the CUDA 13.0 build
    "cupy-cuda13x",
    "numpy",
    "pandas<3.1",             # the project's cap (cuDF 26.10 needs pandas <3.1)
    "scikit-learn",
    "scipy",
    "pytest",
)
# The image's own core packages: with `--image-freeze`, their exact versions join the resolution.
IMAGE_CORE = frozenset({"torch", "cupy-cuda13x", "numpy", "pandas", "scikit-learn", "scipy", "pytest"})
# Never shipped, even where a kit package asks for another version: replacing them on
# PYTHONPATH would shadow the image's own builds. A requirement the image's version fails is
# reported as a conflict instead. NumPy is the exception among the core packages: numba 0.64
# (cuDF, cuML) refuses NumPy 2.5, and extension modules built against NumPy 2.x run on any
# 2.x release at or above the API they target, so an older NumPy is shipped as an override.
# On an H100 host whose image has NumPy 2.5, torch 2.11+cu130, CuPy 14.2, pandas 3.0.6 and
# scikit-learn ran with NumPy 2.4.6 shipped this way, and every probe passed.
NEVER_SHIP = IMAGE_CORE - {"numpy"}

# ----------------------------------------------------------------- profiles
PROFILES = ("base", "rapids")
# From the `gpu` extra, base takes these (XGBoost's CUDA 13 build, Dask-CUDA); rapids takes the
# rest of it (cuDF, cuML, Dask-cuDF, RAFT-Dask); the image has CuPy.
BASE_FROM_GPU_EXTRA = ("xgboost-cu13", "dask-cuda")
# Dask-CUDA's RMM pool (cluster.rmm_pool_size, and torch and CuPy allocating from it) needs
# RMM, which cuDF would otherwise bring: base ships it so a host without RAPIDS can use the
# pool. Versioned like dask-cuda (RAPIDS packages move together).
BASE_ADDED = ("rmm-cu13",)
# The optional model libraries of ``auto``'s portfolio (pyproject's extras of these names):
# LightGBM is its first member, the unit every other member's cost is a multiple of, and
# CatBoost trains on the GPU itself. CatBoost is 93 MiB, 31 MiB pruned to one architecture.
BASE_EXTRAS = ("lightgbm", "catboost")
# Left out of the rapids profile unless asked for (`prepare.py --with-raft-dask`): RAFT-Dask
# (cuML's multi-GPU estimators, `cuml.dask`, so the partitioned cuML forest) brings UCX and UCXX:
# +29 MiB pruned (libucx 23.5 MiB), 272 MiB and 6 calls in all where the kit takes 5 without it.
# Single-GPU runs never import it.
RAPIDS_LEFT_OUT = frozenset({"raft-dask-cu13"})
# Never shipped, whatever asks for them: the CUDA compiler toolchain wheels only compile
# user-defined functions (numba-cuda JIT), and the package has no cuDF UDF
# (tests/scripts/test_gpu_kit_prune.py keeps it so). The image's own numba 0.68 / llvmlite 0.50 /
# numba-cuda serve imports. 222 MiB that would otherwise be four more transfers.
TOOLCHAIN_DROPPED = frozenset({
    "numba-cuda-mlir", "nvidia-nvvm", "nvidia-cuda-nvcc", "nvidia-cuda-cccl", "nvidia-cuda-crt",
    "llvmlite", "numba", "numba-cuda",
})


def _name(requirement: str) -> str:
    """The canonical distribution name of a requirement string (no `packaging` needed)."""
    head = requirement.split(";")[0]
    for stop in "[<>=!~ (":
        head = head.split(stop)[0]
    return head.strip().lower().replace("_", "-").replace(".", "-")


def project_requirements(pyproject: Path = PYPROJECT) -> tuple[list[str], list[str]]:
    """The base requirements (with ``BASE_EXTRAS``' extras) and the `gpu` extra, as written in
    pyproject.toml."""
    project = tomllib.loads(pyproject.read_text())["project"]
    extras = project.get("optional-dependencies", {})
    base = [*project["dependencies"], *(r for name in BASE_EXTRAS for r in extras.get(name, []))]
    return base, list(extras.get("gpu", []))


def profile_roots(profile: str, pyproject: Path = PYPROJECT, *, left_out: frozenset[str] = RAPIDS_LEFT_OUT) -> list[str]:
    """The requirements a profile starts from (the image's packages among them are cut later);
    ``left_out``: distributions left out of either profile (by default, gpu-extra ones the
    rapids profile leaves out)."""
    base, gpu = project_requirements(pyproject)
    if profile == "base":
        from_gpu = [r for r in gpu if _name(r) in BASE_FROM_GPU_EXTRA]
        dask_cuda = next((r for r in gpu if _name(r) == "dask-cuda"), "dask-cuda")
        pin = dask_cuda[len("dask-cuda"):].split(";")[0]
        return [r for r in [*base, *from_gpu, *(name + pin for name in BASE_ADDED)] if _name(r) not in left_out]
    if profile == "rapids":
        return [r for r in gpu if _name(r) not in BASE_FROM_GPU_EXTRA and _name(r) not in NEVER_SHIP
                and _name(r) not in left_out]
    raise ValueError(f"unknown profile {profile!r} (expected one of {', '.join(PROFILES)})")


def profiles_for(choice: str) -> list[str]:
    """`--profile base|rapids|all` as the list of profiles to build, in packing order."""
    if choice == "all":
        return list(PROFILES)
    if choice not in PROFILES:
        raise ValueError(f"unknown profile {choice!r} (expected base, rapids or all)")
    return [choice]
