"""Registries as tests change them: an extension registered for one block, the registry as it
was afterwards (other tests list the built-in entries from it)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from pipeline.features import OPS, FeatureOp, register_op


@contextmanager
def registered(*classes: type[FeatureOp]) -> Iterator[None]:
    """``classes`` (feature ops) registered for the block; the op registry as it was afterwards."""
    saved = dict(OPS)
    try:
        for cls in classes:
            register_op(cls)
        yield
    finally:
        OPS.clear()
        OPS.update(saved)
