"""Plugins: modules outside the package that register stage kinds, feature ops, models and run hooks.

A plugin is an ordinary module that calls the registries when it is imported
(``pipeline.stages.register_stage``, ``pipeline.features.register_op``,
``pipeline.models.register_model``, ``pipeline.hooks.hook_registry.register_hook``). It is loaded
from any of three places, so each kind of use has its own way in:

- a config's ``plugins: [my_project.stages]`` list (modules beside the config file import
  too): what a project's YAML needs travels with it, and the run's resolved config records
  it, so ``pipeline predict`` loads the same plugins for that run's models;
- the ``PIPELINE_PLUGINS`` environment variable (comma-separated module names): for
  commands without a config (``pipeline schema``, ``pipeline init``, which lists them in the
  config it drafts when one registers a model it drafts) and for scheduled jobs;
- the entry-point groups of installed distributions, ``pipeline.plugins`` (any plugin) and
  ``pipeline.hooks`` (a module that registers run hooks: a report, a tracker): a plugin package
  that is installed is always available.

The groups are names installed packages declare (``[project.entry-points."pipeline.hooks"]``),
not module paths: they stay as they are when the package's modules move (``pipeline.hooks`` is
also the package of the hook protocol; the two are unrelated).

A module is imported once per process; an import that fails is a ConfigError naming the
module and where it was asked for. A name that is not a module name (``bad-name``) is one
problem, said the same way for a config's list and for $PIPELINE_PLUGINS, and the other names
still import, so what they register is known when the rest of a config is checked.

Where a module is looked for: Python's path (``sys.path``: ``$PYTHONPATH``'s folders, then the
installed packages) and a config's own folder (added to the path when the config is read, or
by ``search_path``: ``pipeline predict`` and ``load_model`` add the folder of the config a run
was started with, ``pipeline.scoring.run_plugins``). The working folder is not searched for the modules of ``--plugin`` and ``$PIPELINE_PLUGINS``:
they apply to every command, scheduled ones included, whose working folder is wherever they
were started, and importing code from whatever folder a command runs in is the default Python
3.11's ``-P`` turns off; a config's folder is searched because the config names the module
and travels with it. So ``pipeline`` (the installed command) does not find ``my_plugin.py``
in the folder it runs in, while ``python -m pipeline`` does (Python itself puts that folder
first on the path for ``-m``). To load one from there, say so: ``PYTHONPATH=. pipeline ...``,
or install it. A module that is not found is one message listing the folders looked in, saying
when the module is in the working folder, and what to do.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from pipeline.core.errors import ConfigError, ConfigIssue
from pipeline.core.settings import Settings, current_settings

ENV_VAR = Settings.variable("plugins")
# Public names that installed distributions declare: never renamed with the modules.
ENTRY_POINT_GROUP = "pipeline.plugins"
HOOK_ENTRY_POINT_GROUP = "pipeline.hooks"
ENTRY_POINT_GROUPS = {ENTRY_POINT_GROUP: "plugin", HOOK_ENTRY_POINT_GROUP: "hook module"}

# A module name as ``import`` takes it: dotted Python identifiers.
MODULE_NAME = r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*"

_loaded: set[str] = set()
_config_only: set[str] = set()
_entry_points_loaded = False

Folders = str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None


def is_module_name(name: object) -> bool:
    return isinstance(name, str) and re.fullmatch(MODULE_NAME, name) is not None


def check_module_name(name: str) -> str:
    """``name`` if it is a module name, else a ValueError saying what one is (a config's
    ``plugins:`` and $PIPELINE_PLUGINS say it the same way)."""
    if not is_module_name(name):
        raise ValueError(f"{name!r} is not a module name (dotted Python identifiers, e.g. my_stages or "
                         "company.pipeline_plugins)")
    return name


def load_plugins(modules: Iterable[str] = (), *, search_path: Folders = None, where: str = "plugins",
                 source: str | None = None, note: str | None = None) -> list[str]:
    """Import ``modules`` plus those in $PIPELINE_PLUGINS and the entry-point groups.

    ``search_path`` (the config's folder, or several) is put at the end of ``sys.path`` first, so
    a project's plugin module need not be installed. ``where`` names the list ``modules`` come
    from (an entry is ``where[i]``) and ``source`` what holds that list (a run's config); ``note``
    is said when a module is not found (why a folder was not searched). Every name is tried: a
    name that is not a module name and a module that does not import are each one issue of the
    ConfigError raised at the end. Returns the modules imported by this call.
    """
    folders = [search_path] if isinstance(search_path, (str, os.PathLike)) else list(search_path or ())
    for path in folders:
        folder = str(Path(path).resolve())
        if folder not in sys.path:
            sys.path.append(folder)
    imported = _entry_point_plugins()
    named = [(m, f"{where}[{i}]", source) for i, m in enumerate(modules)]
    named += [(m, f"${ENV_VAR}", None) for m in environment_plugins()]
    issues = []
    for module, origin, held_by in named:
        from_config = where == "plugins" and not origin.startswith("$")
        if not from_config:
            _config_only.discard(module)            # asked for process-wide: its hooks serve every run
        if module in _loaded:
            continue
        try:
            importlib.import_module(check_module_name(module))
        except ValueError as exc:                       # not a module name: nothing to import
            issues.append(ConfigIssue(origin, str(exc), source=held_by))
            continue
        except Exception as exc:  # noqa: BLE001 - a plugin's import can fail in any way
            issues.append(ConfigIssue(origin, _import_problem(module, exc, note), source=held_by))
            continue
        _loaded.add(module)
        if from_config:
            _config_only.add(module)
        imported.append(module)
    if issues:
        raise ConfigError(issues)
    return imported


def environment_plugins() -> list[str]:
    """The module names of $PIPELINE_PLUGINS (comma-separated; blanks around them dropped)."""
    return [m.strip() for m in (current_settings().plugins or "").split(",") if m.strip()]


def _import_problem(module: str, exc: Exception, note: str | None) -> str:
    """Why ``module`` did not import: its own error, or, when it is not found at all, where it
    was looked for (``note`` added) and what to do."""
    if not (isinstance(exc, ModuleNotFoundError) and exc.name is not None
            and (module == exc.name or module.startswith(exc.name + "."))):
        return f"cannot import plugin module '{module}': {type(exc).__name__}: {exc}"   # found; its import failed
    folders = searched_folders()
    looked = f"in {', '.join(folders)} or " if folders else ""
    text = f"cannot import plugin module '{module}': there is no such module {looked}among the installed packages"
    if note:
        text += f" ({note})"
    top = module.split(".")[0]
    here = Path.cwd()
    in_here = next((p for p in (here / f"{top}.py", here / top) if p.exists()), None)
    if in_here is not None and str(here) not in folders:
        return (f"{text}; {in_here} is in the working folder, which the pipeline command does not search "
                f"for plugins (python -m pipeline does): start it with the folder on PYTHONPATH "
                f"(PYTHONPATH=. pipeline ...), or install the module")
    return (f"{text}; put the folder that holds {top}.py (or the {top} package) on PYTHONPATH "
            f"(PYTHONPATH=/that/folder pipeline ...), or install it")


def searched_folders() -> list[str]:
    """The folders on Python's path beyond the interpreter's own and the installed packages
    (``$PYTHONPATH``'s, a config's, the working folder under ``python -m``): where a module that
    is not installed is looked for."""
    from pipeline.core.fingerprints import is_installed

    found: list[str] = []
    for entry in sys.path:
        folder = Path(entry or ".").resolve()
        if folder.is_dir() and not is_installed(folder) and str(folder) not in found:
            found.append(str(folder))
    return found


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


def loaded_plugins() -> frozenset[str]:
    """The plugin modules this process has imported (they stay registered for its life)."""
    return frozenset(_loaded)


def forget_plugin(module: str) -> None:
    """Count ``module`` as not loaded, so the next ``load_plugins`` naming it imports it again
    (``pipeline.core.local_code.refresh_plugins``, after dropping a stale one)."""
    _loaded.discard(module)


def config_only_plugins() -> frozenset[str]:
    """The plugin modules imported only because a config listed them (not ``--plugin``,
    $PIPELINE_PLUGINS or an entry point): what they register is that config's, so their run
    hooks serve the runs of configs that list them (``hooks.hook_registry.build_hooks``)."""
    return frozenset(_config_only)
