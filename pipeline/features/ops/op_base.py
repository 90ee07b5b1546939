"""The op contract: ``FeatureOp`` (an op's parameters and its fit/transform pair) and ``OpState``
(what fitting learns).

An op is a frozen pydantic model of its parameters (the same model validates the YAML). Its
fitted state is a second pydantic model, declared by the op (``state_model``): returned by
``fit``, not stored, and plain JSON when dumped (numbers, category lists), so a workflow
fitted on a GPU transforms on a CPU and back, and a hand-edited workflow.json is validated
field by field when it loads. An op also declares what the workflow needs to know about it
without asking which op it is: the columns it writes before fitting (``written_columns``,
for dependency phases) and the embedding sizes of its outputs (``categorical_cardinalities``).
Ops read frames through the backend's ``frame`` module, so one implementation serves pandas
and cuDF.

An op that learns from the label (``uses_target``: ``target_encode``) is given the training
split's labels as a ``Target`` at fit (``target_statistics`` instead of ``statistics``), and
transforms the training split itself through ``transform_training``, so a training row's value
never comes from its own label; every other split and scoring go through ``transform``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Union

import numpy as np
from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, ValidationError

from pipeline.backends import Backend
from pipeline.backends.headers import ColumnSet
from pipeline.core.errors import DataError
from pipeline.core.problems import Task
from pipeline.features.ops.column_selector import ColumnSelector, describe_selector

# A category or fill value as JSON holds it (the exact type is kept: 1, 1.0, "1", True).
Scalar = Union[float, int, str, bool]

# The two forms of ``columns``. The tags are not keys of the YAML: the config loader leaves
# them out of error paths (``ops[2].one_hot.columns.type``), as it does op names.
NAMES_TAG, SELECTOR_TAG = "<column names>", "<column selector>"
COLUMNS_TAGS = (NAMES_TAG, SELECTOR_TAG)


def _columns_form(value: Any) -> str | None:
    if isinstance(value, (dict, ColumnSelector)):
        return SELECTOR_TAG
    if isinstance(value, (list, tuple)):
        return NAMES_TAG
    return None


# A list of names, or a selector mapping; which one is decided by the value's shape, so an
# error in a selector is reported at its own key, not once per form.
Columns = Annotated[
    Union[Annotated[list[str], Field(min_length=1), Tag(NAMES_TAG)], Annotated[ColumnSelector, Tag(SELECTOR_TAG)]],
    Discriminator(_columns_form, custom_error_type="columns_form",
                  custom_error_message="columns is a list of column names or a selector mapping "
                                       "({type: ..., matching: ..., except: [...], remaining: true})"),
]


@dataclass(frozen=True)
class Target:
    """The training split's labels for the ops that learn from them: ``values`` is a 1-D array
    on the frame's device, one label per row in the frame's order, coded as ``task`` codes
    labels (binary 0/1, multiclass 0..K-1, regression numbers)."""

    values: Any
    task: Task

    @classmethod
    def of(cls, values: Any, backend: Backend, task: Task | None = None) -> Target:
        """``values`` (a frame-library series, an array or a list) as a ``Target`` on the
        backend's device. Without ``task`` it is read from the labels: floats are a regression,
        integers 0/1 binary, other integers multiclass codes 0..K-1."""
        if isinstance(values, Target):
            return values
        host = np.asarray(backend.to_host(values))
        if task is None:
            task = infer_task(host)
        dtype = "float64" if task.kind == "regression" else "int64"
        return cls(values=backend.asarray(host.astype(dtype)), task=task)


def infer_task(labels: np.ndarray) -> Task:
    """The task of labels given without one (``FeatureWorkflow.fit_transform(target=...)``)."""
    if labels.dtype.kind == "f":
        return Task("regression")
    if labels.dtype.kind not in "iub":
        raise DataError(f"feature ops: a target given without its task must be numbers (0/1, class codes 0..K-1 "
                        f"or values), not {labels.dtype}; pass task=Task(...) as well")
    top = int(labels.max()) if len(labels) else 1
    if labels.min(initial=0) < 0:
        raise DataError("feature ops: class codes of a target must be 0..K-1; pass task=Task(...) for other labels")
    return Task("binary") if top <= 1 else Task("multiclass", classes=tuple(range(top + 1)))


class OpState(BaseModel):
    """Base of the fitted states: frozen values, unknown keys refused (a typo in a hand-edited
    workflow.json is an error, not an ignored field), and only finite numbers: NaN and
    Infinity are not JSON, and a state holding one would turn every transformed value into it."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class EmptyState(OpState):
    """The state of an op that learns nothing (log1p checks its domain; drop just drops)."""


