"""What a run leaves behind and how it is read again: the run-folder layout, atomic writes, the run
record (``manifest.json``), signatures, the one-run-at-a-time lock, the run history and CPU/GPU
parity of two runs.
"""
