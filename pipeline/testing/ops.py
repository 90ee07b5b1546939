"""``check_op``: a feature op run through the op contract, in the style of scikit-learn's
``check_estimator``. For the package's own ops (tests/features/test_op_registry.py runs it on every
registered op) and for a plugin's, in the plugin's own tests::

    from pipeline.testing.ops import check_op

    def test_my_op_keeps_the_contract():
        check_op(MyOp)                  # its ``example`` params on default_sample_frame()
        check_op(MyOp(columns=["x"]), my_frame)

Each check that fails raises an ``AssertionError`` naming the op and the check:

- ``class``: a ``FeatureOp`` subclass with an op name, a state model, closed frozen params;
- ``registered``: the registry holds this class under its name (``register_op``), so configs
  and workflow.json find it;
- ``invalid params``: an unknown key, a missing or mistyped ``columns`` are validation errors
  naming the key;
- ``yaml``: the op validates from a config's ``features`` stage into an equal instance, and
  a bad parameter there is a ConfigError at the key path (``stages.features.ops[0].<op>.<key>``)
  with its line;
- ``fit``: ``fit`` returns the op's state model and leaves the frame as it was; the
  workflow's fit driver (``statistics`` then ``fit_from``) gives the same state; an op that
  ``uses_target`` is given binary labels of the sample's rows (``sample_target``), and its
  ``transform_training`` must give the rows, index and columns ``transform`` does;
- ``transform``: a frame with the same rows and index, the columns ``output_columns`` names,
  the input left as it was, each output column one the checks before reading data allow
  (``columns_after``);
- ``row-wise``: a slice of the rows transforms as the same rows of the whole frame (scoring
  batches and Dask partitions are slices);
- ``workflow.json``: the fitted state as workflow.json holds it (strict JSON, through
  ``pipeline.features.workflow.op_entry``) loads into an equal op and state, which transform
  identically;
- ``pickle``: the op and its state pickle (as Dask sends them to workers: pickle, else
  cloudpickle) and the copies transform identically;
- ``frame api``: each name the op declares in ``frame_api`` exists on pandas and, where cuDF
  is installed, on cuDF.
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Callable, Mapping
from typing import Any, NoReturn

import numpy as np
import pandas as pd
from pydantic import ValidationError

from pipeline.backends import Backend, get_backend
from pipeline.backends.headers import ColumnSet
from pipeline.config.loader import load_config
from pipeline.core.errors import ConfigError
from pipeline.features.fitting import fit_ops
from pipeline.features.ops import OPS, FeatureOp, OpState, Target
from pipeline.features.workflow import op_entry, op_from_entry
from pipeline.testing.failures import Check, ConformanceFailure, Prerequisites, run_checks

__all__ = ["check_op", "default_sample_frame", "op_checks", "sample_target"]

# The YAML check's config: a features stage whose ops: list holds the op under test, at OP_LINE.
CONFIG = """\
name: check_op
device: cpu
stages:
  raw: {{kind: load, path: sample.csv}}
  split: {{kind: split, inputs: [raw], target: y, test: 0.25}}
  features:
    kind: features
    inputs: [split]
    ops:
      - {name}: {params}
