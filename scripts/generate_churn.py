#!/usr/bin/env python
"""Generate a large churn table with exactly the IBM Telco schema, for benchmarks.

Rows are resampled with replacement from the real table (data/telco_customer_churn.csv), so
every categorical combination and its label are real and the label stays learnable. The
numeric columns are jittered so the rows are not plain copies:

- ``tenure`` moves by a few months (integer, 1..72); rows with tenure 0 stay 0, so the share
  of new customers (and of blank ``TotalCharges``) matches the source;
- ``MonthlyCharges`` gets about 2% noise, rounded to 5 cents like the source, kept in the
  source's range;
- ``TotalCharges`` is recomputed as tenure x MonthlyCharges x noise (the source's ratio has
  mean 1.00, sd 0.05), equal to MonthlyCharges at tenure 1, and written as text with a single
  space for tenure 0, as in the source;
- ``customerID`` is fresh and unique, in the source's form ``NNNN-XXXXX``.

Everything is vectorised NumPy; 1M rows take a few seconds plus the write. The output is a
pure function of ``--rows``, ``--seed`` and the source file.

    python scripts/generate_churn.py --rows 1000000 --seed 0 --output bench-data/churn_1m.csv
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

DEFAULT_SOURCE = Path(__file__).resolve().parent.parent / "data" / "telco_customer_churn.csv"

TELCO_COLUMNS = [
    "customerID", "gender", "SeniorCitizen", "Partner", "Dependents", "tenure", "PhoneService",
    "MultipleLines", "InternetService", "OnlineSecurity", "OnlineBackup", "DeviceProtection",
    "TechSupport", "StreamingTV", "StreamingMovies", "Contract", "PaperlessBilling",
    "PaymentMethod", "MonthlyCharges", "TotalCharges", "Churn",
]
MAX_TENURE = 72
_LETTERS = 26 ** 5                      # XXXXX part of an id
_ID_SPACE = 10 ** 4 * _LETTERS          # NNNN-XXXXX: ~1.2e11 distinct ids


def read_source(path: str | Path) -> pd.DataFrame:
    """The real table, read as text-preserving as possible (TotalCharges stays a string)."""
    frame = pd.read_csv(path, dtype={"TotalCharges": str}, keep_default_na=False)
    if list(frame.columns) != TELCO_COLUMNS:
        raise SystemExit(f"{path}: not the Telco schema (columns: {list(frame.columns)})")
    return frame


def fresh_ids(rng: np.random.Generator, rows: int) -> np.ndarray:
    """``rows`` distinct ids like '7590-VHVEG' (4 digits, dash, 5 capital letters)."""
    if rows > _ID_SPACE:
        raise SystemExit(f"--rows {rows} exceeds the {_ID_SPACE:,} possible Telco-style ids")
    codes = rng.choice(_ID_SPACE, size=rows, replace=False)
    digits, letters = np.divmod(codes, _LETTERS)
    chars = np.empty((rows, 10), dtype=np.uint8)
    for i in range(3, -1, -1):                          # 4 digits, least significant last
        digits, d = np.divmod(digits, 10)
        chars[:, i] = ord("0") + d
    chars[:, 4] = ord("-")
    for i in range(9, 4, -1):                           # 5 letters
        letters, c = np.divmod(letters, 26)
        chars[:, i] = ord("A") + c
    return chars.view("S10").ravel().astype(str)


def generate(source: pd.DataFrame, rows: int, seed: int) -> pd.DataFrame:
    """``rows`` rows in the Telco schema resampled from ``source`` with jittered numbers."""
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(source), size=rows)
    out = source.iloc[picks].reset_index(drop=True)

    tenure = source["tenure"].to_numpy()[picks]
    step = np.rint(rng.normal(0.0, 1.0 + 0.04 * tenure)).astype(np.int64)
    tenure = np.where(tenure > 0, np.clip(tenure + step, 1, MAX_TENURE), 0)

    monthly_src = source["MonthlyCharges"].to_numpy()
    monthly = monthly_src[picks] * rng.normal(1.0, 0.02, size=rows)
    monthly = np.clip(monthly, monthly_src.min(), monthly_src.max())
    monthly = np.round(np.rint(monthly * 20) / 20, 2)   # 5-cent steps, printed like 29.85

    ratio = np.clip(rng.normal(1.0, 0.05, size=rows), 0.7, 1.3)
    total = np.round(np.where(tenure == 1, monthly, tenure * monthly * ratio), 2)
    total_text = pd.Series(total).astype(str).to_numpy(dtype=object)
    total_text[tenure == 0] = " "                       # the source's blank for new customers

    out["customerID"] = fresh_ids(rng, rows)
    out["tenure"] = tenure
    out["MonthlyCharges"] = monthly
    out["TotalCharges"] = pd.array(total_text, dtype=source["TotalCharges"].dtype)
    return out[TELCO_COLUMNS]


def write(frame: pd.DataFrame, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    suffix = path.suffix.lower()
    if suffix == ".csv":
        frame.to_csv(tmp, index=False)
    elif suffix in (".parquet", ".pq"):
        frame.to_parquet(tmp, index=False)
    else:
        raise SystemExit(f"{path}: use a .csv or .parquet output")
    tmp.replace(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows to generate (default 1,000,000)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--output", required=True, type=Path, help="output file, .csv or .parquet")
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE,
                        help="the real Telco table to resample (default data/telco_customer_churn.csv)")
    args = parser.parse_args(argv)
    if args.rows < 1:
        parser.error("--rows must be positive")
    if args.output.suffix.lower() not in (".csv", ".parquet", ".pq"):
        parser.error(f"--output {args.output}: use a .csv or .parquet file")

    started = time.perf_counter()
    frame = generate(read_source(args.source), args.rows, args.seed)
    generated = time.perf_counter()
    write(frame, args.output)
    done = time.perf_counter()
    churn = (frame["Churn"] == "Yes").mean()
    print(f"{args.output}: {len(frame):,} rows x {len(frame.columns)} columns, churn {churn:.1%} "
          f"(generated in {generated - started:.1f} s, written in {done - generated:.1f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
