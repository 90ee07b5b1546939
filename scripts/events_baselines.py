#!/usr/bin/env python
"""The two event configs written by hand: plain pandas and XGBoost, on the same split.

For each of configs/cdnow_churn.yaml and configs/completejourney.yaml this script builds the
training table the way a user writes it without the pipeline — one pandas group-by per cut-off
and window for the features, one pass over the events after each cut-off for the label, a left
merge with the demographics — trains XGBoost with the parameters of the config's ``xgb`` stage
and the run's seed, and scores the test rows with scikit-learn's ROC AUC. The pipeline's own
test ROC AUC comes from the run record (``manifest.json``) of the config's latest run.

    pipeline run configs/cdnow_churn.yaml
    pipeline run configs/completejourney.yaml
    python scripts/events_baselines.py                    # a table: config, pipeline, baseline
    python scripts/events_baselines.py --json             # for scripts

The same split: CDNOW's test rows are those of the latest cut-off (``test_latest: 1``), which
the script computes itself and checks against the customers in the run's exported test
predictions. The Complete Journey split is by household (``group:``), a seeded draw; as in
scripts/plain_baselines.py the held-out households are read from the run's exported test
predictions. The features, windows, cut-offs and horizons below are the configs' own, written
out again on purpose (the point is a second, independent implementation). The feature ops that
only rescale a column monotonically (``log1p``, ``standardize``) are left out: a tree model
splits the same rows either way.

Nothing here imports ``pipeline``: the data work is pandas only.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd
import yaml

DAY = pd.Timedelta(days=1)


# ---------------------------------------------------------------------------------------------
# Event features and labels in plain pandas
# ---------------------------------------------------------------------------------------------

def window_events(events: pd.DataFrame, time: str, cutoff: pd.Timestamp, days: int | None) -> pd.DataFrame:
    """The events a window of ``days`` before ``cutoff`` sees: ``cutoff - days <= time < cutoff``."""
    seen = events[events[time] < cutoff]
    if days is not None:
        seen = seen[seen[time] >= cutoff - pd.Timedelta(days=days)]
    return seen


def days_before(cutoff: pd.Timestamp, times: pd.Series) -> pd.Series:
    """Days (with fractions) from each time to the cut-off."""
    return (cutoff - times) / DAY


def customer_snapshot(events: pd.DataFrame, *, by: str, time: str, cutoff: pd.Timestamp,
                      windowed: dict[str, Callable[[Any], pd.Series]], windows: dict[str, int | None],
                      whole: dict[str, Callable[[Any], pd.Series]]) -> pd.DataFrame:
    """One row per entity with an event before ``cutoff``: ``<feature>_<window>`` for each
    windowed feature and window, then ``<feature>_all`` for the features over all history."""
    known = events[events[by].notna() & (events[time] < cutoff)]
    table = pd.DataFrame(index=pd.Index(np.sort(known[by].unique()), name=by))
    columns: dict[str, pd.Series] = {}
    for name, make in windowed.items():
        for window, days in windows.items():
            grouped = window_events(known, time, cutoff, days).groupby(by)
            columns[f"{name}_{window}"] = make(grouped).reindex(table.index)
    grouped = known.groupby(by)
    for name, make in whole.items():
        columns[f"{name}_all"] = make(grouped).reindex(table.index)
    table = table.assign(**columns)
    table.insert(0, "as_of", cutoff)
    return table.reset_index()


def churn_label(events: pd.DataFrame, table: pd.DataFrame, *, by: str, time: str, horizon_days: int) -> pd.Series:
    """1 where the entity has no event in ``[as_of, as_of + horizon)``, else 0 (int8)."""
    churn = pd.Series(1, index=table.index, dtype="int8")
    horizon = pd.Timedelta(days=horizon_days)
    for cutoff, rows in table.groupby("as_of").groups.items():
        future = events[(events[time] >= cutoff) & (events[time] < cutoff + horizon)]
        churn[rows] = (~table.loc[rows, by].isin(future[by].unique())).astype("int8")
    return churn


# ---------------------------------------------------------------------------------------------
# The two configs, by hand
# ---------------------------------------------------------------------------------------------

CDNOW_CUTOFFS = ["1997-04-30", "1997-05-31", "1997-06-30", "1997-12-31"]
CDNOW_WINDOWS = {"30d": 30, "90d": 90, "all": None}


def cdnow_table(data: Path) -> pd.DataFrame:
    """configs/cdnow_churn.yaml's training table: purchase features before each cut-off, churn
    (no purchase in 180 days) after it, every cut-off stacked."""
    events = pd.read_csv(data / "cdnow_transactions.csv", dtype={"customer_id": str})
    events["date"] = pd.to_datetime(events["date"].astype(str), format="%Y%m%d")
    snapshots = []
    for text in CDNOW_CUTOFFS:
        cutoff = pd.Timestamp(text)
        snapshot = customer_snapshot(
            events, by="customer_id", time="date", cutoff=cutoff, windows=CDNOW_WINDOWS,
            windowed={"orders": lambda g: g.size(), "spend": lambda g: g["dollar_value"].sum(),
                      "recency_days": lambda g, c=cutoff: days_before(c, g["date"].max()),
                      "tenure_days": lambda g, c=cutoff: days_before(c, g["date"].min()),
                      "gap_days": lambda g: ((g["date"].max() - g["date"].min()) / DAY / (g.size() - 1))
                                            .where(g.size() > 1)},
            whole={"cds": lambda g: g["number_of_cds"].mean()})
        counts = [c for c in snapshot.columns if c.startswith(("orders_", "spend_"))]
        snapshot[counts] = snapshot[counts].fillna(0)          # an empty window: 0 orders, 0 spend
        snapshots.append(snapshot)
    table = pd.concat(snapshots, ignore_index=True)
    table["churn"] = churn_label(events, table, by="customer_id", time="date", horizon_days=180)
    # The config's feature ops: no purchase in a window (or one, for the gap) -> -1.
    table = table.fillna(-1)
    return table


CJ_CUTOFFS = [f"2017-{month:02d}-01" for month in range(4, 12)]
CJ_WINDOWS = {"4w": 28, "13w": 91, "all": None}
CJ_DEMOGRAPHICS = ["age", "income", "home_ownership", "marital_status", "household_size",
                   "household_comp", "kids_count"]


def completejourney_table(data: Path) -> pd.DataFrame:
    """configs/completejourney.yaml's training table: basket features per household before each
    cut-off, churn (no basket in 8 weeks) after it, joined to demographics (left join; the
    categories are one-hot encoded on the training rows in ``baseline_auc``)."""
    events = pd.read_csv(data / "completejourney_transactions_sample.csv")
    stamps = pd.to_datetime(events["transaction_timestamp"], utc=True)
    events["transaction_timestamp"] = stamps.dt.tz_localize(None)         # UTC, zone dropped
    time = "transaction_timestamp"
    snapshots = []
    for text in CJ_CUTOFFS:
        cutoff = pd.Timestamp(text)
        snapshot = customer_snapshot(
            events, by="household_id", time=time, cutoff=cutoff, windows=CJ_WINDOWS,
            windowed={"baskets": lambda g: g["basket_id"].nunique(), "spend": lambda g: g["sales_value"].sum(),
                      "discount": lambda g: g["retail_disc"].sum()},
            whole={"coupons": lambda g: g["coupon_disc"].sum(), "stores": lambda g: g["store_id"].nunique(),
                   "recency_days": lambda g, c=cutoff: days_before(c, g[time].max()),
                   "tenure_days": lambda g, c=cutoff: days_before(c, g[time].min())})
        windowed = [c for c in snapshot.columns if c.startswith(("baskets_", "spend_", "discount_"))]
        snapshot[windowed] = snapshot[windowed].fillna(0)
        snapshots.append(snapshot)
    table = pd.concat(snapshots, ignore_index=True)
    table["churn"] = churn_label(events, table, by="household_id", time=time, horizon_days=56)
    demographics = pd.read_csv(data / "completejourney_demographics.csv")
    return table.merge(demographics, on="household_id", how="left", validate="many_to_one")


def one_hot(train: pd.DataFrame, test: pd.DataFrame, columns: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Categories from the training rows only; a missing or unseen value is all zeros."""
    out = []
    for frame in (train, test):
        parts = [frame.drop(columns=columns)]
        for column in columns:
            for value in sorted(train[column].dropna().astype(str).unique()):
                parts.append((frame[column].astype(str) == value).astype("float32").rename(f"{column}={value}"))
        out.append(pd.concat(parts, axis=1))
    return out[0], out[1]


