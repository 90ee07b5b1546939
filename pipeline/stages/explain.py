"""Which features each model leans on, for ``evaluate``'s importance.json and the report.

Two kinds, on a sample of a fixed number of rows of the evaluated split (the cost does not
grow with the table):

- permutation importance, for every model that scores in memory: how much the ranking metric
  worsens when one feature's values are shuffled (mean and std over ``repeats`` shuffles). It
  asks nothing of the model, so every model (an MLP, an ensemble) is measured the same way;
- what a registry entry explains natively (``ModelSpec.explain``): XGBoost's gain and mean
  absolute SHAP contribution (``pred_contribs``, XGBoost's own TreeSHAP, on either device).

Shuffles run on the run's device (NumPy or CuPy indexing of the sample's matrix), so a GPU
model is scored on GPU data; only the sample's metrics come to the host.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any

import numpy as np

from pipeline.errors import DataError
from pipeline.featuresets.in_memory import InMemoryFeatures, stride
from pipeline.metrics import HIGHER_IS_BETTER, task_metrics
from pipeline.models import get_model_spec
from pipeline.stages.train import TrainedModel

# Rows of the evaluated split the importances are measured on, and shuffles per feature.
IMPORTANCE_ROWS = 5_000
REPEATS = 3
SAMPLE = "sample"
# Rows of shuffled copies scored in one call.
BATCH_ROWS = 200_000
# What a model that cannot score rows other than its own (a plugin's, holding only its scores)
# raises: its importances are skipped and the evaluation goes on.
UNSCORABLE = (AttributeError, TypeError, ValueError, NotImplementedError)


def explain_models(models: list[TrainedModel], *, split: str, metric: str, threshold: float,
                   rows: int = IMPORTANCE_ROWS, repeats: int = REPEATS, seed: int = 0) -> dict[str, Any]:
    """importance.json: per model, ``permutation`` (``mean``/``std`` per feature) and any native
    importances, each ordered most important first; ``rows``: the sample's rows per model;
    ``skipped`` says why a kind is missing."""
    out: dict[str, Any] = {"split": split, "metric": metric, "repeats": repeats, "rows": {},
                           "models": {}, "skipped": {}}
    for model in models:
        entry: dict[str, Any] = {}
        try:
            entry["permutation"] = permutation_importance(model, split=split, metric=metric, threshold=threshold,
                                                          rows=rows, repeats=repeats, seed=seed)
            out["rows"][model.name] = entry["permutation"].pop("rows")
        except DataError as exc:
            out["skipped"][model.name] = str(exc)
        except UNSCORABLE as exc:
            out["skipped"][model.name] = f"it could not score other rows ({type(exc).__name__}: {exc})"
        try:
            native, used = native_importance(model, split=split, rows=rows)
            entry.update(native)
            if native:
                out["rows"].setdefault(model.name, used)
        except UNSCORABLE as exc:
            out["skipped"].setdefault(model.name, f"its own importances failed ({type(exc).__name__}: {exc})")
        if entry:
            out["models"][model.name] = entry
    return out


def permutation_importance(model: TrainedModel, *, split: str, metric: str, threshold: float,
                           rows: int, repeats: int, seed: int) -> dict[str, Any]:
    """The metric's loss per shuffled feature (positive: the model needs it). The shuffled
    copies are scored in batches of about ``BATCH_ROWS`` rows: one call per batch rather than
    one per shuffle, which is most of the cost for a model with a fixed overhead per call."""
    sample = strided_sample(model.features.in_memory(
        "permutation importance scores a sample in memory; models trained on partitioned data score "
        "through the cluster"), split, rows)
    labels, task, n = sample.labels(SAMPLE), sample.task, sample.rows()[SAMPLE]
    sign = 1.0 if HIGHER_IS_BETTER[metric] else -1.0

    def metric_of(scores: np.ndarray) -> float:
        return task_metrics(task, labels, scores, threshold=threshold)[metric]

    base = metric_of(model.scorer_for(sample)(SAMPLE))
    rng = np.random.default_rng(seed)
    shuffles = [(j, rng.permutation(n)) for j in range(len(sample.feature_names)) for _ in range(repeats)]
    losses: dict[str, list[float]] = {name: [] for name in sample.feature_names}
    per_batch = max(1, BATCH_ROWS // n)
    for start in range(0, len(shuffles), per_batch):
        batch = shuffles[start:start + per_batch]
        scores = model.scorer_for(shuffled(sample, batch))(SAMPLE)
        for i, (j, _) in enumerate(batch):
            losses[sample.feature_names[j]].append(sign * (base - metric_of(scores[i * n:(i + 1) * n])))
    mean = {name: float(np.nanmean(v)) for name, v in losses.items()}
    order = sorted(mean, key=lambda name: -np.nan_to_num(mean[name], nan=-np.inf))
    return {"rows": n, "base": float(base), "mean": {name: mean[name] for name in order},
            "std": {name: float(np.nanstd(losses[name])) for name in order}}


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
    feature's column (and its category codes) is reordered."""
    xp, backend = sample.backend.array, sample.backend
    x, codes = sample.X[SAMPLE], sample.codes.get(SAMPLE)
    xs, cs = [], []
    for column, order in shuffles:
        order = backend.asarray(order)
        copy = x.copy()
        copy[:, column] = x[order, column]
        xs.append(copy)
        if codes is not None:
            name = sample.feature_names[column]
            code_copy = codes.copy()
            if name in sample.categorical_columns:
                k = sample.categorical_columns.index(name)
                code_copy[:, k] = codes[order, k]
            cs.append(code_copy)
    stacked_codes = {SAMPLE: xp.concatenate(cs)} if cs else {}
    return replace(sample, X={SAMPLE: xp.concatenate(xs)}, codes=stacked_codes)
