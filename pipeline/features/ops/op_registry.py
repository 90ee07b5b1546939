"""The registry of feature ops: the name an ``ops:`` item is keyed by -> its ``FeatureOp`` class.

Each op's module registers its class when imported (``@register_op``), the built-in ones
through ``pipeline.features.ops``; a plugin module (``pipeline.core.plugins``) does the same
from outside the package. Nothing else lists the ops: the YAML validation of a ``features``
stage (``op_step_union``, read when a config is validated, so ops registered after import
are included), ``pipeline schema``, the generated reference, workflow.json loading
(``op_from_spec``) and ``pipeline init`` all read ``OPS`` when they run.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, TypeVar, Union

from pydantic import BaseModel, ConfigDict, Discriminator, Tag, create_model

from pipeline.core.plugins import note_replacement
from pipeline.features.ops.op_base import FeatureOp, OpState

__all__ = ["OPS", "op_of_step", "op_step_union", "ops_key", "register_op"]

OPS: dict[str, type[FeatureOp]] = {}
# An op name is a YAML key, a workflow.json "op" and part of --set paths (ops.0.one_hot.columns).
OP_NAME = re.compile(r"[a-z_][a-z0-9_]*")

Op = TypeVar("Op", bound=type[FeatureOp])


def register_op(cls: Op) -> Op:
    """Make ``cls`` (a ``FeatureOp`` subclass) the op called ``cls.op`` in configs and in
    workflow.json; returns ``cls``, so it serves as a class decorator. Registering a name that
    exists replaces it (a plugin reloaded in a notebook), as ``register_stage`` does.

    Examples:
        >>> from typing import Any, ClassVar
        >>> import pandas as pd
        >>> from pipeline.features import OPS, FeatureOp, FeatureWorkflow, OpState, register_op
        >>> @register_op
        ... class Negate(FeatureOp):            # each column times -1: nothing to fit
        ...     op: ClassVar[str] = "negate"
        ...     def transform(self, frame: Any, backend: Any, state: OpState) -> Any:
        ...         return frame.assign(**{c: -frame[c] for c in self.columns})
        >>> FeatureWorkflow([{"negate": {"columns": ["x"]}}]).fit_transform(pd.DataFrame({"x": [1.0, 2.0]}))["x"].tolist()
        [-1.0, -2.0]
        >>> del OPS["negate"]                    # the example's op, taken back out
    """
    if not (isinstance(cls, type) and issubclass(cls, FeatureOp)):
        raise TypeError(f"register_op takes a FeatureOp subclass, not {cls!r}")
    name = getattr(cls, "op", None)
    if not isinstance(name, str) or not OP_NAME.fullmatch(name):
        raise ValueError(f"feature op class {cls.__name__}: op = {name!r} is not an op name (lower-case "
                         "letters, digits and _, starting with a letter or _): set op: ClassVar[str] = 'my_op'")
    if not (isinstance(cls.state_model, type) and issubclass(cls.state_model, OpState)):
        raise TypeError(f"feature op '{name}': state_model must be an OpState subclass, not {cls.state_model!r}")
    if "columns" not in cls.model_fields:
        raise TypeError(f"feature op '{name}': the class has no 'columns' field (FeatureOp declares it; keep it)")
    note_replacement("feature op", name, OPS[name].__module__ if name in OPS else None, cls.__module__)
    OPS[name] = cls
    return cls


def ops_key() -> tuple[tuple[str, int], ...]:
    """The registry's identity now: changes when an op is registered or replaced."""
    return tuple((name, id(cls)) for name, cls in OPS.items())


def _op_name(value: Any) -> str | None:
    if isinstance(value, dict) and len(value) == 1:
        return str(next(iter(value)))
    if isinstance(value, BaseModel) and len(type(value).model_fields) == 1:
        return next(iter(type(value).model_fields))
    return None


_steps: dict[tuple[str, type[FeatureOp]], type[BaseModel]] = {}
_unions: dict[tuple[tuple[str, int], ...], Any] = {}


def _step_model(name: str, cls: type[FeatureOp]) -> type[BaseModel]:
    if (name, cls) not in _steps:
        _steps[name, cls] = create_model(f"{cls.__name__}Step", __config__=ConfigDict(extra="forbid"),
                                         __module__=__name__, **{name: (cls, ...)})
    return _steps[name, cls]


def op_step_union() -> Any:
    """The type of one YAML ``ops:`` item, ``{op_name: {params}}``, over the ops registered now:
    a tagged union, so each op's parameters are validated by its own model, with error paths
    like ``ops[1].one_hot.columns`` (one type per registry state)."""
    key = ops_key()
    if key not in _unions:
        members = tuple(Annotated[_step_model(name, cls), Tag(name)] for name, cls in OPS.items())
        _unions[key] = Annotated[Union[members], Discriminator(_op_name)]  # type: ignore[valid-type]
    return _unions[key]


def op_of_step(step: BaseModel) -> FeatureOp:
    """The op a validated ``ops:`` item holds."""
    return next(iter(step.__dict__.values()))
