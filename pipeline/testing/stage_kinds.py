"""``check_stage_kind``: a stage kind run through the contract the runner, the config loader,
the cache and Dask workers rely on (``pipeline.stages.spec``), on tiny inputs, in well under a
second.

What it checks, each failure an ``AssertionError`` naming the kind and the check:

- ``registration``: the spec is a ``StageSpec`` whose ``kind`` is ``Literal[<its name>]`` (the
  discriminator the config's union picks it by), ``run`` and ``fingerprint`` are callable, and
  the input counts and roles agree with each other;
- ``types``: ``produces`` is a type and ``accepts`` a tuple of types (or None: anything);
- ``resources``: only resources the executors know (``KNOWN_RESOURCES``);
- ``records``: run-record field names, none of them a field the run itself keeps;
- ``valid block``: a minimal block validates through the real config loader (``load_config``),
  wired to placeholder inputs; the block is the caller's ``example``, else the first of the
  spec's JSON-schema ``examples``, else one derived from the schema's required fields;
- ``unknown key`` / ``missing key`` / ``wrong type``: that block with an unknown key, with each
  required key left out, and with a mapping where a field takes a scalar, is refused with an
  issue at ``stages.<stage>.<key>`` that has a line number (``invalid=`` adds cases);
- ``validation raises``: validating never raises anything but the loader's ``ConfigError``
  (a validator that raises ``TypeError`` crashes ``pipeline validate``);
- ``pickle``: the validated spec and the registration pickle and unpickle equal (Dask sends
  both to workers, by reference: classes and functions must be importable by name);
- ``resolved config``: the run's resolved ``config.yaml`` (``dump_config``) loads back to an
  equal spec (``pipeline predict --as-of`` and the run record read it);
- ``fingerprint``: ``fingerprint(spec)`` is None or a mapping, the same for equal specs
  (called twice, after pickling, after reloading), and the cache can key the stage with it.

Stage kinds declare no CPU or GPU API names in their registration (a kind reaches a device
only through ``ctx.backend``), so there is nothing of that kind to check here; models do
declare them (``pipeline.testing.models``).
"""

from __future__ import annotations

import json
import typing
from collections.abc import Mapping
from typing import Any

import yaml
from pydantic import BaseModel

from pipeline.config.loader import dump_config, load_config
from pipeline.config.schema import PipelineConfig
from pipeline.core.errors import ConfigError
from pipeline.runs.record import RunManifest
from pipeline.stages.spec import STAGE_KINDS, StageKind, StageSpec
from pipeline.testing.failures import (
    Check, ConformanceFailure, Prerequisites, first_line, pickled, registered_while_checked, run_checks,
)

__all__ = ["KNOWN_RESOURCES", "check_stage_kind", "example_block", "stage_kind_checks"]

# What a kind may ask of a worker: the executors give a stage whose kind declares "gpu" a GPU
# slot on a GPU cluster (pipeline/engine/executors.py); nothing else is read.
KNOWN_RESOURCES: frozenset[str] = frozenset({"gpu"})
# The name of the stage under test in the configs the check loads, and of its placeholder inputs:
# ``python`` stages, whose output type is unknown, so any kind accepts them as inputs.
STAGE = "checked"
PLACEHOLDER_INPUT = "input_{}"
PLACEHOLDER_FUNCTION = "conformance_placeholder:output"
UNKNOWN_KEY = "not_a_key_of_this_kind"
# What goes where a field takes a scalar (a string, a number, a boolean, one of some values).
WRONG_VALUE: dict[str, str] = {"conformance_check": "a mapping where a scalar belongs"}
# Fields of every stage (``StageSpec``): checked once there, not again for each kind.
BASE_FIELDS = frozenset(StageSpec.model_fields)
# Run-record fields a stage may set through ``ctx.run_record``: any name the run itself does not
# keep (``RunManifest`` takes extra fields), or the two stages have always set.
STAGE_RECORDS = frozenset({"metrics", "models"})


