"""``evaluate``: each model's metrics on one split, for the task the models were trained for,
beside its metrics on the other splits (overfitting shows as train far above test), and the
curves a report draws (``pipeline.metrics.curves``: exact points of the evaluated split).

Metrics are computed on the host from the scores ``train`` kept, with scikit-learn's
definitions and a few vectors of memory (pipeline.metrics): one implementation for both
devices, and a 5M-row test split costs a few vectors rather than scikit-learn's 670 MiB of
copies. Every input must be of one task (their metrics would not compare); the best model is
picked by ``rank_by`` in that metric's direction (``HIGHER_IS_BETTER``), and ``predict``
takes the run's best from the record, so it never guesses a direction either.

``importance.json`` says which features each model leans on (``pipeline.stages.explain``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from pydantic import Field, field_validator

from pipeline.core.errors import ConfigError, ConfigIssue, DataError, UsageError
from pipeline.metrics import (ALL_METRICS, binary_confusion, binary_metrics, class_table, confusion_matrix,
                              default_metric, is_better, known_metric, metric_names, metric_task_problem,
                              task_metrics)
from pipeline.metrics.curves import binary_curves, regression_curves
from pipeline.stages.spec import KeyPath, Preview, StageContext, StageSpec, no_rows_in, register_stage
from pipeline.featuresets.in_memory import InMemoryFeatures
from pipeline.stages.explain import (
    IMPORTANCE_ROWS, REPEATS, SAMPLE, SCORED_ROWS, ImportanceBudget, explain_models, strided_sample,
)
from pipeline.stages.split import SPLITS
from pipeline.stages.train import TrainedModel
from pipeline.stages.training.trained import refuse_repeated_names
from pipeline.core.problems import BINARY, Task

__all__ = ["EvaluateSpec", "Evaluation", "binary_metrics", "evaluate_models"]

# The binary metrics, in table order (what this module named METRICS before tasks).
METRICS = metric_names("binary")
# Rows of the training split its metrics are computed on, at most (``train_rows``): they show
# overfitting, which 250,000 rows measure to about 1e-3 of ROC AUC, while scoring all of a
# 7M-row training split is one more prediction pass over 70% of the table.
TRAIN_ROWS = 250_000
VALID = "valid"
TEST = "test"


@dataclass
class Evaluation:
    split: str
    threshold: float
    metrics: dict[str, dict[str, float]]    # model -> metric -> value
    rank_by: str
    task: Task = BINARY
    # classification beyond binary: model -> {"labels": class values, "matrix": rows true, columns predicted}
    confusion: dict[str, dict[str, Any]] = field(default_factory=dict)
    # multiclass: model -> {"labels", "precision", "recall", "f1", "support"} (lists in class order)
    per_class: dict[str, dict[str, Any]] = field(default_factory=dict)
    # cross-validated models: model -> {"mean": {metric: value}, "std": {...}, "folds": count,
    # "per_fold": [{metric: value}, ...]}
    cv: dict[str, dict[str, Any]] = field(default_factory=dict)
    # split -> model -> metric -> value: every split evaluated, ``split``'s equal to ``metrics``
    splits: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    # model -> the curves of ``pipeline.metrics.curves`` on ``split`` (binary, regression)
    curves: dict[str, dict[str, Any]] = field(default_factory=dict)
    # split -> model -> {"rows": scored, "of": the split's rows}: a split whose metrics in
    # ``splits`` came from an evenly spread sample (the training split past ``train_rows``)
    sampled: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)

    @property
    def best(self) -> str:
        """The best model by ``rank_by`` (the first of equals; NaN loses to any number)."""
        names = list(self.metrics)
        best = names[0]
        for name in names[1:]:
            if is_better(self.rank_by, self.metrics[name][self.rank_by], self.metrics[best][self.rank_by]):
                best = name
        return best

    def to_dict(self) -> dict[str, Any]:
        """metrics.json: a binary evaluation keeps the keys it always had (plus ``cv``); other
        tasks' ``threshold`` is null (none applies: a regression's read 0.5)."""
        out = {"split": self.split, "threshold": self.recorded_threshold, "rank_by": self.rank_by,
               "best": self.best, "models": self.metrics}
        if self.task.kind != "binary":
            out["task"] = self.task.to_dict()
        out.update({key: value for key, value in
                    (("confusion", self.confusion), ("per_class", self.per_class), ("cv", self.cv),
                     ("splits", self.splits), ("sampled", self.sampled)) if value})
        return out

    def curves_dict(self) -> dict[str, Any]:
        """curves.json: what the report draws, with the split and task it belongs to."""
        return {"split": self.split, "threshold": self.recorded_threshold, "task": self.task.to_dict(),
                "models": self.curves}

    @property
    def recorded_threshold(self) -> float | None:
        return self.threshold if self.task.kind == "binary" else None

    def record(self) -> dict[str, Any]:
        """The run record's ``metrics``: ``to_dict`` less the per-class tables, which grow with
        the square of the classes and are in metrics.json for whoever wants them."""
        out = self.to_dict()
        out.pop("confusion", None)
        out.pop("per_class", None)
        return out


def _rank_by_schema(schema: dict[str, Any]) -> None:
    schema["enum"] = [*ALL_METRICS, None]


class EvaluateSpec(StageSpec):
    kind: Literal["evaluate"]
    split: Literal["test", "valid", "train"] = Field("test", description="Split to score on (and rank by).")
    splits: list[Literal["train", "valid", "test"]] | None = Field(
        None, description="Splits whose metrics are recorded beside it (default: every non-empty split); "
                          "the training split is scored on at most train_rows of its rows.")
    train_rows: int | None = Field(TRAIN_ROWS, gt=0, description=(
        "Rows of the training split its metrics (beside the evaluated split's) are computed on, at most: "
        "a larger training split is scored on every k-th row, the same rows on every device and run, and "
        "metrics.json records the rows under sampled. They show overfitting, which a sample measures to "
        "about 1e-3; scoring every row is one more prediction pass over most of the table. null: every row. "
        "The evaluated split (split) is always scored whole."))
    threshold: float = Field(0.5, gt=0, lt=1, allow_inf_nan=False,
                             description="Binary: score at or above which a row is predicted positive.")
    rank_by: str | None = Field(
        None, json_schema_extra=_rank_by_schema,
        description="Metric that picks the best model (its direction is known). Default per task: "
                    "roc_auc (binary), log_loss (multiclass), rmse (regression).")
    importance: bool = Field(
        True, description="Write importance.json: permutation importance of every model that scores in memory, "
                          "and the importances a model computes itself (XGBoost gain and SHAP).")
    importance_rows: int = Field(IMPORTANCE_ROWS, gt=0, description="Rows of the evaluated split importances are "
                                 "measured on, at most (a sample spread over it; the cost does not grow with the "
                                 "table). Fewer where importance_budget asks.")
    importance_budget: int = Field(SCORED_ROWS, gt=0, description="Rows x classes permutation importance scores per "
                                   "model, at most (one copy of the sample per feature and shuffle): the sample "
                                   "shrinks to fit (to 200 rows), then fewer features are permuted, so the cost "
                                   "stays bounded whatever the classes and columns. SHAP runs on 1,000 rows "
                                   "divided by the classes (at least 200). importance.json records the rows each used.")
    importance_repeats: int = Field(REPEATS, gt=0, le=20, description="Shuffles per feature for permutation "
                                    "importance (its mean and std over them).")
    min_inputs = 1

    @field_validator("rank_by")
    @classmethod
    def _known_metric(cls, rank_by: str | None) -> str | None:
        """Any task's metric passes here; whether it fits the models' task is checked once the
        task is known (``task_problems``: a split that declares it)."""
        return known_metric(rank_by)

    def preview_problems(self, inputs: Mapping[str, Preview]) -> list[tuple[KeyPath, str]]:
        """``split`` or ``splits`` naming the valid split of a split that has none: one with
        ``folds:`` (they fit and score every non-test row) or with ``valid: 0``; and the test
        split (the default) of a split with ``test: 0``, found only after every model trained."""
        problems: list[tuple[KeyPath, str]] = []
        no_test = no_rows_in(TEST, inputs) if self.split == TEST else None
        if no_test:
            problems.append((("split",), f"evaluate scores the test split (split: test, the default), but "
                                         f"{no_test}, so there are no test rows; set test: > 0 on the "
                                         "split stage, evaluate split: valid, or leave evaluate out (a final fit on "
                                         "every row has nothing held out to measure)"))
        missing = next((_no_valid_split(p) for p in inputs.values() if _no_valid_split(p)), None)
        if missing is None:
            return problems
        if self.split == VALID:
            problems.append((("split",), f"split: valid: {missing}"))
        problems += [(("splits", i), f"splits: valid: {missing}") for i, name in enumerate(self.splits or [])
                     if name == VALID]
        return problems

    def task_problems(self, task: str) -> list[tuple[KeyPath, str]]:
        """``rank_by`` another task's metric; a ``threshold`` given for a task that is not binary."""
        found = (("rank_by",), metric_task_problem(self.rank_by, task)), (("threshold",), self.threshold_problem(task))
        return [(where, problem) for where, problem in found if problem]

    def threshold_problem(self, task: str, described: str | None = None) -> str | None:
        """Why ``threshold`` cannot be given for models of a ``task`` task (``described``: how a
        message names it), or None: it makes a binary score a 0/1 prediction, and a multiclass
        or regression evaluation has none to make (left out, its default is nobody's choice)."""
        if "threshold" not in self.model_fields_set or task == BINARY.kind:
            return None
        return (f"threshold applies to binary models only (it makes a score a 0/1 prediction); these models are "
                f"{described or task}: leave threshold out")


