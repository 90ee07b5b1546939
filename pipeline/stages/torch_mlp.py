"""``torch``: a tabular MLP in PyTorch, trained on the same features as the other models.

It serves the split's task: one logit and binary cross-entropy (binary), K logits and
cross-entropy (multiclass), one output and the MSE of the standardised target (regression,
predicted back in the target's units).

The feature matrices reach PyTorch through DLPack without a copy (the manifest lists every
hand-off and the bytes it copied), batches are slices of those tensors, and the result is a
``TrainedModel`` like any other: ``evaluate`` ranks it and ``export`` saves it.
PyTorch is imported when the stage runs, not when a config is validated.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, ValidationError, field_validator

from pipeline.models.registry import MLP_MODEL
from pipeline.core.errors import BackendUnavailable, ConfigError, ConfigIssue, DataError
from pipeline.featuresets import FeatureSet, InMemoryFeatures
from pipeline.featuresets.folds import HELD_OUT, without_validation
from pipeline.backends.headers import HeaderReader
from pipeline.stages.spec import (
    KeyPath, Preview, StageContext, StageProgress, StageSpec, model_preview, only_input, register_stage,
)
from pipeline.stages.training.cross_validation import cross_validate_model
from pipeline.stages.train import SplitScores, TrainedModel
from pipeline.stages.training.tuning import TorchTrainer, TuneSpec, parse_duration, run_search, tune_problems
from pipeline.core.problems import Task
from pipeline.tensors.handoff import Handoff
from pipeline.tensors.learning_curve import monitor_problem


class EarlyStopping(BaseModel):
    model_config = ConfigDict(extra="forbid")

    monitor: Literal["val_loss", "val_auc", "val_accuracy", "val_rmse"] = Field(
        "val_loss",
        description="Validation metric to watch: val_loss for every task (the training loss on the validation "
                    "rows; for regression the MSE of the standardised target), val_auc for binary, val_accuracy "
                    "for multiclass, val_rmse (in the target's units) for regression.")
    patience: int = Field(5, ge=1, description="Epochs without improvement before stopping.")
    min_delta: float = Field(0.0, ge=0, allow_inf_nan=False, description="Smallest change that counts as an improvement.")


class DistributedSpec(BaseModel):
    """``distributed:`` of the torch stage: PyTorch DDP over several ranks."""

    model_config = ConfigDict(extra="forbid")

    processes: PositiveInt | None = Field(
        None, description="Ranks to train on. Local: required on the CPU, default one per visible GPU. On a Dask "
                          "cluster: default one per worker (per GPU worker on GPUs), else the first N workers.")
    launch: Literal["auto", "local", "cluster"] = Field(
        "auto", description="Where the ranks run: local processes, or one per worker of the run's Dask cluster "
                            "(auto: the cluster when the run has one, else local processes).")
    timeout: float = Field(
        120.0, description="How long a rank waits in a collective for its peers before the stage fails "
                           "(90, 90s, 2m). A rank whose process or worker dies fails the stage at once.")

    @field_validator("timeout", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> float:
        return parse_duration(value)


class TorchSpec(StageSpec):
    kind: Literal["torch"]
    hidden: list[PositiveInt] = Field(default_factory=lambda: [128, 64], description="Hidden layer widths.")
    dropout: float = Field(0.1, ge=0, lt=1, allow_inf_nan=False, description="Dropout after each hidden layer.")
    batch_norm: bool = Field(False, description="BatchNorm after each hidden linear layer.")
    embedding_dims: dict[str, PositiveInt] = Field(
        default_factory=dict,
        description="Embedding width per categorified column; others get min(32, 1.6 n^0.56).",
    )
    epochs: PositiveInt = Field(30, description="Most epochs to train.")
    batch_size: PositiveInt = Field(512, description="Rows per optimizer step.")
    learning_rate: float = Field(1e-3, gt=0, allow_inf_nan=False, description="AdamW learning rate.")
    standardize: bool = Field(
        True, description="Scale the continuous columns inside the network by the training split's mean and "
                          "standard deviation (from up to 100,000 rows spread over it), saved in architecture.json: "
                          "unscaled columns (an amount in thousands beside a rate) stall the optimizer; columns "
                          "already standardised stay as they are.")
    weight_decay: float = Field(1e-4, ge=0, allow_inf_nan=False, description="AdamW weight decay.")
    early_stopping: EarlyStopping = Field(default_factory=EarlyStopping,
                                          description="Stop when the validation metric stops improving; the best epoch's weights are kept.")
    precision: Literal["auto", "fp32", "bf16", "fp16"] = Field(
        "auto", description="auto: bf16 (or fp16 + GradScaler) autocast on a GPU, fp32 on the CPU.")
    compile: bool | Literal["default", "reduce-overhead", "max-autotune"] = Field(
        False, description="Train through torch.compile (true or a mode name).")
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="auto: where the features are (cuda for the GPU backend).")
    pin_memory: bool = Field(True, description="Pinned, prefetched batches when host data trains on a GPU.")
    distributed: DistributedSpec | None = Field(
        None, description="Data-parallel training (PyTorch DDP: gloo on CPUs, NCCL on GPUs) on several ranks, "
                          "each on every n-th row; batch_size stays the rows of one optimizer step, shared out.")
    tune: TuneSpec | None = Field(
        None, description="Search these fields with Optuna before training (trials scored on the valid split "
                          "unless scoring: cv, pruned on the validation loss per epoch; trial 0 is the fields as "
                          "given), then train the best if it beats them (by more than the folds' spread with cv).")
    min_inputs = 1
    max_inputs = 1

    def preview(self, stage: str, inputs: Mapping[str, Preview], headers: HeaderReader) -> Preview:
        return model_preview(inputs)

    def preview_problems(self, inputs: Mapping[str, Preview]) -> list[tuple[KeyPath, str]]:
        return tune_problems(self.tune, inputs)

    @field_validator("tune")
    @classmethod
    def _tunable_fields(cls, tune: TuneSpec | None) -> TuneSpec | None:
        if tune is not None:
            problems = (tune.unknown_params(TORCH_TUNABLE, "the torch stage")
                        or tune.value_problems(_torch_value_problem))
            if problems:
                raise ValueError("; ".join(problems))
        return tune


# Fields a tune: space may search: what shapes the model and its training, not where or how fast it runs.
TORCH_TUNABLE = tuple(name for name in TorchSpec.model_fields if name not in {
    "kind", "inputs", "description", "budget", "tune", "early_stopping", "precision", "compile", "device", "pin_memory",
    "distributed"})


def _torch_value_problem(field_name: str, value: Any) -> str | None:
    """Why ``value`` cannot be the torch stage's ``field_name`` (a tune range's end), or None."""
    try:
        TorchSpec.model_validate({"kind": "torch", field_name: value})
    except ValidationError as exc:
        return "; ".join(error["msg"] for error in exc.errors())
    return None


@dataclass
class TorchTrainedModel(TrainedModel):
    """A ``TrainedModel`` whose estimator is an ``MLPClassifier``, with its training record."""

    history: list[dict[str, float]] = field(default_factory=list)
    fit_result: dict[str, Any] = field(default_factory=dict)
    handoffs: list[Handoff] = field(default_factory=list)
    # How a DDP training ran (ranks, launch, shards, bytes per epoch); None in one process.
    distributed: dict[str, Any] | None = None

    def export_meta(self) -> dict[str, Any]:
        """Scoring needs the categorified columns' codes beside the matrix (the embeddings)."""
        return {"categorical_columns": self.features.categorical_columns,
                "best_epoch": self.fit_result.get("best_epoch")}

    def scorer_for(self, features: FeatureSet) -> Any:
        return TorchScorer(self.estimator, features.in_memory("the MLP scores matrices in memory")
                           .matching(self.features.feature_names))


