"""Execute a pipeline: plan the DAG, run each stage, time it, measure its memory, record it.

The runner owns the bookkeeping (run folder, manifest, progress); stages own the work. An
output is dropped as soon as no remaining stage needs it, so a run holds only what is still
to be consumed (the raw table is gone once it is split).
"""

from __future__ import annotations

import logging
import os
import platform
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pipeline import __version__
from pipeline.backends import Backend, DeviceChoice, resolve_backend
from pipeline.config import PipelineConfig, dump_config
from pipeline.dag import plan, select
from pipeline.config.schema import ClusterConfig
from pipeline.errors import ConfigError, PipelineError, StageError, StorageError, Terminated
from pipeline.cache import CacheEntry, StageCache, stage_key
from pipeline.execution import StageOutcome, StageTask, execute_stage
from pipeline.locks import RunLock
from pipeline.stages.base import LogProgress, StageProgress
from pipeline.stages.evaluate import Evaluation
from pipeline.store import RunDir, RunStore, host_name, sha256_file, utc_now


@dataclass
class StageRecord:
    name: str
    kind: str
    selected: bool
    status: str = "pending"            # pending | running | succeeded | failed
    started: str | None = None
    ended: str | None = None
    seconds: float | None = None
    peak_rss_bytes: int | None = None
    peak_device_bytes: int | None = None
    facts: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    worker: str | None = None            # Dask worker address, on a cluster
    cache_key: str | None = None         # content key of the stage (None: not cacheable)


@dataclass
class CachedOutput:
    """A stage output still in the cache: loaded only if a stage that runs needs it."""

    entry: CacheEntry

    def load(self) -> Any:
        return self.entry.load_output()


class Reporter(Protocol):
    """Progress callbacks; the CLI renders them on a TTY or as log lines."""

    def run_started(self, run_id: str, device: DeviceChoice, total: int) -> None: ...
    def cluster_started(self, description: str) -> None: ...
    def stage_started(self, record: StageRecord, index: int, total: int) -> None: ...
    def stage_finished(self, record: StageRecord, index: int, total: int) -> None: ...
    def stage_progress(self, record: StageRecord) -> StageProgress: ...
    def run_finished(self, run_id: str, status: str, manifest: dict[str, Any]) -> None: ...


class SilentReporter:
    def run_finished(self, run_id: str, status: str, manifest: dict[str, Any]) -> None: ...
    def run_started(self, run_id: str, device: DeviceChoice, total: int) -> None: ...
    def cluster_started(self, description: str) -> None: ...
    def stage_started(self, record: StageRecord, index: int, total: int) -> None: ...
    def stage_finished(self, record: StageRecord, index: int, total: int) -> None: ...

    def stage_progress(self, record: StageRecord) -> StageProgress:
        # Library runs: epoch lines go to the "pipeline" logger, which the caller configures.
        return LogProgress(logging.getLogger("pipeline"), prefix=f"{record.name}: ")


@dataclass
class RunResult:
    run_id: str
    run_dir: Path
    status: str
    manifest: dict[str, Any]
    outputs: dict[str, Any]

    @property
    def evaluation(self) -> Evaluation | None:
        for value in self.outputs.values():
            if isinstance(value, Evaluation):
                return value
        return None


