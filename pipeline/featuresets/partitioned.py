"""``PartitionedFeatures``: lazy Dask frames per split, trained and scored through the cluster.

Building them fits the workflow with one pass per dependency phase, transforms every split
with ``map_partitions`` and, given a folder, writes each split as partitioned Parquet (one
more pass for all three splits together, into temporary folders renamed when complete); the
features then read those files lazily. Training goes through ``pipeline.distributed``: a
Dask estimator (``xgboost.dask`` on both devices, ``cuml.dask`` on GPUs) or XGBoost's
external memory over the Parquet files; scores come back as host vectors.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from pipeline.backends import Backend, compute_lazy
from pipeline.distributed.predictions import write_predictions as write_partition_predictions
from pipeline.distributed.dask_estimators import DistributedScorer, fit_distributed, use_external_memory
from pipeline.core.errors import DataError
from pipeline.features import FeatureOp, FeatureWorkflow
from pipeline.featuresets.feature_set import TRAIN, FeatureSet, Scorer, ScoredModel
from pipeline.featuresets.in_memory import InMemoryFeatures
from pipeline.core.problems import BINARY, Task


# The fewest partitions a host sample reads (spread over the split), when it needs fewer.
SAMPLE_PARTITIONS = 4


@dataclass
class PartitionedFeatures(FeatureSet):
    """X, y and ids are lazy Dask collections (over Parquet when written); rows counted once."""

    X: dict[str, Any]
    y: dict[str, Any]
    ids: dict[str, Any]               # lazy series per split, or None without an id column
    feature_names: list[str]
    workflow: FeatureWorkflow
    target: str
    id_column: str | None
    backend: Backend
    row_counts: dict[str, int] = field(default_factory=dict)
    # The Parquet folder of each split when the features were written (training that reads
    # the files itself needs them); empty when nothing was written.
    parquet_dirs: dict[str, str] = field(default_factory=dict)
    # Passes over the training data the workflow's fit took (one per dependency phase).
    passes: int = 0
    categorical_columns: list[str] = field(default_factory=list)
    uid: str = field(default_factory=lambda: uuid.uuid4().hex)
    task: Task = BINARY

    partitioned: ClassVar[bool] = True
    distributed: ClassVar[bool] = True

    def rows(self) -> dict[str, int]:
        return dict(self.row_counts)

    def in_memory(self, refusal: str) -> InMemoryFeatures:
        raise DataError(refusal)

    def host_sample(self, split: str, rows: int) -> tuple[np.ndarray, np.ndarray]:
        """Whole partitions evenly spaced over the split (as many as hold about ``rows`` rows at
        its average partition size, and at least ``SAMPLE_PARTITIONS``), features and labels
        computed together; then ``rows`` rows evenly spaced over them. A few partitions are
        read, never the split."""
        x, y, total = self.X[split], self.y[split], self.row_counts.get(split, 0)
        parts = x.npartitions
        if total > rows:
            wanted = min(parts, max(SAMPLE_PARTITIONS, -(-parts * rows // total)))
            picked = sorted(set(np.linspace(0, parts - 1, wanted).round().astype(int).tolist()))
            x, y = x.partitions[picked], y.partitions[picked]
        features, labels = (self.backend.to_host(part) for part in compute_lazy(x, y))
        matrix, labels = features.to_numpy(dtype="float32", na_value=np.nan), labels.to_numpy()
        if len(matrix) > rows:
            keep = np.linspace(0, len(matrix) - 1, rows).astype("int64")
            return matrix[keep], labels[keep]
        return matrix, labels

    def fit(self, estimator: Any, fit_kwargs: dict[str, Any], *, stage: str, model: str = "",
            external_memory: bool | None = None) -> dict[str, Any] | None:
        """Through the cluster; streaming the Parquet files by default where ``model`` can."""
        streams = use_external_memory(model, external_memory, has_files=bool(self.parquet_dirs))
        return fit_distributed(estimator, self, fit_kwargs, stage=stage, external_memory=streams)

    def fit_facts(self, streamed: dict[str, Any] | None) -> dict[str, Any]:
        return {"external_memory": streamed or False}

    def scorer(self, estimator: Any) -> Scorer:
        return DistributedScorer(estimator, self)

    def write_predictions(self, models: Sequence[ScoredModel], split: str, path: Path) -> list[Path]:
        """A folder of Parquet files, one per partition, scored where each partition lies; a
        gathered table (as in memory) where a model has no per-partition scorer or the
        features were not written as Parquet."""
        if write_partition_predictions(self, models, split, path):
            return sorted(path.glob("*.parquet"))
        return super().write_predictions(models, split, path)

    def layout_facts(self) -> dict[str, Any]:
        return {"passes": self.passes, "partitions": {s: int(x.npartitions) for s, x in self.X.items()}}


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


def build_partitioned(data: Any, ops: Sequence[FeatureOp | dict[str, Any]], *, id_column: str | None,
                      output_dir: Path | None) -> PartitionedFeatures:
    """Fit on the training split (``SplitData`` of Dask frames) and featurize every split;
    with ``output_dir``, written there as Parquet that the features read. The labels are the
    split's as they are (int8 0/1, int32 class codes, float32 numbers) and the task travels on."""
    backend: Backend = data.backend
    keep = [data.target] + ([id_column] if id_column else [])
    train = data.frames[TRAIN]
    missing = [c for c in keep if c not in train.columns]
    if missing:
        raise DataError(f"column(s) {missing} not in the data")
    workflow = FeatureWorkflow(ops, backend=backend)
    workflow.fit(train.drop(columns=keep))
    meta = featurize_partition(train._meta, workflow, keep)
    featurized = {name: frame.map_partitions(featurize_partition, workflow, keep, meta=meta)
                  for name, frame in data.frames.items()}
    if output_dir is not None:
        featurized, rows = _write_parquet(featurized, output_dir, backend)
        folders = {name: str(output_dir / name) for name in featurized}
    else:
        folders = {}
        rows = dict(zip(featurized, compute_lazy(*[f.shape[0] for f in featurized.values()])))
    names = list(workflow.output_columns_)
    return PartitionedFeatures(
        X={s: select(f, names) for s, f in featurized.items()},
        y={s: select(f, data.target) for s, f in featurized.items()},
        ids={s: select(f, id_column) if id_column else None for s, f in featurized.items()},
        feature_names=names, workflow=workflow, target=data.target, id_column=id_column, backend=backend,
        row_counts={s: int(n) for s, n in rows.items()}, parquet_dirs=folders, passes=workflow.passes_,
        task=data.task,
    )


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


def _write_parquet(frames: dict[str, Any], folder: Path, backend: Backend) -> tuple[dict[str, Any], dict[str, int]]:
    """Write every split in one pass; a split's folder appears only once it is complete.
    Returns the splits read back from their files, and their row counts."""
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
    for name in frames:
        final = folder / name
        shutil.rmtree(final, ignore_errors=True)
        os.replace(temporary[name], final)
        out[name] = backend.read_partitioned(final, format="parquet")
    return out, rows
