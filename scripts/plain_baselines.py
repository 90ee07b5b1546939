#!/usr/bin/env python
"""What a user would get without ``pipeline``: plain scikit-learn and XGBoost on the same rows.

Given a finished run, this script reads the run's own resolved config (which file, which target,
which task) and its exported test predictions (which rows were held out), then trains plain
models as a user writes them — default parameters, one-hot encoding of the text columns, median
fill and scaling of the numbers — on exactly the pipeline's non-test rows (train and valid
together: a user without a pipeline has no reason to hold a validation split back) and scores
the pipeline's test rows. The pipeline's test metrics are printed beside them.

    pipeline run configs/churn_tuned.yaml
    python scripts/plain_baselines.py runs/churn_tuned/latest            # a table
    python scripts/plain_baselines.py runs/churn_tuned/latest --json     # for scripts

The run needs an ``id`` column in its features stage and an ``export`` stage (its predictions
name the test rows). Metrics are scikit-learn's own functions, not the pipeline's.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

MAIN_METRIC = {"binary": ("roc_auc", True), "multiclass": ("log_loss", False), "regression": ("rmse", False)}


def run_setup(run_dir: Path) -> dict[str, Any]:
    """Data file, read options, target, task and id column from the run's resolved config."""
    config = yaml.safe_load((run_dir / "config.yaml").read_text(encoding="utf-8"))
    stages = config["stages"]
    load = next(s for s in stages.values() if s["kind"] == "load")
    split_key, split = next((k, s) for k, s in stages.items() if s["kind"] == "split")
    features_key, features = next((k, s) for k, s in stages.items() if s["kind"] == "features")
    export_key = next(k for k, s in stages.items() if s["kind"] == "export")
    if not features.get("id"):
        raise SystemExit("the run's features stage has no id column: the test rows cannot be matched")
    manifest = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    task = manifest.get("stages", {}).get(split_key, {}).get("facts", {}).get("task") or {}
    return {"path": load["path"], "columns": load.get("columns"), "na_values": load.get("na_values"),
            "target": split["target"], "positive": split.get("positive"), "id": features["id"],
            "task": task.get("kind") or split.get("task") or "binary", "export": export_key,
            "features": features_key, "manifest": manifest}


def test_ids(run_dir: Path, export_stage: str, id_column: str) -> pd.Series:
    """The ids of the rows the pipeline held out for its test split."""
    path = run_dir / export_stage / "predictions.parquet"
    frame = pd.read_parquet(path)
    if "split" in frame.columns:
        frame = frame[frame["split"] == "test"]
    return frame[id_column].astype(str)


def plain_models(task: str, seed: int) -> dict[str, Any]:
    """Default parameters, as a user writes them (a seed, and enough iterations to converge)."""
    from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor
    from sklearn.linear_model import LinearRegression, LogisticRegression
    from xgboost import XGBClassifier, XGBRegressor

    if task == "regression":
        return {"sklearn_linear": LinearRegression(), "sklearn_forest": RandomForestRegressor(random_state=seed, n_jobs=-1),
                "xgboost": XGBRegressor(random_state=seed)}
    return {"sklearn_logistic": LogisticRegression(max_iter=1000), "sklearn_forest":
            RandomForestClassifier(random_state=seed, n_jobs=-1), "xgboost": XGBClassifier(random_state=seed)}


def encoder(frame: pd.DataFrame) -> Any:
    from sklearn.compose import ColumnTransformer
    from sklearn.impute import SimpleImputer
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    text = [c for c in frame.columns if not pd.api.types.is_numeric_dtype(frame[c])]
    numbers = [c for c in frame.columns if c not in text]
    return ColumnTransformer([
        ("text", OneHotEncoder(handle_unknown="ignore"), text),
        ("numbers", make_pipeline(SimpleImputer(strategy="median"), StandardScaler()), numbers),
    ])


