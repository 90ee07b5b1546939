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
import os
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd
from pydantic import ValidationError

from pipeline.backends import Backend, backend_for, is_partitioned
from pipeline.errors import DataError
from pipeline.features.fitting import apply_ops, fit_ops
from pipeline.features.ops import OPS, FeatureOp, OpState

FORMAT_VERSION = 1


def op_from_spec(spec: FeatureOp | Mapping[str, Any]) -> FeatureOp:
    """An op from ``{"standardize": {"columns": [...]}}`` (the YAML form) or an op object."""
    if isinstance(spec, FeatureOp):
        return spec
    if not isinstance(spec, Mapping) or len(spec) != 1:
        raise ValueError(f"a feature op is a mapping with one key (the op name), got {spec!r}")
    (name, params), = spec.items()
    if name not in OPS:
        raise ValueError(f"unknown feature op '{name}' (known: {', '.join(sorted(OPS))})")
    return OPS[name](**(params or {}))


class FeatureWorkflow:
    """Ops applied in order; each op is fitted on the output of the ops before it.

    Fitted attributes: ``op_states_`` (each op's typed state), ``states_`` (the same as JSON,
    as workflow.json holds them), ``passes_`` (dependency phases: passes over partitioned
    data), ``input_columns_`` and ``output_columns_``.
    """

    def __init__(self, ops: Sequence[FeatureOp | Mapping[str, Any]], *, backend: Backend | str | None = None) -> None:
        self.ops = [op_from_spec(o) for o in ops]
        self.backend = backend

    # ------------------------------------------------------------ fitting
    def fit(self, frame: Any) -> FeatureWorkflow:
        self.fit_transform(frame)
        return self

    def fit_transform(self, frame: Any) -> Any:
        """Fit on ``frame`` and return it transformed (lazily for a partitioned frame)."""
        backend = self._backend_for(frame)
        lazy = is_partitioned(frame)
        if not lazy:
            frame = self._as_frame(frame, backend)
        self.input_columns_ = {str(c): str(dtype) for c, dtype in frame.dtypes.items()}
        fitted = fit_ops(self.ops, frame, backend)
        self.op_states_, self.passes_ = fitted.states, fitted.passes
        if lazy:
            # Each partition goes through ``transform``; missing values are checked there.
            self._set_output_columns(apply_ops(frame._meta, self.ops, self.op_states_, backend), backend)
            return self.transform(frame)
        out = fitted.transformed(self.ops)
        self._set_output_columns(out, backend)
        self._check_no_missing(out, backend, "training split")
        return out

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
        frame = apply_ops(frame[list(self.input_columns_)], self.ops, self.op_states_, backend)
        frame = frame[self.output_columns_]
        self._check_no_missing(frame, backend, "input")
        return frame

    def _set_output_columns(self, frame: Any, backend: Backend) -> None:
        """Record the output columns; every one must be numeric by now."""
        non_numeric = [str(c) for c in frame.columns if not backend.is_numeric(frame[c])]
        if non_numeric:
            raise DataError(
                f"columns {non_numeric} are still text after the feature ops; encode them with "
                "one_hot or categorify, or remove them with drop"
            )
        self.output_columns_ = [str(c) for c in frame.columns]

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
            "ops": [
                {"op": op.op, "params": op.model_dump(mode="json"), "state": state}
                for op, state in zip(self.ops, self.states_)
            ],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, backend: Backend | str | None = None) -> FeatureWorkflow:
        if data.get("format_version") != FORMAT_VERSION:
            raise DataError(f"feature workflow format {data.get('format_version')!r} is not supported "
                            f"(this version reads {FORMAT_VERSION})")
        wf = cls([{d["op"]: d["params"]} for d in data["ops"]], backend=backend)
        wf.states_ = [d.get("state") for d in data["ops"]]
        wf.input_columns_ = dict(data["input_columns"])
        wf.output_columns_ = list(data["output_columns"])
        return wf

    def save(self, path: str | os.PathLike[str]) -> None:
        from pipeline.store import atomic_write_text

        atomic_write_text(path, json.dumps(self.to_dict(), indent=2, sort_keys=False))

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, backend: Backend | str | None = None) -> FeatureWorkflow:
        with open(path, encoding="utf-8") as fh:
            return cls.from_dict(json.load(fh), backend=backend)

    # ------------------------------------------------------------ helpers
    def _backend_for(self, frame: Any) -> Backend:
        return backend_for(frame, self.backend)

    @staticmethod
    def _as_frame(frame: Any, backend: Backend) -> Any:
        return backend.from_pandas(frame) if isinstance(frame, pd.DataFrame) else frame

    def _check_fitted(self) -> None:
        if not hasattr(self, "op_states_"):
            raise RuntimeError("this FeatureWorkflow is not fitted yet; call fit() first")

    @staticmethod
    def _check_no_missing(frame: Any, backend: Backend, what: str) -> None:
        counts = backend.to_host(frame.isna().sum())
        bad = {str(c): int(n) for c, n in counts.items() if n}
        if bad:
            raise DataError(
                f"missing values remain in the {what} after the feature ops: {bad}; add these "
                "columns to a fill_missing op"
            )

    def __repr__(self) -> str:
        ops = ", ".join(op.op for op in self.ops)
        fitted = "fitted" if hasattr(self, "op_states_") else "not fitted"
        return f"FeatureWorkflow([{ops}], {fitted})"


def _load_state(position: int, op: FeatureOp, data: Any) -> OpState:
    """A saved op state validated into the op's state model; a bad one names the op."""
    try:
        return op.load_state(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'state'}: {e['msg']}" for e in exc.errors())
        raise DataError(f"feature workflow: op {position + 1} ('{op.op}') has an invalid fitted state: "
                        f"{problems}") from None
