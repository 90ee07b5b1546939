"""One process-wide thread pool for work split by column, sized to the cores this process may use.

The feature ops compute each column on its own (a mean, a value count, a fill, a comparison),
and the NumPy, pandas and pyarrow kernels they call release the GIL, so columns computed in
threads run on every core. Each column is still computed by the same code in the same order
of summation; only which thread runs it changes, so results are identical to a serial loop,
bit for bit, and come back in the order of the items.

The pool size is the number of cores the process may run on (``os.sched_getaffinity``: a
container or ``taskset`` limit, not the machine's count), or ``PIPELINE_THREADS`` when set (``1``
turns the pool off). Work submitted from inside a pool thread runs serially in that thread: a
nested map never waits for a pool thread that is waiting for it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from pipeline.core.errors import ConfigError
from pipeline.core.settings import Settings, current_settings, register_check

THREADS_ENV = Settings.variable("threads")

T = TypeVar("T")
R = TypeVar("R")

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_pool_key: tuple[int, int] = (0, 0)         # (process id, size): a forked child builds its own pool
_inside = threading.local()


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):        # no affinity call on this platform
        return max(1, os.cpu_count() or 1)


def thread_count(settings: Settings | None = None) -> int:
    """Threads for column work: ``PIPELINE_THREADS`` when set, else the available cores."""
    text = ((current_settings() if settings is None else settings).threads or "").strip()
    if not text:
        return available_cores()
    try:
        count = int(text)
    except ValueError:
        count = 0
    if count < 1:
        raise ConfigError(f"environment variable {THREADS_ENV}={text!r} must be a whole number of threads, "
                          "1 or more (1 runs the feature ops on one core); unset it to use every available core")
    return count


register_check("threads", check=thread_count)


def _executor(size: int) -> ThreadPoolExecutor:
    """The pool of ``size`` threads; a new one after a fork (the parent's threads are not in
    the child) or when ``PIPELINE_THREADS`` changed."""
    global _pool, _pool_key
    key = (os.getpid(), size)
    with _lock:
        if _pool is None or _pool_key != key:
            old = _pool if _pool_key[0] == key[0] else None
            _pool = ThreadPoolExecutor(size, thread_name_prefix="pipeline-columns", initializer=_mark_inside)
            _pool_key = key
            if old is not None:
                old.shutdown(wait=False)
        return _pool


def _mark_inside() -> None:
    _inside.active = True


def map_in_threads(fn: Callable[[T], R], items: Iterable[T], *, min_items: int = 2) -> list[R]:
    """``[fn(item) for item in items]``, the calls spread over the pool, results in order.

    Serial when there are fewer than ``min_items`` items, one thread, or the caller is itself
    a pool thread. The first exception raised by a call (in item order) is raised here, after
    every call has finished, so no call is left running behind the caller."""
    work: Sequence[T] = items if isinstance(items, Sequence) else list(items)
    size = min(thread_count(), len(work))
    if size < 2 or len(work) < min_items or getattr(_inside, "active", False):
        return [fn(item) for item in work]
    pool = _executor(thread_count())
    futures = [pool.submit(fn, item) for item in work]
    results: list[Any] = []
    error: BaseException | None = None
    for future in futures:
        try:
            results.append(future.result())
        except BaseException as exc:  # noqa: BLE001 - re-raised below once every call is done
            error = error or exc
    if error is not None:
        raise error
    return results


def free_cores(busy_percent: Sequence[float] | None = None, *, sample_seconds: float = 0.1) -> int:
    """The cores of ``available_cores`` that other work is not using now, at least 1: the
    machine's busy share over ``sample_seconds`` (``busy_percent``: per-core percentages, to
    reuse a sample), rounded to whole cores. A library that starts a thread per core on a busy
    machine waits on the busy cores (OpenMP's boosters slowed about 20 times with other work
    running); sized to the free ones it does not."""
    cores = available_cores()
    if busy_percent is None:
        import psutil

        busy_percent = psutil.cpu_percent(interval=sample_seconds, percpu=True)
    busy = sum(busy_percent) / 100.0 * cores / max(len(busy_percent), 1)
    return max(1, min(cores, cores - int(busy + 0.5)))
