"""CPU/GPU parity: the same pipeline run on both backends, compared.

``pipeline parity CONFIG`` runs the config once with ``device: cpu`` and once with ``device:
gpu`` (each a normal run in the run history), then compares the two records:

- each model's metrics on every split, against a tolerance band per metric (``TOLERANCES``:
  absolute for bounded scores, relative for errors in the target's units). cuML and
  scikit-learn fit the same models with different solvers and random streams, so equal
  metrics are not expected; a difference outside its band on a held-out split is. The
  training split's metrics are listed with their bands but, against the GPU, do not decide
  (``Bands.judge_training``: in-sample scores measure how tightly an algorithm fits the rows
  it learnt from, which cuML's trees do by design more tightly than scikit-learn's);
- the fitted feature workflow of each exported model (``workflow.json``): every number of its
  state (means, standard deviations, bin edges) on one side against the other;
- each stage's time on each side.

The result is ``parity.json`` in the GPU run's folder (with the CPU run's id) and a table on
the terminal. A machine without a usable GPU is exit 5 with the reason, before either side
runs: one side alone proves nothing.

``--against pandas`` compares the CPU's two table engines instead (``PIPELINE_CPU_ENGINE``:
Polars, the default, and pandas, the reference): both build the same tables, so the bands are
``ENGINE_BANDS`` (1e-9) rather than the solver-sized GPU bands, and so is the workflow check.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.runs.record import read_manifest

PARITY_FILE = "parity.json"
# metric -> (band, "abs" | "rel"): the most a metric may differ between the backends.
TOLERANCES: dict[str, tuple[float, str]] = {
    "roc_auc": (0.01, "abs"), "pr_auc": (0.02, "abs"), "accuracy": (0.01, "abs"), "precision": (0.03, "abs"),
    "recall": (0.03, "abs"), "f1": (0.03, "abs"), "log_loss": (0.02, "abs"), "roc_auc_ovr_macro": (0.01, "abs"),
    "f1_macro": (0.03, "abs"), "f1_weighted": (0.03, "abs"), "rmse": (0.02, "rel"), "mae": (0.02, "rel"),
    "r2": (0.01, "abs"), "mape": (0.05, "rel"),
}
DEFAULT_TOLERANCE = (0.02, "abs")
# Workflow numbers that differ by more than this (relative, or absolute near zero) are listed.
WORKFLOW_TOLERANCE = 1e-4


# The split the models are fitted on (``pipeline.stages.split.SPLITS``' first): its metrics are in-sample.
TRAINING_SPLIT = "train"


@dataclass(frozen=True)
class Bands:
    """How far two runs may differ: per metric (band, "abs" | "rel"), any other metric, and
    the numbers of the fitted workflow. ``judge_training``: whether metrics of the training
    split count toward the verdict where a held-out split was scored too (they are listed, with
    their band, either way; a run that scored the training split alone is judged on it)."""

    metrics: Mapping[str, tuple[float, str]]
    default: tuple[float, str] = DEFAULT_TOLERANCE
    workflow: float = WORKFLOW_TOLERANCE
    judge_training: bool = True


# Against the GPU, the training split's metrics do not decide. They score the rows each model
# learnt from, so they measure how tightly its algorithm fits them, and the GPU's algorithms are
# not the CPU's: cuML's random forest builds each tree on the bootstrap's drawn row ids, so its
# min_samples_leaf counts draws, where scikit-learn's counts distinct rows (it passes the draws
# as weights), and it splits at 128 quantile bins, not at every value. Its leaves are smaller:
# configs/churn.yaml's forest (min_samples_leaf 5) scores 0.975 ROC AUC on its own training rows
# on an H200 against scikit-learn's 0.961, while on valid and test the two agree to 0.001 (a
# forest whose trees count draws, built from scikit-learn's own trees, scores 0.979 there on
# the CPU). A band on in-sample metrics would fail every correct GPU forest; the held-out splits
# judge what parity is for, the quality of the models on rows they did not see.
GPU_BANDS = Bands(TOLERANCES, judge_training=False)
# The CPU table engines build the same tables; a float sum may differ in its last bits where
# the engines add in another order (docs/architecture.md), never by more than this.
ENGINE_TOLERANCE = 1e-9
ENGINE_BANDS = Bands({}, (ENGINE_TOLERANCE, "abs"), ENGINE_TOLERANCE)


def within(metric: str, cpu: float | None, gpu: float | None, bands: Bands = GPU_BANDS) -> tuple[bool, float]:
    """Whether ``gpu`` is within ``metric``'s band of ``cpu``, and the band in the metric's
    units. Two NaNs agree (a metric undefined on both sides); one NaN does not."""
    band, kind = bands.metrics.get(metric, bands.default)
    limit = band * abs(cpu) if kind == "rel" and cpu is not None and math.isfinite(cpu) else band
    if cpu is None or gpu is None or not (math.isfinite(cpu) and math.isfinite(gpu)):
        both_missing = (cpu is None or not math.isfinite(cpu)) and (gpu is None or not math.isfinite(gpu))
        return both_missing, limit
    return abs(gpu - cpu) <= limit, limit


def compare_runs(cpu_dir: Path, gpu_dir: Path, bands: Bands = GPU_BANDS, *,
                 sides: tuple[str, str] = ("cpu", "gpu")) -> dict[str, Any]:
    """``parity.json``: ``metrics`` (a row per model, split and metric; ``judged``: whether it
    counts toward ``ok``, see ``Bands.judge_training``), ``workflow`` (the numbers of each
    model's fitted workflow that differ), ``stages`` (seconds on each side) and ``ok`` (every
    judged metric within its band). ``sides`` names the two runs in every key (the reference
    first: ``cpu``/``gpu``, or ``pandas``/``polars`` for the table engines)."""
    first, second = sides
    cpu, gpu = read_manifest(cpu_dir), read_manifest(gpu_dir)
    paired = list(_paired_metrics(cpu.metrics or {}, gpu.metrics or {}))
    held_out = any(split != TRAINING_SPLIT for split, *_ in paired)
    rows = []
    for split, model, metric, a, b in paired:
        ok, band = within(metric, a, b, bands)
        rows.append({"model": model, "split": split, "metric": metric, first: a, second: b,
                     "difference": None if a is None or b is None else b - a, "band": band, "within": ok,
                     "judged": bands.judge_training or split != TRAINING_SPLIT or not held_out})
    workflow = []
    for model, folder in cpu.models.items():
        other = gpu.models.get(model)
        if other is None:
            continue
        a, b = (_read_json(run / path / "workflow.json") for run, path in ((cpu_dir, folder), (gpu_dir, other)))
        workflow += [{"model": model, "key": key, first: x, second: y}
                     for key, x, y in _different_numbers(a, b, tolerance=bands.workflow)]
    stages = [{"stage": name, f"{first}_seconds": record.seconds,
               f"{second}_seconds": gpu.stages[name].seconds if name in gpu.stages else None,
               f"{first}_status": record.status,
               f"{second}_status": gpu.stages[name].status if name in gpu.stages else None}
              for name, record in cpu.stages.items()]
    return {"sides": list(sides), f"{first}_run": cpu.run_id, f"{second}_run": gpu.run_id,
            "ok": all(row["within"] for row in rows if row["judged"]), "metrics": rows, "workflow": workflow,
            "stages": stages}


def _paired_metrics(cpu: Mapping[str, Any], gpu: Mapping[str, Any]) -> Iterator[tuple[str, str, str, Any, Any]]:
    """(split, model, metric, cpu value, gpu value) for every split either side evaluated."""
    def by_split(metrics: Mapping[str, Any]) -> Mapping[str, Any]:
        return metrics.get("splits") or {metrics.get("split", "test"): metrics.get("models", {})}

    a, b = by_split(cpu), by_split(gpu)
    for split in dict.fromkeys([*a, *b]):
        models_a, models_b = a.get(split, {}), b.get(split, {})
        for model in dict.fromkeys([*models_a, *models_b]):
            values_a, values_b = models_a.get(model, {}), models_b.get(model, {})
            for metric in dict.fromkeys([*values_a, *values_b]):
                yield split, model, metric, values_a.get(metric), values_b.get(metric)


def _different_numbers(a: Any, b: Any, key: str = "", *,
                       tolerance: float = WORKFLOW_TOLERANCE) -> Iterator[tuple[str, Any, Any]]:
    """Dotted keys where two JSON values differ: numbers beyond ``tolerance``, anything else
    when unequal (a category list in another order, a key on one side only)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for name in dict.fromkeys([*a, *b]):
            yield from _different_numbers(a.get(name), b.get(name), f"{key}.{name}" if key else str(name),
                                          tolerance=tolerance)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            yield from _different_numbers(x, y, f"{key}[{i}]", tolerance=tolerance)
    elif _number(a) and _number(b):
        if not math.isclose(a, b, rel_tol=tolerance, abs_tol=tolerance):
            yield key, a, b
    elif a != b:
        yield key, a, b


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
