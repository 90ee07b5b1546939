"""``auto``: a portfolio of models fitted within a time limit, bagged, and blended on out-of-fold scores.

One stage does what a data scientist does on a table nobody has tuned for: type the columns
(``pipeline.features.auto_ops``: selectors, no column names), fit each model of a portfolio
with defaults that hold up across tables (LightGBM, CatBoost, XGBoost, a random forest,
extra trees, the MLP, a linear model), bag each one on k folds of the training rows (so every
member has out-of-fold scores, and boosting early-stops on the fold it does not fit), and blend
the members with weights fitted on those out-of-fold scores (``ensemble``: the same fit as the
``ensemble`` stage, never worse than the best member on the rows it was fitted on). The result
is a ``TrainedModel`` like any other: ``evaluate`` ranks it and ``export`` saves it (an ensemble of
bagged members, each in its own model's file format).

Time: ``time_limit`` is the stage's whole budget. Members are fitted in ``PORTFOLIO``'s order
(the strongest on most tables first: boosted trees, then forests, the MLP, a linear model); a member
whose remaining folds would end past the limit (projected from its folds so far) is stopped
and left out, and a member that cannot start (its library is not installed, or it has no
estimator on this device) is recorded as skipped with the reason. The first member always
finishes, so a run under a tiny limit still has a model. Every member uses every core (its
library's own threads) or the run's GPU where its library has a GPU build.

The portfolio is data (``PORTFOLIO``): registry model names with default parameters per task;
no model name decides anything in the code below.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from pydantic import Field, field_validator

from pipeline.backends.headers import HeaderReader
from pipeline.core.errors import BackendUnavailable, ConfigError, ConfigIssue, DataError
from pipeline.core.problems import Task
from pipeline.core.sizes import parse_duration
from pipeline.featuresets import FeatureSet
from pipeline.featuresets.feature_set import TRAIN
from pipeline.metrics import HIGHER_IS_BETTER, default_metric, task_metrics
from pipeline.models import MODELS, get_model_spec
from pipeline.stages.ensemble import fit_ensemble
from pipeline.stages.features import build_features
from pipeline.stages.spec import Preview, StageContext, StageSpec, only_input, register_stage
from pipeline.stages.split import SplitData
from pipeline.stages.train import TrainedModel, train_model
from pipeline.stages.training.bagging import bag_model

__all__ = ["AutoSpec", "AutoResult", "PORTFOLIO", "PortfolioMember", "fit_auto", "run_auto"]

VALID = "valid"


@dataclass(frozen=True)
class PortfolioMember:
    """One model of the portfolio: a registry name, its parameters per task kind (``"*"``: every
    task), and who fits one fold (``train_model`` for registry estimators; the MLP's own trainer)."""

    model: str
    params: Mapping[str, Mapping[str, Any]]
    trainer: str = "registry"           # "registry" or "torch": see _TRAINERS
    tasks: tuple[str, ...] = ("binary", "multiclass", "regression")

    def params_for(self, task: str) -> dict[str, Any]:
        return {**self.params.get("*", {}), **self.params.get(task, {})}


# Defaults that hold up across tables (the libraries' own well-tried settings, a learning rate
# low enough that early stopping on the held-out fold chooses the number of trees).
PORTFOLIO: tuple[PortfolioMember, ...] = (
    PortfolioMember("lightgbm", {"*": {"n_estimators": 2000, "learning_rate": 0.05, "num_leaves": 31,
                                       "min_child_samples": 20, "colsample_bytree": 0.9,
                                       "early_stopping_rounds": 50}}),
    PortfolioMember("catboost", {"*": {"iterations": 2000, "learning_rate": 0.08, "depth": 6,
                                       "early_stopping_rounds": 50}}),
    PortfolioMember("xgboost", {"*": {"n_estimators": 2000, "learning_rate": 0.05, "max_depth": 6,
                                      "min_child_weight": 1, "colsample_bytree": 0.9,
                                      "early_stopping_rounds": 50}}),
    PortfolioMember("extra_trees", {"*": {"n_estimators": 300, "min_samples_leaf": 2, "max_features": "sqrt"},
                                    "regression": {"max_features": 0.5}}),
    PortfolioMember("random_forest", {"*": {"n_estimators": 300, "min_samples_leaf": 2, "max_features": "sqrt"},
                                      "regression": {"max_features": 0.5}}),
    PortfolioMember("mlp", {"*": {"hidden": [256, 128], "dropout": 0.1, "epochs": 40, "batch_size": 512,
                                  "learning_rate": 0.003, "weight_decay": 1e-5,
                                  "early_stopping": {"monitor": "val_loss", "patience": 5}}},
                    trainer="torch"),
    # Last: on integer category codes a linear model is a weak member, and an unscaled column
    # (codes up to a few hundred) makes lbfgs slow to converge; it rarely earns weight.
    PortfolioMember("logistic_regression", {"*": {"C": 1.0, "max_iter": 300}}, tasks=("binary", "multiclass")),
    PortfolioMember("ridge", {"*": {"alpha": 1.0}}, tasks=("regression",)),
)
# The quick preset: two boosted models, a forest and a linear baseline (smoke runs, first looks).
QUICK_MODELS = ("logistic_regression", "ridge", "lightgbm", "xgboost", "random_forest")


class AutoSpec(StageSpec):
    kind: Literal["auto"]
    preset: Literal["auto", "quick"] = Field(
        "auto", description="auto: the whole portfolio within time_limit; quick: LightGBM, XGBoost, the random "
                            "forest and a linear model only (a first look in a fraction of the time).")
    time_limit: float = Field(300.0, gt=0, description="Seconds (or '5m', '1h') for the whole stage; members "
                                                      "that would end past it are stopped and left out.")
    models: list[str] | None = Field(
        None, description="Portfolio members to fit (registry names), in order; default: every portfolio "
                          "member that serves the task.")
    bag: int = Field(5, ge=2, le=20, description="Folds each member is bagged on (out-of-fold scores for the "
                                                 "blend; early stopping on the fold a bag member does not fit).")
    ensemble: Literal["weighted", "stack"] = Field(
        "weighted", description="How members are combined: weighted (weights on the simplex fitted to the "
                                "out-of-fold scores) or stack (a meta-model bagged on them, as the stack stage).")
    id: str | None = Field(None, description="Id column (when the input is a split): kept out of the features, "
                                             "written with predictions.")
    min_inputs = 1
    max_inputs = 1

    @field_validator("time_limit", mode="before")
    @classmethod
    def _duration(cls, value: object) -> float:
        return parse_duration(value)

    @field_validator("models")
    @classmethod
    def _known_members(cls, models: list[str] | None) -> list[str] | None:
        if models is None:
            return models
        known = [m.model for m in PORTFOLIO]
        unknown = [m for m in models if m not in known]
        if unknown:
            raise ValueError(f"not in the portfolio: {', '.join(unknown)} (portfolio: {', '.join(known)})")
        if not models:
            raise ValueError("models must name at least one portfolio member (or be left out)")
        return models

    def preview(self, stage: str, inputs: Mapping[str, Preview], headers: HeaderReader) -> Preview:
        (source,) = inputs.values() if len(inputs) == 1 else (Preview(),)
        return Preview(features=source.features or stage, valid=source.valid, folds=source.folds,
                       target=source.target)


@dataclass
class MemberRecord:
    """One row of the leaderboard: what was fitted, how long it took, how it scored out of fold."""

    model: str
    status: str                       # fitted, skipped, stopped
    reason: str = ""
    seconds: float = 0.0
    oof: float | None = None
    valid: float | None = None
    weight: float = 0.0
    params: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"model": self.model, "status": self.status, "seconds": round(self.seconds, 3)}
        for key in ("oof", "valid"):
            value = getattr(self, key)
            if value is not None and math.isfinite(value):
                out[key] = round(value, 6)
        if self.status == "fitted":
            out["weight"] = round(self.weight, 6)
        if self.reason:
            out["reason"] = self.reason
        out["params"] = self.params
        return out


