"""``tune:``: search a model's hyperparameters with Optuna, then train the winner, if it won.

A ``train`` or ``torch`` stage with a ``tune:`` block runs trials before it trains: each trial
trains the model with the trial's params merged over the stage's own and is scored (``scoring``)
by cross-validation (the default of train stages: the mean over the split's ``folds:``, or
else over ``cv`` folds of the training and valid rows' feature matrices, ``MatrixFolds``) or
on the validation split (the torch stage's default). Trial 0 trains the stage's own params;
the best trial replaces them only when its mean per-fold gain over trial 0 is above
``gain_margin`` standard errors of those gains (``decide``), so a search that found only noise
changes nothing. The stage then trains the chosen params as it would train any params (on the
training split; with folds that is every non-test row), so the model it returns is an
ordinary ``TrainedModel`` that also carries the search (``TrainedModel.tuning``).

The search is Optuna's TPE sampler, seeded (``tune.seed``, default the run's seed), and every
trial trains with the run's seed, so a run repeated gives the same trials. Hopeless trials are
pruned by a median rule on what training reports as it goes: XGBoost's evaluation metric per
boosting round (a ``TrainingCallback``), the torch MLP's validation loss per epoch; other models
run every trial to the end. With folds, XGBoost's first fold decides; the MLP trains each fold
without a validation split (as the stage's cross-validation does), so it is not pruned there.
Trial 0 is never pruned (the decision needs its every fold).

Parallel: where the run has a Dask cluster (stages then run as tasks on its workers), trials run
in batches of ``parallel`` (default: one per worker): ``parallel`` trials are asked of the
sampler, each is a Dask task on the features scattered once, and the batch's results are told
back in trial order, so the trials depend on ``parallel`` but not on which worker finishes
first. Trials on workers are not pruned (their progress cannot reach the study while they
run); early stopping within a trial still applies. Without a cluster, trials run one after
another in this process.

The config block and the search are here; what a trial trains, how it reports for pruning and
where it runs are in ``pipeline.stages.training.trials``. Library use: ``tune_model(features,
RegistryTrainer(train_model, "xgboost", params), TuneSpec(...))``.
"""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
import difflib
import json
import logging
import time
import uuid
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np
from pydantic import (
    BaseModel, ConfigDict, Field, FiniteFloat, PositiveInt, field_validator, model_serializer, model_validator,
)

from pipeline.core.errors import ConfigError
from pipeline.core.interrupts import raise_if_stopped
from pipeline.core.seeds import SEED_LIMIT
from pipeline.featuresets import FeatureSet, InMemoryFeatures
from pipeline.featuresets.folds import MatrixFolds
from pipeline.hooks.protocol import elapsed
from pipeline.metrics import HIGHER_IS_BETTER, default_metric, metric_names
from pipeline.core.sizes import parse_duration
from pipeline.stages.spec import KeyPath, Preview, StageContext, StageProgress
from pipeline.stages.training.trials import (
    RegistryTrainer, TorchTrainer, Trainer, TrialPruner, trial_runner,
)

__all__ = ["ParamRange", "RegistryTrainer", "TorchTrainer", "TuneResult", "TuneSpec", "parse_duration", "run_search",
           "tune_model"]

SAMPLER = "TPE"
# Median pruning waits for this many finished trials before it compares anything.
PRUNER_STARTUP_TRIALS = 5
# Folds of the cross-validation trials are scored by, unless tune.cv says otherwise.
CV_FOLDS = 5
# The tuned params replace the stage's own only when their mean gain over trial 0 (the
# defaults) is above this many standard errors of the per-fold gains (tune.gain_margin).
GAIN_MARGIN = 1.0


