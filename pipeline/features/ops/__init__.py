"""Feature ops with scikit-learn semantics: ``fit`` on the training split, ``transform`` anywhere.

One module per op or small family, each registering its classes with ``register_op`` when
imported (``op_registry``); the contract they implement is ``op_base.FeatureOp``:

- ``imputation``: ``fill_missing``;
- ``encoding``: ``one_hot``, ``categorify`` (rare levels by ``rare``, the rule they share);
- ``target_encoding``: ``target_encode`` (learns from the label; out of fold on the training split);
- ``counting``: ``frequency_encode``, ``hash_encode``, ``group_rare``;
- ``binning``: ``clip``, ``quantile_bin``;
- ``scaling``: ``standardize``, ``log1p``;
- ``drop``: ``drop``;
- ``date_ops``: ``date_parts``, ``date_diff``;
- ``column_selector``: what every op's ``columns`` may be instead of names
  (``{type: numeric}``), resolved by the workflow's fit.

An op added outside the package is one module too: a ``FeatureOp`` subclass under
``@register_op``, imported as a plugin (``pipeline.core.plugins``); ``pipeline.testing.ops.check_op``
runs it through the contract.
"""

from pipeline.features.ops.column_selector import ColumnSelector, describe_selector, select_columns
from pipeline.features.ops.op_base import (
    COLUMNS_TAGS, SELECTOR_TAG, EmptyState, FeatureOp, OpState, Scalar, Target, fit_state,
)
from pipeline.features.ops.op_registry import OPS, op_of_step, op_step_union, ops_key, register_op
from pipeline.features.ops.imputation import FillMissing, FillMissingState
from pipeline.features.ops.encoding import Categorify, CategorifyState, OneHot, OneHotState, code_dtype
from pipeline.features.ops.scaling import Log1p, Standardize, StandardizeState
from pipeline.features.ops.drop import Drop
from pipeline.features.ops.date_ops import DateDiff, DateParts
from pipeline.features.ops.target_encoding import TargetEncode, TargetEncodeState
from pipeline.features.ops.counting import FrequencyEncode, FrequencyEncodeState, GroupRare, GroupRareState, HashEncode
from pipeline.features.ops.binning import Clip, ClipState, QuantileBin, QuantileBinState

# The ``ops:`` item type over the built-in ops (``FeaturesSpec.ops``); ``op_step_union()`` is
# the same over every op registered now, plugins' included.
OpStep = op_step_union()
BUILT_IN_OPS = ops_key()

__all__ = [
    "BUILT_IN_OPS", "COLUMNS_TAGS", "OPS", "SELECTOR_TAG", "Categorify", "CategorifyState", "ColumnSelector",
    "DateDiff", "DateParts", "Drop", "EmptyState", "FeatureOp", "FillMissing", "FillMissingState", "Log1p",
    "OneHot", "OneHotState", "OpState", "OpStep", "Scalar", "Standardize", "StandardizeState", "code_dtype",
    "describe_selector", "fit_state", "op_of_step", "op_step_union", "ops_key", "register_op",
    "select_columns", "Clip", "ClipState", "FrequencyEncode", "FrequencyEncodeState", "GroupRare",
    "GroupRareState", "HashEncode", "QuantileBin", "QuantileBinState", "Target", "TargetEncode",
    "TargetEncodeState",
]