def _no_valid_split(preview: Preview) -> str | None:
    """Why the models of ``preview`` have no valid split to evaluate, or None (they have one,
    or it is not known before the data is read)."""
    if preview.folds:
        return (f"the split stage has folds: {preview.folds}, which fit and score every non-test row in turn, so "
                "there is no valid split; evaluate split: test (each model's cross-validated metrics are under cv "
                "in metrics.json), or remove folds: and set valid: > 0 on the split stage")
    if preview.valid is False and preview.folds == 0:
        return ("the split stage has valid: 0, so there is no valid split; set valid: > 0 on the split stage, or "
                "evaluate split: test")
    return None


def shared_task(models: list[TrainedModel]) -> Task:
    """The one task every model was trained for, or a DataError naming each model's. The models'
    names are their rows in every table, so two of one name are refused (the second silently
    replaced the first)."""
    if not models:
        raise UsageError("evaluate_models needs at least one trained model")
    refuse_repeated_names(models, "evaluate")
    tasks = {model.name: model.task for model in models}
    if len(set(tasks.values())) > 1:
        listed = "; ".join(f"'{name}': {task.describe()}" for name, task in tasks.items())
        raise DataError(f"evaluate compares models of one task, but these differ: {listed}")
    return next(iter(tasks.values()))


