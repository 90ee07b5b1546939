"""The events benchmark: its generator's CDNOW-like shapes and the script end to end on a tiny size.

No timing thresholds: the end-to-end test checks that every engine ran, that the outputs agree with
the hand-written pandas one, and that the table and the JSON say so.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.conftest import ROOT, script_module

ROWS = 200_000


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """200,000 events in three chunks (so chunk boundaries are exercised)."""
    folder = tmp_path_factory.mktemp("events") / "events_200000"
    with script_module("generate_events") as gen:
        info = gen.generate(ROWS, 0, folder, 70_000)
    return folder, info


def read_events(folder: Path) -> pd.DataFrame:
    return pd.read_parquet(folder / "events")


def test_the_generator_writes_exactly_the_rows_asked_for_with_the_documented_schema(generated):
    folder, info = generated
    events = read_events(folder)
    assert len(events) == ROWS == info["rows"]
    assert dict(events.dtypes.astype(str)) == {"customer_id": "int64", "date": "datetime64[us]",
                                               "number_of_cds": "int16", "dollar_value": "float64"}
    assert events["customer_id"].nunique() == info["customers"]
    assert info["events_memory_bytes"] == events.memory_usage(index=False).sum()
    assert info["events_bytes"] == sum(p.stat().st_size for p in (folder / "events").glob("*.parquet"))


def test_customer_activity_is_heavy_tailed_like_cdnow(generated):
    counts = read_events(generated[0]).groupby("customer_id").size().sort_values(ascending=False)
    assert 0.4 <= (counts == 1).mean() <= 0.6                      # about half buy once (CDNOW 50.5%)
    assert 2.5 <= counts.mean() <= 3.3                             # CDNOW 2.96
    assert counts.iloc[: len(counts) // 100].sum() / counts.sum() >= 0.08   # the top 1% buy a lot
    # A heavy tail: the most active customer far beyond the 99th percentile (a geometric count with
    # the same mean would put its maximum within about 3x).
    assert counts.max() >= 5 * counts.quantile(0.99)


def test_dates_span_cdnows_18_months_and_first_purchases_its_first_quarter(generated):
    events = read_events(generated[0])
    assert events["date"].min() == pd.Timestamp("1997-01-01")
    assert events["date"].max() == pd.Timestamp("1998-06-30")
    assert (events["date"] == events["date"].dt.normalize()).all()            # whole days, as CDNOW
    assert events.groupby("customer_id")["date"].min().max() <= pd.Timestamp("1997-03-26")
    assert 0.35 <= (events["date"] < "1997-04-01").mean() <= 0.55             # CDNOW 45.6%
    cutoff = pd.Timestamp("1997-12-31")
    before = events.loc[events["date"] < cutoff, "customer_id"].unique()
    after = events.loc[(events["date"] >= cutoff) & (events["date"] < cutoff + pd.Timedelta(days=180)),
                       "customer_id"].unique()
    assert 0.6 <= 1 - np.isin(before, after).mean() <= 0.9                   # churned; CDNOW 77%


def test_each_file_holds_one_month_sorted_by_date(generated):
    for path in sorted((generated[0] / "events").glob("*.parquet")):
        dates = pd.read_parquet(path, columns=["date"])["date"]
        month = pd.Period(path.name.split("-c")[0].removeprefix("part-"), "M")
        assert dates.is_monotonic_increasing, path.name
        assert dates.iloc[0] >= month.start_time and dates.iloc[-1] <= month.end_time, path.name


def test_purchase_values_are_small_counts_and_skewed_amounts(generated):
    events = read_events(generated[0])
    assert events["number_of_cds"].between(1, 99).all()
    assert 0.4 <= (events["number_of_cds"] == 1).mean() <= 0.5                # CDNOW 45%
    assert (events["dollar_value"] >= 0).all()
    assert events["dollar_value"].mean() > events["dollar_value"].median()    # right-skewed


def test_the_customer_table_has_one_row_for_a_tenth_of_the_customers(generated):
    folder, info = generated
    customers = pd.read_parquet(folder / "customers.parquet")
    assert customers["customer_id"].is_unique
    assert customers["customer_id"].isin(read_events(folder)["customer_id"]).all()
    assert len(customers) == info["customers_with_attributes"]
    assert 0.08 <= len(customers) / info["customers"] <= 0.12
    assert list(customers.columns) == ["customer_id", "region", "channel", "age"]
    assert not customers["customer_id"].is_monotonic_increasing             # random order


def test_the_same_seed_gives_the_same_data_and_another_seed_other_data(tmp_path):
    with script_module("generate_events") as gen:
        for name, seed in (("a", 3), ("b", 3), ("c", 4)):
            gen.generate(5_000, seed, tmp_path / name, 2_000)

    def tables(name: str) -> tuple[pd.DataFrame, pd.DataFrame]:
        return read_events(tmp_path / name), pd.read_parquet(tmp_path / name / "customers.parquet")

    (a_events, a_customers), (b_events, b_customers), (c_events, _) = tables("a"), tables("b"), tables("c")
    pd.testing.assert_frame_equal(a_events, b_events)
    pd.testing.assert_frame_equal(a_customers, b_customers)
    assert len(c_events) == len(a_events)
    assert not a_events.equals(c_events)


def test_the_script_refuses_a_size_that_is_not_a_whole_number():
    with script_module("bench_events") as bench:
        assert bench.size_list("50M,1M,1m,20000") == [20_000, 1_000_000, 50_000_000]
        with pytest.raises(Exception, match="not a"):
            bench.parse_size("1.5x")
        with pytest.raises(Exception, match="whole"):
            bench.parse_size("0.5")


def test_the_output_check_names_a_value_that_differs(tmp_path):
    """The end-to-end agreement means something only if the comparison can fail."""
    frame = pd.DataFrame({"customer_id": [1, 2, 3], "as_of": pd.Timestamp("1997-12-31"),
                          "spend_all": [1.0, np.nan, 3.0], "region": ["north", None, "west"]})
    frame.to_parquet(tmp_path / "want.parquet")
    frame.iloc[::-1].to_parquet(tmp_path / "same.parquet")                       # row order is not compared
    changed = frame.assign(spend_all=[1.0, np.nan, 3.5])
    changed.to_parquet(tmp_path / "changed.parquet")
    frame.drop(columns="region").to_parquet(tmp_path / "short.parquet")
    with script_module("bench_events") as bench:
        assert bench.compare_outputs(tmp_path / "want.parquet", tmp_path / "same.parquet", 1e-9) == []
        (problem,) = bench.compare_outputs(tmp_path / "want.parquet", tmp_path / "changed.parquet", 1e-9)
        assert "spend_all" in problem and "customer 3" in problem
        (problem,) = bench.compare_outputs(tmp_path / "want.parquet", tmp_path / "short.parquet", 1e-9)
        assert "missing ['region']" in problem


@pytest.mark.slow
def test_the_benchmark_runs_every_engine_and_their_outputs_agree(tmp_path):
    pytest.importorskip("duckdb", reason="the benchmark's DuckDB engine (pip install duckdb)")
    pytest.importorskip("polars", reason="the benchmark's Polars engine (pip install polars)")
    output = tmp_path / "results.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "bench_events.py"), "--sizes", "20000", "--repeats", "1",
         "--data-dir", str(tmp_path / "data"), "--output", str(output)],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads(output.read_text())
    engines = ["pandas", "pipeline", "polars", "duckdb", "pipeline-dask"]
    assert results["succeeded"] and results["failures"] == []
    assert {name: e["agrees"] for name, e in results["check"]["engines"].items()} == dict.fromkeys(engines, True)
    table = {row["engine"]: row for row in results["table"]}
    assert list(table) == engines
    assert len({row["rows_out"] for row in table.values()}) == 1
    assert all(row["size"] == 20_000 and row["seconds"] > 0 and row["peak_rss_bytes"] > 0 for row in table.values())
    assert table["pandas"]["time_ratio"] == 1.0
    assert table["pipeline-dask"]["workers"] == 2
    for engine in engines:
        assert f"| 20,000 | {engine}" in done.stdout
    assert "outputs agree with pandas" in done.stdout
    assert not list((tmp_path / "data").glob("events-runs-*"))               # the run folders are removed


def test_the_gpu_engine_is_only_run_when_named_and_runs_the_same_steps_on_the_gpu_backend():
    with script_module("bench_events") as bench:
        assert bench.GPU_ENGINE not in bench.parse_args([]).engines
        assert bench.parse_args(["--engines", "polars,pipeline-gpu"]).engines == ["polars", "pipeline-gpu"]
        assert bench.WORK[bench.GPU_ENGINE] is bench.pipeline_gpu_work
        assert "cudf" in bench.IMPORTS[bench.GPU_ENGINE]
        command = bench.reproducing_command(bench.parse_args(["--engines", "pandas,pipeline-gpu,polars"]))
        assert "--engines pandas,polars,pipeline-gpu" in command
