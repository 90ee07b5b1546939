"""Small generated data and pipeline configs for the probes (nothing is read from the network).

The table is churn-like: numeric columns (one with missing values), categorical columns and a
Yes/No target that depends on both, so every model learns something and a broken path shows
as a test ROC AUC near 0.5.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

NUMERIC = ("tenure", "monthly", "total", "calls")
CATEGORICAL = ("contract", "payment", "region")
TARGET = "churn"
_LEVELS = {"contract": ("month", "year", "two_year"), "payment": ("card", "bank", "check", "cash"),
           "region": tuple(f"r{i:02d}" for i in range(12))}


def churn_table(rows: int, seed: int = 0) -> Any:
    """A pandas DataFrame of ``rows`` generated customers (pure function of rows and seed)."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({"customer": [f"C{i:07d}" for i in range(rows)]})
    frame["tenure"] = rng.integers(0, 73, rows)
    frame["monthly"] = rng.uniform(20, 120, rows).round(2)
    total = frame["tenure"] * frame["monthly"] * rng.normal(1, 0.05, rows)
    frame["total"] = total.where(frame["tenure"] > 0)           # missing for new customers
    frame["calls"] = rng.poisson(2, rows)
    for column, levels in _LEVELS.items():
        frame[column] = rng.choice(levels, rows)
    logit = (1.2 - 0.05 * frame["tenure"] + 0.02 * (frame["monthly"] - 70) + 0.3 * frame["calls"]
             - 1.5 * (frame["contract"] != "month") + 0.8 * (frame["payment"] == "check"))
    frame[TARGET] = np.where(rng.random(rows) < 1 / (1 + np.exp(-logit)), "Yes", "No")
    return frame


def numeric_batches(files: int, rows_per_file: int, features: int, folder: Path, seed: int = 0) -> list[Path]:
    """Parquet files of float32 features and a 0/1 label ``y`` (XGBoost's external memory)."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    weights = rng.normal(size=features)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for index in range(files):
        x = rng.normal(size=(rows_per_file, features)).astype("float32")
        y = (x @ weights + rng.normal(scale=0.5, size=rows_per_file) > 0).astype("float32")
        frame = pd.DataFrame({f"f{j}": x[:, j] for j in range(features)})
        frame["y"] = y
        path = folder / f"part.{index}.parquet"
        frame.to_parquet(path, index=False)
        paths.append(path)
    return paths


def feature_ops(one_hot: bool = True) -> list[dict[str, Any]]:
    ops: list[dict[str, Any]] = [
        {"fill_missing": {"columns": ["total"], "strategy": "median"}},
        {"log1p": {"columns": ["total"]}},
        {"categorify": {"columns": ["region"]}},
    ]
    if one_hot:
        ops.append({"one_hot": {"columns": ["contract", "payment"]}})
    else:
        ops.append({"categorify": {"columns": ["contract", "payment"]}})
    ops.append({"standardize": {"columns": ["tenure", "monthly", "total", "calls"]}})
    return ops


def torch_stage(device: str, epochs: int = 4) -> dict[str, Any]:
    return {"kind": "torch", "inputs": ["features"], "hidden": [64, 32], "dropout": 0.0, "epochs": epochs,
            "batch_size": 512, "device": device, "early_stopping": {"monitor": "val_loss", "patience": 3}}


def config(name: str, data: str, device: str, models: Mapping[str, Mapping[str, Any]], *,
           partitioned: bool = False, cluster: Mapping[str, Any] | None = None,
           ops: Sequence[Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """A pipeline config: load, split, features, the given model stages, evaluate."""
    load: dict[str, Any] = {"kind": "load", "path": data}
    if partitioned:
        load["partitioned"] = True
    stages: dict[str, Any] = {
        "raw": load,
        "split": {"kind": "split", "inputs": ["raw"], "target": TARGET, "positive": "Yes", "test": 0.2, "valid": 0.1},
        "features": {"kind": "features", "inputs": ["split"], "id": "customer", "ops": list(ops or feature_ops())},
        **{name_: dict(stage) for name_, stage in models.items()},
        "evaluate": {"kind": "evaluate", "inputs": list(models)},
    }
    result: dict[str, Any] = {"name": name, "device": device, "seed": 7, "stages": stages}
    if cluster is not None:
        result["cluster"] = dict(cluster)
    return result


def write_config(path: Path, data: Mapping[str, Any]) -> Path:
    import yaml

    path.write_text(yaml.safe_dump(dict(data), sort_keys=False))
    return path
