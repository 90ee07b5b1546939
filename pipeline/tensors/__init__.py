"""The PyTorch side of the pipeline: the DLPack hand-off, on-device batches, the tabular MLP.

``handoff`` and ``history`` import PyTorch / matplotlib only inside their functions, so
importing this package (as the ``features`` stage does) stays cheap for ``pipeline validate``.
``batches``, ``mlp``, ``training`` and ``classifier`` import PyTorch at the top; the ``torch``
stage and ``pipeline.scoring`` import them when they run.
"""

from pipeline.tensors.handoff import Handoff, matrix_handoff, to_torch

__all__ = ["Handoff", "matrix_handoff", "to_torch"]
