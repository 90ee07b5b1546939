"""What the run, predict and serve option objects share: built once at the boundary from a base
and named changes, with a misspelt name refused by name (a frozen dataclass would only say
``unexpected keyword argument``, without the names it takes)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from pipeline.core.errors import UsageError

O = TypeVar("O", bound="Options")


def names(value: Sequence[str] | str | None) -> tuple[str, ...]:
    """A sequence of names as a tuple (a lone string is one name, not its letters)."""
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)


class Options:
    """Mixin of a frozen dataclass of options: ``build`` and ``replace``."""

    what = "option"         # the word in the error: "unknown run option(s) ..."

    @classmethod
    def build(cls: type[O], options: O | None = None, **changes: Any) -> O:
        """``options`` (default: all defaults) with ``changes``; a ``TypeError`` naming any
        change that is not an option, and the options there are."""
        known = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
        unknown = [name for name in changes if name not in known]
        if unknown:
            raise TypeError(f"unknown {cls.what}(s) {', '.join(map(repr, unknown))}; the options are: "
                            f"{', '.join(known)}")
        if options is not None and not isinstance(options, cls):
            given = f"{type(options).__name__} {options!r:.80}"
            keywords = ", ".join(f"{k}={v!r}" for k, v in options.items()) if isinstance(options, Mapping) else "name=value"
            raise UsageError(f"the options argument must be a {cls.__name__} (or left out), got {given}; give the "
                             f"options as keywords ({keywords}) or as {cls.__name__}(...)")
        base = cls() if options is None else options
        return dataclasses.replace(base, **changes) if changes else base  # type: ignore[type-var]

    def replace(self: O, **changes: Any) -> O:
        """A copy with ``changes``."""
        return self.build(self, **changes)


__all__ = ["Options", "names"]