def train_torch(
    features: FeatureSet,
    *,
    name: str = MLP_MODEL,
    seed: int = 42,
    progress: StageProgress | None = None,
    on_epoch: Callable[[int, dict[str, float]], None] | None = None,
    **params: Any,
) -> TorchTrainedModel:
    """Train the tabular MLP on ``features``; ``params`` are the ``torch`` stage's fields.

    The loss, output width and validation metrics follow ``features.task`` (binary
    cross-entropy, cross-entropy over K classes, MSE of the standardised target).
    ``on_epoch(epoch, history_row)`` runs after each epoch; what it raises (a tuner's
    ``optuna.TrialPruned``) stops training and propagates from here.
    """
    import torch

    from pipeline.tensors.classifier import MLPClassifier
    from pipeline.tensors.mlp import MLPArchitecture, default_embedding_dim
    from pipeline.tensors.objectives import Objective
    from pipeline.tensors.fit_loop import FitOptions, fit

    spec = TorchSpec(kind="torch", **params)
    if spec.distributed is None or not features.partitioned:
        features = features.in_memory(
            "the torch stage trains partitioned data only with distributed: (DDP ranks that each read their "
            "share of the features' Parquet files); add distributed: {} to the stage, use model: xgboost in a "
            "train stage (xgboost.dask), or load without partitioned: true")
    task = features.task
    check_monitor(spec.early_stopping.monitor, task)
    if features.rows()["train"] == 0:
        raise DataError("the training split is empty")
    device = _torch_device(spec.device, features)
    if features.partitioned:          # the ranks read the files: nothing is handed over here
        handoffs: list[Handoff] = []
        objective = _partitioned_objective(features)
    else:
        splits, handoffs = _tensor_splits(features)
        _check_class_codes(splits, task)
        objective = Objective.for_training(task, splits["train"].y)

    cardinalities = features.workflow.categorical_cardinalities()
    unknown = sorted(set(spec.embedding_dims) - set(features.categorical_columns))
    if unknown:                         # a config's mistake, not the data's: exit 2 at the key
        raise ConfigError([ConfigIssue(f"stages.{name}.embedding_dims", (
            f"names {unknown}, which are not categorified columns (categorified: "
            f"{features.categorical_columns or 'none'}; a categorify op makes a column one)"))])
    arch = MLPArchitecture(
        n_features=len(features.feature_names),
        continuous_index=features.continuous_index(),
        cardinalities=[cardinalities[c] for c in features.categorical_columns],
        embedding_dims=[spec.embedding_dims.get(c) or default_embedding_dim(cardinalities[c])
                        for c in features.categorical_columns],
        hidden=list(spec.hidden), dropout=spec.dropout, batch_norm=spec.batch_norm, n_outputs=task.n_outputs,
        **(_input_moments(features) if spec.standardize else {}),
    )
    options = FitOptions(
        epochs=spec.epochs, batch_size=spec.batch_size, learning_rate=spec.learning_rate,
        weight_decay=spec.weight_decay, monitor=spec.early_stopping.monitor,
        patience=spec.early_stopping.patience, min_delta=spec.early_stopping.min_delta,
        precision=spec.precision, compile=spec.compile, pin_memory=spec.pin_memory, seed=seed, objective=objective,
    )
    if spec.distributed is not None:
        if on_epoch is not None:
            raise ValueError("an epoch callback (a tuner's pruning) runs in one process: train without distributed")
        return _train_distributed(spec, features, arch, options, device, name=name, progress=progress,
                                  handoffs=handoffs)
    # Seed weights and dropout without disturbing the caller's global random state. PyTorch's
    # generator is the process's: two runs in two threads of one process (a service) drew from
    # it in turn and trained other weights than their seeds give, so fits take turns.
    cuda_devices = [device.index if device.index is not None else torch.cuda.current_device()] \
        if device.type == "cuda" else []
    with _TORCH_RANDOM, torch.random.fork_rng(devices=cuda_devices):
        torch.manual_seed(seed)
        module = arch.build()
        result = fit(module, splits["train"], splits.get("valid"), options, device=device, progress=progress,
                     on_epoch=on_epoch)
    return _trained(spec, features, name, MLPClassifier(module, device, objective), result.to_dict(), handoffs)


