"""``FeatureSet``: the one interface the model stages use for model-ready data.

Features come in two layouts: dense device matrices per split (``InMemoryFeatures``) and lazy
Dask frames over Parquet (``PartitionedFeatures``). Training, scoring, evaluation and export
differ between them in how, not in what: fit an estimator on the training split, score a
split, read its labels, write its predictions. Stages ask the feature set for those instead
of testing which layout it is, so a stage has one code path and a new layout is one class.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import numpy as np
import pandas as pd

from pipeline.backends import Backend
from pipeline.scoring.columns import CLASS_COLUMNS_KEY, class_column_map, task_columns, true_values
from pipeline.core.errors import DataError
from pipeline.features import FeatureWorkflow
from pipeline.metrics.drift import reference_profile
from pipeline.metrics.profile import PROFILE_ROWS, feature_histograms, target_balance
from pipeline.core.problems import BINARY, Task

if TYPE_CHECKING:
    from pipeline.tensors.handoff import Handoff

Scorer = Callable[[str], np.ndarray]
# The split a workflow is fitted on and estimators are trained on (``SplitData`` names it so).
TRAIN = "train"


class ScoredModel(Protocol):
    """What predictions read of a trained model (``pipeline.stages.TrainedModel`` is one)."""

    name: str
    estimator: Any
    scores: Mapping[str, np.ndarray]


class FeatureSet(ABC):
    """Model-ready data per split (train, valid, test): features ``X``, 0/1 labels ``y`` and
    ids, on the run's device or lazily partitioned, with the fitted workflow that made them."""

    X: dict[str, Any]                  # n x d float32 matrix, or a lazy Dask frame, per split
    y: dict[str, Any]                  # 0/1 labels per split (device vector or lazy series)
    ids: dict[str, Any]                # ids per split (host or lazy series), None without an id column
    feature_names: list[str]
    workflow: FeatureWorkflow
    target: str
    id_column: str | None
    backend: Backend
    # Categorified columns (in ``feature_names`` order), for embedding layers.
    categorical_columns: list[str]
    # What the labels and scores are (binary, multiclass with its classes, regression).
    task: Task = BINARY
    # Identity that survives pickling (models trained on one feature set on different Dask
    # workers hold different copies of it).
    uid: str

    # The training split's drift profile once worked out (``drift_reference``); a plain
    # attribute, not a field, so a copy of the features (a sample) does not carry it.
    _drift_reference: dict[str, Any] | None = None

    # Whether X, y and ids are lazy Dask collections (kept for callers that report it).
    partitioned: ClassVar[bool] = False
    # Whether estimators for these features are the registry's distributed (Dask) ones.
    distributed: ClassVar[bool] = False

    # ------------------------------------------------------------ shape and labels
    @abstractmethod
    def rows(self) -> dict[str, int]:
        """Rows per split, without computing anything lazy."""

    # ------------------------------------------------------------ column views
    def view(self, names: Sequence[str]) -> FeatureSet:
        """These features with only the columns ``names`` (in that order) on the same rows: what
        a model that reads part of the matrix (``auto``'s CatBoost reads categories as codes, the
        others as their encodings) is trained and scored on. Its ``whole`` is these features."""
        raise DataError("a model that reads some of the feature columns needs the features in memory; "
                        "load the data without partitioned: true")

    def matching(self, names: Sequence[str]) -> FeatureSet:
        """These features as a model trained on the columns ``names`` reads them: themselves
        when those are all their columns, else a ``view`` of them, or of the features they are
        a view of (on the same rows: a sample of a view has other rows than its whole)."""
        names = list(names)
        if names == self.feature_names:
            return self
        if set(names) <= set(self.feature_names):
            return self.view(names)
        whole = self.whole
        if whole.rows() != self.rows():
            raise DataError(f"these features lack column(s) {sorted(set(names) - set(self.feature_names))} that "
                            "the model was trained on")
        return whole.view(names)

    @property
    def whole(self) -> FeatureSet:
        """The features this is a view of; these features themselves when not a view."""
        return self

    def continuous_index(self) -> list[int]:
        """Positions in ``X`` of the columns that are not categorical codes."""
        categorical = set(self.categorical_columns)
        return [i for i, name in enumerate(self.feature_names) if name not in categorical]

    def labels(self, split: str) -> np.ndarray:
        """The split's 0/1 labels as a host NumPy vector (computed if lazy)."""
        return np.asarray(self.backend.to_host(self.y[split]))

    def host_ids(self, split: str) -> pd.Series | None:
        """The split's ids as a host pandas Series with a 0..n-1 index, or None without ids."""
        ids = self.ids.get(split)
        return None if ids is None else self.backend.to_host(ids).reset_index(drop=True)

    def fold_count(self) -> int:
        """Cross-validation folds these features can build (``folds: k`` of the split); 0 without."""
        return 0

    def drift_reference(self) -> dict[str, Any]:
        """The drift profile of the training split's matrix (``pipeline.metrics.drift``), on at
        most ``PROFILE_ROWS`` rows spread over it: worked out once, from ``profile``'s sample
        when the features stage wrote one, and kept with the features (every exported model
        of them saves the same one)."""
        if self._drift_reference is None:
            self._drift_reference = reference_profile(self.host_sample(TRAIN, PROFILE_ROWS)[0], self.feature_names)
        return self._drift_reference

    @abstractmethod
    def host_sample(self, split: str, rows: int) -> tuple[np.ndarray, np.ndarray]:
        """Up to ``rows`` rows of ``split`` spread over it: the features as a host float64
        matrix and the labels as a host vector. What profiles and explanations read, at a cost
        that does not grow with the table."""

    def profile(self, rows: int = PROFILE_ROWS) -> dict[str, Any]:
        """profile.json of the features stage: rows per split, the target's balance and each
        feature's histogram per split (``pipeline.metrics.profile``), on samples of ``rows``.
        The training sample also gives the drift reference, so export does not read it again."""
        samples = {split: self.host_sample(split, rows) for split, n in self.rows().items() if n}
        if TRAIN in samples and rows == PROFILE_ROWS and self._drift_reference is None:
            self._drift_reference = reference_profile(samples[TRAIN][0], self.feature_names)
        return {"rows": self.rows(), "sample_rows": {split: int(x.shape[0]) for split, (x, _) in samples.items()},
                "features": self.feature_names, "categorical": self.categorical_columns,
                "target": self.target, "task": self.task.to_dict(),
                "balance": target_balance(self.task, {split: y for split, (_, y) in samples.items()}),
                "histograms": feature_histograms({split: x for split, (x, _) in samples.items()},
                                                 self.feature_names)}

    @abstractmethod
    def in_memory(self, refusal: str) -> FeatureSet:
        """These features as in-memory matrices (an ``InMemoryFeatures``, which each layout's
        override returns: this module does not import the layouts that subclass it), for a
        consumer that needs them (the torch stage); a ``DataError`` with ``refusal`` where they
        are not."""

    # ------------------------------------------------------------ training and scoring
    @abstractmethod
    def fit(self, estimator: Any, fit_kwargs: dict[str, Any], *, stage: str, model: str = "",
            external_memory: bool | None = None) -> dict[str, Any] | None:
        """Train ``estimator`` (registry model ``model``) on the training split.

        ``external_memory`` applies to partitioned features (``TrainSpec.external_memory``);
        returns how training streamed the files when it did, else None.
        """

    def fit_facts(self, streamed: dict[str, Any] | None) -> dict[str, Any]:
        """What a training on these features adds to the stage's facts."""
        return {}

    @abstractmethod
    def scorer(self, estimator: Any) -> Scorer:
        """Positive-class scores of a split (host float64) from a fitted estimator; picklable."""

    # ------------------------------------------------------------ predictions
    def predictions_frame(self, models: Sequence[ScoredModel], split: str = "test") -> pd.DataFrame:
        """One row per scored row: id, split, the true target, then each model's columns.

        Per task (``pipeline.distributed.predictions``): binary the 0/1 label and
        ``score_<model>``; multiclass the original class value, ``score_<model>_<class>`` per
        class and ``prediction_<model>`` (the original value of the top class); regression the
        target's value and ``prediction_<model>``. Multiclass tables map their score columns to
        the class values in ``attrs`` (Parquet metadata).
        """
        splits = list(self.rows()) if split == "all" else [split]
        parts = []
        for name in splits:
            rows = self.rows()[name]
            if not rows:
                continue
            part: dict[str, Any] = {}
            if self.id_column:
                part[self.id_column] = self.host_ids(name)
            part["split"] = [name] * rows
            labels = self.labels(name)
            part[self.target] = labels if self.task.kind == "binary" else true_values(self.task, labels)
            for model in models:
                part.update(task_columns(self.task, model.scores[name], model=model.name))
            parts.append(pd.DataFrame(part))
        if not parts:
            raise DataError(f"export: split '{split}' has no rows")
        frame = pd.concat(parts, ignore_index=True)
        classes = {column: value for model in models
                   for column, value in class_column_map(self.task, model=model.name).items()}
        if classes:
            frame.attrs[CLASS_COLUMNS_KEY] = classes
        return frame

    def write_predictions(self, models: Sequence[ScoredModel], split: str, path: Path) -> list[Path]:
        """Write the predictions of ``split`` ("all" for every split) at ``path``; returns the
        files written. Here: one Parquet file of the gathered predictions frame."""
        from pipeline.runs.store import atomic_write_parquet

        atomic_write_parquet(self.predictions_frame(models, split), path)
        return [path]

    # ------------------------------------------------------------ the features stage's record
    def facts(self) -> dict[str, Any]:
        """What the features stage records about these features in the manifest."""
        facts = self.layout_facts()
        facts["rows"] = self.rows()
        facts["features"] = len(self.feature_names)
        if self.categorical_columns:
            facts["categorical"] = self.categorical_columns
        facts["handoffs"] = [h.to_dict() for h in self.matrix_handoffs()]
        return facts

    def layout_facts(self) -> dict[str, Any]:
        """Facts particular to the layout (partitions, passes), first in the record."""
        return {}

    def matrix_handoffs(self) -> list[Handoff]:
        """What building device matrices copied (none unless the layout builds them)."""
        return []
