"""One way for a test to run ``pipeline ARGS``: in this process by default, as a real process
where the test is about processes.

In process, the command goes through the same entry point as the console script
(``pipeline.cli.app.main``, click's ``main`` with its exit code mapping) and comes back as a
``subprocess.CompletedProcess``: the exit code, stdout and stderr as a process would give
them. A test pays no interpreter start and no second import of pandas, scikit-learn or torch.

What a process would start fresh is saved before the call and put back after: the working
directory, the environment, ``sys.path`` and the modules a config imported from outside the
installed packages (a project's plugin or ``python`` stage module of the same name in another
test's folder), the registries plugins add to, the per-process caches of source hashes, signal
handlers, logging, the console's width (``COLUMNS``), and the default Dask client with Dask's
config (a test's cluster would otherwise be the command's: a new process has none).

``run_script`` runs a Python file the same way, as ``python FILE`` would (the docs' examples).

``process=True`` runs ``python -m pipeline ARGS`` instead. A test passes it, with its reason
in a comment, when what it checks is a process: a signal, a lock held by another process, what
happens on kill, the console script, a server, a fresh interpreter's imports or ``PATH``.
"""

from __future__ import annotations

import functools
import importlib
import logging
import os
import signal
import subprocess
import sys
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

ROOT = Path(__file__).resolve().parents[2]
INSTALLED = tuple(str(Path(p).resolve()) for p in {sys.prefix, sys.base_prefix, sys.exec_prefix})
PACKAGE_DIR = str(ROOT / "pipeline")
SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGHUP)


def run_cli(*args: str | os.PathLike[str], cwd: str | os.PathLike[str], env: Mapping[str, str] | None = None,
            unset: Sequence[str] = (), input: str | bytes | None = None, timeout: float = 600,
            process: bool = False) -> subprocess.CompletedProcess[str]:
    """``pipeline ARGS`` in ``cwd`` with this process's environment less the ``unset`` names,
    plus ``env``; ``input`` is stdin (empty without it). ``timeout`` bounds a real
    process only (the suite's fault handler reports a hung call in process)."""
    argv = [str(a) for a in args]
    environment = {**{k: v for k, v in os.environ.items() if k not in unset}, **(env or {})}
    if process:
        return _in_a_process(argv, Path(cwd), environment, input, timeout)
    return _in_this_process(argv, Path(cwd), environment, input)


def _in_a_process(argv: list[str], cwd: Path, env: dict[str, str], input: str | bytes | None,
                  timeout: float) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "pipeline", *argv]
    stdin = subprocess.DEVNULL if input is None else None
    data = input.encode() if isinstance(input, str) else input      # bytes as they are: a gzip stream
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, timeout=timeout, stdin=stdin, input=data)
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout.decode(errors="replace"),
                                       done.stderr.decode(errors="replace"))


def _in_this_process(argv: list[str], cwd: Path, env: dict[str, str], input: str | bytes | None
                     ) -> subprocess.CompletedProcess[str]:
    from click.testing import CliRunner

    from pipeline.cli.app import main

    with _process_state(cwd, env):
        result = CliRunner().invoke(main, argv, input=input, prog_name="pipeline", catch_exceptions=True)
    stderr = result.stderr
    code = result.exit_code
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        # Nothing should escape the group's mapping: show it as a crashed process would.
        import traceback

        stderr += "".join(traceback.format_exception(*result.exc_info))
        code = 1
    return subprocess.CompletedProcess(["pipeline", *argv], int(code), result.stdout, stderr)


