#!/usr/bin/env python
"""The end-to-end churn work written by hand, in Polars or in pandas, with XGBoost: no ``pipeline``.

What ``configs/bench_churn.yaml``'s XGBoost path does (``scripts/bench_e2e.py`` runs it against
``pipeline run``), step for step:

1. read the CSV with " " as missing;
2. stratified train / valid / test split (70 / 10 / 20) of row positions with scikit-learn's
   ``train_test_split``, seed 42 (the calls of ``scripts/bench_churn_baseline.py`` and of the
   pipeline's split stage, so all three hold out the same rows);
3. features fitted on train, applied to every split: TotalCharges median fill, log1p; one-hot
   of the 15 categorical columns (categories sorted, unseen -> all zeros, a two-category column
   keeps only its second category); standardize tenure, MonthlyCharges, TotalCharges
   (population std); one float32 row-major matrix per split;
4. XGBoost (300 trees, depth 4, learning rate 0.05, subsample 0.8, hist) on train, watching valid;
5. ROC AUC, PR AUC, log loss, accuracy, precision, recall, F1 on test, and XGBoost's own
   feature importances (gain);
6. write the test predictions (Parquet), the model (XGBoost JSON) and the metrics (JSON).

``--engine polars``: Polars expressions for the reading and the features. ``--engine pandas``:
``scripts/bench_churn_baseline.py``'s own functions. Both use every core where their library does
(Polars, XGBoost); pandas and scikit-learn one.

    python scripts/e2e_baselines.py --engine polars --data bench-data/churn_200000_s0.csv --output-dir /tmp/e2e
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_churn_baseline as plain  # noqa: E402  (a sibling script: its constants and metrics)

ENGINES = ("polars", "pandas")


def xgboost_model() -> Any:
    """The ``xgb`` model of bench_churn_baseline (the config's parameters)."""
    return plain.models()["xgb"]


def split_positions(labels: np.ndarray) -> dict[str, np.ndarray]:
    """Sorted row positions per split: bench_churn_baseline's ``split``, on the 0/1 labels."""
    from sklearn.model_selection import train_test_split

    positions = np.arange(len(labels))
    rest, test = train_test_split(positions, test_size=plain.TEST, random_state=plain.SEED, stratify=labels)
    train, valid = train_test_split(rest, test_size=plain.VALID / (1 - plain.TEST), random_state=plain.SEED,
                                    stratify=labels[rest])
    return {"train": np.sort(train), "valid": np.sort(valid), "test": np.sort(test)}


# ------------------------------------------------------------------ Polars
def polars_matrices(path: Path) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], Any, list[str]]:
    """Per split the feature matrix and labels, the test ids, and the feature names."""
    import polars as pl

    frame = pl.read_csv(path, null_values=[" "], schema_overrides={"TotalCharges": pl.Float64})
    labels = (frame[plain.TARGET] == plain.POSITIVE).cast(pl.Int8).to_numpy()
    positions = split_positions(labels)
    splits = {name: frame[pos] for name, pos in positions.items()}
    train = splits["train"]

    median = train["TotalCharges"].median()
    charges = pl.col("TotalCharges").fill_null(median).log1p()
    numeric = train.select(pl.col("tenure"), pl.col("MonthlyCharges"), charges)
    scaled = [((pl.col(c) if c != "TotalCharges" else charges) - numeric[c].mean()) / numeric[c].std(ddof=0)
              for c in plain.NUMERIC]
    onehot = []
    for col in plain.CATEGORICAL:
        cats = sorted(train[col].drop_nulls().unique().to_list())
        kept = cats[1:] if len(cats) == 2 else cats                 # drop_binary
        onehot += [(pl.col(col) == cat).fill_null(False).cast(pl.Float32).alias(f"{col}={cat}") for cat in kept]
    features = [pl.col("SeniorCitizen"), *[e.alias(c) for e, c in zip(scaled, plain.NUMERIC)], *onehot]

    X, y = {}, {}
    for name, part in splits.items():
        table = part.select(features)
        X[name] = table.cast(pl.Float32).to_numpy(order="c")
        y[name] = labels[positions[name]]
    return X, y, splits["test"][plain.ID].to_numpy(), table.columns


# ------------------------------------------------------------------ pandas
def pandas_matrices(path: Path) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], Any, list[str]]:
    splits = plain.split(plain.read(path))
    state = plain.fit_features(splits["train"])
    X, y = {}, {}
    for name, frame in splits.items():
        X[name], columns = plain.transform(frame, state)
        y[name] = frame[plain.TARGET].to_numpy()
    return X, y, splits["test"][plain.ID].to_numpy(), columns


def run(engine: str, data: Path, out: Path) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    X, y, ids, columns = (polars_matrices if engine == "polars" else pandas_matrices)(data)
    model = xgboost_model()
    started = time.perf_counter()
    model.fit(X["train"], y["train"], eval_set=[(X["valid"], y["valid"])], verbose=False)
    fit_seconds = time.perf_counter() - started
    model.save_model(out / "xgb.json")
    scores = model.predict_proba(X["test"])[:, 1]
    results = {"xgb": {k: float(v) for k, v in plain.binary_metrics(y["test"], scores).items()}}
    gain = model.get_booster().get_score(importance_type="gain")
    importances = {columns[int(k[1:])]: v for k, v in gain.items()}      # f0, f1, ... -> names
    write_predictions(engine, out / "predictions.parquet", ids, y["test"], scores)
    (out / "metrics.json").write_text(json.dumps({"engine": engine, "split": "test", "models": results,
                                                  "importances": {"xgb": importances},
                                                  "rows": {k: int(len(v)) for k, v in y.items()},
                                                  "fit_seconds": round(fit_seconds, 3)}, indent=2))
    return results


def write_predictions(engine: str, path: Path, ids: Any, labels: np.ndarray, scores: np.ndarray) -> None:
    columns = {plain.ID: ids, "split": np.full(len(ids), "test"), plain.TARGET: labels, "score_xgb": scores}
    if engine == "polars":
        import polars as pl

        pl.DataFrame(columns).write_parquet(path)
    else:
        import pandas as pd

        pd.DataFrame(columns).to_parquet(path, index=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", choices=ENGINES, required=True)
    parser.add_argument("--data", required=True, type=Path, help="churn table (.csv)")
    parser.add_argument("--output-dir", required=True, type=Path, help="folder for predictions, model, metrics")
    args = parser.parse_args(argv)
    for name, values in run(args.engine, args.data, args.output_dir).items():
        print(args.engine, name, " ".join(f"{k}={v:.4f}" for k, v in values.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