# Held while a fit draws from PyTorch's process-wide random generator (see ``train_mlp``).
_TORCH_RANDOM = threading.RLock()

# Training rows the input scaling is estimated from (spread over the split; all of a smaller one).
STANDARDIZE_ROWS = 100_000


def _input_moments(features: FeatureSet) -> dict[str, list[float]]:
    """``input_mean`` and ``input_std`` of the continuous columns, from a sample of the training
    split (any layout: partitioned features give their sample too); a constant column's std is 1."""
    import numpy as np

    from pipeline.featuresets.feature_set import TRAIN

    columns = features.continuous_index()
    sample = np.asarray(features.host_sample(TRAIN, STANDARDIZE_ROWS)[0], dtype="float64")[:, columns]
    if not sample.size:
        return {"input_mean": [0.0] * len(columns), "input_std": [1.0] * len(columns)}
    with np.errstate(all="ignore"):
        mean = np.nan_to_num(np.nanmean(sample, axis=0)) if np.isnan(sample).any() else sample.mean(axis=0)
        std = np.nan_to_num(np.nanstd(sample, axis=0)) if np.isnan(sample).any() else sample.std(axis=0)
    std = np.where(std > 1e-12, std, 1.0)
    return {"input_mean": mean.tolist(), "input_std": std.tolist()}


