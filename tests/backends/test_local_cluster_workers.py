"""What every worker of a local cluster the pipeline starts has from its start: dask.dataframe
imported, the plugin that gives a paused worker's freed memory back to the OS, and Polars' thread
pool (the CPU table engine's) sized to the worker's threads."""

from __future__ import annotations

import sys
import time

import pytest

from pipeline.config.schema import ClusterConfig

PLUGIN = "pipeline-release-memory-when-paused"


@pytest.fixture(scope="module")
def session():
    from pipeline.backends.clusters.startup import open_cluster

    opened = open_cluster(ClusterConfig(n_workers=1, threads_per_worker=1), "cpu")
    yield opened
    opened.close()


def _has_dask_dataframe() -> bool:
    return "dask.dataframe" in sys.modules


def test_local_workers_import_dask_dataframe_as_they_start(session):
    """A restarted worker unpickles its peers' data in one thread while a task imports
    dask.dataframe in another; that race broke the import and lost the worker. Preloaded, the
    module is there before either runs."""
    imported = session.client.run(_has_dask_dataframe)
    assert imported and all(imported.values())


def _polars_threads() -> tuple[str | None, int]:
    import os

    import polars

    return os.environ.get("POLARS_MAX_THREADS"), polars.thread_pool_size()


def test_local_workers_size_polars_threads_to_their_own(session, monkeypatch):
    """Each partition runs the Polars engine; a one-thread worker gets a one-thread pool, not one
    thread per core of the machine in every worker."""
    import os

    from pipeline.backends.clusters.startup import worker_environment

    threads = os.environ.get("POLARS_MAX_THREADS") or "1"
    assert list(session.client.run(_polars_threads).values()) == [(threads, int(threads))]

    monkeypatch.delenv("PIPELINE_CPU_ENGINE", raising=False)
    monkeypatch.delenv("PIPELINE_THREADS", raising=False)
    assert worker_environment(3) == {"POLARS_MAX_THREADS": "3", "PIPELINE_CPU_ENGINE": "pandas", "PIPELINE_THREADS": "1"}
    monkeypatch.setenv("POLARS_MAX_THREADS", "2")              # the user's own settings are passed on
    monkeypatch.setenv("PIPELINE_CPU_ENGINE", "polars")
    assert worker_environment(3) == {"POLARS_MAX_THREADS": "2", "PIPELINE_CPU_ENGINE": "polars", "PIPELINE_THREADS": "1"}


def _table_engine() -> str:
    from pipeline.backends import get_backend

    return get_backend("cpu").table_engine_name


def test_local_workers_run_the_pandas_engine_unless_told(session):
    """Workers use every core between them, one thread each: the pandas engine, without Polars'
    per-process memory (the parent's own choice, when set, is passed on instead)."""
    import os

    expected = os.environ.get("PIPELINE_CPU_ENGINE", "").strip() or "pandas"
    assert set(session.client.run(_table_engine).values()) == {expected}


async def _releases_while_paused(dask_worker, seconds: float = 10.0) -> tuple[int, int]:
    """(releases before, releases after) the worker spent up to ``seconds`` paused by its own
    memory monitor (its pause threshold lowered below what it holds). A coroutine: it runs on
    the worker's event loop, which the monitor and the plugin's timer need free."""
    import asyncio

    from distributed.core import Status

    plugin, memory = dask_worker.plugins[PLUGIN], dask_worker.memory_manager
    before, threshold = plugin.releases, memory.memory_pause_fraction
    memory.memory_pause_fraction = 1e-9
    try:
        deadline = time.monotonic() + seconds
        while plugin.releases == before and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        paused = dask_worker.status == Status.paused
    finally:
        memory.memory_pause_fraction = threshold
    assert paused, "the worker's memory monitor did not pause it"
    return before, plugin.releases


def _releases(dask_worker) -> int:
    return dask_worker.plugins[PLUGIN].releases


def test_a_paused_worker_releases_unused_memory_and_a_running_one_does_not(session):
    (idle,) = session.client.run(_releases).values()
    time.sleep(2.5)                                            # running: longer than one check
    assert list(session.client.run(_releases).values()) == [idle]
    (before, after), = session.client.run(_releases_while_paused).values()
    assert after > before


def test_the_callers_environment_is_as_it_was_once_the_cluster_closed():
    """Dask's nanny sets OMP_NUM_THREADS=1, MKL_NUM_THREADS=1, PYTHONHASHSEED... in the process
    that starts the cluster; after a library run they stayed, and every subprocess the caller
    started later ran single-threaded BLAS."""
    import os

    from pipeline.backends.clusters.startup import open_cluster

    before = dict(os.environ)
    opened = open_cluster(ClusterConfig(n_workers=1, threads_per_worker=1), "cpu")
    opened.close()
    assert dict(os.environ) == before


def test_the_local_clusters_dashboard_listens_on_this_machine_only(session):
    """The dashboard listened on 0.0.0.0 (every interface) while everything else took 127.0.0.1."""
    import psutil

    ports = {c.laddr for c in psutil.Process().net_connections(kind="tcp") if c.status == psutil.CONN_LISTEN}
    assert ports and all(address.ip in ("127.0.0.1", "::1") for address in ports), ports