@dataclass
class AutoResult:
    """The combined model and the leaderboard (every member, fitted or not, best first); a
    member's ``weight`` is its blend weight, or 1 for each member of a stack."""

    model: TrainedModel
    metric: str
    leaderboard: list[MemberRecord]
    seconds: float


class _OutOfTime(Exception):
    """A member's remaining folds would end past the stage's time limit."""


@dataclass
class _Clock:
    """The stage's deadline, and the fold timing of the member being fitted."""

    deadline: float
    folds: int
    exempt: bool = False              # the first member always finishes
    started: float = 0.0
    done: int = 0

    def start_member(self, exempt: bool) -> None:
        self.exempt, self.started, self.done = exempt, time.perf_counter(), 0

    def before_fold(self) -> None:
        now = time.perf_counter()
        if self.exempt:
            return
        if now >= self.deadline:
            raise _OutOfTime("the time limit was reached")
        if self.done:
            per_fold = (now - self.started) / self.done
            if now + per_fold * (self.folds - self.done) > self.deadline:
                raise _OutOfTime(f"its {self.folds - self.done} remaining folds (about {per_fold:.1f}s each) would "
                                 "end past the time limit")

    def after_fold(self) -> None:
        self.done += 1

    def during_fold(self) -> None:
        """For trainers that report as they go (the MLP, per epoch): stop a fold that reaches
        the limit instead of letting it run on."""
        if not self.exempt and time.perf_counter() >= self.deadline:
            raise _OutOfTime("the time limit was reached while it trained")

    def left(self) -> float:
        return self.deadline - time.perf_counter()


