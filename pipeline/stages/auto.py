"""``auto``: a portfolio of models fitted within a time limit by a plan, bagged where it pays, and blended.

One stage does what a data scientist does on a table nobody has tuned for: type the columns
(``pipeline.features.auto_ops``: selectors, no column names), fit each model of a portfolio
with defaults that hold up across tables (LightGBM, CatBoost, XGBoost, a random forest,
extra trees, the MLP, a linear model), bag the ones that earn weight on folds of the training
rows (so they have out-of-fold scores, and boosting early-stops on the fold it does not fit),
and blend the members with weights fitted on those out-of-fold scores (``ensemble``: the same
fit as the ``ensemble`` stage, never worse than the best member on the rows it was fitted on).
The result is a ``TrainedModel`` like any other: ``evaluate`` ranks it and ``export`` saves it
(an ensemble of bagged members, each in its own model's file format).

Time: ``time_limit`` is the stage's whole budget, spent by a plan made against the clock:

1. **Screen.** Each member, in the portfolio's order (the first cheap and strong: LightGBM),
   is fitted once on four fifths of the training rows and scored on the fifth it did not see
   (fold 0 of five, the holdout). Before it starts, its fit is projected: the member's
   measured relative ``cost`` times the median seconds per unit over the fits so far,
   re-estimated after each fit (the machine as it is, busy or idle). A member projected past
   the time left, or past a quarter of the limit, is skipped with the projection as its
   reason, and an MLP whose next epoch is projected past a quarter of the limit (or past the
   limit) ends there with its best epoch's weights. The first member always finishes.
2. **Bag what earns weight.** Weights are fitted on the holdout; the members with weight are
   bagged on the other four folds, heaviest first, fold by fold while each fold's projection
   (its own first fit's time) fits the time left. A member's first fit is its fold 0: no fit
   is thrown away.
3. **Spend what is left.** The second configurations (``extra`` members: a larger LightGBM, a
   LightGBM with randomised split points, a deeper XGBoost), the best model's first, are each
   tried while all five of their fits are projected to fit the time left: fitted on the
   holdout, blended there with the members bagged before, and bagged if they earn weight.
4. **Blend.** Weights are fitted again on the rows every member scored out of fold (every
   training row where all were bagged on five folds); members with weight 0 are left out of the
   model, so scoring it (``evaluate``, ``predict``) costs only what earns its place.

The plan's decisions, each with its projected and actual seconds, are the leaderboard's
``plan``. ``bag: k`` (or ``ensemble: stack``) fits every member on k folds in portfolio order
instead, as earlier versions did (without the second configurations, unless ``models:`` names
them); a member whose remaining folds would end past the limit is stopped. A member that cannot start (its library is not installed, or it has no estimator on
this device) is recorded as skipped with the reason. Every member uses every core (its
library's own threads) or the run's GPU where its library has a GPU build.

Columns: a categorical column of many levels is in the matrix twice (``default_ops``), as its
target encoding and as its codes; each member reads one of the two (``PortfolioMember.reads``:
CatBoost the codes, with ordered statistics of its own; the others the encoding), trained and
scored on a view of those columns, and the exported ensemble records each member's columns.

The portfolio is data in the registry: each entry's ``portfolio`` (``pipeline.models.roles.
PortfolioMember``: default parameters per task, relative cost, fitting rank); no model name
decides anything in the code below, and a plugin's model joins it from its own file.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field, field_validator

from pipeline.backends import is_partitioned
from pipeline.backends.headers import HeaderReader
from pipeline.core.errors import BackendUnavailable, ConfigError, ConfigIssue, DataError, UsageError
from pipeline.core.option_objects import Options
from pipeline.core.problems import Task
from pipeline.core.sizes import parse_duration
from pipeline.core.threads import available_cores, free_cores
from pipeline.features.auto_ops import default_ops, member_views
from pipeline.features.column_roles import ROLE_SAMPLE_ROWS, Column, left_out_columns
from pipeline.featuresets import FeatureSet
from pipeline.featuresets.feature_set import TRAIN
from pipeline.metrics import HIGHER_IS_BETTER, default_metric, task_metrics
from pipeline.models import MODELS, get_model_spec
from pipeline.models.registry import portfolio_members
from pipeline.models.roles import PortfolioMember
from pipeline.stages.ensemble import ensemble_model, fit_ensemble, fit_weights
from pipeline.stages.features import build_features
from pipeline.stages.spec import (
    ColumnRef, KeyPath, Preview, StageContext, StageSpec, only_input, register_stage, split_facts,
)
from pipeline.stages.split import SplitData
from pipeline.stages.train import TrainedModel, train_model
from pipeline.stages.training.bagging import FoldBag, bag_model

__all__ = ["AutoSpec", "AutoResult", "PortfolioMember", "fit_auto", "portfolio", "run_auto"]

VALID = "valid"


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
    bag: int | None = Field(
        None, ge=2, le=20, description="Fit every member on this many folds, in portfolio order, instead of the plan "
                                       "(each member once on a holdout, then the members that earn weight bagged "
                                       "on 5 folds while time is left).")
    ensemble: Literal["weighted", "stack"] = Field(
        "weighted", description="How members are combined: weighted (weights on the simplex fitted to the "
                                "out-of-fold scores) or stack (a meta-model bagged on them, as the stack stage; "
                                "every member is then bagged on bag folds, 5 by default).")
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
        problem = member_names_problem(models)
        if problem:
            raise ValueError(problem)
        return models

    def task_problems(self, task: str) -> list[tuple[KeyPath, str]]:
        """Listed members that cannot serve the split's task, and a list of which none can."""
        if self.models is None:
            return []
        serving = {m.label for m in portfolio_for(task, self.preset, self.models)}
        problems: list[tuple[KeyPath, str]] = [
            (("models", i), f"{name} cannot serve a {task} task" + ("" if serving else " (and no member listed can)"))
            for i, name in enumerate(self.models) if name not in serving]
        return problems

    def columns_read(self, inputs: Mapping[str, Preview], headers: HeaderReader) -> list[ColumnRef]:
        """``id``, in the split's table and not its target (a features input names its own id:
        refused at ``id``)."""
        if self.id is None:
            return []
        from pipeline.stages.features import id_column_ref

        (source,) = inputs.values() if len(inputs) == 1 else (Preview(),)
        return [id_column_ref(self.id, source)]

    def preview(self, stage: str, inputs: Mapping[str, Preview], headers: HeaderReader) -> Preview:
        (source,) = inputs.values() if len(inputs) == 1 else (Preview(),)
        return split_facts(source, features=source.features or stage)