def run_script(path: str | os.PathLike[str], *, cwd: str | os.PathLike[str],
               env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python PATH`` in ``cwd``, in this process: the file runs as ``__main__`` with what a new
    interpreter would have (the state ``run_cli`` saves and restores), its stdout and stderr
    captured, and an uncaught exception shown as a traceback with exit code 1. A script whose
    child processes import it (a Dask cluster's or DDP's spawned workers) needs a real
    ``python`` instead: they would import the test runner's ``__main__``."""
    import io
    import runpy
    import traceback
    from contextlib import redirect_stderr, redirect_stdout

    script = str(Path(path).resolve())
    out, err, code = io.StringIO(), io.StringIO(), 0
    with _process_state(Path(cwd), {**os.environ, **(env or {})}):
        saved_argv, sys.argv = sys.argv, [script]
        sys.path.insert(0, str(Path(script).parent))        # as `python FILE`: its folder first
        try:
            with redirect_stdout(out), redirect_stderr(err):
                runpy.run_path(script, run_name="__main__")
        except SystemExit as stop:
            code = exit_status(stop.code, err)
        except Exception:  # noqa: BLE001 - a crashed script: its traceback, as python prints it
            err.write(traceback.format_exc())
            code = 1
        finally:
            sys.argv = saved_argv
    return subprocess.CompletedProcess(["python", script], code, out.getvalue(), err.getvalue())


def exit_status(code: object, stderr: TextIO) -> int:
    """The status the interpreter exits with on ``SystemExit(code)``: the code, 0 for None, or
    1 with the message written to ``stderr``."""
    if code is None or isinstance(code, int):
        return code or 0
    stderr.write(f"{code}\n")
    return 1


@contextmanager
def _process_state(cwd: Path, env: dict[str, str]) -> Iterator[None]:
    from pipeline.cli import options
    from pipeline.core import plugins

    saved_cwd = os.getcwd()
    saved_env = dict(os.environ)
    saved_path = list(sys.path)
    # A fresh process has imported no project module (the test's own process may have).
    saved_modules = {name: module for name, module in sys.modules.items() if _is_a_project_module(module)}
    for name in saved_modules:
        del sys.modules[name]
    saved_registries = [(registry, dict(registry)) for registry in _registries()]
    saved_plugins = (set(plugins._loaded), plugins._entry_points_loaded, set(plugins._config_only))
    saved_signals = {s: signal.getsignal(s) for s in SIGNALS}
    saved_logging = _logging_state()
    saved_json = dict(options.JSON_ERRORS)
    consoles = (options.stdout, options.stderr)
    saved_widths = [console._width for console in consoles]
    columns = env.get("COLUMNS", "")
    saved_dask = _hide_dask_client()
    _clear_process_caches()
    os.environ.clear()
    os.environ.update(env)
    for console in consoles:
        console._width = int(columns) if columns.isdigit() else None
    # As `python -m pipeline` starts: the working directory first on sys.path, then PYTHONPATH's
    # folders; no plugin loaded yet; the root logger without handlers (a warning logged by a
    # command that sets up no logging goes to stderr through logging's last resort).
    sys.path[:0] = [str(cwd), *(p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p)]
    importlib.invalidate_caches()
    plugins._loaded.clear()
    plugins._config_only.clear()
    plugins._entry_points_loaded = False
    logging.getLogger().handlers[:] = []
    logging.getLogger().setLevel(logging.WARNING)
    os.chdir(cwd)
    try:
        with warnings.catch_warnings():
            yield
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        sys.path[:] = saved_path
        for name in [n for n, module in sys.modules.items() if _is_a_project_module(module)]:
            del sys.modules[name]
        sys.modules.update(saved_modules)
        for registry, entries in saved_registries:
            registry.clear()
            registry.update(entries)
        plugins._loaded.clear()
        plugins._loaded.update(saved_plugins[0])
        plugins._entry_points_loaded = saved_plugins[1]
        plugins._config_only.clear()
        plugins._config_only.update(saved_plugins[2])
        for number, handler in saved_signals.items():
            signal.signal(number, handler if handler is not None else signal.SIG_DFL)
        _restore_logging(saved_logging)
        options.JSON_ERRORS.clear()
        options.JSON_ERRORS.update(saved_json)
        for console, width in zip(consoles, saved_widths):
            console._width = width
        _restore_dask_client(saved_dask)
        _clear_process_caches()


def _hide_dask_client() -> tuple | None:
    """Take away this process's default Dask client (and Dask's config, which a default client
    sets): what a command finds by ``get_client()`` must be what it started, as in a new process."""
    if "distributed.client" not in sys.modules:
        return None
    import copy

    import dask
    from distributed import client

    saved = (dict(client._global_clients), client._current_client.set(None), copy.deepcopy(dask.config.config))
    client._global_clients.clear()
    return saved


def _restore_dask_client(saved: tuple | None) -> None:
    if saved is None:
        return
    import dask
    from distributed import client

    clients, token, config = saved
    client._global_clients.clear()
    client._global_clients.update(clients)
    client._current_client.reset(token)
    dask.config.config.clear()
    dask.config.config.update(config)


def _registries() -> list[dict]:
    """The module-level registries that plugins (and so configs) add to, with the package's own
    run-level hooks (report, cost, tracking, budget) registered first: a run in process that
    imported them for the first time would otherwise have them taken out again with the plugins'
    entries, while their modules stay imported and never register again."""
    import pipeline.config.run_outputs  # noqa: F401 - registers the built-in run-level hooks
    from pipeline.features.ops.op_registry import OPS
    from pipeline.hooks.hook_registry import HOOKS
    from pipeline.models.registry import MODELS
    from pipeline.stages.spec import STAGE_KINDS

    return [STAGE_KINDS, OPS, MODELS, HOOKS]


def _clear_process_caches() -> None:
    """Hashes of source files are read once per process: a test that edits a plugin between two
    runs must see the edit, as two processes would."""
    from pipeline.core import fingerprints, import_graph

    fingerprints._code_fingerprint.cache_clear()
    fingerprints._file_digest.cache_clear()
    import_graph.file_imports.cache_clear()


def _is_a_project_module(module: object) -> bool:
    """A module imported from a project folder or the tests (not the package, not an installed one)."""
    path = getattr(module, "__file__", None)
    return bool(path) and _outside_installs(path)


@functools.cache
def _outside_installs(path: str) -> bool:
    resolved = str(Path(path).resolve())
    return not resolved.startswith(INSTALLED) and not resolved.startswith(PACKAGE_DIR)


def _logging_state() -> tuple:
    root = logging.getLogger()
    loggers = {name: (lg.level, lg.disabled, list(lg.handlers), lg.propagate)
               for name, lg in logging.Logger.manager.loggerDict.items() if isinstance(lg, logging.Logger)}
    return root.level, list(root.handlers), loggers, warnings.showwarning


def _restore_logging(state: tuple) -> None:
    level, handlers, loggers, showwarning = state
    root = logging.getLogger()
    for handler in root.handlers:
        if handler not in handlers:
            handler.close()
    root.handlers[:] = handlers
    root.setLevel(level)
    for name, (lvl, disabled, lg_handlers, propagate) in loggers.items():
        logger = logging.getLogger(name)
        logger.setLevel(lvl)
        logger.disabled = disabled
        logger.handlers[:] = lg_handlers
        logger.propagate = propagate
    logging.captureWarnings(False)
    warnings.showwarning = showwarning


def newest_run(pipeline_dir: Path) -> Path:
    """The last run folder of ``pipeline_dir`` (run ids sort by their start): where a test finds a
    run of some stages (``--until``), which leaves ``latest`` at the last whole run."""
    return max(p for p in Path(pipeline_dir).iterdir() if p.name[0].isdigit() and p.is_dir())
