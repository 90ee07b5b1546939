#!/usr/bin/env python
"""Generate a purchase log with CDNOW-like distributions, plus a customer table to join, for benchmarks.

The shapes follow the CDNOW log (data/cdnow_transactions.csv: 69,659 purchases of 23,570
customers from 1997-01-01 to 1998-06-30); measured there and here (1M events, seed 0):

- purchases per customer: heavy-tailed. 1 + Poisson(rate), rate ~ LogNormal(-0.4, 1.45): 48% of the
  customers buy once, the mean is 2.9, the 99.9th percentile 61, the most active customer 696 times
  (CDNOW: 50.5% once, mean 2.96, 99.9th percentile 47, at most 217 of 23,570 customers);
- dates: every customer's first purchase is in the first 12 weeks (CDNOW's cohort joined in Q1 1997);
  75% of customers stay active to the end, the others for an exponential time (mean 200 days);
  repeat purchases fall uniformly in the active span, whole days only. Q1 1997 then holds ~46% of the
  events (CDNOW 45.6%); at the cut-off 1997-12-31, 75% of customers make no purchase in the next
  180 days (CDNOW 77%) and the median recency is 294 days (CDNOW 296);
- ``number_of_cds``: 1 + geometric (P(1) = 0.45, P(2) = 0.25, P(3) = 0.14: CDNOW's), at most 99;
- ``dollar_value``: number_of_cds x a unit price ~ LogNormal(log 14, 0.2) (CDNOW's median per CD:
  13.99), rounded to cents, 0 in 0.1% of rows (CDNOW: 80 rows); right-skewed (mean > median).

Written under ``--output`` (a folder):

- ``events/part-YYYY-MM-cNNNN.parquet``: columns customer_id (int64), date (timestamp[us]),
  number_of_cds (int16), dollar_value (float64); one file per month and chunk, each sorted by date, so
  the folder read in name order is a log ordered by month (as a data lake keeps one) and every
  partition holds many customers (a group-by has to shuffle);
- ``customers.parquet``: customer_id, region (8 values), channel (web/phone/mail), age (int16) of one
  customer in 10 (attributes known for some customers only, as Complete Journey's demographics cover a
  third of its households: a left join leaves the others blank), in random order; small enough to be
  the lookup side of a join on every Dask worker;
- ``_COMPLETE.json``: rows, customers, bytes on disk and the events' in-memory bytes (pandas), written
  last (the folder is built beside ``--output`` and moved into place when complete).

Customers are generated ``--chunk-rows`` events at a time (default 4M; ~0.5 GB of memory whatever
``--rows``), all vectorised NumPy. The output is a pure function of ``--rows``, ``--seed`` and
``--chunk-rows``.

    python scripts/generate_events.py --rows 1000000 --seed 0 --output bench-data/events_1000000_s0
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

VERSION = 1                                     # in _COMPLETE.json: bump when the output changes
START = np.datetime64("1997-01-01", "D")
END = np.datetime64("1998-06-30", "D")
DAYS = int((END - START).astype(int))            # 545: the last day's offset
FIRST_PURCHASE_DAYS = 84                        # first purchases: 1997-01-01 .. 1997-03-26
RATE_MU, RATE_SIGMA = -0.4, 1.45                # repeat purchases ~ Poisson(LogNormal(mu, sigma))
MEAN_EVENTS_PER_CUSTOMER = 1 + float(np.exp(RATE_MU + RATE_SIGMA**2 / 2))
STAYS_SHARE = 0.75                              # customers active until the end of the log
LIFETIME_MEAN_DAYS = 200.0                      # the others: exponential lifetime
CDS_P = 0.45
MAX_CDS = 99
UNIT_PRICE = 14.0
UNIT_PRICE_SIGMA = 0.2
ZERO_VALUE_SHARE = 0.001
REGIONS = np.array(["north", "south", "east", "west", "central", "coast", "mountain", "islands"])
CHANNELS = np.array(["web", "phone", "mail"])
CHANNEL_P = [0.6, 0.3, 0.1]
ATTRIBUTES_SHARE = 0.1                          # customers with a row in customers.parquet

EVENT_SCHEMA = pa.schema([("customer_id", pa.int64()), ("date", pa.timestamp("us")),
                          ("number_of_cds", pa.int16()), ("dollar_value", pa.float64())])
CUSTOMER_SCHEMA = pa.schema([("customer_id", pa.int64()), ("region", pa.string()),
                             ("channel", pa.string()), ("age", pa.int16())])
EVENT_BYTES_PER_ROW = 8 + 8 + 2 + 8             # a pandas frame of EVENT_SCHEMA, per row
MONTHS = np.arange(START.astype("datetime64[M]"), END.astype("datetime64[M]") + 1)
MONTH_START_DAYS = (MONTHS.astype("datetime64[D]") - START).astype(np.int64)


def purchases_per_customer(rng: np.random.Generator, customers: int) -> np.ndarray:
    """Heavy-tailed counts: everyone buys once, repeat purchases are Poisson with a log-normal rate."""
    return 1 + rng.poisson(rng.lognormal(RATE_MU, RATE_SIGMA, size=customers))


def counts_for_chunk(rng: np.random.Generator, events: int) -> np.ndarray:
    """Purchase counts of enough new customers for exactly ``events`` events (the last one's cut short)."""
    parts: list[np.ndarray] = []
    total = 0
    while total < events:
        need = events - total
        counts = purchases_per_customer(rng, max(64, int(need / MEAN_EVENTS_PER_CUSTOMER * 1.05)))
        ends = np.cumsum(counts)
        stop = int(np.searchsorted(ends, need))          # first customer reaching `need`
        if stop < len(counts):
            counts = counts[: stop + 1]
            counts[-1] -= int(ends[stop] - need)
        parts.append(counts)
        total += int(counts.sum())
    return np.concatenate(parts)


def event_days(rng: np.random.Generator, counts: np.ndarray) -> np.ndarray:
    """Day offsets (from START) of each customer's purchases, customer by customer."""
    customers = len(counts)
    first = rng.integers(0, FIRST_PURCHASE_DAYS + 1, size=customers)
    lifetime = np.where(rng.random(customers) < STAYS_SHARE, np.inf,
                        rng.exponential(LIFETIME_MEAN_DAYS, size=customers))
    span = np.minimum(lifetime, DAYS - first)
    owner = np.repeat(np.arange(customers), counts)
    is_first = np.zeros(len(owner), dtype=bool)
    is_first[np.concatenate(([0], np.cumsum(counts)[:-1]))] = True
    offset = np.floor(rng.random(len(owner)) * (span[owner] + 1))
    days = first[owner] + np.where(is_first, 0, offset).astype(np.int64)
    return np.minimum(days, DAYS)


def purchase_values(rng: np.random.Generator, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """(number_of_cds, dollar_value): small counts, and a right-skewed amount in cents."""
    cds = np.minimum(rng.geometric(CDS_P, size=rows), MAX_CDS).astype(np.int16)
    price = rng.lognormal(np.log(UNIT_PRICE), UNIT_PRICE_SIGMA, size=rows)
    value = np.round(cds * price, 2)
    value[rng.random(rows) < ZERO_VALUE_SHARE] = 0.0
    return cds, value


def event_chunk(rng: np.random.Generator, events: int, first_id: int) -> tuple[pa.Table, np.ndarray]:
    """``events`` purchases of new customers numbered from ``first_id``, sorted by date; and their ids."""
    counts = counts_for_chunk(rng, events)
    ids = np.arange(first_id, first_id + len(counts), dtype=np.int64)
    days = event_days(rng, counts)
    cds, value = purchase_values(rng, len(days))
    order = np.argsort(days, kind="stable")
    customer = np.repeat(ids, counts)[order]
    dates = (START + days[order].astype("timedelta64[D]")).astype("datetime64[us]")
    table = pa.table({"customer_id": customer, "date": dates, "number_of_cds": cds[order],
                      "dollar_value": value[order]}, schema=EVENT_SCHEMA)
    return table, ids


def customer_chunk(rng: np.random.Generator, ids: np.ndarray) -> pa.Table:
    """Attributes of a share of ``ids``, in random order."""
    kept = rng.permutation(ids[rng.random(len(ids)) < ATTRIBUTES_SHARE])
    n = len(kept)
    return pa.table({
        "customer_id": kept,
        "region": REGIONS[rng.integers(0, len(REGIONS), size=n)],
        "channel": CHANNELS[rng.choice(len(CHANNELS), size=n, p=CHANNEL_P)],
        "age": np.clip(np.rint(rng.normal(38, 12, size=n)), 18, 90).astype(np.int16),
    }, schema=CUSTOMER_SCHEMA)


def write_months(table: pa.Table, folder: Path, chunk: int) -> None:
    """One file per month present in the (date-sorted) chunk."""
    days = (table.column("date").to_numpy().astype("datetime64[D]") - START).astype(np.int64)
    bounds = np.searchsorted(days, MONTH_START_DAYS, side="left").tolist() + [len(days)]
    for month, lo, hi in zip(MONTHS, bounds[:-1], bounds[1:]):
        if hi > lo:
            pq.write_table(table.slice(lo, hi - lo), folder / f"part-{month}-c{chunk:04d}.parquet")


def generate(rows: int, seed: int, output: Path, chunk_rows: int) -> dict[str, Any]:
    """Write the events folder and customer table under ``output``; returns what ``_COMPLETE.json`` says."""
    rng = np.random.default_rng(seed)
    events_dir = output / "events"
    events_dir.mkdir(parents=True)
    customers = with_attributes = 0
    with pq.ParquetWriter(output / "customers.parquet", CUSTOMER_SCHEMA) as writer:
        for chunk, start in enumerate(range(0, rows, chunk_rows)):
            table, ids = event_chunk(rng, min(chunk_rows, rows - start), customers + 1)
            write_months(table, events_dir, chunk)
            attributes = customer_chunk(rng, ids)
            writer.write_table(attributes)
            customers += len(ids)
            with_attributes += attributes.num_rows
    events_bytes = sum(p.stat().st_size for p in events_dir.glob("*.parquet"))
    return {
        "version": VERSION, "rows": rows, "seed": seed, "chunk_rows": chunk_rows, "customers": customers,
        "customers_with_attributes": with_attributes,
        "events_files": len(list(events_dir.glob("*.parquet"))), "events_bytes": events_bytes,
        "customers_bytes": (output / "customers.parquet").stat().st_size,
        "events_memory_bytes": rows * EVENT_BYTES_PER_ROW,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="events to generate (default 1,000,000)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--output", required=True, type=Path, help="output folder (replaced if it exists)")
    parser.add_argument("--chunk-rows", type=int, default=4_000_000,
                        help="events generated and written at a time (default 4,000,000)")
    args = parser.parse_args(argv)
    if args.rows < 1 or args.chunk_rows < 1:
        parser.error("--rows and --chunk-rows must be positive")

    started = time.perf_counter()
    tmp = args.output.with_name(args.output.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    info = generate(args.rows, args.seed, tmp, args.chunk_rows)
    (tmp / "_COMPLETE.json").write_text(json.dumps(info, indent=2) + "\n")
    shutil.rmtree(args.output, ignore_errors=True)
    tmp.replace(args.output)
    print(f"{args.output}: {args.rows:,} events of {info['customers']:,} customers in {info['events_files']} "
          f"files, {info['events_bytes']:,} bytes; customers.parquet {info['customers_bytes']:,} bytes; "
          f"{info['events_memory_bytes']:,} bytes in memory ({time.perf_counter() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
