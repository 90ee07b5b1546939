"""What the stages do differently when the data is partitioned (a Dask DataFrame).

``features`` fits the workflow with one pass per dependency phase, transforms every split
with ``map_partitions`` and writes each split as partitioned Parquet (one more pass for all
three splits together, into a temporary folder renamed when complete). The ``FeatureSet``
then reads those files lazily; ``train`` fits a Dask estimator (``xgboost.dask`` on both
devices, ``cuml.dask`` on GPUs) through the cluster, and scores come back as host vectors.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pipeline.backends import Backend, cluster_client, compute_lazy
from pipeline.errors import DataError
from pipeline.features import FeatureWorkflow
from pipeline.features.ops import FeatureOp


def featurize_partition(part: Any, workflow: FeatureWorkflow, keep: list[str]) -> Any:
    """One partition through the fitted workflow, with the target (and id) columns kept.

    Features are float32, as in the in-memory matrices (half the bytes of float64 / int64),
    except category codes, which keep their one- or two-byte integer type: smaller Parquet
    files and batches for external-memory training, and what each worker must hold when
    ``xgboost.dask`` trains in memory (``external_memory: false``).
    """
    out = workflow.transform(part.drop(columns=keep))
    out = out.astype({c: "float32" for c in out.columns if not _small_code(out[c].dtype)})
    return out.assign(**{column: part[column] for column in keep})


def _small_code(dtype: Any) -> bool:
    return getattr(dtype, "kind", "") == "u" and getattr(dtype, "itemsize", 8) <= 2


def build_partitioned(data: Any, ops: list[FeatureOp], *, id_column: str | None,
                      output_dir: Path | None) -> dict[str, Any]:
    """Fit on the training split and featurize every split; returns FeatureSet fields."""
    backend: Backend = data.backend
    keep = [data.target] + ([id_column] if id_column else [])
    train = data.frames["train"]
    missing = [c for c in keep if c not in train.columns]
    if missing:
        raise DataError(f"column(s) {missing} not in the data")
    workflow = FeatureWorkflow(ops, backend=backend)
    workflow.fit(train.drop(columns=keep))
    meta = featurize_partition(train._meta, workflow, keep)
    featurized = {name: frame.map_partitions(featurize_partition, workflow, keep, meta=meta)
                  for name, frame in data.frames.items()}
    if output_dir is not None:
        featurized = _write_parquet(featurized, output_dir, backend)
        rows = featurized.pop("__rows__")
        folders = {name: str(output_dir / name) for name in featurized}
    else:
        folders = {}
        rows = dict(zip(featurized, compute_lazy(*[f.shape[0] for f in featurized.values()])))
    names = list(workflow.output_columns_)
    return {
        "X": {s: select(f, names) for s, f in featurized.items()},
        "y": {s: select(f, data.target) for s, f in featurized.items()},
        "ids": {s: select(f, id_column) if id_column else None for s, f in featurized.items()},
        "feature_names": names, "workflow": workflow, "row_counts": {s: int(n) for s, n in rows.items()},
        "parquet_dirs": folders,
    }


def select(frame: Any, columns: list[str] | str) -> Any:
    """Columns of a partitioned frame, keeping its partitions.

    A plain ``frame[columns]`` over ``read_parquet`` lets Dask push the projection into the
    reader, which then fuses files by how small the projected columns are: X and its label
    came out with 50 and 10 partitions, and xgboost.dask refuses misaligned partitions. A
    ``map_partitions`` projection keeps every selection partition for partition.
    """
    return frame.map_partitions(_take, columns, meta=frame._meta[columns])


def _take(part: Any, columns: list[str] | str) -> Any:
    return part[columns]


def _write_parquet(frames: dict[str, Any], folder: Path, backend: Backend) -> dict[str, Any]:
    """Write every split in one pass; a split's folder appears only once it is complete."""
    import dask
    import dask.dataframe as dd

    folder.mkdir(parents=True, exist_ok=True)
    temporary = {name: folder / f".{name}.partial" for name in frames}
    for path in temporary.values():
        shutil.rmtree(path, ignore_errors=True)
    writes = [frame.to_parquet(str(temporary[name]), write_index=False, compute=False)
              for name, frame in frames.items()]
    lengths = [frame.shape[0] for frame in frames.values()]
    results = compute_lazy(*writes, *lengths)
    rows = dict(zip(frames, results[len(writes):]))
    out: dict[str, Any] = {}
    with dask.config.set({"dataframe.backend": backend.dask_backend}):
        for name in frames:
            final = folder / name
            shutil.rmtree(final, ignore_errors=True)
            os.replace(temporary[name], final)
            out[name] = dd.read_parquet(str(final))
    out["__rows__"] = rows
    return out


