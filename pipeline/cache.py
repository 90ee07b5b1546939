"""The content-addressed stage cache: skip a stage whose inputs, params and code are unchanged.

A stage's key is a hash of everything its output depends on:

- its resolved params (``description`` aside) and the keys of its input stages, so a change
  reruns the stage and everything downstream of it, nothing else;
- what its kind declares beyond that (``register_stage(fingerprint=...)``): a ``load``
  declares the *contents* of the files it reads (BLAKE2b over every byte; size + mtime would
  miss a file rewritten in place within the same second), a ``python`` stage the source of
  the user's module. A kind whose fingerprint is None for a spec is never cached (stages on
  partitioned Dask data: their outputs are lazy views of files in one run's folder), and
  neither is anything downstream of it;
- the source of the whole ``pipeline`` package and its version: any code change
  invalidates the cache. Coarse, but it never misses an edit in a helper function;
- the backend and the versions of its libraries, and the run's seed.

An entry is a folder ``<runs_dir>/<pipeline>/.cache/<key>/`` holding the pickled output, a
copy of the stage's artifact folder and ``record.json`` with the sha256 of each. It is built
under a temporary name and renamed into place, so an entry is complete or absent; on lookup
every checksum is verified and an entry that fails is moved aside and recomputed, never
loaded.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pickle
import secrets
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline import __version__
from pipeline.fingerprints import code_fingerprint
from pipeline.store import atomic_destination, atomic_write_text, sha256_file, utc_now

log = logging.getLogger("pipeline")


def stage_key(spec: Any, input_keys: dict[str, str | None], *, fingerprint: Mapping[str, Any] | None,
              backend: str, versions: dict[str, str], seed: int) -> str | None:
    """The cache key of a stage, or None when it cannot be cached (its kind's ``fingerprint``
    is None, or an input cannot be cached)."""
    if fingerprint is None or any(key is None for key in input_keys.values()):
        return None
    payload: dict[str, Any] = {
        "kind": spec.kind,
        "params": spec.model_dump(mode="json", exclude={"description", "inputs"}),
        "inputs": input_keys,
        "declared": dict(fingerprint),
        "code": code_fingerprint(), "pipeline": __version__,
        "backend": backend, "versions": versions, "seed": seed,
    }
    text = json.dumps(payload, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


@dataclass
class CacheEntry:
    key: str
    path: Path
    record: dict[str, Any]

    @property
    def artifacts(self) -> Path:
        return self.path / "artifacts"

    def load_output(self) -> Any:
        with open(self.path / "output.pkl", "rb") as fh:
            return pickle.load(fh)

    def restore_artifacts(self, destination: Path) -> list[str]:
        """Hard-link (or copy) the entry's artifacts into a run's stage folder."""
        restored = []
        for source in sorted(self.artifacts.rglob("*")):
            if not source.is_file():
                continue
            target = destination / source.relative_to(self.artifacts)
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(source, target)          # artifacts are replaced by rename, never edited
            except OSError:
                shutil.copy2(source, target)
            restored.append(str(target))
        return restored


class StageCache:
    """Entries under one folder (per pipeline); safe with concurrent writers."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def lookup(self, key: str) -> CacheEntry | None:
        """The verified entry for ``key``, or None (absent, or corrupt and set aside)."""
        path = self.root / key
        if not path.is_dir():
            return None
        try:
            record = json.loads((path / "record.json").read_text(encoding="utf-8"))
            problem = self._verify(path, record)
        except (OSError, ValueError, KeyError) as exc:
            problem = f"{type(exc).__name__}: {exc}"
        if problem:
            log.warning("cache entry %s for stage %s failed verification (%s); recomputing",
                        key, path.name, problem)
            self._discard(path)
            return None
        return CacheEntry(key, path, record)

    @staticmethod
    def _verify(path: Path, record: dict[str, Any]) -> str | None:
        for relative, expected in record["files"].items():
            file = path / relative
            if not file.is_file():
                return f"{relative} is missing"
            if sha256_file(file) != expected:
                return f"{relative} does not match its checksum"
        return None

    def store(self, key: str, output: Any, artifacts_dir: Path | None, record: dict[str, Any]) -> None:
        """Write an entry for ``key`` under a temporary name, then rename it into place."""
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self.root / f".tmp-{key}-{os.getpid()}-{secrets.token_hex(3)}"
        try:
            tmp.mkdir()
            with atomic_destination(tmp / "output.pkl") as out:
                with open(out, "wb") as fh:
                    pickle.dump(output, fh, protocol=pickle.HIGHEST_PROTOCOL)
            if artifacts_dir is not None and artifacts_dir.is_dir():
                shutil.copytree(artifacts_dir, tmp / "artifacts")
            files = {str(p.relative_to(tmp)): sha256_file(p) for p in sorted(tmp.rglob("*")) if p.is_file()}
            atomic_write_text(tmp / "record.json", json.dumps(
                {**record, "key": key, "created": utc_now(), "files": files}, indent=2, default=str))
            try:
                os.rename(tmp, self.root / key)
            except OSError:                       # another run stored the same key first
                shutil.rmtree(tmp, ignore_errors=True)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    def _discard(self, path: Path) -> None:
        aside = self.root / f".corrupt-{path.name}-{secrets.token_hex(3)}"
        try:
            os.rename(path, aside)
        except OSError:
            return
        shutil.rmtree(aside, ignore_errors=True)