# ------------------------------------------------------------------ the config block
class ParamRange(BaseModel):
    """One searched parameter, written ``{int: [low, high]}``, ``{float: [low, high]}`` (either
    with ``log: true`` or a ``step``) or ``{choice: [a, b, ...]}``. Bounds are inclusive."""

    model_config = ConfigDict(extra="forbid")

    # Named as users write them; the builtins are spelled out where the class body shadows them.
    int: tuple[builtins.int, builtins.int] | None = Field(None, description="Whole numbers from low to high.")
    float: tuple[FiniteFloat, FiniteFloat] | None = Field(None, description="Real numbers from low to high.")
    choice: list[Any] | None = Field(None, min_length=1, description="One of these values.")
    log: bool = Field(False, description="Sample on a log scale (low must be > 0): for learning rates, "
                                         "regularisation strengths and other scale-like params.")
    step: FiniteFloat | None = Field(None, gt=0, description="Only multiples of step above low.")

    @field_validator("int", "float", mode="before")
    @classmethod
    def _numbers_not_flags(cls, value: Any) -> Any:
        """``[true, 0.3]`` was read as ``[1.0, 0.3]``: a range's ends are numbers, not true/false."""
        if isinstance(value, (list, tuple)) and any(isinstance(end, bool) for end in value):
            raise ValueError(f"a range's ends are numbers, not true or false: {list(value)}")
        return value

    @model_validator(mode="after")
    def _one_kind(self) -> ParamRange:
        given = [name for name, value in (("int", self.int), ("float", self.float), ("choice", self.choice))
                 if value is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of int: [low, high], float: [low, high] or choice: [values]"
                             + (f" (got {' and '.join(given)})" if given else ""))
        if self.choice is not None:
            if self.log or self.step is not None:
                raise ValueError("log and step apply to int and float ranges, not to choice")
            return self
        low, high = self.int or self.float  # type: ignore[misc]
        if not low < high:
            raise ValueError(f"low must be below high (got [{low}, {high}])")
        if self.log and low <= 0:
            raise ValueError(f"log: true needs a low bound above 0 (got {low})")
        if self.log and self.step is not None:
            raise ValueError("log and step cannot be combined")
        if self.int is not None and self.step is not None:
            if self.step != int(self.step):
                raise ValueError(f"an int range's step must be a whole number (got {self.step})")
            if (high - low) % int(self.step):
                raise ValueError(f"step {int(self.step)} does not divide the range [{low}, {high}]")
        return self

    @model_serializer(mode="plain")
    def _as_written(self) -> dict[str, Any]:
        """The YAML form (``int: [...]``), so a resolved config loads again and hashes plainly."""
        if self.int is not None:
            out: dict[str, Any] = {"int": list(self.int)}
        elif self.float is not None:
            out = {"float": list(self.float)}
        else:
            out = {"choice": list(self.choice or [])}
        if self.log:
            out["log"] = True
        if self.step is not None:
            out["step"] = int(self.step) if self.int is not None else self.step
        return out

    # ------------------------------------------------------------ for the sampler
    @property
    def encodes_choices(self) -> bool:
        """Choices Optuna cannot hold as such (lists such as ``hidden: [64, 32]``) are sampled
        as their positions and decoded back."""
        return self.choice is not None and not all(
            value is None or isinstance(value, (bool, int, float, str)) for value in self.choice)

    def distribution(self) -> Any:
        from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

        if self.int is not None:
            return IntDistribution(self.int[0], self.int[1], log=self.log, step=int(self.step or 1))
        if self.float is not None:
            return FloatDistribution(self.float[0], self.float[1], log=self.log, step=self.step)
        choices = list(range(len(self.choice or []))) if self.encodes_choices else list(self.choice or [])
        return CategoricalDistribution(choices)

    def decode(self, value: Any) -> Any:
        return self.choice[value] if self.encodes_choices else value  # type: ignore[index]

    def values_to_check(self) -> list[Any]:
        """The values a config check tries against the parameter: the ends, or every choice."""
        if self.choice is not None:
            return list(self.choice)
        return list(self.int or self.float)  # type: ignore[arg-type]


