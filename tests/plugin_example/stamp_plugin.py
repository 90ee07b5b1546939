"""A run-level output as a user writes one, outside the package: a hook that writes
``stamp.json`` into every run folder, on by default, configured by a top-level key of its own
(``stamp:``). Importing it registers the hook; a config lists it under ``plugins:``, or an
installed package declares it in the ``pipeline.hooks`` entry-point group.
"""

from __future__ import annotations

import json

from pydantic import BaseModel, ConfigDict, Field

from pipeline.hooks.protocol import RunEvent, RunHook
from pipeline.hooks.hook_registry import HookContext, register_hook


class StampConfig(BaseModel):
    """A stamp file in every run folder, saying how the run ended."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(True, description="Write the stamp when the run ends.")
    file: str = Field("stamp.json", pattern=r"^[A-Za-z0-9_.-]+$", description="Its name in the run folder.")
    note: str = Field("", description="Free text written into it.")


class StampHook(RunHook):
    def __init__(self, section: StampConfig, pipeline: str) -> None:
        self.file = section.file
        self.note = section.note
        self.pipeline = pipeline

    def run_finished(self, event: RunEvent) -> None:
        stamp = {"pipeline": self.pipeline, "run_id": event.run.run_id, "status": event.status, "note": self.note,
                 "stages": sorted(event.manifest.stages)}
        (event.run.run_dir / self.file).write_text(json.dumps(stamp), encoding="utf-8")


def stamp_hook(section: StampConfig, context: HookContext) -> StampHook | None:
    return StampHook(section, context.pipeline) if section.enabled else None


register_hook("stamp", stamp_hook, config_key="stamp", section=StampConfig, default=True)
