"""The loading benchmark: its file, its parity check and the script end to end on a tiny size.

No timing thresholds: the end-to-end test checks that every engine ran, read every row, and that
the table and the JSON say so.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest

from tests.conftest import ROOT, script_module


def test_the_generated_file_has_its_twenty_kinds_of_column(tmp_path):
    with script_module("bench_load") as bench:
        path = bench.ensure_csv(3_000, 0, tmp_path, parquet=True)
        assert bench.check_parity(tmp_path, 0) == []
    frame = pd.read_csv(path)
    assert len(frame) == 3_000 and len(frame.columns) == 20
    kinds = frame.dtypes.astype(str).value_counts().to_dict()
    assert kinds == {"float64": 9, "int64": 5, "str": 5, "bool": 1}      # the id is an int to pandas
    assert frame[["im0", "im1", "fm"]].isna().any().all()
    assert len(pd.read_parquet(path.with_suffix(".parquet"))) == 3_000


@pytest.mark.slow                  # seven child processes, each importing pandas
def test_the_script_runs_every_engine_and_writes_its_table(tmp_path):
    out = tmp_path / "load.json"
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench_load.py"), "--rows", "2000",
                           "--repeats", "1", "--data-dir", str(tmp_path), "--output", str(out)],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["parity_problems"] == [] and len(report["runs"]) == 7
    assert all(run["succeeded"] and run["rows"] == 2000 for run in report["runs"])
    assert "| pipeline |" in done.stdout and "| parquet |" in done.stdout
