"""The pydantic model of a pipeline YAML file.

The stage union is built from the stage registry when a config is validated
(``config_model``), so a stage kind registered by a plugin module is validated, listed by
``pipeline schema`` and drawn by ``pipeline dag`` like a built-in one, with no edit here.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator

from pipeline.stages import STAGE_KINDS

STAGE_NAME = r"^[A-Za-z_][A-Za-z0-9_-]*$"



def stage_union() -> Any:
    """The tagged union of every registered stage kind's params model (``kind`` picks one)."""
    specs = tuple(kind.spec for kind in STAGE_KINDS.values())
    return Annotated[Union[specs], Field(discriminator="kind")]  # type: ignore[valid-type]


AnyStage = stage_union()          # the built-in kinds; plugins' kinds join in ``config_model``
STAGES_DESCRIPTION = "Stages by name."


class ClusterConfig(BaseModel):
    """Where stages run: a local Dask cluster the run starts and stops, or an existing one."""

    model_config = ConfigDict(extra="forbid")

    address: str | None = Field(
        None, description="Scheduler of an existing cluster (tcp://host:8786); never shut down by the pipeline.")
    n_workers: int | None = Field(
        None, ge=1, description="Local cluster workers. Default: 2 on CPU, one per visible GPU on GPU.")
    threads_per_worker: int = Field(1, ge=1, description="Threads per local worker.")
    memory_limit: str | int | None = Field(
        "auto", description="Per local worker, e.g. 2GiB; past it Dask spills to disk, then pauses the worker.")
    connect_timeout: float = Field(10.0, gt=0, description="Seconds to wait for the scheduler before failing.")
    CUDA_VISIBLE_DEVICES: str | list[int] | None = Field(
        None, description="GPU: the GPUs to start workers on (one worker per GPU).")
    rmm_pool_size: str | None = Field(None, description="GPU: RMM pool per worker, e.g. 24GB.")
    device_memory_limit: str | None = Field(None, description="GPU: spill device memory to host past this.")
    enable_cudf_spill: bool = Field(False, description="GPU: let cuDF spill to host memory.")
    protocol: Literal["tcp", "ucx"] | None = Field(None, description="GPU: worker communication protocol.")

    @property
    def is_local(self) -> bool:
        return self.address is None


class PipelineConfig(BaseModel):
    """A pipeline: a name, where it runs, and its stages (a DAG through their ``inputs``)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$", description="Pipeline name; runs go to <runs_dir>/<name>/.")
    device: Literal["auto", "cpu", "gpu"] = Field(
        "auto", description="auto picks the GPU when NVML sees one and RAPIDS imports; gpu without one is an error."
    )
    seed: int = Field(42, description="Seed for splits and models.")
    runs_dir: str = Field("runs", description="Where run folders are written (relative to the working directory).")
    description: str = Field("", description="Free text.")
    plugins: list[str] = Field(
        default_factory=list,
        description="Modules imported before the config is validated, which register stage kinds and models "
                    "(modules beside the config file import too).")
    stages: dict[str, AnyStage] = Field(min_length=1, description=STAGES_DESCRIPTION)
    cluster: ClusterConfig | None = Field(
        None, description="Run stages on a Dask cluster (local or at an address); absent = in this process.")

    @field_validator("stages")
    @classmethod
    def _stage_names(cls, stages: dict[str, object]) -> dict[str, object]:
        import re

        bad = [n for n in stages if not re.match(STAGE_NAME, n)]
        if bad:
            raise ValueError(f"stage names must match {STAGE_NAME} (letters, digits, _ and -): {bad}")
        return stages

    def inputs_of(self) -> dict[str, list[str]]:
        return {name: list(stage.inputs) for name, stage in self.stages.items()}


_models: dict[tuple[tuple[str, int], ...], type[PipelineConfig]] = {}


def config_model() -> type[PipelineConfig]:
    """``PipelineConfig`` with every stage kind registered now (one class per set of kinds)."""
    key = tuple((name, id(kind.spec)) for name, kind in STAGE_KINDS.items())
    if key == _BUILT_IN:
        return PipelineConfig
    if key not in _models:
        _models[key] = create_model(
            "PipelineConfig", __base__=PipelineConfig, __module__=__name__,
            stages=(dict[str, stage_union()], Field(min_length=1, description=STAGES_DESCRIPTION)))
    return _models[key]


_BUILT_IN = tuple((name, id(kind.spec)) for name, kind in STAGE_KINDS.items())


def json_schema() -> dict:
    """JSON Schema of the config file, for editors (YAML language servers read it)."""
    schema = config_model().model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "pipeline config"
    return schema
