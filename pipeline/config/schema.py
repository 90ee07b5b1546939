"""The pydantic model of a pipeline YAML file.

The stage union is built from the stage registry when a config is validated
(``config_model``), so a stage kind registered by a plugin module is validated, listed by
``pipeline schema`` and drawn by ``pipeline dag`` like a built-in one, with no edit here; a
feature op registered by a plugin joins the ``features`` stage's ``ops`` the same way
(``StageSpec.validating_model``).

The same goes for the top-level sections of run-level outputs (``report``, ``cost``,
``tracking``, ``budget``, and any a plugin's hook owns): no section is named here. Each hook
registers the key it owns with its pydantic model (``pipeline.hooks.hook_registry``), and the
model is built with every registered section, the package's own at import
(``pipeline.config.run_outputs``) and plugins' in ``config_model``.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Union

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, WithJsonSchema, create_model, field_validator

from pipeline.config import run_outputs  # registers the package's run-level outputs and their sections
from pipeline.core.errors import ConfigError, ConfigIssue
from pipeline.core.plugins import check_module_name
from pipeline.core.seeds import SEED_LIMIT
from pipeline.core.sizes import DEFAULT_CACHE_SIZE, parse_size
from pipeline.hooks.hook_registry import HookRegistration, config_sections, reserve_config_keys
from pipeline.stages import STAGE_KINDS

# Names become path components: <runs_dir>/<name>/ and <run>/<stage>/. A plain folder name
# cannot leave its parent (no "/", no ".."), is never hidden (no leading dot) and stays short.
NAME_MAX_LENGTH = 100
PIPELINE_NAME = r"[A-Za-z0-9_][A-Za-z0-9_.-]*"
STAGE_NAME = r"[A-Za-z_][A-Za-z0-9_-]*"        # no dots either: a stage name is a --set key
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


# The least memory_limit a local worker may be given: below it the nanny restarts it forever.
MIN_WORKER_MEMORY = 512 * 2**20


def _plain_number(value: Any) -> float | None:
    """A memory limit written as a bare number (``1.5``, ``"0.5"``), or None (a size with a unit, auto)."""
    if isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _is_share(value: Any) -> bool:
    """Whether a memory limit is a share of the machine's memory (a number up to 1: 0.25, "0.5"),
    as Dask reads it (``distributed.worker_memory.parse_memory_limit``)."""
    number = _plain_number(value)
    return number is not None and 0 < number <= 1


def _bytes(value: Any) -> int | None:
    """A checked size in bytes (None for a keyword; 0: no limit)."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    from dask.utils import parse_bytes

    try:
        return parse_bytes(value)
    except (TypeError, ValueError):
        return None


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
    memory_limit: str | int | float | None = Field(
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
        from pipeline.backends.clusters.connect import scheduler_address_problem

        problem = scheduler_address_problem(value) if value is not None else None
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("memory_limit")
    @classmethod
    def _host_size(cls, value: str | int | float | None) -> str | int | float | None:
        value = check_dask_size(value)
        number = _plain_number(value)
        if number is not None and number > 1 and not float(number).is_integer():
            raise ValueError(f"{value!r} is neither a share of the machine's memory (a number up to 1: 0.25) nor a "
                             "size (a whole number of bytes, or a number with a unit: 2GiB)")
        size = None if _is_share(value) else _bytes(value)
        if size is not None and 0 < size < MIN_WORKER_MEMORY:
            raise ValueError(f"{value!r} is less than a worker needs: a worker process alone holds about 200 MiB "
                             "(Python, pandas, the model libraries), and Dask restarts a worker past 95% of its "
                             "limit, so it would restart forever and the run never end; give at least 512MiB "
                             "(2GiB or more for real data), a share of the machine's memory (0.25), or auto")
        return value

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


class PipelineCore(BaseModel):
    """The keys that are the pipeline's own: its name, where it runs, its stages, its cache."""

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
        description="Modules imported before the config is validated, which register stage kinds, feature ops, "
                    "models and run hooks (modules beside the config file import too).")
    stages: dict[StageName, AnyStage] = Field(min_length=1, description=STAGES_DESCRIPTION)
    cluster: ClusterConfig | None = Field(
        None, description="Run stages on a Dask cluster (local or at an address); absent = in this process.")
    cache: CacheConfig = Field(default_factory=CacheConfig, description="The stage cache's size limit.")

    def inputs_of(self) -> dict[str, list[str]]:
        return {name: list(stage.inputs) for name, stage in self.stages.items()}


