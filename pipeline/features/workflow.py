"""FeatureWorkflow: an ordered list of ops, fitted together, applied anywhere.

Use it as a library on a frame you already have::

    wf = FeatureWorkflow([Standardize(columns=["tenure"]), OneHot(columns=["Contract"])])
    X_train = wf.fit_transform(train_df)
    X_test = wf.transform(test_df)
    wf.save("workflow.json")          # JSON: numbers and category lists only

The fitted state is backend-neutral, so ``FeatureWorkflow.load(path).transform(df)`` works on
pandas or cuDF whichever device fitted it. Fitting goes through one driver for in-memory and
partitioned frames (``pipeline.features.fitting``); nothing here asks which op it holds.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from pydantic import ValidationError

from pipeline.backends import Backend, backend_for, is_partitioned
from pipeline.core.dtypes import dtype_kind
from pipeline.core.errors import DataError, RowsError, UsageError
from pipeline.core.problems import Task
from pipeline.features.fitting import apply_ops, fit_ops, required_columns
from pipeline.features.ops import OPS, FeatureOp, OpState
from pipeline.features.ops.op_base import Target
from pipeline.features.ops.op_support import per_column
from pipeline.features.selection import resolve_selectors

FORMAT_VERSION = 1
# The models read one float32 matrix: a float64 value beyond this becomes infinity there.
FLOAT32_MAX = float(np.finfo(np.float32).max)
# Rows named per column in a ``RowsError`` of missing values (the message counts them all).
MAX_ROWS_NAMED = 100


def op_from_spec(spec: FeatureOp | Mapping[str, Any]) -> FeatureOp:
    """An op from ``{"standardize": {"columns": [...]}}`` (the YAML form) or an op object."""
    if isinstance(spec, FeatureOp):
        return spec
    if not isinstance(spec, Mapping) or len(spec) != 1:
        raise ValueError(f"a feature op is a mapping with one key (the op name), got {spec!r}")
    (name, params), = spec.items()
    if name not in OPS:
        raise ValueError(f"unknown feature op '{name}' (known: {', '.join(sorted(OPS))}); if a plugin registers it, "
                         "load that plugin: list its module under plugins: in the config or in the PIPELINE_PLUGINS "
                         "environment variable")
    return OPS[name](**(params or {}))


def op_entry(op: FeatureOp, state: OpState) -> dict[str, Any]:
    """One fitted op as workflow.json holds it: ``{"op": name, "params": {...}, "state": {...}}``."""
    return {"op": op.op, "params": op.model_dump(mode="json"), "state": state.model_dump(mode="json")}


def op_from_entry(position: int, entry: Mapping[str, Any]) -> tuple[FeatureOp, OpState]:
    """The op and its typed state from a workflow.json entry (``position``: 0-based, for messages);
    a state its op's model refuses is a DataError naming the op."""
    op = op_from_spec({entry["op"]: entry["params"]})
    return op, _load_state(position, op, entry.get("state"))


