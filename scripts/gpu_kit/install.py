"""Install wheels into a plain folder that goes on PYTHONPATH, in batches as they arrive.

``pip install --target DIR`` does not merge into a folder that already has the same top-level
directory: it warns and skips it (or, with ``--upgrade``, replaces it whole). Wheels that share
a namespace directory (``nvidia/``, for one) and arrive in different transfers would then lose
files. So each batch is installed into a fresh staging folder beside DIR and merged into DIR
file by file. Without pip the wheels are unpacked here (a wheel is a zip whose ``.data``
folders are spread over the install scheme). Standard library only.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import site
import stat
import subprocess
import sys
import sysconfig
import tempfile
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath

STATE_FILE = ".gpu-kit-installed.json"


class InstallError(Exception):
    """pip (or the built-in unpacker) could not install a batch."""


def pip_available() -> bool:
    return importlib.util.find_spec("pip") is not None


def read_state(target: Path) -> dict[str, str]:
    """Wheels already installed into ``target`` by the kit: file name -> sha256."""
    path = target / STATE_FILE
    if not path.is_file():
        return {}
    return dict(json.loads(path.read_text()).get("installed", {}))


def write_state(target: Path, installed: Mapping[str, str]) -> None:
    path = target / STATE_FILE
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps({"installed": dict(sorted(installed.items()))}, indent=1) + "\n")
    temporary.replace(path)


def install_batch(wheels: Sequence[Path], target: Path, *, installer: str = "auto") -> str:
    """Install ``wheels`` (no dependencies, no index) and merge them into ``target``.

    Returns the installer used ("pip" or "builtin").
    """
    if installer == "auto":
        installer = "pip" if pip_available() else "builtin"
    target.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".gpu-kit-staging-", dir=target.parent))
    try:
        if installer == "pip":
            _pip_install(wheels, staging)
        elif installer == "builtin":
            for wheel in wheels:
                unpack_wheel(wheel, staging)
        else:
            raise ValueError(f"unknown installer {installer!r}")
        merge_tree(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return installer


def _pip_install(wheels: Sequence[Path], staging: Path) -> None:
    command = [sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--disable-pip-version-check",
               "--no-warn-script-location", "--target", str(staging), *map(str, wheels)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise InstallError(f"pip install exited {done.returncode}:\n{tail}")


def merge_tree(source: Path, target: Path) -> None:
    """Move every file of ``source`` into ``target``, merging directories, replacing files."""
    for root, dirs, files in os.walk(source):
        relative = Path(root).relative_to(source)
        destination = target / relative
        destination.mkdir(parents=True, exist_ok=True)
        for name in files + [d for d in dirs if (Path(root) / d).is_symlink()]:
            into = destination / name
            if into.is_dir() and not into.is_symlink():
                shutil.rmtree(into)
            os.replace(Path(root) / name, into)


# ----------------------------------------------------------------------------- .pth files
BRIDGE_MARK = "# written by gpu_kit/unpack.py"
BRIDGE = BRIDGE_MARK + '''
"""Read this folder's .pth files at start-up, as Python does for a site directory.

