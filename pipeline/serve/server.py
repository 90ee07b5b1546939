"""Run the app with uvicorn in this process: one line once ready, graceful stop on SIGTERM/SIGINT.

On SIGTERM or SIGINT uvicorn stops accepting connections, lets the requests in flight finish
(their jobs are scored: the batcher drains its queue before it stops), runs the app's shutdown
and returns; the process then exits 0. A second SIGINT forces the stop. uvicorn's habit of
re-raising the signal after a graceful stop (which would make the exit code 143 or 130) is
switched off: a drained stop is a success.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import gc
import signal
import socket
import threading
from collections.abc import Callable, Generator
from typing import Any

import uvicorn

from pipeline.core.errors import UsageError

# How long a graceful stop waits for requests in flight before it closes their connections.
GRACEFUL_SECONDS = 30.0


class _Server(uvicorn.Server):
    """uvicorn's server, saying once where it listens, and not re-raising a handled signal."""

    def __init__(self, config: uvicorn.Config, on_ready: Callable[[str, int], None],
                 on_stop: Callable[[], None] | None = None) -> None:
        super().__init__(config)
        self._on_ready, self._on_stop = on_ready, on_stop
        self._loop: asyncio.AbstractEventLoop | None = None

    def handle_exit(self, sig: int, frame: Any) -> None:
        """uvicorn's stop, and ``on_stop`` on the event loop (a signal handler must not touch it)."""
        super().handle_exit(sig, frame)
        if self._on_stop is not None and self._loop is not None:
            self._loop.call_soon_threadsafe(self._on_stop)

    async def startup(self, sockets: Any = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().startup(sockets=sockets)
        if self.should_exit or not self.servers:
            return
        # The model, its workflow and the libraries are loaded for good: move them out of the
        # collector's reach, so a full collection walks only the requests' objects (one took
        # 100-400 ms under load, stalling a batch; the tail latency was those batches).
        gc.collect()
        gc.freeze()
        host, port = self.servers[0].sockets[0].getsockname()[:2]
        self._on_ready(host, port)

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        signals = (signal.SIGINT, signal.SIGTERM)
        original = {sig: signal.signal(sig, self.handle_exit) for sig in signals}
        try:
            yield
        finally:
            for sig, handler in original.items():
                signal.signal(sig, handler)


def bind(host: str, port: int) -> socket.socket:
    """The listening address, taken before the model is loaded: a port in use or a host that is
    not this machine's is a usage error (exit 2) naming it, not a traceback after the load."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        raise UsageError(f"--host {host}: not an address to listen on ({exc.strerror or exc})") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRNOTAVAIL:
            raise UsageError(f"cannot listen on {host}:{port} ({exc.strerror or exc}): {host} is not an address of "
                             "this machine; give one of its own with --host (127.0.0.1, or 0.0.0.0 for every "
                             "interface)") from None
        if exc.errno in (errno.EACCES, errno.EPERM):
            raise UsageError(f"cannot listen on {host}:{port} ({exc.strerror or exc}): ports below 1024 need "
                             "privileges; pick another with --port (0 picks a free one)") from None
        raise UsageError(f"cannot listen on {host}:{port} ({exc.strerror or exc}): another server may be using "
                         "the port; pick another with --port (0 picks a free one)") from None
    sock.set_inheritable(True)
    return sock


def serve(app: Any, sock: socket.socket, *, on_ready: Callable[[str, int], None]) -> None:
    """Serve ``app`` on ``sock`` (``bind``) until SIGTERM/SIGINT, then drain and return;
    ``on_ready(host, port)`` gets the real address (``--port 0``) once it listens."""
    host, port = sock.getsockname()[:2]
    # log_config=None: uvicorn's records go through the CLI's handler (text or JSON lines), at warning and up.
    config = uvicorn.Config(app, host=host, port=port, access_log=False, log_level="warning", log_config=None,
                            lifespan="on", timeout_graceful_shutdown=GRACEFUL_SECONDS, server_header=False)
    state = getattr(app.state, "serve", None)
    server = _Server(config, on_ready, on_stop=state.stopping if state is not None else None)
    app.state.serve_server = server
    server.run(sockets=[sock])
