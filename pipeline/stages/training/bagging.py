"""Bagging (``bag: k`` on a ``train`` stage): one registry model fitted k times on k folds of
the training split's rows, its scores the members' average.

Each member fits on k-1 folds of the rows of the feature matrix the features stage already
built (the workflow fitted once, on the whole training split) and is scored on the fold it
did not see. Those held-out scores, one per training row from the one member that never saw
it, are the model's out-of-fold scores (``TrainedModel.oof_scores``): what a ``stack`` fits
its meta-model on and an ``ensemble`` its weights. The held-out fold is also the member's
evaluation set where the model takes one (``ModelSpec.supports_eval_set``), so XGBoost's
``early_stopping_rounds`` stops each member without a valid split; the early stop reads the
held-out labels, a small optimism in the out-of-fold scores that the rows' scores themselves
(never from a member fitted on them) do not have.

Folds are stratified by class for classification, shuffled with the run's seed. Valid and
test scores are the plain average of the k members' (``blend`` with weights 1/k, the same
arithmetic ``predict`` runs), and the result is one registry model, ``bagged``
(``pipeline.models.blending.BaggedFormat``: each member in its base model's format).

Why one feature matrix rather than refitting the workflow per fold (as ``folds:`` on the
split does): the workflow's fitted state (means, category lists) is one per model file, and a
bagged model is exported with one workflow; refitting per fold would give each member its own
workflow and cost k feature builds. See the design notes.
"""

from __future__ import annotations

import dataclasses
import re
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pipeline.models.registry import BAGGED_MODEL
from pipeline.core.errors import ConfigError, ConfigIssue, DataError
from pipeline.core.problems import Task
from pipeline.featuresets import FeatureSet
from pipeline.featuresets.feature_set import TRAIN, Scorer
from pipeline.featuresets.split_positions import fold_positions
from pipeline.featuresets.in_memory import InMemoryFeatures
from pipeline.models.blending import Bagged, EnsembleMember, blend
from pipeline.stages.spec import StageProgress
from pipeline.stages.training.trained import SplitScores, TrainedModel, model_meta, train_model

__all__ = ["BAGGED_MODEL", "BAG_WITH_FOLDS", "BaggedModel", "BaggedScorer", "FoldBag", "bag_folds", "bag_model"]

# The registry entry a bagged model is exported as.
# The split of a member's features that holds its held-out fold (train_model's eval set).
HELD_OUT = "valid"
BAG_WITH_FOLDS = ("bag: and folds: on the split both make out-of-fold scores and cannot be combined: remove "
                  "folds: from the split (bag: fits its members on the one feature matrix) or bag: here")
BAG_PARTITIONED = ("bag: needs the features in memory (its members fit on rows of one feature matrix); these "
                   "features are partitioned: load the data without partitioned: true, or remove bag:")


@dataclass
class BaggedScorer:
    """One split's scores: the plain average of the members' scorers (a class, so models pickle)."""

    scorers: list[Scorer]

    def __call__(self, split: str) -> np.ndarray:
        weight = 1.0 / len(self.scorers)
        return blend([scorer(split) for scorer in self.scorers], [weight] * len(self.scorers))


@dataclass
class BaggedModel(TrainedModel):
    """A ``TrainedModel`` whose estimator is a ``Bagged`` of k fits of ``base_model``."""

    base_model: str = ""
    # Per member: its fold's rows (fitted, held out), seed, fit time and best round if it stopped early.
    members: list[dict[str, Any]] = field(default_factory=list)
    # The members as trained models on the whole matrix (not their fold's copy of it): each scores
    # other rows its own way (``scorer_for``: the MLP reads the category codes beside the matrix).
    fitted: list[TrainedModel] = field(default_factory=list, repr=False)

    def export_meta(self) -> dict[str, Any]:
        """The bag's record, and what scoring a member needs beyond the matrix (an MLP's
        categorical columns), as a model trained alone would say."""
        meta: dict[str, Any] = {"base_model": self.base_model, "bag": len(self.members), "bag_members": self.members}
        categorical = next((m.meta.get("categorical_columns") for m in self.estimator.members
                            if m.meta.get("categorical_columns")), None)
        if categorical:
            meta["categorical_columns"] = list(categorical)
        return meta

    def scoring_cost(self) -> int:
        return sum(member.scoring_cost() for member in self.fitted) if self.fitted else len(self.estimator.members)

    def scorer_for(self, features: FeatureSet) -> Scorer:
        if self.fitted:
            return BaggedScorer([member.scorer_for(features) for member in self.fitted])
        features = features.matching(self.features.feature_names)
        return BaggedScorer([features.scorer(member.estimator) for member in self.estimator.members])