def resolve_rank_by(rank_by: str | None, task: Task, *, where: str = "rank_by") -> str:
    """The metric to rank by for ``task``: the task's default when None; a ConfigError when the
    metric is another task's."""
    if rank_by is None:
        return default_metric(task.kind)
    names = metric_names(task.kind)
    if rank_by not in names:
        raise ConfigError([ConfigIssue(where, f"metric '{rank_by}' does not apply to a {task.kind} task "
                                              f"(its metrics: {', '.join(names)})")])
    return rank_by


def evaluate_models(
    models: list[TrainedModel], *, split: str = "test", threshold: float = 0.5, rank_by: str | None = None,
    splits: list[str] | None = None, train_rows: int | None = TRAIN_ROWS,
) -> Evaluation:
    """Each model's metrics on ``split`` and on ``splits`` (None: every split it has rows in),
    the training split's on at most ``train_rows`` rows unless it is ``split``; ``rank_by``
    None ranks by the task's default metric.

    Examples:
        >>> from pipeline.stages import evaluate_models, train_model
        >>> models = [train_model(features, "logistic_regression", {"max_iter": 1000}),
        ...           train_model(features, "random_forest", {"n_estimators": 50, "min_samples_leaf": 5})]
        >>> evaluation = evaluate_models(models)
        >>> evaluation.best in ("logistic_regression", "random_forest"), 0.75 < evaluation.metrics.get(evaluation.best)["roc_auc"] < 1
        (True, True)
    """
    task = shared_task(models)
    rank_by = resolve_rank_by(rank_by, task)
    evaluation = Evaluation(split=split, threshold=threshold, metrics={}, rank_by=rank_by, task=task)
    for model in models:
        if split not in model.scores:
            raise DataError(f"model '{model.name}' has no '{split}' split to evaluate (is it empty?)")
        labels, scores = model.features.labels(split), model.scores[split]
        evaluation.metrics[model.name] = task_metrics(task, labels, scores, threshold=threshold)
        if task.kind == "multiclass":
            matrix = confusion_matrix(task, labels, scores)
            evaluation.per_class[model.name] = table = class_table(task, matrix)
            evaluation.confusion[model.name] = {"labels": table["labels"], "matrix": matrix}
        elif task.kind == "binary":
            evaluation.confusion[model.name] = {"labels": [0, 1],
                                                "matrix": binary_confusion(labels, scores, threshold=threshold)}
            evaluation.curves[model.name] = binary_curves(labels, scores)
        else:
            evaluation.curves[model.name] = regression_curves(labels, scores)
        for other in _splits_of(model, split, splits):
            if other == split:
                metrics = evaluation.metrics[model.name]
            else:
                limit = train_rows if other == "train" else None
                other_labels, other_scores = _split_scores(model, other, limit)
                metrics = task_metrics(task, other_labels, other_scores, threshold=threshold)
                whole = int(model.features.rows()[other])
                if len(other_labels) < whole:
                    evaluation.sampled.setdefault(other, {})[model.name] = {"rows": int(len(other_labels)), "of": whole}
            evaluation.splits.setdefault(other, {})[model.name] = metrics
        if model.cv:
            evaluation.cv[model.name] = {key: model.cv[key] for key in ("mean", "std", "folds", "per_fold")
                                          if key in model.cv}
    return evaluation


