"""What every conformance check raises: an ``AssertionError`` that names the extension and the
check it failed, so a plugin's test output says what to fix without a traceback to read."""

from __future__ import annotations

import pickle
from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager
from typing import Any

__all__ = ["ConformanceFailure", "first_line", "pickled", "registered_while_checked"]


class ConformanceFailure(AssertionError):
    """An extension broke its contract: ``extension`` (``stage kind 'key_join'``) failed
    ``check`` (``pickle``) because of ``detail``."""

    def __init__(self, extension: str, check: str, detail: str) -> None:
        self.extension, self.check, self.detail = extension, check, detail
        super().__init__(f"{extension} fails the conformance check '{check}': {detail}")

    def __reduce__(self):
        return (type(self), (self.extension, self.check, self.detail))


def first_line(exc: BaseException) -> str:
    """``Type: first line of the message``, for a failure's detail."""
    text = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def pickled(value: Any) -> Any:
    """``value`` through ``pickle`` and back, as Dask sends it to a worker (by reference for
    classes and functions: a worker imports the plugin that defines them)."""
    return pickle.loads(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))


@contextmanager
def registered_while_checked(registry: MutableMapping[str, Any], name: str, entry: Any) -> Iterator[None]:
    """``entry`` under ``name`` in ``registry`` while a check runs (a config block validates
    against the registries), and the registry as it was afterwards."""
    previous = registry.get(name)
    if previous is entry:
        yield
        return
    registry[name] = entry
    try:
        yield
    finally:
        if previous is None:
            registry.pop(name, None)
        else:
            registry[name] = previous