def member_names_problem(models: Sequence[str] | None) -> str | None:
    """What is wrong with a ``models:`` list (None: nothing), the same for the YAML key and
    ``fit_auto``: a name that is not a portfolio member, an empty list, a name listed twice."""
    if models is None:
        return None
    known = [m.label for m in portfolio()]
    unknown = [m for m in models if m not in known]
    if unknown:
        return f"not in the portfolio: {', '.join(map(str, unknown))} (portfolio: {', '.join(known)})"
    if not models:
        return "models must name at least one portfolio member (or be left out)"
    twice = sorted({m for m in models if list(models).count(m) > 1})
    if twice:
        return f"names {', '.join(twice)} more than once; each member is fitted once: list it once"
    return None


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
    holdout: float | None = None      # planned: the score on fold 0's held-out rows (its first fit)
    folds: int = 0                    # folds fitted (its out-of-fold rows are theirs)
    # planned: the score on the training rows every fitted member scored out of fold, the
    # leaderboard's order (members bagged on fewer folds have out-of-fold scores on fewer rows,
    # and scores over other rows do not rank).
    shared: float | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"model": self.model, "status": self.status, "seconds": round(self.seconds, 3)}
        if self.folds:
            out["folds"] = self.folds
        for key in ("holdout", "oof", "shared", "valid"):
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
    plan: list[PlanStep] = field(default_factory=list)     # planned mode: each decision, in order
    mode: str = "planned"                                  # planned, or fixed (bag: k / stack)


