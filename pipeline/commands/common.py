"""What every subcommand shares: the consoles, and errors mapped to exit codes.

Every PipelineError becomes a one-paragraph message on stderr and its documented exit code
(see ``errors.ExitCode``); tracebacks appear only with ``--debug``. Nothing here prompts, so
the same commands work at a terminal and in cron, systemd or Kubernetes jobs.
"""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Callable, Sequence
from typing import Any

import click
from rich.console import Console

from pipeline.errors import ExitCode, PipelineError, Terminated

JSON_ERRORS = {"on": False}     # --log-format json: errors are JSON lines too

stdout = Console(soft_wrap=True)
stderr = Console(stderr=True, soft_wrap=True, highlight=False)


def split_names(values: Sequence[str]) -> list[str]:
    return [name.strip() for value in values for name in value.split(",") if name.strip()]


def handle_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Map errors to exit codes and one-paragraph messages; tracebacks only with --debug."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        debug = click.get_current_context().find_root().params.get("debug", False)
        try:
            return fn(*args, **kwargs)
        except PipelineError as exc:
            if debug:
                stderr.print_exception()
            stage = getattr(exc, "stage", None)
            prefix = f"stage '{stage}': " if stage and not str(exc).startswith("stage '") else ""
            if JSON_ERRORS["on"]:
                logging.getLogger("pipeline").error("%s%s", prefix, exc, extra={
                    "event": "error", "stage": stage, "exit_code": exc.exit_code})
            else:
                stderr.print(f"[bold red]error:[/] {prefix}{exc}", markup=True, highlight=False)
            sys.exit(exc.exit_code)
        except Terminated:
            stderr.print("[yellow]terminated (SIGTERM)[/]")
            sys.exit(ExitCode.TERMINATED)
        except KeyboardInterrupt:
            stderr.print("[yellow]interrupted[/]")
            sys.exit(ExitCode.INTERRUPTED)
        except click.exceptions.Exit:
            raise
        except Exception as exc:  # noqa: BLE001 - last resort: a bug, reported as one
            if debug:
                stderr.print_exception()
            else:
                stderr.print(f"[bold red]internal error:[/] {type(exc).__name__}: {exc} "
                             "(this is a bug; run with --debug for the traceback)")
            sys.exit(ExitCode.INTERNAL)

    return wrapper