class FeatureOp(BaseModel):
    """Base of every op: a list of columns, the fit/transform pair and its state model.

    A subclass names itself with ``op`` (its key in the YAML ``ops:`` list and in
    workflow.json) and is made usable from configs by ``register_op``
    (``pipeline.features.ops.op_registry``). Besides its parameters it may declare:

    - ``state_model``: the model of its fitted state (default ``EmptyState``: it learns nothing);
    - ``example``: parameters of an instance that works on the sample frame of
      ``pipeline.testing.ops`` (columns ``num``, ``count``, ``cat``, ``flag``, ``when``,
      ``until``), which ``check_op`` runs the op with; None: ``check_op`` is given them;
    - ``frame_api``: the frame-library names its code calls (``Series.value_counts``,
      ``DataFrame.drop``, ``concat``), resolved on ``backend.frame``: pandas on the CPU, cuDF
      on the GPU. The GPU-API check (``scripts/check_gpu_api.py``) reads the package's own ops
      from their code; an op outside the package lists what it calls here, and ``check_op``
      checks each name exists on both (on cuDF where it is installed). Empty: nothing declared.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    op: ClassVar[str]
    state_model: ClassVar[type[OpState]] = EmptyState
    example: ClassVar[Mapping[str, Any] | None] = None
    frame_api: ClassVar[tuple[str, ...]] = ()
    # True: fitting reads the training labels (``target_statistics``) and the training split is
    # transformed by ``transform_training``; such an op fits in memory only.
    uses_target: ClassVar[bool] = False
    columns: Columns = Field(description="Columns this op applies to: a list of names, or a selector "
                                         "({type: numeric}, {matching: 'amount_*'}, {remaining: true}) "
                                         "resolved on the training split when the workflow is fitted.")

    @property
    def selector(self) -> ColumnSelector | None:
        """The selector when ``columns`` is one (not resolved yet), else None."""
        return self.columns if isinstance(self.columns, ColumnSelector) else None

    def fit(self, frame: Any, backend: Backend, target: Target | None = None) -> OpState:
        """The fitted state from the training frame (in memory; the workflow's fit driver
        does the same phase by phase for whole workflows and partitioned frames). ``target``:
        the frame's labels, which only an op that ``uses_target`` reads."""
        self.check_columns(frame)
        wanted = op_statistics(self, frame, backend, target)
        return fit_state(self, {key: backend.to_host(value) for key, value in wanted.items()}, backend)

    def statistics(self, frame: Any, backend: Backend) -> dict[str, Any]:
        """The aggregates ``fit`` needs, as expressions on ``frame``.

        On a pandas or cuDF frame they are values; on a Dask frame they are lazy, and the
        workflow computes the aggregates of every op in a dependency phase in one pass.
        """
        return {}

    def target_statistics(self, frame: Any, backend: Backend, target: Target) -> dict[str, Any]:
        """``statistics`` of an op that ``uses_target``: the aggregates it needs from ``frame``
        and the labels of its rows (in memory only)."""
        return self.statistics(frame, backend)

    def fit_from(self, stats: dict[str, Any], backend: Backend) -> OpState:
        """The fitted state from computed ``statistics`` (host values)."""
        return self.state_model()

    def transform(self, frame: Any, backend: Backend, state: OpState) -> Any:
        raise NotImplementedError

    def transform_training(self, frame: Any, backend: Backend, state: OpState, target: Target) -> Any:
        """``frame`` (the training split the op was fitted on, or a view of it) transformed as
        the model trains on it: ``transform`` unless the op's values would carry a row's own
        label (``target_encode`` encodes out of fold here)."""
        return self.transform(frame, backend, state)

    def output_columns(self, columns: list[str], state: OpState) -> list[str]:
        """Column names after this op, given the names before it."""
        return columns

    def written_columns(self) -> set[str]:
        """Columns this op replaces, removes or adds under a name known before fitting: an op
        reading one of them must be fitted after this one (a dependency phase later)."""
        return set(self.columns)

    def read_columns(self) -> set[str]:
        """Columns whose values this op reads (every one it names, unless it only removes
        them): an input column no op reads and none passes to the output is not needed to score."""
        return set(self.columns)

    def categorical_cardinalities(self, state: OpState) -> dict[str, int]:
        """Embedding table sizes of the integer-code columns this op outputs (none by default)."""
        return {}

    def named_columns(self) -> list[tuple[tuple[str | int, ...], str]]:
        """Every input column this op's parameters name, with its key path in the op's block:
        each must exist when the op is fitted (checked before any data is read). A selector
        names only its ``except`` columns."""
        if self.selector is not None:
            return [(("columns", "except", i), c) for i, c in enumerate(self.selector.except_)]
        return [(("columns", i), c) for i, c in enumerate(self.columns)]

    def columns_after(self, columns: ColumnSet, why: str) -> ColumnSet:
        """The columns known after this op, before any data is read (``why`` names the op in
        messages about the columns it removes). An op with an ``output_columns`` of its own
        says here what it does to the names; one that does not leaves them unknown."""
        if type(self).output_columns is FeatureOp.output_columns:
            return columns
        return columns.opened()

    def known_columns_after(self, columns: ColumnSet, why: str) -> ColumnSet:
        """``columns_after``, for an op whose ``columns`` may still be a selector: which names
        it takes is known only once data is read, so an op that keeps the names it is given (no
        ``output_columns`` of its own) keeps the set, and any other leaves it open."""
        if self.selector is None:
            return self.columns_after(columns, why)
        return columns if type(self).output_columns is FeatureOp.output_columns else columns.opened()

    def load_state(self, data: Mapping[str, Any]) -> OpState:
        """A saved state (workflow.json) validated into this op's state model."""
        return self.state_model.model_validate(data)

    def check_columns(self, frame: Any) -> None:
        if self.selector is not None:
            raise DataError(f"feature op '{self.op}': columns is a selector ({describe_selector(self.selector)}); "
                            "fit the op inside a FeatureWorkflow, which resolves it to names on the training split")
        missing = [c for c in self.columns if c not in frame.columns]
        if missing:
            raise DataError(f"feature op '{self.op}': column(s) {missing} not in the data "
                            f"(available: {', '.join(map(str, frame.columns))})")


def op_statistics(op: FeatureOp, frame: Any, backend: Backend, target: Target | None) -> dict[str, Any]:
    """``op``'s statistics on ``frame``: with the labels for an op that ``uses_target`` (a
    DataError naming it when there are none), else without."""
    if not op.uses_target:
        return op.statistics(frame, backend)
    if target is None:
        raise DataError(f"feature op '{op.op}' on {op.columns} learns from the label, and no target was given to fit "
                        "it: fit the workflow with fit_transform(frame, target=labels)")
    if len(target.values) != len(frame):
        raise DataError(f"feature op '{op.op}': the target has {len(target.values)} labels for {len(frame)} rows")
    return op.target_statistics(frame, backend, target)


def fit_state(op: FeatureOp, stats: dict[str, Any], backend: Backend) -> OpState:
    """``op.fit_from(stats)``; a state its model refuses (a statistic that is not a finite
    number) is a DataError naming the op and the field, as when workflow.json is loaded."""
    try:
        return op.fit_from(stats, backend)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'state'}: {e['msg']}" for e in exc.errors())
        raise DataError(f"feature op '{op.op}' on {op.columns}: the fitted state is not valid ({problems})") from None
