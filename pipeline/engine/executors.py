"""Running stages: one stage the same way in this process or on a Dask worker, and the two
executors the runner's one scheduling loop drives.

``execute_stage`` wraps a stage function with what the run record needs (times, peak memory,
facts, the run-record fields its kind declares, the error if any) and never lets a stage's
exception escape as-is: it comes back as a failed ``StageOutcome``, so a failure crosses a
process boundary as plain data.

An executor takes stages whose inputs are done (``submit``), hands back their outcomes as
they finish (``next_finished``), frees outputs no stage needs any more (``release``) and
returns the outputs a library caller asked to keep (``outputs``). ``InProcessExecutor`` runs
each stage here when the runner asks for the next outcome, in plan order;
``DaskExecutor`` submits each to the cluster at once, so stages with ready inputs run
side by side and data moves worker to worker.
"""

from __future__ import annotations

import contextlib
import logging
import pickle
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from pipeline.backends import Backend
from pipeline.backends.devices.device_memory import ProcessDeviceMemory
from pipeline.backends.devices.gpu_usage import gpu_meter
from pipeline.distributed.worker_progress import PROGRESS_TOPIC, WorkerProgress
from pipeline.core.errors import PipelineError, StageError, StorageError
from pipeline.core.interrupts import BudgetExceeded, Terminated, budget_stop, raise_if_stopped, termination_requested
from pipeline.core.local_code import use_config_folders
from pipeline.hooks.protocol import StageProgress
from pipeline.usage.memory import MemorySampler, release_freed_memory, sampling_interval
from pipeline.stages import STAGE_KINDS, StageContext
from pipeline.runs.store import utc_now

log = logging.getLogger("pipeline")

__all__ = [
    "PROGRESS_TOPIC", "DaskExecutor", "Executor", "InProcessExecutor", "StageOutcome", "StageTask",
    "WorkerProgress", "execute_stage", "load_cached",
]


@dataclass
class StageTask:
    """Everything a process needs to run one stage: small and picklable."""

    name: str
    spec: Any                               # the stage's pydantic params model
    backend: Backend                        # pickles as its class: a worker uses its own instance
    seed: int
    artifacts_dir: Path | None
    inputs: list[str] = field(default_factory=list)
    import_paths: list[str] = field(default_factory=list)   # the config's folder: user modules import
    cache_root: Path | None = None          # where to store the output when it succeeds
    cache_key: str | None = None


@dataclass
class StageOutcome:
    """What running a stage produced: its output (None when failed) and the record of it."""

    name: str
    status: str                             # succeeded | failed | cached | interrupted (on the exception)
    output: Any = None
    started: str | None = None
    ended: str | None = None
    seconds: float = 0.0
    peak_rss_bytes: int | None = None
    peak_device_bytes: int | None = None
    peak_device_source: str | None = None   # the allocators peak_device_bytes adds up (StageRecord)
    usage: dict[str, Any] | None = None     # CPU seconds, and the GPUs' usage where measured (StageRecord)
    facts: dict[str, Any] = field(default_factory=dict)
    run_record: dict[str, Any] = field(default_factory=dict)
    error: PipelineError | None = None
    traceback: str | None = None
    worker: str | None = None

    def without_output(self) -> StageOutcome:
        return replace(self, output=None)


