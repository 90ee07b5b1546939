"""What a run cost: its stages' usage priced at the rates of the config's ``cost:`` section.

A stage's cost is the sum of:

- GPU: each device's seconds × the hourly rate of its model (``gpu_hour``: a rate for every
  GPU, or rates by a part of the GPU's name, ``default`` for the rest; the first name that
  the GPU's name contains wins, longest first, so ``H100 80GB`` beats ``H100``);
- CPU: CPU seconds × ``cpu_core_hour`` (a core busy for an hour);
- memory: peak RSS in GB × wall hours × ``memory_gb_hour``.

The run's cost is its stages' summed: time between stages is not priced. Rates can come from the
environment (``PIPELINE_COST_GPU_HOUR``, ``PIPELINE_COST_CPU_CORE_HOUR``,
``PIPELINE_COST_MEMORY_GB_HOUR``, ``PIPELINE_COST_CURRENCY``), which overrides the config: a
scheduler knows what its machines cost, a config should not have to.

A stage that held GPUs at under ``IDLE_UTILISATION`` percent on average for at least
``IDLE_MIN_SECONDS`` is marked ``idle_gpu``: paid for, barely used, the most common waste.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from pipeline.core.errors import ConfigError, ConfigIssue
from pipeline.core.settings import Settings, current_settings, register_check
from pipeline.core.sizes import parse_duration

IDLE_UTILISATION = 10.0
IDLE_MIN_SECONDS = 1.0
# Each rate of the cost section and the setting that overrides it.
RATE_SETTINGS = {"gpu_hour": "cost_gpu_hour", "cpu_core_hour": "cost_cpu_core_hour",
                 "memory_gb_hour": "cost_memory_gb_hour"}
ENV_RATES = {rate: Settings.variable(setting) for rate, setting in RATE_SETTINGS.items()}
ENV_CURRENCY = Settings.variable("cost_currency")


@dataclass(frozen=True)
class Rates:
    """Prices per hour; zero where not set (that part costs nothing)."""

    gpu_hour: Mapping[str, float] = field(default_factory=dict)     # part of a GPU name (or "default") -> rate
    cpu_core_hour: float = 0.0
    memory_gb_hour: float = 0.0
    currency: str = "USD"

    @property
    def priced(self) -> bool:
        return bool(self.gpu_hour) or self.cpu_core_hour > 0 or self.memory_gb_hour > 0

    def gpu_rate(self, name: str) -> float:
        """The hourly rate of a GPU called ``name``: the longest configured name it contains,
        else ``default``, else 0."""
        for part in sorted((k for k in self.gpu_hour if k != "default"), key=len, reverse=True):
            if part.lower() in name.lower():
                return self.gpu_hour[part]
        return self.gpu_hour.get("default", 0.0)


def rates_from(config: Mapping[str, Any] | None, settings: Settings | None = None) -> Rates:
    """The rates of a config's ``cost:`` section (None: none), each overridden by its
    environment variable when that is set; a ``ValueError`` naming the variable when it is not
    a number of 0 or more."""
    settings = current_settings() if settings is None else settings
    config = dict(config or {})
    gpu = config.get("gpu_hour")
    gpu_hour = dict(gpu) if isinstance(gpu, Mapping) else ({"default": float(gpu)} if gpu is not None else {})
    values: dict[str, Any] = {"cpu_core_hour": float(config.get("cpu_core_hour") or 0.0),
                              "memory_gb_hour": float(config.get("memory_gb_hour") or 0.0)}
    for key, variable in ENV_RATES.items():
        text = getattr(settings, RATE_SETTINGS[key])
        if text is None or not text.strip():
            continue
        try:
            value = float(text)
        except ValueError:
            value = -1.0
        if not value >= 0 or value == float("inf"):
            raise ValueError(f"{variable} must be a number of 0 or more, not {text!r}")
        if key == "gpu_hour":
            gpu_hour["default"] = value
        else:
            values[key] = value
    currency = settings.cost_currency or config.get("currency") or "USD"
    return Rates(gpu_hour=gpu_hour, currency=str(currency), **values)


register_check(*RATE_SETTINGS.values(), check=lambda settings: rates_from(None, settings))


def rates_of(section: Any) -> Rates:
    """The rates of a config's ``cost:`` section (its model, a mapping, or None: none) with the
    environment's overrides; a ``ConfigError`` at ``cost`` when a variable is not a rate."""
    values = section.model_dump() if hasattr(section, "model_dump") else section
    try:
        return rates_from(values)
    except ValueError as exc:
        raise ConfigError([ConfigIssue("cost", str(exc))]) from None


