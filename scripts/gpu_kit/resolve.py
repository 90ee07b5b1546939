"""Which wheels the host needs: pip resolves for the host, the kit keeps what the image lacks.

pip resolves the kit's requirements for CPython 3.12 on manylinux x86-64 from package metadata
alone (``pip install --dry-run --report``), so nothing large is downloaded to decide. The kit
then walks the requirements from the profile's roots: a requirement the image (or an earlier
profile) already meets ends the walk there; anything else is shipped, and its own
requirements are walked in turn. An image package whose version does not meet a requirement
is shipped in the resolved version (an override, which shadows the image's copy on
PYTHONPATH), except the image's core packages (``target.NEVER_SHIP``), which are reported as
conflicts instead.

torch is left out of the resolution (the image has it and no kit package needs it): its CUDA
13.0 library pins cannot be met together with cuML 26.10's (nvJitLink >= 13.3), and the image's
copy is what the project uses.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

try:
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
    from packaging.version import InvalidVersion, Version
except ImportError:                                  # pip always carries a copy
    from pip._vendor.packaging.requirements import Requirement  # type: ignore[no-redef]
    from pip._vendor.packaging.utils import canonicalize_name  # type: ignore[no-redef]
    from pip._vendor.packaging.version import InvalidVersion, Version  # type: ignore[no-redef]

from gpu_kit import target


class ResolveError(Exception):
    """pip could not resolve the kit for the host, or the report lacks what the kit needs."""


@dataclass(frozen=True)
class Dist:
    """One distribution pip chose: its wheel and what it requires."""

    name: str                       # canonical
    version: str
    requires: tuple[str, ...] = ()
    url: str = ""
    sha256: str = ""

    @property
    def filename(self) -> str:
        return unquote(Path(urlparse(self.url).path).name)


@dataclass
class Selection:
    """What one profile ships, and why some requirements could not be met by shipping."""

    profile: str
    ship: dict[str, Dist] = field(default_factory=dict)
    overrides: list[dict[str, str]] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)


# ----------------------------------------------------------------------------- pip
def pip_target_options() -> list[str]:
    """pip options that make it choose wheels for the host, not for this machine."""
    options = ["--only-binary=:all:", "--python-version", target.PYTHON_VERSION,
               "--implementation", target.IMPLEMENTATION]
    for platform in target.PLATFORMS:
        options += ["--platform", platform]
    return options


def resolve(requirements: Sequence[str], *, python: str = sys.executable, no_deps: bool = False) -> dict[str, Dist]:
    """pip's resolution of ``requirements`` for the host, from metadata (no wheel downloads);
    ``no_deps`` gives just the named distributions."""
    with tempfile.TemporaryDirectory(prefix="gpu-kit-resolve-") as scratch:
        report = Path(scratch) / "report.json"
        command = [python, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
                   *(["--no-deps"] if no_deps else []),
                   "--disable-pip-version-check", "--report", str(report), *pip_target_options(),
                   "--target", str(Path(scratch) / "never-written"), *requirements]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-25:])
            raise ResolveError(f"pip could not resolve {len(requirements)} requirement(s) for the host:\n{tail}")
        return parse_report(json.loads(report.read_text()))


def parse_report(report: Mapping[str, Any]) -> dict[str, Dist]:
    """The distributions of a ``pip install --report`` file, by canonical name."""
    dists: dict[str, Dist] = {}
    for item in report["install"]:
        metadata = item["metadata"]
        info = item.get("download_info", {})
        hashes = info.get("archive_info", {}).get("hashes", {})
        name = canonicalize_name(metadata["name"])
        dists[name] = Dist(name, metadata["version"], tuple(metadata.get("requires_dist") or ()),
                           info.get("url", ""), hashes.get("sha256", ""))
    return dists


def download(dists: Iterable[Dist], dest: Path, *, python: str = sys.executable) -> dict[str, Path]:
    """The wheels of ``dists`` in ``dest`` (pip download; a file already there with the right
    sha256 is kept), each checked against the hash the resolution recorded."""
    from gpu_kit.parts import sha256_file

    dest.mkdir(parents=True, exist_ok=True)
    dists = list(dists)
    wanted = [d for d in dists if not _have(dest / d.filename, d.sha256)]
    if wanted:
        command = [python, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "--progress-bar", "off",
                   "--dest", str(dest), *pip_target_options(), *(d.url for d in wanted)]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-20:])
            raise ResolveError(f"pip download exited {done.returncode}:\n{tail}")
    paths = {}
    for dist in dists:
        path = dest / dist.filename
        if not path.is_file():
            raise ResolveError(f"pip download did not produce {dist.filename}")
        if dist.sha256 and sha256_file(path) != dist.sha256:
            raise ResolveError(f"{dist.filename}: sha256 differs from the one the resolution recorded")
        paths[dist.name] = path
    return paths


def _have(path: Path, sha256: str) -> bool:
    from gpu_kit.parts import sha256_file

    return path.is_file() and bool(sha256) and sha256_file(path) == sha256


# ----------------------------------------------------------------------------- the image
def read_freeze(path: Path) -> dict[str, str | None]:
    """``pip freeze`` output: name -> version (None for a package installed from a URL)."""
    found: dict[str, str | None] = {}
    for line in path.read_text().splitlines():
        line = line.split("#")[0].strip()
        if not line or line.startswith("-"):
            continue
        if " @ " in line:
            found[canonicalize_name(line.split(" @ ")[0].strip())] = None
        elif "==" in line:
            name, _, version = line.partition("==")
            found[canonicalize_name(name.strip())] = version.strip()
    if not found:
        raise ResolveError(f"{path}: no 'name==version' lines (make it with `python -m pip freeze` on the host)")
    return found


def image_requirements(freeze: Mapping[str, str | None] | None) -> list[str]:
    """The image's core packages as requirements: the defaults, or the host's exact versions."""
    if freeze is None:
        return list(target.IMAGE_REQUIREMENTS)
    return [f"{name}=={version}" for name, version in sorted(freeze.items())
            if name in target.NEVER_SHIP and version is not None]   # NumPy stays free: it may be shipped


def image_present(freeze: Mapping[str, str | None] | None, *, python: str = sys.executable) -> dict[str, str | None]:
    """What the image has: the freeze file, or the resolution of the default image requirements."""
    if freeze is not None:
        return dict(freeze)
    return {name: dist.version for name, dist in resolve(target.IMAGE_REQUIREMENTS, python=python).items()}


def resolution_requirements(roots: Sequence[str], image: Sequence[str]) -> list[str]:
    """What pip resolves: the kit's roots and the image's core packages, without the image's
    own packages among the roots (the image provides them) and without torch."""
    kit = [r for r in roots if canonicalize_name(Requirement(r).name) not in target.NEVER_SHIP]
    core = [r for r in image if canonicalize_name(Requirement(r).name) != "torch"]
    return list(dict.fromkeys([*kit, *core]))


# ----------------------------------------------------------------------------- selection
def _applies(requirement: Requirement, extra: str) -> bool:
    if requirement.marker is None:
        return not extra
    environment = {**target.MARKERS, "extra": extra}
    if not extra:
        return requirement.marker.evaluate(environment)
    # Only what the extra adds: lines that hold with the extra and not without it.
    return requirement.marker.evaluate(environment) and not requirement.marker.evaluate({**environment, "extra": ""})


def _satisfied(requirement: Requirement, version: str | None) -> bool:
    if version is None:
        return True                    # installed from a URL: trust it
    try:
        return requirement.specifier.contains(Version(version), prereleases=True)
    except InvalidVersion:
        return True


def select(profile: str, roots: Sequence[str], resolved: Mapping[str, Dist],
           present: Mapping[str, str | None]) -> Selection:
    """The distributions ``profile`` must ship so that every requirement from ``roots`` down
    is met by a shipped distribution or by one ``present`` (name -> version) already."""
    selection = Selection(profile)
    walked: set[tuple[str, str]] = set()             # (dist, extra) whose requirements were queued
    queue = [(r, "the project") for r in map(Requirement, roots) if _applies(r, "")]

    def walk(dist: Dist, extras: Iterable[str]) -> None:
        for extra in ("", *sorted(extras)):
            if (dist.name, extra) in walked:
                continue
            walked.add((dist.name, extra))
            for line in dist.requires:
                requirement = Requirement(line)
                if _applies(requirement, extra):
                    queue.append((requirement, f"{dist.name} {dist.version}"))

    while queue:
        requirement, wanted_by = queue.pop(0)
        name = canonicalize_name(requirement.name)
        if name in selection.ship:
            walk(selection.ship[name], requirement.extras)
            continue
        if name in present and _satisfied(requirement, present[name]):
            continue                   # the image (or an earlier profile) has it; its own needs are its own
        if name in target.TOOLCHAIN_DROPPED:
            if name not in {d.split(" ")[0] for d in selection.dropped}:
                selection.dropped.append(f"{name} (wanted by {wanted_by}: {requirement})")
            continue
        if name in target.NEVER_SHIP:
            have = f"has {name} {present[name]}" if name in present else f"has no {name}"
            selection.conflicts.append(f"{wanted_by} needs {requirement}, but the image {have}")
            continue
        dist = resolved.get(name)
        if dist is None:
            raise ResolveError(f"{wanted_by} needs {requirement}, which the resolution does not contain")
        if name in present:
            selection.overrides.append({"name": name, "image": str(present[name]), "shipped": dist.version,
                                        "because": f"{wanted_by} needs {requirement}"})
        selection.ship[name] = dist
        walk(dist, requirement.extras)
    return selection