def execute_stage(task: StageTask, inputs: Mapping[str, Any], progress: StageProgress | None = None, *,
                  cache_writer: BackgroundCacheWriter | None = None) -> StageOutcome:
    """Run ``task`` on ``inputs`` here; failures come back in the outcome, not as exceptions.

    A successful output is stored in the stage cache before this returns, or, with a
    ``cache_writer``, finished on its thread while the next stage runs (its owner waits for it).
    """
    use_config_folders(task.import_paths)
    backend = task.backend
    kind = STAGE_KINDS[task.spec.kind]
    ctx = StageContext(backend=backend, seed=task.seed, stage=task.name, artifacts_dir=task.artifacts_dir,
                       progress=progress)
    outcome = StageOutcome(task.name, "running", started=utc_now(), worker=_worker_address())
    # This process's own allocations (RMM, PyTorch, CuPy), whichever backend: a CPU-backend
    # torch stage can train on a GPU too.
    sampler = MemorySampler(sampling_interval(), device_meter=ProcessDeviceMemory(), gpu_meter=gpu_meter())
    t0 = time.perf_counter()
    try:
        try:
            with sampler:
                outcome.output = kind.run(task.spec, ctx, inputs)
                raise_if_stopped()              # a stop a library swallowed: the stage did not finish
            wrong = kind.output_problem(outcome.output)
            if wrong:
                raise TypeError(wrong)
            outcome.status = "succeeded"
        except PipelineError as exc:
            exc.stage = task.name  # type: ignore[attr-defined]
            outcome.status, outcome.error = "failed", exc
            outcome.traceback = traceback.format_exc()
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - any failure inside a stage is a stage failure
            if termination_requested():         # a library turned our SIGTERM into its own error
                raise Terminated() from exc
            if budget_stop():                   # ... or the budget's stop
                raise BudgetExceeded() from exc
            # sys.exit() in user code ends the stage, not the process: exit 1 is kept for bugs.
            what = f"called sys.exit({exc.code!r})" if isinstance(exc, SystemExit) else f"{type(exc).__name__}: {exc}"
            error = StageError(task.name, what)
            error.__cause__ = exc
            outcome.status, outcome.error = "failed", error
            outcome.traceback = traceback.format_exc()
    except KeyboardInterrupt as stop:           # the budget, SIGTERM or SIGINT stopped the stage
        # What it used until then is measured as a failed stage's is: the run's record (its
        # usage, its cost) adds it up. The runner records the stage from ``stop.outcome``.
        outcome.status = "interrupted"
        _measure(outcome, t0, sampler, ctx)
        stop.outcome = outcome  # type: ignore[attr-defined]
        raise
    _measure(outcome, t0, sampler, ctx)
    outcome.run_record = _declared(task, kind.records, ctx.run_record)
    if outcome.status == "succeeded" and task.cache_root is not None and task.cache_key is not None:
        _store(task, outcome, cache_writer)
    return outcome


def _measure(outcome: StageOutcome, t0: float, sampler: MemorySampler, ctx: StageContext) -> None:
    """The stage's end, seconds, peaks, usage and facts, however it ended."""
    outcome.ended = utc_now()
    outcome.seconds = round(time.perf_counter() - t0, 4)
    outcome.peak_rss_bytes, outcome.peak_device_bytes = sampler.peak_rss, sampler.peak_device
    outcome.peak_device_source = sampler.peak_device_source
    outcome.usage = sampler.usage()
    outcome.facts = ctx.facts


def _declared(task: StageTask, declared: Sequence[str], fields: dict[str, Any]) -> dict[str, Any]:
    """The run-record fields the stage's kind declared; others are dropped with a warning."""
    undeclared = sorted(set(fields) - set(declared))
    if undeclared:
        log.warning("stage %s set run-record field(s) %s that its kind '%s' does not declare; ignored",
                    task.name, undeclared, task.spec.kind)
    return {key: value for key, value in fields.items() if key in declared}


CACHE_WRITE_ERRORS = (OSError, StorageError, pickle.PicklingError, TypeError, AttributeError)


def _store(task: StageTask, outcome: StageOutcome, writer: BackgroundCacheWriter | None = None) -> None:
    """Keep a successful output for later runs; a cache that cannot be written only warns.

    What reads the output (its pickle stream, the checksums of its buffers) happens here; writing
    the buffer files, the artifacts and the record happens on ``writer``'s thread when given.
    """
    from pipeline.cache import StageCache

    record = {"stage": task.name, "kind": task.spec.kind, "facts": outcome.facts, "seconds": outcome.seconds,
              "run_record": outcome.run_record}
    try:
        pending = StageCache(task.cache_root).prepare(task.cache_key, outcome.output)
    except CACHE_WRITE_ERRORS as exc:
        _not_cached(task.name, exc)
        return
    if writer is None:
        _finish_entry(task.name, pending, task.artifacts_dir, record)
    else:
        writer.submit(task.name, pending, task.artifacts_dir, record)


def _finish_entry(name: str, pending: Any, artifacts_dir: Path | None, record: dict[str, Any]) -> None:
    try:
        pending.finish(artifacts_dir, record)
    except CACHE_WRITE_ERRORS as exc:
        _not_cached(name, exc)


def _not_cached(name: str, exc: BaseException) -> None:
    log.warning("stage %s: output not cached (%s: %s)", name, type(exc).__name__, exc)


