"""The hook registry: run-level outputs (a report, a tracker, budgets, costs, signatures) as
registered hooks, each with the config section it owns, so the runner and the config schema
name none of them.

A registration says:

- ``factory(section, context) -> RunHook | None``: builds the hook for one run from its
  validated section and a ``HookContext``; None leaves it off for that run;
- ``config_key`` and ``section``: the top-level YAML key it owns and the pydantic model that
  validates it. The config model is built with every registered section
  (``pipeline.config.schema.config_model``), so a plugin's key validates with line numbers and
  is listed by ``pipeline schema`` like a built-in one;
- ``default``: whether a config without the key gets the section's defaults (True: the hook is
  on unless its section turns it off) or None (False: off until configured);
- ``order``: where it sits among the run's hooks. The caller's hooks (the terminal or the log
  lines, a library user's own) are at ``CALLER_ORDER`` (0); lower comes first, equal keeps
  registration order, registered after the caller's. The built-in ones: signing -200 (its
  check before any other), the budget watch -100 (its clock starts with the run), costs -50,
  the report 100 (it reads the record the others finished), MLflow 200 (it uploads the report).

Plugin code registers hooks with the same ``register_hook`` (``pipeline.core.plugins``:
a config's ``plugins:``, ``$PIPELINE_PLUGINS``, or the ``pipeline.hooks`` entry-point group).
Registering a name that exists replaces it (a plugin reloaded in a notebook). A hook that a
plugin registered because a config listed it serves the runs of configs that list that plugin,
not every later run of the process (a notebook, a service running several projects).
"""

from __future__ import annotations

import keyword
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from pipeline.core.errors import PipelineError
from pipeline.core.plugins import config_only_plugins, note_replacement
from pipeline.hooks.protocol import RunHook

__all__ = [
    "CALLER_ORDER", "DEFAULT_ORDER", "HOOKS", "HookContext", "HookRegistration", "build_hooks", "config_sections",
    "register_hook", "reserve_config_keys",
]

# Where the caller's own hooks sit in the order, and where a registration that says nothing goes:
# after them, before the report (which reads the finished record).
CALLER_ORDER = 0
DEFAULT_ORDER = 50


@dataclass(frozen=True)
class HookContext:
    """What a hook's factory may use besides its own section."""

    config: Any                                   # the validated PipelineConfig (every section, the stages)
    pipeline: str                                 # its name
    runs_dir: Path                                # its runs go to <runs_dir>/<pipeline>/
    hooks: tuple[RunHook, ...] = ()               # the caller's hooks (a factory may step aside for one)
    options: Mapping[str, Any] = field(default_factory=dict)   # the run's options (check_budget_estimate)


HookFactory = Callable[[Any, HookContext], "RunHook | None"]


@dataclass(frozen=True)
class HookRegistration:
    """A registered hook: its factory, the config section it owns and its place in the order."""

    name: str
    factory: HookFactory
    config_key: str | None = None
    section: type[BaseModel] | None = None
    default: bool = True
    order: int = DEFAULT_ORDER
    description: str = ""
    module: str | None = None          # the module that registered it (its factory's)

    def section_of(self, config: Any) -> Any:
        """The hook's section of ``config``: as validated, or (a config validated before the hook
        was registered) what a config without the key gets."""
        if self.config_key is None or self.section is None:
            return None
        fields = getattr(type(config), "model_fields", {})
        if self.config_key in fields:
            return getattr(config, self.config_key)
        return self.section() if self.default else None


log = logging.getLogger("pipeline")

HOOKS: dict[str, HookRegistration] = {}
# Top-level keys that are the config's own (name, stages, ...): no hook may own one.
_RESERVED: set[str] = set()