def check_stage_kind(kind: str | StageKind, *, example: Mapping[str, Any] | None = None,
                     invalid: Mapping[str, Any] | None = None) -> None:
    """Run a stage kind (its registered name, or a ``StageKind`` registration) through the
    contract; None when it holds, else ``AssertionError`` naming the kind and the check.

    ``example``: a minimal valid block of the kind's YAML without ``kind`` and, unless it
    reads named stages, without ``inputs`` (placeholders are wired in). ``invalid``: more
    ``{key: value}`` cases, each of which must be refused at ``stages.<stage>.<key>``. A
    registration not in ``STAGE_KINDS`` is registered while the check runs, then removed.

    Examples:
        >>> from pipeline.testing import check_stage_kind
        >>> check_stage_kind("split")           # None: the kind keeps the contract
    """
    run_checks(stage_kind_checks(kind, example=example, invalid=invalid))


def stage_kind_checks(kind: str | StageKind, *, example: Mapping[str, Any] | None = None,
                      invalid: Mapping[str, Any] | None = None) -> list[Check]:
    """``check_stage_kind``'s checks, one ``Check`` each, for ``parametrize_with_checks``:
    ``registration`` (with its types, resources and records), ``valid block``, ``refusals``
    (unknown, missing and wrong keys, and ``validation raises``), ``pickle``, ``resolved
    config`` and ``fingerprint``; the valid block is loaded once for all of them.

    Examples:
        >>> from pipeline.testing import stage_kind_checks
        >>> [check.id for check in stage_kind_checks("split")]
        ['registration', 'valid block', 'refusals', 'pickle', 'resolved config', 'fingerprint']
    """
    name = kind.kind if isinstance(kind, StageKind) else kind
    subject = _KindSubject(kind, example, invalid or {})
    owned = {"registration": ("registered",), "valid block": ("valid config",)}
    return [Check(f"stage kind '{name}'", check_id, subject.checked(run), owns=owned.get(check_id, ())) for check_id, run in (
        ("registration", subject.registration), ("valid block", subject.config), ("refusals", subject.refusals),
        ("pickle", subject.pickled), ("resolved config", subject.reloaded), ("fingerprint", subject.fingerprint),
    )]


class _KindSubject:
    """The kind under check and what its checks share, each made once (``Prerequisites``);
    every check runs with the registration in ``STAGE_KINDS``."""

    def __init__(self, kind: str | StageKind, example: Mapping[str, Any] | None, invalid: Mapping[str, Any]) -> None:
        self.kind, self.example, self.invalid = kind, example, invalid
        self.steps = Prerequisites()

    def found(self) -> StageKind:
        return self.steps.get("registered", lambda: _registration(self.kind))

    @property
    def label(self) -> str:
        return f"stage kind '{self.found().kind}'"

    def checked(self, run: Any) -> Any:
        def within() -> None:
            with _registered(self.found()):
                run()
        return within

    def registration(self) -> None:
        self.steps.get("registration", lambda: _check_registration(self.found(), self.label))

    def block(self) -> dict[str, Any]:
        return self.steps.get("valid block", lambda: _valid_block(self.found(), self.example, self.label))

    def config(self) -> PipelineConfig:
        self.registration()
        return self.steps.get("valid config", lambda: _load_valid(self.found(), self.block(), self.label))

    def refusals(self) -> None:
        self.config()
        _check_refusals(self.found(), self.block(), self.invalid, self.label)

    def pickled(self) -> StageSpec:
        return self.steps.get("pickle", lambda: _check_pickle(self.found(), self.config().stages[STAGE], self.label))

    def reloaded(self) -> StageSpec:
        config = self.config()
        return self.steps.get("resolved config", lambda: _check_resolved_config(config, config.stages[STAGE],
                                                                                self.label))

    def fingerprint(self) -> None:
        spec = self.config().stages[STAGE]
        _check_fingerprint(self.found(), [spec, spec, self.pickled(), self.reloaded()], self.label)


