"""The CPU backend's two settings, parsed here without importing pandas, so that a run checks
them as it starts (``pipeline.core.settings.check_settings``) whichever backend it picks: the
table engine (``$PIPELINE_CPU_ENGINE``) and how the Polars engine adds floats
(``$PIPELINE_REDUCTIONS``)."""

from __future__ import annotations

from pipeline.core.errors import ConfigError
from pipeline.core.settings import Settings, current_settings, register_check

# The CPU table engine for event windows, horizon targets and join matching: polars (every
# core) or pandas (the reference, one core). Read on each use, so a test or a caller can switch.
CPU_ENGINE_VARIABLE = Settings.variable("cpu_engine")
CPU_ENGINES = ("polars", "pandas")
# How the Polars engine adds floats: repeatable (the same bits every run: exact sums) or fast
# (its threads' partial sums in the order they finish). The pandas engine is always repeatable.
REDUCTIONS_VARIABLE = Settings.variable("reductions")
REDUCTIONS = ("repeatable", "fast")


def cpu_engine_choice(settings: Settings | None = None) -> str:
    """``polars`` unless ``$PIPELINE_CPU_ENGINE`` says ``pandas``; anything else is refused."""
    choice = ((current_settings() if settings is None else settings).cpu_engine or "").strip().lower() or "polars"
    if choice not in CPU_ENGINES:
        raise ConfigError(f"${CPU_ENGINE_VARIABLE} is {choice!r}: use polars (the default, every core) or "
                          "pandas (the reference engine, one core)")
    return choice


def reductions_choice(settings: Settings | None = None) -> str:
    """``repeatable`` unless ``$PIPELINE_REDUCTIONS`` says ``fast``; anything else is refused."""
    choice = ((current_settings() if settings is None else settings).reductions or "").strip().lower() or "repeatable"
    if choice not in REDUCTIONS:
        raise ConfigError(f"${REDUCTIONS_VARIABLE} is {choice!r}: use repeatable (the default: the same bits on "
                          "every run) or fast (Polars' own float sums, which differ in the last bits run to run)")
    return choice


register_check("cpu_engine", check=cpu_engine_choice)
register_check("reductions", check=reductions_choice)
