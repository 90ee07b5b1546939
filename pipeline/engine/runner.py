"""Execute a pipeline: plan the DAG, take what the cache has, run the rest, record the run.

The runner owns the bookkeeping (run folder, run record, cache keys, hooks); stages own the
work; an executor (``pipeline.engine.executors``) decides where a stage runs: in this process or on
a Dask cluster. There is one scheduling loop for both: a stage is submitted once its inputs
are done, and an output is released as soon as no remaining stage needs it, so a run holds
only what is still to be consumed (the raw table is gone once it is split).

Nothing here knows a stage kind: what a stage reads, what it needs, what its output depends
on and what it adds to the run record are declared by its kind (``pipeline.stages.spec``).
Nor a run-level output: the report, tracking, budgets, costs and signatures are hooks
registered with the config sections they own (``pipeline.hooks.hook_registry``), built for each run
around the caller's hooks, and called at the points the hook protocol names (a pre-flight
check, a stage recorded, the run finishing, the run recorded).
"""

from __future__ import annotations

import logging
import os
import platform
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from pipeline.backends import Backend, DeviceChoice, resolve_backend
from pipeline.cache import CacheEntry, StageCache, resolve_max_size, stage_key
from pipeline.config import PipelineConfig, dump_config
from pipeline.config.schema import ClusterConfig, PipelineCore
from pipeline.core.dag import plan, select
from pipeline.core.errors import (
    BudgetError, ConfigError, DataError, PipelineError, StageError, StorageError, UsageError,
)
from pipeline.core.fingerprints import defining_modules, forget_hashed, plugin_digest
from pipeline.core.local_code import use_config_folders
from pipeline.core.host_memory import apply_page_policy
from pipeline.core.interrupts import (
    Terminated, budget_stop, clear_budget_stop, clear_user_interrupt, termination_requested, unraisable_stops_unsaid,
)
from pipeline.core.plugins import environment_plugins
from pipeline.core.settings import check_settings, current_settings
from pipeline.engine.executors import Executor, InProcessExecutor, StageOutcome, StageTask
from pipeline.engine.run_options import RunOptions
from pipeline.hooks.hook_registry import HookContext, build_hooks
from pipeline.hooks.protocol import (
    ArtifactEvent,
    ErrorEvent,
    HookList,
    LineProgress,
    LogProgress,
    MetricEvent,
    RunEvent,
    RunHook,
    RunInfo,
    RunPlan,
    StageEvent,
    StageProgress,
    elapsed,
)
from pipeline.runs.layout import ALIASES, LATEST
from pipeline.runs.locks import RunLock
from pipeline.runs.record import DeviceRecord, RunManifest, StageRecord, check_metrics
from pipeline.runs.store import RunDir, RunStore, as_storage_error, host_name, sha256_file, utc_now
from pipeline.stages import STAGE_KINDS
from pipeline.version import __version__

log = logging.getLogger("pipeline")


class LibraryLogHook(RunHook):
    """The default for library runs: a stage's lines go to the "pipeline" logger, which the
    caller configures (the CLI uses the hooks in ``pipeline.hooks.progress`` instead), so a library
    prints nothing of its own. ``show`` (``run_pipeline(progress=True)``): the run's progress
    is also written to ``stream`` (stderr) as plain lines: each stage starting and ending with
    its time, the bars inside stages (boosting rounds, trials, folds, importances) now and then
    with the elapsed time, and the run's outcome. Plain lines, not a live display: they read
    the same in a notebook, a terminal and a captured log."""

    def __init__(self, *, show: bool = False, stream: TextIO | None = None) -> None:
        self.show = show
        self.stream = stream

    def _line(self, text: str) -> None:
        """``text`` to the stream when shown, else to the "pipeline" logger at INFO (a failed
        stage too: the exception raised to the caller is the error)."""
        if self.show:
            print(text, file=self.stream or sys.stderr, flush=True)
        else:
            logging.getLogger("pipeline").info("%s", text)

    def run_started(self, run: RunInfo) -> None:
        self._line(f"run {run.run_id} on {run.device} ({run.device_reason}); {run.stages} stage(s)")

    def stage_started(self, event: StageEvent) -> None:
        self._line(f"[{event.index}/{event.run.stages}] {event.record.name} ({event.record.kind}) started")

    def stage_finished(self, event: StageEvent) -> None:
        record = event.record
        head = f"[{event.index}/{event.run.stages}] {record.name} ({record.kind})"
        if record.status == "cached":
            self._line(f"{head} unchanged: taken from the cache")
        elif record.status == "failed":
            self._line(f"{head} failed after {elapsed(record.seconds or 0)}: {record.error}")
        else:
            self._line(f"{head} done in {elapsed(record.seconds or 0)}")

    def run_finished(self, event: RunEvent) -> None:
        took = elapsed(event.manifest.duration_s or 0)
        self._line(f"run {event.run.run_id} {event.status} in {took}: {event.run.run_dir}")

    def stage_progress(self, event: StageEvent) -> StageProgress:
        if self.show:
            return LineProgress(self._line, prefix=f"{event.record.name}: ")
        return LogProgress(logging.getLogger("pipeline"), prefix=f"{event.record.name}: ")