# ---------------------------------------------------------------- the registration
def _registration(kind: str | StageKind) -> StageKind:
    if isinstance(kind, StageKind):
        return kind
    if not isinstance(kind, str):
        raise TypeError(f"check_stage_kind takes a kind's name or its StageKind, not {type(kind).__name__}")
    if kind not in STAGE_KINDS:
        raise ConformanceFailure(f"stage kind '{kind}'", "registered",
                                 f"no such kind is registered (registered: {', '.join(STAGE_KINDS)}); import the "
                                 "module that calls register_stage first")
    return STAGE_KINDS[kind]


def _registered(registration: StageKind) -> Any:
    """``registration`` in ``STAGE_KINDS`` while the check runs (a block validates against it)."""
    return registered_while_checked(STAGE_KINDS, registration.kind, registration)


def _check_registration(registration: StageKind, label: str) -> None:
    def fail(check: str, detail: str) -> None:
        raise ConformanceFailure(label, check, detail)

    name, spec = registration.kind, registration.spec
    if not isinstance(name, str) or not name.strip() or name != name.strip():
        fail("registration", f"the kind's name must be a non-empty string without surrounding spaces, not {name!r}")
    if not (isinstance(spec, type) and issubclass(spec, StageSpec)):
        fail("registration", f"its spec must be a subclass of StageSpec, not {spec!r}")
    field = spec.model_fields.get("kind")
    annotation = field.annotation if field is not None else None
    if typing.get_origin(annotation) is not typing.Literal or typing.get_args(annotation) != (name,):
        fail("registration", f"{spec.__name__}.kind must be declared as kind: Literal[{name!r}] (the config picks a "
                             f"stage's spec by it), not {annotation!r}")
    if not callable(registration.run):
        fail("registration", f"run must be a function (spec, ctx, inputs) -> output, not {registration.run!r}")
    if not callable(registration.fingerprint):
        fail("registration", f"fingerprint must be a function of the spec, not {registration.fingerprint!r}")
    low, high, roles = spec.min_inputs, spec.max_inputs, spec.input_roles
    if not isinstance(low, int) or low < 0 or not (high is None or (isinstance(high, int) and high >= low)):
        fail("registration", f"min_inputs {low!r} and max_inputs {high!r} must be counts with min <= max")
    if not isinstance(roles, tuple) or not all(isinstance(r, str) and r for r in roles) or len(set(roles)) < len(roles):
        fail("registration", f"input_roles must be a tuple of distinct names, not {roles!r}")
    if roles and not (low <= len(roles) and (high is None or len(roles) <= high)):
        fail("registration", f"{len(roles)} input roles {list(roles)} do not fit min_inputs {low} / max_inputs {high}")

    produces, accepts = registration.produces, registration.accepts
    if not isinstance(produces, type):
        fail("types", f"produces must be a type (object: unknown until it runs), not {produces!r}")
    if accepts is not None:
        if not isinstance(accepts, tuple) or not all(isinstance(t, type) for t in accepts):
            fail("types", f"accepts must be a tuple of types (or None: any input), not {accepts!r}")
        if not accepts and high != 0:
            fail("types", "accepts is empty, so every input is refused; leave it None to accept any input")

    unknown = sorted(str(r) for r in registration.resources if r not in KNOWN_RESOURCES)
    if unknown:
        fail("resources", f"declares {unknown}; the executors know only {sorted(KNOWN_RESOURCES)}")

    reserved = set(RunManifest.model_fields) - STAGE_RECORDS
    for record in registration.records:
        if not isinstance(record, str) or not record.isidentifier():
            fail("records", f"a run-record field must be a plain name, not {record!r}")
        if record in reserved:
            fail("records", f"'{record}' is a field the run keeps itself; a stage must not set it")


