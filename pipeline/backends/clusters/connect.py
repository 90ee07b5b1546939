"""Connecting to an existing scheduler: the address checked before it is dialled, and a raw
handshake that tells a Dask scheduler from another service before the client waits on it."""

from __future__ import annotations

import contextlib
import re
import socket
import struct
import time
from typing import Any

from pipeline.core.errors import ClusterUnavailable, UsageError

SCHEDULER_EXAMPLE = "tcp://scheduler:8786"
SCHEDULER_SCHEMES = ("tcp", "tls", "ucx", "ucxx", "ws", "wss")
_SCHEDULER_ADDRESS = re.compile(
    r"^(?:(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://)?"
    r"(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?)"
    r"(?::(?P<port>[0-9]+))?$")
# A Dask handshake is a small dict (compression, Python version, pickle protocol): about 60 bytes.
# The first 8 bytes a peer sends are the frame length; from another service they are text
# ("HTTP/1.1") read as a length of exabytes, which distributed would try to allocate.
MAX_HANDSHAKE_BYTES = 64 * 2**10


def scheduler_address_problem(address: str) -> str | None:
    """Why ``address`` cannot be a Dask scheduler address, or None when it has the form
    ``[scheme://]host:port``. Checked before connecting, so a typo is a config error (exit 2)
    rather than a connection that times out."""
    match = _SCHEDULER_ADDRESS.match(address.strip()) if address.strip() == address else None
    if match is None:
        return "it is not of the form tcp://HOST:PORT"
    scheme = (match["scheme"] or "tcp").lower()
    if scheme not in SCHEDULER_SCHEMES:
        return f"unknown protocol '{scheme}://' (one of: {', '.join(SCHEDULER_SCHEMES)})"
    if match["port"] is None:
        return "it has no port (a scheduler listens on 8786 unless told otherwise)"
    if not 0 < int(match["port"]) < 65536:
        return f"port {match['port']} is not between 1 and 65535"
    return None


def check_scheduler_address(address: str, *, where: str) -> None:
    """Raise a UsageError (exit 2) naming ``where`` (``--scheduler``, ``cluster.address``) when
    ``address`` is not a scheduler address."""
    problem = scheduler_address_problem(address)
    if problem:
        raise UsageError(f"{where} {address!r} is not a Dask scheduler address: {problem}; expected "
                         f"tcp://HOST:PORT, for example {SCHEDULER_EXAMPLE}")


def connect_client(address: str, timeout: float) -> Any:
    """A client of the scheduler at ``address``, or ClusterUnavailable within ``timeout`` seconds.

    A tcp:// address is probed first: the scheduler must send a Dask handshake, so another
    service on that port is named as such instead of being read as a Dask frame. A client whose
    start failed is disarmed: its finaliser would otherwise wait twice the timeout to close a
    connection that never opened, and print a traceback at exit.
    """
    from distributed import Client

    check_scheduler_address(address, where="the scheduler address (cluster.address or --scheduler)")
    deadline = time.monotonic() + timeout
    match = _SCHEDULER_ADDRESS.match(address)
    assert match is not None
    if (match["scheme"] or "tcp").lower() == "tcp":
        _await_dask_handshake(address, match["host"].strip("[]"), int(match["port"]), timeout, deadline)
    remaining = max(deadline - time.monotonic(), 1.0)
    try:
        return Client(address, timeout=f"{remaining}s", set_as_default=False)
    except (OSError, TimeoutError) as exc:
        _disarm_failed_client(exc)
        raise ClusterUnavailable(_unreachable(address, timeout, f"{type(exc).__name__}: {exc}")) from None
    except Exception as exc:  # noqa: BLE001 - whatever a peer's bytes make of distributed's protocol
        _disarm_failed_client(exc)
        raise ClusterUnavailable(f"the Dask scheduler at {address} did not accept a client: "
                                 f"{type(exc).__name__}: {exc}") from None


def _unreachable(address: str, timeout: float, why: str) -> str:
    return (f"cannot reach the Dask scheduler at {address} within {timeout:g} s ({why}); start it with "
            "`dask scheduler` or fix cluster.address (or --scheduler)")


def _await_dask_handshake(address: str, host: str, port: int, timeout: float, deadline: float) -> None:
    """Connect (retrying until ``deadline``, as a scheduler may be starting) and read the
    handshake a Dask server sends first; raise ClusterUnavailable unless it is one."""
    sock = _connect_until(address, host, port, timeout, deadline)
    with sock:
        header = _receive(sock, 8, deadline)
        fix = f"point cluster.address or --scheduler at the scheduler, e.g. {SCHEDULER_EXAMPLE}"
        if not header:
            what = "sent nothing" if header is None else "closed the connection"
            raise ClusterUnavailable(f"{address} accepted the connection but {what} instead of a Dask "
                                     f"handshake within {timeout:g} s: it is not a Dask scheduler (another "
                                     f"service on that port?); {fix}")
        (length,) = struct.unpack("Q", header) if len(header) == 8 else (0,)
        body = _receive(sock, length, deadline) if 0 < length <= MAX_HANDSHAKE_BYTES else None
        if body is None or len(body) < length or not _is_dask_handshake(body):
            seen = header.decode("ascii", "replace")
            raise ClusterUnavailable(f"{address} answered, but not as a Dask scheduler (it began with "
                                     f"{seen!r}): another service is listening on that port; {fix}")


def _connect_until(address: str, host: str, port: int, timeout: float, deadline: float) -> socket.socket:
    error: OSError | None = None
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            why = f"{type(error).__name__}: {error}" if error else "no answer"
            raise ClusterUnavailable(_unreachable(address, timeout, why))
        try:
            return socket.create_connection((host, port), timeout=left)
        except OSError as exc:
            error = exc
            time.sleep(min(0.2, max(deadline - time.monotonic(), 0)))


def _receive(sock: socket.socket, size: int, deadline: float) -> bytes | None:
    """Exactly ``size`` bytes, fewer when the peer closes, or None when none came in time."""
    data = b""
    while len(data) < size:
        left = deadline - time.monotonic()
        if left <= 0:
            return data or None
        sock.settimeout(left)
        try:
            chunk = sock.recv(size - len(data))
        except (TimeoutError, socket.timeout):
            return data or None
        except OSError:
            return data
        if not chunk:
            return data
        data += chunk
    return data


def _is_dask_handshake(body: bytes) -> bool:
    from distributed.protocol.core import loads
    from distributed.protocol.utils import unpack_frames

    try:
        frames, missing = unpack_frames(body, partial=True)
        message = loads(frames, deserialize=False) if not missing else None
    except Exception:  # noqa: BLE001 - not Dask's framing: that is the answer
        return False
    return isinstance(message, dict) and "python" in message


def _disarm_failed_client(exc: BaseException) -> None:
    """Mark the half-started Client in ``exc``'s traceback closed and stop its loop thread."""
    from distributed import Client

    tb = exc.__traceback__
    while tb is not None:
        candidate = tb.tb_frame.f_locals.get("self")
        if isinstance(candidate, Client):
            candidate.status = "closed"
            with contextlib.suppress(Exception):
                candidate._loop_runner.stop()
            return
        tb = tb.tb_next


def close_quietly(client: Any) -> None:
    with contextlib.suppress(Exception):
        client.close(timeout=2)


