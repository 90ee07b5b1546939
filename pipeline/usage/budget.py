"""Budget caps enforced while a run goes: a hook that watches the run's spend on a thread.

``budget: {max_cost, max_gpu_hours, max_wall}`` caps the run, and the same key on a stage caps
that stage. Every ``INTERVAL`` seconds the watch adds up what the run has spent: the finished
stages' recorded cost and GPU-hours, plus each running stage's so far (its wall time on every
GPU this process may use, this process's CPU seconds since it started, its RSS), priced at the
run's rates. When a cap is passed, it notes why and raises ``BudgetExceeded`` in the thread that
runs the stages, at its next Python instruction: a stage inside one long native call (one
XGBoost ``fit``, one cuDF operation) stops when that call returns, and one importing a module
stops when the import is done (a module stopped half-way stays broken for the process: PyTorch's
operator registrations refuse every later ``import torch``). Once the stages are over
(``run_finishing``) the watch can no longer stop anything. The runner records the run as
stopped by the budget with the figures, and it exits 9.

On a Dask cluster the stages run in workers: their CPU seconds are not seen until a stage
finishes, so there the caps that act mid-stage are ``max_wall`` and ``max_gpu_hours``.

Before a run starts (``preflight``, unless ``--ignore-budget-estimate``), a run whose earlier
runs spent more than a cap is refused. The hook is registered with the ``budget:`` section it
owns, first in the hook order: its watch starts as the run does.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import psutil

from pipeline.backends.devices.gpu_usage import visible_gpus
from pipeline.core.errors import BudgetError
from pipeline.core.interrupts import BudgetExceeded, budget_stop, raise_in, request_budget_stop, wait_for_safe_point
from pipeline.hooks.protocol import RunEvent, RunHook, RunInfo, RunPlan, StageEvent
from pipeline.hooks.hook_registry import HookContext, register_hook
from pipeline.runs import history
from pipeline.usage.costs import Budget, Rates, rates_of
from pipeline.usage.memory import cpu_seconds

log = logging.getLogger("pipeline")

INTERVAL = 0.2
# How each cap's values are written in messages (a cost in the rates' currency: added where known).
UNITS = {"max_cost": "", "max_gpu_hours": " GPU-hours", "max_wall": " s"}
# Earlier runs a budget's pre-flight estimate is the median of.
ESTIMATE_RUNS = 5


@dataclass(frozen=True)
class Overrun:
    """Which cap was passed: ``scope`` "run" or a stage's name, the cap, its limit and what was reached."""

    scope: str
    cap: str
    limit: float
    reached: float
    run: Mapping[str, float]        # what the whole run had spent by then, by cap


    def describe(self) -> str:
        where = "the run" if self.scope == "run" else f"stage {self.scope}"
        unit = UNITS[self.cap]
        return (f"stopped by the budget: {where} reached {self.reached:.4g}{unit} against "
                f"{self.cap} {self.limit:.4g}{unit}")

    def to_dict(self) -> dict[str, Any]:
        return {"scope": self.scope, "cap": self.cap, "limit": self.limit, "reached": round(self.reached, 6),
                "run_spent": {cap: round(value, 6) for cap, value in self.run.items()}}


@dataclass
class _Running:
    started: float
    cpu: float


