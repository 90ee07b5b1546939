"""Run the app with uvicorn in this process: one line once ready, graceful stop on SIGTERM/SIGINT.

On SIGTERM or SIGINT uvicorn stops accepting connections, lets the requests in flight finish
(their jobs are scored: the batcher drains its queue before it stops), runs the app's shutdown
and returns; the process then exits 0. A second SIGINT forces the stop. uvicorn's habit of
re-raising the signal after a graceful stop (which would make the exit code 143 or 130) is
switched off: a drained stop is a success.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Generator
from typing import Any

import uvicorn

# How long a graceful stop waits for requests in flight before it closes their connections.
GRACEFUL_SECONDS = 30.0


class _Server(uvicorn.Server):
    """uvicorn's server, saying once where it listens, and not re-raising a handled signal."""

    def __init__(self, config: uvicorn.Config, on_ready: Callable[[str, int], None]) -> None:
        super().__init__(config)
        self._on_ready = on_ready

    async def startup(self, sockets: Any = None) -> None:
        await super().startup(sockets=sockets)
        if self.should_exit or not self.servers:
            return
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


def serve(app: Any, *, host: str = "127.0.0.1", port: int = 8000, on_ready: Callable[[str, int], None]) -> None:
    """Serve ``app`` until SIGTERM/SIGINT (then drain and return). ``port`` 0 picks a free port;
    ``on_ready(host, port)`` gets the real one once the socket listens."""
    config = uvicorn.Config(app, host=host, port=port, access_log=False, log_level="warning", lifespan="on",
                            timeout_graceful_shutdown=GRACEFUL_SECONDS, server_header=False)
    server = _Server(config, on_ready)
    app.state.serve_server = server
    server.run()