@dataclass
class PlanStep:
    """One decision of the plan: a member's first fit (``screen``; ``extra`` for a second
    configuration tried with the time left), its other folds (``bag``), the blend; with the
    seconds it was projected to take and the seconds it took."""

    step: str
    model: str
    decision: str
    projected: float | None = None
    seconds: float | None = None
    threads: int | None = None          # the library's threads: the cores free when it started

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"step": self.step, "model": self.model, "decision": self.decision}
        for key in ("projected", "seconds"):
            value = getattr(self, key)
            if value is not None:
                out[f"{key}_seconds" if key == "projected" else key] = round(value, 3)
        if self.threads is not None:
            out["threads"] = self.threads
        return out


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
    cap: float = math.inf             # the member's own deadline (planned: a quarter of the limit)
    fold_started: float = 0.0

    def start_member(self, exempt: bool, seconds: float = math.inf) -> None:
        self.exempt, self.started, self.done = exempt, time.perf_counter(), 0
        self.cap = self.started + seconds

    def before_fold(self) -> None:
        now = time.perf_counter()
        self.fold_started = now
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

    def after_epoch(self, epoch: int) -> None:
        """For trainers that report as they go (the MLP, after each epoch): a fold past the
        stage's limit is stopped and dropped (``_OutOfTime``); one whose next epoch is projected
        (its epochs so far, on average) to end past the limit or past the member's own cap (a
        quarter of the limit) ends there, keeping its best epoch (``StopTraining``)."""
        if self.exempt:
            return
        from pipeline.tensors.fit_loop import StopTraining

        now = time.perf_counter()
        if now >= self.deadline:
            raise _OutOfTime("the time limit was reached while it trained")
        per_epoch = (now - self.fold_started) / max(epoch, 1)
        if now + per_epoch > min(self.deadline, self.cap):
            which = "the time limit" if self.deadline <= self.cap else "a quarter of the time limit"
            raise StopTraining(f"its next epoch (about {per_epoch:.1f}s) would end past {which}")

    def left(self) -> float:
        return self.deadline - time.perf_counter()


def _registry_trainer(features: FeatureSet, model: str, params: dict[str, Any] | None = None, *,
                      clock: _Clock | None = None, **kwargs: Any) -> TrainedModel:
    return train_model(features, model, params, **kwargs)


def _torch_trainer(features: FeatureSet, model: str, params: dict[str, Any] | None = None, *,
                   seed: int | None = 42, name: str | None = None, clock: _Clock | None = None,
                   **_: Any) -> TrainedModel:
    from pipeline.stages.torch_mlp import train_torch

    on_epoch = (lambda epoch, row: clock.after_epoch(epoch)) if clock is not None else None
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


def portfolio() -> list[PortfolioMember]:
    """The portfolio: every registered model's configurations (``ModelSpec.portfolio``: defaults
    that hold up across tables, the libraries' own well-tried settings with a learning rate low
    enough that early stopping on the held-out fold chooses the number of trees), in fitting
    order, read now so that a plugin's model is in it."""
    return portfolio_members()


def portfolio_for(task: str, preset: str, models: Sequence[str] | None = None) -> list[PortfolioMember]:
    """The members to fit for ``task``, in fitting order."""
    chosen = [m for m in portfolio() if task in m.tasks and m.model in MODELS]
    if models is not None:
        by_name = {m.label: m for m in chosen}
        return [dataclasses.replace(by_name[name], extra=False) for name in models if name in by_name]
    if preset == "quick":
        return [m for m in chosen if m.quick]
    return chosen


@dataclass(frozen=True)
class AutoOptions(Options):
    """How ``fit_auto`` fits: within ``time_limit`` seconds, the ``preset``'s members (or those
    named in ``models``), planned against the clock or every member on ``bag`` folds, blended
    (``ensemble``: weighted) or stacked, with ``seed``; ``name``: the stage's (in messages and
    the model's name)."""

    time_limit: float = 300.0
    preset: str = "auto"
    models: Sequence[str] | None = None
    bag: int | None = None
    ensemble: str = "weighted"
    seed: int = 42
    name: str = "auto"

    what: ClassVar[str] = "auto option"