class TuneSpec(BaseModel):
    """A ``tune:`` block: the search space, the budget and how trials are scored."""

    model_config = ConfigDict(extra="forbid")

    trials: PositiveInt | None = Field(None, description="How many trials to run (with timeout: whichever ends first).")
    timeout: float | None = Field(
        None, description="Stop starting trials after this long: seconds, or 90s, 10m, 1h. The trials then running "
                          "finish.")
    metric: str | None = Field(
        None, description="Metric a trial is scored by, on the validation split or as the folds' mean; its "
                          "direction is known. Default per task: roc_auc (binary), log_loss (multiclass), "
                          "rmse (regression).")
    space: dict[str, ParamRange] = Field(
        ..., min_length=1,
        description="Parameter -> {int: [low, high]} | {float: [low, high], log: true} | {choice: [values]}; "
                    "each trial's values are merged over the stage's own params.")
    seed: int | None = Field(None, ge=0, lt=SEED_LIMIT,
                             description="Seed of the sampler and the folds, 0 to 2**32 - 1 (default: the run's seed).")
    parallel: PositiveInt | None = Field(
        None, description="Trials run at once, as Dask tasks, when the run has a cluster (default: one per "
                          "worker). Trials are asked in batches of this size, so it shapes which trials run.")
    pruning: bool = Field(True, description="Stop hopeless trials early (median rule over XGBoost rounds or "
                                            "torch epochs; not for trials on Dask workers).")
    scoring: Literal["cv", "valid"] | None = Field(
        None, description="How a trial is scored: cv (the mean over k folds of the non-test rows: the split's "
                          "folds: when it has them, else folds over the training and valid rows' feature matrix) "
                          "or valid (the valid split alone: fast, but params picked on one small split fit that "
                          "split). Default: cv for train stages; for torch stages valid, or cv when the split "
                          "has no valid rows.")
    cv: int = Field(CV_FOLDS, ge=2, le=100, description="Folds of scoring: cv when the split has no folds: of its "
                                                       "own, 2 to 100 (the split's folds: win when it has them).")
    gain_margin: float = Field(
        GAIN_MARGIN, ge=0, allow_inf_nan=False,
        description="Trial 0 trains the stage's own params; the best trial replaces them only when its mean gain "
                    "over trial 0 is above gain_margin standard errors of the per-fold gains (0: any gain). "
                    "With scoring: valid there is one score and no spread: any gain wins.")

    @field_validator("timeout", mode="before")
    @classmethod
    def _duration(cls, value: object) -> float | None:
        return None if value is None else parse_duration(value)

    @field_validator("metric")
    @classmethod
    def _known_metric(cls, metric: str | None) -> str | None:
        if metric is not None and metric not in HIGHER_IS_BETTER:
            known = sorted(HIGHER_IS_BETTER)
            close = difflib.get_close_matches(metric, known, n=1)
            hint = f"; did you mean '{close[0]}'?" if close else f" (known: {', '.join(known)})"
            raise ValueError(f"unknown metric '{metric}'{hint}")
        return metric

    @model_validator(mode="after")
    def _budget(self) -> TuneSpec:
        if self.trials is None and self.timeout is None:
            raise ValueError("give trials:, timeout: or both: the search needs a budget")
        return self

    def unknown_params(self, allowed: Sequence[str], owner: str) -> list[str]:
        """Problems naming each ``space`` key that is not a parameter of ``owner``."""
        problems = []
        for key in self.space:
            if key not in allowed:
                close = difflib.get_close_matches(key, list(allowed), n=1)
                hint = f"; did you mean '{close[0]}'?" if close else f"; known: {', '.join(sorted(allowed))}"
                problems.append(f"space.{key}: unknown parameter '{key}' for {owner}{hint}")
        return problems

    def value_problems(self, problem: Callable[[str, Any], str | None]) -> list[str]:
        """Problems naming each ``space`` key whose range ends (or choices) ``problem`` refuses."""
        problems = []
        for key, entry in self.space.items():
            for value in entry.values_to_check():
                why = problem(key, value)
                if why:
                    problems.append(f"space.{key}: {value!r} is not a valid {key}: {why}")
                    break
        return problems

    def distributions(self) -> dict[str, Any]:
        return {name: entry.distribution() for name, entry in self.space.items()}

    def decode(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """A trial's sampled values as the params a stage takes (in ``space`` order)."""
        return {name: self.space[name].decode(params[name]) for name in self.space if name in params}



# ------------------------------------------------------------------ the search
@dataclass
class TrialRecord:
    number: int
    params: dict[str, Any]
    value: float | None
    state: str
    seconds: float
    note: str | None = None
    worker: str | None = None
    folds: list[float] | None = None      # each fold's value (scoring: cv), when COMPLETE

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["seconds"] = round(self.seconds, 3)
        for optional in ("note", "worker", "folds"):
            if out[optional] is None:
                del out[optional]
        return out


@dataclass
class TuneResult:
    """A finished search: every trial, the best, trial 0 (the stage's own params: the
    baseline) and the one the stage trains (``chosen``: the best when it beat the baseline by
    more than the margin, else the baseline). ``TrainedModel.tuning`` is ``to_dict``."""

    metric: str
    direction: str
    trials: list[TrialRecord]
    best: TrialRecord
    seed: int
    parallel: int
    where: str
    pruning: str
    seconds: float
    folds: int = 0
    sampler: str = SAMPLER
    space: dict[str, Any] = field(default_factory=dict)
    scoring: str = "valid"
    scored_on: str = "valid split"
    baseline: TrialRecord | None = None
    chosen: TrialRecord | None = None
    gain: float | None = None             # mean per-fold gain of the best over the baseline (>0: better)
    spread: float | None = None           # standard error of the per-fold gains (0 with one score)
    margin: float = GAIN_MARGIN

    @property
    def best_params(self) -> dict[str, Any]:
        """The best-scoring trial's params (see ``chosen_params`` for what the stage trains)."""
        return dict(self.best.params)

    @property
    def chosen_params(self) -> dict[str, Any]:
        """The params the stage trains: the best trial's, or the baseline's when it was kept."""
        return dict((self.chosen or self.best).params)

    @property
    def kept_defaults(self) -> bool:
        return self.baseline is not None and self.chosen is self.baseline

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for trial in self.trials:
            out[trial.state.lower()] = out.get(trial.state.lower(), 0) + 1
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric, "direction": self.direction, "best_params": self.best_params,
            "best_value": self.best.value, "best_trial": self.best.number,
            "trials": [t.to_dict() for t in self.trials], "sampler": self.sampler, "seed": self.seed,
            "scoring": self.scoring, "scored_on": self.scored_on,
            "parallel": self.parallel, "where": self.where, "pruning": self.pruning,
            "seconds": round(self.seconds, 3), "space": self.space,
            "baseline": None if self.baseline is None else {
                "trial": self.baseline.number, "params": self.baseline.params, "value": self.baseline.value,
                "folds": self.baseline.folds},
            "winner_folds": self.best.folds, "gain": self.gain, "spread": self.spread, "margin": self.margin,
            "kept_defaults": self.kept_defaults,
            "chosen_trial": (self.chosen or self.best).number, "chosen_params": self.chosen_params,
        }

    def summary(self) -> dict[str, Any]:
        """What the stage's facts keep (the run record); the trials are in tuning.csv too."""
        out = self.to_dict()
        out["counts"] = self.counts()
        return out

    def table(self) -> str:
        """Every trial as CSV: number, state, value, seconds, one column per param, each fold's
        value (a JSON list), note."""
        import csv
        import io

        names = list(self.space)
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(["number", "state", self.metric, "seconds", *names, "folds", "note"])
        for t in self.trials:
            values = [json.dumps(t.params[n]) if isinstance(t.params.get(n), (list, dict)) else t.params.get(n)
                      for n in names]
            writer.writerow([t.number, t.state, "" if t.value is None else repr(t.value), round(t.seconds, 3),
                             *values, json.dumps(t.folds) if t.folds else "", t.note or ""])
        return buffer.getvalue()

    def best_line(self) -> str:
        params = ", ".join(f"{k}={_short(v)}" for k, v in self.best.params.items()) or "the stage's own params"
        counts = ", ".join(f"{n} {state}" for state, n in self.counts().items())
        line = (f"tune: best trial #{self.best.number} of {len(self.trials)} ({counts}): "
                f"{self.metric} {self.best.value:.6g} with {params}")
        return line + "; " + self.decision_line()

    def decision_line(self) -> str:
        """What the stage trains, and why: the gain over trial 0 against its spread."""
        if self.baseline is None or self.gain is None:
            return "the stage's own params failed as trial 0, so the best trial is trained"
        if self.best is self.baseline:
            return "trial 0 (the stage's own params) scored best: they are kept"
        against = f"{self.margin:g} x spread {self.spread:.3g}" if self.spread else "no spread (one score)"
        verdict = "the stage's own params are kept" if self.kept_defaults else "the best trial's params are trained"
        return f"gain over trial 0 (the stage's own params) {self.gain:+.3g} against {against}: {verdict}"


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


