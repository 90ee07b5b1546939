"""Running one stage, the same way in this process or on a Dask worker.

``execute_stage`` wraps a stage function with what the manifest needs (times, peak memory,
facts, the error if any) and never lets a stage's exception escape as-is: it comes back as a
failed ``StageOutcome``, so a failure crosses a process boundary as plain data. The runner
(in-process) and ``DaskExecutor`` (on a cluster) both call it.
"""

from __future__ import annotations

import contextlib
import logging
import pickle
import sys
import time
import traceback
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pipeline.backends import get_backend
from pipeline.errors import PipelineError, StageError
from pipeline.memory import MemorySampler, release_freed_memory
from pipeline.stages import STAGE_KINDS, StageContext
from pipeline.stages.base import StageProgress
from pipeline.store import utc_now

PROGRESS_TOPIC = "pipeline.progress"


@dataclass
class StageTask:
    """Everything a process needs to run one stage: small and picklable."""

    name: str
    spec: Any                               # the stage's pydantic params model
    backend: str                            # "cpu" | "gpu"
    seed: int
    artifacts_dir: Path | None
    import_paths: list[str] = field(default_factory=list)   # config folder, for `python` stages
    cache_root: Path | None = None          # where to store the output when it succeeds
    cache_key: str | None = None


@dataclass
class StageOutcome:
    """What running a stage produced: its output (None when failed) and the record of it."""

    name: str
    status: str                             # succeeded | failed
    output: Any = None
    started: str | None = None
    ended: str | None = None
    seconds: float = 0.0
    peak_rss_bytes: int | None = None
    peak_device_bytes: int | None = None
    facts: dict[str, Any] = field(default_factory=dict)
    error: PipelineError | None = None
    traceback: str | None = None
    worker: str | None = None

    def without_output(self) -> StageOutcome:
        return replace(self, output=None)


def execute_stage(task: StageTask, inputs: Mapping[str, Any], progress: StageProgress | None = None) -> StageOutcome:
    """Run ``task`` on ``inputs`` here; failures come back in the outcome, not as exceptions."""
    for folder in task.import_paths:
        if folder not in sys.path:
            sys.path.append(folder)
    backend = get_backend(task.backend)
    ctx = StageContext(backend=backend, seed=task.seed, stage=task.name, artifacts_dir=task.artifacts_dir,
                       progress=progress)
    outcome = StageOutcome(task.name, "running", started=utc_now(), worker=_worker_address())
    sampler = MemorySampler(backend.device_memory_used)
    t0 = time.perf_counter()
    try:
        with sampler:
            outcome.output = STAGE_KINDS[task.spec.kind].run(task.spec, ctx, inputs)
        outcome.status = "succeeded"
    except PipelineError as exc:
        exc.stage = task.name  # type: ignore[attr-defined]
        outcome.status, outcome.error = "failed", exc
        outcome.traceback = traceback.format_exc()
    except Exception as exc:  # noqa: BLE001 - any failure inside a stage is a stage failure
        error = StageError(task.name, f"{type(exc).__name__}: {exc}")
        error.__cause__ = exc
        outcome.status, outcome.error = "failed", error
        outcome.traceback = traceback.format_exc()
    outcome.ended = utc_now()
    outcome.seconds = round(time.perf_counter() - t0, 4)
    outcome.peak_rss_bytes, outcome.peak_device_bytes = sampler.peak_rss, sampler.peak_device
    outcome.facts = ctx.facts
    if outcome.status == "succeeded" and task.cache_root is not None and task.cache_key is not None:
        _store(task, outcome)
    return outcome


def _store(task: StageTask, outcome: StageOutcome) -> None:
    """Keep a successful output for later runs; a cache that cannot be written only warns."""
    from pipeline.cache import StageCache

    record = {"stage": task.name, "kind": task.spec.kind, "facts": outcome.facts, "seconds": outcome.seconds}
    try:
        StageCache(task.cache_root).store(task.cache_key, outcome.output, task.artifacts_dir, record)
    except (OSError, pickle.PicklingError, TypeError, AttributeError) as exc:
        logging.getLogger("pipeline").warning("stage %s: output not cached (%s: %s)", task.name,
                                              type(exc).__name__, exc)


