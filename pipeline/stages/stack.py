"""``stack``: a meta-model fitted on its input models' out-of-fold scores, a model like any other.

Each input is a trained model (a ``train`` stage with ``bag:``, any model stage when the split
has ``folds:``, an ensemble of such, or another stack) that carries out-of-fold scores of the
training split: for every training row, a score from a fit that did not see the row. Those
scores are the meta-model's features (``pipeline.models.blending.stack_matrix``: one column
per member, or one per class per member for multiclass; with ``passthrough: true`` the
model's own features follow, their categorical columns still categorical), so the meta-model
never learns from a member's in-sample scores, which flatter an overfit member.

The meta-model (``model:``, default logistic regression for classification and ridge for
regression) is itself bagged over k folds of those rows (``bagging.bag_model``), so the
stack has out-of-fold scores of its own and can feed another stack. Valid and test scores:
the members' scores of the split, the same matrix, the meta-model's average. The result is
one registry model, ``stacked`` (``StackFormat``: each member in its own format under
``members/``, the bagged meta-model under ``meta/``, and ``stack.json``), which ``export``
saves and ``predict`` loads like any other.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from pydantic import Field, ValidationInfo, field_validator

from pipeline.models.registry import STACKED_MODEL, meta_model_for
from pipeline.backends.headers import HeaderReader
from pipeline.core.errors import ConfigError, ConfigIssue, DataError
from pipeline.featuresets import FeatureSet
from pipeline.featuresets.feature_set import TRAIN, Scorer
from pipeline.featuresets.in_memory import InMemoryFeatures
from pipeline.models import checked_params, get_model_spec, trainable_model_named, trainable_models
from pipeline.models.blending import EnsembleMember, Stacked, blend, stack_columns, stack_matrix
from pipeline.stages.ensemble import members_codes, mixed_features, one_features
from pipeline.stages.spec import KeyPath, Preview, StageContext, StageProgress, StageSpec, register_stage, split_facts
from pipeline.stages.train import SplitScores, TrainedModel
from pipeline.stages.training.bagging import BaggedModel, bag_model, params_of_stage
from pipeline.stages.training.trained import model_meta

__all__ = ["STACKED_MODEL", "StackScorer", "StackSpec", "StackedModel", "default_meta_model", "fit_stack"]

META = "meta"


def default_meta_model(task: str) -> str:
    """The meta-model when ``model:`` is left out: the registry entry that says it is one for
    the task (``ModelSpec.meta_model_for``: the linear models, which a handful of score columns
    need and which cannot memorise them)."""
    return meta_model_for(task)


def no_oof_scores(name: str) -> str:
    return (f"stack: input '{name}' has no out-of-fold scores of the training split to fit the meta-model on; "
            f"set bag: k on its train stage, or folds: k on the split stage")


def _meta_model_schema(schema: dict[str, Any]) -> None:
    # Computed when the schema is generated, so models registered by plugins are listed.
    schema["anyOf"] = [{"enum": trainable_models()}, {"type": "null"}]


class StackSpec(StageSpec):
    kind: Literal["stack"]
    model: str | None = Field(
        None, description="The meta-model (a registry name); default logistic_regression for classification, "
                          "ridge for regression.", json_schema_extra=_meta_model_schema)
    params: dict[str, Any] = Field(default_factory=dict, description="The meta-model's parameters.")
    passthrough: bool = Field(
        False, description="Give the meta-model the features too, after the members' scores.")
    bag: int = Field(5, ge=2, description="Folds the meta-model is cross-fitted over (its members' average scores "
                                          "the valid and test rows, their held-out scores are the stack's "
                                          "out-of-fold scores, so a stack can feed another).")
    min_inputs = 1

    def preview(self, stage: str, inputs: Mapping[str, Preview], headers: HeaderReader) -> Preview:
        """Its members' features and split, when they share them; it has out-of-fold scores."""
        previews = [split_facts(p) for p in inputs.values()]
        if not previews or any(p != previews[0] for p in previews[1:]):
            return Preview(oof=True)
        return split_facts(previews[0], oof=True)

    def preview_problems(self, inputs: Mapping[str, Preview]) -> list[tuple[KeyPath, str]]:
        """Members from different features stages; members without out-of-fold scores."""
        problems: list[tuple[KeyPath, str]] = []
        sources = {name: p.features for name, p in inputs.items()}
        if sources and None not in sources.values():
            mixed = mixed_features(sources)
            if mixed:
                problems.append((("inputs",), "stack" + mixed.removeprefix("ensemble")))
        problems += [(("inputs",), no_oof_scores(name)) for name, p in inputs.items() if p.oof is False]
        return problems

    @field_validator("model")
    @classmethod
    def _known_model(cls, model: str | None) -> str | None:
        return model if model is None else trainable_model_named(model)

    @field_validator("params")
    @classmethod
    def _known_params(cls, params: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        """The named meta-model's params; with ``model`` left out, params that neither default
        has are refused now (which default applies is checked once the task is known)."""
        model = info.data.get("model")
        if model is not None or "model" not in info.data:
            return checked_params(model, params)
        defaults = [get_model_spec(default_meta_model(task)) for task in ("binary", "regression")]
        unknown = [key for key in params if not any(key in spec.params for spec in defaults)]
        if unknown:
            raise ValueError("; ".join(problem for problem in defaults[0].check_params({k: params[k] for k in unknown}))
                             + " (model left out: the default meta-model is logistic_regression, or ridge for "
                               "regression)")
        return params

    def task_problems(self, task: str) -> list[tuple[KeyPath, str]]:
        """A meta-model that cannot serve the split's task (a classifier for regression), and
        params the task's default meta-model does not have (``model`` left out: known once the
        task is, so here and not in the field's own check)."""
        if self.model is None:
            default = get_model_spec(default_meta_model(task))
            return [(("params",), f"{problem} (the {task} task's default meta-model; set model: to choose "
                                  "another)") for problem in default.check_params(self.params)]
        spec = get_model_spec(self.model)
        where = ("model",) if not spec.serves(task) else ("params",)
        return [(where, problem) for problem in spec.task_problems(task, self.params)]


@dataclass
class StackScorer:
    """One split's stack scores: the members' scorers' scores (and the features, with
    passthrough) as ``stack_matrix``, scored by each of the meta-model's members and averaged,
    as ``predict`` scores them (a class, not a closure: models pickle)."""

    scorers: list[Scorer]
    meta_estimators: list[Any]
    features: FeatureSet
    passthrough: bool = False

    def __call__(self, split: str) -> np.ndarray:
        backend, task = self.features.backend, self.features.task
        host = backend.to_host(self.features.X[split]) if self.passthrough else None
        matrix = backend.asarray(stack_matrix([scorer(split) for scorer in self.scorers], task, host))
        weight = 1.0 / len(self.meta_estimators)
        return blend([backend.predict_scores(estimator, matrix, task) for estimator in self.meta_estimators],
                     [weight] * len(self.meta_estimators))


@dataclass
class StackedModel(TrainedModel):
    """A ``TrainedModel`` whose estimator is a ``Stacked``: its members and the meta-model."""

    members: list[TrainedModel] = field(default_factory=list)
    meta_model: BaggedModel | None = None
    passthrough: bool = False
    # Training rows the meta-model was fitted on (rows some member has no out-of-fold score for are left out).
    fit_rows: int = 0

    def export_meta(self) -> dict[str, Any]:
        """The members and the meta-model, and what scoring the members needs (an MLP's
        categorical columns)."""
        meta: dict[str, Any] = {"members": [m.name for m in self.members], "passthrough": self.passthrough,
                                "meta_model": self.meta_model.base_model if self.meta_model else None}
        return {**meta, **members_codes(self.members, self.features)}

    def scoring_cost(self) -> int:
        """The members, then the meta-model's bag."""
        meta = self.meta_model.scoring_cost() if self.meta_model is not None else 1
        return sum(m.scoring_cost() for m in self.members) + meta

    def scorer_for(self, features: FeatureSet) -> Scorer:
        return StackScorer([m.scorer_for(features) for m in self.members],
                           [member.estimator for member in self.estimator.meta.estimator.members],
                           features, self.passthrough)


def fit_stack(models: Sequence[TrainedModel], *, name: str = STACKED_MODEL, model: str | None = None,
              params: dict[str, Any] | None = None, k: int = 5, passthrough: bool = False,
              seed: int | None = 42, progress: StageProgress | None = None) -> StackedModel:
    """A meta-model (registry ``model``, default ``default_meta_model``) fitted on the
    out-of-fold scores of ``models`` (trained on one feature set), bagged over ``k`` folds.

    Examples:
        >>> from pipeline.stages import bag_model, fit_stack
        >>> members = [bag_model(features, "logistic_regression", {"max_iter": 1000}, k=3),
        ...            bag_model(features, "random_forest", {"n_estimators": 50}, k=3)]
        >>> stacked = fit_stack(members, k=3)
        >>> stacked.name, stacked.params["model"], stacked.scores["test"].shape
        ('stacked', 'logistic_regression', (1409,))
    """
    models = list(models)
    features = one_features(models, "stack")
    task = features.task
    model = model or default_meta_model(task.kind)
    refused = get_model_spec(model).task_problems(task.kind, params or {})
    if refused:
        raise ConfigError([ConfigIssue(f"stages.{name}.model", f"{problem} (the split's task is {task.describe()})")
                           for problem in refused])
    labels = features.labels(TRAIN)
    oof = [_oof_of(m, len(labels)) for m in models]
    # Rows some member has no out-of-fold score for (the oldest block of an order_by split) are left out.
    scored = np.all([np.isfinite(s.reshape(len(labels), -1)).all(axis=1) for s in oof], axis=0)
    if not scored.any():
        raise DataError(f"stack: no training row has an out-of-fold score from every input ({_names(models)})")
    meta_features = _meta_features(models, features, oof, scored, passthrough)
    meta = bag_model(meta_features, model, params, k=k, seed=seed, name=f"{name}_{META}", progress=progress)
    assert isinstance(meta, BaggedModel)
    stack_oof = np.full(oof[0].shape, np.nan)
    stack_oof[scored] = meta.oof_scores
    estimator = Stacked(
        [EnsembleMember(m.name, m.model, m.estimator, 1.0, {**model_meta(m), **m.export_meta()}) for m in models],
        EnsembleMember(META, meta.model, meta.estimator, 1.0, {**model_meta(meta), **meta.export_meta()}),
        passthrough=passthrough, task=task)
    scorer = StackScorer([m.scores.__getitem__ for m in models],
                         [member.estimator for member in meta.estimator.members], features, passthrough)
    return StackedModel(
        name=name, model=STACKED_MODEL, estimator=estimator, features=features,
        scores=SplitScores(scorer, features),
        params={"model": model, "params": dict(params or {}), "bag": k, "passthrough": passthrough,
                "members": [m.name for m in models]},
        fit_seconds=meta.fit_seconds, oof_scores=stack_oof,
        members=models, meta_model=meta, passthrough=passthrough, fit_rows=int(scored.sum()),
    )


def _names(models: Sequence[TrainedModel]) -> str:
    return ", ".join(m.name for m in models)


def _oof_of(model: TrainedModel, rows: int) -> np.ndarray:
    if model.oof_scores is None:
        raise DataError(no_oof_scores(model.name))
    scores = np.asarray(model.oof_scores, dtype="float64")
    if scores.shape[:1] != (rows,):
        raise DataError(f"stack: out-of-fold scores of '{model.name}' do not cover the training split's {rows} rows")
    return scores


def _meta_features(models: list[TrainedModel], features: FeatureSet, oof: list[np.ndarray], scored: np.ndarray,
                   passthrough: bool) -> InMemoryFeatures:
    """The meta-model's features: "train" = the members' out-of-fold scores of the scored
    training rows, every other split = the members' scores of it (what ``bag_model`` scores
    the meta-model's members on); labels and ids are the features' own. With ``passthrough``
    the features' categorical columns stay categorical (the scores are numbers), so a meta-model
    that takes categories natively (LightGBM, CatBoost) gets them as a train stage would."""
    backend, task = features.backend, features.task
    columns = stack_columns([m.name for m in models], task, features.feature_names if passthrough else ())
    categorical = list(features.categorical_columns) if passthrough else []
    X, y, ids, codes = {}, {}, {}, {}
    for split, rows in features.rows().items():
        host = backend.to_host(features.X[split]) if passthrough else None
        if split == TRAIN:
            scores = [s[scored] for s in oof]
            host = None if host is None else np.asarray(host)[scored]
            take = np.flatnonzero(scored)
        else:
            width = task.n_outputs if task.kind == "multiclass" else 1
            scores = [np.asarray(m.scores[split]) if rows else np.empty((0, width)) for m in models]
            take = None
        X[split] = backend.asarray(stack_matrix(scores, task, host) if rows or split == TRAIN
                                   else np.empty((0, len(columns)), dtype="float32"))
        labels = features.y[split]
        y[split] = labels if take is None else labels[backend.asarray(take)]
        if categorical and split in features.codes:
            split_codes = features.codes[split]
            codes[split] = split_codes if take is None else split_codes[backend.asarray(take)]
        split_ids = features.host_ids(split)
        ids[split] = split_ids if take is None or split_ids is None else split_ids.iloc[take].reset_index(drop=True)
    return InMemoryFeatures(X=X, y=y, ids=ids, feature_names=columns, workflow=features.workflow,
                            target=features.target, id_column=features.id_column, backend=backend,
                            categorical_columns=categorical, codes=codes, task=task)


# ------------------------------------------------------------------ the stage
def stack_uses(spec: StackSpec) -> list[Any]:
    """The meta-model's registry entry (its estimator classes are code the stage runs); both
    defaults when none is named, since the task picks one only when the data is read."""
    names = [spec.model] if spec.model else [default_meta_model("binary"), default_meta_model("regression")]
    return [get_model_spec(name) for name in names]


@register_stage("stack", StackSpec, produces=StackedModel, accepts=(TrainedModel,), resources=("gpu",),
                uses=stack_uses)
def run_stack(spec: StackSpec, ctx: StageContext, inputs: Mapping[str, TrainedModel]) -> StackedModel:
    models = list(inputs.values())
    for stage, trained in inputs.items():
        if trained.oof_scores is None:
            raise DataError(no_oof_scores(stage))
    with params_of_stage(ctx.stage):        # the meta-model's params are the stage's
        model = fit_stack(models, name=ctx.stage, model=spec.model, params=spec.params, k=spec.bag,
                          passthrough=spec.passthrough, seed=ctx.seed, progress=ctx.progress)
    ctx.facts["meta_model"] = model.meta_model.base_model if model.meta_model else None
    ctx.facts["members"] = [m.name for m in models]
    ctx.facts["fit_rows"] = model.fit_rows
    ctx.facts["fit_seconds"] = round(model.fit_seconds, 3)
    ctx.logger.info("%s: %s fitted on the out-of-fold scores of %s (%d rows)", ctx.stage,
                    ctx.facts["meta_model"], ", ".join(ctx.facts["members"]), model.fit_rows)
    return model