@dataclass
class RunResult:
    """What a run gave: its id and folder, its status, its record (``manifest``: metrics, stage
    timings, fingerprints) and the stages' outputs held in memory (``keep_outputs``).

    Examples:
        >>> import tempfile
        >>> from pipeline import run_pipeline
        >>> result = run_pipeline("configs/churn.yaml", until=["raw"], device="cpu", runs_dir=tempfile.mkdtemp())
        >>> result.run_dir.name == result.run_id, result.manifest.status, result.evaluation is None
        (True, 'succeeded', True)
    """

    run_id: str
    run_dir: Path
    status: str
    manifest: RunManifest
    outputs: dict[str, Any]

    @property
    def evaluation(self) -> Any:
        """The first output that is an evaluation (what ``manifest.metrics`` reports), if kept."""
        from pipeline.stages.evaluate import Evaluation

        return next((v for v in self.outputs.values() if isinstance(v, Evaluation)), None)


class Runner:
    """Runs one config once; ``run()`` returns a RunResult or raises a PipelineError.

    Examples:
        >>> import tempfile
        >>> from pipeline import Runner, load_config
        >>> runner = Runner(load_config("configs/churn.yaml"), device="cpu", runs_dir=tempfile.mkdtemp())
        >>> runner.options.device
        'cpu'
        >>> runner.run(until=["raw"]).outputs["raw"].shape
        (7043, 21)
    """

    def __init__(self, config: PipelineConfig, options: RunOptions | None = None, /, *,
                 config_path: str | None = None, **changes: Any) -> None:
        """``options`` (a ``RunOptions``) with ``changes`` (its field names) applied; ``config_path``:
        the file ``config`` was read from, for the record."""
        options = RunOptions.build(options, **changes)
        self.options = options
        self.config = config
        self.use_cache = options.cache
        self.keys: dict[str, str | None] = {}      # stage -> cache key, set per run
        self.force = options.force
        self.wait = options.wait
        # --scheduler ADDRESS: the config's cluster section (if any) pointed at that scheduler.
        self.cluster: ClusterConfig | None = config.cluster
        if options.scheduler:
            base = config.cluster or ClusterConfig()
            self.cluster = base.model_copy(update={"address": options.scheduler})
        self.requested_device = options.device or config.device
        self.store = RunStore(options.runs_dir or config.runs_dir, config.name)
        self.check_budget_estimate = options.check_budget_estimate
        self._worker_usage: dict[str, dict[str, Any]] = {}
        # The PIPELINE_* environment this run is shaped by, taken once and recorded in its manifest;
        # a value its owner refuses stops the run here, whether or not a stage that reads it runs.
        self.settings = current_settings()
        check_settings(self.settings)
        hooks: tuple[RunHook, ...] = options.hooks if options.hooks is not None else (LibraryLogHook(),)
        if options.progress:
            hooks = (*(options.hooks or ()), LibraryLogHook(show=True))
        # The caller's hooks, and around them every registered hook its config section turns on
        # (the budget watch first, the report and MLflow last): pipeline.hooks.hook_registry.
        context = HookContext(config, config.name, self.store.layout.runs_dir, hooks,
                              {"check_budget_estimate": options.check_budget_estimate})
        self.hooks = HookList(build_hooks(context))
        self.keep_outputs = options.keep_outputs
        self.config_path = config_path
        self.cache = StageCache(self.store.layout.cache_dir)
        # Host memory is the process's (core.host_memory): a bad value stops the run before any stage.
        apply_page_policy(self.settings)
        # Bytes the cache may keep after a run (None: no limit): the option (--cache-max-size),
        # else $PIPELINE_CACHE_MAX_SIZE, else the config's cache.max_size.
        self.cache_limit = resolve_max_size(config.cache.max_size, options.cache_max_size, self.settings)

    def run(self, *, only: Sequence[str] | None = None, from_: Sequence[str] | None = None,
            until: Sequence[str] | None = None) -> RunResult:
        """Run the stages the options select (``only``/``from_``/``until`` given here replace theirs)."""
        from pipeline.backends.clusters.main_guard import refuse_run_in_worker_bootstrap

        refuse_run_in_worker_bootstrap()        # a worker re-importing an unguarded script: fail now, not at the lock
        only = self.options.only if only is None else only
        from_ = self.options.from_ if from_ is None else from_
        until = self.options.until if until is None else until
        graph = self.config.inputs_of()
        try:
            selected = select(graph, only=only, from_=from_, until=until)
        except KeyError as exc:
            raise ConfigError(f"--only/--from/--until (only/from_/until in run_pipeline) name unknown stage(s) "
                              f"{exc.args[0]} (stages: {', '.join(graph)})") from None
        if not selected:
            raise ConfigError("the stage selection (--only/--from/--until) is empty")
        steps = plan(graph, selected)
        forced = self._forced(graph, steps)
        if self.config_path:                    # its modules, not another config's of the same name
            use_config_folders([Path(self.config_path).resolve().parent])
        # Hooks' checks before any work (a signing key set but unusable, a budget earlier runs passed).
        self.hooks.preflight(RunPlan(self.config.name, self.store.layout.runs_dir, tuple(name for name, _ in steps),
                                     frozenset(selected), self.config))
        backend, choice = resolve_backend(self.requested_device)
        try:
            lock = RunLock(self.store.layout.lock_path, wait=self.wait)
            lock.__enter__()
        except OSError as exc:
            raise StorageError(f"cannot create the run lock in {self.store.pipeline_dir}: {exc.strerror or exc}") from exc
        try:
            with unraisable_stops_unsaid():
                result = self._run_locked(lock, steps, selected, forced, backend, choice)
        except PipelineError:
            self._trim_cache()            # a failed run may have stored the stages that succeeded
            raise
        else:
            self._trim_cache()
            return result
        finally:
            lock.__exit__()

    def _trim_cache(self) -> None:
        """Keep the cache within its limit (under the lock); the entries this run wrote or used stay."""
        if self.use_cache:
            self.cache.trim(self.cache_limit, keep={key for key in self.keys.values() if key})

    def _run_locked(self, lock: RunLock, steps: list[tuple[str, bool]], selected: set[str], forced: set[str],
                    backend: Backend, choice: DeviceChoice) -> RunResult:
        clear_budget_stop()
        clear_user_interrupt()
        whole = selected == set(self.config.stages) and self.options.mark_latest
        if whole:
            # A run of every stage moves 'latest': with something that is not a link in its place
            # the run would succeed and not be marked, so it does not start (exit 3).
            try:
                self.store.check_alias(LATEST)
            except DataError as exc:
                raise DataError(f"run not started: it would move 'latest', and {exc}") from None
        run, manifest = self._open_run(lock, backend, choice, steps, selected)
        info = RunInfo(run.run_id, run.path, self.config.name, backend.name, choice.reason, len(steps), self.config)
        started = time.perf_counter()
        # From here on the run ends with a final status and, unless it succeeded, why: whatever
        # is raised (a stage, the cache, the cluster, a hook, a full disk, a signal, a bug).
        try:
            self.hooks.run_started(info)
            cached = self._cached_entries(steps, manifest, backend, forced)
            outputs = self._execute(steps, cached, backend, run, manifest, info)
            self._finish(run, manifest, info, "succeeded", started)
        except BaseException as exc:
            error = self._end_unsuccessfully(run, manifest, info, started, exc)
            # What the run left, for a caller that says where to look (the CLI's last line).
            error.run_result = RunResult(run.run_id, run.path, manifest.status, manifest, {})  # type: ignore[union-attr]
            if error is exc:
                raise
            raise error from exc
        if whole:
            try:
                self.store.mark_latest(run)
            except (StorageError, DataError) as exc:
                kind = StorageError if isinstance(exc, StorageError) else DataError
                raise kind(f"run {run.run_id} succeeded, but {exc}; 'latest' still points to the "
                           "run before it, and no other alias was moved") from exc
        else:
            # A run of some stages (--only/--from/--until), or one told not to (a sample's), is a
            # look: 'latest', which nightly scoring and serving name, stays at the last run of it all.
            log.debug("run %s ran %d of %d stages: 'latest' stays where it was", run.run_id, len(selected),
                      len(self.config.stages))
        self._mark_aliases(run, manifest)
        return RunResult(run.run_id, run.path, "succeeded", manifest, outputs)

    def _mark_aliases(self, run: RunDir, manifest: RunManifest) -> None:
        """Point every alias a stage's facts list under ``aliases`` at this run, now that it has
        succeeded (a gate decides during the run; a later stage may still fail it). Only the
        pipeline's own aliases other than ``latest`` are moved; any other name is a warning."""
        wanted: list[str] = []
        for record in manifest.stages.values():
            names = record.facts.get("aliases") if isinstance(record.facts, dict) else None
            for name in names if isinstance(names, list) else ([] if names is None else [names]):
                if isinstance(name, str) and name in ALIASES and name != LATEST:
                    if name not in wanted:
                        wanted.append(name)
                else:
                    log.warning("stage %s asked to point alias %r at run %s; ignored (aliases a stage may move: %s)",
                                record.name, name, run.run_id, ", ".join(a for a in ALIASES if a != LATEST))
        for name in wanted:
            try:
                self.store.mark_alias(run, name)
            except (StorageError, DataError) as exc:
                kind = StorageError if isinstance(exc, StorageError) else DataError
                raise kind(f"run {run.run_id} succeeded, but {exc}; '{name}' still points to the "
                           "run before it") from exc
            log.info("%s now points to run %s", name, run.run_id)

    def _open_run(self, lock: RunLock, backend: Backend, choice: DeviceChoice, steps: list[tuple[str, bool]],
                  selected: set[str]) -> tuple[RunDir, RunManifest]:
        """The run folder with its config and first record. If that record cannot be written
        (a full disk) the folder goes again: a run that never recorded its start has nothing
        to keep, and a folder without a manifest would be left for someone to clean up."""
        run = self.store.new_run()
        try:
            lock.note(run_id=run.run_id)
            run.write_config(dump_config(self.config))
            manifest = self._manifest(run, backend, choice, steps, selected)
            run.write_manifest(manifest)
        except BaseException:
            shutil.rmtree(run.path, ignore_errors=True)
            raise
        return run, manifest

    # ------------------------------------------------------------------ how a run ends
    def _end_unsuccessfully(self, run: RunDir, manifest: RunManifest, info: RunInfo, started: float,
                            exc: BaseException) -> BaseException:
        """Record a run that did not succeed (status, why, the stages it stopped); return what to raise.

        When even that record cannot be written, the manifest keeps saying "running" with this
        process's pid and host, which ``pipeline runs list`` shows as abandoned once this
        process has gone or has let go of the run lock; the error raised then says so.
        """
        status, why, raised = _ending(exc)
        if isinstance(raised, PipelineError):
            self.hooks.error(ErrorEvent(info, raised, getattr(raised, "stage", None)))
        _stop_unfinished_stages(manifest, status, why)
        try:
            self._finish(run, manifest, info, status, started, error=why)
        except Exception as write_error:  # noqa: BLE001 - the record failing must not hide why the run ended
            return _unrecorded(raised, write_error, run, manifest)
        return raised

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

    def _cached_entries(self, steps: list[tuple[str, bool]], manifest: RunManifest, backend: Backend,
                        forced: set[str]) -> dict[str, CacheEntry]:
        """Key every stage; return the verified cache entries of those that need not run."""
        versions = backend.versions()
        forget_hashed()                                   # a load checks its files against this run's keys only
        backend_code = defining_modules(backend)          # the backend's class: code every stage runs
        self.keys.clear()
        found: dict[str, CacheEntry] = {}
        for name, _ in steps:
            spec = self.config.stages[name]
            key = None
            if self.use_cache:
                kind = STAGE_KINDS[spec.kind]
                key = stage_key(spec, {i: self.keys.get(i) for i in spec.inputs},
                                fingerprint=kind.declared(spec, name), code=kind.code_modules(spec) | backend_code,
                                backend=backend.name, versions=versions, seed=self.config.seed)
            self.keys[name] = manifest.stages[name].cache_key = key
            if key is not None and name not in forced:
                entry = self.cache.lookup(key, stage=name)
                if entry is not None:
                    found[name] = entry
        return found

    # ------------------------------------------------------------------ the one loop
    def _execute(self, steps: list[tuple[str, bool]], cached: dict[str, CacheEntry], backend: Backend,
                 run: RunDir, manifest: RunManifest, info: RunInfo) -> dict[str, Any]:
        """Submit each stage once its inputs are done; record each as it finishes."""
        position = {name: i for i, (name, _) in enumerate(steps, start=1)}
        events: dict[str, StageEvent] = {}

        def event(name: str) -> StageEvent:
            return StageEvent(info, manifest.stages[name], self.config.stages[name], position[name],
                              run.stage_dir(name))

        def started(name: str) -> None:
            record = manifest.stages[name]
            record.status, record.started = "running", utc_now()
            events[name] = event(name)
            self.hooks.stage_started(events[name])

        progress: dict[str, StageProgress] = {}

        def progress_of(name: str) -> StageProgress:
            if name not in progress:
                progress[name] = self.hooks.stage_progress(events.get(name) or event(name))
            return progress[name]

        executor = self._executor(backend, manifest, info, started, progress_of)
        try:
            consumers = {name: sum(name in self.config.stages[s].inputs for s, _ in steps) for name, _ in steps}
            done: set[str] = set()
            for name, entry in cached.items():
                self._use_cached(name, entry, run, manifest, event(name))
                executor.add_cached(name, entry)
                done.add(name)
                self._release(name, consumers, executor)
            pending = [name for name, _ in steps if name not in done]
            running = 0
            while pending or running:
                for name in [n for n in pending if all(i in done for i in self.config.stages[n].inputs)]:
                    pending.remove(name)
                    executor.submit(self._task(name, backend, run))
                    running += 1
                try:
                    outcome = executor.next_finished()
                except KeyboardInterrupt as stop:    # the budget, SIGTERM or SIGINT stopped a stage
                    self._record_stopped(getattr(stop, "outcome", None), events)
                    raise
                running -= 1
                self._record(outcome, run, manifest, events.get(outcome.name) or event(outcome.name))
                done.add(outcome.name)
                self._release(outcome.name, consumers, executor)
            return executor.outputs([name for name, _ in steps]) if self.keep_outputs else {}
        finally:
            executor.close()
            self._worker_usage = executor.worker_usage

    def _executor(self, backend: Backend, manifest: RunManifest, info: RunInfo, started: Any,
                  progress_of: Any) -> Executor:
        if self.cluster is None:
            return InProcessExecutor(started, progress_of)
        from pipeline.backends.clusters.startup import open_cluster
        from pipeline.engine.executors import DaskExecutor

        session = open_cluster(self.cluster, backend.name)
        manifest.cluster = {"description": session.description, **session.details}
        self.hooks.cluster_started(info, session.description)
        return DaskExecutor(session, started, progress_of)

    def _release(self, name: str, consumers: dict[str, int], executor: Executor) -> None:
        """Drop the inputs of ``name`` that no remaining stage needs (unless keep_outputs)."""
        for parent in self.config.stages[name].inputs:
            consumers[parent] -= 1
            if consumers[parent] == 0 and not self.keep_outputs:
                executor.release(parent)

    def _task(self, name: str, backend: Backend, run: RunDir) -> StageTask:
        folder = [str(Path(self.config_path).resolve().parent)] if self.config_path else []
        key = self.keys.get(name)
        spec = self.config.stages[name]
        return StageTask(name=name, spec=spec, backend=backend, seed=self.config.seed,
                         artifacts_dir=run.stage_dir(name), inputs=list(spec.inputs), import_paths=folder,
                         cache_root=self.cache.root if key else None, cache_key=key)

    # ------------------------------------------------------------------ the run record
    def _use_cached(self, name: str, entry: CacheEntry, run: RunDir, manifest: RunManifest,
                    event: StageEvent) -> None:
        """Record a stage as taken from the cache and restore its artifacts into this run."""
        entry.restore_artifacts(run.stage_dir(name))
        record = manifest.stages[name]
        record.status, record.started = "cached", utc_now()
        record.ended, record.seconds, record.facts = record.started, 0.0, dict(entry.record.get("facts", {}))
        computed = entry.record.get("seconds")
        record.computed_seconds = computed if isinstance(computed, (int, float)) and computed >= 0 else None
        self.hooks.stage_recorded(event)
        self._add_to_record(manifest, event, dict(entry.record.get("run_record") or {}))
        self.hooks.stage_finished(event)
        run.write_manifest(manifest)

    def _record(self, outcome: StageOutcome, run: RunDir, manifest: RunManifest, event: StageEvent) -> None:
        """Copy an outcome into the run record, tell the hooks, and raise if the stage failed."""
        record = event.record
        record.status, record.started = outcome.status, outcome.started or record.started
        record.ended, record.seconds = outcome.ended, outcome.seconds
        record.peak_rss_bytes, record.peak_device_bytes = outcome.peak_rss_bytes, outcome.peak_device_bytes
        record.peak_device_source = outcome.peak_device_source
        record.usage = outcome.usage
        record.facts, record.worker = outcome.facts, outcome.worker
        record.error = str(outcome.error) if outcome.error is not None else None
        self.hooks.stage_recorded(event)          # what hooks derive from it (its cost), before stage_finished
        if outcome.error is None:
            self._add_to_record(manifest, event, outcome.run_record)
        self.hooks.stage_finished(event)
        if outcome.error is None:
            run.write_manifest(manifest)
            return
        if outcome.traceback:
            log.debug("stage %s failed:\n%s", record.name, outcome.traceback)
        try:
            run.write_manifest(manifest)
        except StorageError as exc:      # the stage's failure is why the run ends; its end writes again
            log.debug("could not record the failure of stage %s: %s", record.name, exc)
        raise outcome.error

    def _record_stopped(self, outcome: StageOutcome | None, events: dict[str, StageEvent]) -> None:
        """What a stopped stage used until it stopped (times, peaks, usage, facts) and, from the
        hooks, its cost, as a failed stage's; its status and why are set as the run ends."""
        event = events.get(outcome.name) if outcome is not None else None
        if event is None:                       # on a cluster the stage's worker has not said
            return
        record = event.record
        record.started = outcome.started or record.started
        record.ended, record.seconds = outcome.ended, outcome.seconds
        record.peak_rss_bytes, record.peak_device_bytes = outcome.peak_rss_bytes, outcome.peak_device_bytes
        record.peak_device_source = outcome.peak_device_source
        record.usage = outcome.usage
        record.facts, record.worker = outcome.facts, outcome.worker
        try:
            self.hooks.stage_recorded(event)    # its cost
        except Exception as exc:  # noqa: BLE001 - the stop stays why the run ends
            log.warning("stage %s: what it used until it stopped could not be priced: %s: %s",
                        record.name, type(exc).__name__, exc)

    def _add_to_record(self, manifest: RunManifest, event: StageEvent, fields: dict[str, Any]) -> None:
        """The run-record fields a stage set; the first stage (in plan order) to set one keeps it."""
        for key, value in fields.items():
            if getattr(manifest, key, None) in (None, {}, []):
                setattr(manifest, key, value)
        metrics = fields.get("metrics")
        try:
            if metrics is not None and not isinstance(metrics, dict):
                raise ValueError(f"metrics must be a mapping, not {type(metrics).__name__}")
            check_metrics(metrics)
        except ValueError as exc:        # recorded, it would make the run record unreadable
            record = event.record
            record.status, record.error = "failed", f"the metrics it reported cannot be recorded: {exc}"
            if manifest.metrics is metrics:
                manifest.metrics = None
            raise StageError(record.name, record.error) from None
        models = (fields.get("metrics") or {}).get("models") if isinstance(fields.get("metrics"), dict) else None
        for model, values in (models or {}).items():
            numbers = {k: v for k, v in (values or {}).items() if isinstance(v, (int, float))}
            self.hooks.metric(MetricEvent(event.run, event.record.name, numbers, model=model))

    def _manifest(self, run: RunDir, backend: Backend, choice: DeviceChoice, steps: list[tuple[str, bool]],
                  selected: set[str]) -> RunManifest:
        config_file = self.config_path
        return RunManifest(
            pipeline=self.config.name, run_id=run.run_id, status="running", started=utc_now(),
            device=DeviceRecord(name=backend.name, requested=self.requested_device, reason=choice.reason),
            host=host_name(), pid=os.getpid(), command=list(sys.argv), config_file=config_file,
            config_sha256=sha256_file(config_file) if config_file and Path(config_file).is_file() else None,
            selected=sorted(selected), settings=self.settings.record(),
            versions={"pipeline": __version__, "python": platform.python_version(), **backend.versions()},
            plugins={module: plugin_digest(module) for module in self._plugin_modules()},
            stages={name: StageRecord(name=name, kind=self.config.stages[name].kind, selected=chosen)
                    for name, chosen in steps},
        )

    def _plugin_modules(self) -> list[str]:
        """The plugin modules this run named: its config's ``plugins:`` and ``$PIPELINE_PLUGINS``."""
        return list(dict.fromkeys([*map(str, getattr(self.config, "plugins", None) or []), *environment_plugins()]))

    def _finish(self, run: RunDir, manifest: RunManifest, info: RunInfo, status: str, started: float, *,
                error: str | None = None) -> None:
        manifest.status = status
        manifest.ended = utc_now()
        manifest.duration_s = round(time.perf_counter() - started, 4)
        manifest.error = error
        event = RunEvent(info, status, manifest)
        self.hooks.run_finishing(event)         # what hooks add to the record (run totals, a budget's stop)
        if self._worker_usage:                  # on a cluster: every worker's, over the whole run
            manifest.usage = {**(manifest.usage or {}), "workers": self._worker_usage}
        manifest.artifacts = self._checksums(run, manifest, required=status == "succeeded")
        run.write_manifest(manifest)
        self.hooks.run_recorded(event)          # the final record is written (signed, with a key set)
        for path, digest in manifest.artifacts.items():
            self.hooks.artifact(ArtifactEvent(info, Path(path).parts[0], path, digest))
        self.hooks.run_finished(event)

    @staticmethod
    def _checksums(run: RunDir, manifest: RunManifest, *, required: bool) -> dict[str, str]:
        """The artifacts' sha256; a run that did not succeed is recorded even if they cannot be read.
        What a stage that failed or was stopped left in its folder stays there, for a look, but
        is no artifact: half-written, it must not be read (the report, MLflow) as the stage's."""
        try:
            found = run.checksums()
        except StorageError as exc:
            if required:
                raise
            log.warning("%s", exc)
            return {}
        unfinished = {name for name, record in manifest.stages.items() if record.status in ("failed", "interrupted")}
        return {path: digest for path, digest in found.items() if Path(path).parts[0] not in unfinished}