def register_hook(
    name: str,
    factory: HookFactory,
    *,
    config_key: str | None = None,
    section: type[BaseModel] | None = None,
    default: bool = True,
    order: int = DEFAULT_ORDER,
    description: str | None = None,
) -> HookRegistration:
    """Register the hook ``name``, built for every run by ``factory(section, context)``.

    ``config_key`` and ``section`` come together: the top-level YAML key the hook owns and the
    pydantic model of its value; ``description`` is the key's line in ``pipeline schema`` and the
    reference (default: the first line of the model's docstring). ``default``: a config without
    the key gets the model's defaults (True) or None (False). ``order``: see the module's doc.
    Returns the registration.

    Examples:
        >>> from pipeline.hooks.protocol import RunHook
        >>> from pipeline.hooks.hook_registry import HOOKS, register_hook
        >>> class Finished(RunHook):
        ...     def run_finished(self, event):
        ...         print("finished", event.status)
        >>> registration = register_hook("finished_line", lambda section, context: Finished())
        >>> registration.name in HOOKS
        True
        >>> del HOOKS["finished_line"]           # the example's hook, taken back out
    """
    if not isinstance(name, str) or not name:
        raise TypeError("register_hook: a hook's name is a non-empty string")
    if not callable(factory):
        raise TypeError(f"hook '{name}': factory must be callable, not {type(factory).__name__}")
    if (config_key is None) != (section is None):
        raise TypeError(f"hook '{name}': config_key and section come together (the key it owns and the "
                        "pydantic model that validates it)")
    if section is not None and not (isinstance(section, type) and issubclass(section, BaseModel)):
        raise TypeError(f"hook '{name}': section must be a pydantic model class, not {section!r}")
    if isinstance(order, bool) or not isinstance(order, int):
        raise TypeError(f"hook '{name}': order must be an int, not {type(order).__name__}")
    if config_key is not None:
        if not (config_key.isidentifier() and not keyword.iskeyword(config_key) and not config_key.startswith("_")):
            raise ValueError(f"hook '{name}': config key {config_key!r} is not a plain name (letters, digits and _, "
                             "not starting with _)")
        if config_key in _RESERVED:
            raise ValueError(f"hook '{name}': config key '{config_key}' is the pipeline config's own")
        owner = next((h.name for h in HOOKS.values() if h.config_key == config_key and h.name != name), None)
        if owner is not None:
            raise ValueError(f"hook '{name}': config key '{config_key}' is owned by hook '{owner}'")
    if description is None:
        doc = (section.__doc__ or "") if section is not None else ""
        description = " ".join(doc.strip().split("\n\n")[0].split())
    if section is not None and "extra" not in section.model_config:
        section = _strict(section)
    registration = HookRegistration(name, factory, config_key, section, bool(default), order, description,
                                    getattr(factory, "__module__", None))
    old = HOOKS.get(name)
    note_replacement("run hook", name, (old.module or "?") if old else None, registration.module)
    HOOKS[name] = registration
    return registration


def _strict(section: type[BaseModel]) -> type[BaseModel]:
    """``section`` refusing keys it does not have, as every other key of a config does (a
    misspelt ``chanel:`` was dropped and the default used); a model that says what to do with
    extra keys (``model_config = ConfigDict(extra=...)``) is kept as it is."""
    return type(section.__name__, (section,), {"__module__": section.__module__, "__doc__": section.__doc__,
                                               "model_config": ConfigDict(extra="forbid")})


def reserve_config_keys(keys: Any) -> None:
    """Keys of the config's own (the schema calls this), which no hook may claim."""
    _RESERVED.update(keys)


def config_sections() -> list[HookRegistration]:
    """Registrations that own a config section, in registration order (the order of the keys)."""
    return [h for h in HOOKS.values() if h.config_key is not None]


def build_hooks(context: HookContext) -> list[RunHook]:
    """The run's hooks in order: ``context.hooks`` (the caller's) at ``CALLER_ORDER``, and every
    registered hook that its factory turns on for this config. Factories are called in hook
    order; a ``PipelineError`` they raise (a section the environment makes invalid) is raised,
    anything else (a plugin's bug) is logged and that hook left out, as a hook that fails later is."""
    placed: list[tuple[int, int, int, RunHook]] = [(CALLER_ORDER, 0, i, hook) for i, hook in enumerate(context.hooks)]
    entries = sorted(enumerate(HOOKS.values()), key=lambda item: item[1].order)
    listed = set(getattr(context.config, "plugins", None) or ())
    for sequence, entry in entries:
        plugin = _config_plugin(entry.module)
        if plugin is not None and plugin not in listed:
            continue                       # another config's plugin, imported earlier in this process
        try:
            hook = entry.factory(entry.section_of(context.config), context)
        except PipelineError:
            raise                          # what the section or the environment makes invalid
        except Exception as exc:  # noqa: BLE001 - a plugin hook's bug never fails the run
            log.warning("run hook '%s' could not be built (%s: %s); the run goes on without it", entry.name,
                        type(exc).__name__, exc)
            continue
        if hook is not None:
            placed.append((entry.order, 1, sequence, hook))
    return [hook for *_, hook in sorted(placed, key=lambda item: item[:3])]


def _config_plugin(module: str | None) -> str | None:
    """The plugin that a config listed, and only a config, that ``module`` is (or is inside)."""
    if module is None:
        return None
    return next((p for p in config_only_plugins() if module == p or module.startswith(p + ".")), None)