# ---------------------------------------------------------------- blocks through the loader
def _valid_block(registration: StageKind, example: Mapping[str, Any] | None, label: str) -> dict[str, Any]:
    """The block under test: ``kind``, placeholder ``inputs`` and the example's keys."""
    given = dict(example) if example is not None else None
    if given is None:
        try:
            given = example_block(registration.spec)
        except ValueError as exc:
            raise ConformanceFailure(label, "valid block", f"{exc}; pass example={{...}} with a minimal valid "
                                                           "block") from None
    if given.get("kind", registration.kind) != registration.kind:
        raise ConformanceFailure(label, "valid block", f"the example is of kind {given['kind']!r}")
    given.pop("kind", None)
    spec = registration.spec
    count = spec.min_inputs or (len(spec.input_roles) if spec.input_roles else 0)
    inputs = given.pop("inputs", [PLACEHOLDER_INPUT.format(i) for i in range(count)])
    return {"kind": registration.kind, "inputs": inputs, **given}


def _input_names(block: Mapping[str, Any]) -> list[str]:
    inputs = block.get("inputs") or []
    values = inputs.values() if isinstance(inputs, dict) else inputs
    return [str(name) for name in values if str(name) != STAGE]


def _config_text(block: Mapping[str, Any]) -> str:
    """A config of the block and a placeholder stage for each input it names, one key a line."""
    stages: dict[str, Any] = {name: {"kind": "python", "function": PLACEHOLDER_FUNCTION}
                              for name in _input_names(block)}
    stages[STAGE] = _plain(dict(block))
    return yaml.safe_dump({"name": "conformance", "device": "cpu", "stages": stages}, sort_keys=False,
                          default_flow_style=False)


def _plain(value: Any) -> Any:
    """Tuples as lists, so YAML's safe dumper writes the example as a user would."""
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def load_block(block: Mapping[str, Any] | str, label: str,
               check: str) -> tuple[PipelineConfig | None, ConfigError | None]:
    """The config of ``block`` (or a config's whole text) through ``load_config``."""
    text = block if isinstance(block, str) else _config_text(block)
    try:
        return load_config(text=text), None
    except ConfigError as exc:
        return None, exc
    except Exception as exc:  # noqa: BLE001 - any other exception is what the check reports
        raise ConformanceFailure(label, "validation raises",
                                 f"validating a block ({check}) raised {first_line(exc)} instead of a config issue; "
                                 "a validator must raise ValueError (pydantic reports it with the key path)") from exc


def _issues(error: ConfigError) -> str:
    return "; ".join(str(issue) for issue in error.issues)


def _load_valid(registration: StageKind, block: dict[str, Any], label: str) -> PipelineConfig:
    config, error = load_block(block, label, "the valid block")
    if error is not None:
        raise ConformanceFailure(label, "valid block", f"the minimal block {_plain(block)} is refused: {_issues(error)}"
                                                       " (pass example={...} if it is not minimal and valid)")
    assert config is not None
    spec = config.stages[STAGE]
    if type(spec) is not registration.spec:
        raise ConformanceFailure(label, "valid block", f"the loader built a {type(spec).__name__}, not the "
                                                       f"registered {registration.spec.__name__}")
    return config


def _refused_at(block: dict[str, Any], key: str, label: str, check: str, exact: bool = False) -> None:
    """The block must be refused with an issue at ``stages.<stage>.<key>`` that has a line."""
    config, error = load_block(block, label, check)
    where = f"stages.{STAGE}.{key}"
    if error is None:
        shown = {k: v for k, v in block.items() if k != "inputs"}
        raise ConformanceFailure(label, check, f"the block {_plain(shown)} was accepted")
    at = [issue for issue in error.issues
          if issue.path == where or (not exact and issue.path.startswith((where + ".", where + "[")))]
    if not at:
        raise ConformanceFailure(label, check, f"it was refused, but no issue is at {where}: {_issues(error)}")
    if not any(issue.line is not None for issue in at):
        raise ConformanceFailure(label, check, f"the issue at {where} has no line number: {_issues(error)}")


