"""Local rank processes (``pipeline.distributed.local_ranks``): a rank's error comes back to the
parent as the error it raised, with the rank's traceback as its cause, whether or not the error
pickles; a rank that dies names itself and what another rank said first. Real spawned processes,
deterministic outcomes (the DDP tests in test_torch_ddp.py reach these paths only by timing)."""

from __future__ import annotations

import signal
import time
from types import SimpleNamespace

import pytest

from pipeline.distributed.local_ranks import RemoteTraceback, _death, run_local_ranks


def raise_in_rank_one(rank: int, delay: float, *, progress=None) -> int:
    if rank == 1:
        raise ValueError(f"rank {rank} found a bad shard")
    time.sleep(delay)
    return rank


def raise_unpicklable_in_rank_one(rank: int, *, progress=None) -> int:
    class Unpicklable(Exception):
        """Defined in the function: pickle cannot find the class by name."""

    if rank == 1:
        raise Unpicklable("it stays in the rank")
    return rank


def test_a_ranks_error_is_raised_in_the_parent_with_the_ranks_traceback():
    with pytest.raises(ValueError, match="rank 1 found a bad shard") as info:
        run_local_ranks(raise_in_rank_one, [(0.5,), (0.0,)], stage="probe")
    cause = info.value.__cause__
    assert isinstance(cause, RemoteTraceback) and "rank 1's traceback" in str(cause)
    assert "raise_in_rank_one" in str(cause)


def test_an_error_that_does_not_pickle_comes_back_as_a_runtime_error_naming_it():
    with pytest.raises(RuntimeError, match="Unpicklable: it stays in the rank"):
        run_local_ranks(raise_unpicklable_in_rank_one, [(), ()], stage="probe")


def test_every_rank_that_finishes_returns_its_result_in_rank_order():
    assert run_local_ranks(raise_in_rank_one, [(0.0,)], stage="probe") == [0]


def test_a_killed_rank_names_itself_the_signal_and_what_another_rank_said_first():
    killed = SimpleNamespace(exitcode=-signal.SIGKILL, pid=4242)
    text = _death(1, killed, "distributed training", (0, ValueError("x" * 300 + "\nsecond line"), "trace"))
    assert "rank 1 of the distributed training (local process 4242) was killed by SIGKILL" in text
    assert "run out of memory" in text
    assert text.endswith("Rank 0 then failed: ValueError: " + "x" * 197 + "...")
    exited = _death(0, SimpleNamespace(exitcode=3, pid=7), "probe", None)
    assert exited == "rank 0 of the probe (local process 7) exited with code 3 without a result; the other ranks were stopped"


def where_the_rank_runs(rank: int, *, progress=None) -> tuple[int, str | None, str]:
    import os

    return os.getppid(), os.environ.get("PIPELINE_RANK_PROBE"), os.getcwd()


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_ranks_start_as_dask_starts_its_workers_with_this_process_environment(method, tmp_path, monkeypatch):
    """Under Dask's forkserver the ranks are forks of the server (which imported what they need
    once, when this process started it); a rank still sees this process's environment and working directory as it is now (set after
    the server started), as a spawned rank does."""
    import os

    import dask

    with dask.config.set({"distributed.worker.multiprocessing-method": method}):
        run_local_ranks(where_the_rank_runs, [()], stage="probe")             # the server, if any, starts here
        monkeypatch.setenv("PIPELINE_RANK_PROBE", "set later")
        monkeypatch.chdir(tmp_path)
        results = run_local_ranks(where_the_rank_runs, [(), ()], stage="probe")
    assert [r[1:3] for r in results] == [("set later", str(tmp_path))] * 2
    parents = {r[0] for r in results}
    forked = parents != {os.getpid()}
    assert forked == (method == "forkserver")
