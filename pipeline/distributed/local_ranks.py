"""Ranks as processes on this machine: one spawned per rank, rank 0's progress forwarded, and
the stage failed the moment a rank dies.

The processes are spawned, not forked: a fork of a process that has started threads (Dask's,
PyTorch's) or a CUDA context can deadlock or crash. Where Dask's worker processes start by
forkserver (``distributed.worker.multiprocessing-method``), the ranks do too: each is a fork
of a server process that imported torch and the rank's code once, single-threaded and with no
CUDA context, so a rank starts in milliseconds rather than seconds; the rank still gets this
process's environment, working directory and ``sys.path``, as a spawned one would. Each runs
``target(rank, *args, progress=...)``; rank 0's progress lines reach the caller's progress. A rank's exception
comes back as itself where it pickles (a ``DataError`` stays one), its traceback kept as the
cause. A rank that ends without a word (killed, out of memory, a crash in native code) ends
the stage naming the rank and its process: the peers are stopped rather than left waiting in
a collective.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import pickle
import queue
import signal
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pipeline.backends.clusters.main_guard import refuse_unguarded_main_script, worker_start_method
from pipeline.core.errors import StageError

# How often the parent looks at its ranks' processes and messages.
POLL_SECONDS = 0.2
# After a rank's error, how long to look for a peer that died: a rank whose peer was killed
# fails in its next collective at once, often before the death itself shows here.
SETTLE_SECONDS = 2.0
# How long a rank has to stop after being asked (SIGTERM) before it is killed.
STOP_SECONDS = 5.0


class RemoteTraceback(Exception):
    """A rank's traceback, as text (tracebacks do not pickle): the cause of its re-raised error."""

    def __str__(self) -> str:
        return str(self.args[0])


class QueueProgress:
    """Rank 0's progress inside its process: lines and metrics sent to the parent."""

    def __init__(self, events: Any) -> None:
        self._events = events

    def message(self, text: str) -> None:
        self._events.put(("message", text))

    def metrics(self, step: int, values: Mapping[str, float]) -> None:
        self._events.put(("metrics", int(step), {k: float(v) for k, v in values.items()}))

    def bar(self, total: int, description: str) -> contextlib.AbstractContextManager[Callable[[int], None]]:
        return contextlib.nullcontext(lambda n: None)


def run_local_ranks(target: Callable[..., Any], per_rank: Sequence[tuple[Any, ...]], *, stage: str,
                    progress: Any = None, what: str = "distributed training") -> list[Any]:
    """Run ``target(rank, *per_rank[rank], progress=...)`` in one process per rank and
    return their results in rank order, once every rank has finished."""
    method = "forkserver" if worker_start_method() == "forkserver" else "spawn"
    refuse_unguarded_main_script(f"{len(per_rank)} local {what} processes", method=method)
    context = multiprocessing.get_context(method)
    if method == "forkserver":
        # Only before the server starts (Dask's first local cluster may have started it already).
        context.set_forkserver_preload(["torch", target.__module__])
    events = context.Queue()
    environ = dict(os.environ)          # a forkserver's child would have the server's environment
    processes = [context.Process(target=_rank_main, args=(target, rank, args, events, environ), daemon=True,
                                 name=f"pipeline-{stage}-rank{rank}")
                 for rank, args in enumerate(per_rank)]
    try:
        for process in processes:
            process.start()
        return _watch(processes, events, progress, stage, what)
    finally:
        _stop(processes)
        events.cancel_join_thread()
        events.close()


def _rank_main(target: Callable[..., Any], rank: int, args: tuple[Any, ...], events: Any,
               environ: Mapping[str, str]) -> None:
    """A rank's process: run ``target``, report its result or its error, exit 1 on an error."""
    os.environ.clear()
    os.environ.update(environ)
    progress = QueueProgress(events) if rank == 0 else None
    try:
        result = target(rank, *args, progress=progress)
    except BaseException as exc:  # noqa: BLE001 - every failure goes back to the parent
        events.put(("error", rank, _portable(exc), traceback.format_exc()))
        events.close()
        events.join_thread()
        raise SystemExit(1) from None
    events.put(("result", rank, result))
    events.close()
    events.join_thread()


def _portable(exc: BaseException) -> BaseException:
    """``exc`` if it survives pickling, else a ``RuntimeError`` that says what it was."""
    try:
        return pickle.loads(pickle.dumps(exc))
    except Exception:  # noqa: BLE001 - any exception type may refuse to pickle
        return RuntimeError(f"{type(exc).__name__}: {exc}")


def _watch(processes: list[Any], events: Any, progress: Any, stage: str, what: str) -> list[Any]:
    results: dict[int, Any] = {}
    failure: tuple[int, BaseException, str] | None = None
    failed_at = 0.0
    while True:
        try:
            event = events.get(timeout=POLL_SECONDS)
        except queue.Empty:
            event = None
        if event is not None:
            kind = event[0]
            if kind == "message" and progress is not None:
                progress.message(event[1])
            elif kind == "metrics" and progress is not None and hasattr(progress, "metrics"):
                progress.metrics(event[1], event[2])
            elif kind == "result":
                results[event[1]] = event[2]
            elif kind == "error" and failure is None:
                failure, failed_at = (event[1], event[2], event[3]), time.monotonic()
            continue          # read everything queued before judging the processes
        dead = [(rank, p) for rank, p in enumerate(processes)
                if p.exitcode is not None and p.exitcode != 0 and (failure is None or failure[0] != rank)]
        if dead and (failure is None or dead[0][1].exitcode < 0):
            rank, process = dead[0]
            raise StageError(stage, _death(rank, process, what, failure))
        if failure is not None and time.monotonic() - failed_at >= SETTLE_SECONDS:
            rank, exc, text = failure
            exc.__cause__ = RemoteTraceback(f"rank {rank}'s traceback:\n{text}")
            raise exc
        if len(results) == len(processes) and all(p.exitcode == 0 for p in processes):
            return [results[rank] for rank in range(len(processes))]


def _death(rank: int, process: Any, what: str, peer_failure: tuple[int, BaseException, str] | None) -> str:
    code = process.exitcode
    if code < 0:
        try:
            how = f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            how = f"was killed by signal {-code}"
    else:
        how = f"exited with code {code} without a result"
    text = f"rank {rank} of the {what} (local process {process.pid}) {how}; the other ranks were stopped"
    if code == -signal.SIGKILL:
        text += " (a process killed by SIGKILL has often run out of memory: check the machine's memory)"
    if peer_failure is not None:
        first = (str(peer_failure[1]).splitlines() or [""])[0]
        first = first if len(first) <= 200 else first[:197] + "..."
        text += f". Rank {peer_failure[0]} then failed: {type(peer_failure[1]).__name__}: {first}"
    return text


def _stop(processes: list[Any]) -> None:
    """Ask the ranks still running to stop, then kill those that do not within STOP_SECONDS."""
    for process in processes:
        if process.exitcode is None and process.pid is not None:
            process.terminate()
    deadline = time.monotonic() + STOP_SECONDS
    for process in processes:
        if process.pid is None:
            continue
        process.join(max(0.0, deadline - time.monotonic()))
        if process.exitcode is None:
            process.kill()
            process.join()
