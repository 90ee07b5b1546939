"""What the MLP's training and scoring do differently per task: targets, loss, scores, metrics.

One network body serves every task; only its output width (``Task.n_outputs``) and this
object differ. Losses are computed in float32 whatever the autocast dtype (a bf16 softmax or
squared error loses digits the optimizer needs). Regression trains on the standardised target,
so one learning rate suits a target in cents or in millions, and ``scores`` undoes it: the
training split's mean and standard deviation are saved with the model (``to_dict`` goes into
``architecture.json``), so an exported model predicts in the target's own units.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from pipeline.core.errors import DataError
from pipeline.core.problems import BINARY, Task
from pipeline.tensors.learning_curve import HIGHER_IS_BETTER, LOSS_LABELS, monitor_problem, monitors_for


@dataclass(frozen=True)
class Objective:
    """The task of a network and, for regression, the scale its outputs are trained in."""

    task: Task = BINARY
    target_mean: float = 0.0
    target_std: float = 1.0

    @classmethod
    def for_training(cls, task: Task, y_train: torch.Tensor | None = None) -> Objective:
        """The objective of ``task``; for regression, standardised by ``y_train``'s mean and std."""
        if task.kind != "regression" or y_train is None or not y_train.numel():
            return cls(task)
        y = y_train.double()
        return cls.for_moments(task, float(y.mean()), float(y.std(correction=0)))

    @classmethod
    def for_moments(cls, task: Task, mean: float, std: float) -> Objective:
        """The objective of ``task`` standardised by a training target's ``mean`` and ``std``
        (worked out elsewhere: over the partitions of a split too large for one process)."""
        if task.kind != "regression":
            return cls(task)
        if not (math.isfinite(mean) and math.isfinite(std)):
            raise DataError("the regression target has missing or infinite values in the training split")
        return cls(task, mean, std if std > 0 else 1.0)   # a constant target: only centred

    @property
    def kind(self) -> str:
        return self.task.kind

    @property
    def n_outputs(self) -> int:
        return self.task.n_outputs

    @property
    def monitors(self) -> tuple[str, ...]:
        return monitors_for(self.kind)

    @property
    def loss_label(self) -> str:
        return LOSS_LABELS[self.kind]

    def check_monitor(self, monitor: str) -> None:
        problem = monitor_problem(monitor, self.kind)
        if problem:
            raise DataError(problem)

    @staticmethod
    def higher_is_better(monitor: str) -> bool:
        return HIGHER_IS_BETTER[monitor]

    # ---------------------------------------------------------------- training
    def targets(self, y: torch.Tensor) -> torch.Tensor:
        """Labels as the loss takes them: float 0/1, int64 class codes, or the standardised value."""
        if self.kind == "multiclass":
            return y.long()
        if self.kind == "regression":
            return ((y.double() - self.target_mean) / self.target_std).float()   # in float64 first: an offset of 1e12
        return y.float()

    def loss(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean loss of a batch, in float32 (outputs may come from bf16/fp16 autocast)."""
        outputs = outputs.float()
        if self.kind == "multiclass":
            return F.cross_entropy(outputs, targets)
        if self.kind == "regression":
            return F.mse_loss(outputs, targets)
        return F.binary_cross_entropy_with_logits(outputs, targets)

    # ---------------------------------------------------------------- scoring
    def scores(self, outputs: torch.Tensor) -> torch.Tensor:
        """Scores in ``pipeline.core.problems``' shapes, float64: P(positive), an n x K matrix, or values."""
        if self.kind == "multiclass":
            return torch.softmax(outputs.double(), dim=1)
        if self.kind == "regression":
            return outputs.double() * self.target_std + self.target_mean
        return torch.sigmoid(outputs).double()

    def validation(self, outputs: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
        """``val_loss`` and the task's own metric on the validation rows."""
        outputs = outputs.float()
        result = {"val_loss": float(self.loss(outputs, self.targets(y)).item())}
        if self.kind == "multiclass":
            result["val_accuracy"] = float((outputs.argmax(dim=1) == y.long()).double().mean().item())
        elif self.kind == "regression":
            error = self.scores(outputs) - y.double()
            result["val_rmse"] = float(error.square().mean().sqrt().item())
        else:
            y_host = y.float().cpu().numpy()
            if len(np.unique(y_host)) == 2:
                from sklearn.metrics import roc_auc_score

                result["val_auc"] = float(roc_auc_score(y_host, torch.sigmoid(outputs).cpu().numpy()))
        return result

    # ---------------------------------------------------------------- files
    def to_dict(self) -> dict[str, Any]:
        """Keys for ``architecture.json``; none for binary, whose file stays as it always was
        (its positive value is decoding, which ``model.json``'s task keeps)."""
        if self.kind == "binary":
            return {}
        out: dict[str, Any] = {"task": self.task.to_dict()}
        if self.kind == "regression":
            out["target"] = {"mean": self.target_mean, "std": self.target_std}
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Objective:
        """The objective ``to_dict`` wrote; a file without ``task`` (written before tasks) is binary."""
        task = Task.from_dict(data.get("task"))
        target = data.get("target") or {}
        objective = cls(task, float(target.get("mean", 0.0)), float(target.get("std", 1.0)))
        if not (math.isfinite(objective.target_mean) and math.isfinite(objective.target_std)
                and objective.target_std > 0):
            raise ValueError(f"target scale must be finite with a positive std, not {target}")
        return objective
