"""What every subcommand shares: the consoles, and the one place errors become exit codes.

Every exception that escapes a command goes through ``failure_of``, which maps it to the error
family's exit code (``errors.ExitCode``) and a one-paragraph message (lines, never a blank
one), printed on stderr, or as a JSON line with ``--log-format json``; tracebacks appear only
with ``--debug``. ``handle_errors`` applies it to each command; ``PipelineGroup`` applies it to
whatever still escapes (a command without the decorator, a parameter callback) and prints
click's usage errors as one paragraph with exit 2. Exit 1 ("internal error") is left for
exceptions no rule covers: bugs.

The rules for exceptions that are not ``PipelineError`` (the code that raises should convert;
these are the safety net): an ``OSError`` is exit 6 (storage) when it is a write failure (disk
full, quota, read-only file system, file too large) or names a path in the command's outputs
(``--output``, the runs folder: ``declare_outputs``), exit 5 when it is a network failure (a
cluster), else exit 3 (an input that cannot be read). ``MemoryError`` is exit 8.
``RecursionError`` while reading a config is exit 2 (nested too deeply); elsewhere it is a bug.

Nothing here prompts, so the same commands work at a terminal and in cron, systemd or
Kubernetes jobs.
"""

from __future__ import annotations

import errno
import functools
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.measure import Measurement
from rich.text import Text

from pipeline.core.errors import ExitCode, PipelineError
from pipeline.core.interrupts import Terminated

JSON_ERRORS = {"on": False}     # --log-format json: errors are JSON lines too

