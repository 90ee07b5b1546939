#!/usr/bin/env python
"""``auto`` against AutoGluon on exactly the same rows: the table a user would make before choosing.

For each table the project's own config decides the rows: the config is run up to its
``split`` stage (``run_pipeline(until=...)``), the valid rows go back into training (neither
tool needs one held back: both bag), and both tools fit the same training rows and score the
same test rows. The pipeline fits its ``auto`` stage (``fit_auto``, columns typed by
``default_ops``, no op list); AutoGluon fits ``TabularPredictor(...).fit(presets=...,
time_limit=...)`` in its own virtualenv (its pins conflict with the project's lock, so it is a
separate interpreter, ``--autogluon-python``; ``pip install 'autogluon.tabular[lightgbm,catboost,
xgboost]'`` there). Metrics are the project's own functions for both: ROC AUC (binary), log loss
and accuracy (multiclass), RMSE (regression). The median over seeds is printed per table.

    python scripts/bench_auto.py --time-limit 300 --seeds 1 2 3 --autogluon-python /path/to/ag/bin/python
    python scripts/bench_auto.py --tables churn charges --time-limit 60 --seeds 1 --json out.json
    python scripts/bench_auto.py --tables churn synthetic_binary --time-limit 120 --seeds 1 --fixed 5

``--fixed 5`` also fits every member on 5 folds in portfolio order (the plan before it was
made against the clock) on the same rows in the same invocation: the baseline of the plan.

Tables: the project's configs (churn, contract, charges, cdnow, completejourney), the public
tables of ``data/public/`` (adult: census, binary, mixed; amazon: 9 id-coded categoricals of up
to 7,500 levels; california: housing regression; letter: 26 classes; ames: 1,460 rows of 79
columns, regression) and generated ones (``synthetic_binary``, ``synthetic_regression``,
``synthetic_multiclass``, and ``synthetic_highcard``: 100,000 rows with three more categoricals
of 300 to 700 levels; numeric, categorical, missing values and noise, made here from a seed).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CONFIG_TABLES = {
    "churn": ("configs/churn.yaml", "split", "features"),
    "contract": ("configs/telco_contract.yaml", "split", "features"),
    "charges": ("configs/telco_charges.yaml", "split", "features"),
    "cdnow": ("configs/cdnow_churn.yaml", "split", "features"),
    "completejourney": ("configs/completejourney.yaml", "split", "features"),
}
GENERATED = ("synthetic_binary", "synthetic_regression", "synthetic_multiclass", "synthetic_highcard")
# Public tables copied into data/public/ (data/public/SOURCE.md): file, target, task, positive class,
# how pandas reads it (what a user's load stage would say: Adult's "?" and ", " separators; the
# Amazon table's id-coded columns are categories, not quantities).
PUBLIC = {
    "adult": ("adult_train.csv", "income", "binary", ">50K", {"skipinitialspace": True, "na_values": ["?"]}),
    "amazon": ("amazon_employee_access_train.csv", "ACTION", "binary", 1, {"dtype": "str"}),
    "california": ("california_housing.csv", "median_house_value", "regression", None, {}),
    "letter": ("letter_recognition.csv", "Letter", "multiclass", None, {}),
    "ames": ("ames_house_prices_train.csv", "SalePrice", "regression", None, {"keep_default_na": False,
                                                                               "na_values": [""]}),
}
MAIN = {"binary": ("roc_auc", True), "multiclass": ("log_loss", False), "regression": ("rmse", False)}

AUTOGLUON_RUNNER = r"""
import json, sys, time
import pandas as pd
from autogluon.tabular import TabularPredictor
args = json.loads(sys.argv[1])
train = pd.read_parquet(args["train"]); test = pd.read_parquet(args["test"])
started = time.perf_counter()
predictor = TabularPredictor(label=args["label"], problem_type=args["problem_type"], path=args["path"],
                             verbosity=0).fit(train, presets=args["presets"], time_limit=args["time_limit"])
seconds = time.perf_counter() - started
features = test.drop(columns=[args["label"]])
if args["problem_type"] == "regression":
    scores = predictor.predict(features).to_numpy()[:, None]
else:
    proba = predictor.predict_proba(features)
    scores = proba[sorted(proba.columns)].to_numpy()