NO_VALIDATION_ROWS = ("trials are scored on validation rows (scoring: valid) and this split has none: set "
                      "valid: (e.g. 0.1) on the split stage, or score by cross-validation (scoring: cv)")


def tune_problems(tune: TuneSpec | None, inputs: Mapping[str, Preview]) -> list[tuple[KeyPath, str]]:
    """A ``tune:`` with ``scoring: valid`` whose split has no validation rows, found before the
    run (a model stage's ``preview_problems``): the search would stop there. (A stage's default
    scoring never needs them: it falls back to cross-validation.)"""
    previews = list(inputs.values())
    if tune is None or len(previews) != 1 or tune.scoring != "valid":
        return []
    if previews[0].valid is False:
        return [(("tune",), NO_VALIDATION_ROWS)]
    return []


def resolved_scoring(spec: TuneSpec, default: str, features: FeatureSet) -> tuple[str, str]:
    """How trials are scored, and a note when the stage's default gave way: ``tune.scoring``
    as given; else the stage's default ("cv" for train stages, "valid" for torch), except that
    a default of valid without validation rows is cv (the split's folds, as before), and a
    default of cv on partitioned features without folds is valid (no matrix to fold)."""
    if spec.scoring is not None:
        return spec.scoring, ""
    if default == "valid" and not features.rows().get("valid"):
        return "cv", ""
    if default == "cv" and not features.fold_count() \
            and (features.distributed or not isinstance(features, InMemoryFeatures)):
        return "valid", " (partitioned features: cross-validation needs the split's folds:)"
    return default, ""