def fit_auto(features: FeatureSet, options: AutoOptions | None = None, /, *,
             log: Callable[[str], None] | None = None, **changes: Any) -> AutoResult:
    """Fit the portfolio on ``features`` within ``time_limit`` seconds and blend it (see the
    module): planned against the clock, or every member on ``bag`` folds where ``bag`` is given
    (or the members are stacked). ``options`` (an ``AutoOptions``) or its fields by name
    (``changes``) say how; ``log`` receives the plan's lines.

    Examples:
        >>> from pipeline.stages import fit_auto
        >>> result = fit_auto(features, time_limit=30, models=["linear"])
        >>> result.mode, result.metric, [row.model for row in result.leaderboard]
        ('planned', 'roc_auc', ['linear'])
    """
    options = AutoOptions.build(options, **changes)
    time_limit, preset, models, bag = options.time_limit, options.preset, options.models, options.bag
    if isinstance(models, str):
        models = [models]
    problem = member_names_problem(models)
    if problem:
        raise UsageError(f"fit_auto models: {problem}")
    ensemble, seed, name = options.ensemble, options.seed, options.name
    started = time.perf_counter()
    features = features.in_memory("the auto stage bags its members on the training matrix in memory; load the "
                                  "data without partitioned: true")
    members = portfolio_for(features.task.kind, preset, models)
    if not members:
        raise ConfigError([ConfigIssue(f"stages.{name}.models",
                                       f"no portfolio member serves a {features.task.kind} task")])
    run = _Run(features, [m for m in members if not m.extra], time_limit=time_limit, seed=seed, name=name,
               log=log or (lambda _: None), started=started, extras=[m for m in members if m.extra])
    if bag is not None or ensemble == "stack":
        return run.fixed(bag or PLANNED_FOLDS, ensemble)
    return run.planned()


# Planned mode: folds of the training rows each member can be bagged on; fold 0 holds out a fifth
# of them, the rows every member's first fit is scored and the first blend is fitted on.
PLANNED_FOLDS = 5
# Share of the limit kept for the blend and the record, and the most a member's first fit may be
# projected (and allowed) to take: a member that earns no weight never costs more.
RESERVE = 0.05
FIRST_FIT_SHARE = 0.25