class BudgetHook(RunHook):
    """Watches the run against ``budget`` and each stage against its own (``stages``)."""

    def __init__(self, budget: Budget | None, stages: Mapping[str, Budget], rates: Rates, *,
                 gpus: list[tuple[int, str]] | None = None, interval: float = INTERVAL,
                 estimate: bool = False) -> None:
        """``gpus``: (NVML index, name) of the GPUs the run holds; None: this process's visible
        ones, looked up when the run starts. ``estimate``: refuse, before the run starts, a run
        whose earlier runs passed the run's caps (``refuse_over_budget``)."""
        self.budget = budget
        self.estimate = estimate
        self.stages = {name: b for name, b in stages.items() if b.limits}
        self.rates = rates
        self.gpus = gpus
        self.interval = interval
        self.overrun: Overrun | None = None
        self._process = psutil.Process()
        self._running: dict[str, _Running] = {}
        self._spent = {"max_cost": 0.0, "max_gpu_hours": 0.0}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._firing = threading.Lock()      # a stop is raised, or the run ends: never both at once
        self._target = 0
        self._started = 0.0
        self._thread: threading.Thread | None = None
        self._previous: Any = None

    @property
    def active(self) -> bool:
        return bool((self.budget and self.budget.limits) or self.stages)

    # ------------------------------------------------------------------ the run's events
    def preflight(self, plan: RunPlan) -> None:
        if self.estimate and self.budget is not None:
            refuse_over_budget(self.budget, plan.runs_dir, plan.pipeline, self.rates.currency)

    def run_started(self, run: RunInfo) -> None:
        if self.gpus is None:
            readings = visible_gpus()
            self.gpus = list(readings.devices) if readings is not None else []
        self._target = threading.get_ident()           # the thread that runs the stages
        if self._target == threading.main_thread().ident:
            # A signal wakes the main thread from a blocking call (a sleep, a wait on the
            # cluster) so the exception is raised now, not when the call returns.
            self._previous = signal.signal(signal.SIGUSR1, _wake)
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._watch, name="budget-watch", daemon=True)
        self._thread.start()

    def stage_started(self, event: StageEvent) -> None:
        with self._lock:
            self._running[event.record.name] = _Running(time.monotonic(), cpu_seconds(self._process))

    def stage_finished(self, event: StageEvent) -> None:
        record = event.record
        with self._lock:
            self._running.pop(record.name, None)
            self._spent["max_cost"] += (record.cost or {}).get("total", 0.0)
            gpu_seconds = sum(d.get("seconds") or 0.0 for d in (record.usage or {}).get("gpus", []))
            self._spent["max_gpu_hours"] += gpu_seconds / 3600

    def run_finishing(self, event: RunEvent) -> None:
        """The stages are over: the watch stops. A run the budget stopped records which cap,
        its limit and what was reached."""
        self._disarm()
        if event.status != "succeeded" and budget_stop() is not None:
            event.manifest.budget = self.overrun.to_dict() if self.overrun else None

    def run_finished(self, event: Any) -> None:
        self._disarm()

    def _disarm(self) -> None:
        """No stop after this: the watch ends, and SIGUSR1 gets its handler back only once no
        signal can follow (its default action would kill the process)."""
        with self._firing:
            self._stop.set()
        if self._previous is not None:
            signal.signal(signal.SIGUSR1, self._previous)
            self._previous = None

    # ------------------------------------------------------------------ the watch
    def _watch(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                overrun = self.check()
            except Exception as exc:  # noqa: BLE001 - a reading that failed once: the next one decides
                log.debug("budget: could not read the run's spend (%s: %s)", type(exc).__name__, exc)
                continue
            if overrun is not None:
                self._fire(overrun)
                return

    def _fire(self, overrun: Overrun) -> None:
        """Stop the stages' thread, once it is out of any import or C callback (for a few seconds
        at most: the cap still holds; ``interrupts.wait_for_safe_point``), unless the run ended
        meanwhile."""
        if not wait_for_safe_point(self._target, self._stop):
            return
        with self._firing:
            if self._stop.is_set():
                return
            self.overrun = overrun
            request_budget_stop(overrun.describe())
            raise_in(self._target, BudgetExceeded)
            if self._previous is not None:
                signal.pthread_kill(self._target, signal.SIGUSR1)

    def check(self, now: float | None = None) -> Overrun | None:
        """The first cap passed, if any: each running stage's own, then the run's."""
        now = time.monotonic() if now is None else now
        cpu = cpu_seconds(self._process)
        rss = self._process.memory_info().rss
        with self._lock:
            running = dict(self._running)
            spent = dict(self._spent)
        run_spend = {"max_wall": now - self._started, **spent}
        for name, stage in running.items():
            spend = self._stage_spend(stage, now, cpu, rss)
            run_spend["max_cost"] += spend["max_cost"]
            run_spend["max_gpu_hours"] += spend["max_gpu_hours"]
            found = _over(name, self.stages.get(name), spend)
            if found:
                return replace(found, run=run_spend)
        found = _over("run", self.budget, run_spend)
        return replace(found, run=run_spend) if found else None

    def _stage_spend(self, stage: _Running, now: float, cpu: float, rss: int) -> dict[str, float]:
        wall = now - stage.started
        gpus = self.gpus or []
        gpu = sum(wall / 3600 * self.rates.gpu_rate(name) for _, name in gpus)
        cost = gpu + (cpu - stage.cpu) / 3600 * self.rates.cpu_core_hour \
            + rss / 1e9 * wall / 3600 * self.rates.memory_gb_hour
        return {"max_wall": wall, "max_cost": cost, "max_gpu_hours": wall * len(gpus) / 3600}



def refuse_over_budget(budget: Budget, runs_dir: Path, pipeline: str, currency: str = "") -> None:
    """A ``BudgetError`` before anything starts when earlier runs of the pipeline suggest this
    one will pass a cap: the median of the last ``ESTIMATE_RUNS`` succeeded runs' wall time,
    cost and GPU-hours (no earlier run: no estimate, the run starts)."""
    estimate = history.recent_spend(runs_dir, pipeline, ESTIMATE_RUNS)
    for cap, limit in budget.limits.items():
        value = estimate.get(cap)
        if value is not None and value > limit:
            unit = f" {currency}" if cap == "max_cost" and currency else UNITS[cap]
            raise BudgetError(
                f"not started: the last {estimate['runs']} succeeded run(s) of '{pipeline}' spent a median of "
                f"{value:.4g}{unit}, over the budget's {cap} of {limit:.4g}{unit}. Raise the cap, or start it anyway "
                "with --ignore-budget-estimate (check_budget_estimate=False in run_pipeline; the caps still stop "
                "it while it runs; a run whose stages the cache holds costs less than the runs before it)")


def _over(scope: str, budget: Budget | None, spend: Mapping[str, float]) -> Overrun | None:
    for cap, limit in (budget.limits if budget else {}).items():
        if spend.get(cap, 0.0) > limit:
            return Overrun(scope, cap, limit, spend[cap], {})
    return None


def _wake(signum: int, frame: Any) -> None:
    """SIGUSR1 only interrupts a blocking call; the pending exception does the rest."""


# ---------------------------------------------------------------------------- the registration
def budget_hook(section: Budget | None, context: HookContext) -> BudgetHook | None:
    """On when the run or any stage has a cap (a stage's ``budget:`` is the stage's own key)."""
    stages = {name: spec.budget for name, spec in context.config.stages.items()
              if getattr(spec, "budget", None) is not None}
    rates = rates_of(getattr(context.config, "cost", None))
    hook = BudgetHook(section, stages, rates, estimate=bool(context.options.get("check_budget_estimate", True)))
    capped = [where for where, budget in [("budget", section), *((f"stages.{n}.budget", b) for n, b in stages.items())]
              if budget is not None and budget.max_cost is not None]
    if capped and not rates.priced:
        log.warning("%s: max_cost can never stop this run: no cost rate is set (the config's cost: section or "
                    "PIPELINE_COST_*), so nothing it uses is priced", ", ".join(capped))
    return hook if hook.active else None


# First of the hooks that watch: its clock starts as the run does.
register_hook("budget", budget_hook, config_key="budget", section=Budget, default=False, order=-100,
              description="Caps on the run's cost, GPU-hours and wall time, enforced while it runs (exit 9); "
                          "a stage's own budget: caps that stage.")