"""
OP_LINE = 10
UNKNOWN_KEY = "not_a_parameter"


def default_sample_frame() -> pd.DataFrame:
    """The frame ``check_op`` uses by default (a new copy each call), which the built-in ops'
    ``example`` params name: ``num`` (float with gaps), ``count`` (non-negative int), ``cat``
    (text with a gap and a rare value), ``flag`` (bool), ``when`` (dates with a gap) and
    ``until`` (dates)."""
    return pd.DataFrame({
        "num": [1.0, 2.5, np.nan, 4.0, 10.0, 0.5, 3.0, 7.0, 2.0, 5.5, np.nan, 6.0],
        "count": np.array([0, 1, 2, 3, 5, 8, 13, 21, 0, 1, 2, 3], dtype="int64"),
        "cat": ["a", "b", "a", None, "c", "a", "b", "a", "d", "b", "a", "c"],
        "flag": [True, False, True, True, False, True, False, True, True, False, True, True],
        "when": pd.to_datetime(["2020-01-05", "2020-02-29", None, "2020-12-31", "2021-03-14", "2021-07-04",
                                "2019-11-11", "2020-06-15", "2021-01-01", "2020-09-09", "2021-05-05", "2019-12-25"]),
        "until": pd.to_datetime(["2022-01-01 00:00"] * 6 + ["2022-06-30 12:00"] * 6),
    })


def sample_target(rows: int) -> np.ndarray:
    """Binary labels for the rows of a sample frame (an op that ``uses_target`` fits on them):
    a fixed pattern, so the check is the same every run."""
    return np.array([(i * 7 // 3) % 2 for i in range(rows)], dtype="int64")


class _Check:
    """Raises ``ConformanceFailure`` (an AssertionError) naming the op and the failed check, as
    ``check_stage_kind`` and ``check_model`` do."""

    def __init__(self, op: str) -> None:
        self.op = op

    def fail(self, check: str, detail: str) -> NoReturn:
        raise ConformanceFailure(f"feature op '{self.op}'", check, detail)

    def that(self, ok: bool, check: str, detail: str) -> None:
        if not ok:
            self.fail(check, detail)

    def frames_equal(self, got: Any, expected: Any, check: str, what: str) -> None:
        try:
            pd.testing.assert_frame_equal(got, expected)
        except AssertionError as exc:
            self.fail(check, f"{what}: {' '.join(str(exc).split())}")


def check_op(op: type[FeatureOp] | FeatureOp | str, sample_frame: pd.DataFrame | None = None, *,
             params: Mapping[str, Any] | None = None) -> None:
    """Run ``op`` (a registered name, a ``FeatureOp`` class or an instance) through every check
    of the op contract (``op_checks``) on ``sample_frame`` (default: ``default_sample_frame()``),
    on the CPU backend.

    The instance checked is ``op`` itself, or the class built with ``params``, else with the
    class's ``example`` params. Raises AssertionError naming each failed check (see the
    module's list); returns None when every check passes.

    Examples:
        >>> from pipeline.testing import check_op
        >>> check_op("standardize")             # None: the op keeps the contract
    """
    run_checks(op_checks(op, sample_frame, params=params))


def op_checks(op: type[FeatureOp] | FeatureOp | str, sample_frame: pd.DataFrame | None = None, *,
              params: Mapping[str, Any] | None = None) -> list[Check]:
    """``check_op``'s checks, one ``Check`` each, in the module's order, for
    ``parametrize_with_checks``; the fit and the transform run once, for every check that needs them.

    Examples:
        >>> from pipeline.testing import op_checks
        >>> [check.id for check in op_checks("standardize")]
        ['class', 'registered', 'invalid params', 'yaml', 'fit', 'transform', 'row-wise', 'workflow.json', 'pickle', 'frame api']
    """
    name = op if isinstance(op, str) else (op.op if isinstance(op, FeatureOp) else getattr(op, "op", repr(op)))
    subject = _OpSubject(op, sample_frame, params, _Check(str(name)))
    label = f"feature op '{name}'"
    return [Check(label, "class", subject.instance, owns=("class checked", "instance")),
            *(Check(label, check_id, run) for check_id, run in (
                ("registered", subject.registered), ("invalid params", subject.invalid_params), ("yaml", subject.yaml),
                ("fit", subject.state), ("transform", subject.out), ("row-wise", subject.row_wise),
                ("workflow.json", subject.workflow_json), ("pickle", subject.pickle), ("frame api", subject.frame_api)))]


class _OpSubject:
    """The op under check and what its checks share, each made once (``Prerequisites``)."""

    def __init__(self, op: Any, sample_frame: pd.DataFrame | None, params: Mapping[str, Any] | None,
                 check: _Check) -> None:
        self.op, self.params, self.check = op, params, check
        self.backend = get_backend("cpu")
        # Named so that scripts/check_gpu_api.py does not take it for a device frame: passed to
        # fit_ops, it would make that function's frame uncertain there.
        self.sample = default_sample_frame() if sample_frame is None else sample_frame
        self.steps = Prerequisites()

    def _resolved(self) -> tuple[type[FeatureOp], FeatureOp | None]:
        return self.steps.get("class", lambda: _resolve(self.op, self.params, self.check))

    def checked_class(self) -> type[FeatureOp]:
        def make() -> type[FeatureOp]:
            cls = self._resolved()[0]
            _check_class(cls, self.check)
            return cls
        return self.steps.get("class checked", make)

    def registered(self) -> None:
        cls = self._resolved()[0]
        self.check.that(OPS.get(cls.op) is cls, "registered",
                        f"the registry holds {OPS.get(cls.op)!r} under '{cls.op}', not {cls.__name__}: decorate the "
                        "class with @register_op (pipeline.features.register_op) and import its module (a plugin)")

    def instance(self) -> FeatureOp:
        def make() -> FeatureOp:
            cls, instance = self._resolved()[0], self._resolved()[1]
            self.checked_class()
            if instance is not None:
                return instance
            given = self.params if self.params is not None else cls.example
            self.check.that(given is not None, "class", f"{cls.__name__} declares no example params: pass params=... "
                                                        "or an instance, or set example: ClassVar[dict] on the class")
            return _build(cls, dict(given or {}), self.check)
        return self.steps.get("instance", make)

    def invalid_params(self) -> None:
        _check_invalid_params(self.checked_class(), self.instance().model_dump(mode="json"), self.check)

    def yaml(self) -> None:
        instance = self.instance()
        _check_yaml(instance, instance.model_dump(mode="json"), self.check)

    def state(self) -> OpState:
        return self.steps.get("fit", lambda: _check_fit(self.instance(), self.sample, self.backend, self.check))

    def out(self) -> pd.DataFrame:
        return self.steps.get("transform", lambda: _check_transform(self.instance(), self.sample, self.state(),
                                                                    self.backend, self.check))

    def row_wise(self) -> None:
        _check_row_wise(self.instance(), self.sample, self.state(), self.out(), self.backend, self.check)

    def workflow_json(self) -> None:
        _check_workflow_json(self.instance(), self.state(), self.sample, self.out(), self.backend, self.check)

    def pickle(self) -> None:
        _check_pickle(self.instance(), self.state(), self.sample, self.out(), self.backend, self.check)

    def frame_api(self) -> None:
        _check_frame_api(self._resolved()[0], self.check)


# ------------------------------------------------------------------ the checks
def _resolve(op: Any, params: Mapping[str, Any] | None, check: _Check) -> tuple[type[FeatureOp], FeatureOp | None]:
    if isinstance(op, str):
        check.that(op in OPS, "registered", f"no op '{op}' is registered (registered: {', '.join(OPS)})")
        return OPS[op], None
    if isinstance(op, FeatureOp):
        check.that(params is None, "class", "params= is for a class or a name; an instance has its own")
        return type(op), op
    check.that(isinstance(op, type) and issubclass(op, FeatureOp), "class",
               f"{op!r} is not a FeatureOp subclass, an instance of one or a registered name")
    return op, None


def _check_class(cls: type[FeatureOp], check: _Check) -> None:
    check.that(isinstance(getattr(cls, "op", None), str), "class", f"{cls.__name__} has no op name "
                                                                    "(op: ClassVar[str] = 'my_op')")
    check.that(isinstance(cls.state_model, type) and issubclass(cls.state_model, OpState), "class",
               f"state_model {cls.state_model!r} is not an OpState subclass")
    config = cls.model_config
    check.that(config.get("extra") == "forbid", "class", f"{cls.__name__} must refuse unknown keys "
                                                          "(model_config extra='forbid', as FeatureOp has): a typo "
                                                          "in a config would be ignored")
    check.that(bool(config.get("frozen")), "class", f"{cls.__name__} must be frozen (as FeatureOp is): a fitted "
                                                     "op's parameters cannot change under its state")
    state_config = cls.state_model.model_config
    check.that(state_config.get("extra") == "forbid", "class",
               f"state model {cls.state_model.__name__} must refuse unknown keys (OpState does)")


def _build(cls: type[FeatureOp], params: dict[str, Any], check: _Check) -> FeatureOp:
    try:
        return cls(**params)
    except ValidationError as exc:
        check.fail("class", f"{cls.__name__}(**{params!r}) is not valid: {' '.join(str(exc).split())}")


def _raises_at(build: Callable[[], Any], key: str) -> str | None:
    """None when ``build()`` raises a ValidationError at ``key``, else what happened."""
    try:
        build()
    except ValidationError as exc:
        locations = [tuple(e["loc"]) for e in exc.errors()]
        if any(loc[:1] == (key,) for loc in locations):
            return None
        return f"the validation error is at {locations}, not at '{key}'"
    except Exception as exc:  # noqa: BLE001 - anything but a validation error is the failure itself
        return f"it raised {type(exc).__name__}: {exc}, not a validation error"
    return "it was accepted"


def _check_invalid_params(cls: type[FeatureOp], params: dict[str, Any], check: _Check) -> None:
    without_columns = {k: v for k, v in params.items() if k != "columns"}
    for key, build, what in (
        (UNKNOWN_KEY, lambda: cls(**params, **{UNKNOWN_KEY: 1}), f"an unknown key '{UNKNOWN_KEY}'"),
        ("columns", lambda: cls(**without_columns), "no 'columns'"),
        ("columns", lambda: cls(**{**params, "columns": 7}), "columns: 7"),
        ("columns", lambda: cls(**{**params, "columns": []}), "columns: []"),
    ):
        problem = _raises_at(build, key)
        check.that(problem is None, "invalid params", f"{cls.__name__} with {what}: {problem}")


def _config_text(name: str, params: Mapping[str, Any]) -> str:
    """The check's config with the op's params as a flow mapping (JSON is YAML)."""
    return CONFIG.format(name=name, params=json.dumps(params, allow_nan=False))


def _check_yaml(op: FeatureOp, params: dict[str, Any], check: _Check) -> None:
    try:
        config = load_config(text=_config_text(op.op, params))
    except ValueError as exc:
        check.fail("yaml", f"the op's params {params!r} cannot be written in a config (not JSON): {exc}")
    except ConfigError as exc:
        check.fail("yaml", f"the op's params {params} are refused in a features stage: {exc}")
    ops = config.stages["features"].build_ops()          # type: ignore[attr-defined]
    check.that(len(ops) == 1 and type(ops[0]) is type(op) and ops[0] == op, "yaml",
               f"the features stage validated {ops!r}, not {op!r}")
    expected = f"stages.features.ops[0].{op.op}"
    for key, value in ((UNKNOWN_KEY, 1), ("columns", 7)):
        try:
            load_config(text=_config_text(op.op, {**params, key: value}))
        except ConfigError as exc:
            at = [(i.path, i.line) for i in exc.issues]
            check.that((f"{expected}.{key}", OP_LINE) in at, "yaml",
                       f"{key}: {value!r} is reported at {at}, not at {expected}.{key} (line {OP_LINE})")
        else:
            check.fail("yaml", f"a features stage accepted {key}: {value!r} in the op's block")


def _check_fit(op: FeatureOp, sample: Any, backend: Backend, check: _Check) -> OpState:
    before = sample.copy()
    target = Target.of(sample_target(len(sample)), backend) if op.uses_target else None
    try:
        state = op.fit(sample, backend, target)
    except Exception as exc:  # noqa: BLE001
        check.fail("fit", f"{op!r}.fit raised {type(exc).__name__}: {exc}")
    check.that(isinstance(state, op.state_model), "fit",
               f"fit returned {type(state).__name__}, not the op's state_model {op.state_model.__name__}")
    check.frames_equal(sample, before, "fit", "fit changed the frame it was given")
    try:
        driven = fit_ops([op], sample, backend, target).states[0]
    except Exception as exc:  # noqa: BLE001
        check.fail("fit", f"the workflow's fit driver (statistics, then fit_from) raised {type(exc).__name__}: {exc}")
    check.that(driven == state, "fit", f"the workflow's fit driver (statistics, then fit_from) fitted {driven!r}; "
                                       f"fit gave {state!r}")
    if target is not None:
        _check_training_transform(op, sample, state, backend, target, check)
    return state


def _check_training_transform(op: FeatureOp, sample: Any, state: OpState, backend: Backend, target: Target,
                              check: _Check) -> None:
    before = sample.copy()
    try:
        trained = op.transform_training(sample, backend, state, target)
        scored = op.transform(sample, backend, state)
    except Exception as exc:  # noqa: BLE001
        check.fail("fit", f"transform_training raised {type(exc).__name__}: {exc}")
    check.frames_equal(sample, before, "fit", "transform_training changed the frame it was given")
    check.that(trained.index.equals(sample.index), "fit", "transform_training's rows (index) are not the input's")
    check.that([str(c) for c in trained.columns] == [str(c) for c in scored.columns], "fit",
               f"transform_training outputs columns {list(trained.columns)}; transform outputs {list(scored.columns)}")


def _check_transform(op: FeatureOp, sample: Any, state: OpState, backend: Backend,
                     check: _Check) -> pd.DataFrame:
    before = sample.copy()
    try:
        out = op.transform(sample, backend, state)
    except Exception as exc:  # noqa: BLE001
        check.fail("transform", f"raised {type(exc).__name__}: {exc}")
    check.that(isinstance(out, pd.DataFrame), "transform", f"returned {type(out).__name__}, not a DataFrame")
    check.frames_equal(sample, before, "transform", "transform changed the frame it was given")
    check.that(out.index.equals(sample.index), "transform", "the output's rows (index) are not the input's")
    names = [str(c) for c in out.columns]
    expected = op.output_columns([str(c) for c in sample.columns], state)
    check.that(names == expected, "transform", f"the output columns are {names}; output_columns says {expected}")
    known = op.columns_after(ColumnSet(tuple(str(c) for c in sample.columns), source="the sample frame"),
                             f"is removed by {op.op}")
    refused = [c for c in names if not known.may_have(c)]
    check.that(not refused, "transform", f"columns_after says {refused} cannot exist after the op, but transform "
                                         "outputs them: validation would refuse a later op reading them")
    return out


def _check_row_wise(op: FeatureOp, sample: Any, state: OpState, out: Any, backend: Backend,
                    check: _Check) -> None:
    rows = slice(len(sample) // 3, max(len(sample) // 3 + 1, 2 * len(sample) // 3))
    try:
        part = op.transform(sample.iloc[rows], backend, state)
    except Exception as exc:  # noqa: BLE001
        check.fail("row-wise", f"transforming rows {rows.start}..{rows.stop - 1} raised {type(exc).__name__}: {exc}")
    check.frames_equal(part, out.iloc[rows], "row-wise",
                       f"rows {rows.start}..{rows.stop - 1} transformed alone differ from the same rows of the whole frame")


def _check_workflow_json(op: FeatureOp, state: OpState, sample: Any, out: Any, backend: Backend,
                         check: _Check) -> None:
    try:
        text = json.dumps(op_entry(op, state), allow_nan=False)
    except (TypeError, ValueError) as exc:
        check.fail("workflow.json", f"the params or fitted state are not strict JSON: {exc}")
    try:
        again, loaded = op_from_entry(0, json.loads(text))
    except Exception as exc:  # noqa: BLE001
        check.fail("workflow.json", f"the saved entry {text} does not load: {type(exc).__name__}: {exc}")
    check.that(again == op, "workflow.json", f"the params load as {again!r}, not {op!r}")
    check.that(loaded == state, "workflow.json", f"the fitted state loads as {loaded!r}; it was fitted as {state!r}")
    reloaded = _transform(again, sample, loaded, backend, check, "workflow.json", "the reloaded op")
    check.frames_equal(reloaded, out, "workflow.json", "the reloaded op and state transform differently")


def _check_pickle(op: FeatureOp, state: OpState, sample: Any, out: Any, backend: Backend,
                  check: _Check) -> None:
    try:
        copy, copied_state = _pickled((op, state))
    except Exception as exc:  # noqa: BLE001
        check.fail("pickle", f"the op or its state cannot be pickled for Dask workers: {type(exc).__name__}: {exc}")
    check.that(copy == op and copied_state == state, "pickle", "the unpickled op or state differs from the original")
    check.frames_equal(_transform(copy, sample, copied_state, backend, check, "pickle", "the unpickled op"), out,
                       "pickle", "the unpickled op transforms differently")


def _pickled(value: Any) -> Any:
    """``value`` through pickle, or cloudpickle where pickle cannot (as Dask sends it)."""
    try:
        data = pickle.dumps(value)
    except Exception:  # noqa: BLE001 - Dask falls back the same way
        import cloudpickle

        data = cloudpickle.dumps(value)
    return pickle.loads(data)


def _transform(op: FeatureOp, sample: Any, state: OpState, backend: Backend, check: _Check, name: str,
               what: str) -> Any:
    try:
        return op.transform(sample, backend, state)
    except Exception as exc:  # noqa: BLE001
        check.fail(name, f"{what} raised {type(exc).__name__} in transform: {exc}")


def _check_frame_api(cls: type[FeatureOp], check: _Check) -> None:
    modules = [("pandas", get_backend("cpu").frame)]
    try:
        modules.append(("cuDF", get_backend("gpu").frame))
    except Exception:  # noqa: BLE001 - no usable RAPIDS here (BackendUnavailable or worse): CPU names only
        pass
    for api in cls.frame_api:
        for library, module in modules:
            check.that(_resolves(module, api), "frame api", f"'{api}' (declared in frame_api) is not in {library}")


def _resolves(module: Any, dotted: str) -> bool:
    target = module
    for part in dotted.split("."):
        if not hasattr(target, part):
            return False
        target = getattr(target, part)
    return True