reserve_config_keys(PipelineCore.model_fields)


def section_fields(sections: list[HookRegistration]) -> dict[str, Any]:
    """The config fields of hooks' sections: the model with its defaults when the hook is on by
    default (``default=True``), else ``None`` when the key is absent."""
    fields: dict[str, Any] = {}
    for hook in sections:
        key, model = hook.config_key, hook.section
        assert key is not None and model is not None
        if key in PipelineCore.model_fields:
            raise ConfigError([ConfigIssue(key, f"hook '{hook.name}' claims the config key '{key}', which is the "
                                                "pipeline config's own")])
        description = hook.description or None
        if hook.default:
            fields[key] = (model, Field(default_factory=model, description=description))
        else:
            fields[key] = (model | None, Field(None, description=description))
    return fields


def _section_key(sections: list[HookRegistration]) -> tuple[tuple[str, int, bool, str], ...]:
    return tuple((h.config_key or "", id(h.section), h.default, h.description) for h in sections)


# The package's own sections (a plugin registered before this module was imported is not one).
_BUILT_IN_SECTIONS = [h for h in config_sections() if h.factory.__module__ in run_outputs.MODULES]


class PipelineConfig(create_model("PipelineConfig", __base__=PipelineCore, __module__=__name__,
                                  **section_fields(_BUILT_IN_SECTIONS))):
    """A pipeline: a name, where it runs, and its stages (a DAG through their ``inputs``), with the
    sections of the package's run-level outputs (report, cost, tracking, budget).

    Examples:
        >>> from pipeline import PipelineConfig
        >>> config = PipelineConfig.model_validate({"name": "demo", "stages": {
        ...     "raw": {"kind": "load", "path": "data/telco_customer_churn.csv"},
        ...     "split": {"kind": "split", "inputs": ["raw"], "target": "Churn", "positive": "Yes"}}})
        >>> config.device, list(config.stages)
        ('auto', ['raw', 'split'])
    """


_models: dict[tuple[Any, ...], type[PipelineConfig]] = {}


def _registered() -> tuple[tuple[str, int], ...]:
    """What the stage union is built from now: each kind's validating model."""
    return tuple((name, id(kind.spec.validating_model())) for name, kind in STAGE_KINDS.items())


def config_model() -> type[PipelineConfig]:
    """``PipelineConfig`` with every stage kind, feature op and hook section registered now (one
    class per set of them)."""
    sections = config_sections()
    key = (_registered(), _section_key(sections))
    if key == _BUILT_IN:
        return PipelineConfig
    if key not in _models:
        built_in = set(_section_key(_BUILT_IN_SECTIONS))
        if built_in <= set(_section_key(sections)):      # plugins' sections added: after the package's
            base: type[PipelineCore] = PipelineConfig
            added = [h for h in sections if _section_key([h])[0] not in built_in]
        else:                                           # a plugin replaced one of the package's
            base, added = PipelineCore, sections
        _models[key] = create_model(
            "PipelineConfig", __base__=base, __module__=__name__, __doc__=PipelineConfig.__doc__,
            stages=(dict[StageName, stage_union()], Field(min_length=1, description=STAGES_DESCRIPTION)),
            **section_fields(added))
    return _models[key]  # type: ignore[return-value]


_BUILT_IN = (_registered(), _section_key(_BUILT_IN_SECTIONS))


def json_schema() -> dict:
    """JSON Schema of the config file, for editors (YAML language servers read it)."""
    schema = config_model().model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "pipeline config"
    return schema
