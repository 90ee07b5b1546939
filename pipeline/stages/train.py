"""``train``: fit a registry model on the training matrix.

Scores are host vectors per split, computed on first read and kept, so ``evaluate`` and
``export`` share one prediction pass. How the estimator is fitted and scored (on device
matrices, or through the Dask cluster for partitioned data) is the feature set's to say.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator

from pipeline.core.errors import ConfigError, ConfigIssue
from pipeline.featuresets import FeatureSet
from pipeline.models import MODELS, checked_params, get_model_spec, trainable_model_named, trainable_models
from pipeline.backends.headers import HeaderReader
from pipeline.stages.spec import (
    KeyPath, Preview, StageContext, StageSpec, model_preview, only_input, register_stage,
)
from pipeline.stages.training.bagging import BAG_WITH_FOLDS, bag_model, params_of_stage
from pipeline.stages.training.cross_validation import cross_validate_model
from pipeline.stages.training.trained import SplitScores, TrainedModel, eval_set_problem, train_model
from pipeline.stages.training.tuning import RegistryTrainer, TuneSpec, run_search, tune_problems

__all__ = ["EVAL_HISTORY", "SplitScores", "TrainSpec", "TrainedModel", "evaluation_rounds", "external_memory_models",
           "run_train", "train_model", "train_uses"]


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
    bag: int | None = Field(
        None, ge=2,
        description="Fit the model k times, each on k-1 of k folds of the training split's rows (stratified, "
                    "seeded) with the fold left out as its early-stopping eval set; valid/test scores are the "
                    "members' average and each training row gets an out-of-fold score (what stack: and "
                    "ensemble: fit on). With tune:, the search runs first and the best params are bagged. "
                    "Not with folds: on the split, nor with partitioned features.")
    min_inputs = 1
    max_inputs = 1

    def preview(self, stage: str, inputs: Mapping[str, Preview], headers: HeaderReader) -> Preview:
        preview = model_preview(inputs)
        return dataclasses.replace(preview, oof=True) if self.bag else preview

    def preview_problems(self, inputs: Mapping[str, Preview]) -> list[tuple[KeyPath, str]]:
        """Rules across stages, and anything but a number where the model's estimator takes a
        number or refuses the value (``max_depth: abc``, ``C: high``, ``max_depth: [3]``): read from
        its class, so the model's library is imported, for a config with such a value only
        (``validate`` of numbers imports none; numbers past the estimator's own constraints are
        refused when the stage trains)."""
        words = {key: value for key, value in (self.params or {}).items()
                 if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)))}
        spec = get_model_spec(self.model)
        problems = [(("params", key), problem) for key, problem in spec.value_problems(words)] if words else []
        problems += tune_problems(self.tune, inputs)
        if self.bag and any(p.folds for p in inputs.values()):
            problems.append((("bag",), BAG_WITH_FOLDS))
        if not self.bag and any(p.valid is False for p in inputs.values()):   # bag's members stop on their fold
            problems += [(("params", name), eval_set_problem(name))
                         for name in get_model_spec(self.model).eval_set_params if name in (self.params or {})]
        return problems

    @field_validator("model")
    @classmethod
    def _known_model(cls, model: str) -> str:
        """Checked against the registry now, not at import: plugins register models later."""
        return trainable_model_named(model)

    @field_validator("external_memory")
    @classmethod
    def _external_memory_model(cls, value: bool | None, info: ValidationInfo) -> bool | None:
        model = info.data.get("model")
        if value and model is not None and model not in external_memory_models():
            raise ValueError(f"external_memory applies to {', '.join(external_memory_models())} only")
        return value

    @field_validator("bag")
    @classmethod
    def _bag_in_memory(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value and info.data.get("external_memory"):
            raise ValueError("bag: fits its members on rows of the in-memory feature matrix; it cannot stream "
                             "partition files (external_memory: true): remove one of them")
        return value

    @field_validator("params")
    @classmethod
    def _known_params(cls, params: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        return checked_params(info.data.get("model"), params)

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
        _check_space_values(spec, ctx.stage)
        tuning = run_search(spec.tune, RegistryTrainer(train_model, spec.model, spec.params, seed=ctx.seed,
                                                       external_memory=spec.external_memory),
                            only_input(inputs), ctx)
        params.update(tuning.chosen_params)   # the best trial's, or the stage's own when they were kept
    if spec.bag:                          # bag: k fits on k folds of the training rows, averaged
        with params_of_stage(ctx.stage):
            trained = bag_model(only_input(inputs), spec.model, params, k=spec.bag, seed=ctx.seed, name=ctx.stage,
                                progress=ctx.progress)
        ctx.facts["bag"] = {"k": spec.bag, "oof": _oof_metrics(trained)}
    else:
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


def _check_space_values(spec: TrainSpec, stage: str) -> None:
    """Text where the model takes a number in a ``tune: space`` (``choice: [0.1, fast]``), before
    the first trial: each trial that drew it failed alone, and the search went on without a word
    of it. Checked here, not at validate, as ``train_model`` checks params (it imports the
    model's library)."""
    model = get_model_spec(spec.model)
    problems = spec.tune.value_problems(
        lambda key, value: "; ".join(problem for _, problem in model.value_problems({key: value})) or None)
    if problems:
        raise ConfigError([ConfigIssue(f"stages.{stage}.tune", problem) for problem in problems])


def _oof_metrics(trained: TrainedModel) -> dict[str, float]:
    """The task's metrics of a model's out-of-fold scores of the training split (rows no fit saw)."""
    from pipeline.metrics import task_metrics

    return {name: round(value, 6) for name, value in
            task_metrics(trained.task, trained.features.labels("train"), trained.oof_scores).items()}
