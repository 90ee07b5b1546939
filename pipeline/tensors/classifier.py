"""A trained tabular MLP as an estimator: scores arrays, saves itself, loads on any device.

The saved form is ``model.pt`` (a ``state_dict`` of CPU tensors, loaded with
``weights_only=True``: no pickled code) and ``architecture.json``; with the run's
``workflow.json`` beside them the model scores raw rows on a machine with or without a GPU.
``architecture.json`` also holds the task (and a regression target's scale), so ``load``
rebuilds a multiclass or regression model whole; a file without one is a binary model.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pipeline.core.problems import Task
from pipeline.tensors.mlp import MLPArchitecture, TabularMLP
from pipeline.tensors.objectives import Objective
from pipeline.tensors.fit_loop import Split, predict_logits

STATE_FILE = "model.pt"
ARCHITECTURE_FILE = "architecture.json"
# architecture.json's keys that are the task, not the network (``Objective.to_dict``).
OBJECTIVE_KEYS = ("task", "target")


class MLPClassifier:
    """The trained MLP of any task, over a float32 feature matrix (and the int64 codes if it
    embeds any): ``predict_proba`` for classification, ``predict`` for every task.

    The name is kept from when it only classified; ``objective`` (binary when None) says the
    task and, for regression, the target scale its outputs are undone with."""

    def __init__(self, module: TabularMLP, device: torch.device | str = "cpu",
                 objective: Objective | None = None) -> None:
        self.module = module
        self.arch: MLPArchitecture = module.arch
        self.objective = objective or Objective()
        if self.arch.n_outputs != self.objective.n_outputs:
            raise ValueError(f"the network has {self.arch.n_outputs} output(s); a "
                             f"{self.objective.task.describe()} model needs {self.objective.n_outputs}")
        self.device = torch.device(device)
        self.module.to(self.device).eval()

    @property
    def task(self) -> Task:
        return self.objective.task

    @property
    def needs_codes(self) -> bool:
        return bool(self.arch.cardinalities)

    def predict_split(self, split: Split) -> np.ndarray:
        """Scores of tensors already in hand, host float64, in ``pipeline.core.problems``' shapes:
        P(positive) for binary, an n x K matrix for multiclass, values for regression."""
        logits = predict_logits(self.module, split, self.device)
        return self.objective.scores(logits).cpu().numpy()

    def scores(self, X: Any, codes: Any = None) -> np.ndarray:
        """``predict_split`` of NumPy, CuPy or torch inputs."""
        if self.needs_codes and codes is None:
            raise ValueError("this model embeds categorical columns: pass their int64 codes")
        split = Split(x=_tensor(X, torch.float32), codes=None if codes is None else _tensor(codes, torch.long))
        return self.predict_split(split)

    def matrix_scores(self, X: Any) -> np.ndarray:
        """``scores`` of a feature matrix alone: the embedded columns' codes are its own columns
        (the features stage writes category codes as numbers among the features), read back as
        int64. What a partition of partitioned features is scored with."""
        x = _tensor(X, torch.float32)
        if not self.needs_codes:
            return self.predict_split(Split(x=x))
        continuous = set(self.arch.continuous_index)
        positions = [i for i in range(self.arch.n_features) if i not in continuous]
        return self.predict_split(Split(x=x, codes=x[:, positions].long()))

    def predict_proba(self, X: Any, codes: Any = None) -> np.ndarray:
        """scikit-learn's shape: (n, 2) probabilities for binary, (n, K) for multiclass."""
        if self.objective.kind == "regression":
            raise ValueError("a regression model has no class probabilities: use predict")
        p = self.scores(X, codes)
        return p if p.ndim == 2 else np.column_stack([1.0 - p, p])

    def predict(self, X: Any, codes: Any = None) -> np.ndarray:
        """Predicted values (regression), original class values (multiclass) or 0/1 at 0.5 (binary)."""
        p = self.scores(X, codes)
        if self.objective.kind == "regression":
            return p
        if self.objective.kind == "multiclass":
            return self.task.decode(p.argmax(axis=1))
        return (p >= 0.5).astype("int32")

    # ---------------------------------------------------------------- files
    def save(self, folder: str | os.PathLike[str]) -> list[Path]:
        """Write ``model.pt`` and ``architecture.json`` atomically; returns their paths."""
        from pipeline.runs.store import atomic_destination, atomic_write_json

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        state = {k: v.detach().cpu() for k, v in self.module.state_dict().items()}
        with atomic_destination(folder / STATE_FILE) as tmp, open(tmp, "wb") as fh:
            # To a file object, not a name: the archive's inner folder is then "archive", not
            # the temporary file's random name, so one model is one file, byte for byte.
            torch.save(state, fh)
        body = {**self.arch.to_dict(), **self.objective.to_dict()}
        atomic_write_json(folder / ARCHITECTURE_FILE, body)
        return [folder / STATE_FILE, folder / ARCHITECTURE_FILE]

    @classmethod
    def load(cls, folder: str | os.PathLike[str], device: torch.device | str = "cpu") -> MLPClassifier:
        folder = Path(folder)
        body = json.loads((folder / ARCHITECTURE_FILE).read_text(encoding="utf-8"))
        if not isinstance(body, dict):
            raise ValueError(f"{ARCHITECTURE_FILE} is not a JSON object")
        objective = Objective.from_dict({key: body.pop(key, None) for key in OBJECTIVE_KEYS})
        arch = MLPArchitecture.from_dict(body)
        module = arch.build()
        state = torch.load(folder / STATE_FILE, map_location="cpu", weights_only=True)
        module.load_state_dict(state)
        return cls(module, device, objective)


def _tensor(values: Any, dtype: torch.dtype) -> torch.Tensor:
    # as_tensor shares NumPy/CuPy memory where it can; scoring never writes to its input.
    tensor = values if isinstance(values, torch.Tensor) else torch.as_tensor(values)
    return tensor.to(dtype)
