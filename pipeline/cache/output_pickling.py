"""An entry's output on disk: one pickle stream (protocol 5) with its large buffers out of band.

Buffers (NumPy arrays, Arrow columns) of at least ``OUT_OF_BAND_MIN_BYTES`` are files of their
own beside the stream (``buffers/000000.bin``...): hashed from memory, written without passing
through the pickler, and linked rather than written again when this process has stored the
same bytes (``pipeline.cache.stored_buffers``: a train stage's output carries the feature
matrices the features stage stored). Smaller ones stay in the stream. Every file is hashed as
it is written, never read back.
"""

from __future__ import annotations

import copyreg
import hashlib
import os
import pickle
import sys
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from pipeline.cache.stored_buffers import link_stored
from pipeline.core.interrupts import Terminated, termination_requested

OUTPUT_FILE = "output.pkl"         # the pickle stream (protocol 5)
BUFFERS_DIR = "buffers"            # its large buffers, out of band: 000000.bin, 000001.bin...
OUT_OF_BAND_MIN_BYTES = 1 << 20
# A column whose Arrow buffers exceed what it uses by more than this is a slice of a larger
# array: pickled chunk by chunk it would carry the whole buffers, so pandas' own way is kept.
SLICE_SLACK = 1 << 16
HASH_THREADS = 4

# (path relative to the entry, sha256, view of the output's memory): a buffer still to write.
PendingBuffer = tuple[str, str, memoryview]


class HashingFile:
    """A write-only file that hashes what passes through it: the checksum without a second read."""

    def __init__(self, fh: Any) -> None:
        self._fh = fh
        self.sha256 = hashlib.sha256()

    def write(self, data: Any) -> int:
        self.sha256.update(data)
        return self._fh.write(data)


class OutputPickler(pickle.Pickler):
    """Protocol 5, with pandas' Arrow-backed columns pickled as their chunks (``arrow_column_reduction``)."""

    def __init__(self, file: Any, buffer_callback: Any) -> None:
        super().__init__(file, protocol=5, buffer_callback=buffer_callback)
        pandas = sys.modules.get("pandas")        # no pandas loaded: no pandas object to pickle
        self._arrow_array = getattr(getattr(pandas, "arrays", None), "ArrowExtensionArray", None)

    def reducer_override(self, obj: Any) -> Any:
        if self._arrow_array is not None and isinstance(obj, self._arrow_array):
            return arrow_column_reduction(obj)
        return NotImplemented


def arrow_column_reduction(column: Any) -> Any:
    """How to pickle a pandas Arrow-backed column (``str`` columns in pandas 3) without a copy.

    pandas pickles one by first combining its chunks into one new array
    (``ArrowExtensionArray.__getstate__``, even for a single chunk): a second copy of every
    string column of a table while it is stored, which stays in the Arrow allocator's pool
    afterwards. Its chunks pickle as they are, their buffers out of band; pandas' own
    ``__setstate__`` rebuilds the column from them. NotImplemented (pandas' way) for a slice.
    """
    state = dict(vars(column))
    chunked = state.get("_pa_array")
    try:
        sliced = chunked.get_total_buffer_size() > chunked.nbytes + SLICE_SLACK
    except (AttributeError, TypeError):           # another pandas layout: its own way
        return NotImplemented
    if sliced:
        return NotImplemented
    return copyreg.__newobj__, (type(column),), state


def pickle_output(folder: Path, output: Any) -> tuple[dict[str, str], list[PendingBuffer]]:
    """Write ``output``'s pickle stream into ``folder``: the sha256 of the stream, and its large
    buffers as (path relative to ``folder``, sha256, view of the output's memory), still to write."""
    views: list[memoryview] = []

    def out_of_band(buffer: pickle.PickleBuffer) -> bool:
        try:
            view = buffer.raw()
        except BufferError:                       # not contiguous: in the stream
            return True
        if view.nbytes < OUT_OF_BAND_MIN_BYTES:
            return True
        views.append(view)
        return False

    with open(folder / OUTPUT_FILE, "wb") as fh:
        stream = HashingFile(fh)
        OutputPickler(stream, out_of_band).dump(output)
    buffers = [(f"{BUFFERS_DIR}/{index:06d}.bin", digest, view)
               for index, (digest, view) in enumerate(zip(sha256_all(views), views))]
    return {OUTPUT_FILE: stream.sha256.hexdigest()}, buffers


def sha256_all(views: list[memoryview]) -> list[str]:
    """The sha256 of each buffer; several at once on as many cores (up to ``HASH_THREADS``):
    hashlib releases the GIL, and the stage that produced them waits for this."""
    threads = min(len(views), HASH_THREADS, os.cpu_count() or 1)
    if threads < 2:
        return [hashlib.sha256(view).hexdigest() for view in views]
    with ThreadPoolExecutor(threads, thread_name_prefix="pipeline-cache-hash") as pool:
        return list(pool.map(lambda view: hashlib.sha256(view).hexdigest(), views))


def write_buffers(folder: Path, buffers: list[PendingBuffer]) -> list[tuple[str, str, int]]:
    """Write each buffer to its file, or link an equal one this process stored: (relative path,
    sha256, size) of each. Raises Terminated on SIGTERM, between files."""
    if buffers:
        (folder / BUFFERS_DIR).mkdir()
    written = []
    for relative, digest, view in buffers:
        if termination_requested():
            raise Terminated()
        if not link_stored(digest, view.nbytes, folder / relative):
            with open(folder / relative, "wb") as fh:
                fh.write(view)
        written.append((relative, digest, view.nbytes))
    return written


def read_output(folder: Path, files: Mapping[str, Any]) -> Any:
    """Unpickle an entry's output; its buffer files are read into writable memory, as pickle
    itself would read in-stream buffers (an entry without any was stored in one stream)."""
    names = sorted(name for name in files if name.startswith(f"{BUFFERS_DIR}/"))
    buffers = [read_buffer(folder / name) for name in names]
    with open(folder / OUTPUT_FILE, "rb") as fh:
        return pickle.load(fh, buffers=buffers)


def read_buffer(path: Path) -> bytearray:
    with open(path, "rb", buffering=0) as fh:
        data = bytearray(os.fstat(fh.fileno()).st_size)
        view, done = memoryview(data), 0
        while done < len(data):
            read = fh.readinto(view[done:])
            if not read:
                raise pickle.UnpicklingError(f"{path} is shorter than when it was stored")
            done += read
    return data
