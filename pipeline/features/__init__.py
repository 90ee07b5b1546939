"""Feature ops and the workflow that fits them on the training split only.

``OPS`` is the op registry (name -> ``FeatureOp`` class); ``register_op`` adds to it, from the
package's own op modules (``pipeline.features.ops``) or from a plugin module.
"""

from pipeline.features.ops import (
    OPS, Categorify, Clip, DateDiff, DateParts, Drop, FeatureOp, FillMissing, FrequencyEncode, GroupRare, HashEncode,
    Log1p, OneHot, OpState, QuantileBin, Standardize, Target, TargetEncode, register_op,
)
from pipeline.features.workflow import FeatureWorkflow, op_from_spec

__all__ = [
    "OPS", "Categorify", "Clip", "DateDiff", "DateParts", "Drop", "FeatureOp", "FeatureWorkflow", "FillMissing",
    "FrequencyEncode", "GroupRare", "HashEncode", "Log1p", "OneHot", "OpState", "QuantileBin", "Standardize", "Target",
    "TargetEncode", "op_from_spec", "register_op",
]
