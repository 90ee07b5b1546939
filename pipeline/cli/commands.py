"""Subcommands that live in their own modules, registered on the ``pipeline`` click group.

Each entry is ``module:attribute`` of a click command or group; modules are imported when
the CLI starts (they keep heavy imports inside their functions).
"""

from __future__ import annotations

import importlib

import click

COMMANDS: tuple[str, ...] = (
    "pipeline.cli.runs_command:runs",
    "pipeline.cli.cache_command:cache",
    "pipeline.cli.predict_command:predict",
    "pipeline.cli.serve_command:serve",
    "pipeline.cli.report_command:report",
    "pipeline.cli.parity_command:parity",
    "pipeline.cli.init_command:init",
)


def register(group: click.Group) -> None:
    for target in COMMANDS:
        module_name, _, attribute = target.partition(":")
        group.add_command(getattr(importlib.import_module(module_name), attribute))
