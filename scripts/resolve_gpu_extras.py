#!/usr/bin/env python3
"""Do the GPU extras resolve on a GPU host? Checked against the real package metadata.

A CPU development machine cannot install the CUDA builds of torch and RAPIDS, and its pip may
see a local CPU build of torch that hides a conflict (this is how a `gpu` extra holding the
CUDA 12 RAPIDS wheels beside torch 2.13.0, a CUDA 13 build, passed here and failed on every GPU
host). The package metadata decides, and pip can resolve from metadata alone:

``refresh``
    For each extra, runs ``pip install --dry-run --report`` for the base requirements plus the
    extra, for CPython 3.12 on manylinux x86-64 (what a GPU host runs), against the public
    index (needs the network; about a minute and a half per extra). The resolved set, with
    each distribution's ``Requires-Dist`` and wheel hash, is saved as
    ``tests/data/gpu_resolution/<extra>.json``.
``check`` (the default; offline)
    Re-checks each saved resolution against today's pyproject.toml: the snapshot was made from
    the same requirements; every requirement, from the roots through each package's
    ``Requires-Dist`` with its markers and extras evaluated for the target, is met by exactly
    the resolved version; all CUDA builds in it are for one CUDA major; and no two
    distributions install the same package (``xgboost`` beside ``xgboost-cu13``).

``tests/scripts/test_gpu_resolution.py`` runs the checks; ``make resolve-gpu`` refreshes and checks.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import subprocess
import sys
import tomllib
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
SNAPSHOTS = REPO / "tests" / "data" / "gpu_resolution"
GPU_EXTRAS = ("gpu", "gpu-cu12")

# The host a GPU install targets (CPython 3.12 on x86-64 Linux) is the GPU kit's target.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_kit import target  # noqa: E402
from gpu_kit.resolve import ResolveError  # noqa: E402
from gpu_kit.resolve import resolve as pip_resolve  # noqa: E402

from pipeline.backends.devices.detect import CUDA_VERSIONED, DistMeta, build_stem, distribution_cuda_major  # noqa: E402

TARGET_PYTHON = target.PYTHON_VERSION
TARGET_MARKERS = target.MARKERS

# Requirements an extra leaves to the user, resolved without them (README "Install": torch for
# CUDA 12 comes from PyTorch's own index, which this check cannot reach).
LEFT_TO_USER = {"gpu-cu12": ("torch",)}
# What pip would take from the public index for those instead, kept in the snapshot so the check
# shows why it cannot be used (and notices the day it can).
REJECTED = {"gpu-cu12": ("torch==2.10.0",)}


# --------------------------------------------------------------------------- requirements
def project_requirements(extra: str, pyproject: Path = REPO / "pyproject.toml") -> list[str]:
    """The base requirements plus those of ``extra``, as written in pyproject.toml."""
    project = tomllib.loads(pyproject.read_text())["project"]
    extras = project.get("optional-dependencies", {})
    if extra not in extras:
        raise SystemExit(f"{pyproject}: no extra {extra!r} (has: {', '.join(sorted(extras))})")
    return [*project["dependencies"], *extras[extra]]


@dataclass(frozen=True)
class Resolved:
    """One distribution of a resolution: what pip chose and what it asks for in turn."""

    name: str
    version: str
    requires: tuple[str, ...] = ()
    wheel: str = ""
    sha256: str = ""

    @property
    def key(self) -> str:
        return canonicalize_name(self.name)


@dataclass
class Snapshot:
    """A saved resolution of one extra for the target host."""

    extra: str
    requirements: list[str]
    resolved: dict[str, Resolved]
    made: str = ""
    pip: str = ""
    target: dict[str, str] = field(default_factory=dict)
    left_to_user: list[str] = field(default_factory=list)
    rejected: list[Resolved] = field(default_factory=list)

    @classmethod
    def read(cls, path: Path) -> Snapshot:
        data = json.loads(path.read_text())

        def dist(d: dict) -> Resolved:
            return Resolved(d["name"], d["version"], tuple(d["requires"]), d.get("wheel", ""), d.get("sha256", ""))

        resolved = {canonicalize_name(d["name"]): dist(d) for d in data["resolved"]}
        return cls(data["extra"], data["requirements"], resolved, data.get("made", ""), data.get("pip", ""),
                   data.get("target", {}), data.get("left_to_user", []), [dist(d) for d in data.get("rejected", [])])

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)

        def rows(dists: Iterable[Resolved]) -> list[dict]:
            return [{"name": r.name, "version": r.version, "wheel": r.wheel, "sha256": r.sha256,
                     "requires": list(r.requires)} for r in sorted(dists, key=lambda r: r.key)]

        data = {
            "extra": self.extra, "made": self.made, "pip": self.pip, "target": self.target,
            "requirements": self.requirements, "left_to_user": self.left_to_user,
            "resolved": rows(self.resolved.values()), "rejected": rows(self.rejected),
        }
        path.write_text(json.dumps(data, indent=1) + "\n")


# --------------------------------------------------------------------------- checks
def _applies(requirement: Requirement, extra: str) -> bool:
    if requirement.marker is None:
        return True
    return requirement.marker.evaluate({**TARGET_MARKERS, "extra": extra})


def requirement_graph(roots: Iterable[str], resolved: Mapping[str, Resolved]) -> list[tuple[str, Requirement]]:
    """Every (who, requirement) reachable from ``roots`` through the resolved set.

    Walks the graph as an installer does: a requirement ``name[x]`` activates extra ``x`` of
    ``name``, and a package's ``Requires-Dist`` lines count when their marker holds on the
    target for one of its active extras (or none).
    """
    edges: list[tuple[str, Requirement]] = []
    active: dict[str, set[str]] = defaultdict(set)
    queue: list[tuple[str, Requirement]] = [("the project", Requirement(r)) for r in roots]
    seen: set[tuple[str, str]] = set()
    while queue:
        parent, req = queue.pop()
        if (parent, str(req)) in seen:
            continue
        seen.add((parent, str(req)))
        edges.append((parent, req))
        key = canonicalize_name(req.name)
        dist = resolved.get(key)
        new = {""} | set(req.extras)
        if dist is None or not new - active[key]:
            continue
        active[key] |= new
        for line in dist.requires:
            child = Requirement(line)
            if any(_applies(child, extra) for extra in active[key]):
                queue.append((f"{dist.name} {dist.version}", child))
    return edges


def unmet_requirements(roots: Iterable[str], resolved: Mapping[str, Resolved]) -> list[str]:
    """Every requirement reachable from ``roots`` that the resolved set does not meet."""
    problems = []
    for parent, req in requirement_graph(roots, resolved):
        dist = resolved.get(canonicalize_name(req.name))
        if dist is None:
            problems.append(f"{parent} requires {req}, and nothing provides {req.name}")
        elif not req.specifier.contains(Version(dist.version), prereleases=True):
            problems.append(f"{parent} requires {req}, but {dist.name} {dist.version} was resolved")
    return sorted(set(problems))


def cuda_major(dist: Resolved) -> int | None:
    """The CUDA major a distribution is built for (``pipeline doctor`` reads installed ones alike)."""
    return distribution_cuda_major(DistMeta(dist.name, dist.version, dist.requires))


def mixed_cuda_majors(resolved: Mapping[str, Resolved]) -> list[str]:
    """One line per CUDA major when the set mixes builds for more than one."""
    by_major: dict[int, list[str]] = defaultdict(list)
    for dist in resolved.values():
        major = cuda_major(dist)
        if major is not None:
            by_major[major].append(f"{dist.name} {dist.version}")
    if len(by_major) < 2:
        return []
    return [f"CUDA {major}: {', '.join(sorted(names))}" for major, names in sorted(by_major.items())]


def same_package_twice(resolved: Mapping[str, Resolved]) -> list[str]:
    """Groups of distributions that are builds of one package and install the same files."""
    builds: dict[str, list[str]] = defaultdict(list)
    for dist in resolved.values():
        if dist.key.startswith("nvidia-") or dist.key in CUDA_VERSIONED:
            continue      # CUDA component wheels of different majors live in separate folders
        builds[build_stem(dist.key)].append(dist.name)
    return [" and ".join(sorted(names)) for names in builds.values() if len(names) > 1]


def why_rejected(candidate: Resolved, resolved: Mapping[str, Resolved], roots: Iterable[str]) -> list[str]:
    """The requirements of the resolved set that ``candidate``'s exact pins contradict.

    Compared with the requirements, not with the versions pip happened to choose: torch pins
    every CUDA library exactly, and a pin only rules torch out where something else's range
    excludes it (cuML's ``nvidia-nvjitlink-cu12>=12.9`` against torch 2.10.0's ``==12.8.93``).
    """
    ranges: dict[str, list[tuple[str, Requirement]]] = defaultdict(list)
    for parent, req in requirement_graph(roots, resolved):
        ranges[canonicalize_name(req.name)].append((parent, req))
    problems = []
    for line in candidate.requires:
        pin = Requirement(line)
        exact = [s.version for s in pin.specifier if s.operator == "=="]
        if not _applies(pin, "") or not exact or "*" in exact[0]:
            continue
        for parent, other in ranges.get(canonicalize_name(pin.name), []):
            if not other.specifier.contains(Version(exact[0]), prereleases=True):
                problems.append(f"{candidate.name} {candidate.version} pins {pin.name}=={exact[0]}; "
                                f"{parent} requires {other.name}{other.specifier}")
    return sorted(set(problems))


def check_snapshot(snapshot: Snapshot, requirements: Sequence[str]) -> list[str]:
    """Everything wrong with ``snapshot`` as a resolution of ``requirements``; empty if sound."""
    problems: list[str] = []
    if sorted(snapshot.requirements) != sorted(requirements):
        added = sorted(set(requirements) - set(snapshot.requirements))
        removed = sorted(set(snapshot.requirements) - set(requirements))
        problems.append(f"the snapshot was resolved from other requirements (now also: {added}; "
                        f"no longer: {removed}); run `python scripts/resolve_gpu_extras.py refresh`")
    roots = [r for r in requirements if canonicalize_name(Requirement(r).name) not in snapshot.left_to_user]
    problems += unmet_requirements(roots, snapshot.resolved)
    for candidate in snapshot.rejected:
        if not why_rejected(candidate, snapshot.resolved, roots):
            problems.append(f"{candidate.name} {candidate.version} from the public index now fits this "
                            f"extra: it need no longer be left to the user")
    mixed = mixed_cuda_majors(snapshot.resolved)
    if mixed:
        problems.append("builds for more than one CUDA major: " + "; ".join(mixed))
    problems += [f"{group} install the same package" for group in same_package_twice(snapshot.resolved)]
    return problems


# --------------------------------------------------------------------------- refresh (network)
# pip 23.2 reports this set as impossible (it mishandles one package required with different
# extras: cuda-toolkit[cublas,...] from torch and from cuML); pip 26.3 resolves it, so ask for 26.
MIN_PIP = Version("26.0")


def _pip_version(python: str) -> Version | None:
    done = subprocess.run([python, "-m", "pip", "--version"], capture_output=True, text=True)
    return Version(done.stdout.split()[1]) if done.returncode == 0 else None


def _pip_python() -> str:
    """An interpreter of the target's Python version when one runs here, so markers agree."""
    candidate = shutil.which(f"python{TARGET_PYTHON}")
    return candidate if candidate and _pip_version(candidate) else sys.executable