def _registry_trainer(features: FeatureSet, model: str, params: dict[str, Any] | None = None, *,
                      clock: _Clock | None = None, **kwargs: Any) -> TrainedModel:
    return train_model(features, model, params, **kwargs)


def _torch_trainer(features: FeatureSet, model: str, params: dict[str, Any] | None = None, *,
                   seed: int | None = 42, name: str | None = None, clock: _Clock | None = None,
                   **_: Any) -> TrainedModel:
    from pipeline.stages.torch_mlp import train_torch

    on_epoch = (lambda epoch, row: clock.during_fold()) if clock is not None else None
    return train_torch(features, name=name or model, seed=42 if seed is None else seed, on_epoch=on_epoch,
                       **(params or {}))


_TRAINERS: dict[str, Callable[..., TrainedModel]] = {"registry": _registry_trainer, "torch": _torch_trainer}


def _timed(trainer: Callable[..., TrainedModel], clock: _Clock) -> Callable[..., TrainedModel]:
    """``trainer`` with the clock checked before each fold and advanced after it."""

    def fit_one(*args: Any, **kwargs: Any) -> TrainedModel:
        clock.before_fold()
        trained = trainer(*args, clock=clock, **kwargs)
        clock.after_fold()
        return trained

    return fit_one


def portfolio_for(task: str, preset: str, models: Sequence[str] | None = None) -> list[PortfolioMember]:
    """The members to fit for ``task``, in fitting order."""
    chosen = [m for m in PORTFOLIO if task in m.tasks and m.model in MODELS]
    if models is not None:
        by_name = {m.model: m for m in chosen}
        chosen = [by_name[name] for name in models if name in by_name]
    elif preset == "quick":
        chosen = [m for m in chosen if m.model in QUICK_MODELS]
    return chosen


def fit_auto(features: FeatureSet, *, time_limit: float = 300.0, preset: str = "auto",
             models: Sequence[str] | None = None, bag: int = 5, ensemble: str = "weighted", seed: int = 42,
             name: str = "auto", log: Callable[[str], None] | None = None) -> AutoResult:
    """Fit the portfolio on ``features`` within ``time_limit`` seconds and blend it (see the module)."""
    started = time.perf_counter()
    features = features.in_memory("the auto stage bags its members on the training matrix in memory; load the "
                                  "data without partitioned: true")
    task: Task = features.task
    members = portfolio_for(task.kind, preset, models)
    if not members:
        raise ConfigError([ConfigIssue(f"stages.{name}.models", f"no portfolio member serves a {task.kind} task")])
    metric = default_metric(task.kind)
    labels = np.asarray(features.labels(TRAIN))
    has_valid = bool(features.rows().get(VALID))
    clock = _Clock(deadline=started + time_limit, folds=bag)
    fitted: list[TrainedModel] = []
    board: list[MemberRecord] = []
    say = log or (lambda _: None)
    for member in members:
        params = member.params_for(task.kind)
        record = MemberRecord(member.model, "fitted", params=params)
        board.append(record)
        if fitted and clock.left() <= 0:
            record.status, record.reason = "skipped", "the time limit was reached before it started"
            continue
        problem = _cannot_fit(member.model, features)
        if problem:
            record.status, record.reason = "skipped", problem
            say(f"{member.model}: skipped ({problem})")
            continue
        clock.start_member(exempt=not fitted)
        member_started = time.perf_counter()
        try:
            trained = bag_model(features, member.model, params, k=bag, seed=seed, name=member.model,
                                train=_timed(_TRAINERS[member.trainer], clock))
        except _OutOfTime as exc:
            record.status, record.reason = "stopped", str(exc)
            record.seconds = time.perf_counter() - member_started
            say(f"{member.model}: stopped ({exc})")
            continue
        except BackendUnavailable as exc:
            record.status, record.reason = "skipped", _first_line(exc)
            say(f"{member.model}: skipped ({record.reason})")
            continue
        record.seconds = time.perf_counter() - member_started
        record.oof = _metric(task, metric, labels, trained.oof_scores)
        if has_valid:
            record.valid = _metric(task, metric, np.asarray(features.labels(VALID)), trained.scores[VALID])
        fitted.append(trained)
        say(f"{member.model}: {metric} {record.oof:.5f} out of fold ({record.seconds:.1f}s)")
    if not fitted:
        reasons = "; ".join(f"{r.model}: {r.reason}" for r in board)
        raise DataError(f"auto: no portfolio member could be fitted ({reasons})")
    if ensemble == "stack":
        from pipeline.stages.stack import fit_stack

        blended: TrainedModel = fit_stack(fitted, name=name, k=bag, seed=seed)
        weights = {m.name: 1.0 for m in fitted}
    else:
        blended = fit_ensemble(fitted, name=name, on="oof")
        weights = blended.weights
    for record in board:
        record.weight = weights.get(record.model, 0.0) if record.status == "fitted" else 0.0
    better = HIGHER_IS_BETTER[metric]
    board.sort(key=lambda r: (r.status != "fitted", -(r.oof or 0.0) if better else (r.oof or math.inf)))
    return AutoResult(blended, metric, board, time.perf_counter() - started)


