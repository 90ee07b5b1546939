"""The PyTorch side of the pipeline: the DLPack hand-off, on-device batches, the tabular MLP.

``handoff`` and ``history`` import PyTorch / matplotlib only inside their functions, so
importing this package (as the ``features`` stage does) stays cheap for ``pipeline validate``.
``batches``, ``mlp``, ``training`` and ``classifier`` import PyTorch at the top; their public
names are still importable from here (``from pipeline.tensors import TensorBatches``), loaded
on first use (PEP 562) so that importing the package does not import PyTorch.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from pipeline.tensors.handoff import Handoff, matrix_handoff, to_torch

_LAZY = {
    "TensorBatches": "pipeline.tensors.batches",
    "FitOptions": "pipeline.tensors.fit_loop",
    "FitResult": "pipeline.tensors.fit_loop",
    "Split": "pipeline.tensors.fit_loop",
    "fit": "pipeline.tensors.fit_loop",
    "MLPArchitecture": "pipeline.tensors.mlp",
    "TabularMLP": "pipeline.tensors.mlp",
    "MLPClassifier": "pipeline.tensors.classifier",
    "Objective": "pipeline.tensors.objectives",
}

__all__ = ["Handoff", "matrix_handoff", "to_torch", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'pipeline.tensors' has no attribute {name!r}")
