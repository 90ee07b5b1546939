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

    ``input_keys`` maps each input stage to its key, in the order of ``spec.inputs`` (a kind
    with roles lists them in role order); the key hashes them as a list of pairs in that order,
    not as a dict (which ``sort_keys`` would sort by name): which upstream output feeds which
    role or position is part of what a stage computes (a join with left and right swapped is
    another join). The names stay in: a ``python`` stage's function receives its inputs by name.
    """
    if fingerprint is None or any(key is None for key in input_keys.values()):
        return None
    payload: dict[str, Any] = {
        "kind": spec.kind,
        "params": spec.model_dump(mode="json", exclude={"description", "inputs", "budget"}),
        "inputs": [[name, key] for name, key in input_keys.items()],
        "declared": dict(fingerprint),
        "code": code_fingerprint([*code, *ENTRY_CODE]), "pipeline": __version__,
        "backend": backend, "versions": versions, "seed": seed,
    }
    text = json.dumps(payload, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]