def load_cached(cache_root: Path, key: str, name: str) -> StageOutcome:
    """A cached stage's output as an outcome (a Dask task on a cluster, a call in process)."""
    from pipeline.cache import StageCache

    entry = StageCache(cache_root).lookup(key)
    if entry is None:
        error = StageError(name, "its cache entry disappeared or failed verification while the run was "
                                 "using it; rerun to recompute it")
        return StageOutcome(name, "failed", error=error)
    return StageOutcome(name, "cached", output=entry.load_output(), facts=entry.record.get("facts", {}))


def _worker_address() -> str | None:
    if "distributed" not in sys.modules:
        return None
    from distributed import get_worker

    try:
        return get_worker().address
    except ValueError:                      # not inside a worker
        return None


# ----------------------------------------------------------------------- on a Dask worker
class WorkerProgress:
    """Epoch lines from a worker, published to the client as Dask events (no bar remotely)."""

    def __init__(self, stage: str) -> None:
        self.stage = stage

    def message(self, text: str) -> None:
        from distributed import get_worker

        try:
            get_worker().log_event(PROGRESS_TOPIC, {"stage": self.stage, "text": text})
        except ValueError:
            pass

    def bar(self, total: int, description: str) -> contextlib.AbstractContextManager[Callable[[int], None]]:
        return contextlib.nullcontext(lambda n: None)


def run_on_worker(task: StageTask, inputs: dict[str, StageOutcome]) -> StageOutcome:
    """The Dask task of one stage: its inputs arrive as the outcomes of the upstream tasks."""
    failed = next((o for o in inputs.values() if o.status == "failed"), None)
    if failed is not None:               # e.g. a cache entry that vanished: never run on None
        return StageOutcome(task.name, "failed", error=StageError(
            task.name, f"its input '{failed.name}' is unavailable: {failed.error}"))
    values = {name: outcome.output for name, outcome in inputs.items()}
    with warnings.catch_warnings():
        # scikit-learn caps n_jobs at 1 in daemon workers and says so on every fit; one thread
        # per worker is what the cluster was sized for.
        warnings.filterwarnings("ignore", message="Inside a Dask worker with daemon=True")
        try:
            return execute_stage(task, values, WorkerProgress(task.name))
        finally:
            # The next task on this worker starts from what it holds, not from this one's peak.
            release_freed_memory()


def outcome_record(outcome: StageOutcome) -> StageOutcome:
    """The outcome without its output: what the client needs, without moving the data."""
    return outcome.without_output()


class DaskExecutor:
    """Submits stages to a cluster as their inputs finish; the client keeps the bookkeeping.

    Each stage is one task returning a ``StageOutcome`` that stays on its worker; a second,
    tiny task strips the output so only the record travels to the client. Downstream tasks
    take the upstream outcome futures as arguments, so Dask moves data worker to worker.
    """

    def __init__(self, session: Any) -> None:
        self.session = session
        self.client = session.client
        self.gpu_slots = session.gpu_resources()

    def submit(self, task: StageTask, inputs: Mapping[str, Any]) -> tuple[Any, Any]:
        """(outcome future, record future) for ``task`` on the outcome futures ``inputs``."""
        from pipeline.backends.cluster import GPU_RESOURCE

        heavy = task.spec.kind in ("train", "torch")
        resources = {GPU_RESOURCE: 1} if heavy and self.gpu_slots else None
        outcome = self.client.submit(run_on_worker, task, dict(inputs), key=f"stage-{task.name}-{id(task):x}",
                                     pure=False, resources=resources, retries=0)
        record = self.client.submit(outcome_record, outcome, key=f"record-{task.name}-{id(task):x}", pure=False)
        return outcome, record

    @contextlib.contextmanager
    def progress_events(self, handler: Callable[[str, str], None]) -> Iterator[None]:
        """Call ``handler(stage, text)`` for each progress line workers publish."""

        def on_event(event: Any) -> None:
            _, payload = event
            handler(payload.get("stage", "?"), payload.get("text", ""))

        self.client.subscribe_topic(PROGRESS_TOPIC, on_event)
        try:
            yield
        finally:
            self.client.unsubscribe_topic(PROGRESS_TOPIC)
