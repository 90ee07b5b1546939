"""The report's figures: matplotlib drawn to inline SVG text.

Static SVG rather than a JavaScript charting library: the page must open offline from a mail
attachment, and an inlined plotting library (Plotly's is ~4.5 MB) would take the whole
5 MB budget. Text stays text (``svg.fonttype: none``), so a figure is a few tens of kB and
searchable. Every artist that belongs to a model carries the id ``<figure>--m<i>`` (i: the
model's position in the report), which the page's model switches use to show or hide a model
in every figure at once.

Figures are drawn from the numbers the run recorded (curves.json, metrics.json, the stage
records), never recomputed from data, so what a figure shows is what the record holds.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:     # matplotlib is imported when a figure is drawn: a CLI that draws none
    from matplotlib.figure import Figure     # (validate, a run that fails) does not pay ~1 s for it

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf")
STATUS_COLOURS = {"succeeded": "#2ca02c", "cached": "#9ecae1", "failed": "#d62728", "interrupted": "#ff7f0e",
                  "running": "#bcbd22", "pending": "#cccccc"}


def colour(index: int) -> str:
    return PALETTE[index % len(PALETTE)]


def model_id(figure: str, index: int) -> str:
    """The SVG id of a model's artists in ``figure`` (what the page's switches look for)."""
    return f"{figure}--m{index}"


def to_svg(fig: Figure) -> str:
    """The figure as SVG text without the XML prolog (it is inlined into HTML)."""
    from matplotlib import rc_context

    buffer = io.StringIO()
    # Text as text; ids that do not change from build to build.
    with rc_context({"svg.fonttype": "none", "svg.hashsalt": "pipeline-report"}):
        fig.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None})
    text = buffer.getvalue()
    return text[text.index("<svg"):]


def _figure(width: float = 5.2, height: float = 3.6, *, left: float = 0.13, right: float = 0.97,
            bottom: float = 0.14, top: float = 0.91) -> tuple[Figure, Any]:
    """A figure with fixed margins: a constrained layout draws every figure twice to measure
    it, which was 40% of building a report."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    fig.subplots_adjust(left=left, right=right, bottom=bottom, top=top)
    return fig, fig.add_subplot()


# ------------------------------------------------------------------------------ run
def timeline(stages: Sequence[Mapping[str, Any]]) -> str:
    """Stages as bars from their start to their end (seconds since the run began)."""
    height = 0.45 * max(len(stages), 2) + 1.2
    longest = max((len(str(stage["name"])) for stage in stages), default=4)
    fig, ax = _figure(7.5, height, left=min(0.45, 0.03 + 0.0105 * longest), right=0.98,
                      bottom=0.75 / height, top=1 - 0.2 / height)
    for row, stage in enumerate(stages):
        width = max(stage["end"] - stage["start"], 0.0)
        ax.barh(row, width if width > 0 else 0.001, left=stage["start"], height=0.6,
                color=STATUS_COLOURS.get(stage["status"], "#999999"), edgecolor="#555555", linewidth=0.5)
        ax.text(stage["start"] + width, row, f"  {stage['label']}", va="center", fontsize="x-small")
    ax.set_yticks(range(len(stages)), [stage["name"] for stage in stages], fontsize="small")
    ax.invert_yaxis()
    ax.set_xlabel("seconds since the run started")
    ax.set_xlim(0, max([stage["end"] for stage in stages] + [0.001]) * 1.3)    # room for the labels
    handles = [ax.bar(0, 0, color=colour_, label=status) for status, colour_ in STATUS_COLOURS.items()
               if any(stage["status"] == status for stage in stages)]
    ax.legend(handles=handles, fontsize="x-small", loc="lower right", frameon=False)
    return to_svg(fig)