def task_metrics(task: str, y_true: np.ndarray, scores: np.ndarray) -> dict[str, float]:
    from sklearn import metrics

    if task == "regression":
        return {"rmse": float(np.sqrt(metrics.mean_squared_error(y_true, scores))),
                "mae": float(metrics.mean_absolute_error(y_true, scores)), "r2": float(metrics.r2_score(y_true, scores))}
    if task == "multiclass":
        labels = np.arange(scores.shape[1])
        return {"log_loss": float(metrics.log_loss(y_true, scores, labels=labels)),
                "accuracy": float(metrics.accuracy_score(y_true, scores.argmax(axis=1))),
                "f1_macro": float(metrics.f1_score(y_true, scores.argmax(axis=1), average="macro"))}
    return {"roc_auc": float(metrics.roc_auc_score(y_true, scores)),
            "pr_auc": float(metrics.average_precision_score(y_true, scores)),
            "log_loss": float(metrics.log_loss(y_true, scores))}


def baselines(run_dir: Path, *, seed: int = 42) -> dict[str, Any]:
    """Plain models' test metrics on the run's own split, and the pipeline's, for one run."""
    setup = run_setup(run_dir)
    data = pd.read_csv(setup["path"], usecols=setup["columns"], na_values=setup["na_values"])
    ids = data[setup["id"]].astype(str)
    held_out = ids.isin(set(test_ids(run_dir, setup["export"], setup["id"])))
    target = data.pop(setup["target"])
    X = data.drop(columns=[setup["id"]])
    task = setup["task"]
    if task == "binary":
        positive = setup["positive"] if setup["positive"] is not None else 1
        y = (target.astype(str) == str(positive)).astype(int).to_numpy()
    elif task == "multiclass":
        y = pd.Categorical(target, categories=sorted(target.dropna().unique())).codes
    else:
        y = target.to_numpy(dtype="float64")
    prepared = encoder(X)
    train_X = prepared.fit_transform(X[~held_out])
    test_X = prepared.transform(X[held_out])
    results = {}
    for name, model in plain_models(task, seed).items():
        model.fit(train_X, y[~held_out])
        if task == "regression":
            scores = model.predict(test_X)
        else:
            proba = model.predict_proba(test_X)
            scores = proba[:, 1] if task == "binary" else proba
        results[name] = task_metrics(task, y[held_out], scores)
    pipeline_metrics = (setup["manifest"].get("metrics") or {}).get("models", {})
    return {"run": str(run_dir), "task": task, "train_rows": int((~held_out).sum()), "test_rows": int(held_out.sum()),
            "plain": results, "pipeline": pipeline_metrics, "main_metric": MAIN_METRIC[task][0]}


def best(results: dict[str, dict[str, float]], metric: str, higher: bool) -> tuple[str, float]:
    pick = max if higher else min
    name = pick(results, key=lambda m: results[m][metric])
    return name, results[name][metric]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a run folder (runs/<pipeline>/<run-id> or .../latest)")
    parser.add_argument("--seed", type=int, default=42, help="seed of the plain models")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    result = baselines(args.run.resolve(), seed=args.seed)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    metric, higher = MAIN_METRIC[result["task"]]
    print(f"{result['run']}: {result['task']}, {result['train_rows']} non-test rows, {result['test_rows']} test rows")
    for side in ("plain", "pipeline"):
        for name, values in result[side].items():
            shown = "  ".join(f"{k}={v:.4f}" for k, v in values.items() if isinstance(v, float))
            print(f"  {side:8s} {name:18s} {shown}")
    plain_name, plain_value = best(result["plain"], metric, higher)
    line = f"best plain: {plain_name} {metric}={plain_value:.4f}"
    if result["pipeline"]:
        pipe_name, pipe_value = best({k: v for k, v in result["pipeline"].items() if metric in v}, metric, higher)
        line += f"; best pipeline: {pipe_name} {metric}={pipe_value:.4f}"
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
