"""``ensemble``: a weighted average of trained models' scores, a model like any other.

The weights are a distribution (non-negative, summing to 1) fitted to minimise the task's
loss (log loss for binary and multiclass, mean squared error for regression) on rows no
member was trained on: the valid split, or, without one, the members' out-of-fold scores of
the training split (``folds:`` on the split). Both losses are convex in the weights, so
SLSQP on the simplex finds the best blend; the fit then keeps the best single member instead
if that is at least as good (rounding), so the ensemble never does worse than its best member
on the rows it was fitted on. ``weights:`` fixes them instead.

The result is an ``EnsembleModel`` (a ``TrainedModel``): its scores per split are the weighted
average of its members' (computed on first read, like theirs), so ``evaluate`` ranks it and
``export`` saves it (``pipeline.models.blending``: every member in its own format).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Field, ValidationInfo, field_validator

from pipeline.models.registry import ENSEMBLE_MODEL
from pipeline.backends.headers import HeaderReader
from pipeline.core.errors import DataError
from pipeline.featuresets import FeatureSet
from pipeline.featuresets.feature_set import TRAIN
from pipeline.models.blending import Ensemble, EnsembleMember, blend
from pipeline.stages.spec import KeyPath, Preview, StageContext, StageSpec, register_stage
from pipeline.stages.train import SplitScores, TrainedModel
from pipeline.stages.training.trained import refuse_repeated_names
from pipeline.core.problems import Task

VALID = "valid"
# Probabilities are clipped this far from 0 before the log (a member sure of the wrong class).
_EPS = 1e-15
# Fitted weights below this are rounding left by the solver: set to 0 (the member is not scored).
_ZERO = 1e-9
ON_VALID_NEEDS_VALID = "ensemble: on: valid needs a valid split; set valid: > 0 on the split stage"


def mixed_features(sources: Mapping[str, Any], kind: str = "ensemble") -> str | None:
    """The message when the models (name -> the features it was trained on) do not share one
    feature set, which a ``kind`` stage that lines their rows up needs (averaging scores, one
    predictions table); None when they do."""
    first = next(iter(sources.values()))
    others = [name for name, source in sources.items() if source != first]
    if not others:
        return None
    same = [name for name, source in sources.items() if source == first]
    return (f"{kind}: all models must be trained on the same features stage; {', '.join(others)} "
            f"read other features than {', '.join(same)}")


def no_held_out_rows(which: str = "") -> str:
    return ("ensemble needs rows its members were not trained on to fit the weights: valid: > 0 on "
            f"the split stage (a valid split), or folds: there (out-of-fold scores{which}), or bag: on "
            "each input's train stage; or give fixed weights:")


def on_oof_needs_oof(without: Sequence[str], members: int, *, valid: bool | None = None) -> str:
    """``on: oof`` over members of which ``without`` have no out-of-fold scores: what gives
    them, and ``on: valid`` when the split has valid rows (no refit needed)."""
    which = ("the members have none" if len(without) == members
             else f"{', '.join(without)} {'has' if len(without) == 1 else 'have'} none")
    instead = "; or on: valid to fit them on the split's valid rows" if valid else ""
    return (f"ensemble: on: oof fits the weights on the members' out-of-fold scores, and {which}: set folds: on "
            f"the split stage, or bag: on each input's train stage{instead}; or give fixed weights:")


class EnsembleSpec(StageSpec):
    kind: Literal["ensemble"]
    on: Literal["auto", "valid", "oof"] = Field(
        "auto", description="Rows the weights are fitted on: valid (the valid split), oof (the members' "
                            "out-of-fold scores; needs folds: on the split or bag: on every input) or auto (valid when the split "
                            "has valid rows, else oof).")
    weights: dict[str, Annotated[float, Field(ge=0, allow_inf_nan=False)]] | None = Field(
        None, description="Fixed weights per input model (relative: scaled to sum to 1) instead of fitted ones.")
    min_inputs = 2

    def preview(self, stage: str, inputs: Mapping[str, Preview], headers: HeaderReader) -> Preview:
        """Its members' features and split, when they share them; out-of-fold scores when every
        member has them (the blend of theirs)."""
        oof = [p.oof for p in inputs.values()]
        previews = [dataclasses.replace(p, oof=None) for p in inputs.values()]
        if not previews or any(p != previews[0] for p in previews[1:]):
            return Preview()
        return dataclasses.replace(previews[0], oof=None if None in oof else all(oof))

    def preview_problems(self, inputs: Mapping[str, Preview]) -> list[tuple[KeyPath, str]]:
        """Members from different features stages; no rows to fit the weights on."""
        sources = {name: p.features for name, p in inputs.items()}
        if not sources or None in sources.values():
            return []
        mixed = mixed_features(sources)
        if mixed:
            shown = ", ".join(f"{name}: {source}" for name, source in sources.items())
            return [(("inputs",), f"{mixed} (features stages: {shown})")]
        first = next(iter(inputs.values()))
        if self.weights is not None or first.valid is None or first.folds is None:
            return []
        if self.on == VALID and not first.valid:
            return [(("on",), ON_VALID_NEEDS_VALID)]
        every_oof = all(p.oof for p in inputs.values())     # bag: on each input gives them too
        if first.folds or every_oof:
            return []
        if self.on == "oof":
            without = [name for name, p in inputs.items() if not p.oof]
            return [(("on",), on_oof_needs_oof(without, len(inputs), valid=first.valid))]
        return [(("inputs",), no_held_out_rows())] if self.on == "auto" and not first.valid else []

    @field_validator("weights")
    @classmethod
    def _weights_name_the_inputs(cls, weights: dict[str, float] | None,
                                 info: ValidationInfo) -> dict[str, float] | None:
        if weights is None:
            return weights
        inputs = info.data.get("inputs") or []
        unknown, missing = sorted(set(weights) - set(inputs)), sorted(set(inputs) - set(weights))
        if unknown or missing:
            raise ValueError("weights must name each input once: "
                             + "; ".join(([f"not an input: {', '.join(unknown)}"] if unknown else [])
                                         + ([f"no weight for: {', '.join(missing)}"] if missing else [])))
        if not sum(weights.values()) > 0:
            raise ValueError("weights must not all be 0")
        return weights


@dataclass
class EnsembleScorer:
    """One split's ensemble scores from the members' kept scores, or from ``scorers`` (one per
    member) for rows the members have not scored; a class, not a closure: models pickle."""

    members: list[TrainedModel]
    weights: list[float]
    scorers: list[Any] | None = None

    def __call__(self, split: str) -> np.ndarray:
        used = [(i, w) for i, w in enumerate(self.weights) if w > 0]
        scores = [self.scorers[i](split) if self.scorers else self.members[i].scores[split] for i, _ in used]
        return blend(scores, [w for _, w in used])


@dataclass
class EnsembleModel(TrainedModel):
    """A ``TrainedModel`` whose estimator is an ``Ensemble`` of other trained models."""

    members: list[TrainedModel] = field(default_factory=list)
    weights: dict[str, float] = field(default_factory=dict)
    # valid, oof or fixed; and the losses of the fit (``weights.json``).
    fitted_on: str = "fixed"
    fit_record: dict[str, Any] = field(default_factory=dict)

    def export_meta(self) -> dict[str, Any]:
        """The weights, and what scoring the members needs (an MLP's categorical columns)."""
        meta: dict[str, Any] = {"members": [m.name for m in self.members], "weights": self.weights,
                                "fitted_on": self.fitted_on}
        return {**meta, **members_codes(self.members, self.features)}

    def scorer_for(self, features: FeatureSet) -> Any:
        return EnsembleScorer(self.members, list(self.weights.values()),
                              [m.scorer_for(features) for m in self.members])

    def scoring_cost(self) -> int:
        """The members the blend scores (those of weight 0 are not)."""
        return sum(m.scoring_cost() for m, w in zip(self.members, self.weights.values()) if w > 0) or 1


def fit_ensemble(models: Sequence[TrainedModel], *, name: str = ENSEMBLE_MODEL, on: str = "auto",
                 weights: Mapping[str, float] | None = None) -> EnsembleModel:
    """The weighted average of ``models`` (trained on one feature set), with weights fitted on
    the rows ``on`` says (``auto``, ``valid`` or ``oof``) or the given relative ``weights``
    (per model name).

    Examples:
        >>> from pipeline.stages import bag_model, fit_ensemble
        >>> members = [bag_model(features, "logistic_regression", {"max_iter": 1000}, k=3),
        ...            bag_model(features, "random_forest", {"n_estimators": 50}, k=3)]
        >>> blend = fit_ensemble(members)
        >>> sorted(blend.weights), round(sum(blend.weights.values()), 6)
        (['logistic_regression', 'random_forest'], 1.0)
    """
    models = list(models)
    features = one_features(models)
    if weights is not None:
        chosen, fit = _fixed_weights(models, weights), {}
        fitted_on = "fixed"
    else:
        fitted_on, labels, scores = _fit_rows(models, features, on)
        chosen, fit = fit_weights(features.task, labels, scores, names=[m.name for m in models])
    return ensemble_model(models, features, chosen, name=name, fitted_on=fitted_on, fit=fit)


def ensemble_model(models: list[TrainedModel], features: FeatureSet, chosen: np.ndarray, *, name: str,
                   fitted_on: str, fit: dict[str, Any]) -> EnsembleModel:
    """The ensemble of ``models`` with the weights ``chosen`` (one per model, summing to 1),
    fitted on the rows ``fitted_on`` names (``fit``: the record of that fit)."""
    from pipeline.stages.training.trained import model_meta     # where export takes it from too

    weights = [float(w) for w in chosen]
    estimator = Ensemble([EnsembleMember(m.name, m.model, m.estimator, w, {**model_meta(m), **m.export_meta()})
                          for m, w in zip(models, weights)], task=features.task)
    used = [(m, w) for m, w in zip(models, weights) if w > 0]
    oof = None
    if all(m.oof_scores is not None for m, _ in used):
        oof = blend([np.asarray(m.oof_scores) for m, _ in used], [w for _, w in used])
    by_name = {m.name: w for m, w in zip(models, weights)}
    return EnsembleModel(
        name=name, model=ENSEMBLE_MODEL, estimator=estimator, features=features,
        scores=SplitScores(EnsembleScorer(models, weights), features),
        params={"weights": by_name, "on": fitted_on}, oof_scores=oof,
        members=models, weights=by_name, fitted_on=fitted_on, fit_record=fit,
    )


def members_codes(members: Sequence[TrainedModel], features: FeatureSet) -> dict[str, Any]:
    """model.json's ``categorical_columns`` of a model of ``members`` on ``features``: the code
    matrix scoring builds beside the matrix when a member reads codes (an MLP's embeddings),
    all of the features' categorical columns (a member that reads some of the columns takes
    its own from them); nothing when none does."""
    if any(m.export_meta().get("categorical_columns") for m in members):
        return {"categorical_columns": list(features.categorical_columns)}
    return {}


def one_features(models: list[TrainedModel], kind: str = "ensemble") -> FeatureSet:
    """The one feature set every member was trained on: blending or stacking scores needs the
    same rows (``kind`` names the stage kind in messages)."""
    refuse_repeated_names(models, kind)
    mixed = mixed_features({m.name: m.features.uid for m in models})
    if mixed:
        raise DataError(kind + mixed.removeprefix("ensemble"))
    return models[0].features.whole         # a member may read some of the columns (a view)


def _fixed_weights(models: list[TrainedModel], weights: Mapping[str, float]) -> np.ndarray:
    names = [m.name for m in models]
    missing = [n for n in names if n not in weights]
    unknown = sorted(set(weights) - set(names))
    if missing or unknown:
        raise DataError(f"ensemble: weights must name each model once (models: {', '.join(names)}; "
                        f"missing: {', '.join(missing) or '-'}; unknown: {', '.join(unknown) or '-'})")
    given = np.asarray([float(weights[n]) for n in names], dtype="float64")
    if not np.isfinite(given).all() or (given < 0).any() or not given.sum() > 0:
        raise DataError(f"ensemble: weights must be non-negative numbers, not all 0 (got {dict(weights)})")
    return given / given.sum()


def _fit_rows(models: list[TrainedModel], features: FeatureSet, on: str) -> tuple[str, np.ndarray, list[np.ndarray]]:
    """Where the weights are fitted: (valid or oof, the true labels, each member's scores)."""
    has_valid = bool(features.rows().get(VALID))
    if on == VALID or (on == "auto" and has_valid):
        if not has_valid:
            raise DataError(ON_VALID_NEEDS_VALID)
        return VALID, features.labels(VALID), [np.asarray(m.scores[VALID]) for m in models]
    without = [m.name for m in models if m.oof_scores is None]
    if without:
        if on == "oof":
            raise DataError(on_oof_needs_oof(without, len(models), valid=has_valid))
        which = f" ({', '.join(without)} have none)" if len(without) < len(models) else ""
        raise DataError(no_held_out_rows(which))
    labels = features.labels(TRAIN)
    scores = [np.asarray(m.oof_scores) for m in models]
    wrong = [m.name for m, s in zip(models, scores) if len(s) != len(labels)]
    if wrong:
        raise DataError(f"ensemble: out-of-fold scores of {', '.join(wrong)} do not cover the training split's "
                        f"{len(labels)} rows")
    # Rows some member has no out-of-fold score for (the oldest block of an order_by split,
    # never scored) are left out of the fit, as the stack leaves them out.
    scored = np.all([np.isfinite(s.reshape(len(labels), -1)).all(axis=1) for s in scores], axis=0)
    if not scored.any():
        raise DataError(f"ensemble: no training row has an out-of-fold score from every member "
                        f"({', '.join(m.name for m in models)})")
    if not scored.all():
        labels, scores = np.asarray(labels)[scored], [s.reshape(len(scored), -1)[scored].reshape(-1, *s.shape[1:])
                                                        for s in scores]
    return "oof", labels, scores


# ------------------------------------------------------------------ the fit
def fit_weights(task: Task, labels: np.ndarray, scores: Sequence[np.ndarray], *,
                names: Sequence[str] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
    """Weights on the simplex minimising ``task``'s loss of the blend of ``scores`` against
    ``labels``; and a record of the fit (the loss of the blend and of each member alone)."""
    names = list(names or [f"model_{i}" for i in range(len(scores))])
    loss = _Loss.of(task, labels, scores, names)
    weights = _solve(loss) if len(scores) > 1 else np.ones(1)
    singles = np.eye(len(scores))
    single_losses = [loss.value(w) for w in singles]
    best = int(np.argmin(single_losses))
    if not loss.value(weights) < single_losses[best]:      # a solver's rounding: never worse than the best member
        weights = singles[best]
    return weights, {
        "loss": loss.name, "rows": int(len(labels)), "ensemble_loss": loss.value(weights),
        "member_loss": {name: value for name, value in zip(names, single_losses)},
    }


@dataclass
class _Loss:
    """The task's loss of a blend and its gradient in the weights.

    Binary and multiclass log loss only read the probability each member gave the true
    outcome (``-mean log(T @ w)``); squared error reads the predictions (``mean((S @ w - y)^2)``,
    divided by the variance of ``y`` so the solver's tolerances mean the same at any scale).
    """

    name: str
    matrix: np.ndarray               # n x members: probabilities of the truth, or predictions
    target: np.ndarray | None = None  # regression: the true values
    scale: float = 1.0

    @classmethod
    def of(cls, task: Task, labels: np.ndarray, scores: Sequence[np.ndarray], names: list[str]) -> _Loss:
        arrays = [np.asarray(s, dtype="float64") for s in scores]
        bad = [name for name, a in zip(names, arrays) if not np.isfinite(a).all()]
        if bad:
            raise DataError(f"ensemble: {', '.join(bad)} scored values that are not finite numbers; "
                            "their weights cannot be fitted")
        labels = np.asarray(labels)
        if task.kind == "regression":
            target = labels.astype("float64")
            return cls("mse", np.column_stack([a.reshape(-1) for a in arrays]), target,
                       max(float(np.var(target)), 1e-12))
        if task.kind == "multiclass":
            rows, codes = np.arange(len(labels)), labels.astype("int64")
            truth = [a.reshape(len(labels), -1)[rows, codes] for a in arrays]
        else:
            positive = labels.astype("int64") == 1
            truth = [np.where(positive, a.reshape(-1), 1.0 - a.reshape(-1)) for a in arrays]
        return cls("log_loss", np.column_stack(truth))

    def value(self, weights: np.ndarray) -> float:
        blended = self.matrix @ weights
        if self.target is not None:
            return float(np.mean((blended - self.target) ** 2))
        return float(-np.mean(np.log(np.clip(blended, _EPS, 1.0))))

    def objective(self, weights: np.ndarray) -> tuple[float, np.ndarray]:
        """The scaled loss and its gradient (what the solver minimises)."""
        blended = self.matrix @ weights
        n = len(blended)
        if self.target is not None:
            residual = blended - self.target
            return (float(np.mean(residual ** 2)) / self.scale,
                    (2.0 / n) * (self.matrix.T @ residual) / self.scale)
        clipped = np.clip(blended, _EPS, 1.0)
        return float(-np.mean(np.log(clipped))), -(self.matrix.T @ (1.0 / clipped)) / n


def _solve(loss: _Loss) -> np.ndarray:
    """SLSQP from equal weights, on [0, 1] per weight with the weights summing to 1."""
    from scipy.optimize import minimize

    count = loss.matrix.shape[1]
    result = minimize(loss.objective, np.full(count, 1.0 / count), jac=True, method="SLSQP",
                      bounds=[(0.0, 1.0)] * count,
                      constraints=[{"type": "eq", "fun": lambda w: float(np.sum(w) - 1.0),
                                    "jac": lambda w: np.ones_like(w)}],
                      options={"ftol": 1e-12, "maxiter": 500})
    weights = np.clip(np.asarray(result.x, dtype="float64"), 0.0, None)
    weights[weights < _ZERO] = 0.0
    if not weights.sum() > 0 or not np.isfinite(weights).all():
        return np.full(count, 1.0 / count)
    return weights / weights.sum()


# ------------------------------------------------------------------ the stage
@register_stage("ensemble", EnsembleSpec, produces=EnsembleModel, accepts=(TrainedModel,))
def run_ensemble(spec: EnsembleSpec, ctx: StageContext, inputs: Mapping[str, TrainedModel]) -> EnsembleModel:
    # Fixed weights name the input stages; the models carry their own names.
    weights = None if spec.weights is None else {inputs[k].name: w for k, w in spec.weights.items()}
    model = fit_ensemble(list(inputs.values()), name=ctx.stage, on=spec.on, weights=weights)
    ctx.facts["weights"] = {k: round(v, 6) for k, v in model.weights.items()}
    ctx.facts["fitted_on"] = model.fitted_on
    fit = model.fit_record
    if fit:
        ctx.facts["loss"] = {"name": fit["loss"], "ensemble": _rounded(fit["ensemble_loss"]),
                             "best_member": _rounded(min(fit["member_loss"].values()))}
    if ctx.artifacts_dir is not None:
        from pipeline.runs.store import atomic_write_json

        atomic_write_json(ctx.artifact_path("weights.json"),
                          {"weights": model.weights, "fitted_on": model.fitted_on, **fit})
    ctx.logger.info("%s: weights %s (fitted on %s)", ctx.stage,
                    ", ".join(f"{k} {v:.3f}" for k, v in model.weights.items()), model.fitted_on)
    return model


def _rounded(value: float) -> float:
    return round(value, 6) if math.isfinite(value) else value
