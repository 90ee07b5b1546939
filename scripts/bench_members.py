#!/usr/bin/env python
"""The ``auto`` portfolio's linear and MLP members before and after their own encodings, on the same rows.

Each table is split (train, 10% valid, 25% test; the same seed for every model) and typed by
``default_ops`` as the ``auto`` stage types it: numbers as they are, categories as integer
codes. On that one matrix, in the same invocation, it fits:

- ``logistic_regression`` / ``ridge``: the plain linear member the portfolio had (the baseline);
- ``linear``: the linear model on its own encoding (``pipeline.models.encoded_linear``);
- the MLP with ``standardize: false`` (the baseline) and ``standardize: true`` (the default),
  with the portfolio's parameters (256-128, 40 epochs at most, early stopping on the valid rows);
- LightGBM with the portfolio's parameters, for scale.

It prints the test metric (ROC AUC, log loss, RMSE) and the fit seconds of each.

    python scripts/bench_members.py --tables adult amazon letter california synthetic_highcard --seed 1
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from bench_auto import GENERATED, MAIN, PUBLIC, bench_split  # noqa: E402


def members(task: str) -> list[tuple[str, str, dict[str, Any]]]:
    """(label, model, params) of every fit, the baseline of each pair first."""
    from pipeline.stages.auto import portfolio

    params = {m.model: m.params_for(task) for m in portfolio() if not m.extra}
    plain = ("ridge", {"alpha": 1.0}) if task == "regression" else ("logistic_regression", {"C": 1.0, "max_iter": 300})
    return [(f"{plain[0]} (plain)", plain[0], plain[1]), ("linear (own encoding)", "linear", params["linear"]),
            ("mlp (unscaled)", "mlp", {**params["mlp"], "standardize": False}),
            ("mlp (standardize)", "mlp", {**params["mlp"], "standardize": True}),
            ("lightgbm", "lightgbm", params["lightgbm"])]


def fit(features: Any, model: str, params: dict[str, Any], seed: int) -> tuple[np.ndarray, float]:
    from pipeline.stages.torch_mlp import train_torch
    from pipeline.stages.train import train_model

    started = time.perf_counter()
    trained = (train_torch(features, seed=seed, **params) if model == "mlp"
               else train_model(features, model, params, seed=seed))
    scores = np.asarray(trained.scores["test"])
    return scores, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", nargs="+", default=[*PUBLIC, *GENERATED])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path, help="write every result here")
    args = parser.parse_args()
    from pipeline.features.auto_ops import default_ops
    from pipeline.metrics import task_metrics
    from pipeline.stages.features import build_features

    results = []
    print("| table | task | rows (train/valid/test) | metric | model | score | fit s |")
    print("|---|---|---|---|---|--:|--:|")
    for table in args.tables:
        split, id_column = bench_split(table, args.seed, valid=0.1)
        features = build_features(split, default_ops(split.task.kind), id_column=id_column)
        metric, _ = MAIN[split.task.kind]
        labels = np.asarray(features.labels("test"))
        rows = "/".join(str(features.rows()[s]) for s in ("train", "valid", "test"))
        for label, model, params in members(split.task.kind):
            scores, seconds = fit(features, model, params, args.seed)
            value = task_metrics(split.task, labels, scores)[metric]
            results.append({"table": table, "task": split.task.kind, "model": label, "metric": metric,
                            "score": value, "seconds": seconds})
            print(f"| {table} | {split.task.kind} | {rows} | {metric} | {label} | {value:.4f} | {seconds:.1f} |",
                  flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
