"""The cache key of a stage: a hash of everything its output depends on (``pipeline.cache``)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from pipeline.core.fingerprints import code_fingerprint
from pipeline.version import __version__

# The code that writes an entry's output and reads it back: in every key, so that an entry is
# only ever read by the code that wrote it (a record it cannot read is set aside anyway).
ENTRY_CODE = ("pipeline.cache.output_pickling",)


def stage_key(spec: Any, input_keys: dict[str, str | None], *, fingerprint: Mapping[str, Any] | None,
              code: Iterable[str], backend: str, versions: dict[str, str], seed: int) -> str | None:
    """The cache key of a stage, or None when it cannot be cached (its kind's ``fingerprint``
    is None, or an input cannot be cached).

    ``code`` names the modules the stage runs (``StageKind.code_modules``): their source and that
    of every module of the package they import is in the key (``code_fingerprint``), nothing else
    of the package's, so an edit to the report or the CLI reruns no stage.
    """
    if fingerprint is None or any(key is None for key in input_keys.values()):
        return None
    payload: dict[str, Any] = {
        "kind": spec.kind,
        "params": spec.model_dump(mode="json", exclude={"description", "inputs", "budget"}),
        "inputs": input_keys,
        "declared": dict(fingerprint),
        "code": code_fingerprint([*code, *ENTRY_CODE]), "pipeline": __version__,
        "backend": backend, "versions": versions, "seed": seed,
    }
    text = json.dumps(payload, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]
