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
from pipeline.featuresets.split_positions import FOLDS_NEED_MEMORY

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
