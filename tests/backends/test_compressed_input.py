"""CSV files compressed whole (gzip, bzip2, xz, a one-file zip) read as their content, by the
load, `validate`, `init` and `predict` alike; a damaged one, an archive of several files and
a partitioned read of compressed parts are refused naming the file."""

from __future__ import annotations

import gzip
import json
import os
import tempfile
import zipfile

import numpy as np
import pandas as pd
import pytest

from pipeline.core.errors import DataError
from pipeline.stages import load_table
from tests.support.cli import run_cli

ROWS = pd.DataFrame({"id": [f"c{i}" for i in range(300)], "city": ["Zürich", "Köln", "Paris"] * 100,
                     "x": np.linspace(-1, 1, 300)})


def _left_over_copies() -> set[str]:
    return {n for n in os.listdir(tempfile.gettempdir()) if n.startswith("pipeline-plain-")}


@pytest.mark.parametrize("compression", ["gzip", "bz2", "xz", "zip"])
def test_a_compressed_csv_reads_as_its_content_whatever_its_name(tmp_path, compression):
    """`rows.csv.gz` was refused ("decompress it first"); pandas reads it, so a user's script did."""
    before = _left_over_copies()
    named = tmp_path / f"rows.csv.{compression}"
    ROWS.to_csv(named, index=False, compression=compression)
    pd.testing.assert_frame_equal(load_table(named), ROWS)
    unnamed = tmp_path / "rows.csv"                   # the content says it, not the name
    unnamed.write_bytes(named.read_bytes())
    pd.testing.assert_frame_equal(load_table(unnamed), ROWS)
    assert _left_over_copies() == before              # the decompressed copy is deleted


def test_a_compressed_csv_keeps_its_dialect_and_messages_name_the_users_file(tmp_path):
    path = tmp_path / "kunden.csv.gz"
    ROWS.to_csv(path, index=False, sep=";", decimal=",", encoding="cp1252", compression="gzip")
    pd.testing.assert_frame_equal(load_table(path, sep=";", decimal=",", encoding="cp1252"), ROWS)
    ragged = tmp_path / "ragged.csv.gz"
    ragged.write_bytes(gzip.compress(b"a,b\n1,2\n3,4,5\n"))
    with pytest.raises(DataError, match=r"^\S*ragged\.csv\.gz: line 3 has 3 fields where the header has 2") as info:
        load_table(ragged)
    assert "pipeline-plain-" not in str(info.value)


def test_a_damaged_or_ambiguous_compressed_file_is_refused_by_name(tmp_path):
    whole = gzip.compress(ROWS.to_csv(index=False).encode())
    cut = tmp_path / "cut.csv.gz"
    cut.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(DataError, match=r"cut\.csv\.gz: its gzip data is damaged or cut short"):
        load_table(cut)
    archive = tmp_path / "export.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("a.csv", "a\n1\n")
        zf.writestr("b.csv", "a\n2\n")
    with pytest.raises(DataError, match=r"export\.zip is a zip archive of 2 files \(a\.csv, b\.csv\); a CSV input is one"):
        load_table(archive, format="csv")


def test_a_partitioned_read_of_compressed_parts_is_refused_naming_the_part(tmp_path):
    from pipeline.backends import get_backend

    ROWS.to_csv(tmp_path / "part-0.csv", index=False)
    ROWS.to_csv(tmp_path / "part-1.csv.gz", index=False, compression="gzip")
    with pytest.raises(DataError, match=r"part-1\.csv\.gz is gzip-compressed, and a partitioned read splits plain"):
        get_backend("cpu").read_partitioned([str(tmp_path / "part-0.csv"), str(tmp_path / "part-1.csv.gz")])


