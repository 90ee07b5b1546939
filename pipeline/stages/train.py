"""``train``: fit a registry model on the training matrix.

Scores are host vectors per split, computed on first read and kept, so ``evaluate`` and
``export`` share one prediction pass. How the estimator is fitted and scored (on device
matrices, or through the Dask cluster for partitioned data) is the feature set's to say.
"""

from __future__ import annotations

import difflib
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from pydantic import Field, ValidationInfo, field_validator

from pipeline.backends import Backend
from pipeline.core.errors import ConfigError, ConfigIssue, DataError
from pipeline.featuresets import FeatureSet
from pipeline.featuresets.feature_set import Scorer
from pipeline.models import MODELS, get_model_spec, trainable_models
from pipeline.backends.headers import HeaderReader
from pipeline.stages.spec import (
    KeyPath, Preview, StageContext, StageProgress, StageSpec, model_preview, only_input, register_stage,
)
from pipeline.stages.training.cross_validation import cross_validate_model
from pipeline.stages.training.tuning import RegistryTrainer, TuneSpec, run_search, tune_problems
from pipeline.core.problems import Task


class SplitScores(Mapping[str, np.ndarray]):
    """Positive-class scores per split, computed on first read and kept.

    Usually only the test split is read (``evaluate``, ``export``); scoring the training split
    of a large table eagerly cost ~4% of a 1M-row run for nothing.
    """

    def __init__(self, score: Callable[[str], np.ndarray], features: FeatureSet) -> None:
        self._score = score
        self._features = features
        self._cache: dict[str, np.ndarray] = {}

    @classmethod
    def of_estimator(cls, estimator: Any, features: FeatureSet) -> SplitScores:
        """Scores of a registry estimator fitted on ``features``, as the features score it."""
        return cls(features.scorer(estimator), features)

    def __getitem__(self, split: str) -> np.ndarray:
        if split not in self._cache:
            if split not in self:
                raise KeyError(split)
            self._cache[split] = self._score(split)
        return self._cache[split]

    def __contains__(self, split: object) -> bool:
        # Answer from the row counts: Mapping's default would run a prediction to find out.
        return bool(self._features.rows().get(split))  # type: ignore[call-overload]

    def __iter__(self) -> Iterator[str]:
        return (name for name, rows in self._features.rows().items() if rows)

    def __len__(self) -> int:
        return sum(1 for _ in self)


@dataclass
class TrainedModel:
    """A fitted estimator with the features it was trained on and its scores per split."""

    name: str
    model: str
    estimator: Any
    features: FeatureSet
    scores: Mapping[str, np.ndarray]
    params: dict[str, Any]
    ignored_params: list[str] = field(default_factory=list)
    fit_seconds: float = 0.0
    # Set when training streamed partition files (xgboost_external): ranks and files per worker.
    external_memory: dict[str, Any] | None = None
    # Cross-validation (``folds: k``): per-fold metrics with their mean and std, and the
    # out-of-fold scores of the training split's rows (what an ensemble fits its weights on).
    cv: dict[str, Any] | None = None
    oof_scores: np.ndarray | None = None
    # Hyperparameter search (``tune:``): every trial's parameters and score, and the winner.
    tuning: dict[str, Any] | None = None

    @property
    def task(self) -> Task:
        return self.features.task

    def export_meta(self) -> dict[str, Any]:
        """Keys ``export`` adds to model.json beyond the estimator's files (none here; models
        trained by other stages add what scoring them needs)."""
        return {}

    def scorer_for(self, features: FeatureSet) -> Scorer:
        """How this model scores other rows of its features' layout (a sample, a shuffled
        column): the features' own scorer of the estimator; models of other stages say theirs."""
        return features.scorer(self.estimator)


def external_memory_models() -> list[str]:
    """Registry models that can train from partition files through external memory."""
    return sorted(name for name, spec in MODELS.items() if spec.external_memory)


def _model_schema(schema: dict[str, Any]) -> None:
    # Computed when the schema is generated, so models registered by plugins are listed.
    schema["enum"] = trainable_models()


