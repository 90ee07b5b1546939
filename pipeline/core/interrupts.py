"""Why a run stops early, held process-wide: a budget cap passed, or SIGTERM.

Both are ``KeyboardInterrupt`` subclasses, not ``Exception``, so a stage cannot catch them as a
failure of its own; both leave a note behind that outlives the exception, because a library
that catches one inside its own loop and raises an error of its own must not turn a stop into
a stage failure.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator
from typing import Any


class BudgetExceeded(KeyboardInterrupt):
    """Raised in the thread running the stages when a cap is passed (``pipeline.usage.budget``): not an
    ``Exception``, so a stage cannot catch it as a failure of its own; the runner records the run
    as stopped by the budget and raises ``BudgetError``."""


_budget_stop: list[str] = []


def request_budget_stop(why: str) -> None:
    """Note why the budget stopped the run: a library that turns the exception into an error of
    its own must not make it a stage failure (``budget_stop`` is what the run records)."""
    _budget_stop[:] = [why]


def budget_stop() -> str | None:
    """Why the budget stopped the run, or None."""
    return _budget_stop[0] if _budget_stop else None


def clear_budget_stop() -> None:
    _budget_stop.clear()


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread so the run is recorded as interrupted and stops."""


_termination = threading.Event()


def request_termination() -> Terminated:
    """Note that SIGTERM arrived and return the exception to raise. The note outlives the
    exception: a library that catches it inside its own loop (XGBoost in a training callback)
    and raises an error of its own must not turn a termination into a stage failure."""
    _termination.set()
    return Terminated()


def termination_requested() -> bool:
    return _termination.is_set()


def raise_if_stopped() -> None:
    """Raise the stop noted, if any (``Terminated`` first, then ``BudgetExceeded``). Where a
    library swallowed the exception itself (raised inside a Python callback that C code calls,
    XGBoost's data iterator: ctypes prints "Exception ignored" and goes on) the note is all that
    is left: a stage that then returns, or a tuning trial that fails, raises it again here."""
    if termination_requested():
        raise Terminated()
    why = budget_stop()
    if why is not None:
        raise BudgetExceeded(why)


@contextlib.contextmanager
def unraisable_stops_unsaid() -> Iterator[None]:
    """While a run goes: a stop that C code swallowed (ctypes prints "Exception ignored on
    calling ctypes callback function" and a traceback) prints nothing, since ``raise_if_stopped``
    raises it again; anything else unraisable is reported as before."""
    before = sys.unraisablehook

    def hook(unraisable: Any) -> None:
        if not isinstance(unraisable.exc_value, (BudgetExceeded, Terminated)):
            before(unraisable)

    sys.unraisablehook = hook
    try:
        yield
    finally:
        if sys.unraisablehook is hook:
            sys.unraisablehook = before
