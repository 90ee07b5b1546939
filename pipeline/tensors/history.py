"""The learning curve of a training run: a CSV of the per-epoch numbers and a PNG of them."""

from __future__ import annotations

import csv
import io
from pathlib import Path

COLUMNS = ("epoch", "seconds", "loss", "val_loss", "val_auc")


def history_csv(history: list[dict[str, float]]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=[c for c in COLUMNS if any(c in row for row in history)],
                            extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows(history)
    return out.getvalue()


def plot_learning_curve(history: list[dict[str, float]], path: Path, *, title: str, best_epoch: int) -> None:
    """Loss (left axis) and validation AUC (right axis) by epoch, the kept epoch marked."""
    # Figure without pyplot: no global backend state, safe in threads and without a display.
    from matplotlib.figure import Figure

    from pipeline.store import atomic_destination

    epochs = [row["epoch"] for row in history]
    fig = Figure(figsize=(7, 4), layout="constrained")
    ax = fig.add_subplot()
    ax.plot(epochs, [row["loss"] for row in history], marker=".", label="loss (train)")
    if any("val_loss" in row for row in history):
        ax.plot(epochs, [row.get("val_loss") for row in history], marker=".", label="val_loss")
    ax.set_xlabel("epoch")
    ax.set_ylabel("binary cross-entropy")
    if best_epoch:
        ax.axvline(best_epoch, color="grey", linestyle="--", linewidth=1, label=f"kept: epoch {best_epoch}")
    handles, labels = ax.get_legend_handles_labels()
    if any("val_auc" in row for row in history):
        auc = ax.twinx()
        auc.plot(epochs, [row.get("val_auc") for row in history], color="tab:green", marker=".", label="val_auc")
        auc.set_ylabel("validation ROC AUC")
        more_handles, more_labels = auc.get_legend_handles_labels()
        handles, labels = handles + more_handles, labels + more_labels
    fig.legend(handles, labels, loc="outside lower center", ncols=len(labels), fontsize="small", frameon=False)
    ax.set_title(title)
    with atomic_destination(path) as tmp:
        fig.savefig(tmp, format="png", dpi=100)
