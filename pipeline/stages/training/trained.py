"""What a model-training stage returns (``TrainedModel``, with its ``SplitScores``) and the
library function that fits a registry model on a feature set (``train_model``).

They live apart from the ``train`` stage kind (``pipeline.stages.train``, which re-exports
them) so that the training libraries the stage calls (``pipeline.stages.training.bagging``)
can build on them without importing the stage back.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pipeline.backends import Backend
from pipeline.core.errors import ConfigError, ConfigIssue, DataError, UsageError
from pipeline.core.problems import Task
from pipeline.featuresets import FeatureSet
from pipeline.featuresets.feature_set import Scorer
from pipeline.models import FitInputs, ModelSpec, get_model_spec, trainable_models
from pipeline.stages.spec import StageProgress

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
        column): the features' own scorer of the estimator, on the columns it was trained on;
        models of other stages say theirs."""
        return features.matching(self.features.feature_names).scorer(self.estimator)

    def scoring_cost(self) -> int:
        """Fitted estimators one scoring of a row runs (1; a bag or an ensemble, its members'):
        what ``evaluate`` divides its permutation importance budget by."""
        return 1



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

    Examples:
        >>> from pipeline.stages import train_model
        >>> model = train_model(features, "logistic_regression", {"C": 0.5, "max_iter": 1000})
        >>> model.name, model.scores["test"].shape
        ('logistic_regression', (1409,))
    """
    backend: Backend = features.backend
    try:
        spec = get_model_spec(model)
    except KeyError as exc:                     # the library's argument; a config's model is checked first
        raise UsageError(str(exc.args[0])) from None
    if not spec.trainable:
        raise ValueError(f"model '{model}' has no estimator to fit here (it is trained by its own stage kind); "
                         f"train fits {', '.join(trainable_models())}")
    problems = spec.check_params(params or {})
    if problems:
        raise ValueError("; ".join(problems))
    wrong = spec.value_problems(params or {})
    if wrong:                             # before the fit, which would raise a TypeError naming no key
        raise ConfigError([ConfigIssue(f"stages.{name}.params.{key}" if name else f"params.{key}", problem)
                           for key, problem in wrong])
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
    inputs = fit_inputs(features, spec, params or {})
    if inputs.eval_set is None:
        given = [p for p in spec.eval_set_params if p in (params or {})]
        if given:
            raise ConfigError([ConfigIssue(f"stages.{name}.params.{p}" if name else f"params.{p}", eval_set_problem(p))
                               for p in given])
    fit_kwargs = spec.fit_kwargs(inputs)
    started = time.perf_counter()
    with progress.bar(steps.total, steps.description) if steps and progress else nullcontext(None) as advance:
        attached = steps.attach(advance) if steps and advance is not None else {}
        estimator = backend.estimator(spec, {**constructor, **attached}, distributed=features.distributed,
                                      task=task.kind)
        try:
            streamed = features.fit(estimator, fit_kwargs, stage=name or model, model=model,
                                    external_memory=external_memory)
        except invalid_parameter_errors() as exc:
            # scikit-learn checks a value's type and range as it fits: a config mistake (exit 2)
            # at the params key, not a stage failure.
            raise ConfigError([ConfigIssue(f"stages.{name}.params" if name else "params", str(exc))]) from exc
        finally:
            if attached:      # the fitted estimator is cached and exported: it must not hold the display
                estimator.set_params(**{key: constructor.get(key) for key in attached})
    scores = SplitScores.of_estimator(estimator, features)
    fit_seconds = time.perf_counter() - started
    return TrainedModel(
        name=name or model, model=model, estimator=estimator, features=features, scores=scores,
        params=kwargs, ignored_params=ignored, fit_seconds=fit_seconds, external_memory=streamed,
    )


def refuse_repeated_names(models: list[TrainedModel], kind: str) -> None:
    """A model's name is its row in every table and its key in a blend: two of one name (train
    stages' default names are the model's) would silently be one. ``kind`` names the caller."""
    names = [model.name for model in models]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise DataError(f"{kind}: models must have distinct names ({', '.join(repeated)} appear twice); give each "
                        "its own (train_model's name=, or the stage's name)")


def eval_set_problem(param: str) -> str:
    """Why ``param`` (one that acts on the evaluation set) cannot apply to a fit without one."""
    return (f"{param} stops on the valid split, and these features have no valid rows (with folds, each fold "
            "trains to the end): give the split valid: 0.1 (without folds), or remove it")


def invalid_parameter_errors() -> tuple[type[BaseException], ...]:
    """What scikit-learn raises for a parameter value of the wrong type or range (``C: high``,
    ``C: -1``); nothing where it has no such class."""
    try:
        from sklearn.utils._param_validation import InvalidParameterError
    except ImportError:
        return ()
    return (InvalidParameterError,)


def model_meta(model: TrainedModel) -> dict[str, Any]:
    """What model.json says of ``model`` before its files and ``export_meta``: what it is, what
    it reads and its task (absent in folders exported before tasks: those are binary)."""
    return {
        "name": model.name, "model": model.model, "device": model.features.backend.name,
        "estimator": type(model.estimator).__module__ + "." + type(model.estimator).__name__,
        "params": _jsonable(model.params), "features": model.features.feature_names,
        "target": model.features.target, "id_column": model.features.id_column,
        "task": model.task.to_dict(),
    }


def _jsonable(params: dict[str, Any]) -> dict[str, Any]:
    return {k: (v if isinstance(v, (str, int, float, bool, type(None), list, dict)) else repr(v)) for k, v in params.items()}


def fit_inputs(features: FeatureSet, spec: ModelSpec, params: Mapping[str, Any]) -> FitInputs:
    """What the entry's ``fit_kwargs`` may pass to ``fit``: the valid split (for an entry that
    takes an evaluation set, and only when it has rows) and the categorical columns' positions."""
    takes_eval = spec.supports_eval_set or spec.fit_arguments is not None
    eval_set = (features.X["valid"], features.y["valid"]) if takes_eval and features.rows().get("valid") else None
    categorical = set(features.categorical_columns)
    return FitInputs(eval_set=eval_set,
                     categorical=tuple(i for i, column in enumerate(features.feature_names) if column in categorical),
                     feature_names=tuple(features.feature_names), params=dict(params))
