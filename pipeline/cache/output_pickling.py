"""An entry's output on disk: one pickle stream (protocol 5) with its buffers out of band.

Buffers (NumPy arrays, Arrow columns' chunks) of at least ``PACKED_MIN_BYTES`` leave the
stream: one of ``OUT_OF_BAND_MIN_BYTES`` or more is a file of its own (``buffers/000000.bin``...),
linked rather than written again when this process has stored the same bytes
(``pipeline.cache.stored_buffers``: a train stage's output carries the feature matrices the
features stage stored); smaller ones are packed, one after another, into files of about
``PACK_BYTES``, and ``buffers/layout.json`` says where each buffer lies. Only the tiny
buffers stay in the stream. The stream and the layout are written and hashed while the
output is read; the buffer files are hashed from memory then (on a thread per core) and may be
written later, on another thread (``PendingEntry.finish``), so a stage's output does not hold
up the next stage while it goes to disk. A table read from CSV holds its text in chunks of
well under 1 MiB: before packing they all went through the stream, written on the stage's
own thread (6 s of a 10M-row load). Every file is hashed as it is written, never read back.
"""

from __future__ import annotations

import copyreg
import hashlib
import json
import os
import pickle
import sys
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.cache.stored_buffers import link_stored
from pipeline.core.interrupts import Terminated, termination_requested

OUTPUT_FILE = "output.pkl"         # the pickle stream (protocol 5)
BUFFERS_DIR = "buffers"            # its buffers, out of band: 000000.bin, 000001.bin...
LAYOUT_FILE = f"{BUFFERS_DIR}/layout.json"   # per buffer, in the stream's order: [file, offset, bytes]
OUT_OF_BAND_MIN_BYTES = 1 << 20    # a buffer this large is a file of its own (and can be linked)
PACKED_MIN_BYTES = 1 << 12         # smaller ones down to this size are packed; below it, in the stream
PACK_BYTES = 64 << 20              # a pack file is closed once it holds this much
ALIGNMENT = 64                     # every buffer starts at a multiple of this in its file
# A column whose Arrow buffers exceed what it uses by more than this is a slice of a larger
# array: pickled chunk by chunk it would carry the whole buffers, so pandas' own way is kept.
SLICE_SLACK = 1 << 16
HASH_THREADS = 4


@dataclass
class PendingBuffer:
    """A buffer file still to write: views of the output's memory, each at its offset."""

    index: int
    views: list[memoryview] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    size: int = 0
    sha256: str = ""

    @property
    def relative(self) -> str:
        """Its path in the entry."""
        return f"{BUFFERS_DIR}/{self.index:06d}.bin"

    def add(self, view: memoryview) -> int:
        """Append ``view`` at the next aligned offset; that offset."""
        offset = -(-self.size // ALIGNMENT) * ALIGNMENT
        self.views.append(view)
        self.offsets.append(offset)
        self.size = offset + view.nbytes
        return offset

    def chunks(self) -> Any:
        """The file's bytes in order: each view, preceded by the zeros that align it."""
        at = 0
        for offset, view in zip(self.offsets, self.views):
            if offset > at:
                yield bytes(offset - at)
            yield view
            at = offset + view.nbytes


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
    """Write ``output``'s pickle stream and its buffers' layout into ``folder``: their sha256,
    and the buffer files still to write (hashed from memory, each holding views of the output)."""
    files: list[PendingBuffer] = []
    layout: list[tuple[int, int, int]] = []
    pack: PendingBuffer | None = None

    def new_file() -> PendingBuffer:
        files.append(PendingBuffer(len(files)))
        return files[-1]

    def out_of_band(buffer: pickle.PickleBuffer) -> bool:
        nonlocal pack
        try:
            view = buffer.raw()
        except BufferError:                       # not contiguous: in the stream
            return True
        if view.nbytes < PACKED_MIN_BYTES:
            return True
        if view.nbytes >= OUT_OF_BAND_MIN_BYTES:
            target = new_file()
        else:
            if pack is None or pack.size >= PACK_BYTES:
                pack = new_file()
            target = pack
        offset = target.add(view)
        layout.append((target.index, offset, view.nbytes))
        return False

    with open(folder / OUTPUT_FILE, "wb") as fh:
        stream = HashingFile(fh)
        OutputPickler(stream, out_of_band).dump(output)
    hashes = {OUTPUT_FILE: stream.sha256.hexdigest()}
    if files:
        (folder / BUFFERS_DIR).mkdir()
        text = json.dumps({"files": [f.relative for f in files], "buffers": layout}).encode()
        (folder / LAYOUT_FILE).write_bytes(text)
        hashes[LAYOUT_FILE] = hashlib.sha256(text).hexdigest()
        for pending, digest in zip(files, sha256_all(files)):
            pending.sha256 = digest
    return hashes, files


def sha256_all(files: list[PendingBuffer]) -> list[str]:
    """The sha256 of each file's bytes; several at once on as many cores (up to
    ``HASH_THREADS``): hashlib releases the GIL, and the stage that produced them waits for this."""
    def digest(pending: PendingBuffer) -> str:
        sha = hashlib.sha256()
        for chunk in pending.chunks():
            sha.update(chunk)
        return sha.hexdigest()

    threads = min(len(files), HASH_THREADS, os.cpu_count() or 1)
    if threads < 2:
        return [digest(pending) for pending in files]
    with ThreadPoolExecutor(threads, thread_name_prefix="pipeline-cache-hash") as pool:
        return list(pool.map(digest, files))


def write_buffers(folder: Path, buffers: list[PendingBuffer]) -> list[tuple[str, str, int]]:
    """Write each buffer file, or link an equal one this process stored: (relative path,
    sha256, size) of each. Raises Terminated on SIGTERM, between files."""
    written = []
    for pending in buffers:
        if termination_requested():
            raise Terminated()
        if not link_stored(pending.sha256, pending.size, folder / pending.relative):
            with open(folder / pending.relative, "wb") as fh:
                for chunk in pending.chunks():
                    fh.write(chunk)
        written.append((pending.relative, pending.sha256, pending.size))
    return written


def read_output(folder: Path, files: Mapping[str, Any]) -> Any:
    """Unpickle an entry's output; its buffer files are read into writable memory (as pickle
    itself would read in-stream buffers) and each buffer is a view of its file's."""
    buffers: list[memoryview] = []
    if LAYOUT_FILE in files:
        layout = json.loads((folder / LAYOUT_FILE).read_bytes())
        data = [memoryview(read_buffer(folder / name)) for name in layout["files"]]
        for index, offset, size in layout["buffers"]:
            if offset + size > len(data[index]):
                raise pickle.UnpicklingError(f"{layout['files'][index]} is shorter than its layout says")
            buffers.append(data[index][offset:offset + size])
    # No reader for the layout before packing: this module is in every key (``cache.keys``),
    # so an entry it did not write is never looked up.
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