class _Stdout(Console):
    """stdout's console: a reader that went away (``| head``) is a ``BrokenPipeError`` for the
    error mapping (exit 141, nothing printed), not rich's ``SystemExit(1)``."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError(errno.EPIPE, "stdout was closed by its reader")


stdout = _Stdout(soft_wrap=True)
stderr = Console(stderr=True, soft_wrap=True, highlight=False)

# errno values only a write produces.
WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG})
# Parameters that name what a command writes; ``declare_outputs`` adds others (a config's runs_dir).
OUTPUT_PARAMS = ("output", "runs_dir")
OUTPUTS_KEY = "pipeline.outputs"
LONGEST_MESSAGE = 4000          # an internal error's text (a repr of a frame...) is cut here

# The config file argument and --set, shared by the commands that load a config.
config_argument = click.argument("config", type=click.Path(dir_okay=False, path_type=str))
set_option = click.option("--set", "overrides", multiple=True, metavar="KEY.PATH=VALUE",
                          help="Override a config value, e.g. --set stages.forest.params.n_estimators=500. Repeatable.")


def split_names(values: Sequence[str]) -> list[str]:
    return [name.strip() for value in values for name in value.split(",") if name.strip()]


@dataclass(frozen=True)
class Failure:
    """What a command's failure prints and returns: exit code, one-paragraph message, and the
    stage it names (for JSON logs)."""

    exit_code: int
    message: str
    stage: str | None = None
    label: str = "error"


def one_paragraph(text: str) -> str:
    """``text`` without blank lines or trailing spaces: several lines are fine (a config's
    problems, one per line); a blank line would end the paragraph."""
    return "\n".join(line.rstrip() for line in str(text).strip().splitlines() if line.strip())


def failure_of(exc: BaseException, *, outputs: Sequence[str] = (), config_path: str | None = None) -> Failure:
    """The exit code and message of any exception that escapes a command (see the module doc)."""
    if isinstance(exc, PipelineError):
        stage = getattr(exc, "stage", None)
        prefix = f"stage '{stage}': " if stage and not str(exc).startswith("stage '") else ""
        return Failure(exc.exit_code, one_paragraph(f"{prefix}{exc}"), stage)
    if isinstance(exc, Terminated):
        return Failure(ExitCode.TERMINATED, "terminated (SIGTERM)", label="stopped")
    if isinstance(exc, (KeyboardInterrupt, click.exceptions.Abort)):
        if isinstance(exc.__cause__, Terminated):
            return Failure(ExitCode.TERMINATED, "terminated (SIGTERM)", label="stopped")
        return Failure(ExitCode.INTERRUPTED, "interrupted", label="stopped")
    if isinstance(exc, MemoryError):
        return Failure(ExitCode.OUT_OF_MEMORY, one_paragraph(
            f"out of memory{': ' + str(exc) if str(exc) else ''}. The input or the work asked for more memory "
            "than this machine gives the process: give it more memory, or use the partitioned or cluster "
            "options (predict --partitioned, a cluster section) that work in pieces"))
    if isinstance(exc, RecursionError) and _raised_while_reading_config(exc):
        where = f"{config_path}: " if config_path else ""
        return Failure(ExitCode.CONFIG, f"{where}the config is nested too deeply to read (more levels than "
                                        "Python's recursion limit); flatten it")
    if isinstance(exc, OSError):
        return _os_failure(exc, outputs)
    text = one_paragraph(f"{type(exc).__name__}: {exc}")
    if len(text) > LONGEST_MESSAGE:
        text = text[:LONGEST_MESSAGE] + " ..."
    return Failure(ExitCode.INTERNAL,
                   f"{text} (this is a bug; run it again as `pipeline --debug COMMAND ...` for the traceback)",
                   label="internal error")


def _raised_while_reading_config(exc: BaseException) -> bool:
    tb = exc.__traceback__
    while tb is not None:
        module = str(tb.tb_frame.f_globals.get("__name__", ""))
        if module.startswith(("pipeline.config", "yaml")):
            return True
        tb = tb.tb_next
    return False


def _os_failure(exc: OSError, outputs: Sequence[str]) -> Failure:
    paths = [p for p in (exc.filename, exc.filename2) if p is not None]
    reason = exc.strerror or str(exc) or type(exc).__name__
    where = " -> ".join(map(str, paths))
    if exc.errno in WRITE_ERRNOS or any(_is_output(path, outputs) for path in paths):
        return Failure(ExitCode.STORAGE, f"cannot write {where or 'an output'}: {reason}")
    if isinstance(exc, (ConnectionError, TimeoutError)) or exc.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH):
        return Failure(ExitCode.BACKEND, f"a network connection failed: {type(exc).__name__}: {reason}")
    if exc.errno == errno.ENOMEM:
        return Failure(ExitCode.OUT_OF_MEMORY, f"out of memory: {reason}")
    return Failure(ExitCode.DATA, f"cannot read {where or 'an input'}: {reason}")


def _is_output(path: Any, outputs: Sequence[str]) -> bool:
    """Whether ``path`` is an output, inside one, or beside one (an atomic write's temporary file)."""
    try:
        target = Path(os.fsdecode(path)).resolve()
    except (OSError, RuntimeError, TypeError, ValueError):
        return False
    for output in outputs:
        out = Path(output).resolve()
        if target == out or out in target.parents or target.parent == out.parent and target.name.startswith(
                (out.name, "." + out.name)):
            return True
    return False


def declare_outputs(*paths: str | os.PathLike[str] | None) -> None:
    """Name paths the running command writes (beyond its --output and --runs-dir), so that an
    OSError on them that no code converted is a storage error (exit 6)."""
    ctx = click.get_current_context(silent=True)
    if ctx is not None:
        ctx.find_root().meta.setdefault(OUTPUTS_KEY, []).extend(os.fspath(p) for p in paths if p)


def _outputs_of(ctx: click.Context | None) -> list[str]:
    found: list[str] = []
    while ctx is not None:
        found += [str(ctx.params[name]) for name in OUTPUT_PARAMS if ctx.params.get(name)]
        found += ctx.meta.get(OUTPUTS_KEY, []) if ctx.parent is None else []
        ctx = ctx.parent
    return found


def report_failure(exc: BaseException, *, debug: bool = False, json_lines: bool | None = None,
                   ctx: click.Context | None = None) -> int:
    """Print ``exc`` as the error family says (one paragraph, or a JSON line) and return the exit code."""
    config = ctx.params.get("config") if ctx is not None else None
    failure = failure_of(exc, outputs=_outputs_of(ctx), config_path=config)
    if debug and failure.label != "stopped":
        stderr.print_exception(show_locals=False)
    emit_failure(failure, json_lines=JSON_ERRORS["on"] if json_lines is None else json_lines)
    return failure.exit_code


def emit_failure(failure: Failure, *, json_lines: bool) -> None:
    if json_lines:
        from pipeline.cli.log_output import json_line

        stopped = failure.label == "stopped"
        message = failure.message if stopped or failure.label == "error" else f"{failure.label}: {failure.message}"
        print(json_line(message, level="warning" if stopped else "error", event="error", stage=failure.stage,
                        exit_code=failure.exit_code), file=sys.stderr, flush=True)
        return
    style = "yellow" if failure.label == "stopped" else "bold red"
    if failure.label == "stopped":
        stderr.print(Text(failure.message, style=style))
    else:
        stderr.print(Text(f"{failure.label}:", style=style) + Text(f" {failure.message}"))


def handle_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Map every exception of a command to its exit code and one-paragraph message."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        ctx = click.get_current_context()
        try:
            return fn(*args, **kwargs)
        except (click.exceptions.Exit, click.ClickException, SystemExit):
            raise                          # usage errors: PipelineGroup prints them
        except BaseException as exc:  # noqa: BLE001 - the one mapping of failures to exit codes
            if stdout_closed(exc):
                raise                      # PipelineGroup: exit 141, nothing more said
            sys.exit(report_failure(exc, debug=_debug(ctx), ctx=ctx))

    return wrapper


def _debug(ctx: click.Context | None) -> bool:
    return bool(ctx is not None and ctx.find_root().params.get("debug", False))


# ------------------------------------------------------------------ the group: usage errors
class PipelineGroup(click.Group):
    """The root group: click's usage errors as one paragraph (exit 2), and the error mapping
    for anything a command let escape."""

    # Click turns an EPIPE inside ``main`` into exit 1 before ``main``'s caller sees it; these two
    # are everything ``main`` runs (parsing, --help, the command), so each turns it into 141 first.
    def make_context(self, *args: Any, **kwargs: Any) -> click.Context:
        try:
            return super().make_context(*args, **kwargs)
        except OSError as exc:
            _exit_if_stdout_closed(exc)
            raise

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except OSError as exc:
            _exit_if_stdout_closed(exc)
            raise

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True, **extra: Any) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        argv = list(sys.argv[1:] if args is None else args)
        json_lines = _asks_for_json(argv)
        try:
            result = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except SystemExit:
            raise
        except click.exceptions.NoArgsIsHelpError as exc:
            exc.show()
            code = ExitCode.CONFIG
        except click.ClickException as exc:
            code = ExitCode.CONFIG
            emit_failure(Failure(code, usage_message(exc)), json_lines=json_lines)
        except OSError as exc:
            if not stdout_closed(exc):
                code = report_failure(exc, debug="--debug" in argv, json_lines=json_lines,
                                      ctx=_innermost_context(exc))
            else:                          # the reader of stdout went away (`| head`)
                code = ExitCode.BROKEN_PIPE
                _silence_stdout()
        except BaseException as exc:  # noqa: BLE001 - the one mapping, for what no command caught
            code = report_failure(exc, debug="--debug" in argv, json_lines=json_lines, ctx=_innermost_context(exc))
        else:
            code = result if isinstance(result, int) else ExitCode.OK
        sys.exit(code)


