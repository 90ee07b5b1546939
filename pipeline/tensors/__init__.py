"""The PyTorch side of the pipeline: the DLPack hand-off, on-device batches, the tabular MLP.

PyTorch is imported only when a function here runs (``pipeline validate`` stays fast), except
by the modules that define ``torch.nn`` classes, which the ``torch`` stage imports on use.
"""

from pipeline.tensors.handoff import Handoff, matrix_handoff, to_torch

__all__ = ["Handoff", "matrix_handoff", "to_torch"]
