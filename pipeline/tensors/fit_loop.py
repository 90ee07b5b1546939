"""The training loop of the tabular MLP: AdamW, mixed precision, early stopping, a history.

Written once for both devices. On a GPU it trains under ``torch.autocast`` (bf16 where the
card computes it natively, else fp16 with a ``GradScaler``); on the CPU in fp32 unless asked.
Batches come from ``TensorBatches``; losses are summed on the device and read once per epoch,
so the loop never waits for the GPU between batches. Under DDP the same loop runs on every
rank with a ``Ranks`` group (``pipeline.tensors.ranks``): the module is wrapped, the epoch's
sums and validation outputs are combined across ranks, and rank 0's early-stopping decision
is broadcast; alone it runs with ``SOLO``, whose steps do nothing.
"""

from __future__ import annotations

import contextlib
import copy
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any, ContextManager, Literal, Protocol

import torch
from torch import nn

from pipeline.tensors.batches import TensorBatches
from pipeline.tensors.objectives import Objective
from pipeline.tensors.ranks import SOLO, Ranks

Precision = Literal["auto", "fp32", "bf16", "fp16"]
# val_loss for every task; val_auc binary, val_accuracy multiclass, val_rmse regression.
Monitor = Literal["val_loss", "val_auc", "val_accuracy", "val_rmse"]
EpochCallback = Callable[[int, dict[str, float]], None]


class Progress(Protocol):
    """Where the loop reports: a line per epoch and a bar within it (a no-op off a terminal)."""

    def message(self, text: str) -> None: ...
    def bar(self, total: int, description: str) -> ContextManager[Callable[[int], None]]: ...
    def metrics(self, step: int, values: dict[str, float]) -> None: ...


class NoProgress:
    def message(self, text: str) -> None:
        pass

    def bar(self, total: int, description: str) -> ContextManager[Callable[[int], None]]:
        return contextlib.nullcontext(lambda n: None)

    def metrics(self, step: int, values: dict[str, float]) -> None:
        pass


@dataclass(frozen=True)
class FitOptions:
    epochs: int = 30
    batch_size: int = 512
    learning_rate: float = 1e-3
    weight_decay: float = 1e-4
    monitor: Monitor = "val_loss"
    patience: int = 5
    min_delta: float = 0.0
    precision: Precision = "auto"
    compile: bool | str = False
    pin_memory: bool = True
    seed: int = 42
    eval_batch_size: int = 65536
    # Batches per epoch, each of batch_size rows; None: one pass over the rows. DDP ranks all
    # run the same number (a shorter shard wraps around).
    steps_per_epoch: int | None = None
    # The task's loss and validation metrics (None: binary, as a plain network's 0/1 target).
    objective: Objective | None = None


@dataclass
class Split:
    """One split's tensors: features, optional category codes, optional labels (0/1, class
    codes or target values)."""

    x: torch.Tensor
    codes: torch.Tensor | None = None
    y: torch.Tensor | None = None

    @property
    def rows(self) -> int:
        return int(self.x.shape[0])


@dataclass
class FitResult:
    history: list[dict[str, float]]
    best_epoch: int
    stopped_early: bool
    precision: str
    device: str
    compiled: bool
    monitor: str | None
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def autocast_dtype(precision: Precision, device: torch.device) -> torch.dtype | None:
    """The autocast dtype for ``precision`` on ``device``; None means plain fp32."""
    if precision == "fp32":
        return None
    if precision == "bf16":
        return torch.bfloat16
    if precision == "fp16":
        return torch.float16
    if device.type == "cuda":
        return torch.bfloat16 if native_bf16(device) else torch.float16
    return None    # auto on CPU: fp32, the fastest and most exact there


def native_bf16(device: torch.device) -> bool:
    """Whether ``device`` computes bf16 in hardware (Ampere, sm_80, and newer).

    ``torch.cuda.is_bf16_supported()`` counts emulation by default: a T4 or V100 answers yes
    because it can hold bf16 tensors, then runs bf16 matmuls far slower than fp16. PyTorch 2.10
    to 2.13 take ``including_emulation``; a build without it falls back to the compute
    capability.
    """
    try:
        return bool(torch.cuda.is_bf16_supported(including_emulation=False))
    except TypeError:
        return torch.cuda.get_device_capability(device)[0] >= 8