def _innermost_context(exc: BaseException) -> click.Context | None:
    """The context of the command that raised (its outputs and config), from the traceback:
    click has closed it by the time the exception reaches the group."""
    found, tb = None, exc.__traceback__
    while tb is not None:
        candidate = tb.tb_frame.f_locals.get("ctx")
        if isinstance(candidate, click.Context):
            found = candidate
        tb = tb.tb_next
    return found


def usage_message(exc: click.ClickException) -> str:
    """``no such option: --bogus (see 'pipeline run --help')``: click's message and where help is."""
    text = one_paragraph(exc.format_message()).rstrip(".")
    text = text[:1].lower() + text[1:]
    ctx = getattr(exc, "ctx", None)
    return f"{text} (see '{ctx.command_path} --help')" if ctx is not None else text


def _asks_for_json(argv: Sequence[str]) -> bool:
    pairs = zip(argv, [*argv[1:], ""])
    return "--log-format=json" in argv or any(a == "--log-format" and b == "json" for a, b in pairs)


def stdout_closed(exc: BaseException) -> bool:
    """Whether ``exc`` is stdout's reader going away (EPIPE), not a broken network connection:
    a pipe whose reading end is closed polls as an error; when that cannot be asked (stdout is
    not a file), an EPIPE is taken to be stdout's."""
    if not isinstance(exc, OSError) or exc.errno != errno.EPIPE:
        return False
    try:
        import select

        poller = select.poll()
        poller.register(sys.__stdout__.fileno(), select.POLLOUT)
        events = poller.poll(0)
    except (AttributeError, OSError, ValueError):
        return True
    return any(flags & (select.POLLERR | select.POLLHUP) for _, flags in events)


