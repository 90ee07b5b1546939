"""Content fingerprints for the stage cache: of files, of Python modules, of this package.

Kept apart from ``pipeline.cache`` so stage kinds can declare what their output depends on
(``register_stage(fingerprint=...)``) without importing the cache.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from functools import cache
from glob import glob
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent


@cache
def code_fingerprint() -> str:
    """Hash of every source file of the ``pipeline`` package (computed once per process)."""
    digest = hashlib.blake2b(digest_size=16)
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        digest.update(str(path.relative_to(PACKAGE_DIR)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def files_fingerprint(pattern: str) -> dict[str, str]:
    """SHA-256 of each file a path, glob or folder names (a folder: every file below it).

    SHA-256, not BLAKE2b: with the SHA extensions of current x86 and ARM CPUs (which OpenSSL
    uses) it hashes 2-2.5x faster, and a large input is hashed on every run, cached or not.
    """
    path = Path(pattern)
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith("."))
    elif any(ch in pattern for ch in "*?["):
        files = sorted(Path(p) for p in glob(pattern))
    else:
        files = [path]
    out = {}
    for file in files:
        try:
            with open(file, "rb") as fh:
                out[str(file)] = hashlib.file_digest(fh, "sha256").hexdigest()
        except OSError:
            out[str(file)] = "missing"          # the stage itself will report it
    return out


def module_fingerprint(target: str) -> str:
    """Hash of the source file of the module in ``module.path[:attribute]`` ("unresolved" if none)."""
    module = target.partition(":")[0]
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return "unresolved"
    if spec is None or not spec.origin or not os.path.isfile(spec.origin):
        return "unresolved"
    return hashlib.blake2b(Path(spec.origin).read_bytes(), digest_size=16).hexdigest()
