"""What every stage kind shares: the params model base, the run context, the registry.

A stage kind is a pydantic model of its YAML block (``kind`` is the discriminator) plus a
plain function ``run(spec, ctx, inputs) -> output``. Outputs are ordinary Python objects
(frames, ``SplitData``, ``FeatureSet``, ``TrainedModel``...) so the same functions serve
the runner and library users.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from contextlib import AbstractContextManager, nullcontext
from typing import Any, ClassVar, Protocol

from pydantic import BaseModel, ConfigDict, Field

from pipeline.backends import Backend


class StageSpec(BaseModel):
    """Fields every stage has. Subclasses add ``kind: Literal[...]`` and their parameters."""

    model_config = ConfigDict(extra="forbid")

    inputs: list[str] = Field(default_factory=list, description="Names of the stages whose outputs this stage reads.")
    description: str = Field("", description="Free text shown by `pipeline dag`.")

    # Stage kinds this kind accepts as inputs (None = anything), and how many.
    accepts: ClassVar[tuple[str, ...] | None] = None
    min_inputs: ClassVar[int] = 0
    max_inputs: ClassVar[int | None] = None


class StageProgress(Protocol):
    """How a long stage reports from inside: lines (one per epoch) and a bar within a step."""

    def message(self, text: str) -> None: ...
    def bar(self, total: int, description: str) -> AbstractContextManager[Callable[[int], None]]: ...


class LogProgress:
    """Lines as log records and no bar: for log files, scheduled jobs and library use."""

    def __init__(self, logger: logging.Logger, prefix: str = "") -> None:
        self.logger = logger
        self.prefix = prefix

    def message(self, text: str) -> None:
        self.logger.info("%s%s", self.prefix, text)

    def bar(self, total: int, description: str) -> AbstractContextManager[Callable[[int], None]]:
        return nullcontext(lambda n: None)


@dataclass
class StageContext:
    """What a running stage may use besides its inputs."""

    backend: Backend
    seed: int
    stage: str
    artifacts_dir: Path | None = None
    logger: logging.Logger = field(default_factory=lambda: logging.getLogger("pipeline"))
    # Stages record facts for the manifest here (row counts, hand-offs and the bytes they copied).
    facts: dict[str, Any] = field(default_factory=dict)
    progress: StageProgress | None = None

    def __post_init__(self) -> None:
        if self.progress is None:
            self.progress = LogProgress(self.logger, prefix=f"{self.stage}: ")

    def artifact_path(self, *parts: str) -> Path:
        """A path inside this run's artifact folder (created on demand)."""
        if self.artifacts_dir is None:
            raise RuntimeError(f"stage '{self.stage}' writes artifacts but the run has no artifact folder")
        path = self.artifacts_dir.joinpath(*parts)
        path.parent.mkdir(parents=True, exist_ok=True)
        return path


RunFunction = Callable[[Any, StageContext, Mapping[str, Any]], Any]


@dataclass(frozen=True)
class StageKind:
    kind: str
    spec: type[StageSpec]
    run: RunFunction


STAGE_KINDS: dict[str, StageKind] = {}


def register_stage(kind: str, spec: type[StageSpec]) -> Callable[[RunFunction], RunFunction]:
    """Decorator: make ``run`` the implementation of stage ``kind`` configured by ``spec``."""

    def wrap(run: RunFunction) -> RunFunction:
        STAGE_KINDS[kind] = StageKind(kind, spec, run)
        return run

    return wrap


def only_input(inputs: Mapping[str, Any]) -> Any:
    (value,) = inputs.values()
    return value
