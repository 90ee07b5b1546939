"""Cross-validation: with ``folds: k`` on the split, a model stage trains its model once per fold
and reports each metric's mean and standard deviation over the folds.

Each fold fits the feature workflow and the model on the fold's fit rows only and scores the
rows it did not see (``pipeline.featuresets.folds``); the stage then fits its final model on
every non-test row as without folds, and that model is the one ``evaluate`` scores on the test
split and ``export`` saves. The fold scores of every row, in the training split's row order,
are the out-of-fold scores (what an ensemble can fit its weights on without fitting on rows
its inputs were trained on).

Inside a fold a trainer sees no validation split of its own, as the final model does not
(``folds`` needs ``valid: 0``): the torch stage trains every epoch without early stopping, and
XGBoost's ``early_stopping_rounds`` has nothing to stop on (refused, as without folds).

The standard deviation is NumPy's default (``ddof=0``), as scikit-learn's examples report
``cross_val_score(...).std()``: the spread of the k fold scores, not a standard error.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pipeline.featuresets import FeatureSet
from pipeline.featuresets.folds import SCORED
from pipeline.metrics import task_metrics
from pipeline.hooks.protocol import LogProgress, elapsed
from pipeline.stages.spec import StageContext

FitAndScore = Callable[[FeatureSet], np.ndarray]
CV_FILE = "cv.json"


@dataclass
class CVResult:
    """Metrics per fold with their mean and standard deviation (ddof=0) per metric, and the
    out-of-fold scores: one row per row of the training split (``features.X["train"]``) in its
    order, in the task's score shape; NaN for a row no fold scores (the oldest block of an
    ``order_by`` split)."""

    folds: list[dict[str, float]]
    mean: dict[str, float]
    std: dict[str, float]
    oof: np.ndarray
    rows: list[int] = field(default_factory=list)     # rows each fold scored
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"folds": len(self.folds), "per_fold": self.folds, "mean": self.mean, "std": self.std}

    def summary(self) -> dict[str, Any]:
        """For the stage's facts: the fold count, the means and the standard deviations."""
        return {"folds": len(self.folds), "mean": self.mean, "std": self.std}


def cross_validate(features: FeatureSet, fit_and_score: FitAndScore, *, threshold: float = 0.5,
                   on_fold: Callable[[int, dict[str, float]], None] | None = None) -> CVResult:
    """Run ``fit_and_score`` on each fold's features (it trains on their "train" split and returns
    the scores of their "valid" split, the fold's scored rows) and score each fold with the
    task's metrics (``threshold`` for binary ones). ``on_fold(i, metrics)`` follows each fold."""
    source = getattr(features, "folds", None)
    if not features.fold_count() or source is None:
        raise ValueError("these features have no folds; set folds: k on the split to cross-validate")
    task = features.task
    n_rows = features.rows()["train"]
    oof = np.full((n_rows, task.n_outputs) if task.kind == "multiclass" else n_rows, np.nan)
    per_fold, rows = [], []
    started = time.perf_counter()
    for i in range(source.count):
        fold = source.features(i)
        scores = np.asarray(fit_and_score(fold), dtype="float64")
        scored = source.positions[i][1]
        if scores.shape[:1] != (len(scored),):
            raise ValueError(f"fold {i + 1}: fit_and_score returned {scores.shape[0] if scores.ndim else 0} scores "
                             f"for {len(scored)} scored rows")
        metrics = task_metrics(task, fold.labels(SCORED), scores, threshold=threshold)
        oof[scored] = scores
        per_fold.append(metrics)
        rows.append(len(scored))
        if on_fold is not None:
            on_fold(i, metrics)
        del fold
    mean, std = fold_statistics(per_fold)
    return CVResult(folds=per_fold, mean=mean, std=std, oof=oof, rows=rows,
                    seconds=time.perf_counter() - started)


def fold_statistics(per_fold: list[dict[str, float]]) -> tuple[dict[str, float], dict[str, float]]:
    """Mean and standard deviation (ddof=0) of each metric over the folds; NaN where a fold's
    value is NaN (an AUC of a fold with one class), rather than a mean of the others."""
    names = list(per_fold[0]) if per_fold else []
    values = {name: np.array([fold[name] for fold in per_fold], dtype="float64") for name in names}
    return ({name: float(v.mean()) for name, v in values.items()},
            {name: float(v.std(ddof=0)) for name, v in values.items()})


def cross_validate_model(ctx: StageContext, trained: Any, fit_and_score: FitAndScore, *,
                         threshold: float = 0.5) -> CVResult:
    """Cross-validate a model stage's model on its features' folds and record it: ``trained.cv``
    and ``trained.oof_scores``, the stage's ``cv`` fact (mean and std per metric) and
    ``cv.json`` (every fold's metrics) among its artifacts."""
    from pipeline.runs.store import atomic_write_json

    count = trained.features.fold_count()
    progress = ctx.progress or LogProgress(ctx.logger, prefix=f"{ctx.stage}: ")
    started = time.perf_counter()

    with progress.bar(count, "cross-validation folds") as advance:
        def report(i: int, metrics: dict[str, float]) -> None:
            shown = " - ".join(f"{name}: {value:.4f}" for name, value in list(metrics.items())[:3])
            progress.message(f"fold {i + 1}/{count} - {shown} ({elapsed(time.perf_counter() - started)} elapsed)")
            advance(1)

        result = cross_validate(trained.features, fit_and_score, threshold=threshold, on_fold=report)
    trained.cv = result.to_dict()
    trained.oof_scores = result.oof
    ctx.facts["cv"] = result.summary()
    ctx.facts["cv_seconds"] = round(result.seconds, 3)
    if ctx.artifacts_dir is not None:
        atomic_write_json(ctx.artifact_path(CV_FILE), result.to_dict())
    return result
