"""Every ``PIPELINE_*`` environment variable, read here and nowhere else.

The environment shapes a run beside its config: the table engine, the threads, how floats are
added, the report, the cache budget, the cost rates, the signing key. ``Settings`` is one frozen
snapshot of them. A run takes it once as it starts (``RunOptions.settings``, or this process's
environment), records it in the manifest (``settings``, secrets redacted) and the report shows
it, so a run that differs from yesterday's says which variable changed.

Each owner still parses its own value (the thread count in ``core/threads``, the engine in the
CPU backend, the budget with the cache): ``Settings`` holds the text as the environment gave it,
and ``None`` for a variable that is unset. Code deep in a Dask worker or a DDP rank, whose only
channel from the run is the process environment, reads ``current_settings()``: the same
snapshot, taken in that process.

Each owner also registers its parser here (``register_check``), and a run calls
``check_settings`` as it starts: a value no owner can use stops the run before any stage, in one
paragraph naming the variable, whether or not a stage that reads it runs (a cached one does
not). The settings in ``FREE_TEXT`` take any text and have no check.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from typing import Any

from pipeline.core.errors import ConfigError, ConfigIssue, UsageError

PREFIX = "PIPELINE_"
REDACTED = "(redacted)"


def _variable(what: str, *, secret: bool = False) -> Any:
    """A field of ``Settings``: its variable is ``PIPELINE_`` and the field's name in capitals."""
    return field(default=None, metadata={"what": what, "secret": secret})


@dataclass(frozen=True)
class Settings:
    """The ``PIPELINE_*`` variables of one environment, as text (``None``: unset).

    Examples:
        >>> from pipeline import Settings
        >>> settings = Settings.from_environ({"PIPELINE_THREADS": "4", "PIPELINE_SIGNING_KEY": "s3cret"})
        >>> settings.threads
        '4'
        >>> settings.record()
        {'PIPELINE_THREADS': '4', 'PIPELINE_SIGNING_KEY': '(redacted)'}
        >>> Settings.variable("cpu_engine")
        'PIPELINE_CPU_ENGINE'
    """

    cpu_engine: str | None = _variable("the CPU table engine: polars (default) or pandas")
    threads: str | None = _variable("threads for column work (1 turns the pool off); default: the cores this "
                                    "process may use")
    reductions: str | None = _variable("how the Polars engine adds floats: repeatable (default) or fast")
    huge_pages: str | None = _variable("off (default: host memory in 4 KiB pages) or on (NumPy's and pyarrow's own "
                                       "transparent huge pages)")
    plugins: str | None = _variable("plugin modules to import, comma-separated")
    report: str | None = _variable("on or off: overrides the config's report.enabled")
    progress_seconds: str | None = _variable("seconds between a bar's lines where no bar can be drawn (0: each "
                                             "step)")
    sampling: str | None = _variable("off: sample a stage's memory only as it starts and ends")
    cache_max_size: str | None = _variable("the stage cache's budget (5GiB, 500MB, 0, none); overrides "
                                           "cache.max_size")
    cost_gpu_hour: str | None = _variable("price of a GPU hour; overrides cost.gpu_hour's default")
    cost_cpu_core_hour: str | None = _variable("price of a CPU core hour; overrides cost.cpu_core_hour")
    cost_memory_gb_hour: str | None = _variable("price of a GB of memory for an hour; overrides "
                                                "cost.memory_gb_hour")
    cost_currency: str | None = _variable("the currency of the prices; overrides cost.currency")
    signing_key: str | None = _variable("the secret that signs run records and models", secret=True)
    signing_key_file: str | None = _variable("a file holding that secret")

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """The settings of ``environ`` (default: this process's environment)."""
        environ = os.environ if environ is None else environ
        return cls(**{f.name: environ.get(cls.variable(f.name)) for f in fields(cls)})

    @staticmethod
    def variable(name: str) -> str:
        """The environment variable of field ``name`` (``threads`` → ``PIPELINE_THREADS``)."""
        if name not in _FIELDS:
            raise KeyError(f"no setting {name!r} (settings: {', '.join(_FIELDS)})")
        return PREFIX + name.upper()

    def record(self) -> dict[str, str]:
        """The variables that are set, by name, secrets as ``(redacted)``: what the manifest keeps."""
        return {self.variable(f.name): REDACTED if f.metadata["secret"] else value
                for f in fields(self) if (value := getattr(self, f.name)) is not None}

    def environ(self) -> dict[str, str]:
        """The variables that are set, by name, secrets included: for a child process's environment."""
        return {self.variable(f.name): value for f in fields(self) if (value := getattr(self, f.name)) is not None}

    def replace(self, **changes: str | None) -> Settings:
        """A copy with ``changes`` (field names; ``None`` unsets)."""
        return dataclasses.replace(self, **changes)


