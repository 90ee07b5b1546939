"""One run of a pipeline at a time: an advisory ``flock`` on ``<runs_dir>/<pipeline>/.lock``.

The kernel drops a ``flock`` when its holder exits, however it exits (SIGKILL, OOM kill,
power loss on reboot), so a lock left by a dead process is free again without any cleanup:
the next run takes it and overwrites the holder note. The note (pid, host, start time, run
id) is only read to tell a waiting run who holds the lock. ``flock`` is local to one
machine (and unreliable on some network file systems): runs of the same pipeline from
several hosts need a scheduler that serialises them.
"""

from __future__ import annotations

import fcntl
import logging
import os
import time
from pathlib import Path
from typing import Any

from pipeline.core.errors import LockTimeout
from pipeline.runs.store import host_name, json_text, read_lock_note, utc_now

log = logging.getLogger("pipeline")


class RunLock:
    """Context manager: wait up to ``wait`` seconds for the lock, else raise LockTimeout."""

    def __init__(self, path: str | os.PathLike[str], *, wait: float = 600.0, poll: float = 0.2) -> None:
        self.path = Path(path)
        self.wait = wait
        self.poll = poll
        self._fd: int | None = None

    def __enter__(self) -> RunLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            self._take(fd)
        except BaseException:
            os.close(fd)                        # also drops the lock if it was taken
            raise
        self._fd = fd
        self.note(run_id=None)
        return self

    def _take(self, fd: int) -> None:
        started = time.monotonic()
        deadline = started + self.wait
        said = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                if said:
                    log.info("took the run lock after %.0f s", time.monotonic() - started)
                return
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise LockTimeout(self._message(self.holder())) from None
                if not said:            # a job's log says why it is quiet, once
                    log.info("waiting up to %g s for %s, held by %s", self.wait, self.path, self._who(self.holder()))
                    said = True
                time.sleep(self.poll)

    def note(self, **extra: Any) -> None:
        """Write who holds the lock (read by runs that wait for it, and by ``pipeline.runs.history``
        to tell a run that ended without finishing its record from one still going).

        Best effort: on a full disk the note is left empty rather than naming an earlier holder,
        and an empty note means "unknown" to every reader.
        """
        if self._fd is None:
            return
        info = {"pid": os.getpid(), "host": host_name(), "since": utc_now(), **extra}
        data = json_text(info, indent=None).encode()
        try:
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, data, 0)
        except OSError:
            try:
                os.ftruncate(self._fd, 0)
            except OSError:
                pass

    def holder(self) -> dict[str, Any]:
        return read_lock_note(self.path)

    @staticmethod
    def _who(holder: dict[str, Any]) -> str:
        return (f"pid {holder.get('pid', '?')} on {holder.get('host', '?')}, running since {holder.get('since', '?')}"
                + (f", run {holder['run_id']}" if holder.get("run_id") else ""))

    def _message(self, holder: dict[str, Any]) -> str:
        who = self._who(holder)
        return (f"another run of this pipeline holds {self.path} ({who}); waited {self.wait:g} s. "
                "Wait for it to finish, or raise --wait (wait= in run_pipeline)")

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
