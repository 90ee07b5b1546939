"""A trained tabular MLP as an estimator: scores arrays, saves itself, loads on any device.

The saved form is ``model.pt`` (a ``state_dict`` of CPU tensors, loaded with
``weights_only=True``: no pickled code) and ``architecture.json``; with the run's
``workflow.json`` beside them the model scores raw rows on a machine with or without a GPU.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from pipeline.tensors.mlp import MLPArchitecture, TabularMLP
from pipeline.tensors.training import Split, predict_logits

STATE_FILE = "model.pt"
ARCHITECTURE_FILE = "architecture.json"


class MLPClassifier:
    """``predict_proba`` over a float32 feature matrix (and the int64 codes if it embeds any)."""

    def __init__(self, module: TabularMLP, device: torch.device | str = "cpu") -> None:
        self.module = module
        self.arch: MLPArchitecture = module.arch
        self.device = torch.device(device)
        self.module.to(self.device).eval()

    @property
    def needs_codes(self) -> bool:
        return bool(self.arch.cardinalities)

    def predict_split(self, split: Split) -> np.ndarray:
        """Positive-class probabilities of tensors already in hand, as host float64."""
        logits = predict_logits(self.module, split, self.device)
        return torch.sigmoid(logits).double().cpu().numpy()

    def predict_proba(self, X: Any, codes: Any = None) -> np.ndarray:
        """scikit-learn's shape: (n, 2) probabilities, from NumPy, CuPy or torch inputs."""
        if self.needs_codes and codes is None:
            raise ValueError("this model embeds categorical columns: pass their int64 codes")
        split = Split(x=_tensor(X, torch.float32), codes=None if codes is None else _tensor(codes, torch.long))
        p = self.predict_split(split)
        return np.column_stack([1.0 - p, p])

    # ---------------------------------------------------------------- files
    def save(self, folder: str | os.PathLike[str]) -> list[Path]:
        """Write ``model.pt`` and ``architecture.json`` atomically; returns their paths."""
        from pipeline.store import atomic_destination, atomic_write_text

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        state = {k: v.detach().cpu() for k, v in self.module.state_dict().items()}
        with atomic_destination(folder / STATE_FILE) as tmp:
            torch.save(state, tmp)
        atomic_write_text(folder / ARCHITECTURE_FILE, json.dumps(self.arch.to_dict(), indent=2))
        return [folder / STATE_FILE, folder / ARCHITECTURE_FILE]

    @classmethod
    def load(cls, folder: str | os.PathLike[str], device: torch.device | str = "cpu") -> MLPClassifier:
        folder = Path(folder)
        arch = MLPArchitecture.from_dict(json.loads((folder / ARCHITECTURE_FILE).read_text(encoding="utf-8")))
        module = arch.build()
        state = torch.load(folder / STATE_FILE, map_location="cpu", weights_only=True)
        module.load_state_dict(state)
        return cls(module, device)


def _tensor(values: Any, dtype: torch.dtype) -> torch.Tensor:
    # as_tensor shares NumPy/CuPy memory where it can; scoring never writes to its input.
    tensor = values if isinstance(values, torch.Tensor) else torch.as_tensor(values)
    return tensor.to(dtype)