def mixed_precision(precision: Precision, device: torch.device) -> tuple[torch.dtype | None, torch.amp.GradScaler]:
    """The autocast dtype and its gradient scaler: fp16 needs one (small gradients underflow
    its range), bf16 and fp32 do not."""
    dtype = autocast_dtype(precision, device)
    return dtype, torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)


class StopTraining(Exception):
    """Raised by an ``on_epoch`` callback to end training after that epoch as early stopping
    does: the best epoch's weights are kept, and the message goes into the result's notes (a
    caller with a clock whose next epoch would end past its limit)."""


def fit(
    module: nn.Module,
    train: Split,
    valid: Split | None,
    options: FitOptions = FitOptions(),
    *,
    device: torch.device | str | None = None,
    progress: Progress | None = None,
    on_epoch: EpochCallback | None = None,
    ranks: Ranks = SOLO,
) -> FitResult:
    """Train ``module`` in place on ``train``; early-stop on ``valid`` and keep its best weights.

    ``options.objective`` says the task (binary when None); ``on_epoch(epoch, row)`` is called after
    each epoch with its history row; ``StopTraining`` from it ends the training after that
    epoch, keeping the best weights, and any other exception (a tuner's pruning) ends the
    training and propagates. Under DDP (``ranks`` a process group) ``train`` and ``valid``
    are this rank's shards; the history's numbers are over every rank's rows.
    """
    progress = progress or NoProgress()
    objective = options.objective or Objective()
    objective.check_monitor(options.monitor)
    _check_outputs(module, objective)
    device = torch.device(device) if device is not None else train.x.device
    module.to(device)
    dtype, scaler = mixed_precision(options.precision, device)
    trained = ranks.wrap(module, device)
    step = torch.compile(trained, mode=None if options.compile is True else options.compile) \
        if options.compile else trained
    optimizer = make_optimizer(module, options, device)
    generator = torch.Generator().manual_seed(options.seed + ranks.rank)
    min_batch = 2 if any(isinstance(m, nn.BatchNorm1d) for m in module.modules()) else 1
    batches = TensorBatches([train.x, train.codes, train.y], options.batch_size, generator=generator,
                            device=device, min_batch=min_batch, pin_memory=options.pin_memory,
                            steps=options.steps_per_epoch)
    valid_y = _validation_labels(valid, device, ranks)
    monitor = options.monitor if valid_y is not None and valid_y.numel() else None
    notes = [] if monitor else ["no validation rows: trained every epoch, no early stopping"]
    if monitor == "val_auc" and valid_y is not None and len(torch.unique(valid_y)) < 2:
        monitor, notes = "val_loss", notes + ["validation split has one class: monitoring val_loss instead of val_auc"]
    higher_is_better = monitor is not None and objective.higher_is_better(monitor)
    best_value, best_epoch, best_state, waited = -math.inf if higher_is_better else math.inf, 0, None, 0
    history: list[dict[str, float]] = []
    started = time.perf_counter()
    stopped_early = False
    for epoch in range(1, options.epochs + 1):
        t0 = time.perf_counter()
        module.train()
        total = torch.zeros((), device=device)
        seen = 0
        with progress.bar(len(batches), f"Epoch {epoch}/{options.epochs}") as advance:
            for x, codes, y in batches:
                with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
                    logits = step(x, codes)
                    loss = objective.loss(logits, objective.targets(y))
                optimizer.zero_grad(set_to_none=True)
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
                total += loss.detach() * x.shape[0]
                seen += int(x.shape[0])
                advance(1)
        summed = ranks.total(torch.stack([total.float(), torch.tensor(float(seen), device=device)]))
        row: dict[str, float] = {"epoch": epoch, "loss": float(summed[0].item()) / max(float(summed[1].item()), 1.0)}
        if valid_y is not None and valid_y.numel():
            logits = ranks.gather(predict_logits(module, valid, device, options.eval_batch_size))
            row.update(objective.validation(logits, valid_y))
        row["seconds"] = time.perf_counter() - t0
        history.append(row)
        progress.message(epoch_line(row, options.epochs))
        report_metrics = getattr(progress, "metrics", None)      # a caller's own progress may lack it
        if report_metrics is not None:
            report_metrics(epoch, {k: v for k, v in row.items() if k != "epoch"})
        halt = None
        if on_epoch is not None:
            try:
                on_epoch(epoch, dict(row))
            except StopTraining as why:
                halt = f"stopped after epoch {epoch}: {why}"
        if monitor is None:
            if halt:
                notes.append(halt)
                stopped_early = True
                break
            continue
        value = row[monitor]
        improved = value > best_value + options.min_delta if higher_is_better else value < best_value - options.min_delta
        improved = improved or best_state is None
        stop = not improved and waited + 1 >= options.patience
        # Rank 0 decides; every rank keeps the same epoch and stops at the same one.
        improved, stop = (bool(flag) for flag in ranks.decide(torch.tensor([improved, stop], device=device)).tolist())
        if improved:
            best_value, best_epoch, waited = value, epoch, 0
            best_state = copy.deepcopy(module.state_dict())
        else:
            waited += 1
        if stop or halt:
            stopped_early = True
            if halt:
                notes.append(halt)
            break
    if best_state is not None:
        module.load_state_dict(best_state)
    else:
        best_epoch = len(history)
    module.eval()
    precision = {None: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[dtype]
    return FitResult(history=history, best_epoch=best_epoch, stopped_early=stopped_early, precision=precision,
                     device=str(device), compiled=bool(options.compile), monitor=monitor,
                     seconds=time.perf_counter() - started, notes=notes)


def _check_outputs(module: nn.Module, objective: Objective) -> None:
    width = getattr(getattr(module, "arch", None), "n_outputs", None)
    if width is not None and width != objective.n_outputs:
        raise ValueError(f"the network has {width} output(s); a {objective.task.describe()} task needs "
                         f"{objective.n_outputs}")


def make_optimizer(module: nn.Module, options: FitOptions, device: torch.device) -> torch.optim.Optimizer:
    """AdamW; the fused kernel (one kernel for all parameters) where PyTorch has one."""
    fused = device.type in ("cpu", "cuda")
    return torch.optim.AdamW(module.parameters(), lr=options.learning_rate, weight_decay=options.weight_decay,
                             fused=fused)


def epoch_line(row: dict[str, float], epochs: int) -> str:
    """``Epoch 3/20 - 1.2s - loss: 0.4100 - val_loss: 0.4300 - val_auc: 0.8450`` (Keras style)."""
    seconds = row["seconds"]
    took = f"{seconds:.1f}s" if seconds >= 1 else f"{seconds * 1000:.0f}ms"
    parts = [f"Epoch {int(row['epoch'])}/{epochs}", took, f"loss: {row['loss']:.4f}"]
    parts += [f"{key}: {row[key]:.4f}" for key in ("val_loss", "val_auc", "val_accuracy", "val_rmse") if key in row]
    return " - ".join(parts)


@torch.inference_mode()
def predict_logits(module: nn.Module, split: Split, device: torch.device, batch_size: int = 65536) -> torch.Tensor:
    """Logits (or values) for every row in order, in fp32, on ``device``: (n,) or (n, K)."""
    module.eval()
    out = [module(x, codes).float() for x, codes in _chunks(split, device, batch_size)]
    if out:
        return torch.cat(out)
    width = getattr(getattr(module, "arch", None), "n_outputs", 1)
    return torch.empty((0,) if width == 1 else (0, width), device=device)


def _chunks(split: Split, device: torch.device, size: int) -> Iterator[tuple[torch.Tensor, torch.Tensor | None]]:
    for start in range(0, split.rows, size):
        x = split.x[start:start + size].to(device, non_blocking=True)
        codes = None if split.codes is None else split.codes[start:start + size].to(device, non_blocking=True)
        yield x, codes


def _validation_labels(valid: Split | None, device: torch.device, ranks: Ranks) -> torch.Tensor | None:
    """The validation labels of every rank, in rank order (gathered once: they do not change);
    None when no rank has any (then no rank validates)."""
    labels = valid.y if valid is not None else None
    if ranks.world == 1:
        return labels.to(device) if labels is not None and valid.rows else None
    if labels is None:     # no validation split on any rank (shards are planned alike)
        labels = torch.empty((0,), dtype=torch.float32)
    rows = labels.to(device)
    # One dtype every collective backend carries: class codes as int64, targets as float64.
    wide = torch.float64 if rows.is_floating_point() else torch.int64
    gathered = ranks.gather(rows.to(wide))
    return gathered if gathered.numel() else None
