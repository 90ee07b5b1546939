"""``FoldSource``: the features of each cross-validation fold, built when a fold is trained.

With ``folds: k`` the split's training frame holds every non-test row and ``SplitData.folds``
says, per fold, which of its rows a model fits on and which it is scored on. Each fold's
features are built from the raw rows as the run's features are: the feature workflow is
fitted on the fold's fit rows only (a mean, a category list or a scaling learnt from the rows
a fold scores would leak them into its score), then applied to its scored rows.

The source holds the training frame, the ops and the positions, not the fold matrices: a fold's
matrices exist while it trains, one fold at a time. It is part of the features stage's output,
so it pickles with it (the stage cache, Dask workers).
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pipeline.core.errors import DataError
from pipeline.features import FeatureOp
from pipeline.featuresets.feature_set import TRAIN
from pipeline.featuresets.in_memory import InMemoryFeatures, build_in_memory
from pipeline.featuresets.split_positions import FOLDS_NEED_MEMORY, check_fold_classes, fold_positions

# The split of a fold's features that holds its scored rows, and its name for a trainer that
# must not see it as a validation split (``without_validation``).
SCORED = "valid"
HELD_OUT = "held_out"


@dataclass
class FoldSource:
    """What building fold ``i``'s features needs: the training split (a ``SplitData`` holding
    only ``frames["train"]``, every non-test row), the feature ops, the id column and the
    (fit, scored) positions of each fold into that frame."""

    data: Any
    ops: Sequence[FeatureOp]
    id_column: str | None
    positions: list[tuple[np.ndarray, np.ndarray]]

    @classmethod
    def of_split(cls, data: Any, ops: Sequence[FeatureOp], id_column: str | None) -> FoldSource:
        """The folds of ``data`` (a ``SplitData`` with ``folds``), keeping only its training frame."""
        if data.partitioned:
            raise DataError(FOLDS_NEED_MEMORY)
        train_only = dataclasses.replace(data, frames={TRAIN: data.frames[TRAIN]}, folds=None)
        return cls(data=train_only, ops=list(ops), id_column=id_column, positions=list(data.folds))

    @property
    def count(self) -> int:
        return len(self.positions)

    def rows(self, i: int) -> dict[str, int]:
        """Rows fold ``i`` fits on and scores, without building anything."""
        fit, scored = self.positions[i]
        return {TRAIN: len(fit), SCORED: len(scored)}

    def features(self, i: int) -> InMemoryFeatures:
        """Fold ``i``'s features: "train" = its fit rows, "valid" = its scored rows, "test"
        empty; the workflow is fitted on the fit rows only."""
        if not 0 <= i < self.count:
            raise IndexError(f"fold {i} of {self.count}")
        fit, scored = self.positions[i]
        backend = self.data.backend
        frame = self.data.frames[TRAIN]
        fold = dataclasses.replace(self.data, frames={TRAIN: backend.take(frame, fit),
                                                      SCORED: backend.take(frame, scored)})
        features = build_in_memory(fold, self.ops, id_column=self.id_column)
        _add_empty_split(features, "test", like=SCORED)
        return features


@dataclass
class MatrixFolds:
    """Folds over the rows of built feature matrices (the training and validation splits'
    rows, pooled), for a tuner that cross-validates features without ``folds:`` on the split.

    Unlike ``FoldSource`` nothing is refitted per fold: the feature workflow was fitted on the
    training split, so a fold's scored rows from that split took part in fitting the workflow
    (a mean, a category list), not the model. Cheap (a row gather per fold) and the same for
    every trial, so it ranks params fairly; the stage's own ``folds:`` refits per fold. Same
    interface as ``FoldSource`` (``count``, ``positions``, ``rows``, ``features``)."""

    pooled: InMemoryFeatures          # "train" = the pooled rows; no other split
    positions: list[tuple[np.ndarray, np.ndarray]]

    @classmethod
    def of_features(cls, features: InMemoryFeatures, k: int, *, seed: int,
                    splits: Sequence[str] = (TRAIN, SCORED)) -> MatrixFolds:
        """``k`` seeded folds over the rows of ``splits`` (stratified on the labels for a
        classification task), each fitting on rows of every class."""
        present = [name for name in splits if features.rows().get(name)]
        xp = features.backend.array

        def pool(per_split: dict[str, Any]) -> Any:
            parts = [per_split[name] for name in present]
            return parts[0] if len(parts) == 1 else xp.concatenate(parts)

        pooled = dataclasses.replace(
            features, X={TRAIN: pool(features.X)}, y={TRAIN: pool(features.y)}, ids={TRAIN: None},
            codes={TRAIN: pool(features.codes)} if features.codes else {}, folds=None, handoffs=[],
            uid=uuid.uuid4().hex)
        labels = pooled.labels(TRAIN)
        classes = labels if features.task.kind != "regression" else None
        positions = fold_positions(len(labels), k, seed=seed, labels=classes)
        if classes is not None:
            check_fold_classes(positions, labels, target=features.target)
        return cls(pooled=pooled, positions=positions)

    @property
    def count(self) -> int:
        return len(self.positions)

    def rows(self, i: int) -> dict[str, int]:
        fit, scored = self.positions[i]
        return {TRAIN: len(fit), SCORED: len(scored)}

    def features(self, i: int) -> InMemoryFeatures:
        """Fold ``i``: "train" = its fit rows, "valid" = its scored rows, "test" empty."""
        if not 0 <= i < self.count:
            raise IndexError(f"fold {i} of {self.count}")
        source, backend = self.pooled, self.pooled.backend

        def gather(per_split: dict[str, Any]) -> dict[str, Any]:
            if not per_split:
                return {}
            whole = per_split[TRAIN]
            return {name: whole[backend.asarray(rows)] for name, rows in zip((TRAIN, SCORED), self.positions[i])}

        fold = dataclasses.replace(source, X=gather(source.X), y=gather(source.y), ids={TRAIN: None, SCORED: None},
                                   codes=gather(source.codes), uid=uuid.uuid4().hex)
        _add_empty_split(fold, "test", like=SCORED)
        return fold


def without_validation(fold: InMemoryFeatures, name: str = HELD_OUT) -> InMemoryFeatures:
    """A fold's features with its scored rows under ``name`` instead of "valid", for a trainer
    that would early-stop on a "valid" split (the torch stage): with folds the final model has
    no validation split, so each fold is trained as it is, and never stops on the rows it is
    scored on. The matrices are shared, not copied."""
    renamed = dataclasses.replace(fold, X=dict(fold.X), y=dict(fold.y), ids=dict(fold.ids), codes=dict(fold.codes),
                                  uid=uuid.uuid4().hex)
    _rename_split(renamed, SCORED, name)
    return renamed


def _add_empty_split(features: InMemoryFeatures, name: str, *, like: str) -> None:
    """An empty split shaped like ``like`` (no rows, same columns), so every split is there."""
    features.X[name] = features.X[like][:0]
    features.y[name] = features.y[like][:0]
    ids = features.ids.get(like)
    features.ids[name] = None if ids is None else ids.iloc[:0]
    if like in features.codes:
        features.codes[name] = features.codes[like][:0]


def _rename_split(features: InMemoryFeatures, old: str, new: str) -> None:
    for per_split in (features.X, features.y, features.ids, features.codes):
        if old in per_split:
            per_split[new] = per_split.pop(old)
