"""The cache key of a stage: a hash of everything its output depends on (see ``pipeline.cache``)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from pipeline.core.fingerprints import code_fingerprint
from pipeline.version import __version__


def stage_key(spec: Any, input_keys: dict[str, str | None], *, fingerprint: Mapping[str, Any] | None,
              backend: str, versions: dict[str, str], seed: int) -> str | None:
    """The cache key of a stage, or None when it cannot be cached (its kind's ``fingerprint``
    is None, or an input cannot be cached)."""
    if fingerprint is None or any(key is None for key in input_keys.values()):
        return None
    payload: dict[str, Any] = {
        "kind": spec.kind,
        "params": spec.model_dump(mode="json", exclude={"description", "inputs", "budget"}),
        "inputs": input_keys,
        "declared": dict(fingerprint),
        "code": code_fingerprint(), "pipeline": __version__,
        "backend": backend, "versions": versions, "seed": seed,
    }
    text = json.dumps(payload, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]
