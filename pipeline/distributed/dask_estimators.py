"""Training and scoring a Dask estimator on partitioned features through the cluster.

``xgboost.dask`` (both devices) and ``cuml.dask`` (GPUs) fit on the lazy training split held
by the workers; XGBoost can instead stream each worker's share of the split's Parquet files
through external memory (``xgboost_external``). Scores come back as host vectors.

The features are taken by what they hold (``PartitionedData``), not by class: this package
sits below the feature sets that call it and imports none of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from pipeline.backends import Backend, cluster_client, compute_lazy, estimator_output, scores_for_task
from pipeline.core.errors import DataError
from pipeline.models import MODELS, get_model_spec
from pipeline.core.problems import BINARY, Task


class PartitionedData(Protocol):
    """What distributed training and scoring read of partitioned features."""

    X: Mapping[str, Any]                 # lazy Dask frames per split
    y: Mapping[str, Any]
    feature_names: list[str]
    target: str
    id_column: str | None
    backend: Backend
    parquet_dirs: Mapping[str, str]      # the Parquet folder of each split, where written
    task: Task                           # what the estimator predicts, and the scores' shape

    def rows(self) -> dict[str, int]: ...


def use_external_memory(model: str, requested: bool | None, *, has_files: bool) -> bool:
    """Whether training streams the Parquet files: as requested, else wherever it can (a model
    that streams, on features written as Parquet)."""
    possible = get_model_spec(model).external_memory and has_files
    if requested and not possible:
        streaming = sorted(name for name, spec in MODELS.items() if spec.external_memory)
        raise DataError(f"external_memory: {model} on these features cannot stream from Parquet "
                        f"(it needs model {', '.join(streaming)} and partitioned features written by a "
                        "features stage)")
    return possible if requested is None else requested


def fit_distributed(estimator: Any, features: PartitionedData, fit_kwargs: dict[str, Any], *,
                    external_memory: bool = False, stage: str = "train") -> dict[str, Any] | None:
    """Fit a Dask estimator on the training split through the cluster.

    ``external_memory`` (XGBoost only): each worker streams its share of the split's Parquet
    files into an external-memory DMatrix instead of holding it (``xgboost_external``);
    returns how the files were spread then, None otherwise.
    """
    with cluster_client() as client:
        if external_memory:
            from pipeline.distributed.xgboost_external import fit_external_memory

            return fit_external_memory(estimator, features, client, stage=stage)
        estimator.client = client
        try:
            estimator.fit(features.X["train"], features.y["train"], **fit_kwargs)
        finally:
            estimator.client = None      # the estimator is pickled to other workers later
    return None


@dataclass
class DistributedScorer:
    """Scores of one split from a Dask estimator, computed through the cluster, in the shape of
    the features' task (``predict_proba``'s positive column or matrix, ``predict`` for
    regression); a class, not a closure, so trained models pickle."""

    estimator: Any
    features: PartitionedData

    def __call__(self, split: str) -> np.ndarray:
        task = getattr(self.features, "task", BINARY)
        with cluster_client() as client:
            self.estimator.client = client
            try:
                output = estimator_output(self.estimator, self.features.X[split], task)
                (host,) = compute_lazy(output) if hasattr(output, "dask") else (output,)
            finally:
                self.estimator.client = None
        return scores_for_task(self.features.backend.to_host(host), task, self.estimator)