def _cannot_fit(model: str, features: FeatureSet) -> str | None:
    """Why ``model`` cannot be fitted here (no estimator on this device, a library missing), or None."""
    spec = get_model_spec(model)
    if not spec.trainable:
        return None                     # trained by its own trainer (the MLP)
    path = spec.class_path(features.backend.name, task=features.task.kind)
    if path is None:
        return spec.unavailable(features.backend.name, task=features.task.kind)
    import importlib.util

    module = path.split(":")[0]
    if importlib.util.find_spec(module.split(".")[0]) is None:
        return f"the Python package '{module.split('.')[0]}' is not installed"
    return None


def _metric(task: Task, metric: str, labels: np.ndarray, scores: Any) -> float:
    if scores is None:
        return math.nan
    return float(task_metrics(task, labels, np.asarray(scores))[metric])


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def auto_uses(spec: AutoSpec) -> list[Any]:
    """The registry entries of the portfolio: their code is what the stage runs."""
    return [get_model_spec(m.model) for m in PORTFOLIO if m.model in MODELS]


@register_stage("auto", AutoSpec, produces=TrainedModel, accepts=(SplitData, FeatureSet), resources=("gpu",),
                uses=auto_uses)
def run_auto(spec: AutoSpec, ctx: StageContext, inputs: Mapping[str, Any]) -> TrainedModel:
    source = only_input(inputs)
    if isinstance(source, SplitData):
        from pipeline.features.auto_ops import default_ops

        ops = default_ops(source.task.kind)
        features = build_features(source, ops, id_column=spec.id)
        ctx.facts.update(features.facts())
        if ctx.artifacts_dir is not None:
            from pipeline.runs.store import atomic_write_json

            atomic_write_json(ctx.artifact_path("profile.json"), features.profile())
    else:
        if spec.id is not None:
            raise ConfigError([ConfigIssue(f"stages.{ctx.stage}.id", "id applies when the input is a split; the "
                                                                      "features stage names its own id column")])
        features = source
    result = fit_auto(features, time_limit=spec.time_limit, preset=spec.preset, models=spec.models, bag=spec.bag,
                      ensemble=spec.ensemble, seed=ctx.seed, name=ctx.stage, log=lambda line: ctx.logger.info("%s: %s", ctx.stage, line))
    board = [r.to_dict() for r in result.leaderboard]
    ctx.facts["leaderboard"] = {"metric": result.metric, "scored_on": "out-of-fold (training split)",
                                "time_limit": spec.time_limit, "seconds": round(result.seconds, 3),
                                "members": board}
    ctx.facts["members"] = [r.model for r in result.leaderboard if r.status == "fitted"]
    if ctx.artifacts_dir is not None:
        from pipeline.runs.store import atomic_write_json

        atomic_write_json(ctx.artifact_path("leaderboard.json"), ctx.facts["leaderboard"])
    return result.model