def bag_folds(task: Task, labels: np.ndarray, k: int, seed: int | None) -> list[tuple[np.ndarray, np.ndarray]]:
    """(fit, held-out) row positions of k folds of ``labels``' rows, by the split's own fold
    rule (``fold_positions``): stratified by class for classification (plain k-fold for
    regression or where a class has fewer than k rows), shuffled with ``seed``."""
    labels = np.asarray(labels)
    n = len(labels)
    if n < k:
        raise DataError(f"bag: {k} needs at least {k} training rows; the training split has {n}")
    stratify = task.kind != "regression" and np.unique(labels, return_counts=True)[1].min() >= k
    return fold_positions(n, k, seed=None if seed is None else int(seed) % (2**32),  # type: ignore[arg-type]
                          labels=labels if stratify else None)


@contextmanager
def params_of_stage(stage: str) -> Iterator[None]:
    """Config errors of the fits inside keyed to ``stage``'s ``params``: a bag's members are
    named ``stage_0``, ``stage_1``, ..., a stack's meta-model ``stage_meta_0``, and a bad
    parameter was reported at ``stages.logreg_0.params.C``, a key no config has (so at no line,
    and not as a --set)."""
    try:
        yield
    except ConfigError as exc:
        issues = [dataclasses.replace(issue, path=re.sub(r"^stages\.[^.]+\.params\b", f"stages.{stage}.params",
                                                         issue.path)) for issue in exc.issues]
        raise ConfigError(issues, file=exc.file) from exc.__cause__


def bag_model(features: FeatureSet, model: str, params: dict[str, Any] | None = None, *, k: int = 5,
              seed: int | None = 42, name: str | None = None, progress: StageProgress | None = None,
              train: Callable[..., TrainedModel] = train_model) -> TrainedModel:
    """Fit registry ``model`` with ``params`` k times on k folds of ``features``' training rows
    and return the bagged model (a ``BaggedModel``: registry model ``bagged``, its out-of-fold
    scores in ``oof_scores``, valid and test scores the members' average).

    ``train`` fits one member; it is called as ``train(member_features, model, params,
    seed=member_seed, name=member_name)`` and must return a ``TrainedModel`` whose "valid"
    scores are those of ``member_features``' "valid" split (the held-out fold): ``train_model``
    does, and a caller's own trainer (a search's) can stand in. Member i's seed is ``seed + i``.
    ``progress`` counts the members as they are fitted.

    Examples:
        >>> from pipeline.stages import bag_model
        >>> bagged = bag_model(features, "logistic_regression", {"max_iter": 1000}, k=3)
        >>> bagged.oof_scores.shape, bagged.scores["test"].shape
        ((5634,), (1409,))
    """
    bag = FoldBag(features, model, params, k=k, seed=seed, name=name, train=train)
    bar = progress.bar(k, "bagged members") if progress is not None else nullcontext(None)
    with bar as advance:
        while bag.done < k:
            bag.fit_next()
            if advance is not None:
                advance(1)
    return bag.model()