def _ending(exc: BaseException) -> tuple[str, str, BaseException]:
    """``(status, why, exception to raise)`` for what ended a run early."""
    stopped = budget_stop()
    if stopped is not None:
        return "interrupted", stopped, BudgetError(stopped)
    if isinstance(exc, Terminated) or (isinstance(exc, KeyboardInterrupt) and termination_requested()):
        # CatBoost raises a KeyboardInterrupt of its own for any signal it sees: the note says which.
        return "interrupted", "terminated (SIGTERM)", exc if isinstance(exc, Terminated) else Terminated()
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted", "interrupted by the user (SIGINT)", exc
    if isinstance(exc, PipelineError):
        return "failed", str(exc), exc
    storage = as_storage_error(exc)
    if storage is not None:
        return "failed", str(storage), storage
    if isinstance(exc, SystemExit):
        return "failed", f"a stage or hook ended the process (SystemExit: {exc.code})", exc
    if isinstance(exc, Exception):
        return "failed", f"internal error: {type(exc).__name__}: {exc}", exc
    return "failed", f"{type(exc).__name__}: {exc}", exc


def _stop_unfinished_stages(manifest: RunManifest, status: str, why: str) -> None:
    """Stages still going when the run ended are recorded as interrupted, never left "running"."""
    now = utc_now()
    for record in manifest.stages.values():
        if record.status == "running":
            record.status, record.ended = "interrupted", record.ended or now
            record.error = record.error or f"the run ended ({status}) before this stage finished: {why}"