pd.DataFrame(scores).rename(columns=str).to_parquet(args["out"])
board = predictor.leaderboard(silent=True)
print(json.dumps({"seconds": seconds, "best": str(board.iloc[0]["model"])}))
"""


def config_split(name: str, seed: int, runs_dir: Path) -> tuple[Any, str | None]:
    """The config's SplitData (valid rows merged into train) and its features' id column."""
    import yaml

    from pipeline.engine.runner import run_pipeline

    path, split_stage, features_stage = CONFIG_TABLES[name]
    config = yaml.safe_load((ROOT / path).read_text(encoding="utf-8"))
    id_column = config["stages"].get(features_stage, {}).get("id")
    result = run_pipeline(ROOT / path, until=[split_stage], overrides=[f"seed={seed}"], runs_dir=runs_dir,
                          cache=False)
    return merged(result.outputs[split_stage]), id_column


def merged(split: Any) -> Any:
    """``split`` with its valid rows moved into train (both tools bag the training rows)."""
    frames = dict(split.frames)
    valid = frames.pop("valid", None)
    if valid is not None and len(valid):
        frames["train"] = split.backend.frame.concat([frames["train"], valid], ignore_index=True)
    return dataclasses.replace(split, frames=frames, folds=None)


def public_split(name: str, seed: int, valid: float = 0.0) -> tuple[Any, str | None]:
    """A public table of data/public/, split 75/25 (stratified for classes) with ``seed``; ``valid``
    of the rows held out as a valid split (none: both tools bag)."""
    from pipeline.stages.split import split_frame

    file, target, task, positive, read = PUBLIC[name]
    frame = pd.read_csv(ROOT / "data" / "public" / file, **read)
    if name == "amazon":
        frame[target] = frame[target].astype(int)
    if name == "ames":       # "NA" is a level there (no alley), blanks are missing; numbers read as numbers
        frame = frame.apply(lambda c: pd.to_numeric(c) if c.name != target and _numeric(c) else c)
        frame = frame.drop(columns=["Id"])
    return split_frame(frame, target, test=0.25, valid=valid, seed=seed, backend="cpu", task=task,
                       positive=positive), None


def bench_split(table: str, seed: int, runs_dir: Path | None = None, valid: float = 0.0) -> tuple[Any, str | None]:
    """Any table's split by name: generated, public (data/public/) or a project config's (run up
    to its split stage in ``runs_dir``)."""
    if table in GENERATED:
        return generated_split(table, seed, valid=valid)
    if table in PUBLIC:
        return public_split(table, seed, valid=valid)
    if runs_dir is None:
        raise ValueError(f"{table}: a config's table needs a runs folder")
    return config_split(table, seed, runs_dir)


def _numeric(column: pd.Series) -> bool:
    try:
        pd.to_numeric(column.dropna())
    except (ValueError, TypeError):
        return False
    return True


def generated_split(name: str, seed: int, valid: float = 0.0) -> tuple[Any, str | None]:
    """A public-style table made here: 8,000 rows (100,000 for ``synthetic_highcard``), 12 numeric
    columns (some missing), 4 text categoricals (one of 300 levels; in ``synthetic_highcard``
    three of 300 to 700 levels more), a nonlinear target with noise (binary, regression, or 5
    classes)."""
    from pipeline.stages.split import split_frame

    rng = np.random.default_rng(seed)
    rows = 100_000 if name == "synthetic_highcard" else 8000
    numeric = rng.normal(size=(rows, 12))
    frame = pd.DataFrame(numeric, columns=[f"x{i}" for i in range(12)])
    frame.loc[rng.random(rows) < 0.1, "x3"] = np.nan
    levels = {"city": 300, "plan": 5, "channel": 8, "segment": 3}
    if name == "synthetic_highcard":
        levels |= {"store": 700, "product": 500, "agent": 300}
    effects = {}
    for column, count in levels.items():
        codes = rng.integers(0, count, size=rows)
        effects[column] = rng.normal(scale=0.7, size=count)[codes]
        frame[column] = [f"{column}_{c}" for c in codes]
    signal = (np.sin(numeric[:, 0] * 2) + numeric[:, 1] * numeric[:, 2] + np.abs(numeric[:, 4])
              + effects["city"] + effects["plan"] + 0.5 * effects["channel"]
              + sum(effects.get(c, 0.0) for c in ("store", "product", "agent")))
    if name in ("synthetic_binary", "synthetic_highcard"):
        frame["target"] = (signal + rng.normal(scale=1.0, size=rows) > np.median(signal)).astype(int)
        task = "binary"
    elif name == "synthetic_multiclass":
        noisy = signal + rng.normal(scale=0.7, size=rows)
        frame["target"] = np.digitize(noisy, np.quantile(noisy, [0.2, 0.4, 0.6, 0.8])).astype(str)
        task = "multiclass"
    else:
        frame["target"] = 10 * signal + rng.normal(scale=4.0, size=rows)
        task = "regression"
    return split_frame(frame, "target", test=0.25, valid=valid, seed=seed, backend="cpu", task=task), None


def pipeline_side(split: Any, id_column: str | None, time_limit: float, seed: int,
                  bag: int | None = None) -> dict[str, Any]:
    """The auto stage on ``split``: planned (``bag`` None) or every member on ``bag`` folds; its
    test metrics, seconds, the members with weight, the most seconds a weight-0 member took, and
    the seconds of a permutation importance of the result (evaluate's defaults)."""
    from pipeline.features.auto_ops import default_ops
    from pipeline.metrics import default_metric, task_metrics
    from pipeline.stages.auto import fit_auto
    from pipeline.stages.explain import explain_models
    from pipeline.stages.features import build_features

    started = time.perf_counter()
    features = build_features(split, default_ops(split.task.kind), id_column=id_column)
    result = fit_auto(features, time_limit=time_limit, seed=seed, name="auto", bag=bag)
    seconds = time.perf_counter() - started
    labels = np.asarray(features.labels("test"))
    metrics = task_metrics(split.task, labels, np.asarray(result.model.scores["test"]))
    best = next(r.model for r in result.leaderboard if r.status == "fitted")
    explained = time.perf_counter()
    explain_models([result.model], split="test", metric=default_metric(split.task.kind), threshold=0.5, seed=seed)
    wasted = [r.seconds for r in result.leaderboard if r.weight <= 0]
    return {"metrics": metrics, "seconds": seconds, "best": best, "mode": result.mode,
            "importance_seconds": time.perf_counter() - explained,
            "weight0_max_seconds": max(wasted, default=0.0),
            "weights": {k: round(v, 3) for k, v in result.model.weights.items() if v > 0},
            "leaderboard": [r.to_dict() for r in result.leaderboard],
            "plan": [step.to_dict() for step in result.plan]}


def autogluon_side(split: Any, id_column: str | None, time_limit: float, python: str, presets: str,
                   work: Path) -> dict[str, Any]:
    from pipeline.metrics import task_metrics

    label = split.target
    frames = {}
    for name in ("train", "test"):
        frame = split.backend.to_host(split.frames[name]) if hasattr(split.backend, "to_host") else split.frames[name]
        frames[name] = frame.drop(columns=[id_column]) if id_column else frame
        frames[name].to_parquet(work / f"{name}.parquet")
    problem = {"binary": "binary", "multiclass": "multiclass", "regression": "regression"}[split.task.kind]
    args = {"train": str(work / "train.parquet"), "test": str(work / "test.parquet"), "label": label,
            "problem_type": problem, "path": str(work / "ag"), "presets": presets, "time_limit": time_limit,
            "out": str(work / "scores.parquet")}
    done = subprocess.run([python, "-c", AUTOGLUON_RUNNER, json.dumps(args)], capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        raise RuntimeError(f"AutoGluon failed: {done.stderr.strip().splitlines()[-1:]}")
    info = json.loads(done.stdout.strip().splitlines()[-1])
    scores = pd.read_parquet(work / "scores.parquet").to_numpy()
    if split.task.kind == "binary":
        scores = scores[:, 1]
    elif split.task.kind == "regression":
        scores = scores[:, 0]
    labels = np.asarray(frames["test"][label])
    return {"metrics": task_metrics(split.task, labels, scores), **info}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", nargs="+", default=[*CONFIG_TABLES, *PUBLIC, *GENERATED])
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    parser.add_argument("--time-limit", type=float, default=300.0)
    parser.add_argument("--autogluon-python", help="an interpreter with autogluon.tabular installed; none: "
                                                   "the pipeline side only")
    parser.add_argument("--presets", default="medium_quality")
    parser.add_argument("--json", type=Path, help="write every result here")
    parser.add_argument("--fixed", type=int, metavar="K", help="also fit every member on K folds in order (the "
                                                               "plan before it was made against the clock): the "
                                                               "baseline, in the same invocation")
    args = parser.parse_args()
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for table in args.tables:
            for seed in args.seeds:
                work = Path(tmp) / f"{table}-{seed}"
                work.mkdir()
                split, id_column = bench_split(table, seed, work / "runs")
                row: dict[str, Any] = {"table": table, "seed": seed, "task": split.task.kind,
                                       "rows": {k: int(len(v)) for k, v in split.frames.items()}}
                row["pipeline"] = pipeline_side(split, id_column, args.time_limit, seed)
                if args.fixed:
                    row["fixed"] = pipeline_side(split, id_column, args.time_limit, seed, bag=args.fixed)
                if args.autogluon_python:
                    row["autogluon"] = autogluon_side(split, id_column, args.time_limit, args.autogluon_python,
                                                      args.presets, work)
                results.append(row)
                print(json.dumps(row, default=float), flush=True)
    print_table(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=float) + "\n", encoding="utf-8")


def print_table(results: list[dict[str, Any]]) -> None:
    """Per table, the median over seeds of the main metric (and seconds) of each side."""
    print("\n| table | rows (train/test) | metric | pipeline auto | fixed plan | AutoGluon | pipeline s | fixed s "
          "| AutoGluon s | importance s (auto / fixed) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for table in dict.fromkeys(r["table"] for r in results):
        rows = [r for r in results if r["table"] == table]
        metric, _ = MAIN[rows[0]["task"]]

        def median(side: str, key: str | None = None, rows: list[dict[str, Any]] = rows) -> str:
            values = [r[side]["metrics"][metric] if key is None else r[side][key] for r in rows if side in r]
            return f"{statistics.median(values):.4f}" if values else "–"
        sizes = rows[0]["rows"]
        print(f"| {table} | {sizes.get('train')}/{sizes.get('test')} | {metric} | {median('pipeline')} | "
              f"{median('fixed')} | {median('autogluon')} | {median('pipeline', 'seconds')} | "
              f"{median('fixed', 'seconds')} | {median('autogluon', 'seconds')} | "
              f"{median('pipeline', 'importance_seconds')} / {median('fixed', 'importance_seconds')} |")


if __name__ == "__main__":
    main()
