"""How ``pipeline serve`` loads, batches, limits and reloads, as one frozen object: built by the
CLI from its flags or by ``create_app``'s caller, and read by the app (``/metadata`` shows it).

It imports no server library, so a caller can build one without the serve extra installed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import ClassVar

from pipeline.core.errors import UsageError
from pipeline.core.option_objects import Options

DEFAULT_MAX_BODY = 16 * 1024 * 1024


@dataclass(frozen=True)
class ServeOptions(Options):
    """The options of one server (``pipeline serve``'s flags; ``create_app``'s keyword arguments).

    ``run``: ``latest``, ``champion``, a run id or a run folder (under ``runs_dir``/``pipeline``);
    ``model``: the run's best when None; ``device``: cpu, gpu or auto (None: auto); ``threshold``:
    binary models only (None: the run's). ``max_batch_rows`` (1: no micro-batching) and
    ``max_wait_ms`` shape the batches; ``max_body_bytes`` caps a request; ``drift_window`` is
    the rows per drift window; ``reload_seconds`` how often a watched alias is re-read, and
    ``watch`` whether it is (None: when ``run`` is ``champion``).

    Examples:
        >>> from pipeline.serve.serve_options import ServeOptions
        >>> options = ServeOptions(run="champion", max_batch_rows=256)
        >>> options.replace(max_batch_rows=1).batching
        False
        >>> ServeOptions(drift_window=0)
        Traceback (most recent call last):
        ...
        pipeline.core.errors.UsageError: --drift-window must be at least 1, got 0
    """

    run: str = "latest"
    runs_dir: str | os.PathLike[str] = "runs"
    pipeline: str | None = None
    model: str | None = None
    device: str | None = None
    threshold: float | None = None
    max_batch_rows: int = 1024
    max_wait_ms: float = 2.0
    max_body_bytes: int = DEFAULT_MAX_BODY
    drift_window: int = 10_000
    reload_seconds: float = 2.0
    watch: bool | None = None

    what: ClassVar[str] = "serve option"

    def __post_init__(self) -> None:
        for name in ("max_batch_rows", "max_body_bytes", "drift_window"):
            value = getattr(self, name)
            if value < 1:
                raise UsageError(f"--{name.replace('_', '-')} must be at least 1, got {value}")

    @property
    def batching(self) -> bool:
        """Whether requests are gathered into batches (more than one row a batch)."""
        return self.max_batch_rows > 1


__all__ = ["DEFAULT_MAX_BODY", "ServeOptions"]
