"""The learning curve of a training run: a CSV of the per-epoch numbers and a PNG of them."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

COLUMNS = ("epoch", "seconds", "loss", "val_loss", "val_auc", "val_accuracy", "val_rmse")

# The validation numbers of each task, every one a possible early-stopping monitor. val_loss is
# the training loss on the validation rows (for regression: the MSE of the standardised target,
# comparable with ``loss``); val_rmse is in the target's own units.
VALIDATION_METRICS: dict[str, tuple[str, ...]] = {
    "binary": ("val_loss", "val_auc"),
    "multiclass": ("val_loss", "val_accuracy"),
    "regression": ("val_loss", "val_rmse"),
}
HIGHER_IS_BETTER: dict[str, bool] = {"val_loss": False, "val_auc": True, "val_accuracy": True, "val_rmse": False}
LOSS_LABELS: dict[str, str] = {
    "binary": "binary cross-entropy",
    "multiclass": "cross-entropy",
    "regression": "mean squared error (standardised target)",
}
_METRIC_LABELS = {"val_auc": "validation ROC AUC", "val_accuracy": "validation accuracy",
                  "val_rmse": "validation RMSE"}


def monitors_for(task_kind: str) -> tuple[str, ...]:
    """The early-stopping monitors that apply to ``task_kind``."""
    return VALIDATION_METRICS[task_kind]


def monitor_problem(monitor: str, task_kind: str) -> str | None:
    """Why ``monitor`` cannot watch a ``task_kind`` model (None: it can); for config checks too."""
    allowed = monitors_for(task_kind)
    if monitor in allowed:
        return None
    return (f"early_stopping.monitor {monitor!r} does not apply to a {task_kind} task; "
            f"use one of {', '.join(allowed)}")


def history_csv(history: list[dict[str, float]]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=[c for c in COLUMNS if any(c in row for row in history)],
                            extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows(history)
    return out.getvalue()


def learning_curve_figure(history: list[dict[str, float]], *, title: str, best_epoch: int = 0,
                          loss_label: str | None = None) -> Any:
    """Loss (left axis) and the task's validation metric (right axis) by epoch, the kept epoch
    marked: a matplotlib ``Figure`` (the run folder's PNG, the report's SVG). ``loss_label``
    defaults to the loss of the task whose validation metric the history holds."""
    # Figure without pyplot: no global backend state, safe in threads and without a display.
    from matplotlib.figure import Figure

    metric = next((m for m in _METRIC_LABELS if any(m in row for row in history)), None)
    if loss_label is None:
        kind = next((k for k, names in VALIDATION_METRICS.items() if metric in names), "")
        loss_label = LOSS_LABELS.get(kind, "loss")
    epochs = [row["epoch"] for row in history]
    fig = Figure(figsize=(7, 4), layout="constrained")
    ax = fig.add_subplot()
    ax.plot(epochs, [row["loss"] for row in history], marker=".", label="loss (train)")
    if any("val_loss" in row for row in history):
        ax.plot(epochs, [row.get("val_loss") for row in history], marker=".", label="val_loss")
    ax.set_xlabel("epoch")
    ax.set_ylabel(loss_label)
    if best_epoch:
        ax.axvline(best_epoch, color="grey", linestyle="--", linewidth=1, label=f"kept: epoch {best_epoch}")
    handles, labels = ax.get_legend_handles_labels()
    if metric is not None:
        right = ax.twinx()
        right.plot(epochs, [row.get(metric) for row in history], color="tab:green", marker=".", label=metric)
        right.set_ylabel(_METRIC_LABELS[metric])
        more_handles, more_labels = right.get_legend_handles_labels()
        handles, labels = handles + more_handles, labels + more_labels
    fig.legend(handles, labels, loc="outside lower center", ncols=len(labels), fontsize="small", frameon=False)
    ax.set_title(title)
    return fig


def plot_learning_curve(history: list[dict[str, float]], path: Path, *, title: str, best_epoch: int,
                        loss_label: str = LOSS_LABELS["binary"]) -> None:
    """The learning curve as a PNG at ``path``."""
    from pipeline.runs.store import atomic_destination

    fig = learning_curve_figure(history, title=title, best_epoch=best_epoch, loss_label=loss_label)
    with atomic_destination(path) as tmp:
        fig.savefig(tmp, format="png", dpi=100)
