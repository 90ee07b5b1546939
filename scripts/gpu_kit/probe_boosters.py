"""Which LightGBM and CatBoost builds train on the GPU, as their PyPI wheels ship them.

Run on a GPU host with the wheels installed into a folder on ``PYTHONPATH``::

    python scripts/gpu_kit/probe_boosters.py --rows 200000 --out result.json

For each library and each device setting it trains on the same generated table (numeric and
categorical columns, a binary target), and records whether the setting trained, its time,
its test ROC AUC, and the first line of the error where it did not. A CatBoost model trained
on the GPU is saved in CatBoost's own format and scored again on the CPU, so the file the
pipeline exports is known to score the same on a machine without a GPU. The numbers go in the
models guide ("What runs where").
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np


def make_table(rows: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """30 numeric columns and 5 integer-coded categoricals (50 levels), a logistic target."""
    rng = np.random.default_rng(seed)
    numeric = rng.normal(size=(rows, 30))
    codes = rng.integers(0, 50, size=(rows, 5))
    effect = rng.normal(size=50)
    logit = numeric[:, :5] @ np.array([1.0, -0.8, 0.6, 0.4, -0.3]) + effect[codes[:, 0]] + 0.5 * effect[codes[:, 1]]
    y = (rng.random(rows) < 1 / (1 + np.exp(-logit))).astype("int32")
    return np.hstack([numeric, codes]).astype("float32"), y, list(range(30, 35))


def auc(y: np.ndarray, score: np.ndarray) -> float:
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(y, score))


def attempt(fn: Any) -> dict[str, Any]:
    started = time.perf_counter()
    try:
        out = fn()
        return {"ok": True, "seconds": round(time.perf_counter() - started, 3), **out}
    except Exception as exc:  # noqa: BLE001 - a probe records every way a setting fails
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        return {"ok": False, "seconds": round(time.perf_counter() - started, 3), "error": f"{type(exc).__name__}: {first}"}


def probe_lightgbm(X: np.ndarray, y: np.ndarray, cats: list[int], split: int) -> dict[str, Any]:
    import lightgbm

    results: dict[str, Any] = {"version": lightgbm.__version__}
    for device in ("cpu", "gpu", "cuda"):
        def fit(device: str = device) -> dict[str, Any]:
            model = lightgbm.LGBMClassifier(n_estimators=200, learning_rate=0.1, num_leaves=63, device_type=device,
                                            verbose=-1)
            model.fit(X[:split], y[:split], categorical_feature=cats)
            return {"auc": round(auc(y[split:], model.predict_proba(X[split:])[:, 1]), 5)}
        results[device] = attempt(fit)
    return results


def probe_catboost(X: np.ndarray, y: np.ndarray, cats: list[int], split: int) -> dict[str, Any]:
    import catboost
    import pandas as pd

    frame = pd.DataFrame(X)
    for c in cats:
        frame[c] = frame[c].astype("int64")
    results: dict[str, Any] = {"version": catboost.__version__}
    for task_type in ("CPU", "GPU"):
        def fit(task_type: str = task_type) -> dict[str, Any]:
            model = catboost.CatBoostClassifier(iterations=300, learning_rate=0.1, depth=6, task_type=task_type,
                                                verbose=False, allow_writing_files=False, random_seed=0)
            model.fit(frame.iloc[:split], y[:split], cat_features=cats)
            score = model.predict_proba(frame.iloc[split:])[:, 1]
            out: dict[str, Any] = {"auc": round(auc(y[split:], score), 5)}
            with tempfile.TemporaryDirectory() as tmp:       # the exported file, scored on the CPU
                path = Path(tmp) / "model.cbm"
                model.save_model(str(path), format="cbm")
                again = catboost.CatBoostClassifier()
                again.load_model(str(path), format="cbm")
                out["reload_max_abs_diff"] = float(np.max(np.abs(again.predict_proba(frame.iloc[split:])[:, 1] - score)))
            return out
        results[task_type.lower()] = attempt(fit)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--only", choices=("lightgbm", "catboost"), action="append")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    X, y, cats = make_table(args.rows)
    split = int(args.rows * 0.8)
    report: dict[str, Any] = {"rows": args.rows}
    for name, probe in (("lightgbm", probe_lightgbm), ("catboost", probe_catboost)):
        if args.only and name not in args.only:
            continue
        try:
            report[name] = probe(X, y, cats, split)
        except ImportError as exc:
            report[name] = {"error": f"not installed: {exc}"}
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
