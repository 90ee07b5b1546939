"""What a stage running on a Dask worker reports while it runs, sent to the client as events.

Lines (an epoch or boosting-round summary) and per-step metrics are published on one Dask
event topic; the run's client subscribes and hands them to the run hooks like those of a
stage running in its own process. There is no bar remotely: a bar travels as its lines
(``pipeline.hooks.protocol.step_lines``: now and then with the elapsed time, and when it ends), marked
``step_line`` so that the client shows them where it shows bars (not in JSON logs).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Any

from pipeline.hooks.protocol import step_lines

PROGRESS_TOPIC = "pipeline.hooks.progress"


class WorkerProgress:
    """A stage's progress on a worker (outside a worker, nothing is sent)."""

    def __init__(self, stage: str) -> None:
        self.stage = stage

    def _publish(self, payload: dict[str, Any]) -> None:
        from distributed import get_worker

        try:
            get_worker().log_event(PROGRESS_TOPIC, {"stage": self.stage, **payload})
        except ValueError:                  # not inside a worker
            pass

    def message(self, text: str) -> None:
        self._publish({"text": text})

    def metrics(self, step: int, values: Mapping[str, float]) -> None:
        self._publish({"step": int(step), "metrics": {k: float(v) for k, v in values.items()}})

    def bar(self, total: int, description: str) -> contextlib.AbstractContextManager[Callable[[int], None]]:
        return step_lines(lambda text: self._publish({"text": text, "step_line": True}), total, description)