@dataclass(frozen=True)
class Baseline:
    """One config: how its table is built, its id column, and how its test rows are chosen."""

    config: str
    name: str
    table: Callable[[Path], pd.DataFrame]
    id: str
    split: str                      # "latest": the latest cut-off; "group": the run's test ids
    categorical: tuple[str, ...] = ()


BASELINES = [
    Baseline("configs/cdnow_churn.yaml", "cdnow_churn", cdnow_table, "customer_id", "latest"),
    Baseline("configs/completejourney.yaml", "completejourney", completejourney_table, "household_id", "group",
             tuple(CJ_DEMOGRAPHICS)),
]


# ---------------------------------------------------------------------------------------------
# Run records, the split, the model
# ---------------------------------------------------------------------------------------------

def run_test_ids(run_dir: Path, id_column: str) -> pd.Series:
    """The ids of the rows the pipeline run held out (from its exported test predictions)."""
    config = yaml.safe_load((run_dir / "config.yaml").read_text(encoding="utf-8"))
    export = next(k for k, s in config["stages"].items() if s["kind"] == "export")
    path = run_dir / export / "predictions.parquet"
    if not path.exists():
        raise SystemExit(f"{run_dir} has no {path.relative_to(run_dir)} (a partial run?): run the whole config")
    frame = pd.read_parquet(path)
    if "split" in frame.columns:
        frame = frame[frame["split"] == "test"]
    return frame[id_column].astype(str)