def explained_facts(importance: dict[str, Any]) -> dict[str, dict[str, int]]:
    """Per model, the rows its explanations used (``permutation``, ``native``: samples of the
    evaluated split) and ``scored_rows`` (rows x outputs permutation importance scored in all):
    the stage's facts, so a run record says what the default explanations cost."""
    facts: dict[str, dict[str, int]] = {}
    for kind, key in (("permutation", "rows"), ("scored_rows", "scored_rows"), ("native", "native_rows")):
        for model, value in (importance.get(key) or {}).items():
            if kind == "permutation" and model not in (importance.get("scored_rows") or {}):
                continue        # ``rows`` falls back to the native sample's where nothing was permuted
            facts.setdefault(model, {})[kind] = int(value)
    return facts


def _split_scores(model: TrainedModel, split: str, rows: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Labels and scores of ``split``: all of them, or of every k-th row when the split has
    more than ``rows`` (in memory; partitioned features score the whole split). Scores another
    stage already asked for are reused only for the whole split, so the metrics never depend
    on what else ran."""
    features = model.features
    if rows is None or features.rows()[split] <= rows or not isinstance(features, InMemoryFeatures):
        return features.labels(split), model.scores[split]
    sample = strided_sample(features, split, rows)
    return sample.labels(SAMPLE), model.scorer_for(sample)(SAMPLE)


def _splits_of(model: TrainedModel, split: str, wanted: list[str] | None) -> list[str]:
    """The splits to record for ``model`` in train, valid, test order: ``wanted`` (each must
    have rows) or every split with rows; ``split`` always."""
    if wanted is None:
        chosen = {name for name in SPLITS if name in model.scores} | {split}
    else:
        for name in wanted:
            if name not in model.scores:
                raise DataError(f"model '{model.name}' has no '{name}' split to evaluate (is it empty?)")
        chosen = set(wanted) | {split}
    return [name for name in SPLITS if name in chosen]


@register_stage("evaluate", EvaluateSpec, produces=Evaluation, accepts=(TrainedModel,), records=("metrics",))
def run_evaluate(spec: EvaluateSpec, ctx: StageContext, inputs) -> Evaluation:
    models = list(inputs.values())
    task = shared_task(models)
    # Before any metric: refused here when the task was inferred from the data (declared, at validation).
    refused = spec.threshold_problem(task.kind, task.describe())
    if refused:
        raise ConfigError([ConfigIssue(f"stages.{ctx.stage}.threshold", refused)])
    rank_by = resolve_rank_by(spec.rank_by, task, where=f"stages.{ctx.stage}.rank_by")
    evaluation = evaluate_models(models, split=spec.split, threshold=spec.threshold, rank_by=rank_by,
                                 splits=spec.splits, train_rows=spec.train_rows)
    if ctx.artifacts_dir is not None:
        from pipeline.runs.store import atomic_write_json

        atomic_write_json(ctx.artifact_path("metrics.json"), evaluation.to_dict())
        if evaluation.curves:
            atomic_write_json(ctx.artifact_path("curves.json"), evaluation.curves_dict())
        if spec.importance:
            limits = ImportanceBudget(rows=spec.importance_rows, repeats=spec.importance_repeats, seed=ctx.seed,
                                      budget=spec.importance_budget)
            importance = explain_models(models, limits, split=spec.split, metric=rank_by, threshold=spec.threshold,
                                        progress=ctx.progress)
            atomic_write_json(ctx.artifact_path("importance.json"), importance)
            ctx.facts["explained"] = explained_facts(importance)
            for name, reason in importance["skipped"].items():
                ctx.logger.info("%s: importances of %s skipped: %s", ctx.stage, name, reason)
            for name, chosen in importance["permuted"].items():
                if "ranked_by" in chosen:
                    ctx.logger.info("%s: permutation importance of %s measured on %d of %d features (%s; ranked by "
                                    "%s)", ctx.stage, name, chosen["features"], chosen["of"],
                                    chosen.get("reason") or "the table is too wide to permute all", chosen["ranked_by"])
                if "time" in chosen:
                    ctx.logger.info("%s: permutation importance of %s held to %s", ctx.stage, name, chosen["time"])
    ctx.facts["best"] = evaluation.best
    if not any(_is_number(m.get(evaluation.rank_by)) for m in evaluation.metrics.values()):
        # Every model's rank_by is undefined here (one class in the split: no ROC AUC), so the
        # 'best' is the first listed, not a winner: said, so nobody reads it as one.
        ctx.logger.warning("%s is undefined for every model on the %s split (%s); 'best' (%s) is only the first "
                           "listed: rank by another metric (rank_by:) or give the split more rows",
                           evaluation.rank_by, evaluation.split, ", ".join(evaluation.metrics), evaluation.best)
    perfect = perfect_score(evaluation)
    if perfect:
        ctx.logger.warning("%s: %s; held-out rows are almost never scored perfectly: a feature most likely leaks "
                           "the target (recorded with or after the outcome: a status, a score, a date of leaving). "
                           "Check the model's most important features in the report", ctx.stage, perfect)
    ctx.run_record["metrics"] = evaluation.record()
    return evaluation


# Metrics whose best value, reached on held-out rows, says more of the data than of the model.
PERFECT = {"roc_auc": 1.0, "roc_auc_ovr_macro": 1.0, "accuracy": 1.0, "r2": 1.0}


def perfect_score(evaluation: Evaluation) -> str | None:
    """``best model's metric 1.0000 on the test split`` when the best model scores a metric of
    ``PERFECT`` at its best (within 1e-4) on held-out rows, else None."""
    if evaluation.split == "train":
        return None                     # the rows it was fitted on: a perfect score there is common
    scores = evaluation.metrics.get(evaluation.best) or {}
    for metric, best in PERFECT.items():
        value = scores.get(metric)
        if _is_number(value) and abs(best - value) <= 1e-4:
            return f"{evaluation.best} scores {metric} {value:.4f} on the {evaluation.split} split"
    return None


def _is_number(value: object) -> bool:
    """A metric value that ranks: a finite number (a null or NaN is an undefined metric)."""
    import math

    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
