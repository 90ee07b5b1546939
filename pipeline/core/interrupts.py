"""Why a run stops early, held process-wide: a budget cap passed, or SIGTERM.

Both are ``KeyboardInterrupt`` subclasses, not ``Exception``, so a stage cannot catch them as a
failure of its own; both leave a note behind that outlives the exception, because a library
that catches one inside its own loop and raises an error of its own must not turn a stop into
a stage failure.
"""

from __future__ import annotations

import threading


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
