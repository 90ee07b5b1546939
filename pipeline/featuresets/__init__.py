"""Model-ready features behind one interface (``FeatureSet``): in memory or partitioned."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pipeline.core.errors import DataError
from pipeline.features import FeatureOp
from pipeline.featuresets.feature_set import FeatureSet, Scorer, ScoredModel
from pipeline.featuresets.folds import FOLDS_NEED_MEMORY, FoldSource
from pipeline.featuresets.in_memory import InMemoryFeatures, build_in_memory
from pipeline.featuresets.partitioned import PartitionedFeatures, build_partitioned

__all__ = [
    "FeatureSet", "FoldSource", "InMemoryFeatures", "PartitionedFeatures", "ScoredModel", "Scorer", "build_feature_set",
]


def build_feature_set(data: Any, ops: Sequence[FeatureOp | dict[str, Any]], *, id_column: str | None = None,
                      output_dir: Path | None = None) -> FeatureSet:
    """Fit ``ops`` on ``data``'s training split (a ``SplitData``) and build every split's
    features: matrices for in-memory frames, lazy frames for partitioned ones (written under
    ``output_dir`` as Parquet when given; in memory it is not used). With the split's
    ``folds``, the in-memory features carry a ``FoldSource`` that builds each fold's features."""
    if data.partitioned and getattr(data, "folds", None):
        raise DataError(FOLDS_NEED_MEMORY)
    if data.partitioned:
        return build_partitioned(data, ops, id_column=id_column, output_dir=output_dir)
    features = build_in_memory(data, ops, id_column=id_column)
    if getattr(data, "folds", None):
        features.folds = FoldSource.of_split(data, features.workflow.ops, id_column)
    return features
