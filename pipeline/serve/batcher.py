"""Micro-batching: requests that arrive together are scored in one model call.

Each request is a ``Job`` on a queue. One worker (an asyncio task) takes the first job, then
collects more for up to ``max_wait`` seconds or until ``max_rows`` rows are queued (it does not
wait when no other request is being read: ``arriving``, so one client alone is never held for
``max_wait``), builds one
frame, and scores it on a single scoring thread (``run_in_executor``), so the event loop keeps
accepting and parsing requests meanwhile; the jobs that queue up during a model call form the
next batch even with ``max_wait`` 0. ``max_rows`` 1 scores every request alone.

A batch only holds jobs for one model (a job keeps the model it was validated against, so a
champion swap never scores a request with a model whose schema it did not meet), and a job
with a prebuilt frame (an Arrow or Parquet body) is scored alone. When a batch fails, each of
its jobs is scored alone, so one bad request cannot fail its neighbours.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("pipeline")


@dataclass
class Job:
    """One request's rows for one model; ``future`` gets its result or its exception."""

    model: Any                                   # pipeline.serve.served_model.ServedModel
    rows: int
    columns: dict[str, list[Any]] | None = None  # JSON rows, by column
    frame: Any = None                            # or a prebuilt frame, scored alone
    future: asyncio.Future = field(default=None)  # type: ignore[assignment]


# (model, rows in the call, drift counts or None, seconds) after every model call.
BatchObserver = Callable[[Any, int, Any, float], None]


class MicroBatcher:
    """Queues jobs and scores them in batches on one thread (see the module docstring)."""

    def __init__(self, *, max_rows: int = 1024, max_wait: float = 0.002, observer: BatchObserver | None = None):
        if max_rows < 1:
            raise ValueError(f"max_rows must be at least 1, got {max_rows}")
        self.max_rows = max_rows
        self.max_wait = max(0.0, max_wait)
        self.observer = observer
        self._queue: asyncio.Queue[Job | None] | None = None
        self._queued_rows = 0
        self._full: asyncio.Event | None = None
        self._carry: Job | None = None
        self._worker: asyncio.Task | None = None
        self._arriving = 0                       # requests being read and validated now
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pipeline-score")

    async def start(self) -> None:
        self._queue, self._full = asyncio.Queue(), asyncio.Event()
        self._worker = asyncio.get_running_loop().create_task(self._run(), name="pipeline-batcher")

    async def stop(self) -> None:
        """Score every job already queued, then stop the worker and the scoring thread."""
        if self._worker is not None and self._queue is not None:
            await self._queue.put(None)
            await self._worker
            self._worker = None
        self._executor.shutdown(wait=True)

    @contextmanager
    def arriving(self) -> Iterator[None]:
        """Around reading and validating a request: while none is, a batch does not wait for
        more (nothing is on its way), so a lone request is scored at once."""
        self._arriving += 1
        try:
            yield
        finally:
            self._arriving -= 1
            if self._arriving == 0 and self._full is not None:
                self._full.set()                 # a batch waiting for it need not wait longer

    def enqueue(self, job: Job) -> asyncio.Future:
        """Queue ``job``; the future gets its result (or the scoring's exception). Called inside
        ``arriving``, the job is queued before the batch stops waiting for it."""
        if self._queue is None or self._worker is None:
            raise RuntimeError("the batcher is not running")
        job.future = asyncio.get_running_loop().create_future()
        self._queued_rows += job.rows
        self._queue.put_nowait(job)
        if self._queued_rows >= self.max_rows:
            self._full.set()                     # type: ignore[union-attr]
        return job.future

    async def submit(self, job: Job) -> Any:
        """Queue ``job`` and wait for its result (raises the scoring's exception)."""
        return await self.enqueue(job)

    # ------------------------------------------------------------------ the worker
    async def _next(self) -> Job | None:
        if self._carry is not None:
            job, self._carry = self._carry, None
            return job
        job = await self._queue.get()            # type: ignore[union-attr]
        if job is not None:
            self._queued_rows -= job.rows
        return job

    def _take_nowait(self) -> Job | None:
        job = self._queue.get_nowait()           # type: ignore[union-attr]
        if job is not None:
            self._queued_rows -= job.rows
        return job

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            first = await self._next()
            if first is None:
                return
            batch, rows = [first], first.rows
            if first.frame is None and self.max_rows > 1:
                deadline = loop.time() + self.max_wait
                while rows < self.max_rows:
                    if self._queue.empty():      # type: ignore[union-attr]
                        remaining = deadline - loop.time()
                        if remaining <= 0 or self._arriving == 0:
                            break
                        self._full.clear()       # type: ignore[union-attr]
                        if self._queued_rows < self.max_rows - rows:
                            try:
                                await asyncio.wait_for(self._full.wait(), remaining)   # type: ignore[union-attr]
                            except asyncio.TimeoutError:
                                pass
                        if self._queue.empty():  # type: ignore[union-attr]
                            break
                    job = self._take_nowait()
                    if job is None or job.frame is not None or job.model is not first.model \
                            or rows + job.rows > self.max_rows:
                        self._carry = job        # the next batch's first job (or the stop)
                        break
                    batch.append(job)
                    rows += job.rows
            outcomes = await loop.run_in_executor(self._executor, self._score, batch)
            for job, outcome in zip(batch, outcomes):
                if job.future.done():            # the client went away
                    continue
                if isinstance(outcome, BaseException):
                    job.future.set_exception(outcome)
                else:
                    job.future.set_result(outcome)

    def _score(self, batch: list[Job]) -> list[Any]:
        """One model call for the batch (on the scoring thread); each job alone when it fails."""
        model = batch[0].model
        started = time.perf_counter()
        try:
            if batch[0].frame is not None:
                table, counts = model.score_frame(batch[0].frame)
                outcomes: list[Any] = [table]
            else:
                outcomes, counts = model.score_columns([job.columns for job in batch])
        except Exception as exc:                 # noqa: BLE001 - handed to the request(s) it belongs to
            if len(batch) == 1:
                return [exc]
            return [self._score([job])[0] for job in batch]
        if self.observer is not None:
            try:
                self.observer(model, sum(job.rows for job in batch), counts, time.perf_counter() - started)
            except Exception:                    # noqa: BLE001 - metrics never fail a request
                log.exception("serve: recording a batch's metrics failed")
        return outcomes