def test_init_validate_run_and_predict_take_a_gzip_file(tmp_path):
    """From a `.csv.gz` to scores: init sniffs the content (here `;`-separated), validate checks
    its header, the run reads it (and a rerun takes it from the cache), and predict scores a
    compressed file as it scores the plain one."""
    rng = np.random.default_rng(3)
    rows = ROWS.assign(churn=np.where(ROWS["x"] + rng.normal(scale=0.5, size=300) > 0, "yes", "no"))
    rows.to_csv(tmp_path / "train.csv.gz", index=False, sep=";", compression="gzip")
    rows.to_csv(tmp_path / "new.csv", index=False, sep=";")
    rows.to_csv(tmp_path / "new.csv.gz", index=False, sep=";", compression="gzip")
    init = run_cli("init", "train.csv.gz", "--target", "churn", "-o", "p.yaml", cwd=tmp_path)
    assert init.returncode == 0, init.stderr
    written = (tmp_path / "p.yaml").read_text()
    assert "path: train.csv.gz" in written and "sep: ';'" in written
    assert "decompressed from gzip" in init.stdout
    assert run_cli("validate", "p.yaml", cwd=tmp_path).returncode == 0
    assert run_cli("run", "p.yaml", "-q", "--only", "raw", cwd=tmp_path).returncode == 0
    again = run_cli("run", "p.yaml", "--only", "raw", "--log-format", "json", cwd=tmp_path)
    assert again.returncode == 0 and '"kind": "load", "status": "cached"' in again.stderr
    proc = run_cli("run", "p.yaml", "-q", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    scores = {}
    for name in ("new.csv", "new.csv.gz"):
        out = f"{name}.scores.csv"
        proc = run_cli("predict", "--run", "latest", "--input", name, "--output", out, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        scores[name] = pd.read_csv(tmp_path / out)
    assert len(scores["new.csv"]) == 300
    pd.testing.assert_frame_equal(scores["new.csv.gz"], scores["new.csv"])


def test_a_predict_folder_reads_compressed_parts_but_not_notes(tmp_path):
    from pipeline.scoring.input_rows import input_files

    for name in ("a.csv.gz", "b.parquet", "c.tsv.bz2", "notes.txt", "notes.txt.gz", "x.gz"):
        (tmp_path / name).write_bytes(b"")
    assert [(p.name, fmt) for p, fmt in input_files(tmp_path)] == [
        ("a.csv.gz", "csv"), ("b.parquet", "parquet"), ("c.tsv.bz2", "csv")]
    assert input_files(tmp_path / "notes.txt.gz") == [(tmp_path / "notes.txt.gz", "csv")]
    with pytest.raises(DataError, match=r"x\.gz: cannot tell the format from the name"):
        input_files(tmp_path / "x.gz")


def test_a_compressed_stream_is_read_as_its_content(tmp_path):
    """`cat rows.csv.gz | pipeline run` (path '-'): the spooled bytes are gzip, read as a file is."""
    rng = np.random.default_rng(5)
    rows = ROWS.assign(churn=np.where(rng.random(300) < 0.4, "yes", "no"))
    (tmp_path / "p.yaml").write_text(
        "name: p\ndevice: cpu\nstages:\n  raw: {kind: load, path: '-'}\n"
        "  split: {kind: split, inputs: [raw], target: churn, positive: 'yes'}\n")
    data = gzip.compress(rows.to_csv(index=False).encode())
    proc = run_cli("run", "p.yaml", "-q", cwd=tmp_path, input=data, process=True)   # stdin by its descriptor: a process
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((tmp_path / "runs" / "p" / "latest" / "manifest.json").read_text())
    assert manifest["stages"]["raw"]["facts"]["rows"] == 300


def test_an_empty_zip_a_piped_archive_and_compressed_parts_are_named_before_any_run(tmp_path):
    """An empty zip (its first bytes differ) was read as text: validate listed every column as
    missing among "PK\\x05\\x06..." bytes; a zip piped in was named by its spooled copy
    (.stream-31154-...); validate passed compressed parts that the run then refused."""
    from pipeline.config import load_config
    from pipeline.core.errors import ConfigError

    zipfile.ZipFile(tmp_path / "empty.csv.zip", "w").close()
    with pytest.raises(DataError, match=r"empty\.csv\.zip is a zip archive of 0 files"):
        load_table(tmp_path / "empty.csv.zip")
    ROWS.to_csv(tmp_path / "part-0.csv.gz", index=False, compression="gzip")
    text = ("name: p\ndevice: cpu\nstages:\n"
            f"  raw: {{kind: load, path: '{tmp_path}/part-*.csv.gz', partitioned: true}}\n")
    with pytest.raises((ConfigError, DataError), match=r"part-0\.csv\.gz is gzip-compressed, and a partitioned read"):
        load_config(text=text, check_data=True)
    archive = tmp_path / "two.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("a.csv", "a\n1\n")
        zf.writestr("b.csv", "a\n2\n")
    (tmp_path / "p.yaml").write_text("name: p\ndevice: cpu\nstages:\n  raw: {kind: load, path: '-'}\n")
    proc = run_cli("run", "p.yaml", cwd=tmp_path, input=archive.read_bytes(), process=True)   # as above
    assert proc.returncode == 3, proc.stderr
    assert "standard input is a zip archive of 2 files" in proc.stderr and ".stream-" not in proc.stderr
