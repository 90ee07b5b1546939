"""Ranks as Dask tasks, one pinned to each worker: wait for them, and fail the moment one fails
or its worker leaves the cluster.

A rank is tied to its worker (its peers know it by address), so Dask must not move it and
cannot retry it. The poll checks the tasks and the scheduler's workers each second; when a
rank's task errs, the workers are checked for a little longer first, because a rank whose
peer's worker died fails in its next collective at once, before the scheduler has seen the
death, and the lost worker is the cause worth naming.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from pipeline.backends.clusters.startup import GPU_RESOURCE, cluster_workers
from pipeline.core.errors import DataError, StageError

# Rank tasks are polled at this interval for failures and lost workers.
POLL_SECONDS = 1.0
# After a rank's error, how long to look for a worker that left before reporting the error.
SETTLE_SECONDS = 3.0


def worker_slots(client: Any, wanted: int | None, *, gpu: bool, what: str) -> list[str]:
    """The workers that get a rank each: ``wanted`` of them (all when None), GPU workers first
    choice for GPU training; in address order, so rank 0 is the same worker run to run."""
    workers = cluster_workers(client)
    names = sorted(workers)
    if gpu:
        names = [w for w in names if GPU_RESOURCE in (workers[w].get("resources") or {})] or names
    if not names:
        raise DataError(f"the Dask cluster has no workers to run the {what} on")
    if wanted is None:
        return names
    if wanted > len(names):
        raise DataError(f"distributed.processes is {wanted}, but the Dask cluster has {len(names)} worker(s) to "
                        f"run the {what} on (one rank per worker); lower processes or add workers")
    return names[:wanted]


def rendezvous_host(client: Any) -> str:
    """This machine's address on the interface that reaches the scheduler: the workers reach it
    there too (a rendezvous the ranks meet at, hosted in this process)."""
    from distributed.comm import get_address_host
    from distributed.utils import get_ip

    scheduler = get_address_host(client.scheduler.address)
    return scheduler if scheduler in ("127.0.0.1", "localhost") else get_ip(scheduler)


def submit_pinned(client: Any, fn: Any, worker: str, *args: Any, key: str) -> Any:
    """``fn(*args)`` as a task that runs on ``worker`` and nowhere else, never retried."""
    return client.submit(fn, *args, workers=[worker], allow_other_workers=False, pure=False, retries=0, key=key)


def wait_for_ranks(client: Any, futures: Sequence[Any], workers: Sequence[str], stage: str, what: str) -> None:
    """Until every rank (``futures[i]`` on ``workers[i]``) finished; the first failure or lost
    worker ends the wait with an error that names it."""
    from distributed import wait

    failed_at: float | None = None
    while True:
        running = [future for future in futures if future.status == "pending"]
        try:
            wait(running, timeout=POLL_SECONDS, return_when="FIRST_COMPLETED")
        except TimeoutError:
            pass
        alive = set(cluster_workers(client))
        lost = [worker for worker, future in zip(workers, futures)
                if future.status != "finished" and worker not in alive]
        if lost:
            raise StageError(stage, f"the Dask worker {lost[0]} left the cluster during {what} (its rank cannot "
                                    "move to another worker). Check that worker's log and its memory limit "
                                    "(cluster.memory_limit)")
        errors = [future for future in futures if future.status == "error"]
        if errors:
            failed_at = failed_at or time.monotonic()
            if time.monotonic() - failed_at >= SETTLE_SECONDS:
                raise errors[0].exception()
            continue
        for future in futures:
            if future.status == "cancelled":
                raise StageError(stage, f"{what} task {future.key} was cancelled")
        if all(future.status == "finished" for future in futures):
            return