class TrainSpec(StageSpec):
    kind: Literal["train"]
    model: str = Field(description="Registry model name.", json_schema_extra=_model_schema)
    params: dict[str, Any] = Field(
        default_factory=dict,
        description="Estimator parameters with scikit-learn names; translated for cuML on GPU.",
    )
    external_memory: bool | None = Field(
        None,
        description="XGBoost on partitioned features: stream each worker's share of the Parquet files "
                    "through XGBoost's external memory (true), or hold it in memory with xgboost.dask "
                    "(false). Default: external memory whenever the features were written as Parquet.",
    )
    tune: TuneSpec | None = Field(
        None, description="Search params with Optuna before training (trials scored by cross-validation on the "
                          "non-test rows unless scoring: valid; trial 0 is params as given), then train the best "
                          "if it beats params by more than the folds' spread; each trial's values override params.")
    min_inputs = 1
    max_inputs = 1

    def preview(self, stage: str, inputs: Mapping[str, Preview], headers: HeaderReader) -> Preview:
        return model_preview(inputs)

    def preview_problems(self, inputs: Mapping[str, Preview]) -> list[tuple[KeyPath, str]]:
        return tune_problems(self.tune, inputs)

    @field_validator("model")
    @classmethod
    def _known_model(cls, model: str) -> str:
        """Checked against the registry now, not at import: plugins register models later."""
        known = trainable_models()
        if model not in known:
            close = difflib.get_close_matches(model, known, n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            raise ValueError(f"unknown model '{model}' (known: {', '.join(known)}){hint}")
        return model

    @field_validator("external_memory")
    @classmethod
    def _external_memory_model(cls, value: bool | None, info: ValidationInfo) -> bool | None:
        model = info.data.get("model")
        if value and model is not None and model not in external_memory_models():
            raise ValueError(f"external_memory applies to {', '.join(external_memory_models())} only")
        return value

    @field_validator("params")
    @classmethod
    def _known_params(cls, params: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        model = info.data.get("model")
        problems = get_model_spec(model).check_params(params) if model else []
        if problems:
            raise ValueError("; ".join(problems))
        return params

    @field_validator("tune")
    @classmethod
    def _tunable_params(cls, tune: TuneSpec | None, info: ValidationInfo) -> TuneSpec | None:
        model = info.data.get("model")
        if tune is not None and model is not None:
            problems = tune.unknown_params(get_model_spec(model).allowed_params(), f"model '{model}'")
            if problems:
                raise ValueError("; ".join(problems))
        return tune

    def task_problems(self, task: str) -> list[tuple[KeyPath, str]]:
        """(key path in this block, message) for a model or params that cannot serve ``task``,
        the task a split upstream declares: the config loader asks, so a regression split
        feeding a classifier fails at validation, not after the features are built."""
        spec = get_model_spec(self.model)
        where = ("model",) if not spec.serves(task) else ("params",)
        return [(where, problem) for problem in spec.task_problems(task, self.params)]


def train_model(
    features: FeatureSet,
    model: str,
    params: dict[str, Any] | None = None,
    *,
    seed: int | None = 42,
    name: str | None = None,
    external_memory: bool | None = None,
    estimator_kwargs: dict[str, Any] | None = None,
    progress: StageProgress | None = None,
) -> TrainedModel:
    """Fit ``model`` (a registry name) on ``features``' training split.

    ``external_memory`` matters for partitioned features only (see ``TrainSpec``).
    ``estimator_kwargs`` go to the estimator's constructor as they are, after translation and
    outside ``params`` (a tuner's XGBoost ``callbacks``: not parameters a model file records).
    ``progress``: where a model whose entry counts its steps (``ModelSpec.fit_steps``: XGBoost's
    boosting rounds) shows them as a bar; a distributed fit's steps run on the workers and are
    not counted here.
    """
    backend: Backend = features.backend
    spec = get_model_spec(model)
    if not spec.trainable:
        raise ValueError(f"model '{model}' has no estimator to fit here (it is trained by its own stage kind); "
                         f"train fits {', '.join(trainable_models())}")
    problems = spec.check_params(params or {})
    if problems:
        raise ValueError("; ".join(problems))
    task = features.task
    refused = spec.task_problems(task.kind, params or {})
    if refused:
        where = f"stages.{name}" if name else ""
        raise ConfigError([ConfigIssue(where, f"{problem} (the split's task is {task.describe()})")
                           for problem in refused])
    kwargs, ignored = spec.translate(params or {}, backend.name, seed=seed, distributed=features.distributed)
    if features.rows()["train"] == 0:
        raise DataError("the training split is empty")
    constructor = {**kwargs, **(estimator_kwargs or {})}
    steps = spec.fit_steps(constructor) if spec.fit_steps and progress is not None and not features.distributed \
        else None
    fit_kwargs: dict[str, Any] = {}
    if spec.supports_eval_set and features.rows().get("valid"):
        fit_kwargs = {"eval_set": [(features.X["valid"], features.y["valid"])], "verbose": False}
    started = time.perf_counter()
    with progress.bar(steps.total, steps.description) if steps and progress else nullcontext(None) as advance:
        attached = steps.attach(advance) if steps and advance is not None else {}
        estimator = backend.estimator(spec, {**constructor, **attached}, distributed=features.distributed,
                                      task=task.kind)
        try:
            streamed = features.fit(estimator, fit_kwargs, stage=name or model, model=model,
                                    external_memory=external_memory)
        finally:
            if attached:      # the fitted estimator is cached and exported: it must not hold the display
                estimator.set_params(**{key: constructor.get(key) for key in attached})
    scores = SplitScores.of_estimator(estimator, features)
    fit_seconds = time.perf_counter() - started
    return TrainedModel(
        name=name or model, model=model, estimator=estimator, features=features, scores=scores,
        params=kwargs, ignored_params=ignored, fit_seconds=fit_seconds, external_memory=streamed,
    )


EVAL_HISTORY = "eval_history.csv"


def evaluation_rounds(estimator: Any) -> str | None:
    """The metric per boosting round on the evaluation set, as CSV (``round``, then one column
    per set and metric: ``valid_logloss``), for an estimator that records them (XGBoost's
    ``evals_result``); None for one that does not or was fitted without an evaluation set."""
    recorded = getattr(estimator, "evals_result", None)
    if not callable(recorded):
        return None
    try:
        history = recorded()
    except Exception:  # noqa: BLE001 - no evaluation set given: nothing was recorded
        return None
    columns = {f"{'valid' if name == 'validation_0' else name}_{metric}": list(values)
               for name, metrics in (history or {}).items() for metric, values in metrics.items()}
    if not columns:
        return None
    import csv
    import io

    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["round", *columns])
    for i, row in enumerate(zip(*columns.values())):
        writer.writerow([i + 1, *(repr(float(v)) for v in row)])
    return out.getvalue()


def train_uses(spec: TrainSpec) -> list[Any]:
    """The model's registry entry: its estimator classes, format and rules are code the stage
    runs (a plugin's model lives in the plugin's module)."""
    return [get_model_spec(spec.model)]


@register_stage("train", TrainSpec, produces=TrainedModel, accepts=(FeatureSet,), resources=("gpu",), uses=train_uses)
def run_train(spec: TrainSpec, ctx: StageContext, inputs) -> TrainedModel:
    params, tuning = dict(spec.params), None
    if spec.tune is not None:             # tune: search first, then train the best params as any others
        tuning = run_search(spec.tune, RegistryTrainer(train_model, spec.model, spec.params, seed=ctx.seed,
                                                       external_memory=spec.external_memory),
                            only_input(inputs), ctx)
        params.update(tuning.chosen_params)   # the best trial's, or the stage's own when they were kept
    trained = train_model(only_input(inputs), spec.model, params, seed=ctx.seed, name=ctx.stage,
                          external_memory=spec.external_memory, progress=ctx.progress)
    trained.tuning = tuning.to_dict() if tuning is not None else None
    if trained.ignored_params:
        ctx.logger.warning("%s: %s has no %s on %s; ignored", ctx.stage, spec.model,
                           ", ".join(trained.ignored_params), ctx.backend.name)
    ctx.facts["fit_seconds"] = round(trained.fit_seconds, 3)
    ctx.facts.update(trained.features.fit_facts(trained.external_memory))
    ctx.facts["estimator"] = type(trained.estimator).__module__ + "." + type(trained.estimator).__name__
    rounds = evaluation_rounds(trained.estimator)
    if rounds and ctx.artifacts_dir is not None:
        from pipeline.runs.store import atomic_write_text

        atomic_write_text(ctx.artifact_path(EVAL_HISTORY), rounds)
    if trained.ignored_params:
        ctx.facts["ignored_params"] = trained.ignored_params
    if trained.features.fold_count():     # folds: k on the split: the same model fitted per fold
        cross_validate_model(ctx, trained, lambda fold: train_model(
            fold, spec.model, params, seed=ctx.seed, name=ctx.stage).scores["valid"])
    return trained