# --------------------------------------------------------------------------- binary
@dataclass(frozen=True)
class CurveAxes:
    """One kind of curve: where its points are (``curves[model][key][x|y]``), its labels, its
    reference line (``chance``: the diagonal; ``one``: y = 1) and the metric of its area."""

    key: str
    x: str
    y: str
    xlabel: str
    ylabel: str
    title: str
    diagonal: str | None = None
    area: str | None = None


BINARY_CURVES = (
    CurveAxes("roc", "fpr", "tpr", "false positive rate", "true positive rate", "ROC curve", "chance", "roc_auc"),
    CurveAxes("pr", "recall", "precision", "recall", "precision", "Precision-recall curve", None, "pr_auc"),
    CurveAxes("gain", "fraction_rows", "fraction_positives", "fraction of rows, highest scores first",
              "fraction of positives found", "Cumulative gain", "chance"),
    CurveAxes("lift", "fraction_rows", "lift", "fraction of rows, highest scores first", "lift over the base rate",
              "Lift", "one"),
)


def curve_lines(figure: str, models: Sequence[str], curves: Mapping[str, Mapping[str, Any]], axes: CurveAxes, *,
                title: str | None = None, legend: Mapping[str, str] | None = None) -> str:
    """One line per model (those whose curves hold ``axes.key``) from ``curves[model][key][x|y]``;
    ``title`` in place of the axes' own."""
    key, x, y, diagonal = axes.key, axes.x, axes.y, axes.diagonal
    fig, ax = _figure()
    for index, name in enumerate(models):
        points = curves.get(name, {}).get(key)
        if not points:
            continue
        label = legend.get(name, name) if legend else name
        (line,) = ax.plot(points[x], points[y], color=colour(index), linewidth=1.5, label=label)
        line.set_gid(model_id(figure, index))
    if diagonal == "chance":
        ax.plot([0, 1], [0, 1], color="#999999", linestyle="--", linewidth=1, label="chance")
    elif diagonal == "one":
        ax.axhline(1.0, color="#999999", linestyle="--", linewidth=1, label="no model")
    ax.set_xlabel(axes.xlabel)
    ax.set_ylabel(axes.ylabel)
    ax.set_title(title or axes.title, fontsize="medium")
    ax.grid(alpha=0.3)
    _legend(ax, fontsize="x-small", frameon=False)
    return to_svg(fig)


def overlay(figure: str, lines: Sequence[tuple[str, Sequence[float], Sequence[float], int, str]], *, xlabel: str,
            ylabel: str, title: str) -> str:
    """Lines of several runs on one plot: (label, xs, ys, model index, line style) each."""
    fig, ax = _figure()
    for label, xs, ys, index, style in lines:
        (line,) = ax.plot(xs, ys, color=colour(index), linestyle=style, linewidth=1.4, label=label)
        line.set_gid(model_id(figure, index))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize="medium")
    ax.grid(alpha=0.3)
    _legend(ax, fontsize="xx-small", frameon=False, ncols=2)
    return to_svg(fig)


def calibration(figure: str, models: Sequence[str], curves: Mapping[str, Mapping[str, Any]]) -> str:
    """Mean score against the positive rate per score bin, the perfect diagonal dashed."""
    fig, ax = _figure()
    ax.plot([0, 1], [0, 1], color="#999999", linestyle="--", linewidth=1, label="perfectly calibrated")
    for index, name in enumerate(models):
        points = curves.get(name, {}).get("calibration")
        if not points or not points["mean_score"]:
            continue
        (line,) = ax.plot(points["mean_score"], points["fraction_positive"], marker="o", markersize=3,
                          color=colour(index), linewidth=1.5, label=name)
        line.set_gid(model_id(figure, index))
    ax.set_xlabel("mean score in bin")
    ax.set_ylabel("fraction positive")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_title("Calibration", fontsize="medium")
    ax.grid(alpha=0.3)
    _legend(ax, fontsize="x-small", frameon=False)
    return to_svg(fig)


