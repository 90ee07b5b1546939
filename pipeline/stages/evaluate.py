"""``evaluate``: the standard binary-classification metrics per model on one split.

Metrics are computed on the host from the score vectors ``train`` kept, with scikit-learn's
definitions in one sort (pipeline.metrics): one implementation for both devices, and a 5M-row
test split costs a few vectors rather than scikit-learn's 670 MiB of copies.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from pipeline.errors import DataError
from pipeline.metrics import binary_metrics
from pipeline.stages.base import StageContext, StageSpec, register_stage
from pipeline.stages.train import TrainedModel

METRICS = ("roc_auc", "pr_auc", "log_loss", "accuracy", "precision", "recall", "f1")


@dataclass
class Evaluation:
    split: str
    threshold: float
    metrics: dict[str, dict[str, float]]    # model -> metric -> value
    rank_by: str

    @property
    def best(self) -> str:
        higher_is_better = self.rank_by != "log_loss"
        pick = max if higher_is_better else min
        return pick(self.metrics, key=lambda m: _sortable(self.metrics[m][self.rank_by], higher_is_better))

    def to_dict(self) -> dict[str, Any]:
        return {"split": self.split, "threshold": self.threshold, "rank_by": self.rank_by,
                "best": self.best, "models": self.metrics}


def _sortable(value: float, higher_is_better: bool) -> float:
    if math.isnan(value):
        return -math.inf if higher_is_better else math.inf
    return value


class EvaluateSpec(StageSpec):
    kind: Literal["evaluate"]
    split: Literal["test", "valid", "train"] = Field("test", description="Split to score on.")
    threshold: float = Field(0.5, gt=0, lt=1, allow_inf_nan=False, description="Score at or above which a row is predicted positive.")
    rank_by: Literal[METRICS] = Field("roc_auc", description="Metric that picks the best model.")  # type: ignore[valid-type]
    min_inputs = 1


def evaluate_models(
    models: list[TrainedModel], *, split: str = "test", threshold: float = 0.5, rank_by: str = "roc_auc"
) -> Evaluation:
    results = {}
    for model in models:
        if split not in model.scores:
            raise DataError(f"model '{model.name}' has no '{split}' split to evaluate (is it empty?)")
        results[model.name] = binary_metrics(model.features.labels(split), model.scores[split],
                                             threshold=threshold)
    return Evaluation(split=split, threshold=threshold, metrics=results, rank_by=rank_by)


@register_stage("evaluate", EvaluateSpec, produces=Evaluation, accepts=(TrainedModel,), records=("metrics",))
def run_evaluate(spec: EvaluateSpec, ctx: StageContext, inputs) -> Evaluation:
    evaluation = evaluate_models(list(inputs.values()), split=spec.split, threshold=spec.threshold, rank_by=spec.rank_by)
    if ctx.artifacts_dir is not None:
        from pipeline.store import atomic_write_json

        atomic_write_json(ctx.artifact_path("metrics.json"), evaluation.to_dict())
    ctx.facts["best"] = evaluation.best
    ctx.run_record["metrics"] = evaluation.to_dict()
    return evaluation