def scoring_features(features: FeatureSet, scoring: str, folds: int, seed: int) -> tuple[FeatureSet, str]:
    """The features trials are scored on, and how (for the record): with ``cv``, the split's
    folds when it has them, else ``folds`` seeded folds over the training and valid rows'
    matrices (``MatrixFolds``); with ``valid``, the valid split."""
    if scoring == "valid":
        if not features.rows().get("valid"):
            raise ConfigError(f"tune: {NO_VALIDATION_ROWS}")
        return features, "valid split"
    if features.fold_count():
        return features, f"mean of {features.fold_count()} folds (the split's folds: each refits the features)"
    if features.distributed or not isinstance(features, InMemoryFeatures):
        raise ConfigError("tune: scoring: cv on partitioned features needs the split's folds:, which need the "
                          "table in memory; set tune.scoring: valid (and valid: on the split) to score trials on "
                          "the valid split")
    source = MatrixFolds.of_features(features, folds, seed=seed)
    pooled = "training and valid rows" if features.rows().get("valid") else "training rows"
    view = dataclasses.replace(features, folds=source, uid=uuid.uuid4().hex)
    return view, (f"mean of {source.count} folds over the {pooled} "
                  "(feature matrix; the features were fitted on the training split)")


def tune_model(features: FeatureSet, trainer: Trainer, spec: TuneSpec, *, seed: int = 42,
               progress: StageProgress | None = None) -> TuneResult:
    """Search ``spec.space`` for ``trainer``'s model on ``features``; returns every trial, the
    best, and the params to train (the caller trains them). Trial 0 trains the stage's own
    params; the best trial replaces them only when it beats them by more than the margin
    (``decide``). ``seed``: the sampler's and the folds', unless ``spec.seed``."""
    from optuna.trial import TrialState

    metric, maximize = _metric(spec, features)
    seed = spec.seed if spec.seed is not None else seed
    scoring, fallback = resolved_scoring(spec, getattr(trainer, "default_scoring", "cv"), features)
    scored, scored_on = scoring_features(features, scoring, spec.cv, seed)
    scored_on += fallback
    folds = scored.fold_count()
    distributions = spec.distributions()
    baseline_values = _baseline_values(spec, getattr(trainer, "params", {}) or {})
    started = time.perf_counter()
    records: list[TrialRecord] = []
    failures: list[BaseException] = []
    # A bar over the planned trials (none for a search bounded only by tune.timeout).
    bar = progress.bar(spec.trials, "tuning trials") if progress is not None and spec.trials \
        else contextlib.nullcontext(lambda n: None)
    with _quiet_optuna(), trial_runner(spec.parallel, scored) as runner, bar as advance:
        pruning = _pruning_description(spec, trainer, scored, runner, folds)
        prunes = spec.pruning and runner.prunes
        study = _study(maximize, seed, prunes, trainer.warmup_steps)
        if baseline_values is not None:          # trial 0 is the defaults, and the sampler learns from it
            study.enqueue_trial(baseline_values)
        while _budget_left(spec, len(records), started):
            raise_if_stopped()                   # a stop a library swallowed in the last trial
            size = runner.parallel if spec.trials is None else min(runner.parallel, spec.trials - len(records))
            first = not records
            # Defaults the space cannot hold (or does not cover) run as trial 0 outside the study.
            outside = first and baseline_values is None
            asked = [None if outside and i == 0 else study.ask(distributions) for i in range(size)]
            batch = [(len(records) + i, spec.decode(trial.params) if trial is not None else {})
                     for i, trial in enumerate(asked)]
            pruners = [TrialPruner(trial, maximize) if prunes and trial is not None and not (first and i == 0)
                       else None for i, trial in enumerate(asked)]
            for (number, params), trial, outcome in zip(batch, asked, runner.run(trainer, metric, batch, pruners)):
                if trial is not None:
                    study.tell(trial, outcome.value if outcome.state == "COMPLETE" else None,
                               state=getattr(TrialState, outcome.state))
                shown = params if number or trial is not None else _covered(spec, trainer)
                note = outcome.note if number else "; ".join(filter(None, [BASELINE_NOTE, outcome.note]))
                records.append(TrialRecord(number, shown, outcome.value, outcome.state, outcome.seconds,
                                           note, outcome.worker if runner.remote else None, outcome.folds))
                if outcome.error is not None:
                    failures.append(outcome.error)
                _report_trial(progress, records, metric, maximize, spec.trials, time.perf_counter() - started)
                advance(1)
    complete = [r for r in records if r.state == "COMPLETE"]
    if not complete:
        _no_trial_finished(records, failures)
    failed = [r for r in records if r.state == "FAIL"]
    if failed:        # a search that went on past failures says so, not only in the trials' lines
        logging.getLogger("pipeline").warning(
            "tune: %d of %d trials failed (the first, trial %d: %s); the search went on without them",
            len(failed), len(records), failed[0].number, failed[0].note or "no reason recorded")
    best = _best(complete, maximize)
    baseline = records[0] if records[0].state == "COMPLETE" else None
    chosen, gain, spread = decide(best, baseline, maximize, spec.gain_margin)
    return TuneResult(metric=metric, direction="maximize" if maximize else "minimize", trials=records, best=best,
                      seed=seed, parallel=runner.parallel, where=runner.where, pruning=pruning,
                      seconds=time.perf_counter() - started, folds=folds,
                      space={k: v.model_dump() for k, v in spec.space.items()}, scoring=scoring,
                      scored_on=scored_on, baseline=baseline, chosen=chosen, gain=gain, spread=spread,
                      margin=spec.gain_margin)