def _exit_if_stdout_closed(exc: OSError) -> None:
    """Exit 141, saying nothing more, when ``exc`` is stdout's reader going away."""
    if stdout_closed(exc):
        _silence_stdout()
        sys.exit(ExitCode.BROKEN_PIPE)


def _silence_stdout() -> None:
    """After a broken pipe, the interpreter's final flush of stdout must not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


# ------------------------------------------------------------------ output
def print_wide(renderable: Any, console: Console | None = None) -> None:
    """Fit a terminal; elsewhere (pipes, cron logs, COLUMNS=80) print at the renderable's full
    width, so no header or cell is cut to ``log_lo…``."""
    console = console or stdout
    if console.is_terminal:
        console.print(renderable)
        return
    natural = Measurement.get(console, console.options.update_width(10_000), renderable).maximum
    width = console.width
    console.width = max(width, natural)      # Console.print never goes wider than the console
    try:
        console.print(renderable)
    finally:
        console.width = width


def metric_cell(value: Any) -> str:
    """A metric in a table: four decimals, or a dash where it is undefined (null in
    metrics.json, NaN or infinity in memory), so a run and its cached rerun print alike."""
    from pipeline.runs.record import as_number

    number = as_number(value)
    return "—" if number is None else f"{number:.4f}"


def metrics_setting(metrics: dict[str, Any]) -> str:
    """``, threshold 0.5`` for a binary evaluation's table title; nothing for a multiclass or
    regression one, where no threshold applies (an evaluation without ``task`` is binary)."""
    task = metrics.get("task")
    kind = task.get("kind", "binary") if isinstance(task, dict) else "binary"
    return f", threshold {metrics.get('threshold')}" if kind == "binary" else ""


THRESHOLD = click.FloatRange(0.0, 1.0, min_open=True, max_open=True)


def scoring_options(threshold_note: str = "") -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The options of every command that scores with a run's model (``predict``, ``serve``):
    where the runs are, which pipeline, the device and a binary model's threshold."""
    options = [
        click.option("--runs-dir", default="runs", show_default=True, type=click.Path(file_okay=False, path_type=str),
                     help="Where run folders are."),
        click.option("--pipeline", "pipeline_name", metavar="NAME",
                     help="Pipeline (config name) under --runs-dir; needed only when it holds several."),
        click.option("--device", type=click.Choice(["auto", "cpu", "gpu"]), default="auto", show_default=True,
                     help="Where to score."),
        click.option("--threshold", type=THRESHOLD, metavar="T",
                     help="Binary models: score at or above which prediction is 1 (default: the run's evaluate "
                          f"threshold, else 0.5).{threshold_note}"),
    ]

    def apply(fn: Callable[..., Any]) -> Callable[..., Any]:
        for option in reversed(options):
            fn = option(fn)
        return fn

    return apply

