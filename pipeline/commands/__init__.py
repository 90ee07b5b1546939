"""Subcommands that live in their own modules, registered on the ``pipeline`` click group.

Each entry is ``module:attribute`` of a click command or group; modules are imported when
the CLI starts (they keep heavy imports inside their functions).
"""

from __future__ import annotations

import importlib

import click

COMMANDS: tuple[str, ...] = (
    "pipeline.commands.runs:runs",
    "pipeline.commands.cache:cache",
    "pipeline.commands.predict:predict",
    "pipeline.commands.report:report",
    "pipeline.commands.parity:parity",
    "pipeline.commands.init:init",
)


def register(group: click.Group) -> None:
    for target in COMMANDS:
        module_name, _, attribute = target.partition(":")
        group.add_command(getattr(importlib.import_module(module_name), attribute))
