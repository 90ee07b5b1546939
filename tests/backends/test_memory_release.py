"""Freed heap is handed back to the OS after a task, so a Dask worker's size is what it holds."""

from __future__ import annotations

import gc
import sys

import psutil
import pytest

from pipeline.usage.memory import release_freed_memory


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_freed_heap_in_the_middle_is_returned():
    process = psutil.Process()
    # Blocks above pymalloc's 512-byte limit come from glibc; keeping every 50th one
    # fragments the heap so that glibc's own trimming (top of the heap only) cannot return it.
    blocks = [bytes(4000) for _ in range(60_000)]
    kept = blocks[::50]
    del blocks
    gc.collect()
    before = process.memory_info().rss
    released = release_freed_memory()
    after = process.memory_info().rss
    assert released >= 100 * 2**20, released          # ~230 MB were freed in the middle
    assert after <= before - 100 * 2**20
    assert len(kept) == 1200