BASELINE_NOTE = "trial 0: the stage's own params"


def decide(best: TrialRecord, baseline: TrialRecord | None, maximize: bool,
           margin: float) -> tuple[TrialRecord, float | None, float | None]:
    """(the trial to train, the mean gain, its spread). The gain is the mean over the folds of
    (best - baseline), turned so that positive is better; the spread is the standard error of
    those per-fold gains (sample standard deviation / sqrt(k): the folds are paired, so what
    both trials find hard cancels out), 0 with a single score. The best replaces the baseline
    only when gain > margin x spread. Without a baseline (it failed) the best is trained."""
    if baseline is None or not baseline.folds or not best.folds:
        return best, None, None
    if best is baseline:
        return baseline, 0.0, 0.0
    sign = 1.0 if maximize else -1.0
    gains = sign * (np.asarray(best.folds, dtype="float64") - np.asarray(baseline.folds, dtype="float64"))
    gain = float(gains.mean())
    spread = float(gains.std(ddof=1) / np.sqrt(len(gains))) if len(gains) > 1 else 0.0
    return (best if gain > margin * spread else baseline), gain, spread


def _covered(spec: TuneSpec, trainer: Trainer) -> dict[str, Any]:
    """The stage's own values of the searched params (those it sets), for trial 0's record."""
    own = getattr(trainer, "params", {}) or {}
    return {name: own[name] for name in spec.space if name in own}


