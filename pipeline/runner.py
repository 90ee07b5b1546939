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
from pipeline.errors import ConfigError, PipelineError, StageError
from pipeline.memory import MemorySampler
from pipeline.stages import STAGE_KINDS, StageContext
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


class Reporter(Protocol):
    """Progress callbacks; the CLI renders them on a TTY or as log lines."""

    def run_started(self, run_id: str, device: DeviceChoice, total: int) -> None: ...
    def stage_started(self, record: StageRecord, index: int, total: int) -> None: ...
    def stage_finished(self, record: StageRecord, index: int, total: int) -> None: ...
    def stage_progress(self, record: StageRecord) -> StageProgress: ...


class SilentReporter:
    def run_started(self, run_id: str, device: DeviceChoice, total: int) -> None: ...
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
    ) -> None:
        self.config = config
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
        backend, choice = resolve_backend(self.requested_device)
        run = self.store.new_run()
        run.write_config(dump_config(self.config))
        records = {name: StageRecord(name, self.config.stages[name].kind, chosen) for name, chosen in steps}
        manifest = self._manifest(run, backend, choice, records, selected)
        run.write_manifest(manifest)
        self.reporter.run_started(run.run_id, choice, len(steps))

        consumers = {name: sum(name in self.config.stages[s].inputs for s, _ in steps) for name, _ in steps}
        outputs: dict[str, Any] = {}
        started = time.perf_counter()
        try:
            for index, (name, _) in enumerate(steps, start=1):
                outputs[name] = self._run_stage(name, records[name], backend, run, outputs, index, len(steps))
                run.write_manifest(manifest)
                for parent in self.config.stages[name].inputs:
                    consumers[parent] -= 1
                    if consumers[parent] == 0 and not self.keep_outputs:
                        outputs.pop(parent, None)
        except KeyboardInterrupt:
            self._finish(run, manifest, "interrupted", started, error="interrupted by the user (SIGINT)")
            raise
        except PipelineError as exc:
            self._finish(run, manifest, "failed", started, error=str(exc))
            raise
        evaluation = next((v for v in outputs.values() if isinstance(v, Evaluation)), None)
        if evaluation is not None:
            manifest["metrics"] = evaluation.to_dict()
        self._finish(run, manifest, "succeeded", started)
        self.store.mark_latest(run)
        return RunResult(run.run_id, run.path, "succeeded", manifest, outputs)

    # ------------------------------------------------------------------
    def _run_stage(self, name: str, record: StageRecord, backend: Backend, run: RunDir,
                   outputs: dict[str, Any], index: int, total: int) -> Any:
        spec = self.config.stages[name]
        kind = STAGE_KINDS[spec.kind]
        ctx = StageContext(backend=backend, seed=self.config.seed, stage=name, artifacts_dir=run.stage_dir(name),
                           progress=self.reporter.stage_progress(record))
        record.status, record.started = "running", utc_now()
        self.reporter.stage_started(record, index, total)
        t0 = time.perf_counter()
        sampler = MemorySampler(backend.device_memory_used)
        try:
            with sampler:
                result = kind.run(spec, ctx, {i: outputs[i] for i in spec.inputs})
        except PipelineError as exc:
            self._stage_failed(record, t0, sampler, str(exc))
            self.reporter.stage_finished(record, index, total)
            exc.stage = name  # type: ignore[attr-defined]
            raise
        except Exception as exc:  # noqa: BLE001 - any failure inside a stage is a stage failure
            message = f"{type(exc).__name__}: {exc}"
            self._stage_failed(record, t0, sampler, message)
            self.reporter.stage_finished(record, index, total)
            raise StageError(name, message) from exc
        record.status, record.ended = "succeeded", utc_now()
        record.seconds = round(time.perf_counter() - t0, 4)
        record.peak_rss_bytes, record.peak_device_bytes = sampler.peak_rss, sampler.peak_device
        record.facts = ctx.facts
        self.reporter.stage_finished(record, index, total)
        return result

    @staticmethod
    def _stage_failed(record: StageRecord, t0: float, sampler: MemorySampler, message: str) -> None:
        record.status, record.ended, record.error = "failed", utc_now(), message
        record.seconds = round(time.perf_counter() - t0, 4)
        record.peak_rss_bytes, record.peak_device_bytes = sampler.peak_rss, sampler.peak_device

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
) -> RunResult:
    """Load (if given a path) and run a pipeline: the library twin of ``pipeline run``."""
    from pipeline.config import load_config

    config_path = None
    if not isinstance(config, PipelineConfig):
        config_path = str(config)
        config = load_config(config, overrides=overrides)
    runner = Runner(config, device=device, runs_dir=runs_dir, reporter=reporter,
                    keep_outputs=keep_outputs, config_path=config_path)
    return runner.run(only=only, from_=from_, until=until)


__all__ = ["RunResult", "Runner", "StageRecord", "run_pipeline"]
