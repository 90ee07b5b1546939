"""Steps a fit reports while it runs (XGBoost's and LightGBM's boosting rounds), named by a registry entry
(``ModelSpec.fit_steps``), so ``train`` shows a bar for any model that has steps without
naming one; and the metric a fit reports each step for tuning to prune a trial on
(``ModelSpec.pruning``), so tuning prunes any model whose entry says how, without naming one.

A ``FitSteps`` says how many steps the fit plans and which constructor keyword arguments
attach a callback that calls ``advance(1)`` after each; ``train`` takes those arguments off
the fitted estimator again, so what is cached, pickled to a Dask worker or exported never
holds the run's progress display.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

Advance = Callable[[int], None]


@dataclass(frozen=True)
class FitSteps:
    """A fit's planned steps: ``total``, a ``description`` for the bar, and ``attach(advance)``:
    the constructor keyword arguments that report each step."""

    total: int
    description: str
    attach: Callable[[Advance], dict[str, Any]]


StepsOf = Callable[[Mapping[str, Any]], "FitSteps | None"]

# XGBoost's n_estimators when none is given (xgboost.sklearn's default).
XGBOOST_DEFAULT_ROUNDS = 100


def xgboost_rounds(kwargs: Mapping[str, Any]) -> FitSteps | None:
    """One step per boosting round, through an ``xgboost.callback.TrainingCallback``; the
    planned total is ``n_estimators`` (early stopping may end the fit before it)."""
    rounds = kwargs.get("n_estimators")
    total = int(rounds) if isinstance(rounds, int) and rounds > 0 else XGBOOST_DEFAULT_ROUNDS

    def attach(advance: Advance) -> dict[str, Any]:
        import xgboost

        class EachRound(xgboost.callback.TrainingCallback):
            def after_iteration(self, model: Any, epoch: int, evals_log: Any) -> bool:
                advance(1)
                return False

        return {"callbacks": [*(kwargs.get("callbacks") or []), EachRound()]}

    return FitSteps(total=total, description="boosting rounds", attach=attach)


# LightGBM's n_estimators when none is given (lightgbm.sklearn's default).
LIGHTGBM_DEFAULT_ROUNDS = 100


@dataclass(eq=False)
class EachLightGBMRound:
    """A LightGBM callback (called with the training environment after each round) that
    advances the bar by one. Hashed by identity: LightGBM keeps its callbacks in a set."""

    advance: Advance

    def __call__(self, env: Any) -> None:
        self.advance(1)


def lightgbm_rounds(kwargs: Mapping[str, Any]) -> FitSteps | None:
    """One step per boosting round, through the estimator's ``step_callbacks``
    (``pipeline.models.lightgbm_estimators``), which its ``fit`` adds to LightGBM's callbacks."""
    rounds = kwargs.get("n_estimators")
    total = int(rounds) if isinstance(rounds, int) and rounds > 0 else LIGHTGBM_DEFAULT_ROUNDS

    def attach(advance: Advance) -> dict[str, Any]:
        return {"step_callbacks": [EachLightGBMRound(advance)]}

    return FitSteps(total=total, description="boosting rounds", attach=attach)


# ------------------------------------------------------------------ pruning a tuning trial
# Called with a step's validation value, ``report(step, value, higher_is_better=...)``; it raises
# (optuna.TrialPruned) to stop the fit.
StepReport = Callable[..., None]


@dataclass(frozen=True)
class Pruning:
    """How a tuning trial of a model is pruned while it fits: ``attach(report)`` gives the
    constructor keyword arguments that call ``report`` with the validation metric after each
    step; ``signal`` says what is reported (the trial's log names it)."""

    signal: str
    attach: Callable[[StepReport], dict[str, Any]]


# XGBoost metrics where a higher value is better (the rest are losses and errors).
XGBOOST_HIGHER = frozenset({"auc", "aucpr", "map", "ndcg", "pre", "interval-regression-accuracy"})


def xgboost_metric_each_round(report: StepReport) -> dict[str, Any]:
    """An ``xgboost.callback.TrainingCallback`` that reports the last evaluation metric on the
    last evaluation set (the one early stopping watches) after every round."""
    import xgboost

    class ReportEachRound(xgboost.callback.TrainingCallback):
        def after_iteration(self, model: Any, epoch: int, evals_log: dict[str, dict[str, list[Any]]]) -> bool:
            if evals_log:
                metrics = evals_log[list(evals_log)[-1]]
                name = list(metrics)[-1]
                value = metrics[name][-1]
                value = value[0] if isinstance(value, tuple) else value        # xgboost.cv: (mean, std)
                report(epoch, float(value), higher_is_better=name.split("@")[0] in XGBOOST_HIGHER)
            return False

    return {"callbacks": [ReportEachRound()]}


XGBOOST_PRUNING = Pruning("the evaluation metric of each XGBoost boosting round", xgboost_metric_each_round)