def _baseline_values(spec: TuneSpec, own: Mapping[str, Any]) -> dict[str, Any] | None:
    """The stage's own params as the sampler's values of every searched param (choices as
    their positions where encoded), or None when it does not set one of them or one lies
    outside the space: then trial 0 runs outside the study."""
    values: dict[str, Any] = {}
    for name, entry in spec.space.items():
        if name not in own:
            return None
        value = own[name]
        if entry.encodes_choices:
            if value not in (entry.choice or []):
                return None
            value = (entry.choice or []).index(value)
        distribution = entry.distribution()
        try:
            inside = distribution._contains(distribution.to_internal_repr(value))
        except Exception:  # noqa: BLE001 - a value of another type (a string for a float range): outside
            inside = False
        if not inside:
            return None
        values[name] = value
    return values


def _metric(spec: TuneSpec, features: FeatureSet) -> tuple[str, bool]:
    task = features.task
    metric = spec.metric or default_metric(task.kind)
    if metric not in metric_names(task.kind):
        raise ConfigError(f"tune.metric: '{metric}' does not apply to {task.describe()}; use one of "
                          f"{', '.join(metric_names(task.kind))}")
    return metric, bool(HIGHER_IS_BETTER[metric])


def _budget_left(spec: TuneSpec, done: int, started: float) -> bool:
    if spec.trials is not None and done >= spec.trials:
        return False
    return spec.timeout is None or time.perf_counter() - started < spec.timeout


def _study(maximize: bool, seed: int, pruning: bool, warmup_steps: int) -> Any:
    """TPE, seeded, with the settings spelled out: Optuna 5 made multivariate TPE and the
    constant liar (asked trials count as running, so a batch spreads out) its defaults, 4.x
    had neither; naming them keeps the trials the same on both."""
    import optuna

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)   # 4.x: both were experimental
        sampler = optuna.samplers.TPESampler(seed=seed, multivariate=True, constant_liar=True)
    pruner = optuna.pruners.MedianPruner(n_startup_trials=PRUNER_STARTUP_TRIALS, n_warmup_steps=warmup_steps) \
        if pruning else optuna.pruners.NopPruner()
    return optuna.create_study(direction="maximize" if maximize else "minimize", sampler=sampler, pruner=pruner)