class FeatureWorkflow:
    """Ops applied in order; each op is fitted on the output of the ops before it.

    Fitted attributes: ``op_states_`` (each op's typed state), ``states_`` (the same as JSON,
    as workflow.json holds them), ``passes_`` (dependency phases: passes over partitioned
    data), ``input_columns_`` (name -> dtype of the input columns scoring needs: those the
    ops read or pass through, not those they only drop) and ``output_columns_``.
    ``positions_`` is each op's place in the list the workflow was given (an op a selector
    skipped is not in ``ops``): an op that fails is named by it, as ``feature ops[2] (name)``.

    Numbers are checked where they enter: an infinite value in a numeric input column is a
    DataError naming the column and row (at fit and at transform), and so is an output value
    beyond the float32 range the models read.

    Examples:
        >>> import pandas as pd
        >>> from pipeline import FeatureWorkflow
        >>> from pipeline.features import OneHot, Standardize
        >>> train = pd.DataFrame({"plan": ["a", "b", "a"], "tenure": [1.0, 5.0, 9.0]})
        >>> workflow = FeatureWorkflow([OneHot(columns=["plan"]), Standardize(columns=["tenure"])])
        >>> workflow.fit_transform(train).round(3).to_dict("list")
        {'tenure': [-1.225, 0.0, 1.225], 'plan=a': [1.0, 0.0, 1.0], 'plan=b': [0.0, 1.0, 0.0]}
        >>> workflow.transform(pd.DataFrame({"plan": ["c"], "tenure": [5.0]})).to_dict("list")
        {'tenure': [0.0], 'plan=a': [0.0], 'plan=b': [0.0]}
    """

    def __init__(self, ops: Sequence[FeatureOp | Mapping[str, Any]], *, backend: Backend | str | None = None) -> None:
        self.ops = [op_from_spec(o) for o in ops]
        self.positions_ = list(range(len(self.ops)))
        self.backend = backend
        # What each column selector resolved to at fit (``pipeline.features.selection``).
        self.selections_: list[dict[str, Any]] = []

    # ------------------------------------------------------------ fitting
    def fit(self, frame: Any, target: Any = None, *, task: Task | None = None) -> FeatureWorkflow:
        self.fit_transform(frame, target, task=task)
        return self

    def fit_transform(self, frame: Any, target: Any = None, *, task: Task | None = None) -> Any:
        """Fit on ``frame`` and return it transformed (lazily for a partitioned frame).

        ``target``: ``frame``'s labels (a series, array or list, one per row), which the ops that
        learn from the label need (``target_encode``); ``task`` says how they are coded (read
        from the labels when not given). The frame returned is the training split as the model
        trains on it: such an op's values there are out of fold, and ``transform`` of the same
        frame gives the values any other split gets."""
        backend = self._backend_for(frame)
        lazy = is_partitioned(frame)
        if not lazy:
            frame = self._as_frame(frame, backend)
        labels = None
        if target is not None and not lazy and any(op.uses_target for op in self.ops):
            labels = Target.of(target, backend, task)
        self._resolve_selectors(frame, backend, labels)
        dtypes = {str(c): str(dtype) for c, dtype in frame.dtypes.items()}
        self.input_columns_ = {c: dtypes[c] for c in required_columns(self.ops, list(dtypes))}
        if not lazy:
            self._check_finite_inputs(frame, backend, "training split")
        fitted = fit_ops(self.ops, frame, backend, labels, self._positions())
        self.op_states_, self.passes_ = fitted.states, fitted.passes
        if lazy:
            # Each partition goes through ``transform``; missing values are checked there.
            self._set_output_columns(apply_ops(frame._meta, self.ops, self.op_states_, backend, self._positions()),
                                     backend)
            return self.transform(frame)
        out = fitted.transformed(self.ops)
        self._set_output_columns(out, backend)
        self._check_no_missing(out, backend, "training split")
        self._check_float32_range(out, backend, "training split")
        return out

    def _resolve_selectors(self, frame: Any, backend: Backend, labels: Target | None) -> None:
        """Selectors to names, on this training frame; ops that select nothing are left out."""
        if any(op.selector is not None for op in self.ops):
            resolved, selections = resolve_selectors(self.ops, frame, backend, labels)
            self.ops, self.selections_ = resolved, [s.as_json() for s in selections]
            self.positions_ = given_positions(len(self.ops), self.selections_)

    def _positions(self) -> list[int] | None:
        """``positions_``; None for a workflow pickled before it had them (a cached stage output)."""
        return getattr(self, "positions_", None)

    # ------------------------------------------------------------ applying
    def transform(self, frame: Any) -> Any:
        self._check_fitted()
        if is_partitioned(frame):
            # Each partition goes through this same method; missing values are checked there.
            return frame.map_partitions(self.transform, meta=self.transform(frame._meta))
        backend = self._backend_for(frame)
        frame = self._as_frame(frame, backend)
        missing = [c for c in self.input_columns_ if c not in frame.columns]
        if missing:
            raise DataError(f"input is missing column(s) {missing} that the workflow was fitted with")
        frame = frame[list(self.input_columns_)]
        self._check_finite_inputs(frame, backend, "input")
        frame = apply_ops(frame, self.ops, self.op_states_, backend, self._positions())
        frame = frame[self.output_columns_]
        self._check_no_missing(frame, backend, "input")
        self._check_float32_range(frame, backend, "input")
        return frame

    def _set_output_columns(self, frame: Any, backend: Backend) -> None:
        """Record the output columns; every one must be numeric by now, and named once."""
        names = [str(c) for c in frame.columns]
        repeated = sorted(c for c, n in Counter(names).items() if n > 1)
        if repeated:
            # An op named a new column like one already there (one_hot's "x=a" beside an input
            # "x=a"): the model would get both under one name.
            raise DataError(f"columns {repeated} appear more than once after the feature ops; rename or drop "
                            "the input column that an op's output collides with")
        non_numeric = [str(c) for c in frame.columns if not backend.is_numeric(frame[c])]
        dates = [c for c in non_numeric if dtype_kind(frame[c].dtype) == "date"]
        text = [c for c in non_numeric if c not in dates]
        problems = []
        if dates:
            problems.append(f"columns {dates} are dates: turn them into numbers with date_parts or date_diff, "
                            "or drop them")
        if text:
            problems.append(f"columns {text} are still text after the feature ops; encode them with "
                            "one_hot or categorify, or remove them with drop")
        if problems:
            raise DataError("; ".join(problems))
        self.output_columns_ = names

    def categorical_cardinalities(self) -> dict[str, int]:
        """Embedding sizes of categorified columns (known values + the 0 bucket)."""
        self._check_fitted()
        sizes: dict[str, int] = {}
        for op, state in zip(self.ops, self.op_states_):
            sizes.update(op.categorical_cardinalities(state))
        return sizes

    # ------------------------------------------------------------ state
    @property
    def states_(self) -> list[dict[str, Any]]:
        """The fitted states as JSON data, as workflow.json holds them."""
        return [state.model_dump(mode="json") for state in self.op_states_]

    @states_.setter
    def states_(self, states: Sequence[Mapping[str, Any]]) -> None:
        self.op_states_ = [_load_state(i, op, state) for i, (op, state) in enumerate(zip(self.ops, states))]

    def to_dict(self) -> dict[str, Any]:
        self._check_fitted()
        return {
            "format_version": FORMAT_VERSION,
            "input_columns": self.input_columns_,
            "output_columns": self.output_columns_,
            "ops": [op_entry(op, state) for op, state in zip(self.ops, self.op_states_)],
            **({"selections": self.selections_} if self.selections_ else {}),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, backend: Backend | str | None = None) -> FeatureWorkflow:
        if data.get("format_version") != FORMAT_VERSION:
            raise DataError(f"feature workflow format {data.get('format_version')!r} is not supported "
                            f"(this version reads {FORMAT_VERSION})")
        try:
            wf = cls([{d["op"]: d["params"]} for d in data["ops"]], backend=backend)
            wf.states_ = [d.get("state") for d in data["ops"]]
            wf.input_columns_ = _string_map(data["input_columns"])
            wf.output_columns_ = [str(c) for c in _string_list(data["output_columns"])]
            wf.selections_ = list(data.get("selections", []))
            wf.positions_ = given_positions(len(wf.ops), wf.selections_)
        except DataError:
            raise
        except Exception as exc:  # noqa: BLE001 - a file edited by hand fails in many ways; all are data errors
            # Checksums say the file is the one written; they do not make its contents well formed.
            message = " ".join(str(exc).split())
            raise DataError(f"feature workflow (workflow.json) is malformed: {type(exc).__name__}: {message}") from None
        return wf

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write workflow.json: strict JSON (no NaN or Infinity, which other readers refuse and
        which would turn every transformed value into them), or nothing and a DataError."""
        from pipeline.runs.store import atomic_write_text

        data = self.to_dict()
        for position, (op, entry) in enumerate(zip(self.ops, data["ops"])):
            for where, value in _non_finite(entry["state"], []):
                column = next((str(k) for k in where if k in op.columns), "?")
                raise DataError(f"feature workflow: op {position + 1} ('{op.op}') fitted {value} for column "
                                f"'{column}' ({'.'.join(map(str, where))}), not a finite number; "
                                "workflow.json holds finite numbers only")
        try:
            text = json.dumps(data, indent=2, sort_keys=False, allow_nan=False)
        except ValueError as exc:
            raise DataError(f"feature workflow cannot be written as JSON: {exc}") from exc
        atomic_write_text(path, text)

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, backend: Backend | str | None = None) -> FeatureWorkflow:
        try:
            with open(path, encoding="utf-8") as fh:
                data = json.load(fh)
        except (OSError, ValueError, RecursionError) as exc:
            raise DataError(f"{path}: cannot read the feature workflow: {' '.join(str(exc).split())}") from None
        if not isinstance(data, dict):
            raise DataError(f"{path}: the feature workflow is not a JSON object")
        return cls.from_dict(data, backend=backend)

    # ------------------------------------------------------------ helpers
    def _backend_for(self, frame: Any) -> Backend:
        return backend_for(frame, self.backend)

    @staticmethod
    def _as_frame(frame: Any, backend: Backend) -> Any:
        return backend.from_pandas(frame) if isinstance(frame, pd.DataFrame) else frame

    def _check_fitted(self) -> None:
        if not hasattr(self, "op_states_"):
            raise UsageError("this FeatureWorkflow is not fitted yet; call fit() first")

    def _check_finite_inputs(self, frame: Any, backend: Backend, what: str) -> None:
        """No infinity in a float input column the workflow reads: statistics and models would
        carry it on as inf or NaN. Named with the first row (1-based, in ``frame``'s order)."""
        for column in infinite_columns(frame, list(self.input_columns_), backend):
            row = first_infinite_row(frame[column], backend)
            raise RowsError(f"column '{column}' holds infinite values in the {what} (first at row {row}); "
                            "replace them (with a number, or leave them blank and add a fill_missing op)",
                            [(str(column), row - 1, "an infinite value; replace it with a number, or leave it "
                                                    "blank where a fill_missing op fills the column")])

    @staticmethod
    def _check_float32_range(frame: Any, backend: Backend, what: str) -> None:
        """Every float64 output value must fit the float32 matrix the models read (1e200 would
        become infinity there); narrower dtypes always do."""
        wide = [c for c in frame.columns if str(frame[c].dtype) == "float64"]
        for column in _beyond(frame, wide, backend, FLOAT32_MAX):
            row, value = first_row_beyond(frame[column], backend, FLOAT32_MAX)
            fix = ("scale it with standardize or log1p" if what == "training split" else
                   "the training rows stayed within it, so this row is far outside them: check its value (a clip op "
                   "bounds such values, if they are expected)")
            raise RowsError(f"column '{column}' reaches values beyond the float32 range (about ±3.4e38) in the "
                            f"{what} after the feature ops (first at row {row}: {value:g}), and the models read "
                            f"float32; {fix}",
                            [(str(column), row - 1, f"becomes {value:g} after the feature ops, beyond the float32 "
                                                    "range (about ±3.4e38) the models read")])

    @staticmethod
    def _check_no_missing(frame: Any, backend: Backend, what: str) -> None:
        counts = backend.to_host(frame.isna().sum())
        bad = {str(c): int(n) for c, n in counts.items() if n}
        if bad:
            rows = [(str(column), int(position), "a missing value remains after the feature ops (no fill_missing op "
                                            "fills this column)")
                    for column, n in counts.items() if n
                    for position in np.flatnonzero(np.asarray(backend.to_host(frame[column].isna())))[:MAX_ROWS_NAMED]]
            first = ", ".join(f"'{column}' at row {position + 1}" for column, position, _ in
                              dict((r[0], r) for r in reversed(rows)).values())
            advice = ("add these columns to a fill_missing op" if what == "training split" else
                      "the fitted workflow fills none there (its training rows had no missing value in them): "
                      "give these rows a value, or retrain with the columns in a fill_missing op")
            raise RowsError(f"missing values remain in the {what} after the feature ops: {bad} (first: {first}); "
                            f"{advice}", rows)

    def __repr__(self) -> str:
        ops = ", ".join(op.op for op in self.ops)
        fitted = "fitted" if hasattr(self, "op_states_") else "not fitted"
        return f"FeatureWorkflow([{ops}], {fitted})"


def _beyond(frame: Any, columns: list[Any], backend: Backend, limit: float) -> list[Any]:
    """The ``columns`` holding a value whose magnitude is ``limit`` or more (infinity included):
    two reductions per column, no copy of the data."""
    if not columns:
        return []

    def reaches(column: Any) -> bool:
        series = frame[column]
        return _at_least(series.max(), limit) or _at_least(-_as_float(series.min()), limit)

    # Per column, not ``frame[columns].max()``: selecting the columns copies them, and a
    # frame-wide reduction costs 1.6 ms on one row (a column's, 36 us).
    return [c for c, beyond in zip(columns, per_column(backend, frame, reaches, columns)) if beyond]


def _at_least(value: Any, limit: float) -> bool:
    number = _as_float(value)
    return not math.isnan(number) and (number >= limit if math.isinf(limit) else number > limit)


def _as_float(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):         # pandas NA: a column without values
        return math.nan


def infinite_columns(frame: Any, columns: Sequence[Any], backend: Backend) -> list[Any]:
    """The float ``columns`` of ``frame`` holding +-infinity (other dtypes cannot)."""
    floats = [c for c in columns if dtype_kind(frame[c].dtype) == "float"]
    return _beyond(frame, floats, backend, math.inf)


def first_row_beyond(series: Any, backend: Backend, limit: float) -> tuple[int, float]:
    """1-based position and value of the first value of magnitude ``limit`` or more (infinity
    included; only asked once one is known to be there)."""
    values = backend.to_host(series).to_numpy(dtype="float64", na_value=np.nan)
    with np.errstate(invalid="ignore"):
        hits = np.flatnonzero(np.abs(values) >= limit)
    return (int(hits[0]) + 1, float(values[hits[0]])) if len(hits) else (0, math.nan)


def first_infinite_row(series: Any, backend: Backend) -> int:
    """1-based position of the first infinite value (only asked once one is known to be there)."""
    values = backend.to_host(series).to_numpy(dtype="float64", na_value=np.nan)
    hits = np.flatnonzero(np.isinf(values))
    return int(hits[0]) + 1 if len(hits) else 0


def _non_finite(value: Any, where: list[Any]) -> Iterator[tuple[list[Any], float]]:
    """(path, value) of each NaN or infinity in a JSON-like state."""
    if isinstance(value, float) and not math.isfinite(value):
        yield where, value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _non_finite(item, [*where, key])
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from _non_finite(item, [*where, index])


def given_positions(count: int, selections: Sequence[Any]) -> list[int]:
    """The positions of a workflow's ``count`` fitted ops in the list it was given: the ops a
    selector took no column for (``selections`` without columns) were left out of it. Only for
    messages, so a hand-edited entry there does not stop a workflow.json loading."""
    skipped = {s["position"] for s in selections
               if isinstance(s, Mapping) and isinstance(s.get("position"), int) and not s.get("columns")}
    return [i for i in range(count + len(skipped)) if i not in skipped][:count]


def _load_state(position: int, op: FeatureOp, data: Any) -> OpState:
    """A saved op state validated into the op's state model; a bad one names the op."""
    try:
        return op.load_state(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'state'}: {e['msg']}" for e in exc.errors())
        raise DataError(f"feature workflow: op {position + 1} ('{op.op}') has an invalid fitted state: "
                        f"{problems}") from None


def _string_map(value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise TypeError("input_columns must map column names to dtype names")
    return dict(value)


def _string_list(value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(c, str) for c in value):
        raise TypeError("output_columns must be a list of column names")
    return value