Python reads .pth files only in site directories, not in PYTHONPATH folders, and packages here
rely on theirs (numba-cuda's redirector, rapids-dask-dependency's import hook). Afterwards the
sitecustomize this one shadows, if there is one, runs as before.
"""
import importlib.machinery
import importlib.util
import os
import site
import sys

try:                                # numba-cuda 0.30 calls numpy.row_stack, which NumPy 2.5 removed
    import numpy as _numpy
    if not hasattr(_numpy, "row_stack"):
        _numpy.row_stack = _numpy.vstack
except ImportError:
    pass

_here = os.path.dirname(os.path.abspath(__file__))
site.addsitedir(_here)              # already on sys.path: only its .pth files are read
_spec = importlib.machinery.PathFinder.find_spec(
    "sitecustomize", [p for p in sys.path if os.path.abspath(p or os.curdir) != _here])
if _spec is not None and _spec.loader is not None:
    _module = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_module)
'''


def write_pth_bridge(target: Path) -> str | None:
    """A ``sitecustomize.py`` in ``target`` that reads its .pth files (and gives NumPy 2.5 the
    ``row_stack`` the image's numba-cuda calls); says what it did, or why not."""
    pth = sorted(p.name for p in target.glob("*.pth")) or ["no .pth files"]
    bridge = target / "sitecustomize.py"
    if bridge.exists() and not bridge.read_text(errors="replace").startswith(BRIDGE_MARK):
        return (f"{bridge} came with a package, so {', '.join(pth)} are not read at start-up "
                "(Python reads .pth files only in site directories)")
    bridge.write_text(BRIDGE)
    return f"{', '.join(pth)} are read at start-up through {bridge} (Python reads .pth files only in site directories)"


# ----------------------------------------------------------------------------- no pip
def unpack_wheel(wheel: Path, dest: Path) -> None:
    """What ``pip install --target`` does with one wheel, for a host without pip."""
    dest.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            path = PurePosixPath(info.filename)
            if path.is_absolute() or ".." in path.parts:
                raise InstallError(f"{wheel.name}: unsafe path {info.filename!r} in the wheel")
            archive.extract(info, dest)
            mode = info.external_attr >> 16
            if mode & stat.S_IXUSR and not info.is_dir():
                os.chmod(dest / path, 0o755)
    for data in sorted(dest.glob("*.data")):
        for scheme in sorted(data.iterdir()):
            if scheme.name in ("purelib", "platlib", "data"):
                merge_tree(scheme, dest)
            elif scheme.name == "scripts":
                merge_tree(scheme, dest / "bin")
                for script in (dest / "bin").iterdir():
                    _fix_shebang(script)
            elif scheme.name == "headers":
                merge_tree(scheme, dest / "include" / data.name.removesuffix(".data"))
        shutil.rmtree(data)
    for info_dir in dest.glob("*.dist-info"):
        (info_dir / "INSTALLER").write_text("gpu-kit\n")


def _fix_shebang(script: Path) -> None:
    """Wheels write ``#!python`` for the installer to replace with the interpreter."""
    if not script.is_file():
        return
    content = script.read_bytes()
    if content.startswith(b"#!python"):
        script.write_bytes(b"#!" + sys.executable.encode() + content[len(b"#!python"):])
    script.chmod(0o755)


# ----------------------------------------------------------------------------- native libraries
def library_dirs(site_dir: Path) -> list[Path]:
    """The folders of NVIDIA's library wheels under one site folder (``nvidia/<name>/lib`` and
    ``nvidia/cu13/lib``), where RPATHs of the image's packages point but those of packages on
    PYTHONPATH do not."""
    return sorted(p for p in site_dir.glob("nvidia/*/lib") if p.is_dir())


def kit_environment(target: Path, checkout: Path, preload: list[Path], base: dict[str, str] | None = None) -> dict[str, str]:
    """The variables a process needs to use what the kit installed in ``target``.

    - PYTHONPATH: the checkout, then ``target``.
    - LD_LIBRARY_PATH: the NVIDIA library folders of ``target`` and of the image's site-packages.
      A RAPIDS library on PYTHONPATH finds its CUDA libraries (cuFFT, cuBLAS, NCCL) by an RPATH
      relative to itself, which points into ``target``, where they are not: without this,
      ``import cuml`` fails (``libcufft.so.12`` not found) unless torch loaded them first.
    - LD_PRELOAD: the shared libraries of overrides (nvJitLink 13.5), loaded before the image's
      older copy that torch's RPATH would find first.
    """
    env = dict(os.environ if base is None else base)
    image_sites = list(dict.fromkeys([*site.getsitepackages(), sysconfig.get_paths()["purelib"]]))
    dirs = [*library_dirs(target), *(d for s in image_sites for d in library_dirs(Path(s)))]
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(checkout), str(target), env.get("PYTHONPATH", "")) if p)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        dict.fromkeys([*(str(d) for d in dirs), *filter(None, env.get("LD_LIBRARY_PATH", "").split(os.pathsep))]))
    if preload:
        env["LD_PRELOAD"] = os.pathsep.join(
            dict.fromkeys([*(str(p) for p in preload), *filter(None, env.get("LD_PRELOAD", "").split(os.pathsep))]))
    env["PATH"] = os.pathsep.join(filter(None, [str(target / "bin"), env.get("PATH", "")]))
    return env