class Runner:
    """Runs one config once; ``run()`` returns a RunResult or raises a PipelineError."""

    def __init__(
        self,
        config: PipelineConfig,
        *,
        device: str | None = None,
        runs_dir: str | os.PathLike[str] | None = None,
        reporter: Reporter | None = None,
        keep_outputs: bool = True,
        config_path: str | None = None,
        scheduler: str | None = None,
        cache: bool = True,
        force: bool | Sequence[str] = False,
        wait: float = 600.0,
    ) -> None:
        self.config = config
        self.use_cache = cache
        self.keys: dict[str, str | None] = {}      # stage -> cache key, set per run
        self.force = force
        self.wait = wait
        # --scheduler ADDRESS: the config's cluster section (if any) pointed at that scheduler.
        self.cluster: ClusterConfig | None = config.cluster
        if scheduler:
            base = config.cluster or ClusterConfig()
            self.cluster = base.model_copy(update={"address": scheduler})
        self.requested_device = device or config.device
        self.store = RunStore(runs_dir or config.runs_dir, config.name)
        self.reporter = reporter or SilentReporter()
        self.keep_outputs = keep_outputs
        self.config_path = config_path

    def run(self, *, only: Sequence[str] = (), from_: Sequence[str] = (), until: Sequence[str] = ()) -> RunResult:
        graph = self.config.inputs_of()
        try:
            selected = select(graph, only=only, from_=from_, until=until)
        except KeyError as exc:
            raise ConfigError(f"--only/--from/--until name unknown stage(s) {exc.args[0]} "
                              f"(stages: {', '.join(graph)})") from None
        if not selected:
            raise ConfigError("the stage selection (--only/--from/--until) is empty")
        steps = plan(graph, selected)
        forced = self._forced(graph, steps)
        backend, choice = resolve_backend(self.requested_device)
        try:
            lock = RunLock(self.store.pipeline_dir / ".lock", wait=self.wait)
            lock.__enter__()
        except OSError as exc:
            raise StorageError(f"cannot create the run lock in {self.store.pipeline_dir}: {exc.strerror or exc}") from exc
        try:
            return self._run_locked(lock, steps, selected, forced, backend, choice)
        finally:
            lock.__exit__()

    def _run_locked(self, lock: RunLock, steps: list[tuple[str, bool]], selected: set[str], forced: set[str],
                    backend: Backend, choice: DeviceChoice) -> RunResult:
        run = self.store.new_run()
        lock.note(run_id=run.run_id)
        run.write_config(dump_config(self.config))
        records = {name: StageRecord(name, self.config.stages[name].kind, chosen) for name, chosen in steps}
        manifest = self._manifest(run, backend, choice, records, selected)
        run.write_manifest(manifest)
        self.reporter.run_started(run.run_id, choice, len(steps))
        cached = self._cached_entries(steps, records, backend, forced)

        started = time.perf_counter()
        try:
            if self.cluster is not None:
                outputs = self._on_cluster(steps, records, backend, run, manifest, cached)
            else:
                outputs = self._in_process(steps, records, backend, run, manifest, cached)
        except KeyboardInterrupt as exc:
            why = "terminated (SIGTERM)" if isinstance(exc, Terminated) else "interrupted by the user (SIGINT)"
            self._finish(run, manifest, "interrupted", started, error=why)
            self.reporter.run_finished(run.run_id, "interrupted", manifest)
            raise
        except PipelineError as exc:
            self._finish(run, manifest, "failed", started, error=str(exc))
            self.reporter.run_finished(run.run_id, "failed", manifest)
            raise
        # Cached outputs are unpickled only when asked for (library use) or needed for the
        # metrics: a fully cached CLI run loads no model and imports no ML library.
        outputs = {name: value.load() if isinstance(value, CachedOutput) else value
                   for name, value in outputs.items()
                   if self.keep_outputs or self.config.stages[name].kind == "evaluate"}
        evaluation = next((v for v in outputs.values() if isinstance(v, Evaluation)), None)
        if evaluation is not None:
            manifest["metrics"] = evaluation.to_dict()
        self._finish(run, manifest, "succeeded", started)
        self.store.mark_latest(run)
        self.reporter.run_finished(run.run_id, "succeeded", manifest)
        return RunResult(run.run_id, run.path, "succeeded", manifest, outputs)

    # ------------------------------------------------------------------ the stage cache
    def _forced(self, graph: dict[str, list[str]], steps: list[tuple[str, bool]]) -> set[str]:
        """Stages --force reruns: all, or the named ones and everything downstream of them."""
        names = [name for name, _ in steps]
        if self.force is True:
            return set(names)
        if not self.force:
            return set()
        unknown = [n for n in self.force if n not in graph]
        if unknown:
            raise ConfigError(f"--force names unknown stage(s) {unknown} (stages: {', '.join(graph)})")
        forced = set(self.force)
        for name in names:                       # plan order: parents come first
            if any(parent in forced for parent in graph[name]):
                forced.add(name)
        return forced

    def _cached_entries(self, steps: list[tuple[str, bool]], records: dict[str, StageRecord], backend: Backend,
                        forced: set[str]) -> dict[str, CacheEntry]:
        """Key every stage; return the verified cache entries of those that need not run."""
        versions = backend.versions()
        self.keys.clear()
        found: dict[str, CacheEntry] = {}
        for name, _ in steps:
            spec = self.config.stages[name]
            key = stage_key(spec, {i: self.keys.get(i) for i in spec.inputs}, backend=backend.name,
                            versions=versions, seed=self.config.seed) if self.use_cache else None
            self.keys[name] = records[name].cache_key = key
            if key is not None and name not in forced:
                entry = self.cache.lookup(key)
                if entry is not None:
                    found[name] = entry
        return found

    @property
    def cache(self) -> StageCache:
        return StageCache(self.store.pipeline_dir / ".cache")

    def _use_cached(self, name: str, entry: CacheEntry, record: StageRecord, index: int, total: int,
                    run: RunDir, manifest: dict[str, Any]) -> CachedOutput:
        """Record a stage as taken from the cache and restore its artifacts into this run."""
        entry.restore_artifacts(run.stage_dir(name))
        record.status, record.started = "cached", utc_now()
        record.ended, record.seconds, record.facts = record.started, 0.0, dict(entry.record.get("facts", {}))
        self.reporter.stage_finished(record, index, total)
        run.write_manifest(manifest)
        return CachedOutput(entry)

    # ------------------------------------------------------------------ in this process
    def _in_process(self, steps: list[tuple[str, bool]], records: dict[str, StageRecord], backend: Backend,
                    run: RunDir, manifest: dict[str, Any], cached: dict[str, CacheEntry]) -> dict[str, Any]:
        consumers = self._consumers(steps)
        outputs: dict[str, Any] = {}
        for index, (name, _) in enumerate(steps, start=1):
            record = records[name]
            if name in cached:
                outputs[name] = self._use_cached(name, cached[name], record, index, len(steps), run, manifest)
                for parent in self._release(name, consumers):
                    outputs.pop(parent, None)
                continue
            record.status, record.started = "running", utc_now()
            self.reporter.stage_started(record, index, len(steps))
            inputs = {i: outputs[i] for i in self.config.stages[name].inputs}
            inputs = {i: v.load() if isinstance(v, CachedOutput) else v for i, v in inputs.items()}
            outcome = execute_stage(self._task(name, backend, run), inputs, self.reporter.stage_progress(record))
            self._record(record, outcome, index, len(steps), run, manifest)
            outputs[name] = outcome.output
            for parent in self._release(name, consumers):
                outputs.pop(parent, None)
        return outputs

    # ------------------------------------------------------------------ on a Dask cluster
    def _on_cluster(self, steps: list[tuple[str, bool]], records: dict[str, StageRecord], backend: Backend,
                    run: RunDir, manifest: dict[str, Any], cached: dict[str, CacheEntry]) -> dict[str, Any]:
        """Submit each stage once its inputs are done; stages with ready inputs run at once."""
        from distributed import as_completed

        from pipeline.backends.cluster import open_cluster
        from pipeline.execution import DaskExecutor, load_cached

        session = open_cluster(self.cluster, backend.name)
        manifest["cluster"] = {"description": session.description, **session.details}
        self.reporter.cluster_started(session.description)
        executor = DaskExecutor(session)
        consumers = self._consumers(steps)
        futures: dict[str, Any] = {}
        record_futures: dict[Any, str] = {}
        done: set[str] = set()
        pending = [name for name, _ in steps]
        position = {name: i for i, (name, _) in enumerate(steps, start=1)}
        finished = as_completed(loop=session.client.loop)

        def input_future(name: str) -> Any:
            if name not in futures:              # a cached stage: its output is loaded on a worker
                futures[name] = session.client.submit(load_cached, self.cache.root, cached[name].key, name,
                                                      key=f"cached-{name}-{cached[name].key}", pure=False)
            return futures[name]

        for name, entry in cached.items():
            self._use_cached(name, entry, records[name], position[name], len(steps), run, manifest)
            pending.remove(name)
            done.add(name)

        def submit_ready() -> None:
            for name in list(pending):
                inputs = self.config.stages[name].inputs
                if all(i in done for i in inputs):
                    pending.remove(name)
                    outcome, record = executor.submit(self._task(name, backend, run),
                                                      {i: input_future(i) for i in inputs})
                    futures[name], record_futures[record] = outcome, name
                    finished.add(record)
                    records[name].status, records[name].started = "running", utc_now()
                    self.reporter.stage_started(records[name], position[name], len(steps))

        def progress(stage: str, text: str) -> None:
            if stage in records:
                self.reporter.stage_progress(records[stage]).message(text)

        try:
            with executor.progress_events(progress):
                submit_ready()
                for record_future in finished:
                    name = record_futures[record_future]
                    outcome = _remote_outcome(name, record_future)
                    self._record(records[name], outcome, position[name], len(steps), run, manifest)
                    done.add(name)
                    for parent in self._release(name, consumers):
                        futures.pop(parent, None)        # frees the output on its worker
                    submit_ready()
            wanted = [n for n, _ in steps if n in futures or n in cached] if self.keep_outputs else \
                [n for n, _ in steps if self.config.stages[n].kind == "evaluate"]
            for name in wanted:
                input_future(name)
            gathered = session.client.gather([futures[n] for n in wanted])
            return {name: outcome.output for name, outcome in zip(wanted, gathered)}
        finally:
            session.client.cancel(list(futures.values()))
            session.close()

    # ------------------------------------------------------------------ shared
    def _task(self, name: str, backend: Backend, run: RunDir) -> StageTask:
        folder = [str(Path(self.config_path).resolve().parent)] if self.config_path else []
        key = self.keys.get(name)
        return StageTask(name=name, spec=self.config.stages[name], backend=backend.name, seed=self.config.seed,
                         artifacts_dir=run.stage_dir(name), import_paths=folder,
                         cache_root=self.cache.root if key else None, cache_key=key)

    def _consumers(self, steps: list[tuple[str, bool]]) -> dict[str, int]:
        return {name: sum(name in self.config.stages[s].inputs for s, _ in steps) for name, _ in steps}

    def _release(self, name: str, consumers: dict[str, int]) -> list[str]:
        """Inputs of ``name`` that no remaining stage needs (dropped unless keep_outputs)."""
        freed = []
        for parent in self.config.stages[name].inputs:
            consumers[parent] -= 1
            if consumers[parent] == 0 and not self.keep_outputs:
                freed.append(parent)
        return freed

    def _record(self, record: StageRecord, outcome: StageOutcome, index: int, total: int, run: RunDir,
                manifest: dict[str, Any]) -> None:
        """Copy an outcome into the manifest record, report it, and raise if the stage failed."""
        record.status, record.started = outcome.status, outcome.started or record.started
        record.ended, record.seconds = outcome.ended, outcome.seconds
        record.peak_rss_bytes, record.peak_device_bytes = outcome.peak_rss_bytes, outcome.peak_device_bytes
        record.facts, record.worker = outcome.facts, outcome.worker
        record.error = str(outcome.error) if outcome.error is not None else None
        self.reporter.stage_finished(record, index, total)
        run.write_manifest(manifest)
        if outcome.error is not None:
            if outcome.traceback:
                logging.getLogger("pipeline").debug("stage %s failed:\n%s", record.name, outcome.traceback)
            raise outcome.error

    def _manifest(self, run: RunDir, backend: Backend, choice: DeviceChoice,
                  records: dict[str, StageRecord], selected: set[str]) -> dict[str, Any]:
        config_file = self.config_path
        return {
            "pipeline": self.config.name,
            "run_id": run.run_id,
            "status": "running",
            "started": utc_now(),
            "ended": None,
            "duration_s": None,
            "device": {"name": backend.name, "requested": self.requested_device, "reason": choice.reason},
            "host": host_name(),
            "pid": os.getpid(),
            "command": sys.argv,
            "config_file": config_file,
            "config_sha256": sha256_file(config_file) if config_file and Path(config_file).is_file() else None,
            "selected": sorted(selected),
            "versions": {"pipeline": __version__, "python": platform.python_version(), **backend.versions()},
            "stages": records,
            "metrics": None,
            "artifacts": {},
            "error": None,
        }

    @staticmethod
    def _finish(run: RunDir, manifest: dict[str, Any], status: str, started: float, *, error: str | None = None) -> None:
        manifest["status"] = status
        manifest["ended"] = utc_now()
        manifest["duration_s"] = round(time.perf_counter() - started, 4)
        manifest["error"] = error
        manifest["artifacts"] = run.checksums()
        run.write_manifest(manifest)


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


def run_pipeline(
    config: PipelineConfig | str | os.PathLike[str],
    *,
    overrides: Sequence[str] = (),
    device: str | None = None,
    runs_dir: str | os.PathLike[str] | None = None,
    only: Sequence[str] = (),
    from_: Sequence[str] = (),
    until: Sequence[str] = (),
    reporter: Reporter | None = None,
    keep_outputs: bool = True,
    scheduler: str | None = None,
    cache: bool = True,
    force: bool | Sequence[str] = False,
    wait: float = 600.0,
) -> RunResult:
    """Load (if given a path) and run a pipeline: the library twin of ``pipeline run``."""
    from pipeline.config import load_config

    config_path = None
    if not isinstance(config, PipelineConfig):
        config_path = str(config)
        config = load_config(config, overrides=overrides)
    runner = Runner(config, device=device, runs_dir=runs_dir, reporter=reporter,
                    keep_outputs=keep_outputs, config_path=config_path, scheduler=scheduler,
                    cache=cache, force=force, wait=wait)
    return runner.run(only=only, from_=from_, until=until)


__all__ = ["RunResult", "Runner", "StageRecord", "run_pipeline"]
