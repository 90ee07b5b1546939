"""Plugins: modules outside the package that register stage kinds, feature ops, models and run hooks.

A plugin is an ordinary module that calls the registries when it is imported
(``pipeline.stages.register_stage``, ``pipeline.features.register_op``,
``pipeline.models.register_model``, ``pipeline.hooks.hook_registry.register_hook``). It is loaded
from any of three places, so each kind of use has its own way in:

- a config's ``plugins: [my_project.stages]`` list (modules beside the config file import
  too): what a project's YAML needs travels with it, and the run's resolved config records
  it, so ``pipeline predict`` loads the same plugins for that run's models;
- the ``PIPELINE_PLUGINS`` environment variable (comma-separated module names): for
  commands without a config (``pipeline schema``) and for scheduled jobs;
- the entry-point groups of installed distributions, ``pipeline.plugins`` (any plugin) and
  ``pipeline.hooks`` (a module that registers run hooks: a report, a tracker): a plugin package
  that is installed is always available.

The groups are names installed packages declare (``[project.entry-points."pipeline.hooks"]``),
not module paths: they stay as they are when the package's modules move (``pipeline.hooks`` is
also the package of the hook protocol; the two are unrelated).

A module is imported once per process; an import that fails is a ConfigError naming the
module and where it was asked for.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterable
from pathlib import Path

from pipeline.core.errors import ConfigError, ConfigIssue
from pipeline.core.settings import Settings, current_settings

ENV_VAR = Settings.variable("plugins")
# Public names that installed distributions declare: never renamed with the modules.
ENTRY_POINT_GROUP = "pipeline.plugins"
HOOK_ENTRY_POINT_GROUP = "pipeline.hooks"
ENTRY_POINT_GROUPS = {ENTRY_POINT_GROUP: "plugin", HOOK_ENTRY_POINT_GROUP: "hook module"}

_loaded: set[str] = set()
_entry_points_loaded = False


def load_plugins(modules: Iterable[str] = (), *, search_path: str | os.PathLike[str] | None = None,
                 where: str = "plugins") -> list[str]:
    """Import ``modules`` plus those in $PIPELINE_PLUGINS and the entry-point group.

    ``search_path`` (the config's folder) is put on ``sys.path`` first, so a project's plugin
    module need not be installed. Returns the modules imported by this call.
    """
    if search_path is not None:
        folder = str(Path(search_path).resolve())
        if folder not in sys.path:
            sys.path.append(folder)
    imported = _entry_point_plugins()
    named = [(m, f"{where}[{i}]") for i, m in enumerate(modules)]
    named += [(m.strip(), f"${ENV_VAR}") for m in (current_settings().plugins or "").split(",") if m.strip()]
    issues = []
    for module, origin in named:
        if module in _loaded:
            continue
        try:
            importlib.import_module(module)
        except Exception as exc:  # noqa: BLE001 - a plugin's import can fail in any way
            issues.append(ConfigIssue(origin, f"cannot import plugin module '{module}': {type(exc).__name__}: {exc}"))
            continue
        _loaded.add(module)
        imported.append(module)
    if issues:
        raise ConfigError(issues)
    return imported


def _entry_point_plugins() -> list[str]:
    """Import every ``pipeline.plugins`` and ``pipeline.hooks`` entry point of installed
    distributions (once)."""
    global _entry_points_loaded
    if _entry_points_loaded:
        return []
    _entry_points_loaded = True
    from importlib.metadata import entry_points

    imported, issues = [], []
    for group, what in ENTRY_POINT_GROUPS.items():
        for entry in entry_points(group=group):
            try:
                entry.load()
            except Exception as exc:  # noqa: BLE001
                where = f"entry point {entry.name}" if group == ENTRY_POINT_GROUP else f"entry point {entry.name} ({group})"
                issues.append(ConfigIssue(where, f"cannot load {what} '{entry.value}': {type(exc).__name__}: {exc}"))
                continue
            imported.append(entry.value)
    if issues:
        raise ConfigError(issues)
    return imported


def note_replacement(what: str, name: str, old_module: str | None, new_module: str | None) -> None:
    """Warn when a registration replaces one that another module made (a plugin's model named
    ``xgboost`` replaced the built-in without a word). The same module registering again (a
    plugin reloaded in a notebook) replaces it silently; a plugin that means to replace a
    built-in may, and the warning says which module's entry now answers to the name."""
    if old_module is None or old_module == new_module:
        return
    import logging

    logging.getLogger("pipeline").warning(
        "%s '%s' registered by %s replaces the one registered by %s; configs naming '%s' now get the new one "
        "(give it another name to keep both)", what, name, new_module or "an unknown module", old_module, name)
