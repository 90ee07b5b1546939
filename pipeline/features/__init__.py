"""Feature ops and the workflow that fits them on the training split only.

``OPS`` is the op registry (name -> ``FeatureOp`` class); ``register_op`` adds to it, from the
package's own op modules (``pipeline.features.ops``) or from a plugin module. ``OpState`` is
the base of an op's fitted state, and ``EmptyState`` the state of an op that learns nothing
(what its ``fit`` returns for ``pipeline.testing.check_op``).
"""

from pipeline.features.ops import (
    COLUMNS_TAGS, OPS, SELECTOR_TAG, Categorify, ColumnSelector, DateDiff, DateParts, Drop, EmptyState,
    FeatureOp, FillMissing, Log1p, OneHot, OpState, Standardize, register_op, Clip, FrequencyEncode, GroupRare,
    HashEncode, QuantileBin, Target, TargetEncode,
)
from pipeline.features.workflow import FeatureWorkflow, op_from_spec

__all__ = [
    "COLUMNS_TAGS", "OPS", "SELECTOR_TAG", "Categorify", "ColumnSelector", "DateDiff", "DateParts", "Drop",
    "EmptyState", "FeatureOp", "FeatureWorkflow", "FillMissing", "Log1p", "OneHot", "OpState", "Standardize",
    "op_from_spec", "register_op", "Clip", "FrequencyEncode", "GroupRare", "HashEncode", "QuantileBin", "Target",
    "TargetEncode",
]
