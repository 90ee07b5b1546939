"""A local cluster's workers have ``dask.dataframe`` imported before their first task."""

from __future__ import annotations

import sys


def _has_dask_dataframe() -> bool:
    return "dask.dataframe" in sys.modules


def test_local_workers_import_dask_dataframe_as_they_start():
    """A restarted worker unpickles its peers' data in one thread while a task imports
    dask.dataframe in another; that race broke the import and lost the worker. Preloaded, the
    module is there before either runs."""
    from pipeline.backends.cluster import open_cluster
    from pipeline.config.schema import ClusterConfig

    session = open_cluster(ClusterConfig(n_workers=1, threads_per_worker=1), "cpu")
    try:
        imported = session.client.run(_has_dask_dataframe)
    finally:
        session.close()
    assert imported and all(imported.values())
