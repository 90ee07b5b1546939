"""Inputs that can be read only once: a named pipe (``mkfifo``, ``<(zcat data.csv.gz)``), a
``/dev/fd/N`` descriptor, or ``-`` (standard input).

A reader that opens a file twice (the header check, then the read itself; pyarrow's reader
and pandas' on a fallback) would find a pipe empty the second time. So a ``load`` of one
copies its bytes once into a file of its own (``spool``), reads that file as any other, and
deletes it. A pipe that stays silent longer than ``timeout`` seconds (nothing was ever
written to it, or its writer stalled) ends the read with a ``DataError`` naming it, instead
of a run that waits forever.
"""

from __future__ import annotations

import os
import select
import stat
import sys
import time
from pathlib import Path

from pipeline.core.errors import DataError

__all__ = ["STDIN", "STREAM_TIMEOUT", "is_stream", "spool"]

# The path that means standard input.
STDIN = "-"
# Seconds a pipe may stay silent (before its first byte, or between two) before the read ends.
STREAM_TIMEOUT = 60.0
_CHUNK = 1 << 20


def is_stream(path: str) -> bool:
    """Whether ``path`` is read once: ``-``, or something that is not a regular file or folder
    (a FIFO, a character device such as ``/dev/stdin``, a socket)."""
    if path == STDIN:
        return True
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISCHR(mode) or stat.S_ISSOCK(mode)


def spool(path: str, into: Path, *, timeout: float = STREAM_TIMEOUT) -> Path:
    """The bytes of the stream at ``path`` copied into a new file in the folder ``into``; a
    ``DataError`` naming ``path`` when nothing arrives for ``timeout`` seconds or it sends no
    byte at all. The caller deletes the file when it has read it."""
    into.mkdir(parents=True, exist_ok=True)
    target = into / f".stream-{os.getpid()}-{time.monotonic_ns()}"
    shown = "standard input" if path == STDIN else path
    # O_NONBLOCK: opening a pipe no writer has opened yet must not wait outside the timeout.
    fd = sys.stdin.fileno() if path == STDIN else os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    received = 0
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        with open(target, "wb") as out:
            while True:
                if not poller.poll(timeout * 1000):
                    waited = "nothing arrived" if not received else f"nothing more arrived after {received:,} bytes"
                    raise DataError(f"{shown}: {waited} within {timeout:g}s (stream_timeout on the load stage); "
                                    "is the program writing to it running?")
                try:
                    chunk = os.read(fd, _CHUNK)
                except BlockingIOError:
                    continue
                if not chunk:
                    break
                out.write(chunk)
                received += len(chunk)
    except OSError as exc:
        target.unlink(missing_ok=True)
        raise DataError(f"cannot read {shown}: {exc.strerror or exc}") from exc
    except BaseException:
        target.unlink(missing_ok=True)
        raise
    finally:
        if path != STDIN:
            os.close(fd)
    if not received:
        target.unlink(missing_ok=True)
        raise DataError(f"{shown} sent no bytes: its writer closed it before writing (a CSV needs a header line)")
    return target