def threshold_sweep(figure: str, name: str, index: int, sweep: Mapping[str, Sequence[float]], threshold: float) -> str:
    """Precision, recall, F1 and the share predicted positive by threshold, for one model."""
    fig, ax = _figure()
    group = []
    for key, style in (("precision", "-"), ("recall", "--"), ("f1", "-."), ("positive_rate", ":")):
        (line,) = ax.plot(sweep["threshold"], sweep[key], linestyle=style, linewidth=1.5, label=key.replace("_", " "))
        group.append(line)
    ax.axvline(threshold, color="#555555", linewidth=1, label=f"threshold {threshold:g}")
    for line in group:
        line.set_gid(model_id(figure, index))
    ax.set_xlabel("threshold")
    ax.set_ylim(0, 1.02)
    ax.set_title(f"Threshold sweep: {name}", fontsize="medium")
    ax.grid(alpha=0.3)
    _legend(ax, fontsize="x-small", frameon=False)
    return to_svg(fig)


def confusion(labels: Sequence[Any], matrix: Sequence[Sequence[int]], namer: Any, *, title: str) -> str:
    """A confusion matrix as a heat map: each cell shaded by its share of the true class's rows
    (so a rare class reads as clearly as a common one), with the count and that share written
    in it. Rows are the true class, columns the predicted one, named by ``namer``."""
    names = [_short(namer(label), 18) for label in labels]
    size = len(names)
    side = min(2.6 + 0.45 * size, 7.0)
    longest = max((len(n) for n in names), default=4)
    fig, ax = _figure(side + 0.9, side, left=min(0.42, 0.16 + 0.011 * longest), right=0.97,
                      bottom=min(0.4, 0.14 + 0.011 * longest), top=0.9)
    from matplotlib import colormaps
    from matplotlib.patches import Rectangle

    shares = [[n / (sum(row) or 1) for n in row] for row in matrix]
    blues = colormaps["Blues"]
    for i, row in enumerate(matrix):
        for j, n in enumerate(row):
            # Rectangles, not imshow: an image would be inlined as a PNG data: URL.
            ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, facecolor=blues(shares[i][j]), edgecolor="white"))
            ax.text(j, i, f"{n:,}\n{100 * shares[i][j]:.0f}%", ha="center", va="center",
                    fontsize="small" if size <= 6 else "xx-small", color="white" if shares[i][j] > 0.6 else "#222")
    ax.set_xlim(-0.5, size - 0.5)
    ax.set_ylim(size - 0.5, -0.5)                     # the first class on top, as a table has it
    ax.set_xticks(range(size), names, fontsize="small", rotation=30 if size > 4 else 0)
    ax.set_yticks(range(size), names, fontsize="small")
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    ax.set_title(title, fontsize="medium")
    return to_svg(fig)


# ------------------------------------------------------------------------ regression
def predicted_vs_actual(figure: str, models: Sequence[str], curves: Mapping[str, Mapping[str, Any]]) -> str:
    fig, ax = _figure()
    low, high = float("inf"), float("-inf")
    for index, name in enumerate(models):
        points = curves.get(name, {}).get("scatter")
        if not points:
            continue
        dots = ax.scatter(points["actual"], points["predicted"], s=4, alpha=0.5, color=colour(index), label=name)
        dots.set_gid(model_id(figure, index))
        low = min(low, min(points["actual"]), min(points["predicted"]))
        high = max(high, max(points["actual"]), max(points["predicted"]))
    if low < high:
        ax.plot([low, high], [low, high], color="#999999", linestyle="--", linewidth=1, label="predicted = actual")
    ax.set_xlabel("actual")
    ax.set_ylabel("predicted")
    ax.set_title("Predicted against actual", fontsize="medium")
    ax.grid(alpha=0.3)
    _legend(ax, fontsize="x-small", frameon=False, markerscale=3)
    return to_svg(fig)