def resolve(extra: str, python: str) -> Snapshot:
    pip_version = _pip_version(python)
    if pip_version is None or pip_version < MIN_PIP:
        raise SystemExit(f"{python}: pip {pip_version or '(none)'} is too old to resolve the GPU "
                         f"extras; use an interpreter with pip {MIN_PIP} or newer (--python)")
    requirements = project_requirements(extra)
    left = LEFT_TO_USER.get(extra, ())
    roots = [r for r in requirements if canonicalize_name(Requirement(r).name) not in left]
    resolved = _pip_resolve(python, roots, f"extra {extra!r}")
    rejected = [dist for spec in REJECTED.get(extra, ())
                for dist in _pip_resolve(python, [spec], spec, no_deps=True).values()]
    return Snapshot(extra, requirements, resolved, made=dt.date.today().isoformat(), pip=str(pip_version),
                    target={"python": TARGET_PYTHON, "platform": "manylinux x86_64"},
                    left_to_user=list(left), rejected=rejected)


def _pip_resolve(python: str, requirements: Sequence[str], what: str, *, no_deps: bool = False) -> dict[str, Resolved]:
    """pip's resolution of ``requirements`` for the target, from package metadata alone."""
    try:
        dists = pip_resolve(requirements, python=python, no_deps=no_deps)
    except ResolveError as exc:
        raise SystemExit(f"{what} does not resolve:\n{exc}") from exc
    return {key: Resolved(d.name, d.version, d.requires, d.filename, d.sha256) for key, d in dists.items()}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", nargs="?", choices=("check", "refresh"), default="check")
    parser.add_argument("--extra", action="append", choices=GPU_EXTRAS,
                        help="an extra to resolve or check (default: all GPU extras)")
    parser.add_argument("--python", help="the interpreter whose pip resolves (refresh; default: "
                        f"python{TARGET_PYTHON} if it runs here, else this one)")
    args = parser.parse_args(argv)
    failed = 0
    for extra in args.extra or GPU_EXTRAS:
        path = SNAPSHOTS / f"{extra}.json"
        if args.command == "refresh":
            snapshot = resolve(extra, args.python or _pip_python())
            snapshot.write(path)
            print(f"{extra}: resolved {len(snapshot.resolved)} distributions -> {path.relative_to(REPO)}")
        if not path.exists():
            print(f"{extra}: no snapshot at {path.relative_to(REPO)}; run `{Path(__file__).name} refresh`")
            failed += 1
            continue
        snapshot = Snapshot.read(path)
        problems = check_snapshot(snapshot, project_requirements(extra))
        torch = snapshot.resolved.get("torch")
        summary = f"torch {torch.version} (CUDA {cuda_major(torch)})" if torch else "no torch"
        print(f"{extra}: {'OK' if not problems else 'FAILED'}: {len(snapshot.resolved)} distributions, "
              f"{summary}, resolved {snapshot.made}")
        for problem in problems:
            print(f"  - {problem}")
        for name in snapshot.left_to_user:
            print(f"  {name}: left to the user (README \"Install\")")
        roots = [r for r in snapshot.requirements
                 if canonicalize_name(Requirement(r).name) not in snapshot.left_to_user]
        for candidate in snapshot.rejected:
            for reason in why_rejected(candidate, snapshot.resolved, roots):
                print(f"  {candidate.name} {candidate.version} from the public index does not fit: {reason}")
        failed += bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
