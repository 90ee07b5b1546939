"""Dask clusters for a run, by job: ``startup`` (a local cluster, or a session on an existing
scheduler, closed only when started here), ``connect`` (the scheduler's address checked and its
handshake recognised before a client waits on it), ``main_guard`` (a script that starts workers
must be guarded by ``if __name__ == "__main__":``), ``memory_plan`` (GPU workers' memory sized
for XGBoost) and ``worker_memory`` (memory handed back to the OS on workers).
"""