def stage_cost(usage: Mapping[str, Any] | None, seconds: float | None, peak_rss_bytes: int | None,
               rates: Rates) -> dict[str, Any] | None:
    """``{"gpu", "cpu", "memory", "total", "currency"}`` of one stage (None when nothing is
    priced or nothing was measured)."""
    if not rates.priced or usage is None:
        return None
    gpu = sum(d.get("seconds", 0.0) / 3600 * rates.gpu_rate(str(d.get("name", ""))) for d in usage.get("gpus", []))
    cpu = usage.get("cpu_seconds", 0.0) / 3600 * rates.cpu_core_hour
    memory = (peak_rss_bytes or 0) / 1e9 * (seconds or 0.0) / 3600 * rates.memory_gb_hour
    return _rounded({"gpu": gpu, "cpu": cpu, "memory": memory, "total": gpu + cpu + memory}, rates.currency)


def run_totals(stages: Iterable[tuple[Mapping[str, Any] | None, Mapping[str, Any] | None]],
               currency: str | None) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The run's usage and cost from its stages' (usage, cost) pairs: CPU seconds, GPU seconds
    and energy per device added up; each part of the cost added up."""
    usage: dict[str, Any] | None = None
    cost: dict[str, Any] | None = None
    for stage_usage, stage_cost_ in stages:
        if stage_usage:
            usage = usage or {"cpu_seconds": 0.0}
            usage["cpu_seconds"] += stage_usage.get("cpu_seconds", 0.0)
            for device in stage_usage.get("gpus", []):
                total = usage.setdefault("gpus", {}).setdefault(
                    str(device["index"]), {"name": device.get("name"), "seconds": 0.0, "energy_wh": 0.0})
                total["seconds"] += device.get("seconds") or 0.0
                total["energy_wh"] += device.get("energy_wh") or 0.0
        if stage_cost_:
            cost = cost or {"gpu": 0.0, "cpu": 0.0, "memory": 0.0, "total": 0.0}
            for part in ("gpu", "cpu", "memory", "total"):
                cost[part] += stage_cost_.get(part, 0.0)
    if usage is not None:
        usage["cpu_seconds"] = round(usage["cpu_seconds"], 4)
        for total in usage.get("gpus", {}).values():
            total["seconds"], total["energy_wh"] = round(total["seconds"], 4), round(total["energy_wh"], 6)
    return usage, (_rounded(cost, currency or "USD") if cost is not None else None)


def idle_gpus(usage: Mapping[str, Any] | None, seconds: float | None) -> list[dict[str, Any]]:
    """The devices a stage held at under ``IDLE_UTILISATION`` percent on average, for at least
    ``IDLE_MIN_SECONDS``."""
    if not usage or (seconds or 0.0) < IDLE_MIN_SECONDS:
        return []
    return [d for d in usage.get("gpus", []) if (d.get("utilisation_mean") or 0.0) < IDLE_UTILISATION]


def _rounded(parts: Mapping[str, float], currency: str) -> dict[str, Any]:
    return {**{key: round(value, 6) for key, value in parts.items()}, "currency": currency}


def describe(usage: Mapping[str, Any] | None, cost: Mapping[str, Any] | None) -> str | None:
    """One line for the terminal and the report: ``11.8 CPU-s · GPU 0 (NVIDIA H100): 72 s,
    10.0 Wh · cost 0.41 USD``; None when nothing was measured."""
    if not usage:
        return None
    parts = [f"{usage.get('cpu_seconds', 0.0):.1f} CPU-s"]
    for index, device in (usage.get("gpus") or {}).items():
        parts.append(f"GPU {index} ({device.get('name')}): {device.get('seconds', 0.0):.0f} s, "
                     f"{device.get('energy_wh', 0.0):.1f} Wh")
    line = " · ".join(parts)
    if cost:
        line += f" · cost {format_cost(cost)}"
    return line


def format_cost(cost: Mapping[str, Any]) -> str:
    """``2.06 USD``, ``0.54 USD``, ``0.0042 USD``: two decimals from one unit up, two significant
    digits below it (a CPU minute costs fractions of a cent), so every cost reads alike."""
    import math

    total = float(cost.get("total", 0.0))
    decimals = 2 if total >= 1 or total <= 0 else max(2, 1 - math.floor(math.log10(total)))
    return f"{total:.{decimals}f} {cost.get('currency', '')}".rstrip()


# ---------------------------------------------------------------------------- budgets
class Budget(BaseModel):
    """Caps on what a run (or one stage) may spend; enforced while it runs (``pipeline.usage.budget``)."""

    model_config = ConfigDict(extra="forbid")

    max_cost: float | None = Field(None, gt=0, allow_inf_nan=False,
                                   description="Most the run may cost at the cost: section's rates.")
    max_gpu_hours: float | None = Field(None, gt=0, allow_inf_nan=False,
                                        description="Most GPU-hours (seconds held x GPUs held, / 3600).")
    max_wall: float | None = Field(None, description="Most wall time: seconds, or 90s, 30m, 2h, 1h30m.")

    @field_validator("max_wall", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> float | None:
        return None if value is None else parse_duration(value)

    @property
    def limits(self) -> dict[str, float]:
        """The caps that are set, by name."""
        return {k: v for k, v in (("max_cost", self.max_cost), ("max_gpu_hours", self.max_gpu_hours),
                                  ("max_wall", self.max_wall)) if v is not None}
