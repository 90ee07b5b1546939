"""``python``: a user function as a stage, with the built-in stages' contract.

``function: mypackage.features:add_ratios`` is called as ``fn(ctx, inputs, **params)`` where
``inputs`` maps input stage names to their outputs. Modules beside the config file import
without installing them, as they are when the stage runs, also in a process that has run
other configs or an earlier version of the module (``pipeline.core.local_code``).
"""

from __future__ import annotations

import importlib
import re
from typing import Any, Literal

from pydantic import Field, field_validator

from pipeline.core.errors import ConfigError
from pipeline.core.fingerprints import ModuleName, module_fingerprint
from pipeline.core.local_code import refresh, remember
from pipeline.stages.spec import StageContext, StageSpec, register_stage

_TARGET = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


class PythonSpec(StageSpec):
    kind: Literal["python"]
    function: str = Field(description="'module.path:function', called as fn(ctx, inputs, **params).")
    params: dict[str, Any] = Field(default_factory=dict, description="Keyword arguments for the function.")

    @field_validator("function")
    @classmethod
    def _shape(cls, value: str) -> str:
        if not _TARGET.match(value):
            raise ValueError(f"'{value}' is not of the form 'module.path:function'")
        return value


def resolve_function(target: str) -> Any:
    """The function ``target`` names. A module that does not import, or lacks the function, is a
    ConfigError (exit 2, as for a plugin): the config names code that is not there."""
    module_name, _, attr = target.partition(":")
    refresh(module_name)
    try:
        module = importlib.import_module(module_name)
        remember(module_name)
    except ImportError as exc:
        raise ConfigError(f"function: cannot import module '{module_name}' ({exc}); a module beside the config "
                          "file or on the Python path is imported by its dotted name") from exc
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ConfigError(f"function: module '{module_name}' has no function '{attr}'")
    return fn


def python_fingerprint(spec: PythonSpec) -> dict[str, Any]:
    """The source of the user's module: an edit to the function reruns the stage."""
    refresh(spec.function.partition(":")[0])
    return {"module": module_fingerprint(spec.function)}


def python_uses(spec: PythonSpec) -> list[ModuleName]:
    """The user's module as code the stage runs, with what it imports of the package (not imported
    here: the key is worked out before any stage runs)."""
    return [ModuleName(spec.function.partition(":")[0])]


@register_stage("python", PythonSpec, fingerprint=python_fingerprint, uses=python_uses)
def run_python(spec: PythonSpec, ctx: StageContext, inputs) -> Any:
    return resolve_function(spec.function)(ctx, dict(inputs), **spec.params)
