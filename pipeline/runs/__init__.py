"""Run folders and what is kept in them: the folder layout, the typed run record (manifest.json),
the run store and its lock, signatures, and reading earlier runs back (history, parity).
"""