def _tensor_splits(features: InMemoryFeatures) -> tuple[dict[str, Any], list[Handoff]]:
    """Every split with rows as tensors, shared with the feature matrices through DLPack."""
    from pipeline.tensors.handoff import to_torch
    from pipeline.tensors.fit_loop import Split

    handoffs: list[Handoff] = []
    splits: dict[str, Split] = {}
    for split, rows in features.rows().items():
        if not rows:
            continue
        x, h_x = to_torch(features.X[split], features.backend, f"{split}.X")
        y, h_y = to_torch(features.y[split], features.backend, f"{split}.y")
        handoffs += [h_x, h_y]
        codes = None
        if features.categorical_columns:
            codes, h_c = to_torch(features.codes[split], features.backend, f"{split}.codes")
            handoffs.append(h_c)
        splits[split] = Split(x=x, codes=codes, y=y)
    return splits, handoffs


def _partitioned_objective(features: FeatureSet) -> Any:
    """The task's objective; for regression standardised by the training target's mean and
    standard deviation, computed over its partitions through the cluster."""
    from pipeline.backends import cluster_client, compute_lazy
    from pipeline.tensors.objectives import Objective

    if features.task.kind != "regression":
        return Objective(features.task)
    y = features.y["train"].astype("float64")
    with cluster_client():
        mean, square = compute_lazy(y.mean(), (y * y).mean())
    mean, square = float(mean), float(square)
    return Objective.for_moments(features.task, mean, max(square - mean * mean, 0.0) ** 0.5)


def _split_scorer(classifier: Any, features: FeatureSet) -> Any:
    """Scores of a split: the matrices handed to PyTorch again in memory; partitioned, each
    partition scored where it lies."""
    if not features.partitioned:
        return TorchScorer(classifier, features)
    from pipeline.distributed.predictions import PartitionScores, partition_scorer

    return PartitionScores(partition_scorer(classifier, features.feature_names, features.backend), features)


def _trained(spec: TorchSpec, features: FeatureSet, name: str, classifier: Any, fit_result: dict[str, Any],
             handoffs: list[Handoff], distributed: dict[str, Any] | None = None) -> TorchTrainedModel:
    params_used = spec.model_dump(mode="json", exclude={"kind", "inputs", "description", "tune"})
    return TorchTrainedModel(
        name=name, model=MLP_MODEL, estimator=classifier, features=features,
        scores=SplitScores(_split_scorer(classifier, features), features),
        params=params_used, fit_seconds=fit_result["seconds"], history=fit_result["history"],
        fit_result=fit_result, handoffs=handoffs, distributed=distributed,
    )


def _train_distributed(spec: TorchSpec, features: FeatureSet, arch: Any, options: Any, device: Any, *, name: str,
                       progress: Any, handoffs: list[Handoff]) -> TorchTrainedModel:
    """DDP across ranks (``pipeline.distributed.torch_ddp``); rank 0's weights become the model,
    loaded on the stage's device to be scored and exported like any other."""
    from pipeline.backends import has_cluster
    from pipeline.distributed.torch_ddp import Placement, check_placement, train_ddp
    from pipeline.tensors.classifier import MLPClassifier

    objective = options.objective
    wanted = spec.distributed
    placement = Placement(check_placement(wanted.launch, has_cluster()), wanted.processes, wanted.timeout)
    outcome = train_ddp(features, arch, options, placement=placement, device=device, stage=name,
                        progress=progress)
    module = arch.build()
    module.load_state_dict(outcome.state)
    return _trained(spec, features, name, MLPClassifier(module, device, objective), outcome.fit,
                    handoffs + outcome.handoffs, outcome.facts)