@dataclass
class _Run:
    """One auto fit: the members, the clock, the leaderboard and the plan."""

    features: FeatureSet
    members: list[PortfolioMember]
    time_limit: float
    seed: int
    name: str
    log: Callable[[str], None]
    started: float
    board: list[MemberRecord] = field(default_factory=list)
    plan: list[PlanStep] = field(default_factory=list)
    extras: list[PortfolioMember] = field(default_factory=list)     # planned mode, with the time left

    def __post_init__(self) -> None:
        self.task: Task = self.features.task
        self.metric = default_metric(self.task.kind)
        self.labels = np.asarray(self.features.labels(TRAIN))
        self.has_valid = bool(self.features.rows().get(VALID))
        self.clock = _Clock(deadline=self.started + self.time_limit, folds=1)
        self.views = member_views(self.features.feature_names, self.features.categorical_columns)
        self._viewed: dict[str, FeatureSet] = {}

    def _features(self, member: PortfolioMember) -> FeatureSet:
        """The columns ``member`` reads (a column of many levels as its encoding or its codes):
        one view per kind, made once, so the members of a kind share one copy of the matrix."""
        if member.reads not in self._viewed:
            self._viewed[member.reads] = self.features.matching(self.views[member.reads])
        return self._viewed[member.reads]

    # ---------------------------------------------------------------- planned
    def planned(self) -> AutoResult:
        """Fit each member once on fold 0 (the holdout), in portfolio order, while its projected
        fit fits the time left; blend on the holdout; bag the members with weight, heaviest
        first, fold by fold while time is left; try the second configurations with the time
        left; re-blend on the rows every member scored out of fold; leave weight-0 members out
        of the model."""
        bags: dict[str, FoldBag] = {}
        speeds: list[float] = []            # seconds per unit of cost, one per fit so far
        reserve = RESERVE * self.time_limit
        for member in self.members:
            bag = self._screen(member, speeds, reserve, first=not bags)
            if bag is not None:
                bags[member.label] = bag
        if not bags:
            self._none_fitted()
        first = self._weights(bags, list(bags))
        earning = [m for m in sorted(bags, key=lambda m: -first[m]) if first[m] > 0]
        for model in bags:
            if first[model] <= 0:
                self.plan.append(PlanStep("bag", model, "not bagged: weight 0 in the holdout blend"))
        for model in earning:
            self._bag(model, bags[model], reserve)
        earning += self._spend_time_left(bags, earning, speeds, reserve)
        final = self._weights(bags, earning)
        chosen = [m for m in bags if final.get(m, 0.0) > 0]        # in portfolio order
        models = {m: bag.model() for m, bag in bags.items()}
        blended = self._blend(bags, models, chosen, final)
        rows = "every training row" if all(bags[m].done == PLANNED_FOLDS for m in chosen) else "the rows all scored"
        self.plan.append(PlanStep("blend", self.name, f"weights on {rows} out of fold: "
                                  + ", ".join(f"{m} {final[m]:.3f}" for m in chosen)))
        shared = np.all([_has_score(bag.oof) for bag in bags.values()], axis=0)   # fold 0 at least
        for record in self.board:
            if record.model in bags:
                bag = bags[record.model]
                record.folds = bag.done
                record.seconds = bag.seconds
                record.oof = _metric(self.task, self.metric, *_scored_rows(self.labels, bag.oof))
                record.shared = _metric(self.task, self.metric, self.labels[shared], bag.oof[shared])
                record.weight = final.get(record.model, 0.0)
                if self.has_valid:
                    record.valid = _metric(self.task, self.metric, np.asarray(self.features.labels(VALID)),
                                           models[record.model].scores[VALID])
                if record.weight <= 0:
                    record.reason = "weight 0 in the blend: left out of the model"
        return self._result(blended, "planned")

    def _screen(self, member: PortfolioMember, speeds: list[float], reserve: float, *, first: bool = False,
                step: str = "screen", folds: int = 1) -> FoldBag | None:
        """``member``'s first fit, on fold 0 (the holdout), if its projection (``folds`` fits of
        it: the plan counts what it would spend) fits the time left and a first fit stays within a
        quarter of the limit; its FoldBag, or None (the leaderboard and the plan say why). The
        ``first`` member always finishes. Its measured speed joins ``speeds``."""
        record = self._record(member)
        if record.status != "fitted":
            self.plan.append(PlanStep(step, member.label, f"skipped: {record.reason}"))
            return None
        # The median: one member whose relative cost is off on this table moves it little.
        units = self._units(member)
        projected = statistics.median(speeds) * units if speeds else None
        if projected is not None:
            left = self.clock.left() - reserve
            reason = None
            if projected * folds > left:
                reason = (f"its first fit was projected at {projected:.1f}s with {max(left, 0.0):.1f}s left"
                          if folds == 1 else f"its {folds} fits were projected at {projected * folds:.1f}s with "
                                             f"{max(left, 0.0):.1f}s left")
            elif projected > FIRST_FIT_SHARE * self.time_limit:
                reason = (f"its first fit was projected at {projected:.1f}s, past a quarter of the "
                          f"{self.time_limit:g}s limit")
            if reason:
                record.status, record.reason = "skipped", reason
                self.plan.append(PlanStep(step, member.label, f"skipped: {reason}", projected))
                self.log(f"{member.label}: skipped ({reason})")
                return None
        self.clock.start_member(exempt=first, seconds=FIRST_FIT_SHARE * self.time_limit)
        params, threads = self._params(member)
        bag = FoldBag(self._features(member), member.model, params, k=PLANNED_FOLDS,
                      seed=self.seed, name=member.label, train=_timed(_TRAINERS[member.trainer], self.clock))
        seconds = self._fit_fold(bag, record)
        if seconds is None:
            self.plan.append(PlanStep(step, member.label, f"{record.status}: {record.reason}", projected,
                                      record.seconds))
            return None
        speeds.append(seconds / units)           # re-planned: the machine as it is now
        held = bag.held_out(0)
        record.holdout = _metric(self.task, self.metric, self.labels[held], bag.oof[held])
        self.plan.append(PlanStep(step, member.label, "fitted on the holdout", projected, seconds, threads))
        self.log(f"{member.label}: {self.metric} {record.holdout:.5f} on the holdout ({seconds:.1f}s)")
        return bag

    def _units(self, member: PortfolioMember) -> float:
        """``member``'s fit in units of the plan's speeds: its relative cost (on a GPU run, its
        ``device_cost``: the cost of the build that fits there), times the classes for a booster
        of a multiclass task (it grows a tree per class each round; the forests, the MLP and the
        linear model fit all classes at once)."""
        classes = self.task.n_outputs if self.task.kind == "multiclass" and member.per_class else 1
        on_device = self.features.backend.name != "cpu" and member.device_cost is not None
        return (member.device_cost if on_device else member.cost) * classes

    def _spend_time_left(self, bags: dict[str, FoldBag], earning: list[str], speeds: list[float],
                         reserve: float) -> list[str]:
        """The second configurations (``extras``), best model's first, each tried while its five
        fits are projected to fit the time left: fitted on the holdout, blended there with the
        members that earned weight, and bagged if it earns weight too. The ones bagged."""
        holdout = {r.model: r.holdout for r in self.board if r.holdout is not None}
        better = HIGHER_IS_BETTER[self.metric]

        def rank(member: PortfolioMember) -> float:
            score = holdout.get(member.model)
            return math.inf if score is None else -score if better else score

        added: list[str] = []
        for member in sorted(self.extras, key=rank):       # stable: portfolio order among equals
            bag = self._screen(member, speeds, reserve, step="extra", folds=PLANNED_FOLDS)
            if bag is None:
                continue
            bags[member.label] = bag
            weights = self._weights(bags, [*earning, *added, member.label])
            if weights[member.label] <= 0:
                self.plan.append(PlanStep("bag", member.label, "not bagged: weight 0 in the holdout blend with the "
                                                               "members bagged before it"))
                continue
            self._bag(member.label, bag, reserve)
            added.append(member.label)
        return added

    def _params(self, member: PortfolioMember) -> tuple[dict[str, Any], int | None]:
        """``member``'s parameters, with its library's threads (the registry entry's
        ``threads_param``) sized to the cores free now, on the CPU, unless the member's parameters
        set them: re-planned for each member as the stage goes. The threads, or None."""
        params = member.params_for(self.task.kind)
        if self.features.backend.name != "cpu" or member.model not in MODELS:
            return params, None
        name = get_model_spec(member.model).threads_param
        if name is None or name in params:
            return params, None
        threads = free_cores()
        if threads < available_cores():
            self.log(f"{member.label}: {threads} of {available_cores()} cores free: {threads} thread(s)")
        return {**params, name: threads}, threads

    def _fit_fold(self, bag: FoldBag, record: MemberRecord) -> float | None:
        """Fit ``bag``'s next fold; its seconds, or None (the record says why) when the clock
        stopped it or its library is missing."""
        try:
            return bag.fit_next()
        except _OutOfTime as exc:
            record.status, record.reason = "stopped", str(exc)
            record.seconds = time.perf_counter() - self.clock.started
        except BackendUnavailable as exc:
            record.status, record.reason = "skipped", _first_line(exc)
        self.log(f"{record.model}: {record.status} ({record.reason})")
        return None

    def _bag(self, model: str, bag: FoldBag, reserve: float) -> None:
        """Fit ``bag``'s other folds while each one's projection fits the time left."""
        per_fold = bag.seconds / bag.done
        projected = per_fold * (PLANNED_FOLDS - bag.done)
        spent = bag.seconds
        reason = ""
        while bag.done < PLANNED_FOLDS:
            left = self.clock.left() - reserve
            if per_fold > left:
                reason = f"its next fold was projected at {per_fold:.1f}s with {max(left, 0.0):.1f}s left"
                break
            self.clock.start_member(exempt=False)
            try:
                bag.fit_next()
            except _OutOfTime as exc:
                reason = str(exc)
                break
            per_fold = bag.seconds / bag.done
        actual = bag.seconds - spent
        done = f"bagged on {bag.done} of {PLANNED_FOLDS} folds"
        self.plan.append(PlanStep("bag", model, f"{done} ({reason})" if reason else done, projected, actual))
        self.log(f"{model}: {done}" + (f" ({reason})" if reason else ""))

    def _weights(self, bags: Mapping[str, FoldBag], names: list[str]) -> dict[str, float]:
        """Blend weights of ``names`` fitted on the training rows each of them scored out of fold."""
        if len(names) == 1:
            return {names[0]: 1.0}
        scored = np.all([_has_score(bags[n].oof) for n in names], axis=0)
        weights, _ = fit_weights(self.task, self.labels[scored], [bags[n].oof[scored] for n in names], names=names)
        return {n: float(w) for n, w in zip(names, weights)}

    def _blend(self, bags: Mapping[str, FoldBag], models: Mapping[str, TrainedModel], chosen: list[str],
               weights: Mapping[str, float]) -> TrainedModel:
        scored = np.all([_has_score(bags[m].oof) for m in chosen], axis=0)
        total = sum(weights[m] for m in chosen)
        blended = ensemble_model([models[m] for m in chosen], self.features,
                                 np.asarray([weights[m] / total for m in chosen]), name=self.name, fitted_on="oof" if scored.all() else "holdout",
                                 fit={"rows": int(scored.sum())})
        if blended.oof_scores is not None and not scored.all():
            # A partly bagged member has no out-of-fold score on some rows: a stage after this one
            # (stack, ensemble on oof) must not fit on them.
            blended = dataclasses.replace(blended, oof_scores=None)
        return blended

    # ---------------------------------------------------------------- fixed (bag: k, or a stack)
    def fixed(self, bag: int, ensemble: str) -> AutoResult:
        """Every member bagged on ``bag`` folds in portfolio order; a member whose remaining
        folds would end past the limit is stopped and left out."""
        clock = _Clock(deadline=self.started + self.time_limit, folds=bag)
        fitted: list[TrainedModel] = []
        for member in self.members:
            record = self._record(member)
            if record.status != "fitted":
                continue
            if fitted and clock.left() <= 0:
                record.status, record.reason = "skipped", "the time limit was reached before it started"
                continue
            clock.start_member(exempt=not fitted)
            member_started = time.perf_counter()
            try:
                trained = bag_model(self._features(member), member.model, self._params(member)[0], k=bag,
                                    seed=self.seed, name=member.label, train=_timed(_TRAINERS[member.trainer], clock))
            except _OutOfTime as exc:
                record.status, record.reason = "stopped", str(exc)
                record.seconds = time.perf_counter() - member_started
                self.log(f"{member.label}: stopped ({exc})")
                continue
            except BackendUnavailable as exc:
                record.status, record.reason = "skipped", _first_line(exc)
                self.log(f"{member.label}: skipped ({record.reason})")
                continue
            record.seconds = time.perf_counter() - member_started
            record.folds = bag
            record.oof = _metric(self.task, self.metric, self.labels, trained.oof_scores)
            if self.has_valid:
                record.valid = _metric(self.task, self.metric, np.asarray(self.features.labels(VALID)),
                                       trained.scores[VALID])
            fitted.append(trained)
            self.log(f"{member.label}: {self.metric} {record.oof:.5f} out of fold ({record.seconds:.1f}s)")
        if not fitted:
            self._none_fitted()
        if ensemble == "stack":
            from pipeline.stages.stack import fit_stack

            blended: TrainedModel = fit_stack(fitted, name=self.name, k=bag, seed=self.seed)
            weights = {m.name: 1.0 for m in fitted}
        else:
            blended = fit_ensemble(fitted, name=self.name, on="oof")
            weights = blended.weights
        for record in self.board:
            record.weight = weights.get(record.model, 0.0) if record.status == "fitted" else 0.0
        return self._result(blended, "fixed")

    # ---------------------------------------------------------------- shared
    def _record(self, member: PortfolioMember) -> MemberRecord:
        """The member's leaderboard row: skipped with the reason where it cannot be fitted here."""
        record = MemberRecord(member.label, "fitted", params=member.params_for(self.task.kind))
        self.board.append(record)
        problem = _cannot_fit(member.model, self.features)
        if problem:
            record.status, record.reason = "skipped", problem
            self.log(f"{member.label}: skipped ({problem})")
        return record

    def _none_fitted(self) -> None:
        reasons = "; ".join(f"{r.model}: {r.reason}" for r in self.board)
        raise DataError(f"auto: no portfolio member could be fitted ({reasons})")

    def _result(self, blended: TrainedModel, mode: str) -> AutoResult:
        better = HIGHER_IS_BETTER[self.metric]
        def score(record: MemberRecord) -> float | None:
            return record.shared if record.shared is not None else record.oof

        self.board.sort(key=lambda r: (r.status != "fitted", -(score(r) or 0.0) if better else (score(r) or math.inf)))
        seconds = time.perf_counter() - self.started
        # The whole stage is the blend's fit: what evaluate sizes its importance by (explain.FIT_SHARE).
        blended.fit_seconds = seconds
        return AutoResult(blended, self.metric, self.board, seconds, self.plan, mode)


