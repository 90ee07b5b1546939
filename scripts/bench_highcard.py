#!/usr/bin/env python
"""High-cardinality categoricals: each library's native handling against out-of-fold target encoding, on the same rows.

For a table with categorical columns of hundreds to thousands of levels, the same split
(train, 10% valid for early stopping, 25% test) is typed two ways:

- ``codes``: ``default_ops`` without its target encoding: every categorical column as
  integer codes, which LightGBM and CatBoost take as categorical (LightGBM's histogram
  split on categories; CatBoost's ordered target statistics) and XGBoost as numbers;
- ``target``: the columns of more than ``--levels`` levels target-encoded out of fold first
  (``target_encode``: 5 folds, smoothing 10), the rest as above.

and each is fitted with the portfolio's LightGBM, LightGBM with tighter category limits
(``cat_smooth`` 50, ``min_data_per_group`` 200, ``max_cat_threshold`` 16), XGBoost and
CatBoost. It prints the test metric and fit seconds of each pair, in the same invocation.

    python scripts/bench_highcard.py --tables amazon synthetic_highcard adult --seed 1
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

from bench_auto import MAIN, bench_split  # noqa: E402

TIGHT = {"cat_smooth": 50.0, "min_data_per_group": 200, "max_cat_threshold": 16}


def high_cardinality(split: Any, levels: int) -> list[str]:
    """Categorical (text) columns of the training split with more than ``levels`` distinct values."""
    from pipeline.features import ColumnSelector
    from pipeline.features.ops import select_columns

    frame = split.backend.to_host(split.frames["train"]).drop(columns=[split.target])
    return select_columns(ColumnSelector(type="categorical", min_levels=levels + 1), frame)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", nargs="+", default=["amazon", "synthetic_highcard", "adult"])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--levels", type=int, default=100)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    from pipeline.features.auto_ops import default_ops
    from pipeline.metrics import task_metrics
    from pipeline.stages.auto import portfolio
    from pipeline.stages.features import build_features
    from pipeline.stages.train import train_model

    params = {m.label: m.params_for("binary") for m in portfolio()}
    fits = [("lightgbm", "lightgbm", params["lightgbm"]), ("lightgbm (tight limits)", "lightgbm",
                                                            {**params["lightgbm"], **TIGHT}),
            ("xgboost", "xgboost", params["xgboost"]), ("catboost", "catboost", params["catboost"])]
    results = []
    print("| table | high-cardinality columns | model | codes | target-encoded | codes s | target-encoded s |")
    print("|---|---|---|--:|--:|--:|--:|")
    for table in args.tables:
        split, id_column = bench_split(table, args.seed, valid=0.1)
        many = high_cardinality(split, args.levels)
        metric, _ = MAIN[split.task.kind]
        # Codes: default_ops without its own target encoding (what the stage did before it).
        codes = [op for op in default_ops(split.task.kind) if "target_encode" not in op]
        encoded = [{"target_encode": {"columns": many, "folds": 5, "smoothing": 10.0}}] if many else []
        typings = {"codes": codes, "target": [*encoded, *codes]}
        features = {name: build_features(split, ops, id_column=id_column) for name, ops in typings.items()}
        labels = np.asarray(features["codes"].labels("test"))
        for label, model, model_params in fits:
            row: dict[str, Any] = {"table": table, "model": label, "metric": metric, "columns": many}
            for name, feature_set in features.items():
                started = time.perf_counter()
                trained = train_model(feature_set, model, model_params, seed=args.seed)
                scores = np.asarray(trained.scores["test"])
                row[name] = task_metrics(split.task, labels, scores)[metric]
                row[f"{name}_seconds"] = time.perf_counter() - started
            results.append(row)
            print(f"| {table} | {len(many)} | {label} | {row['codes']:.4f} | {row['target']:.4f} | "
                  f"{row['codes_seconds']:.1f} | {row['target_seconds']:.1f} |", flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
