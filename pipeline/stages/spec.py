"""The stage contract: the params model base, the run context, the registry of kinds.

A stage kind is a pydantic model of its YAML block (``kind`` is the discriminator) plus a
plain function ``run(spec, ctx, inputs) -> output``, registered with what the runner, the
config checks and the cache need to know about it, so none of them names a kind:

- ``produces``: the type of its output; ``accepts``: the output types it reads. A config
  wiring a ``load`` into a ``train`` stage is refused at validation by type, not by name;
- ``resources``: what it needs from a worker (``"gpu"``: training stages take a GPU slot
  on a GPU cluster);
- ``fingerprint(spec)``: what its output depends on beyond params and inputs (the bytes of
  the files a ``load`` reads); ``None`` means the output must never be cached;
- ``records``: the run-record fields it sets through ``ctx.run_record`` (``evaluate`` sets
  ``metrics``, ``export`` sets ``models``);
- ``uses(spec)``: the registered objects its spec names by name, whose code its output depends
  on (``train``: the model's registry entry). With its kind's module and the objects the spec
  holds (feature ops), they are the code its cache key covers (``StageKind.code_modules``).

The params model (``StageSpec``) declares the rest, each with a default that says "nothing",
overridden by the kinds that take part: ``declared_task``/``task_problems`` (the task checks at
validation), ``sample_overrides`` (``pipeline parity --sample``), ``reading`` and
``at_cutoff``/``scoring_passthrough`` (``pipeline predict --as-of``), ``preview``/
``columns_read``/``preview_problems``/``input_problems`` (the checks before data is read) and
``validating_model`` (a field over another registry: ``features``' ops). Commands and checks
call these instead of looking for fields or methods with getattr.

Outputs are ordinary Python objects (frames, ``SplitData``, ``FeatureSet``,
``TrainedModel``...) so the same functions serve the runner and library users. Plugin code
registers kinds with the same ``register_stage`` (see ``pipeline.core.plugins``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

from pipeline.backends import Backend
from pipeline.backends.headers import ColumnSet, HeaderReader
from pipeline.core.fingerprints import defining_modules
from pipeline.core.plugins import note_replacement
from pipeline.usage.costs import Budget
from pipeline.hooks.protocol import LogProgress, StageProgress

__all__ = [
    "STAGE_KINDS", "ColumnRef", "KeyPath", "LogProgress", "Preview", "StageContext", "StageKind", "StageProgress",
    "StageSpec", "Table", "input_list", "kinds_producing", "model_preview", "only_input", "register_stage",
]

KeyPath = tuple[str | int, ...]


@dataclass(frozen=True)
class Preview:
    """What the config tells about a stage's output before any data is read.

    The checks ``pipeline validate`` runs before reading data (``pipeline.config.data_checks``)
    pass these from stage to stage along the graph, each kind saying what its output is from
    its inputs' (``StageSpec.preview``). A field left None is unknown, and every check that
    needs it is skipped: a check reports only what cannot be right.
    """

    columns: ColumnSet | None = None     # a table's columns
    features: str | None = None          # the features stage a feature set or model comes from
    valid: bool | None = None            # whether its split has valid rows
    test: bool | None = None             # whether its split has test rows
    folds: int | None = None             # the split's folds: (0: none)
    target: str | None = None            # the split's target column
    oof: bool | None = None              # whether a model has out-of-fold scores of the training split


def split_facts(source: Preview, **changes: Any) -> Preview:
    """What ``source`` tells of its split (its features stage, valid and test rows, folds,
    target), with ``changes``: what a stage downstream of a split passes on."""
    facts = {"features": source.features, "valid": source.valid, "test": source.test, "folds": source.folds,
             "target": source.target}
    return Preview(**{**facts, **changes})


def no_rows_in(split: str, inputs: Mapping[str, Preview]) -> str | None:
    """Why the config leaves the inputs' ``split`` ("test", "valid") without rows (``test: 0``,
    ``valid: 0``, or folds, which leave no valid split), or None (it has rows, or is not known)."""
    for preview in inputs.values():
        if split == "test" and preview.test is False:
            return "the split stage has test: 0"
        if split == "valid" and preview.folds:
            return f"the split stage has folds: {preview.folds}, which score every non-test row in turn"
        if split == "valid" and preview.valid is False:
            return "the split stage has valid: 0"
    return None


def model_preview(inputs: Mapping[str, Preview]) -> Preview:
    """A model stage's output: trained on its one input's features, split the same way."""
    previews = list(inputs.values())
    if len(previews) != 1:
        return Preview()
    source = previews[0]
    return split_facts(source, oof=None if source.folds is None else source.folds > 0)


@dataclass(frozen=True)
class ColumnRef:
    """A column a stage's block names, for the checks before data is read: its key path in the
    block, what it is for (``target``, ``join key``: the message's words) and the columns it
    must be one of: ``among``, or else the table of input number ``input``."""

    where: KeyPath
    column: str
    what: str = "column"
    input: int = 0
    among: ColumnSet | None = None


class Table:
    """The output type of stages that produce a data frame (pandas, cuDF or a Dask frame)."""


class StageSpec(BaseModel):
    """Fields every stage has. Subclasses add ``kind: Literal[...]`` and their parameters."""

    model_config = ConfigDict(extra="forbid")

    inputs: list[str] = Field(default_factory=list, description="Names of the stages whose outputs this stage reads.")
    description: str = Field("", description="Free text shown by `pipeline dag`.")
    budget: Budget | None = Field(None, description="Caps on this stage's cost, GPU-hours and wall time "
                                                    "(pipeline.usage.budget), beside the run's.")

    # How many inputs a stage of this kind takes (what types: see ``register_stage``).
    min_inputs: ClassVar[int] = 0
    max_inputs: ClassVar[int | None] = None
    # Names of the inputs by position (``join``: left, right). A kind with roles also takes
    # ``inputs`` as a mapping ``{role: stage}``, kept as a list in role order.
    input_roles: ClassVar[tuple[str, ...]] = ()

    @field_validator("inputs", mode="before")
    @classmethod
    def _inputs_by_role(cls, inputs: Any) -> Any:
        if isinstance(inputs, dict):
            listed = input_list(inputs, cls.input_roles)
            if isinstance(listed, str):
                raise ValueError(listed)
            return listed
        return inputs

    # ---------------------------------------------------------------- declarations
    # What a kind contributes to the commands and checks that must not name it: each has a
    # default that says "nothing", and a kind overrides the ones it takes part in.

    @classmethod
    def validating_model(cls) -> type[StageSpec]:
        """The model that validates this kind's blocks with what is registered now
        (``pipeline.config.schema.config_model`` builds the stage union from these). Default:
        the class itself. A kind with a field over another registry that grows after import
        returns a subclass rebuilt over its members now (``features``: the ops, with a plugin's)."""
        return cls

    def declared_task(self) -> str | None:
        """The task this stage fixes for the stages downstream, known before any data is read
        (a split's ``task:``). Default None: the stage passes on the task of its inputs when they
        agree. The config loader checks the task against ``task_problems`` downstream."""
        return None

    def task_problems(self, task: str) -> list[tuple[KeyPath, str]]:
        """``(key path in this block, message)`` for what in this block cannot serve ``task``, the
        task declared upstream (a train stage's classifier fed a regression split): reported at
        validation, before any data is read. Default: none, the stage serves any task."""
        return []

    def plan_notes(self) -> list[tuple[KeyPath, str]]:
        """``(key path in this block, note)`` for what this block leaves to be decided when the
        data is read (a ``features`` op's column selector), printed by ``pipeline validate``.
        Default: none."""
        return []

    def sample_overrides(self, rows: int) -> dict[str, Any]:
        """The keys of this block, with their values, that make the stage read a seeded random
        sample of ``rows`` rows (``pipeline parity --sample`` sets them with ``--set``). Default:
        none, the stage cannot sample (a ``load`` can when it reads in memory)."""
        return {}

    def reading(self, path: str, format: str) -> StageSpec:
        """This source stage (one without inputs) reading ``path`` (``format``: csv or parquet)
        instead of the data its block names, with its other options as they are:
        ``pipeline predict --as-of --input`` replays a run's event source on new files. Default:
        a copy with ``path`` set; a kind that also names its file format sets that too (``load``)."""
        return self.model_copy(update={"path": path})

    def at_cutoff(self, as_of: str) -> StageSpec:
        """This stage as it runs when a run's tables are rebuilt from raw data at cut-off
        ``as_of`` (``pipeline predict --as-of``): kinds with a cut-off return a copy at it."""
        return self

    # The checks before data is read (``Preview``). A kind that says nothing has an unknown
    # output, so nothing downstream of it is checked: a plugin kind is never refused by them.
    def preview(self, stage: str, inputs: Mapping[str, Preview], headers: HeaderReader) -> Preview:
        """What this stage's output is known to be, given its inputs' (``headers`` reads a
        file's header or schema, never its rows)."""
        return Preview()

    def columns_read(self, inputs: Mapping[str, Preview], headers: HeaderReader) -> list[ColumnRef]:
        """The columns this stage's block names, each checked against the columns known there."""
        return []

    def preview_problems(self, inputs: Mapping[str, Preview]) -> list[tuple[KeyPath, str]]:
        """Rules across stages that fail at run time otherwise, as ``(key path in this block,
        message)``: a ``tune:`` on a split without validation rows, an ensemble of models
        from different features."""
        return []

    def input_problems(self, produced: Sequence[type]) -> list[str]:
        """What this block needs of its inputs taken together, from the types they produce (in
        ``inputs`` order; ``object`` where unknown until it runs), each a message reported at
        its ``inputs`` key before any data is read: ``promote`` needs one evaluation, an export,
        and the split unless it has a holdout. Each input alone is checked against the kind's
        ``accepts`` already. Default: nothing."""
        return []

    def scoring_passthrough(self) -> int | None:
        """When a run's tables are rebuilt for scoring, the position of the input whose table
        this stage passes on unchanged instead of running (a label has no future to look at
        then); None: it runs."""
        return None


def input_list(inputs: Any, roles: tuple[str, ...]) -> list[str] | str:
    """``inputs`` as a list of stage names: a mapping ``{role: stage}`` in ``roles`` order, a
    list as it is; a message (str) saying what is wrong with a mapping the roles refuse."""
    if not isinstance(inputs, dict):
        return [str(i) for i in inputs] if isinstance(inputs, list) else []
    if not roles:
        return "this stage kind takes inputs as a list of stage names, not a mapping"
    unknown = [str(k) for k in inputs if k not in roles]
    missing = [r for r in roles if r not in inputs]
    if unknown or missing:
        parts = ([f"unknown role(s) {unknown}"] if unknown else []) + ([f"missing {missing}"] if missing else [])
        return f"inputs by role must name exactly {list(roles)}: {'; '.join(parts)}"
    return [str(inputs[role]) for role in roles]


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
    # Run-record fields this stage sets (only those its kind declares in ``records``).
    run_record: dict[str, Any] = field(default_factory=dict)

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
Fingerprint = Callable[[Any], Mapping[str, Any] | None]
Uses = Callable[[Any], Iterable[Any]]


def _no_fingerprint(spec: Any) -> Mapping[str, Any]:
    return {}


def _uses_nothing(spec: Any) -> tuple[Any, ...]:
    return ()


@dataclass(frozen=True)
class StageKind:
    """A registered stage kind: its params model, its function and its contract."""

    kind: str
    spec: type[StageSpec]
    run: RunFunction
    produces: type = object                         # object: unknown until it runs (python)
    accepts: tuple[type, ...] | None = None         # None: any input
    resources: frozenset[str] = frozenset()
    fingerprint: Fingerprint = _no_fingerprint
    records: tuple[str, ...] = ()
    uses: Uses = _uses_nothing

    def code_modules(self, spec: StageSpec) -> frozenset[str]:
        """The modules whose code a stage of this kind with ``spec`` runs, for its cache key: its
        kind's (the run function's, the params model's, the fingerprint's), those of the objects
        the spec holds (its feature ops) and of the registered objects it names (``uses``). The
        key covers them and what they import (``pipeline.core.fingerprints.code_fingerprint``)."""
        return frozenset(defining_modules(self.run, self.fingerprint, spec, *self.uses(spec)))

    def declared(self, spec: StageSpec, stage: str) -> Mapping[str, Any] | None:
        """What the kind's ``fingerprint`` declares a stage's output depends on, checked: a
        plugin's fingerprint that fails, or gives neither None nor a mapping, is a failure of
        the stage naming it (exit 4), not an internal error naming nothing."""
        from pipeline.core.errors import PipelineError, StageError

        try:
            found = self.fingerprint(spec)
        except (PipelineError, OSError):
            raise
        except Exception as exc:  # noqa: BLE001 - a plugin's fingerprint can fail in any way
            raise StageError(stage, f"the fingerprint of its kind '{self.kind}' failed: {type(exc).__name__}: "
                                    f"{exc}") from exc
        if found is not None and not isinstance(found, Mapping):
            raise StageError(stage, f"the fingerprint of its kind '{self.kind}' returned {found!r}; a fingerprint "
                                    "returns None (never cache) or a mapping of what the output depends on")
        return found

    def output_problem(self, output: Any) -> str | None:
        """Why ``output`` is not what the kind is registered to produce (None: it is), so a plugin
        kind's wrong output fails its own stage, not the next one with an AttributeError."""
        if self.produces is object:
            return None
        if self.produces is Table:
            ok = hasattr(output, "columns") and hasattr(output, "dtypes")
        else:
            ok = isinstance(output, self.produces)
        return None if ok else (f"stage kind '{self.kind}' is registered to produce {self.produces.__name__}, but "
                                f"its run returned {type(output).__name__}")

    def accepts_output_of(self, other: StageKind) -> bool:
        """Whether this kind reads what ``other`` produces (unknown outputs are let through)."""
        if self.accepts is None or other.produces is object:
            return True
        return issubclass(other.produces, self.accepts)


STAGE_KINDS: dict[str, StageKind] = {}


def register_stage(
    kind: str,
    spec: type[StageSpec],
    *,
    produces: type = object,
    accepts: Iterable[type] | None = None,
    resources: Iterable[str] = (),
    fingerprint: Fingerprint | None = None,
    records: Iterable[str] = (),
    uses: Uses | None = None,
) -> Callable[[RunFunction], RunFunction]:
    """Decorator: make ``run`` the implementation of stage ``kind`` configured by ``spec``.

    Registering a kind that exists replaces it (a plugin reloaded in a notebook).

    Examples:
        >>> from typing import Literal
        >>> from pipeline.stages import STAGE_KINDS, StageSpec, register_stage
        >>> class UpperSpec(StageSpec):
        ...     kind: Literal["upper_names"]
        >>> @register_stage("upper_names", UpperSpec)
        ... def run_upper(spec, ctx, inputs):
        ...     (table,) = inputs.values()
        ...     return table.rename(columns=str.upper)
        >>> STAGE_KINDS["upper_names"].spec is UpperSpec
        True
        >>> del STAGE_KINDS["upper_names"]       # the example's kind, taken back out
    """

    _check_kind_spec(kind, spec)

    def wrap(run: RunFunction) -> RunFunction:
        if not callable(run):
            raise TypeError(f"stage kind '{kind}': register_stage decorates the kind's run function, not {run!r}")
        _check_run_signature(kind, run)
        old = STAGE_KINDS.get(kind)
        note_replacement("stage kind", kind, old.run.__module__ if old else None, getattr(run, "__module__", None))
        STAGE_KINDS[kind] = StageKind(
            kind, spec, run, produces=produces, accepts=tuple(accepts) if accepts is not None else None,
            resources=frozenset(resources), fingerprint=fingerprint or _no_fingerprint, records=tuple(records),
            uses=uses or _uses_nothing)
        return run

    return wrap


def _check_run_signature(kind: str, run: Callable[..., Any]) -> None:
    """The runner calls ``run(spec, ctx, inputs)``: a function that cannot take them (``def
    run(spec, inputs)``) is refused as it registers, not at the first run as a bare TypeError."""
    import inspect

    try:
        signature = inspect.signature(run)
    except (TypeError, ValueError):          # a callable Python cannot describe: left to the run
        return
    try:
        signature.bind(None, None, None)
    except TypeError as exc:
        name = getattr(run, "__qualname__", repr(run))
        raise TypeError(f"stage kind '{kind}': its run function {name}{signature} cannot be called as "
                        f"run(spec, ctx, inputs), as the runner calls it ({exc})") from None


def _check_kind_spec(kind: str, spec: Any) -> None:
    """A kind's spec as the config loader needs it, refused when the plugin registers it (not
    as an internal error at the first ``validate``): a ``StageSpec`` subclass whose ``kind`` field
    is ``Literal[<the registered name>]`` (the config's ``kind:`` picks the spec by it)."""
    import typing

    if not isinstance(kind, str) or not kind.isidentifier():
        raise ValueError(f"register_stage: a stage kind's name is a plain name (letters, digits and _), not {kind!r}")
    if not (isinstance(spec, type) and issubclass(spec, StageSpec)):
        raise TypeError(f"stage kind '{kind}': its spec must be a StageSpec subclass (pipeline.stages.StageSpec), "
                        f"not {spec!r}")
    field = spec.model_fields.get("kind")
    names = typing.get_args(field.annotation) if field is not None and typing.get_origin(field.annotation) \
        is typing.Literal else ()
    if names != (kind,):
        raise TypeError(f"stage kind '{kind}': {spec.__name__}.kind must be declared kind: Literal[{kind!r}]"
                        + (f" (it is Literal{list(names)})" if names else ""))


def kinds_producing(types: tuple[type, ...]) -> list[str]:
    """Registered kinds whose output is one of ``types`` (for messages)."""
    return [name for name, k in STAGE_KINDS.items() if k.produces is not object and issubclass(k.produces, types)]


def only_input(inputs: Mapping[str, Any]) -> Any:
    (value,) = inputs.values()
    return value
