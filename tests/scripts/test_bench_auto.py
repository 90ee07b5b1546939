"""The benchmark tables of scripts/bench_auto.py (and the scripts built on them): every public
table of data/public/ reads as the task it is declared, with its SOURCE note; the generated ones
have the shapes the docs describe; the high-cardinality comparison's baseline has no target
encoding of its own."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import script_module

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("table", ["adult", "amazon", "california", "letter", "ames"])
def test_each_public_table_reads_as_its_declared_task_with_its_source_note(table):
    with script_module("bench_auto") as bench:
        file, target, task, _, _ = bench.PUBLIC[table]
        split, id_column = bench.bench_split(table, 1, valid=0.1)
    assert split.task.kind == task and split.target == target and id_column is None
    rows = {name: len(frame) for name, frame in split.frames.items()}
    assert rows["valid"] > 0 and rows["test"] > rows["valid"] and rows["train"] > rows["test"]
    assert f"{file}" in (ROOT / "data" / "public" / "SOURCE.md").read_text()
    if table == "adult":                   # ", " separators and "?" for missing, read as a user's load would
        train = split.frames["train"]
        assert not train["workclass"].str.startswith(" ").any() and train["workclass"].isna().any()
    if table == "letter":
        assert split.task.n_outputs == 26


def test_the_generated_tables_and_the_high_cardinality_columns():
    with script_module("bench_auto") as bench:
        highcard, _ = bench.bench_split("synthetic_highcard", 2)
        classes, _ = bench.bench_split("synthetic_multiclass", 2)
        amazon, _ = bench.bench_split("amazon", 2)
        with pytest.raises(ValueError, match="needs a runs folder"):
            bench.bench_split("churn", 2)
    assert sum(len(f) for f in highcard.frames.values()) == 100_000
    assert classes.task.kind == "multiclass" and classes.task.n_outputs == 5
    with script_module("bench_highcard") as script:
        many = script.high_cardinality(highcard, 100)
        assert sorted(many) == ["agent", "city", "product", "store"]
        assert len(script.high_cardinality(amazon, 100)) == 8          # ROLE_FAMILY has 67 levels


def test_each_public_file_is_the_byte_exact_copy_its_source_note_hashes():
    import hashlib

    folder = ROOT / "data" / "public"
    note = (folder / "SOURCE.md").read_text()
    files = sorted(p for p in folder.iterdir() if p.suffix == ".csv")
    assert len(files) == 5
    for path in files:
        assert hashlib.sha256(path.read_bytes()).hexdigest() in note, path.name
