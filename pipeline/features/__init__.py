"""Feature ops and the workflow that fits them on the training split only."""

from pipeline.features.ops import (
    OPS, Categorify, Drop, FeatureOp, FillMissing, Log1p, OneHot, OpState, Standardize,
)
from pipeline.features.workflow import FeatureWorkflow, op_from_spec

__all__ = [
    "OPS", "Categorify", "Drop", "FeatureOp", "FeatureWorkflow", "FillMissing", "Log1p",
    "OneHot", "OpState", "Standardize", "op_from_spec",
]