def _has_score(scores: np.ndarray) -> np.ndarray:
    """Per row: whether ``scores`` (one row per training row, NaN where no fold held it out) has one."""
    finite = np.isfinite(scores)
    return finite.all(axis=1) if finite.ndim == 2 else finite


def _scored_rows(labels: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    rows = _has_score(scores)
    return labels[rows], scores[rows]


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
    """``metric`` of ``scores`` against ``labels`` (NaN without scores)."""
    if scores is None:
        return math.nan
    return float(task_metrics(task, labels, np.asarray(scores))[metric])


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _left_out(source: SplitData, *, keep: tuple[str, ...], seed: int) -> list[Column]:
    """The training split's identifiers, constants, likely leaks and free text, by the rule
    ``init`` uses (``pipeline.features.column_roles``), read from a bounded sample of rows."""
    frame = source.frames[TRAIN]
    if is_partitioned(frame):
        frame = frame.head(ROLE_SAMPLE_ROWS, npartitions=-1)
    elif len(frame) > ROLE_SAMPLE_ROWS:
        rows = np.random.default_rng(seed).choice(len(frame), ROLE_SAMPLE_ROWS, replace=False)
        frame = source.backend.take(frame, np.sort(rows))
    sample = source.backend.to_host(frame).sort_index(kind="stable").reset_index(drop=True)   # table order
    return left_out_columns(sample, source.target, source.task.kind, keep=keep)


def auto_uses(spec: AutoSpec) -> list[Any]:
    """The registry entries of the portfolio: their code is what the stage runs."""
    return [get_model_spec(m.model) for m in portfolio() if m.model in MODELS]


@register_stage("auto", AutoSpec, produces=TrainedModel, accepts=(SplitData, FeatureSet), resources=("gpu",),
                uses=auto_uses)
def run_auto(spec: AutoSpec, ctx: StageContext, inputs: Mapping[str, Any]) -> TrainedModel:
    source = only_input(inputs)
    if isinstance(source, SplitData):
        left_out = _left_out(source, keep=(spec.id,) if spec.id else (), seed=ctx.seed)
        for column in left_out:
            ctx.logger.info("%s: left out %s: %s (%s)%s", ctx.stage, column.name, column.role.replace("_", " "),
                            column.reason, "; set id: to write it beside predictions" if column.role == "identifier"
                            else "")
        ops = default_ops(source.task.kind)
        if left_out:
            ops = [{"drop": {"columns": [c.name for c in left_out]}}, *ops]
        features = build_features(source, ops, id_column=spec.id)
        ctx.facts.update(features.facts())
        ctx.facts["left_out"] = [{"column": c.name, "role": c.role, "reason": c.reason} for c in left_out]
        if ctx.artifacts_dir is not None:
            from pipeline.runs.store import atomic_write_json

            atomic_write_json(ctx.artifact_path("profile.json"), features.profile())
    else:
        if spec.id is not None:
            raise ConfigError([ConfigIssue(f"stages.{ctx.stage}.id", "id applies when the input is a split; the "
                                                                      "features stage names its own id column")])
        features = source
    options = AutoOptions(time_limit=spec.time_limit, preset=spec.preset, models=spec.models, bag=spec.bag,
                          ensemble=spec.ensemble, seed=ctx.seed, name=ctx.stage)
    result = fit_auto(features, options, log=lambda line: ctx.logger.info("%s: %s", ctx.stage, line))
    board = [r.to_dict() for r in result.leaderboard]
    ranked = ("shared: the rows every fitted member scored out of fold" if result.mode == "planned"
              else "oof: every training row, out of fold")
    ctx.facts["leaderboard"] = {"metric": result.metric, "scored_on": "out-of-fold (training split)",
                                "ranked_by": ranked,
                                "time_limit": spec.time_limit, "seconds": round(result.seconds, 3),
                                "mode": result.mode, "members": board,
                                "plan": [step.to_dict() for step in result.plan]}
    ctx.facts["members"] = [r.model for r in result.leaderboard if r.status == "fitted"]
    if ctx.artifacts_dir is not None:
        from pipeline.runs.store import atomic_write_json

        atomic_write_json(ctx.artifact_path("leaderboard.json"), ctx.facts["leaderboard"])
    return result.model
