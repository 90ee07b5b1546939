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
import time
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


_user_interrupt = threading.Event()


def request_user_interrupt() -> KeyboardInterrupt:
    """Note that SIGINT (Ctrl-C) arrived and return the exception to raise: the note outlives a
    library that swallows it, as ``request_termination``'s does. Cleared as a run starts."""
    _user_interrupt.set()
    return KeyboardInterrupt()


def clear_user_interrupt() -> None:
    _user_interrupt.clear()


# Python functions that C code calls and that cannot take an exception: raised there it is
# printed as "Exception ignored" and the C code goes on with a broken state (XGBoost's data
# iterator then fails its check, or frees memory twice: SIGABRT). (package folder, function name)
C_CALLBACKS = frozenset({("xgboost", "_next_wrapper"), ("xgboost", "_reset_wrapper")})


def unsafe_to_raise(frame: Any) -> bool:
    """Whether an exception raised at ``frame`` (a thread's current frame) would land inside an
    import (half-imported modules break every later run of the process) or inside a Python
    callback that C code calls (``C_CALLBACKS``)."""
    while frame is not None:
        code = frame.f_code
        if code.co_filename.startswith("<frozen importlib"):
            return True
        if any(code.co_name == name and f"/{package}/" in code.co_filename for package, name in C_CALLBACKS):
            return True
        frame = frame.f_back
    return False


# At most this long an exception waits for its thread to leave an unsafe frame: a stop still stops.
SAFE_POINT_WAIT = 10.0
_SAFE_POINT_POLL = 0.01


def wait_for_safe_point(thread_id: int, given_up: threading.Event | None = None) -> bool:
    """Wait until the thread ``thread_id`` is out of unsafe frames (``SAFE_POINT_WAIT`` seconds
    at most); False when ``given_up`` was set meanwhile (the stop is no longer wanted)."""
    deadline = time.monotonic() + SAFE_POINT_WAIT
    while unsafe_to_raise(sys._current_frames().get(thread_id)) and time.monotonic() < deadline:
        if given_up is not None and given_up.is_set():
            return False
        time.sleep(_SAFE_POINT_POLL)
    return given_up is None or not given_up.is_set()


def raise_when_safe(thread_id: int, exception: type[BaseException]) -> None:
    """Raise ``exception`` in the thread ``thread_id`` once it is out of unsafe frames, from a
    helper thread: a signal handler that met an unsafe frame notes the stop and returns, and
    this raises it a moment later."""
    def wait_and_raise() -> None:
        wait_for_safe_point(thread_id)
        raise_in(thread_id, exception)

    threading.Thread(target=wait_and_raise, name="pipeline-safe-point", daemon=True).start()


def raise_in(thread_id: int, exception: type[BaseException]) -> None:
    """Raise ``exception`` in another thread of this process at its next Python instruction
    (CPython's ``PyThreadState_SetAsyncExc``: the one way to stop a thread from outside)."""
    import ctypes

    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), ctypes.py_object(exception))


def stop_handler(request: Any) -> Any:
    """A signal handler that notes the stop (``request()`` returns the exception) and raises it,
    unless the main thread is inside an unsafe frame: then it is raised there a moment later."""
    def handler(signum: int, frame: Any) -> None:
        exc = request()
        if unsafe_to_raise(frame):
            raise_when_safe(threading.main_thread().ident, type(exc))
            return
        raise exc

    return handler


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
    if _user_interrupt.is_set():
        raise KeyboardInterrupt()


@contextlib.contextmanager
def unraisable_stops_unsaid() -> Iterator[None]:
    """While a run goes: a stop that C code swallowed (ctypes prints "Exception ignored on
    calling ctypes callback function" and a traceback) prints nothing, since ``raise_if_stopped``
    raises it again; anything else unraisable is reported as before."""
    before = sys.unraisablehook

    def hook(unraisable: Any) -> None:
        stop = unraisable.exc_value
        noted = isinstance(stop, (BudgetExceeded, Terminated)) or (isinstance(stop, KeyboardInterrupt)
                                                                  and _user_interrupt.is_set())
        if not noted:
            before(unraisable)

    sys.unraisablehook = hook
    try:
        yield
    finally:
        if sys.unraisablehook is hook:
            sys.unraisablehook = before