def residuals(figure: str, models: Sequence[str], curves: Mapping[str, Mapping[str, Any]]) -> str:
    fig, ax = _figure()
    for index, name in enumerate(models):
        hist = curves.get(name, {}).get("residuals")
        if not hist:
            continue
        steps = ax.stairs(hist["counts"], hist["edges"], color=colour(index), linewidth=1.5, label=name)
        steps.set_gid(model_id(figure, index))
    ax.axvline(0, color="#999999", linestyle="--", linewidth=1)
    ax.set_xlabel("predicted - actual")
    ax.set_ylabel("rows")
    ax.set_title("Residuals", fontsize="medium")
    _legend(ax, fontsize="x-small", frameon=False)
    return to_svg(fig)


# ------------------------------------------------------------------------------ data
SPLIT_COLOURS = {"train": "#4c72b0", "valid": "#dd8452", "test": "#55a868"}


def split_bars(categories: Sequence[str], shares: Mapping[str, Sequence[float]], *, title: str,
               xlabel: str = "") -> str:
    """Each split's share of rows per category, bars side by side (split colours, not models')."""
    fig, ax = _figure(5.2, 3.2, bottom=0.22)
    width = 0.8 / max(len(shares), 1)
    for k, (split, values) in enumerate(shares.items()):
        ax.bar([i + (k - (len(shares) - 1) / 2) * width for i in range(len(categories))], values, width=width,
               color=SPLIT_COLOURS.get(split, colour(k)), label=split)
    ax.set_xticks(range(len(categories)), [_short(c) for c in categories], fontsize="x-small",
                  rotation=30 if len(categories) > 4 else 0)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("share of rows")
    ax.set_title(title, fontsize="medium")
    ax.grid(alpha=0.3, axis="y")
    _legend(ax, fontsize="x-small", frameon=False)
    return to_svg(fig)


def split_histogram(edges: Sequence[float], shares: Mapping[str, Sequence[float]], *, title: str) -> str:
    """Each split's share of rows per bin on the training split's bins, as outlines."""
    fig, ax = _figure(5.2, 3.2)
    for k, (split, values) in enumerate(shares.items()):
        ax.stairs(values, edges, color=SPLIT_COLOURS.get(split, colour(k)), linewidth=1.5, label=split)
    ax.set_ylabel("share of rows")
    ax.set_title(title, fontsize="medium")
    ax.grid(alpha=0.3)
    _legend(ax, fontsize="x-small", frameon=False)
    return to_svg(fig)


def _legend(ax: Any, **options: Any) -> None:
    """The axes' legend, when something on them has a label: matplotlib warns on stderr of an
    empty one (a curve left out because its metric is undefined)."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(**options)



# ---------------------------------------------------------------------- explanations
def importances(figure: str, models: Sequence[str], everyone: Sequence[str],
                values: Mapping[str, Mapping[str, float]], features: Mapping[str, str], *, title: str, xlabel: str,
                errors: Mapping[str, Mapping[str, float]] | None = None) -> str:
    """Horizontal bars per feature of ``features`` (feature -> its label; most important first, on
    top), one bar per model of ``models`` (coloured by its place in ``everyone``)."""
    labels = dict(features)
    height = 0.9 + 0.22 * len(labels) * max(1, min(len(models), 3))
    longest = max((len(_short(label)) for label in labels.values()), default=4)
    fig, ax = _figure(6.2, height, left=min(0.5, 0.04 + 0.0105 * longest), right=0.97,
                      bottom=0.6 / height, top=1 - 0.35 / height)
    width = 0.8 / max(len(models), 1)
    for k, name in enumerate(models):
        index = everyone.index(name)
        rows = [i + (k - (len(models) - 1) / 2) * width for i in range(len(features))]
        spread = [errors[name].get(f, 0.0) for f in features] if errors and name in errors else None
        bars = ax.barh(rows, [values[name].get(f, 0.0) for f in features], height=width, color=colour(index),
                       xerr=spread, error_kw={"linewidth": 0.6}, label=name)
        _tag(bars, figure, index)
    ax.set_yticks(range(len(labels)), [_short(label) for label in labels.values()], fontsize="x-small")
    ax.invert_yaxis()
    ax.axvline(0, color="#999999", linewidth=0.8)
    ax.set_xlabel(xlabel)
    ax.set_title(title, fontsize="medium")
    ax.grid(alpha=0.3, axis="x")
    if len(models) > 1:
        _legend(ax, fontsize="x-small", frameon=False, loc="lower right")
    return to_svg(fig)


def fold_spread(figure: str, models: Sequence[str], everyone: Sequence[str], folds: Mapping[str, Sequence[float]],
                metric: str) -> str:
    """Each fold's value of ``metric`` per model (dots) and their mean (a bar across)."""
    fig, ax = _figure(5.2, 3.2, bottom=0.2)
    for k, name in enumerate(models):
        index = everyone.index(name)
        values = [v for v in folds.get(name, []) if v is not None]
        dots = ax.scatter([k] * len(values), values, s=18, color=colour(index), zorder=3)
        dots.set_gid(model_id(figure, index))
        if values:
            (mean,) = ax.plot([k - 0.25, k + 0.25], [sum(values) / len(values)] * 2, color=colour(index))
            mean.set_gid(model_id(figure, index))
    ax.set_xticks(range(len(models)), [_short(m) for m in models], fontsize="x-small")
    ax.set_xlim(-0.6, len(models) - 0.4)
    ax.set_ylabel(metric)
    ax.set_title(f"{metric} per fold (line: mean)", fontsize="medium")
    ax.grid(alpha=0.3, axis="y")
    return to_svg(fig)