class FoldBag:
    """One model bagged fold by fold on k folds fixed up front: a caller with a clock fits fold 0
    first (a holdout fit: its held-out rows score the model) and the others while time allows.
    ``model()`` is the bag of the folds fitted so far, its out-of-fold scores NaN on the rows of
    the folds not fitted. ``bag_model`` fits every fold."""

    def __init__(self, features: FeatureSet, model: str, params: dict[str, Any] | None = None, *, k: int = 5,
                 seed: int | None = 42, name: str | None = None,
                 train: Callable[..., TrainedModel] = train_model) -> None:
        where = f"stages.{name}.bag" if name else "bag"
        if isinstance(k, bool) or not isinstance(k, int) or k < 2:
            raise ConfigError([ConfigIssue(where, f"bag must be a whole number of folds >= 2, not {k!r}")])
        if features.partitioned:
            raise ConfigError([ConfigIssue(where, BAG_PARTITIONED)])
        if features.fold_count():
            raise ConfigError([ConfigIssue(where, BAG_WITH_FOLDS)])
        matrix = features.in_memory(BAG_PARTITIONED)
        if not isinstance(matrix, InMemoryFeatures):
            raise ConfigError([ConfigIssue(where, BAG_PARTITIONED)])
        self.features, self.matrix, self.model_name, self.params = features, matrix, model, params or {}
        self.k, self.seed, self.name, self.train = k, seed, name, train
        task = matrix.task
        labels = matrix.labels(TRAIN)
        self.positions = bag_folds(task, labels, k, seed)
        self.oof = np.full((len(labels), task.n_outputs) if task.kind == "multiclass" else len(labels), np.nan)
        self.members: list[EnsembleMember] = []
        self.fitted: list[TrainedModel] = []
        self.record: list[dict[str, Any]] = []
        self.first_params: dict[str, Any] = {}
        self.first_ignored: list[str] = []
        self.seconds = 0.0

    @property
    def done(self) -> int:
        """Folds fitted so far."""
        return len(self.members)

    def held_out(self, fold: int) -> np.ndarray:
        """Row positions (of the training split) that fold ``fold`` holds out."""
        return self.positions[fold][1]

    def fit_next(self) -> float:
        """Fit the next fold's member; its seconds."""
        i = self.done
        if i >= self.k:
            raise ValueError(f"bag: all {self.k} folds are fitted")
        started = time.perf_counter()
        fit, held = self.positions[i]
        member_seed = None if self.seed is None else self.seed + i
        trained = self.train(member_features(self.matrix, fit, held), self.model_name, self.params,
                             seed=member_seed, name=f"{self.name or self.model_name}_{i}")
        scores = np.asarray(trained.scores[HELD_OUT], dtype="float64")
        if scores.shape[:1] != (len(held),):
            raise ValueError(f"bag: member {i} returned {scores.shape[0] if scores.ndim else 0} scores for "
                             f"{len(held)} held-out rows")
        self.oof[held] = scores
        member_name = str(i)
        self.members.append(EnsembleMember(member_name, trained.model, trained.estimator, 1.0,
                                           {**model_meta(trained), **trained.export_meta()}))
        # Rebound to the whole matrix: its fold's copy of the rows is released below.
        self.fitted.append(dataclasses.replace(trained, features=self.matrix, scores={}))
        info: dict[str, Any] = {"name": member_name, "fit_rows": int(len(fit)), "held_out_rows": int(len(held)),
                                "seed": member_seed, "fit_seconds": round(trained.fit_seconds, 3)}
        best = getattr(trained.estimator, "best_iteration", None)
        if isinstance(best, (int, np.integer)):
            info["best_iteration"] = int(best)
        self.record.append(info)
        if i == 0:
            self.first_params, self.first_ignored = dict(trained.params), list(trained.ignored_params)
        del trained               # with its member features: one member's copy of the rows at a time
        seconds = time.perf_counter() - started
        self.seconds += seconds
        return seconds

    def model(self) -> BaggedModel:
        """The bag of the folds fitted so far (at least one), each member weighted equally."""
        if not self.members:
            raise ValueError("bag: no fold is fitted yet")
        weight = 1.0 / len(self.members)
        members = [dataclasses.replace(member, weight=weight) for member in self.members]
        return BaggedModel(
            name=self.name or self.model_name, model=BAGGED_MODEL, estimator=Bagged(members, task=self.matrix.task),
            features=self.features,
            scores=SplitScores(BaggedScorer([member.scorer_for(self.matrix) for member in self.fitted]), self.features),
            params={"model": self.model_name, "bag": len(members), "params": self.first_params},
            ignored_params=self.first_ignored, fit_seconds=self.seconds,
            oof_scores=self.oof.copy(), base_model=self.model_name, members=list(self.record),
            fitted=list(self.fitted),
        )


def member_features(features: InMemoryFeatures, fit: np.ndarray, held: np.ndarray) -> InMemoryFeatures:
    """A member's features: "train" = the rows ``fit`` of the training matrix, "valid" = the
    rows ``held`` (its held-out fold, its eval set); the fitted workflow is the features' own."""
    backend = features.backend
    picks = {TRAIN: fit, HELD_OUT: held}

    def rows(per_split: dict[str, Any]) -> dict[str, Any]:
        return {split: per_split[TRAIN][backend.asarray(where)] for split, where in picks.items()}

    ids = features.ids.get(TRAIN)
    return dataclasses.replace(
        features, X=rows(features.X), y=rows(features.y),
        ids={split: None if ids is None else ids.iloc[where].reset_index(drop=True) for split, where in picks.items()},
        codes=rows(features.codes) if TRAIN in features.codes else {}, handoffs=[], folds=None,
        uid=uuid.uuid4().hex,
    )

