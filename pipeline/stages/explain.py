"""Which features each model leans on, for ``evaluate``'s importance.json and the report.

Two kinds, on a sample of the evaluated split whose size is bounded (the cost does not grow
with the table, nor with its classes and columns):

- permutation importance, for every model that scores in memory: how much the ranking metric
  worsens when one feature's values are shuffled (mean and std over ``repeats`` shuffles). It
  asks nothing of the model, so every model (an MLP, an ensemble) is measured the same way;
- what a registry entry explains natively (``ModelSpec.explain``): XGBoost's gain and mean
  absolute SHAP contribution (``pred_contribs``, XGBoost's own TreeSHAP, on either device).

Shuffles run on the run's device (NumPy or CuPy indexing of the sample's matrix), so a GPU
model is scored on GPU data; only the sample's metrics come to the host.

The budget: permutation importance scores one copy of the sample per feature and repeat, so its
work is rows x outputs x (features x repeats + 1) predicted rows (outputs: the classes of a
multiclass model, whose boosters grow a tree per class and round). A model's shuffled copies
score at most ``SCORED_ROWS`` such row-outputs: the sample shrinks to fit (5,000 rows of a
binary table of 40 features would be 605,000 rows scored, as much as predicting a 600k-row
test split; the budget keeps 2,066 rows), down to ``MIN_SAMPLE_ROWS``, and past that fewer
features are permuted (ranked as below). A model that runs several fitted estimators per row
(a bag, an ensemble, a stack: ``TrainedModel.scoring_cost``) gets the budget divided by their
number, so its importance costs about what a single model's does (``model_budgets`` records
it). SHAP (TreeSHAP costs about a tree walk per leaf and depth per row and output) runs on at
most ``NATIVE_ROW_OUTPUTS`` row-outputs (1,000 rows of a binary model; 1,000 / 7 = 142 of a
7-class one, raised to ``MIN_SAMPLE_ROWS``, 200). importance.json records the rows each kind
used and the rows scored (``rows``, ``native_rows``, ``scored_rows``), and the
evaluate stage's facts repeat them (``explained``).

Wide tables: every shuffle scores a full copy of the sample, so the work grows with rows x
columns x columns. Shuffled copies are scored in batches of at most ``BATCH_BYTES`` (not a
row count, which at 10,000 columns meant 8 GB per batch), and a model is permuted on at most
``PERMUTATION_CELLS`` cells in all: past that, the features are ranked by how strongly the
model's own score on the sample follows each of them (absolute correlation, one pass) and only
the top ones are permuted. importance.json's ``permuted`` says, per model, how many features
were measured of how many and how they were chosen; the others have no permutation value.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import numpy as np

from pipeline.core.errors import DataError
from pipeline.core.option_objects import Options
from pipeline.featuresets.in_memory import InMemoryFeatures, stride
from pipeline.metrics import HIGHER_IS_BETTER, task_metrics
from pipeline.models import get_model_spec
from pipeline.stages.spec import StageProgress
from pipeline.stages.train import TrainedModel

# Rows of the evaluated split the importances are measured on (at most), and shuffles per feature.
IMPORTANCE_ROWS = 5_000
REPEATS = 3
# Rows x outputs the shuffled copies (and the unshuffled sample) of one model's permutation
# importance score in all, at most: the sample shrinks to fit, then the features permuted.
SCORED_ROWS = 250_000
# Rows x outputs a model's own explainer (XGBoost's TreeSHAP) runs on, at most.
NATIVE_ROW_OUTPUTS = 1_000
# Rows a sample keeps whatever the budgets (fewer only when the split has fewer).
MIN_SAMPLE_ROWS = 200
SAMPLE = "sample"
# Rows of shuffled copies scored in one call, at most, and bytes (rows x columns x itemsize).
BATCH_ROWS = 200_000
BATCH_BYTES = 256 * 2**20
# Cells (rows x columns) of shuffled copies one model's permutation importance scores in all,
# at most: 5,000 rows x 60 features x 3 repeats is 2.7M; 300 x 10,000 x 10,000 x 3 would be 90G.
PERMUTATION_CELLS = 1_000_000_000
# Features permuted whatever the budget (a model's top few are what a reader looks at).
MIN_PERMUTED = 10
# Rows a sample keeps when even the floors above cost more than the time cap allows.
MIN_TIMED_ROWS = 50
# A model's permutation importance may take this share of its fit's seconds, and at least
# FLOOR_SECONDS (a model fitted in 50 ms is still explained in full): the unshuffled sample's
# scoring is timed, and the features permuted are cut to what that rate affords.
FIT_SHARE = 0.05
FLOOR_SECONDS = 2.0
RANKED_BY = ("absolute correlation of the feature with the model's score (log-odds) on the training rows "
             "(on the evaluated split's sample when the model has no training rows)")
# What a model that cannot score rows other than its own (a plugin's, holding only its scores)
# raises: its importances are skipped and the evaluation goes on.
UNSCORABLE = (AttributeError, TypeError, ValueError, NotImplementedError)


@dataclass(frozen=True)
class ImportanceBudget(Options):
    """What explaining a model may cost: the permutation sample's ``rows`` at most, its
    ``repeats`` and ``seed``; ``max_cells`` (rows x columns of shuffled copies) and ``budget``
    (rows x outputs scored in all) per model; ``native_budget`` (rows x outputs of a model's own
    explainer); ``batch_bytes`` of shuffled copies scored in one call; ``seconds``: the time one
    model's shuffles may take, at the rate its unshuffled sample scored (None: no time cap;
    ``explain_models`` sets it from each model's fit, ``FIT_SHARE``).

    Examples:
        >>> from pipeline.stages.explain import ImportanceBudget
        >>> ImportanceBudget(rows=400).replace(repeats=1).repeats
        1
    """

    rows: int = IMPORTANCE_ROWS
    repeats: int = REPEATS
    seed: int = 0
    max_cells: int = PERMUTATION_CELLS
    budget: int = SCORED_ROWS
    native_budget: int = NATIVE_ROW_OUTPUTS
    batch_bytes: int = BATCH_BYTES
    seconds: float | None = None

    what: ClassVar[str] = "importance budget"


def explain_models(models: list[TrainedModel], limits: ImportanceBudget | None = None, /, *, split: str, metric: str,
                   threshold: float, progress: StageProgress | None = None, **changes: Any) -> dict[str, Any]:
    """importance.json: per model, ``permutation`` (``mean``/``std`` per feature) and any native
    importances, each ordered most important first; ``rows``: the permutation sample's rows per
    model (the native one's where there is no permutation), ``native_rows``: the native
    explainer's, ``scored_rows``: the rows permutation importance scored in all (each row
    counts once per output); ``budgets``: the caps they were held to (see the module doc);
    ``skipped`` says why a kind is missing; ``permuted``: for a model whose features did not
    all fit ``max_cells`` or ``budget``, which were permuted. ``limits`` (an ``ImportanceBudget``)
    or its fields by name (``changes``) bound the cost."""
    limits = ImportanceBudget.build(limits, **changes)
    rows, repeats, budget, native_budget = limits.rows, limits.repeats, limits.budget, limits.native_budget
    out: dict[str, Any] = {"split": split, "metric": metric, "repeats": repeats, "rows": {}, "native_rows": {},
                           "scored_rows": {}, "budgets": {"scored_rows": budget, "native_row_outputs": native_budget,
                                                          "min_sample_rows": MIN_SAMPLE_ROWS, "max_rows": rows},
                           "models": {}, "skipped": {}, "permuted": {}}
    for model in models:
        entry: dict[str, Any] = {}
        cost = max(1, int(model.scoring_cost()))
        if cost > 1:            # a bag or an ensemble scores every member: the budget is the rows' share
            out.setdefault("model_budgets", {})[model.name] = {"estimators": cost, "scored_rows": budget // cost}
        own = limits.replace(budget=max(1, budget // cost), seconds=time_cap(model, limits.seconds))
        try:
            entry["permutation"] = permutation_importance(model, own, split=split, metric=metric,
                                                          threshold=threshold, progress=progress)
            out["rows"][model.name] = entry["permutation"].pop("rows")
            out["scored_rows"][model.name] = entry["permutation"].pop("scored_rows")
            chosen = entry["permutation"].pop("permuted")
            if chosen["features"] < chosen["of"] or "time" in chosen:
                out["permuted"][model.name] = chosen
        except DataError as exc:
            out["skipped"][model.name] = str(exc)
        except UNSCORABLE as exc:
            out["skipped"][model.name] = f"it could not score other rows ({type(exc).__name__}: {exc})"
        try:
            native, used = native_importance(model, split=split, rows=native_rows(rows, model.task.n_outputs,
                                                                                  native_budget))
            entry.update(native)
            if native:
                out["native_rows"][model.name] = used
                out["rows"].setdefault(model.name, used)
        except UNSCORABLE as exc:
            out["skipped"].setdefault(model.name, f"its own importances failed ({type(exc).__name__}: {exc})")
        if entry:
            out["models"][model.name] = entry
    return out


def permutation_importance(model: TrainedModel, limits: ImportanceBudget | None = None, /, *, split: str,
                           metric: str, threshold: float, progress: StageProgress | None = None,
                           **changes: Any) -> dict[str, Any]:
    """The metric's loss per shuffled feature (positive: the model needs it). The shuffled
    copies are scored in batches of at most ``BATCH_ROWS`` rows and ``batch_bytes``: one call
    per batch (each returns every class's scores) rather than one per shuffle, which is most of
    the cost for a model with a fixed overhead per call, with memory bounded however wide the
    table. The sample has at most ``rows`` rows, fewer where ``budget`` (rows x outputs scored
    in all) asks; features past ``max_cells`` or ``budget`` are not permuted (``permuted`` says
    which were measured); ``scored_rows`` counts what was scored, each row once per output."""
    limits = ImportanceBudget.build(limits, **changes)
    rows, repeats, seed, max_cells, budget = limits.rows, limits.repeats, limits.seed, limits.max_cells, limits.budget
    batch_bytes = limits.batch_bytes
    features = model.features.in_memory(
        "permutation importance scores a sample in memory; models trained on partitioned data score "
        "through the cluster")
    outputs = features.task.n_outputs
    width = len(features.feature_names)
    sample = strided_sample(features, split, sample_rows(rows, width, repeats, outputs, budget))
    labels, task, n = sample.labels(SAMPLE), sample.task, sample.rows()[SAMPLE]
    sign = 1.0 if HIGHER_IS_BETTER[metric] else -1.0

    def metric_of(scores: np.ndarray) -> float:
        return task_metrics(task, labels, scores, threshold=threshold)[metric]

    timed = time.perf_counter()
    base_scores = model.scorer_for(sample)(SAMPLE)
    took = time.perf_counter() - timed
    budget = affordable(budget, limits.seconds, took, n, outputs)
    scored = n
    base = metric_of(base_scores)
    names = list(sample.feature_names)
    x = sample.X[SAMPLE]
    chosen = list(range(len(names)))
    if permuted_count(n, len(names), repeats, max_cells, outputs=outputs, budget=budget) < len(names):
        # Ranked on the training rows where there are any: more rows than the evaluated split's
        # sample (60 rows of a 300-row table) make a steadier ranking, for one scoring pass that
        # takes at most a quarter of the budget.
        screen = (strided_sample(features, "train", min(rows, max(MIN_SAMPLE_ROWS, budget // (4 * outputs))))
                  if features.rows().get("train") else sample)
        screen_scores = base_scores if screen is sample else model.scorer_for(screen)(SAMPLE)
        scored += 0 if screen is sample else screen.rows()[SAMPLE]
        chosen = permuted_features(screen.X[SAMPLE], log_odds(screen_scores, task.kind), repeats=repeats,
                                   max_cells=max_cells, rows=n, outputs=outputs,
                                   budget=max(0, budget - (scored - n) * outputs))
    planned = (n, repeats)                                     # what the features permuted were counted for
    cut = within_seconds(limits.seconds, took / n, time.perf_counter() - timed, len(chosen), repeats, n)
    if cut is not None:
        # The floors (MIN_PERMUTED features, MIN_SAMPLE_ROWS rows, the repeats) still cost more
        # than the time allows: fewer shuffles per feature, then fewer rows of the sample.
        repeats, kept = cut
        if kept < n:
            step = stride(n, kept)
            sample = strided_sample(sample, SAMPLE, kept)
            n = sample.rows()[SAMPLE]                     # every step-th row: up to ``kept``
            base_scores = base_scores[::step][:n]
            labels = sample.labels(SAMPLE)
            base = metric_of(base_scores)
            x = sample.X[SAMPLE]
    rng = np.random.default_rng(seed)
    shuffles = [(j, rng.permutation(n)) for j in chosen for _ in range(repeats)]
    losses: dict[str, list[float]] = {names[j]: [] for j in chosen}
    copy_bytes = max(1, n * x.shape[1] * x.dtype.itemsize)
    per_batch = max(1, min(BATCH_ROWS // n, batch_bytes // copy_bytes))
    description = f"permutation importance of {model.name} ({len(chosen)} features x {repeats})"
    with (progress.bar(len(shuffles), description) if progress is not None
          else contextlib.nullcontext(lambda k: None)) as advance:
        for start in range(0, len(shuffles), per_batch):
            batch = shuffles[start:start + per_batch]
            scores = model.scorer_for(shuffled(sample, batch))(SAMPLE)
            scored += len(batch) * n
            for i, (j, _) in enumerate(batch):
                losses[names[j]].append(sign * (base - metric_of(scores[i * n:(i + 1) * n])))
            del scores
            advance(len(batch))
    mean = {name: float(np.nanmean(v)) for name, v in losses.items()}
    order = sorted(mean, key=lambda name: -np.nan_to_num(mean[name], nan=-np.inf))
    permuted = {"features": len(chosen), "of": len(names)}
    if cut is not None:
        permuted.update({"repeats": repeats, "rows": n, "seconds": round(limits.seconds, 3),
                         "time": f"{limits.seconds:.1f} s afford {repeats} shuffle(s) of {n} rows per feature at "
                                 "the rate its sample scored"})
    if len(chosen) < len(names):
        permuted.update({"ranked_by": RANKED_BY, "max_cells": max_cells, "scored_rows": budget,
                         **({"seconds": round(limits.seconds, 3)} if budget < limits.budget else {}),
                         "reason": permuted_reason(len(names), *planned, outputs, limits, budget)})
    return {"rows": n, "scored_rows": scored * outputs, "base": float(base),
            "mean": {name: mean[name] for name in order},
            "std": {name: float(np.nanstd(losses[name])) for name in order}, "permuted": permuted}


def permuted_reason(width: int, rows: int, repeats: int, outputs: int, limits: ImportanceBudget, budget: int) -> str:
    """Why not every feature was permuted, naming the cap that cut them: the time (``budget``,
    rows x outputs, cut from ``limits.budget`` to what ``limits.seconds`` affords), the rows x
    outputs scored, or the cells of shuffled copies; each count as it was planned (``rows``,
    ``repeats``), before the time cut fewer of them."""
    plan = f"{width} features x {repeats} repeats x {rows} rows"
    by_cells = permuted_count(rows, width, repeats, limits.max_cells)
    by_rows, by_time = (permuted_count(rows, width, repeats, 2**62, outputs=outputs, budget=scored)
                        for scored in (limits.budget, budget))
    if by_time < min(by_cells, by_rows):
        return (f"{plan} x {outputs} outputs would take longer than the {limits.seconds:.1f} s permutation "
                f"importance may take (a share of the model's fit): at the rate its sample scored, that time "
                f"scores {budget:,} rows x outputs")
    if by_cells < width and by_cells <= by_rows:
        return (f"{plan} x {width} columns is past the {limits.max_cells:,} cells of shuffled copies permutation "
                "importance scores per model")
    return (f"{plan} x {outputs} outputs is past the {limits.budget:,} rows x outputs permutation importance "
            "scores per model (evaluate's importance_budget)")


def time_cap(model: TrainedModel, seconds: float | None) -> float | None:
    """The seconds ``model``'s shuffles may take: ``seconds`` when given, else ``FIT_SHARE`` of
    its fit (at least ``FLOOR_SECONDS``); None for a model that recorded no fit time."""
    if seconds is not None:
        return seconds
    fit = float(getattr(model, "fit_seconds", 0.0) or 0.0)
    return max(FLOOR_SECONDS, FIT_SHARE * fit) if fit > 0 else None


def affordable(budget: int, seconds: float | None, took: float, rows: int, outputs: int) -> int:
    """``budget`` (rows x outputs), cut to what ``seconds`` scores at the rate of one call that
    scored ``rows`` in ``took`` seconds (a call's fixed cost counted in the rate: the batches
    are larger, so this errs towards fewer rows)."""
    if seconds is None or took <= 0:
        return budget
    return max(1, min(budget, int(seconds / took * rows * outputs)))


def within_seconds(seconds: float | None, per_row: float, spent: float, features: int, repeats: int,
                   rows: int) -> tuple[int, int] | None:
    """(repeats, rows) that fit the shuffles of ``features`` into what is left of ``seconds``
    at ``per_row`` seconds a scored row (``spent`` already gone): fewer repeats first, then
    fewer rows (at least ``MIN_TIMED_ROWS``); None when the plan fits as it is or no cap applies."""
    if seconds is None or per_row <= 0:
        return None
    left = max(0.0, seconds - spent) / per_row               # rows the time left scores
    if features * repeats * rows <= left:
        return None
    repeats = max(1, min(repeats, int(left // max(1, features * rows))))
    rows = max(min(rows, MIN_TIMED_ROWS), min(rows, int(left // max(1, features * repeats))))
    return repeats, rows


def sample_rows(rows: int, width: int, repeats: int, outputs: int = 1, budget: int = SCORED_ROWS) -> int:
    """Rows of the permutation sample: ``rows``, or fewer so that scoring it once per feature
    and repeat, plus once unshuffled (each row once per output), stays within ``budget``; at
    least ``MIN_SAMPLE_ROWS`` (then fewer features are permuted: ``permuted_count``)."""
    fits = budget // max(1, outputs * (width * repeats + 1))
    return max(1, min(rows, max(MIN_SAMPLE_ROWS, fits)))


def native_rows(rows: int, outputs: int, budget: int = NATIVE_ROW_OUTPUTS) -> int:
    """Rows a model's own explainer runs on: ``rows``, or fewer so that rows x outputs stays
    within ``budget``; at least ``MIN_SAMPLE_ROWS``."""
    return max(1, min(rows, max(MIN_SAMPLE_ROWS, budget // max(1, outputs))))


def permuted_count(rows: int, width: int, repeats: int, max_cells: int, *, outputs: int = 1,
                   budget: int | None = None) -> int:
    """How many features fit in ``max_cells`` when each costs ``repeats`` copies of ``rows`` x
    ``width`` cells, and in ``budget`` rows x outputs scored (the unshuffled sample's included);
    at least ``MIN_PERMUTED``."""
    fit = max_cells // max(1, repeats * rows * width)
    if budget is not None:
        fit = min(fit, (budget // max(1, rows * outputs) - 1) // max(1, repeats))
    return max(MIN_PERMUTED, fit)


def log_odds(scores: Any, task: str) -> Any:
    """Probabilities as log-odds (a saturated probability hides how a feature moves it); a
    regression's predictions as they are."""
    if task == "regression":
        return scores
    p = np.clip(np.asarray(scores.get() if hasattr(scores, "get") else scores, dtype="float64"), 1e-9, 1 - 1e-9)
    return np.log(p / (1 - p))


def permuted_features(x: Any, scores: Any, *, repeats: int, max_cells: int, rows: int | None = None,
                      outputs: int = 1, budget: int | None = None) -> list[int]:
    """Positions of the features to permute, in column order: all of them when scoring every
    shuffle of ``rows`` rows (default: ``x``'s) stays within ``max_cells`` and ``budget``; else
    the ``permuted_count`` whose values the model's score follows most closely on ``x`` (absolute
    Pearson correlation; for several outputs, the largest over them), one pass over ``x``."""
    n, width = x.shape
    keep = permuted_count(rows or n, width, repeats, max_cells, outputs=outputs, budget=budget)
    if keep >= width:
        return list(range(width))
    strength = score_correlation(x, scores)
    top = np.argsort(-strength, kind="stable")[:keep]
    return sorted(int(j) for j in top)


def score_correlation(x: Any, scores: Any) -> np.ndarray:
    """|corr(feature, score)| per column of ``x`` (host), 0 for a constant column or output."""
    xs = np.asarray(x.get() if hasattr(x, "get") else x, dtype="float64")
    ys = np.asarray(scores.get() if hasattr(scores, "get") else scores, dtype="float64")
    ys = ys.reshape(len(ys), -1)
    xs = np.nan_to_num(xs - np.nanmean(xs, axis=0))
    ys = np.nan_to_num(ys - ys.mean(axis=0))
    x_norm = np.sqrt((xs ** 2).sum(axis=0))
    y_norm = np.sqrt((ys ** 2).sum(axis=0))
    with np.errstate(divide="ignore", invalid="ignore"):
        corr = np.abs(xs.T @ ys) / np.outer(x_norm, y_norm)
    return np.nan_to_num(corr, nan=0.0, posinf=0.0).max(axis=1)


def native_importance(model: TrainedModel, *, split: str, rows: int) -> tuple[dict[str, dict[str, float]], int]:
    """What the model's registry entry explains itself (nothing for most, or unknown names),
    and the rows it was measured on."""
    try:
        explain = get_model_spec(model.model).explain
    except KeyError:
        return {}, 0
    if explain is None:
        return {}, 0
    matrix, _ = model.features.host_sample(split, rows)
    found = explain(model.estimator, matrix, list(model.features.feature_names))
    return {kind: dict(sorted(values.items(), key=lambda item: -item[1])) for kind, values in found.items()}, len(matrix)


def strided_sample(features: InMemoryFeatures, split: str, rows: int) -> InMemoryFeatures:
    """Every k-th row of ``split`` (views, no copy) as the one split ``SAMPLE``."""
    step = stride(features.rows()[split], rows)

    def take(array: Any) -> Any:
        return array[::step][:rows]

    codes = {SAMPLE: take(features.codes[split])} if features.codes else {}
    return replace(features, X={SAMPLE: take(features.X[split])}, y={SAMPLE: take(features.y[split])},
                   ids={SAMPLE: None}, codes=codes, handoffs=[], folds=None, uid=uuid.uuid4().hex)


def shuffled(sample: InMemoryFeatures, shuffles: list[tuple[int, np.ndarray]]) -> InMemoryFeatures:
    """One copy of ``sample`` per (feature position, row order), stacked: in each copy that
    feature's column (and its category codes) is reordered. Written into one preallocated
    matrix, so a batch costs its own size, not twice that (copies, then their concatenation)."""
    xp, backend = sample.backend.array, sample.backend
    x, codes = sample.X[SAMPLE], sample.codes.get(SAMPLE)
    n = x.shape[0]
    xs = xp.empty((len(shuffles) * n, *x.shape[1:]), dtype=x.dtype)
    cs = xp.empty((len(shuffles) * n, *codes.shape[1:]), dtype=codes.dtype) if codes is not None else None
    for i, (column, order) in enumerate(shuffles):
        order = backend.asarray(order)
        block = xs[i * n:(i + 1) * n]
        block[...] = x
        block[:, column] = x[order, column]
        if cs is not None:
            name = sample.feature_names[column]
            code_block = cs[i * n:(i + 1) * n]
            code_block[...] = codes
            if name in sample.categorical_columns:
                k = sample.categorical_columns.index(name)
                code_block[:, k] = codes[order, k]
    stacked_codes = {SAMPLE: cs} if cs is not None else {}
    return replace(sample, X={SAMPLE: xs}, codes=stacked_codes)