def _check_refusals(registration: StageKind, block: dict[str, Any], invalid: Mapping[str, Any], label: str) -> None:
    _refused_at({**block, UNKNOWN_KEY: 1}, UNKNOWN_KEY, label, "unknown key", exact=True)
    schema = registration.spec.model_json_schema()
    defs = schema.get("$defs", {})
    own = {key: prop for key, prop in schema.get("properties", {}).items() if key != "kind" and key not in BASE_FIELDS}
    for key in schema.get("required", []):
        if key in own and key in block:
            _refused_at({k: v for k, v in block.items() if k != key}, key, label, "missing key", exact=True)
    for key, prop in own.items():
        if not _may_be_mapping(prop, defs):
            _refused_at({**block, key: WRONG_VALUE}, key, label, "wrong type")
    for key, value in invalid.items():
        _refused_at({**block, key: value}, str(key), label, "invalid value")


def _may_be_mapping(schema: Mapping[str, Any], defs: Mapping[str, Any], depth: int = 0) -> bool:
    """Whether a field of this JSON schema could take a mapping (then the wrong-type probe
    would prove nothing): objects, models, unions with one, anything untyped."""
    if depth > 20:
        return True
    if "$ref" in schema:
        return _may_be_mapping(defs.get(schema["$ref"].rsplit("/", 1)[-1], {}), defs, depth + 1)
    branches = [*schema.get("anyOf", []), *schema.get("oneOf", []), *schema.get("allOf", [])]
    if branches:
        return any(_may_be_mapping(branch, defs, depth + 1) for branch in branches)
    if "enum" in schema or "const" in schema:
        return False
    kind = schema.get("type")
    if kind is None:
        return True
    return "object" in (kind if isinstance(kind, list) else [kind])


# ---------------------------------------------------------------- an example from the schema
def example_block(spec: type[BaseModel]) -> dict[str, Any]:
    """A minimal block of ``spec``'s kind (without ``kind`` and ``inputs``): the first of its
    JSON schema's ``examples`` (``model_config = ConfigDict(json_schema_extra={"examples":
    [...]})``), else a value for each required field made from its schema. ValueError when a
    field's schema says too little to make one."""
    schema = spec.model_json_schema()
    examples = schema.get("examples")
    if isinstance(examples, list) and examples and isinstance(examples[0], dict):
        return {k: v for k, v in examples[0].items() if k != "kind"}
    defs = schema.get("$defs", {})
    properties = schema.get("properties", {})
    block = {}
    for key in schema.get("required", []):
        if key in ("kind", "inputs"):
            continue
        try:
            block[key] = _value_of(properties.get(key, {}), defs)
        except ValueError as exc:
            raise ValueError(f"no value for required key '{key}' can be made from its schema ({exc})") from None
    return block