_FIELDS = tuple(f.name for f in fields(Settings))


def current_settings() -> Settings:
    """This process's settings, read now (a test or a caller may have changed the environment)."""
    return Settings.from_environ()


# Settings whose every text is a value, so nothing parses them as a run starts: module names
# (imported as the config loads, which names one that does not import) and a currency's name.
FREE_TEXT = {"plugins": "module names, imported as the config loads", "cost_currency": "a currency's name"}
# Setting -> its owner's parser, which raises ConfigError or ValueError on a value it refuses.
_CHECKS: dict[str, Callable[[Settings], object]] = {}


def register_check(*names: str, check: Callable[[Settings], object]) -> None:
    """``check(settings)`` parses the settings ``names`` as their owner does (the thread count in
    ``core/threads``, the engine in the CPU backend): ``check_settings`` calls it as a run starts."""
    for name in names:
        Settings.variable(name)                 # KeyError on a misspelt name
        _CHECKS[name] = check


def checked_settings() -> list[str]:
    """The settings that have a check registered in this process."""
    return [name for name in _FIELDS if name in _CHECKS]


def check_settings(settings: Settings | None = None) -> None:
    """Parse every setting that is set with its owner's check; a ``UsageError`` (exit 2) with one
    sentence per refused value, each naming its variable."""
    settings = current_settings() if settings is None else settings
    issues: list[ConfigIssue] = []
    done: list[Callable[[Settings], object]] = []
    for name in checked_settings():
        check = _CHECKS[name]
        if getattr(settings, name) is None or check in done:
            continue
        done.append(check)                      # one check for several variables (the signing key) runs once
        try:
            check(settings)
        except ConfigError as exc:
            issues += [ConfigIssue(Settings.variable(name), f"{i.path}: {i.message}" if i.path else i.message)
                       for i in exc.issues]
        except ValueError as exc:
            issues.append(ConfigIssue(Settings.variable(name), str(exc)))
    if issues:
        raise UsageError(issues)


def describe() -> list[tuple[str, str, bool]]:
    """(variable, what it does, secret) for every setting: the docs' table."""
    return [(Settings.variable(f.name), f.metadata["what"], f.metadata["secret"]) for f in fields(Settings)]


@contextmanager
def environment(**changes: str | None) -> Iterator[Settings]:
    """This process's environment with ``changes`` (field names; ``None`` unsets) until the block
    ends, then as it was: for a run whose Dask workers and ranks must inherit a setting."""
    saved = {name: os.environ.get(Settings.variable(name)) for name in changes}
    try:
        for name, value in changes.items():
            _set(Settings.variable(name), value)
        yield current_settings()
    finally:
        for name, value in saved.items():
            _set(Settings.variable(name), value)


def _set(variable: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(variable, None)
    else:
        os.environ[variable] = value


__all__ = ["FREE_TEXT", "PREFIX", "REDACTED", "Settings", "check_settings", "checked_settings", "current_settings",
           "describe", "environment", "register_check"]
