"""The lock that `make setup` and CI install: in step with pyproject.toml, hash-pinned, CPU torch.

pyproject.toml keeps ranges (the package is a library too); requirements/cpu-dev-bench.txt pins
every distribution of the `cpu,dev,bench` environment with its hashes (`make lock` writes it).
A requirement changed or added in pyproject.toml without `make lock` fails here, before an
install from a stale lock goes missing a package or holds one outside its range.
"""

from __future__ import annotations

import re
import tomllib

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.conftest import ROOT

LOCK = ROOT / "requirements" / "cpu-dev-bench.txt"
SETUP_IN = ROOT / "requirements" / "setup.in"
EXTRAS = ("cpu", "dev", "bench")
# The platform the lock is made for (`make lock`): the project's machines and CI.
ENVIRONMENT = {"python_version": "3.11", "python_full_version": "3.11.7", "sys_platform": "linux",
               "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
               "implementation_name": "cpython", "platform_python_implementation": "CPython"}
REFRESH = "run `make lock` (README: Install) and commit requirements/cpu-dev-bench.txt"


def pins(text: str) -> dict[str, tuple[Version, list[str]]]:
    """name → (version, hashes) of each `name==version \\ --hash=...` entry of a pip lock."""
    out = {}
    for entry in re.split(r"\n(?=[A-Za-z0-9])", text):
        match = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", entry)
        if match:
            out[canonicalize_name(match[1])] = (Version(match[2]), re.findall(r"--hash=sha256:([0-9a-f]{64})", entry))
    return out


def requirements(pyproject: dict) -> list[Requirement]:
    """The base requirements, the extras `make setup` installs, and the build backend."""
    project = pyproject["project"]
    wanted = list(project["dependencies"])
    for extra in EXTRAS:
        wanted += project["optional-dependencies"][extra]
    wanted += pyproject["build-system"]["requires"]
    out = []
    for text in wanted:
        req = Requirement(text)
        if req.marker is None or any(req.marker.evaluate({**ENVIRONMENT, "extra": e}) for e in ("", *EXTRAS)):
            out.append(req)
    return out


@pytest.fixture(scope="module")
def lock() -> dict[str, tuple[Version, list[str]]]:
    return pins(LOCK.read_text(encoding="utf-8"))


def lock_problems(pyproject: dict, lock: dict[str, tuple[Version, list[str]]]) -> list[str]:
    problems = []
    for req in requirements(pyproject):
        name = canonicalize_name(req.name)
        if name not in lock:
            problems.append(f"{req} is not in the lock")
        elif not req.specifier.contains(lock[name][0], prereleases=True):
            problems.append(f"{req}: the lock pins {lock[name][0]}")
    return problems


def test_every_requirement_is_pinned_within_its_range(lock):
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    problems = lock_problems(pyproject, lock)
    assert not problems, f"{problems}: {REFRESH}"


def test_a_requirement_added_or_narrowed_without_make_lock_is_caught(lock):
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    project = pyproject["project"]
    project["dependencies"] = [r if not r.startswith("PyYAML") else "PyYAML>=99" for r in project["dependencies"]]
    project["optional-dependencies"]["dev"].append("a-package-not-locked>=1")
    assert lock_problems(pyproject, lock) == [f"PyYAML>=99: the lock pins {lock['pyyaml'][0]}",
                                              "a-package-not-locked>=1 is not in the lock"]


def test_every_pin_has_a_hash(lock):
    assert lock and not [name for name, (_, hashes) in lock.items() if not hashes]


def test_the_lock_installs_the_cpu_build_of_torch_and_no_cuda_libraries(lock):
    """An unbounded or public-index torch on Linux is the CUDA build and brings about 3 GB of
    nvidia-* wheels; the lock has the CPU build (`+cpu`) and none of them."""
    assert lock["torch"][0].local == "cpu", f"torch {lock['torch'][0]} is not the CPU build: {REFRESH}"
    cuda = [name for name in lock if re.match(r"nvidia-(?!ml-py$)|cuda-|triton$", name)]
    assert cuda == []


def test_the_setup_tools_are_pinned_and_the_build_backend_matches_pyproject(lock):
    """`make setup` builds the editable install without isolation, with the lock's setuptools:
    requirements/setup.in names the same build backend as pyproject.toml's [build-system]."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    listed = [Requirement(line.split("#")[0]) for line in SETUP_IN.read_text(encoding="utf-8").splitlines()
              if line.split("#")[0].strip()]
    assert {str(r) for r in listed if r.name != "pip"} == set(pyproject["build-system"]["requires"])
    assert {"pip", "setuptools"} <= set(lock)
