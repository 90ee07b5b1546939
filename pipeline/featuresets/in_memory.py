"""``InMemoryFeatures``: one dense float32 matrix per split on the run's device.

``to_matrix`` runs once per split when the features are built; every model reads that same
buffer (estimators fit on it, PyTorch takes it through DLPack), so the copies listed in
``handoffs`` are the only ones.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pipeline.backends import Backend
from pipeline.core.errors import DataError
from pipeline.features import FeatureOp, FeatureWorkflow
from pipeline.featuresets.feature_set import TRAIN, FeatureSet, Scorer
from pipeline.metrics.drift import reference_profile
from pipeline.metrics.profile import PROFILE_ROWS
from pipeline.core.problems import BINARY, Task
from pipeline.tensors.handoff import Handoff, matrix_handoff


@dataclass
class InMemoryFeatures(FeatureSet):
    """Model-ready data: X (n x d float32) and y (the task's labels, ``task.label_dtype``) per
    split, on the run's device."""

    X: dict[str, Any]
    y: dict[str, Any]
    ids: dict[str, Any]               # host pandas Series per split, or None without an id column
    feature_names: list[str]
    workflow: FeatureWorkflow
    target: str
    id_column: str | None
    backend: Backend
    categorical_columns: list[str] = field(default_factory=list)
    # The categorified columns' int64 code matrix per split (embeddings); empty without any.
    codes: dict[str, Any] = field(default_factory=dict)
    # What each frame -> matrix conversion copied, for the manifest.
    handoffs: list[Handoff] = field(default_factory=list)
    uid: str = field(default_factory=lambda: uuid.uuid4().hex)
    task: Task = BINARY
    # ``folds: k`` of the split: what building each fold's features needs (None without folds).
    folds: Any = None
    # The features this is a ``view`` of (some of their columns); None for whole features.
    view_of: InMemoryFeatures | None = None

    def rows(self) -> dict[str, int]:
        return {name: int(x.shape[0]) for name, x in self.X.items()}

    def in_memory(self, refusal: str) -> InMemoryFeatures:
        return self

    @property
    def whole(self) -> InMemoryFeatures:
        return self.view_of or self

    def view(self, names: Sequence[str]) -> InMemoryFeatures:
        """The columns ``names`` of every split's matrix (and of the code matrix, the categorical
        ones among them), copied: a model reads a contiguous matrix. The same rows, labels, ids,
        workflow and ``uid`` (an ensemble blends its members on the same rows); no split folds."""
        names = list(names)
        if names == self.feature_names:
            return self
        index = {name: i for i, name in enumerate(self.feature_names)}
        unknown = [name for name in names if name not in index]
        if unknown or not names:
            raise DataError(f"a view of the features names column(s) they do not have: {unknown or 'none'}")
        xp = self.backend.array
        positions = xp.asarray(np.asarray([index[name] for name in names], dtype="int64"))
        categorical = [name for name in names if name in set(self.categorical_columns)]
        code_index = {name: i for i, name in enumerate(self.categorical_columns)}
        code_positions = xp.asarray(np.asarray([code_index[name] for name in categorical], dtype="int64"))
        codes = {split: matrix[:, code_positions] for split, matrix in self.codes.items()} if categorical else {}
        return dataclasses.replace(
            self, X={split: matrix[:, positions] for split, matrix in self.X.items()}, feature_names=names,
            categorical_columns=categorical, codes=codes, handoffs=[], folds=None, view_of=self.whole,
        )

    def host_sample(self, split: str, rows: int) -> tuple[np.ndarray, np.ndarray]:
        """Every k-th row, k the smallest step that keeps at most ``rows``: strided views on
        the device, so only the sample is copied to the host."""
        step = stride(self.rows()[split], rows)
        x = np.asarray(self.backend.to_host(self.X[split][::step]), dtype="float32")
        return x, np.asarray(self.backend.to_host(self.y[split][::step]))

    def fold_count(self) -> int:
        return self.folds.count if self.folds is not None else 0

    def fit(self, estimator: Any, fit_kwargs: dict[str, Any], *, stage: str, model: str = "",
            external_memory: bool | None = None) -> dict[str, Any] | None:
        """``estimator.fit`` on the training matrix; there are no files to stream here, so
        ``external_memory`` does not apply."""
        estimator.fit(self.X[TRAIN], self.y[TRAIN], **fit_kwargs)
        return None

    def scorer(self, estimator: Any) -> Scorer:
        return MatrixScorer(estimator, self)

    def matrix_handoffs(self) -> list[Handoff]:
        return self.handoffs


def stride(total: int, rows: int) -> int:
    """The smallest step k such that every k-th of ``total`` rows is at most ``rows`` rows."""
    return max(1, -(-total // max(rows, 1)))


@dataclass
class MatrixScorer:
    """Scores of one split's matrix in the task's shape (``Backend.predict_scores``); a class,
    not a closure, so models pickle (they travel between Dask workers)."""

    estimator: Any
    features: InMemoryFeatures

    def __call__(self, split: str) -> np.ndarray:
        return self.features.backend.predict_scores(self.estimator, self.features.X[split], self.features.task)


def build_in_memory(data: Any, ops: Sequence[FeatureOp | dict[str, Any]], *,
                    id_column: str | None = None) -> InMemoryFeatures:
    """Fit ``ops`` on ``data``'s training split (``SplitData`` of frames) and build the
    matrices of every split."""
    backend = data.backend
    if id_column is not None and id_column not in data.frames[TRAIN].columns:
        raise DataError(f"id column '{id_column}' not in the data")
    drop = [data.target] + ([id_column] if id_column else [])
    workflow = FeatureWorkflow(ops, backend=backend)
    train = data.frames[TRAIN]
    # The labels travel only to a workflow with an op that learns from them (target_encode).
    labels = (backend.to_vector(train[data.target], dtype=data.task.label_dtype)
              if any(op.uses_target for op in workflow.ops) else None)
    fitted = {TRAIN: workflow.fit_transform(train.drop(columns=drop), labels, task=data.task)}
    sizes = workflow.categorical_cardinalities()
    categorical = [c for c in workflow.output_columns_ if c in sizes]
    X, y, ids, codes, handoffs = {}, {}, {}, {}, []
    for name, frame in data.frames.items():       # every split has the training split's columns
        ids[name] = backend.to_host(frame[id_column]) if id_column else None
        y[name] = backend.to_vector(frame[data.target], dtype=data.task.label_dtype)
        out = fitted.pop(name, None)
        if out is None:
            out = workflow.transform(frame.drop(columns=drop))
        X[name] = backend.to_matrix(out, dtype="float32")
        handoffs.append(matrix_handoff(f"{name}.X", out, X[name], backend))
        if categorical:
            codes[name] = backend.to_matrix(out, columns=categorical, dtype="int64")
            handoffs.append(matrix_handoff(f"{name}.codes", out[categorical], codes[name], backend))
        del out
    features = InMemoryFeatures(
        X=X, y=y, ids=ids, feature_names=list(workflow.output_columns_), workflow=workflow,
        target=data.target, id_column=id_column, backend=backend,
        categorical_columns=categorical, codes=codes, handoffs=handoffs, task=data.task,
    )
    if labels is not None:
        features._drift_reference = scoring_reference(workflow, train.drop(columns=drop), backend)
    return features


def scoring_reference(workflow: FeatureWorkflow, train: Any, backend: Backend) -> dict[str, Any]:
    """The drift profile of training rows as scoring transforms them. An op that learns from the
    label gives the training matrix out-of-fold values, which scoring never computes (it uses
    the whole split's): profiled from that matrix, every scored value would fall outside the
    training buckets and read as drift."""
    sample = train.iloc[::stride(len(train), PROFILE_ROWS)]
    matrix = np.asarray(backend.to_host(backend.to_matrix(workflow.transform(sample), dtype="float32")))
    return reference_profile(matrix, list(workflow.output_columns_))
