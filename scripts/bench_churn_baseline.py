#!/usr/bin/env python
"""The churn benchmark written by hand: pandas + scikit-learn + XGBoost, no ``pipeline``.

It does what ``configs/bench_churn.yaml`` does, step for step, so ``scripts/bench_overhead.py``
can charge any difference in time or memory to the framework:

1. read the CSV (or Parquet) with " " as missing;
2. stratified train / valid / test split (70 / 10 / 20) of row positions with scikit-learn's
   ``train_test_split``, seed 42;
3. features fitted on train, applied to every split: TotalCharges median fill, log1p; one-hot
   of the 15 categorical columns (categories sorted, unseen -> all zeros, a two-category
   column keeps only its second category); standardize tenure, MonthlyCharges, TotalCharges
   (population std); one float32 matrix per split;
4. logistic regression (C=0.5) and XGBoost (300 trees, depth 4) on train, XGBoost watching
   the valid split;
5. ROC AUC, PR AUC, log loss, accuracy, precision, recall, F1 on test;
6. write test predictions (Parquet), the models and the metrics (JSON) to ``--output-dir``.

    python scripts/bench_churn_baseline.py --data bench-data/churn.csv --output-dir /tmp/baseline
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import joblib
import numpy as np
import pandas as pd
from sklearn import metrics
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split
from xgboost import XGBClassifier

# Keep in step with configs/bench_churn.yaml.
SEED = 42
TEST, VALID = 0.2, 0.1
TARGET, POSITIVE, ID = "Churn", "Yes", "customerID"
NUMERIC = ["tenure", "MonthlyCharges", "TotalCharges"]
CATEGORICAL = [
    "gender", "Partner", "Dependents", "PhoneService", "PaperlessBilling", "MultipleLines",
    "InternetService", "OnlineSecurity", "OnlineBackup", "DeviceProtection", "TechSupport",
    "StreamingTV", "StreamingMovies", "Contract", "PaymentMethod",
]
THRESHOLD = 0.5


def models() -> dict[str, object]:
    return {
        "logreg": LogisticRegression(C=0.5, max_iter=1000),
        "xgb": XGBClassifier(n_estimators=300, learning_rate=0.05, max_depth=4, subsample=0.8,
                             tree_method="hist", device="cpu", random_state=SEED),
    }


def read(path: Path) -> pd.DataFrame:
    if path.suffix.lower() in (".parquet", ".pq"):
        return pd.read_parquet(path)
    return pd.read_csv(path, na_values=[" "])


def split(df: pd.DataFrame) -> dict[str, pd.DataFrame]:
    y = (df[TARGET] == POSITIVE).astype("int8")
    df = df.assign(**{TARGET: y})
    positions = np.arange(len(df))
    rest, test = train_test_split(positions, test_size=TEST, random_state=SEED, stratify=y)
    train, valid = train_test_split(rest, test_size=VALID / (1 - TEST), random_state=SEED,
                                    stratify=y.to_numpy()[rest])
    return {name: df.iloc[np.sort(pos)].reset_index(drop=True)
            for name, pos in (("train", train), ("valid", valid), ("test", test))}


def fit_features(train: pd.DataFrame) -> dict[str, object]:
    median = train["TotalCharges"].median()
    numeric = train[NUMERIC].assign(TotalCharges=np.log1p(train["TotalCharges"].fillna(median)))
    categories = {col: sorted(train[col].dropna().unique()) for col in CATEGORICAL}
    return {
        "median": median,
        "mean": numeric.mean(),
        "std": numeric.std(ddof=0),
        "dtypes": {col: pd.CategoricalDtype(cats) for col, cats in categories.items()},
        # drop_binary: a two-category column keeps only its second (sorted) category.
        "dropped": [f"{col}={cats[0]}" for col, cats in categories.items() if len(cats) == 2],
    }


def transform(df: pd.DataFrame, state: dict[str, object]) -> tuple[np.ndarray, list[str]]:
    numeric = df[NUMERIC].assign(TotalCharges=np.log1p(df["TotalCharges"].fillna(state["median"])))
    numeric = (numeric - state["mean"]) / state["std"]
    onehot = pd.get_dummies(df[CATEGORICAL].astype(state["dtypes"]), prefix_sep="=", dtype=np.float32)
    onehot = onehot.drop(columns=state["dropped"])
    X = pd.concat([df[["SeniorCitizen"]], numeric, onehot], axis=1)
    return X.to_numpy(dtype=np.float32), list(X.columns)


def binary_metrics(y: np.ndarray, scores: np.ndarray) -> dict[str, float]:
    predicted = (scores >= THRESHOLD).astype(int)
    return {
        "roc_auc": metrics.roc_auc_score(y, scores),
        "pr_auc": metrics.average_precision_score(y, scores),
        "log_loss": metrics.log_loss(y, np.clip(scores, 1e-15, 1 - 1e-15), labels=[0, 1]),
        "accuracy": metrics.accuracy_score(y, predicted),
        "precision": metrics.precision_score(y, predicted, zero_division=0),
        "recall": metrics.recall_score(y, predicted, zero_division=0),
        "f1": metrics.f1_score(y, predicted, zero_division=0),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, type=Path, help="churn table, .csv or .parquet")
    parser.add_argument("--output-dir", required=True, type=Path, help="folder for predictions, models, metrics")
    args = parser.parse_args(argv)
    out = args.output_dir
    out.mkdir(parents=True, exist_ok=True)

    splits = split(read(args.data))
    state = fit_features(splits["train"])
    X, y = {}, {}
    for name, df in splits.items():
        X[name], columns = transform(df, state)
        y[name] = df[TARGET].to_numpy()
    ids = splits["test"][ID]
    del splits

    scores, results = {}, {}
    for name, model in models().items():
        if isinstance(model, XGBClassifier):
            model.fit(X["train"], y["train"], eval_set=[(X["valid"], y["valid"])], verbose=False)
            model.save_model(out / f"{name}.json")
        else:
            model.fit(X["train"], y["train"])
            joblib.dump(model, out / f"{name}.joblib")
        scores[name] = model.predict_proba(X["test"])[:, 1]
        results[name] = {k: float(v) for k, v in binary_metrics(y["test"], scores[name]).items()}

    predictions = pd.DataFrame({ID: ids, "split": "test", TARGET: y["test"],
                                **{f"score_{name}": s for name, s in scores.items()}})
    predictions.to_parquet(out / "predictions.parquet", index=False)
    (out / "features.json").write_text(json.dumps(columns))
    (out / "metrics.json").write_text(json.dumps({"split": "test", "threshold": THRESHOLD, "models": results}, indent=2))
    for name, values in results.items():
        print(name, " ".join(f"{k}={v:.4f}" for k, v in values.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
