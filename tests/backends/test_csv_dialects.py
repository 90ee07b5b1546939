"""CSV dialects: ``load``'s ``sep``, ``encoding``, ``decimal`` and ``thousands`` read a European
export, a TSV or a cp1252 file as the same table as its plain twin, in memory and partitioned;
a header the separator did not split says which separator to set, once; ``init`` sniffs the
dialect and writes it, and the config runs first time; ``predict`` reads new rows in the run's
dialect unless told otherwise."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipeline.backends import get_backend
from pipeline.backends.csv_dialect import CsvDialect, one_column_header, sniff
from pipeline.config import load_config
from pipeline.core.errors import ConfigError, DataError
from pipeline.stages import load_table
from tests.support.cli import run_cli

CPU = get_backend("cpu")


def table(rows: int = 300, seed: int = 0) -> pd.DataFrame:
    """Text with accents, amounts in thousands with cents, whole numbers, a target."""
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({
        "kunde": [f"K{i:05d}" for i in range(rows)],
        "stadt": rng.choice(["Zürich", "Genève", "Köln", "Malmö"], rows),
        "umsatz": rng.normal(2500, 900, rows).round(2),
        "alter": rng.integers(18, 80, rows),
    })
    frame["churn"] = np.where(frame.umsatz + rng.normal(0, 400, rows) < 2300, "ja", "nein")
    return frame


def european(frame: pd.DataFrame, path: Path, *, sep: str = ";", encoding: str = "cp1252",
             thousands: bool = True) -> Path:
    """``frame`` written as a spreadsheet in a European locale exports it."""
    text = frame.copy()
    if thousands:
        text["umsatz"] = [f"{v:,.2f}".replace(",", "X").replace(".", ",").replace("X", ".") for v in frame.umsatz]
    else:
        text["umsatz"] = [f"{v:.2f}".replace(".", ",") for v in frame.umsatz]
    text.to_csv(path, sep=sep, index=False, encoding=encoding)
    return path


# ---------------------------------------------------------------- sniffing
def test_sniff_finds_the_separator_encoding_and_number_marks():
    head = "a;b;c\n1.234,5;Köln;3\n12,25;Zürich;4\n".encode("cp1252")
    dialect, notes = sniff(head)
    assert dialect == CsvDialect(sep=";", encoding="cp1252", decimal=",", thousands=".")
    assert notes[0].startswith("the bytes are not UTF-8") and "decimal comma" in notes[-1]
    assert sniff(b"a\tb\n1.5\t2\n")[0] == CsvDialect(sep="\t")
    assert sniff(b"a|b|c\nx|1|2\n")[0] == CsvDialect(sep="|")
    assert sniff(b"a,b\n1.5,2\n") == (CsvDialect(), [])
    # A sample cut inside a multi-byte character is still UTF-8.
    assert sniff("a;b\nK\u00f6ln;1\n".encode()[:-4])[0].encoding == "utf-8"
    # Commas inside a ';' file's text are not decimal marks unless numbers look so.
    assert sniff(b"a;b\nx, y;1\nz;2\n")[0] == CsvDialect(sep=";")
    assert one_column_header(["a;b;c"], CsvDialect()) == ";" and one_column_header(["a", "b"], CsvDialect()) is None


def test_with_a_decimal_comma_a_point_grouping_a_whole_numbers_thousands_is_the_thousands_separator():
    """`qty` written 4.268 beside prices written 79,85 was read as text (a category) by init:
    once the decimal mark is a comma, a point between groups of three digits separates thousands."""
    dialect, notes = sniff(b"a;price;qty\n1;79,85;4.268\n2;12,5;1.421\n3;3,25;12\n")
    assert dialect == CsvDialect(sep=";", decimal=",", thousands=".") and "'.' between thousands" in notes[-1]
    # A point used another way (4.2) leaves it undecided: no thousands separator.
    assert sniff(b"a;price;qty\n1;79,85;4.2\n2;12,5;1.421\n")[0].thousands is None


# ---------------------------------------------------------------- reading
@pytest.mark.parametrize("sep, encoding, thousands", [(";", "cp1252", True), ("\t", "utf-8", False),
                                                      ("|", "latin-1", False)])
def test_a_dialect_reads_the_same_table_as_its_plain_twin(tmp_path, sep, encoding, thousands):
    frame = table()
    plain = tmp_path / "plain.csv"
    frame.to_csv(plain, index=False)
    odd = european(frame, tmp_path / "odd.csv", sep=sep, encoding=encoding, thousands=thousands)
    expected = load_table(plain)
    got = load_table(odd, sep="tab" if sep == "\t" else sep, encoding=encoding, decimal=",",
                     thousands="." if thousands else None)
    pd.testing.assert_frame_equal(got, expected)
    lazy = CPU.read_partitioned(str(odd), dialect=CsvDialect(sep=sep, encoding=encoding, decimal=",",
                                                              thousands="." if thousands else None))
    pd.testing.assert_frame_equal(lazy.compute().reset_index(drop=True),       # as Dask reads the plain twin
                                  CPU.read_partitioned(str(plain)).compute().reset_index(drop=True))
    # Without the options the file is refused, naming what to set.
    with pytest.raises(DataError) as caught:
        load_table(odd, encoding=encoding)
    assert f"set sep: {chr(34) + chr(92) + 't' + chr(34) if sep == chr(9) else repr(sep)}" in str(caught.value)


def test_a_file_that_is_not_utf8_names_the_encoding_key(tmp_path):
    path = european(table(), tmp_path / "odd.csv")
    with pytest.raises(DataError, match=r"not a text CSV file in utf-8 .*give its encoding, cp1252 \(or latin-1\): encoding: on the load stage"):
        load_table(path, sep=";")


def write_config(folder: Path, data: str, extra: str = "") -> Path:
    (folder / "c.yaml").write_text(
        "name: d\ndevice: cpu\nstages:\n"
        f"  raw:\n    kind: load\n    path: {data}\n{extra}"
        "  split:\n    kind: split\n    inputs: [raw]\n    target: churn\n    positive: ja\n    test: 0.25\n"
        "  features:\n    kind: features\n    inputs: [split]\n    id: kunde\n"
        "    ops:\n      - one_hot: {columns: [stadt]}\n      - standardize: {columns: [umsatz, alter]}\n"
        "  model:\n    kind: train\n    inputs: [features]\n    model: logistic_regression\n"
        "  export:\n    kind: export\n    inputs: [model]\n")
    return folder / "c.yaml"


def test_validate_names_the_separator_once_instead_of_every_column(tmp_path):
    european(table(), tmp_path / "odd.csv", encoding="utf-8")
    write_config(tmp_path, "odd.csv")
    proc = run_cli("validate", "c.yaml", cwd=tmp_path)
    assert proc.returncode == 3
    assert proc.stderr.count("the header reads as one column") == 1 and "set sep: ';'" in proc.stderr
    assert "is not a column" not in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("extra, key, words", [
    ("    sep: ';'\n    decimal: ';'\n", "decimal", "decimal and sep are both ';'"),
    ("    encoding: klingon\n", "encoding", "unknown encoding 'klingon'"),
    ("    sep: ';;'\n", "sep", "sep must be one character"),
    ("    thousands: x\n", "thousands", "one punctuation or space character"),
])
def test_a_bad_dialect_key_is_a_config_error_at_its_key(tmp_path, extra, key, words):
    european(table(), tmp_path / "odd.csv")
    with pytest.raises(ConfigError) as caught:
        load_config(write_config(tmp_path, "odd.csv", extra))
    (issue,) = caught.value.issues
    assert issue.path == f"stages.raw.{key}" and words in issue.message


def test_dialect_keys_on_a_parquet_file_are_refused(tmp_path):
    table().to_parquet(tmp_path / "t.parquet")
    with pytest.raises(ConfigError, match="sep describes a CSV file; t.parquet is Parquet"):
        load_config(write_config(tmp_path, "t.parquet", "    sep: ';'\n"))


# ---------------------------------------------------------------- init, run, predict
def test_init_writes_the_dialect_the_run_reads_it_and_predict_reads_new_rows_alike(tmp_path):
    frame = table(400)
    european(frame, tmp_path / "kunden.csv")
    proc = run_cli("init", "kunden.csv", "--target", "churn", "-o", "kunden.yaml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "read as: the bytes are not UTF-8" in proc.stdout
    written = (tmp_path / "kunden.yaml").read_text()
    for line in ("sep: ';'", "encoding: 'cp1252'", "decimal: ','", "thousands: '.'"):
        assert line in written, written
    run = run_cli("run", "kunden.yaml", "--device", "cpu", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    manifest = json.loads(next((tmp_path / "runs").rglob("manifest.json")).read_text())
    assert manifest["stages"]["raw"]["facts"]["read_options"] == {"sep": ";", "encoding": "cp1252", "decimal": ",",
                                                                  "thousands": "."}
    new = frame.drop(columns="churn").head(20)
    european(new, tmp_path / "new.csv")
    scored = run_cli("predict", "--run", "latest", "--input", "new.csv", "--output", "s.csv", cwd=tmp_path)
    assert scored.returncode == 0, scored.stderr
    first = pd.read_csv(tmp_path / "s.csv")
    assert first["kunde"].tolist() == new["kunde"].tolist()
    # The same rows as a plain CSV, with the options that say so, score the same.
    new.to_csv(tmp_path / "plain.csv", index=False)
    again = run_cli("predict", "--run", "latest", "--input", "plain.csv", "--output", "p.csv", "--sep", ",",
                    "--encoding", "utf-8", "--decimal", ".", "--thousands", "", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    np.testing.assert_allclose(pd.read_csv(tmp_path / "p.csv")["score"], first["score"], rtol=0, atol=1e-12)
    bad = run_cli("predict", "--run", "latest", "--input", "new.csv", "--output", "b.csv", "--encoding", "nope",
                  cwd=tmp_path)
    assert bad.returncode == 2 and "--encoding 'nope' is not a known text encoding" in bad.stderr


def test_a_utf16_file_is_sniffed_and_a_late_byte_that_is_not_utf8_gets_the_encoding_hint(tmp_path):
    """UTF-16 (its byte order mark) was taken for cp1252, its header for 'ÿþc...'; a cp1252
    byte past the first 64 KiB failed the load with Python's words alone."""
    frame = pd.DataFrame({"city": ["Köln", "Zürich"] * 5, "n": range(10)})
    frame.to_csv(tmp_path / "u16.csv", index=False, encoding="utf-16")
    dialect, notes = sniff((tmp_path / "u16.csv").read_bytes())
    assert dialect.encoding == "utf-16" and "UTF-16" in notes[0]
    pd.testing.assert_frame_equal(load_table(tmp_path / "u16.csv", encoding="utf-16"), frame)
    with pytest.raises(DataError, match="UTF-16's byte order mark: set encoding: utf-16"):
        load_table(tmp_path / "u16.csv")
    late = pd.DataFrame({"city": ["Paris"] * 20000 + ["Chèque"], "n": range(20001)})
    late.to_csv(tmp_path / "late.csv", index=False, encoding="cp1252")
    with pytest.raises(DataError, match=r"can't decode byte 0xe8 .*give its encoding, cp1252"):
        load_table(tmp_path / "late.csv")
