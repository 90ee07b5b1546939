"""What each stage and the run cost, as a hook: the ``cost:`` section's rates price every
stage's usage when it is recorded, a stage that held GPUs it barely used is warned about, and
the run's totals are added up before its record is final (``pipeline.usage.costs``).
"""

from __future__ import annotations

import logging
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from pipeline.hooks.protocol import RunEvent, RunHook, StageEvent
from pipeline.hooks.hook_registry import HookContext, register_hook
from pipeline.usage.costs import IDLE_UTILISATION, Rates, idle_gpus, rates_of, run_totals, stage_cost

log = logging.getLogger("pipeline")

# A rate: a finite number of 0 or more.
Rate = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class CostConfig(BaseModel):
    """Rates a run's usage is priced at (``pipeline.usage.costs``); environment variables override them."""

    model_config = ConfigDict(extra="forbid")

    gpu_hour: Rate | dict[str, Rate] | None = Field(
        None, description="Per GPU-hour: one rate, or rates by a part of the GPU's name "
                          "({H100: 4.0, A10G: 1.2, default: 2.0}); $PIPELINE_COST_GPU_HOUR sets the default.")
    cpu_core_hour: Rate = Field(0.0, description="Per CPU-core-hour (CPU seconds used); "
                                                        "$PIPELINE_COST_CPU_CORE_HOUR.")
    memory_gb_hour: Rate = Field(0.0, description="Per GB-hour of peak host memory; "
                                                         "$PIPELINE_COST_MEMORY_GB_HOUR.")
    currency: str = Field("USD", min_length=1, max_length=12, description="Shown with the costs; "
                                                                           "$PIPELINE_COST_CURRENCY.")


class CostHook(RunHook):
    """Prices each recorded stage (``record.cost``), warns about idle GPUs (``usage.idle_gpus``)
    and sets the run's ``usage`` and ``cost`` totals.

    Critical: these are fields of the run record, and a record that cannot be filled is not
    written half-filled as if it were complete.
    """

    critical = True

    def __init__(self, rates: Rates) -> None:
        self.rates = rates

    def stage_recorded(self, event: StageEvent) -> None:
        record = event.record
        record.cost = stage_cost(record.usage, record.seconds, record.peak_rss_bytes, self.rates)
        idle = idle_gpus(record.usage, record.seconds) if event.run.device == "gpu" else []
        if idle and record.usage is not None:
            record.usage["idle_gpus"] = [device["index"] for device in idle]
            log.warning("stage %s held GPU %s for %.1f s at under %g%% utilisation (%s): paid for, barely used",
                        record.name, ", ".join(str(d["index"]) for d in idle), record.seconds or 0.0,
                        IDLE_UTILISATION, ", ".join(f"{d['utilisation_mean']:.0f}%" for d in idle))

    def run_finishing(self, event: RunEvent) -> None:
        manifest = event.manifest
        manifest.usage, manifest.cost = run_totals(((r.usage, r.cost) for r in manifest.stages.values()),
                                                   self.rates.currency)


def cost_hook(section: CostConfig, context: HookContext) -> CostHook:
    """Always on: with no rate set, nothing is priced and the usage is still added up."""
    return CostHook(rates_of(section))


# Before the caller's hooks: a stage's cost is in its record when they hear it finished.
register_hook("cost", cost_hook, config_key="cost", section=CostConfig, default=True, order=-50,
              description="Rates that price each stage's and run's usage (none set: no cost is recorded).")
