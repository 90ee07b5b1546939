"""The pydantic model of a pipeline YAML file.

The stage union is built from the stage registry when a config is validated
(``config_model``), so a stage kind registered by a plugin module is validated, listed by
``pipeline schema`` and drawn by ``pipeline dag`` like a built-in one, with no edit here; a
feature op registered by a plugin joins the ``features`` stage's ``ops`` the same way
(``StageSpec.validating_model``).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Union

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, WithJsonSchema, create_model, field_validator

from pipeline.usage.costs import Budget
from pipeline.core.sizes import DEFAULT_CACHE_SIZE, parse_size
from pipeline.stages import STAGE_KINDS

# Names become path components: <runs_dir>/<name>/ and <run>/<stage>/. A plain folder name
# cannot leave its parent (no "/", no ".."), is never hidden (no leading dot) and stays short.
NAME_MAX_LENGTH = 100
PIPELINE_NAME = r"[A-Za-z0-9_][A-Za-z0-9_.-]*"
STAGE_NAME = r"[A-Za-z_][A-Za-z0-9_-]*"        # no dots either: a stage name is a --set key
MODULE_NAME = r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*"
SEED_LIMIT = 2**32                             # NumPy and scikit-learn seeds: 0 .. 2**32 - 1
MAX_LOCAL_WORKERS = 1024


def _plain(pattern: str, value: str) -> bool:
    return len(value) <= NAME_MAX_LENGTH and re.fullmatch(pattern, value) is not None


def check_pipeline_name(name: str) -> str:
    if not _plain(PIPELINE_NAME, name):
        raise ValueError(
            f"{name!r} is not a plain folder name: runs go to <runs_dir>/<name>/, so a name is letters, "
            f"digits, _, . and -, starts with a letter, digit or _, and has at most {NAME_MAX_LENGTH} characters")
    return name


def check_stage_name(name: str) -> str:
    if not _plain(STAGE_NAME, name):
        raise ValueError(
            f"stage name {name!r} is not a plain name: letters, digits, _ and -, starting with a letter or _, "
            f"at most {NAME_MAX_LENGTH} characters (it names the stage's folder in the run folder and is a "
            "key in --set paths)")
    return name


def is_module_name(name: str) -> bool:
    return re.fullmatch(MODULE_NAME, name) is not None


def check_module_name(name: str) -> str:
    if not is_module_name(name):
        raise ValueError(f"{name!r} is not a module name (dotted Python identifiers, e.g. my_stages or "
                         "company.pipeline_plugins)")
    return name


def check_dask_size(value: Any, keywords: tuple[str, ...] = ("auto",)) -> Any:
    """A size Dask or dask-cuda reads (bytes, "2GiB", a fraction such as "0.5", or a keyword),
    refused here rather than when the cluster starts."""
    if value is None or (isinstance(value, str) and value.strip().lower() in keywords):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        size = value
    else:
        from dask.utils import parse_bytes

        try:
            size = -1 if str(value).strip().startswith("-") else parse_bytes(value)
        except (TypeError, ValueError):
            size = -1
    if size < 0:
        raise ValueError(f"{value!r} is not a size: give bytes, a number with a unit (500MB, 2GiB) "
                         f"or {' / '.join(keywords)}")
    return value


StageName = Annotated[str, AfterValidator(check_stage_name),
                      WithJsonSchema({"type": "string", "pattern": f"^{STAGE_NAME}$", "maxLength": NAME_MAX_LENGTH})]
ModuleName = Annotated[str, AfterValidator(check_module_name)]


def stage_union() -> Any:
    """The tagged union of every registered stage kind's params model (``kind`` picks one), each
    as it validates with what is registered now (``StageSpec.validating_model``: a plugin's
    feature ops join the ``features`` stage's ``ops``)."""
    specs = tuple(kind.spec.validating_model() for kind in STAGE_KINDS.values())
    return Annotated[Union[specs], Field(discriminator="kind")]  # type: ignore[valid-type]


AnyStage = stage_union()          # the built-in kinds; plugins' kinds join in ``config_model``
STAGES_DESCRIPTION = "Stages by name."


class ClusterConfig(BaseModel):
    """Where stages run: a local Dask cluster the run starts and stops, or an existing one."""

    model_config = ConfigDict(extra="forbid")

    address: str | None = Field(
        None, description="Scheduler of an existing cluster (tcp://host:8786); never shut down by the pipeline.")
    n_workers: int | None = Field(
        None, ge=1, le=MAX_LOCAL_WORKERS,
        description="Local cluster workers. Default: 2 on CPU, one per visible GPU on GPU.")
    threads_per_worker: int = Field(1, ge=1, le=MAX_LOCAL_WORKERS, description="Threads per local worker.")
    memory_limit: str | int | None = Field(
        "auto", description="Per local worker, e.g. 2GiB; past it Dask spills to disk, then pauses the worker.")
    connect_timeout: float = Field(10.0, gt=0, le=86400, allow_inf_nan=False,
                                   description="Seconds to wait for the scheduler before failing.")
    CUDA_VISIBLE_DEVICES: str | list[int] | None = Field(
        None, description="GPU: the GPUs to start workers on (one worker per GPU).")
    rmm_pool_size: str | None = Field(None, description="GPU: RMM pool per worker, e.g. 24GB.")
    device_memory_limit: str | None = Field(None, description="GPU: spill device memory to host past this.")
    enable_cudf_spill: bool = Field(False, description="GPU: let cuDF spill to host memory.")
    protocol: Literal["tcp", "ucx"] | None = Field(None, description="GPU: worker communication protocol.")

    @field_validator("address")
    @classmethod
    def _scheduler_address(cls, value: str | None) -> str | None:
        from pipeline.backends.cluster import scheduler_address_problem

        problem = scheduler_address_problem(value) if value is not None else None
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("memory_limit")
    @classmethod
    def _host_size(cls, value: str | int | None) -> str | int | None:
        return check_dask_size(value)

    @field_validator("rmm_pool_size", "device_memory_limit")
    @classmethod
    def _device_size(cls, value: str | None) -> str | None:
        return check_dask_size(value, ("auto", "default"))

    @field_validator("CUDA_VISIBLE_DEVICES")
    @classmethod
    def _device_numbers(cls, value: str | list[int] | None) -> str | list[int] | None:
        if isinstance(value, list) and any(number < 0 for number in value):
            raise ValueError(f"GPU numbers are 0 or more: {value}")
        return value

    @property
    def is_local(self) -> bool:
        return self.address is None


class CacheConfig(BaseModel):
    """The stage cache's disk budget (``pipeline.cache``): least recently used entries go first."""

    model_config = ConfigDict(extra="forbid")

    max_size: int | str = Field(
        DEFAULT_CACHE_SIZE, description="Most bytes the pipeline's stage cache keeps after a run (5GiB, 500MB, bytes). "
                            "0 keeps only the last run's entries; none never evicts.")

    @field_validator("max_size", mode="before")
    @classmethod
    def _size(cls, value: object) -> int | str:
        parse_size(value)
        return "none" if value is None else value  # type: ignore[return-value]


class ReportConfig(BaseModel):
    """The run report (``pipeline.report``): report.html in every run folder."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(True, description="Write report.html into the run folder when the run ends "
                                            "(`pipeline report RUN` builds it later either way).")


# A rate: a finite number of 0 or more.
Rate = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class CostConfig(BaseModel):
    """Rates a run's usage is priced at (``pipeline.usage.costs``); environment variables override them."""

    model_config = ConfigDict(extra="forbid")

    gpu_hour: Rate | dict[str, Rate] | None = Field(
        None, description="Per GPU-hour: one rate, or rates by a part of the GPU's name "
                          "({H100: 4.0, A10G: 1.2, default: 2.0}); $PIPELINE_COST_GPU_HOUR sets the default.")
    cpu_core_hour: Rate = Field(0.0, description="Per CPU-core-hour (CPU seconds used); "
                                                        "$PIPELINE_COST_CPU_CORE_HOUR.")
    memory_gb_hour: Rate = Field(0.0, description="Per GB-hour of peak host memory; "
                                                         "$PIPELINE_COST_MEMORY_GB_HOUR.")
    currency: str = Field("USD", min_length=1, max_length=12, description="Shown with the costs; "
                                                                           "$PIPELINE_COST_CURRENCY.")


class MlflowConfig(BaseModel):
    """Where ``pipeline.tracking.MlflowHook`` logs each run."""

    model_config = ConfigDict(extra="forbid")

    uri: str | None = Field(None, min_length=1, description="Tracking URI (http://host:5000, sqlite:///mlflow.db, "
                                                            "databricks); absent: $MLFLOW_TRACKING_URI or MLflow's default.")
    experiment: str | None = Field(None, min_length=1, description="Experiment name; absent: the pipeline's name.")
    artifact_location: str | None = Field(None, min_length=1, description="Where a new experiment keeps artifacts "
                                          "(absent: the server's default; a local store's is ./mlruns).")
    artifacts: bool = Field(True, description="Also upload report.html, manifest.json, config.yaml and the "
                                              "exported models.")


class TrackingConfig(BaseModel):
    """Tracking servers each run is sent to (hooks on the run; never a reason for a run to fail)."""

    model_config = ConfigDict(extra="forbid")

    mlflow: MlflowConfig | None = Field(None, description="Log runs to MLflow (the mlflow extra).")


class PipelineConfig(BaseModel):
    """A pipeline: a name, where it runs, and its stages (a DAG through their ``inputs``)."""

    model_config = ConfigDict(extra="forbid")

    name: Annotated[str, AfterValidator(check_pipeline_name)] = Field(
        description="Pipeline name; runs go to <runs_dir>/<name>/, so it is a plain folder name.",
        json_schema_extra={"pattern": f"^{PIPELINE_NAME}$", "maxLength": NAME_MAX_LENGTH})
    device: Literal["auto", "cpu", "gpu"] = Field(
        "auto", description="auto picks the GPU when NVML sees one and RAPIDS imports; gpu without one is an error."
    )
    seed: int = Field(42, ge=0, lt=SEED_LIMIT, description="Seed for splits and models: 0 to 2**32 - 1.")
    runs_dir: str = Field("runs", min_length=1,
                          description="Where run folders are written (relative to the working directory).")
    description: str = Field("", description="Free text.")
    plugins: list[ModuleName] = Field(
        default_factory=list,
        description="Modules imported before the config is validated, which register stage kinds, feature ops "
                    "and models (modules beside the config file import too).")
    stages: dict[StageName, AnyStage] = Field(min_length=1, description=STAGES_DESCRIPTION)
    cluster: ClusterConfig | None = Field(
        None, description="Run stages on a Dask cluster (local or at an address); absent = in this process.")
    cache: CacheConfig = Field(default_factory=CacheConfig, description="The stage cache's size limit.")
    report: ReportConfig = Field(default_factory=ReportConfig, description="The HTML report of each run.")
    cost: CostConfig = Field(default_factory=CostConfig, description="Rates that price each stage's and run's "
                                                                     "usage (none set: no cost is recorded).")
    tracking: TrackingConfig = Field(default_factory=TrackingConfig,
                                     description="Send each run to a tracking server (MLflow).")
    budget: Budget | None = Field(None, description="Caps on the run's cost, GPU-hours and wall time, enforced while "
                                                    "it runs (exit 9); a stage's own budget: caps that stage.")

    def inputs_of(self) -> dict[str, list[str]]:
        return {name: list(stage.inputs) for name, stage in self.stages.items()}


_models: dict[tuple[tuple[str, int], ...], type[PipelineConfig]] = {}


def _registered() -> tuple[tuple[str, int], ...]:
    """What the stage union is built from now: each kind's validating model."""
    return tuple((name, id(kind.spec.validating_model())) for name, kind in STAGE_KINDS.items())


def config_model() -> type[PipelineConfig]:
    """``PipelineConfig`` with every stage kind (and feature op) registered now (one class per
    set of them)."""
    key = _registered()
    if key == _BUILT_IN:
        return PipelineConfig
    if key not in _models:
        _models[key] = create_model(
            "PipelineConfig", __base__=PipelineConfig, __module__=__name__,
            stages=(dict[StageName, stage_union()], Field(min_length=1, description=STAGES_DESCRIPTION)))
    return _models[key]


_BUILT_IN = _registered()


def json_schema() -> dict:
    """JSON Schema of the config file, for editors (YAML language servers read it)."""
    schema = config_model().model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "pipeline config"
    return schema