def _value_of(schema: Mapping[str, Any], defs: Mapping[str, Any], depth: int = 0) -> Any:
    if depth > 10:
        raise ValueError("the schema nests too deeply")
    if "$ref" in schema:
        return _value_of(defs.get(schema["$ref"].rsplit("/", 1)[-1], {}), defs, depth + 1)
    for key in ("const", "default"):
        if key in schema:
            return schema[key]
    if schema.get("enum"):
        return schema["enum"][0]
    if isinstance(schema.get("examples"), list) and schema["examples"]:
        return schema["examples"][0]
    branches = [b for b in (*schema.get("anyOf", []), *schema.get("oneOf", [])) if b.get("type") != "null"]
    if branches:
        return _value_of(branches[0], defs, depth + 1)
    kind = schema.get("type")
    if kind == "string":
        if schema.get("format") in ("date", "date-time"):
            return "2024-01-01" if schema["format"] == "date" else "2024-01-01T00:00:00"
        if "pattern" in schema:
            raise ValueError(f"a string matching {schema['pattern']!r}")
        return "x" * max(1, int(schema.get("minLength", 1)))
    if kind in ("integer", "number"):
        value = schema.get("minimum", schema.get("exclusiveMinimum", 0) + 1 if "exclusiveMinimum" in schema else 1)
        return int(value) if kind == "integer" else float(value)
    if kind == "boolean":
        return False
    if kind == "null":
        return None
    if kind == "array":
        if "prefixItems" in schema:
            return [_value_of(item, defs, depth + 1) for item in schema["prefixItems"]]
        return [_value_of(schema.get("items", {}), defs, depth + 1) for _ in range(int(schema.get("minItems", 0)))]
    if kind == "object":
        if "properties" in schema:
            return {key: _value_of(schema["properties"][key], defs, depth + 1) for key in schema.get("required", [])}
        count = int(schema.get("minProperties", 0))
        extra = schema.get("additionalProperties", {})
        return {f"x{i}": _value_of(extra if isinstance(extra, dict) else {}, defs, depth + 1) for i in range(count)}
    raise ValueError(f"a value of schema {dict(schema)}")


# ---------------------------------------------------------------- pickling, resolved config, cache
def _check_pickle(registration: StageKind, spec: StageSpec, label: str) -> StageSpec:
    for what, value in (("spec", spec), ("registration", registration)):
        try:
            back = pickled(value)
        except Exception as exc:  # noqa: BLE001
            raise ConformanceFailure(label, "pickle", f"the {what} does not pickle ({first_line(exc)}); Dask "
                                     "workers receive it: define classes and functions at module level") from None
        if back != value or type(back) is not type(value):
            raise ConformanceFailure(label, "pickle", f"the {what} unpickles unequal: {back!r} != {value!r}")
    return pickled(spec)


def _check_resolved_config(config: PipelineConfig, spec: StageSpec, label: str) -> StageSpec:
    try:
        text = dump_config(config)
    except Exception as exc:  # noqa: BLE001
        raise ConformanceFailure(label, "resolved config", f"the resolved config cannot be written "
                                 f"({first_line(exc)}): fields must dump to JSON values") from None
    reloaded, error = load_block(text, label, "the resolved config")
    if error is not None:
        raise ConformanceFailure(label, "resolved config", f"the run's resolved config.yaml does not load back: "
                                                           f"{_issues(error)}")
    assert reloaded is not None
    again = reloaded.stages[STAGE]
    if again != spec:
        raise ConformanceFailure(label, "resolved config", f"the resolved config loads back as {again!r}, not {spec!r}")
    return again


def _check_fingerprint(registration: StageKind, specs: list[StageSpec], label: str) -> None:
    from pipeline.cache import stage_key

    seen = []
    for spec in specs:
        try:
            found = registration.fingerprint(spec)
        except Exception as exc:  # noqa: BLE001
            raise ConformanceFailure(label, "fingerprint", f"fingerprint(spec) raised {first_line(exc)}") from None
        if found is not None and not isinstance(found, Mapping):
            raise ConformanceFailure(label, "fingerprint", f"fingerprint(spec) must return a mapping or None (never "
                                                           f"cache), not {type(found).__name__}")
        try:
            text = json.dumps(None if found is None else dict(found), sort_keys=True, default=str)
            code = registration.code_modules(spec)      # its kind, what it names (uses=), their imports
            key = stage_key(spec, {}, fingerprint=found, code=code, backend="cpu", versions={}, seed=0)
        except Exception as exc:  # noqa: BLE001
            raise ConformanceFailure(label, "fingerprint",
                                     f"the cache cannot key the stage ({first_line(exc)})") from None
        seen.append((text, key))
    if len(set(seen)) != 1:
        shown = sorted({text for text, _ in seen})
        raise ConformanceFailure(label, "fingerprint", f"equal specs give different fingerprints or cache keys "
                                                       f"({' vs '.join(shown)}); it must be deterministic")