@dataclass
class DistributedScorer:
    """Scores of one split from a Dask estimator, computed through the cluster."""

    estimator: Any
    features: Any

    def __call__(self, split: str) -> np.ndarray:
        with cluster_client() as client:
            self.estimator.client = client
            try:
                proba = self.estimator.predict_proba(self.features.X[split])
                (host,) = compute_lazy(proba) if hasattr(proba, "dask") else (proba,)
            finally:
                self.estimator.client = None
        host = np.asarray(self.features.backend.to_host(host), dtype="float64")
        return host[:, 1] if host.ndim == 2 else host


def fit_distributed(estimator: Any, features: Any, fit_kwargs: dict[str, Any], *,
                    external_memory: bool = False, stage: str = "train") -> dict[str, Any] | None:
    """Fit a Dask estimator on the training split through the cluster.

    ``external_memory`` (XGBoost only): each worker streams its share of the split's Parquet
    files into an external-memory DMatrix instead of holding it (pipeline.stages.xgboost_external);
    returns how the files were spread then, None otherwise.
    """
    with cluster_client() as client:
        if external_memory:
            from pipeline.stages.xgboost_external import fit_external_memory

            return fit_external_memory(estimator, features, client, stage=stage)
        estimator.client = client
        try:
            estimator.fit(features.X["train"], features.y["train"], **fit_kwargs)
        finally:
            estimator.client = None      # the estimator is pickled to other workers later
    return None


@dataclass
class BoosterScorer:
    """Positive-class probabilities of one partition from an XGBoost booster (binary:logistic),
    so predictions can be written partition by partition without gathering a split."""

    booster: Any
    features: list[str]
    backend: Backend

    def __call__(self, part: Any) -> np.ndarray:
        scores = self.booster.inplace_predict(part[self.features])
        return np.asarray(self.backend.to_host(scores), dtype="float64")


def partition_scorer(model: Any) -> BoosterScorer | None:
    """A per-partition scorer for a model trained on partitioned data, where there is one."""
    get_booster = getattr(model.estimator, "get_booster", None)
    if get_booster is None:
        return None
    return BoosterScorer(get_booster(), list(model.features.feature_names), model.features.backend)


def write_predictions(models: list[Any], split: str, path: Path) -> bool:
    """Predictions of partitioned features as a folder of Parquet files at ``path``, one per
    partition of the featurized split(s), computed partition by partition on the cluster.

    Gathering a split into one table is what the in-memory export does; at 5M test rows it put
    a worker past its limit. Returns False (nothing written) when a model has no per-partition
    scorer or the features were not written as Parquet: the caller then gathers as before.
    """
    import dask.dataframe as dd

    from pipeline.store import atomic_folder

    first = models[0].features
    scorers = {f"score_{m.name}": partition_scorer(m) for m in models}
    if not first.parquet_dirs or any(s is None for s in scorers.values()):
        return False
    names = list(first.parquet_dirs) if split == "all" else [split]
    keep = [first.id_column] if first.id_column else []
    meta = pd.DataFrame({**{c: pd.Series(dtype="str") for c in keep}, "split": pd.Series(dtype="str"),
                         first.target: pd.Series(dtype="int64"),
                         **{c: pd.Series(dtype="float64") for c in scorers}})
    parts = []
    for name in names:
        if not first.rows().get(name):
            continue
        frame = first.backend.read_partitioned(first.parquet_dirs[name], format="parquet")
        parts.append(frame.map_partitions(_prediction_rows, name, keep, first.target, scorers,
                                          first.backend, meta=meta))
    if not parts:
        raise DataError(f"export: split '{split}' has no rows")
    table = parts[0] if len(parts) == 1 else dd.concat(parts)
    with atomic_folder(path) as folder:
        compute_lazy(table.to_parquet(str(folder), write_index=False, compute=False))
    return True


def _prediction_rows(part: Any, split: str, keep: list[str], target: str, scorers: dict[str, Any],
                     backend: Backend) -> pd.DataFrame:
    out = {c: backend.to_host(part[c]).reset_index(drop=True) for c in keep}
    out["split"] = pd.Series([split] * len(part), dtype="str")
    out[target] = np.asarray(backend.to_host(part[target]), dtype="int64")
    for column, score in scorers.items():
        out[column] = score(part) if len(part) else np.empty(0, dtype="float64")
    return pd.DataFrame(out)