def pipeline_auc(run_dir: Path, model: str | None = None) -> tuple[str | None, float | None]:
    """(model, test ROC AUC) from the run record: of ``model``, or of the run's best model."""
    manifest = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    metrics = manifest.get("metrics") or {}
    name = model or metrics.get("best")
    return name, (metrics.get("models") or {}).get(name, {}).get("roc_auc")


def test_mask(baseline: Baseline, table: pd.DataFrame, run_dir: Path | None) -> pd.Series:
    """The test rows: the latest cut-off (checked against the run's), or the run's households."""
    ids = table[baseline.id].astype(str)
    if baseline.split == "latest":
        held_out = table["as_of"] == table["as_of"].max()
        if run_dir is not None:
            theirs = run_test_ids(run_dir, baseline.id)
            if len(theirs) != int(held_out.sum()) or set(theirs) != set(ids[held_out]):
                raise SystemExit(f"{run_dir}: the run's test rows are not the latest cut-off's "
                                 f"({len(theirs)} against {int(held_out.sum())})")
        return held_out
    if run_dir is None:
        raise SystemExit(f"{baseline.config}: the group split is read from a run; run the config first")
    return ids.isin(set(run_test_ids(run_dir, baseline.id)))


def xgb_params(config_path: Path) -> tuple[dict[str, Any], int]:
    """The ``xgb`` stage's parameters and the run seed, from a config file (a run's resolved
    ``config.yaml`` holds them as the run used them, ``--set`` overrides included)."""
    config = yaml.safe_load(config_path.read_text(encoding="utf-8"))
    return dict(config["stages"]["xgb"].get("params") or {}), int(config.get("seed", 42))


def baseline_auc(baseline: Baseline, root: Path, run_dir: Path | None) -> dict[str, Any]:
    """Build the table by hand, split it as the run did, train XGBoost, score the test rows."""
    from sklearn.metrics import roc_auc_score
    from xgboost import XGBClassifier

    table = baseline.table(root / "data")
    held_out = test_mask(baseline, table, run_dir).to_numpy()
    y = table.pop("churn").to_numpy()
    X = table.drop(columns=[baseline.id, "as_of"])
    train_X, test_X = X[~held_out], X[held_out]
    if baseline.categorical:
        train_X, test_X = one_hot(train_X, test_X, list(baseline.categorical))
    params, seed = xgb_params(run_dir / "config.yaml" if run_dir is not None else root / baseline.config)
    model = XGBClassifier(**{"tree_method": "hist", "random_state": seed, **params})
    model.fit(train_X.astype("float32"), y[~held_out])
    scores = model.predict_proba(test_X.astype("float32"))[:, 1]
    return {"config": baseline.config, "rows": len(table), "train_rows": int((~held_out).sum()),
            "test_rows": int(held_out.sum()), "test_churn_rate": float(y[held_out].mean()),
            "features": int(train_X.shape[1]), "baseline_roc_auc": float(roc_auc_score(y[held_out], scores)),
            "pipeline_roc_auc": pipeline_auc(run_dir, "xgb")[1] if run_dir is not None else None,
            "pipeline_best": pipeline_auc(run_dir) if run_dir is not None else (None, None)}


def latest_run(runs_dir: Path, name: str) -> Path | None:
    latest = runs_dir / name / "latest"
    return latest.resolve() if (latest / "manifest.json").exists() else None


def run_all(root: Path, runs_dir: Path) -> list[dict[str, Any]]:
    """Every config's baseline against its latest run in ``runs_dir`` (if there is one)."""
    return [baseline_auc(b, root, latest_run(runs_dir, b.name)) for b in BASELINES]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs-dir", type=Path, default=Path("runs"), help="where the configs' runs are")
    parser.add_argument("--root", type=Path, default=Path("."), help="project folder (configs/, data/)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    results = run_all(args.root, args.runs_dir)
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print("test ROC AUC")
    print(f"{'config':30s} {'rows':>7s} {'test':>6s}  {'pipeline xgb':>12s}  {'baseline xgb':>12s}  pipeline best")
    for r in results:
        pipe = "no run" if r["pipeline_roc_auc"] is None else f"{r['pipeline_roc_auc']:.4f}"
        best_name, best = r["pipeline_best"]
        best_text = "" if best is None else f"{best:.4f} ({best_name})"
        print(f"{r['config']:30s} {r['rows']:7d} {r['test_rows']:6d}  {pipe:>12s}  {r['baseline_roc_auc']:12.4f}  {best_text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