def _tag(bars: Any, figure: str, index: int) -> None:
    """Give each bar (and whisker) of a model's ``BarContainer`` an id the switches find
    (unique ids ending in the model's suffix)."""
    parts = list(bars.patches)
    if bars.errorbar is not None:
        parts += [artist for group in bars.errorbar.lines for artist in (group if isinstance(group, tuple) else [group])
                  if artist is not None]
    for j, artist in enumerate(parts):
        artist.set_gid(model_id(f"{figure}-{j}", index))


def _short(label: Any, limit: int = 36) -> str:
    text = str(label)
    return text if len(text) <= limit else text[:limit - 1] + "…"


# -------------------------------------------------------------------------- training
def learning_curve(history: Sequence[Mapping[str, float]], title: str, best_epoch: int = 0) -> str:
    """The torch stage's learning curve, drawn as the run folder's PNG is (``tensors.history``)."""
    from pipeline.tensors.learning_curve import learning_curve_figure

    return to_svg(learning_curve_figure(list(history), title=title, best_epoch=best_epoch))


def boosting_rounds(rounds: Sequence[Mapping[str, float]], title: str) -> str:
    """Each recorded evaluation metric by boosting round."""
    fig, ax = _figure(6.0, 3.4)
    xs = [row["round"] for row in rounds]
    for key in [k for k in rounds[0] if k != "round"]:
        ax.plot(xs, [row.get(key) for row in rounds], linewidth=1.5, label=key)
    ax.set_xlabel("boosting round")
    ax.set_ylabel("metric on the evaluation set")
    ax.set_title(title, fontsize="medium")
    ax.grid(alpha=0.3)
    _legend(ax, fontsize="x-small", frameon=False)
    return to_svg(fig)


def trials(numbers: Sequence[int], values: Sequence[float | None], metric: str, title: str) -> str:
    """Each tuning trial's value by its number (as the record numbers them); pruned or failed
    trials (no value) are left out."""
    from matplotlib.ticker import MaxNLocator

    fig, ax = _figure(6.0, 3.2, left=0.17, bottom=0.16)
    kept = [(n, v) for n, v in zip(numbers, values) if v is not None]
    ax.scatter([n for n, _ in kept], [v for _, v in kept], s=12)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("trial")
    ax.set_ylabel(metric)
    ax.set_title(title, fontsize="medium")
    ax.grid(alpha=0.3)
    return to_svg(fig)