class BackgroundCacheWriter:
    """Finishes cache entries on a thread of their own while the next stage runs.

    At most one entry is in flight: ``submit`` waits for the previous one first, so the outputs
    held for writing stay bounded (one stage's, at most, beyond when the run frees it). ``wait``
    must be called before the run ends: an entry is absent until it is finished, and one a
    killed process was writing stays a hidden ``.tmp-`` folder. The thread stops at SIGTERM,
    leaving nothing. Only in this process: a Dask worker stores before its task returns.
    """

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None

    def submit(self, name: str, pending: Any, artifacts_dir: Path | None, record: dict[str, Any]) -> None:
        self.wait()
        self._thread = threading.Thread(target=self._finish, args=(name, pending, artifacts_dir, record),
                                        name=f"pipeline-cache-{name}", daemon=True)
        self._thread.start()

    @staticmethod
    def _finish(name: str, pending: Any, artifacts_dir: Path | None, record: dict[str, Any]) -> None:
        try:
            _finish_entry(name, pending, artifacts_dir, record)
        except Terminated:
            pass                                    # the run is stopping; the entry is left out
        except Exception as exc:  # noqa: BLE001 - a thread's error would only print; the cache only warns
            _not_cached(name, exc)

    def wait(self) -> None:
        """Until the entry in flight is finished (or left out)."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None


def load_cached(cache_root: Path, key: str, name: str) -> StageOutcome:
    """A cached stage's output as an outcome (a Dask task on a cluster, a call in process)."""
    from pipeline.cache import StageCache

    entry = StageCache(cache_root).lookup(key, stage=name)
    if entry is None:
        error = StageError(name, "its cache entry disappeared or failed verification while the run was "
                                 "using it; rerun to recompute it")
        return StageOutcome(name, "failed", error=error)
    return StageOutcome(name, "cached", output=entry.load_output(), facts=entry.record.get("facts", {}),
                        run_record=entry.record.get("run_record", {}))


def _worker_address() -> str | None:
    if "distributed" not in sys.modules:
        return None
    from distributed import get_worker

    try:
        return get_worker().address
    except ValueError:                      # not inside a worker
        return None


# ----------------------------------------------------------------------- the executor seam
class Executor(Protocol):
    """Where the runner's stages run. ``started(name)`` and ``progress(name)`` are callbacks
    the runner gives the executor: a stage has started; where its progress goes."""

    def add_cached(self, name: str, entry: Any) -> None: ...
    def submit(self, task: StageTask) -> None: ...
    def next_finished(self) -> StageOutcome: ...
    def release(self, name: str) -> None: ...
    def outputs(self, names: Sequence[str]) -> dict[str, Any]: ...
    def close(self) -> None: ...
    # Per cluster worker, what it used over the run (CPU and wall seconds, GPU energy), read by
    # ``close``; empty in process.
    worker_usage: dict[str, dict[str, Any]]


StartedCallback = Callable[[str], None]
ProgressCallback = Callable[[str], StageProgress]