def _unrecorded(raised: BaseException, write_error: BaseException, run: RunDir,
                manifest: RunManifest) -> BaseException:
    """What to raise when the end of a run could not be recorded: a StorageError (exit 6) that
    says why the run ended, that its record still says "running", and how it will be shown."""
    problem = str(write_error)
    ended = str(raised) or type(raised).__name__
    same = problem == ended
    record = "so the run record cannot be finished" if same else \
        f"the run record {run.layout.manifest} could not be finished ({problem})"
    note = (f"{record} and still says 'running': `pipeline runs list` shows the run as abandoned "
            f"(pid {manifest.pid} on {manifest.host})")
    if isinstance(raised, (KeyboardInterrupt, SystemExit)):
        log.error("%s", note)            # the signal (or the exit) stays what ends the process
        return raised
    error = StorageError(f"{ended}; {note}" if same else f"{ended}; and {note}")
    stage = getattr(raised, "stage", None)
    if stage is not None:
        error.stage = stage  # type: ignore[attr-defined]
    return error


def run_pipeline(config: PipelineConfig | str | os.PathLike[str], options: RunOptions | None = None, /,
                 **changes: Any) -> RunResult:
    """Load (if given a path) and run a pipeline: the library twin of ``pipeline run``.

    ``options``: a ``RunOptions``; ``changes``: any of its fields by name, applied over it
    (``run_pipeline(path, device="gpu", until=["features"])``). ``overrides`` apply when
    ``config`` is a path (with a loaded config they are a ``UsageError``, not ignored).

    ``progress``: False (the default) prints nothing: a library should not write to the
    caller's terminal; lines go to the "pipeline" logger, for the caller's logging to show.
    True writes the run's progress to stderr as plain lines (``LibraryLogHook(show=True)``):
    stages, the bars inside them with elapsed times, and the outcome. ``hooks`` given: those
    hooks show what they show, and ``progress=True`` adds the lines to them.

    Examples:
        >>> import tempfile
        >>> from pipeline import run_pipeline
        >>> result = run_pipeline("configs/churn.yaml", until=["split"], device="cpu", runs_dir=tempfile.mkdtemp())
        >>> result.status, sorted(result.outputs)
        ('succeeded', ['raw', 'split'])
        >>> {split: len(rows) for split, rows in result.outputs["split"].frames.items()}
        {'train': 4929, 'valid': 705, 'test': 1409}
        >>> "PIPELINE_THREADS" in result.manifest.settings   # the PIPELINE_* variables that were set
        False
    """
    from pipeline.config import load_config

    options = RunOptions.build(options, **changes)
    config_path = None
    if not isinstance(config, PipelineCore):      # every config model's base (a plugin's sections too)
        config_path = str(config)
        config = load_config(config, overrides=options.overrides)
    elif options.overrides:
        raise UsageError(f"overrides {list(options.overrides)} apply to a config file path, and a loaded config was "
                         "given: they would be ignored. Pass the path, or load it with them: "
                         "load_config(path, overrides=[...])")
    return Runner(config, options, config_path=config_path).run()


__all__ = ["LibraryLogHook", "RunOptions", "RunResult", "Runner", "StageRecord", "run_pipeline"]