@contextlib.contextmanager
def _quiet_optuna() -> Iterator[None]:
    """Optuna logs every trial at INFO; the stage reports them itself."""
    import optuna

    before = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        yield
    finally:
        optuna.logging.set_verbosity(before)


def _pruning_description(spec: TuneSpec, trainer: Trainer, features: FeatureSet, runner: Any, folds: int) -> str:
    if not spec.pruning:
        return "off (tune.pruning: false)"
    if not runner.prunes:
        return "off: trials on Dask workers are not pruned (early stopping within a trial still applies)"
    if features.distributed:
        return "off: each trial is a distributed fit, whose rounds run on the workers"
    signal = trainer.pruning_signal(features)
    if signal is None:
        return ("none: nothing reports a validation score while it trains here (XGBoost's rounds and the torch "
                "MLP's epochs on a valid split do); every trial runs to the end")
    return f"median rule on {signal}" + (" (the first fold's)" if folds else "")


def _best(complete: list[TrialRecord], maximize: bool) -> TrialRecord:
    """The best value; among equals, the earliest trial (as Optuna picks)."""
    best = complete[0]
    for record in complete[1:]:
        assert record.value is not None and best.value is not None
        if (record.value > best.value) if maximize else (record.value < best.value):
            best = record
    return best


def _report_trial(progress: StageProgress | None, records: list[TrialRecord], metric: str, maximize: bool,
                  planned: int | None, seconds: float = 0.0) -> None:
    if progress is None:
        return
    record = records[-1]
    of = f"/{planned}" if planned else ""
    shown = f"{metric} {record.value:.6g}" if record.value is not None else record.state.lower()
    complete = [r for r in records if r.state == "COMPLETE"]
    best = f" (best {_best(complete, maximize).value:.6g})" if complete else ""
    note = f": {record.note}" if record.note and record.state == "FAIL" else ""
    progress.message(f"trial {record.number + 1}{of}: {shown}{best} in {record.seconds:.1f}s{note} "
                     f"({elapsed(seconds)} elapsed)")
    report_metrics = getattr(progress, "metrics", None)      # a caller's own progress may lack it
    if record.value is not None and report_metrics is not None:
        report_metrics(record.number, {metric: record.value})


def _no_trial_finished(records: list[TrialRecord], failures: list[BaseException]) -> None:
    """Every trial failed (or was pruned): the first failure, with how many, is the error."""
    if failures:
        first = failures[0]
        if hasattr(first, "add_note"):
            first.add_note(f"tune: every one of the {len(records)} trials failed; this is the first failure")
        raise first
    notes = "; ".join(sorted({r.note or r.state for r in records}))
    raise ValueError(f"tune: none of the {len(records)} trials finished ({notes})")


# ------------------------------------------------------------------ inside a stage
def run_search(spec: TuneSpec, trainer: Trainer, features: FeatureSet, ctx: StageContext) -> TuneResult:
    """``tune`` for a stage: progress to the stage's, then the record (facts, tuning.csv,
    tuning.json, the
    best trial in the log)."""
    result = tune_model(features, trainer, spec, seed=ctx.seed, progress=ctx.progress)
    ctx.facts["tuning"] = result.summary()
    if ctx.artifacts_dir is not None:
        from pipeline.runs.store import atomic_write_json, atomic_write_text

        atomic_write_text(ctx.artifact_path("tuning.csv"), result.table())
        atomic_write_json(ctx.artifact_path("tuning.json"), result.to_dict())     # the decision and every fold
    if ctx.progress is not None:
        ctx.progress.message(result.best_line())
    return result