@dataclass
class TorchScorer:
    """Scores of one split: its matrices handed to PyTorch again (zero-copy) and predicted.

    Holds the features, not tensors, so a pickled model (sent to another Dask worker) does
    not carry a second copy of every split."""

    classifier: Any
    features: InMemoryFeatures

    def __call__(self, split: str) -> Any:
        from pipeline.tensors.handoff import to_torch
        from pipeline.tensors.fit_loop import Split

        backend = self.features.backend
        x, _ = to_torch(self.features.X[split], backend, f"{split}.X")
        codes = to_torch(self.features.codes[split], backend, f"{split}.codes")[0] \
            if self.features.categorical_columns else None
        return self.classifier.predict_split(Split(x=x, codes=codes))


def check_monitor(monitor: str, task: Task) -> None:
    """A monitor another task's metric (val_auc on a regression) is refused before training."""
    problem = monitor_problem(monitor, task.kind)
    if problem:
        raise DataError(f"torch stage: {problem}")


def _check_class_codes(splits: dict[str, Any], task: Task) -> None:
    """Multiclass labels must be codes 0..K-1: cross-entropy on a CUDA device would otherwise
    stop the process with a device-side assert instead of an error."""
    if task.kind != "multiclass":
        return
    for name, split in splits.items():
        if split.y is not None and split.rows:
            low, high = int(split.y.min()), int(split.y.max())
            if low < 0 or high >= task.n_outputs:
                raise DataError(f"{name} labels must be class codes 0..{task.n_outputs - 1} for "
                                f"{task.describe()}; found {low}..{high}")


def _torch_device(requested: str, features: FeatureSet) -> Any:
    import torch

    if requested == "auto":
        return torch.device("cuda" if features.backend.name == "gpu" else "cpu")
    if requested == "cuda" and not torch.cuda.is_available():
        raise BackendUnavailable("torch stage: device 'cuda' was asked for but PyTorch sees no CUDA device "
                                 f"(torch {torch.__version__}); use device: auto or cpu")
    return torch.device(requested)


@register_stage("torch", TorchSpec, produces=TorchTrainedModel, accepts=(FeatureSet,), resources=("gpu",))
def run_torch(spec: TorchSpec, ctx: StageContext, inputs) -> TorchTrainedModel:
    from pipeline.runs.store import atomic_write_json, atomic_write_text
    from pipeline.tensors.learning_curve import history_csv, plot_learning_curve

    params = spec.model_dump(exclude={"kind", "inputs", "description", "tune"})
    # tune: search first (each trial in this process), then train the best fields as any others.
    trial_params = {**params, "distributed": None}
    tuning = run_search(spec.tune, TorchTrainer(train_torch, trial_params, seed=ctx.seed), only_input(inputs), ctx) \
        if spec.tune is not None else None
    params.update(tuning.chosen_params if tuning is not None else {})
    trained = train_torch(only_input(inputs), name=ctx.stage, seed=ctx.seed, progress=ctx.progress, **params)
    trained.tuning = tuning.to_dict() if tuning is not None else None
    fit_result = trained.fit_result
    ctx.facts.update({
        "device": fit_result["device"], "precision": fit_result["precision"],
        "epochs_run": len(trained.history), "best_epoch": fit_result["best_epoch"],
        "stopped_early": fit_result["stopped_early"], "fit_seconds": round(trained.fit_seconds, 3),
        "handoffs": [h.to_dict() for h in trained.handoffs],
        "bytes_copied": sum(h.bytes_copied for h in trained.handoffs),
    })
    if fit_result["notes"]:
        ctx.facts["notes"] = fit_result["notes"]
    if trained.distributed is not None:
        ctx.facts["distributed"] = trained.distributed
    if ctx.artifacts_dir is not None:
        atomic_write_text(ctx.artifact_path("history.csv"), history_csv(trained.history))
        atomic_write_json(ctx.artifact_path("fit.json"), fit_result)
        plot_learning_curve(trained.history, ctx.artifact_path("learning_curve.png"),
                            title=f"{ctx.stage}: learning curve", best_epoch=fit_result["best_epoch"],
                            loss_label=trained.estimator.objective.loss_label)
    if trained.features.fold_count():     # folds: k on the split: the same network trained per fold
        cross_validate_model(ctx, trained, lambda fold: train_torch(
            without_validation(fold), name=ctx.stage, seed=ctx.seed, **params).scores[HELD_OUT])
    return trained