class InProcessExecutor:
    """Runs each submitted stage in this process, in submission order, when its outcome is
    asked for. Cached outputs are unpickled only when a stage that runs needs them."""

    worker_usage: dict[str, dict[str, Any]] = {}

    def __init__(self, started: StartedCallback, progress: ProgressCallback) -> None:
        self._started = started
        self._progress = progress
        self._queue: list[StageTask] = []
        self._outputs: dict[str, Any] = {}
        self._cached: dict[str, Any] = {}
        self._cache_writer = BackgroundCacheWriter()

    def add_cached(self, name: str, entry: Any) -> None:
        """A stage taken from the cache: ``entry`` (verified by the runner) loads on first use."""
        self._cached[name] = entry

    def submit(self, task: StageTask) -> None:
        self._queue.append(task)

    def next_finished(self) -> StageOutcome:
        task = self._queue.pop(0)
        self._started(task.name)
        inputs = {name: self._output(name) for name in task.inputs}
        outcome = execute_stage(task, inputs, self._progress(task.name), cache_writer=self._cache_writer)
        self._outputs[task.name] = outcome.output
        return outcome.without_output()

    def _output(self, name: str) -> Any:
        if name not in self._outputs and name in self._cached:
            self._outputs[name] = self._cached[name].load_output()
        return self._outputs[name]

    def release(self, name: str) -> None:
        self._outputs.pop(name, None)
        self._cached.pop(name, None)

    def outputs(self, names: Sequence[str]) -> dict[str, Any]:
        return {name: self._output(name) for name in names if name in self._outputs or name in self._cached}

    def close(self) -> None:
        """The run's cache entries are written (or left out) once this returns."""
        self._queue.clear()
        self._cache_writer.wait()


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
    """Submits stages to a cluster; the client keeps the bookkeeping.

    Each stage is one task returning a ``StageOutcome`` that stays on its worker; a second,
    tiny task strips the output so only the record travels to the client. Downstream tasks
    take the upstream outcome futures as arguments, so Dask moves data worker to worker.
    Stages whose kind declares the ``gpu`` resource take one GPU slot on a GPU cluster.
    """

    def __init__(self, session: Any, started: StartedCallback, progress: ProgressCallback) -> None:
        from distributed import as_completed

        self.session = session
        self.client = session.client
        self.gpu_slots = session.gpu_resources()
        self._started = started
        self._progress = progress
        self._futures: dict[str, Any] = {}
        self._records: dict[Any, str] = {}
        self._cached: dict[str, Any] = {}
        self._finished = as_completed(loop=self.client.loop)
        self.client.subscribe_topic(PROGRESS_TOPIC, self._on_event)
        self._usage_start = self._snapshot()
        self.worker_usage: dict[str, dict[str, Any]] = {}

    def _snapshot(self) -> dict[str, Any]:
        """Every worker's ``process_snapshot`` (empty when the cluster cannot say)."""
        from pipeline.usage.memory import process_snapshot

        try:
            return dict(self.client.run(process_snapshot))
        except Exception as exc:  # noqa: BLE001 - usage is a record, never a reason to fail a run
            log.warning("cluster usage: cannot read the workers' counters: %s: %s", type(exc).__name__, exc)
            return {}

    def _on_event(self, event: Any) -> None:
        _, payload = event
        progress = self._progress(payload.get("stage", "?"))
        if "metrics" in payload:
            progress.metrics(int(payload.get("step", 0)), payload["metrics"])
        elif payload.get("step_line"):           # a bar's line: where bars are shown
            getattr(progress, "step_line", progress.message)(payload.get("text", ""))
        else:
            progress.message(payload.get("text", ""))

    def add_cached(self, name: str, entry: Any) -> None:
        self._cached[name] = entry

    def _future(self, name: str) -> Any:
        """The outcome future of ``name``; a cached stage's output is loaded on a worker."""
        if name not in self._futures:
            entry = self._cached[name]
            self._futures[name] = self.client.submit(load_cached, entry.path.parent, entry.key, name,
                                                     key=f"cached-{name}-{entry.key}", pure=False)
        return self._futures[name]

    def submit(self, task: StageTask) -> None:
        from pipeline.backends.clusters.startup import GPU_RESOURCE

        needs_gpu = "gpu" in STAGE_KINDS[task.spec.kind].resources
        resources = {GPU_RESOURCE: 1} if needs_gpu and self.gpu_slots else None
        inputs = {name: self._future(name) for name in task.inputs}
        outcome = self.client.submit(run_on_worker, task, inputs, key=f"stage-{task.name}-{id(task):x}",
                                     pure=False, resources=resources, retries=0)
        record = self.client.submit(outcome_record, outcome, key=f"record-{task.name}-{id(task):x}", pure=False)
        self._futures[task.name], self._records[record] = outcome, task.name
        self._finished.add(record)
        self._started(task.name)

    def next_finished(self) -> StageOutcome:
        record_future = next(self._finished)
        return _remote_outcome(self._records.pop(record_future), record_future)

    def release(self, name: str) -> None:
        self._futures.pop(name, None)            # frees the output on its worker

    def outputs(self, names: Sequence[str]) -> dict[str, Any]:
        wanted = [n for n in names if n in self._futures or n in self._cached]
        gathered = self.client.gather([self._future(n) for n in wanted])
        return {name: outcome.output for name, outcome in zip(wanted, gathered)}

    def close(self) -> None:
        """Cancels what is left, reads what every worker used over the run, closes the session."""
        from pipeline.usage.memory import worker_usage

        with contextlib.suppress(Exception):
            self.client.unsubscribe_topic(PROGRESS_TOPIC)
        if self._usage_start:
            self.worker_usage = worker_usage(self._usage_start, self._snapshot())
        try:
            self.client.cancel(list(self._futures.values()))
        finally:
            self.session.close()


def _remote_outcome(name: str, record_future: Any) -> StageOutcome:
    """The record of a stage that ran on the cluster; a lost worker becomes a StageError."""
    from distributed.scheduler import KilledWorker

    try:
        return record_future.result()
    except KilledWorker as exc:
        worker = getattr(exc.last_worker, "address", exc.last_worker)
        error = StageError(name, f"the Dask worker running it died ({worker}); Dask ran it on "
                                 f"{exc.allowed_failures + 1} worker(s) and every one died. Check that worker's "
                                 "log and its memory limit (cluster.memory_limit)")
    except Exception as exc:  # noqa: BLE001 - lost connections, cancellations, scheduler restarts
        error = StageError(name, f"lost on the Dask cluster: {type(exc).__name__}: {exc}")
    error.stage = name  # type: ignore[attr-defined]
    return StageOutcome(name, "failed", error=error)

