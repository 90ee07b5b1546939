"""``pipeline init`` on tables it used to misread: each one written as a real file, drafted, and
where the misreading showed only in the run, run (to the stage that showed it) with the config
as written.

A target class taken for a placeholder, a placeholder of one column that is a value of
another, nested and decimal Parquet columns, classes too small to stratify, dates that read
both ways, the default output name, and how the summary prints shares, classes and roles.
"""

from __future__ import annotations

import decimal
import json
import os
import re
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from pipeline.core.errors import ExitCode
from pipeline.features.column_roles import classify, left_out_columns
from pipeline.scaffold import draft_config
from tests.support.cli import run_cli

ROOT = Path(__file__).resolve().parents[2]


def cli(*args: str, cwd: Path):
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return run_cli(*args, cwd=cwd, env={"PIPELINE_REPORT": "off", "COLUMNS": "250", "PYTHONPATH": path})


def run_facts(cwd: Path, config: str, until: str) -> dict:
    """Run ``config`` as written up to ``until``; the run's stage facts."""
    ran = cli("run", config, "--device", "cpu", "--until", until, cwd=cwd)
    assert ran.returncode == 0, ran.stderr[-3000:]
    manifest, = (cwd / "runs").glob("*/*/manifest.json")
    return {name: stage.get("facts", {}) for name, stage in json.loads(manifest.read_text())["stages"].items()}


def kids_table(n: int = 400) -> pd.DataFrame:
    rng = np.random.default_rng(4)
    kids = rng.choice(["0", "1", "2", "3+"], n, p=[0.5, 0.3, 0.13, 0.07])
    return pd.DataFrame({"x": np.round(rng.normal(0, 1, n), 3), "kids": kids})


# ---------------------------------------------------------------- 1. the target's values
def test_a_few_text_values_among_a_targets_numbers_are_a_class_not_missing(tmp_path: Path) -> None:
    """kids: 0, 1, 2 or '3+': '3+' is the fourth class, not a placeholder to blank and drop."""
    frame = kids_table()
    frame.to_csv(tmp_path / "kids.csv", index=False)
    made = cli("init", "kids.csv", "-t", "kids", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    config = yaml.safe_load((tmp_path / "kids.yaml").read_text())
    assert "na_values" not in config["stages"]["raw"]
    assert "missing_target" not in config["stages"]["split"]
    assert config["stages"]["split"]["task"] == "multiclass"
    facts = run_facts(tmp_path, "kids.yaml", "split")["split"]
    assert "dropped_missing_target" not in facts
    assert sorted(map(str, facts["task"]["classes"])) == ["0", "1", "2", "3+"]
    assert sum(facts["rows"].values()) == len(frame)


def test_a_real_missing_spelling_in_the_target_is_still_missing(tmp_path: Path) -> None:
    """'?' and 'unknown' in a numeric target are missing values: those rows are left out."""
    rng = np.random.default_rng(5)
    y = np.round(rng.normal(50, 10, 300), 2).astype(object)
    y[:9], y[9:15] = "?", "unknown"
    pd.DataFrame({"x": rng.normal(0, 1, 300), "y": y}).to_csv(tmp_path / "t.csv", index=False)
    draft = draft_config(tmp_path / "t.csv", "y")
    config = yaml.safe_load(draft.text)
    assert sorted(config["stages"]["raw"]["na_values"]) == ["?", "unknown"]
    assert config["stages"]["split"]["missing_target"] == "drop" and draft.task.kind == "regression"


# ---------------------------------------------------------------- 2. one placeholder, every column
def test_a_placeholder_that_is_a_value_of_another_column_is_not_written(tmp_path: Path) -> None:
    """'NA1' marks gaps in score, and is one of plan's three values: the load's na_values apply to
    every column, so writing it would blank a third of plan."""
    rng = np.random.default_rng(6)
    n = 400
    score = np.round(rng.normal(50, 10, n), 1).astype(object)
    score[rng.random(n) < 0.05] = "NA1"
    pd.DataFrame({"score": score, "plan": rng.choice(["NA1", "basic", "pro"], n),
                  "y": rng.integers(0, 2, n)}).to_csv(tmp_path / "na1.csv", index=False)
    made = cli("init", "na1.csv", "-t", "y", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    config = yaml.safe_load((tmp_path / "na1.yaml").read_text())
    assert "NA1" not in (config["stages"]["raw"].get("na_values") or [])
    assert re.search(r"note: 'NA1' .*score.* a value of plan", made.stdout), made.stdout
    reasons = {c.name: c.reason for c in draft_config(tmp_path / "na1.csv", "y").columns}
    assert reasons["plan"] == "3 values" and "read as missing" not in reasons["score"]


def test_the_column_table_names_every_column_a_written_placeholder_is_read_as_missing_in(tmp_path: Path) -> None:
    """'?' is a placeholder of a (5%); b holds it in 2 of 400 rows: read as missing there too, and said."""
    rng = np.random.default_rng(7)
    n = 400
    a = rng.choice(["x", "y", "z"], n).astype(object)
    a[:20] = "?"
    b = rng.choice(["p", "q"], n).astype(object)
    b[100:102] = "?"
    pd.DataFrame({"a": a, "b": b, "num": rng.normal(0, 1, n), "y": rng.integers(0, 2, n)}).to_csv(
        tmp_path / "q.csv", index=False)
    draft = draft_config(tmp_path / "q.csv", "y")
    assert yaml.safe_load(draft.text)["stages"]["raw"]["na_values"] == ["?"]
    reasons = {c.name: c.reason for c in draft.columns}
    assert "read as missing: '?' (5% of rows)" in reasons["a"]
    assert "read as missing: '?' (<1% of rows: 2)" in reasons["b"]
    assert "read as missing" not in reasons["num"]


# ---------------------------------------------------------------- 3. nested Parquet columns
def test_nested_parquet_columns_are_dropped_and_the_config_runs(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(8)
    n = 400
    table = pa.table({"tags": pa.array([[1, 2], [3]] * (n // 2)),
                      "meta": pa.array([{"a": 1, "b": "u"}, {"a": 2, "b": "v"}] * (n // 2)),
                      "x": pa.array(rng.normal(0, 1, n)), "y": pa.array(rng.integers(0, 2, n))})
    pq.write_table(table, tmp_path / "nested.parquet")
    made = cli("init", "nested.parquet", "-t", "y", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    roles = {c.name: (c.role, c.action) for c in draft_config(tmp_path / "nested.parquet", "y").columns}
    assert roles["tags"] == ("nested", "dropped") and roles["meta"] == ("nested", "dropped")
    assert re.search(r"tags\s*│\s*nested\s*│\s*lists", made.stdout), made.stdout
    config = yaml.safe_load((tmp_path / "nested.yaml").read_text())
    assert config["stages"]["features"]["ops"][0] == {"drop": {"columns": ["tags", "meta"]}}
    run_facts(tmp_path, "nested.yaml", "features")
    # auto leaves them out by the same rule
    frame = pd.read_parquet(tmp_path / "nested.parquet")
    assert {c.name: c.role for c in left_out_columns(frame, "y", "binary")} == {"tags": "nested", "meta": "nested"}


# ---------------------------------------------------------------- 4. Parquet decimals
def test_a_parquet_decimal_column_is_a_number(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(9)
    n = 400
    prices = [decimal.Decimal(f"{v:.2f}") for v in rng.uniform(1, 999, n)]
    pq.write_table(pa.table({"price": pa.array(prices, type=pa.decimal128(8, 2)),
                             "y": pa.array(rng.integers(0, 2, n))}), tmp_path / "dec.parquet")
    made = cli("init", "dec.parquet", "-t", "y", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    price = next(c for c in draft_config(tmp_path / "dec.parquet", "y").columns if c.name == "price")
    assert price.role == "numeric", price
    run_facts(tmp_path, "dec.yaml", "features")


# ---------------------------------------------------------------- 5. classes too small to stratify
def test_a_five_row_file_gets_an_unstratified_split_and_runs(tmp_path: Path) -> None:
    pd.DataFrame({"x": [1, 2, 3, 4, 5], "y": ["yes", "no", "no", "yes", "no"]}).to_csv(tmp_path / "five.csv",
                                                                                      index=False)
    made = cli("init", "five.csv", "-t", "y", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    text = (tmp_path / "five.yaml").read_text()
    assert yaml.safe_load(text)["stages"]["split"]["stratify"] is False
    assert re.search(r"stratify: false +# .*'yes'", text), text
    ran = cli("run", "five.yaml", "--device", "cpu", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr[-3000:]


def test_a_class_of_one_row_gets_an_unstratified_split(tmp_path: Path) -> None:
    rng = np.random.default_rng(10)
    y = np.r_[rng.choice(["a", "b", "c"], 599), ["d"]]
    pd.DataFrame({"x": rng.normal(0, 1, 600), "y": y}).to_csv(tmp_path / "one.csv", index=False)
    made = cli("init", "one.csv", "-t", "y", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert yaml.safe_load((tmp_path / "one.yaml").read_text())["stages"]["split"]["stratify"] is False
    assert "'d'" in made.stdout and "stratify: false" in made.stdout
    facts = run_facts(tmp_path, "one.yaml", "split")["split"]
    assert sorted(facts["task"]["classes"]) == ["a", "b", "c", "d"]


def test_stratified_when_every_class_has_rows_enough(tmp_path: Path) -> None:
    rng = np.random.default_rng(11)
    pd.DataFrame({"x": rng.normal(0, 1, 300), "y": rng.choice(["a", "b"], 300)}).to_csv(tmp_path / "ok.csv",
                                                                                        index=False)
    assert "stratify" not in yaml.safe_load(draft_config(tmp_path / "ok.csv", "y").text)["stages"]["split"]


def test_a_class_the_split_would_leave_out_of_training_is_refused(tmp_path: Path) -> None:
    """The only row of 'd' lands in the test split, stratified or not: no model could learn it."""
    from pipeline.stages.split import split_frame

    rng = np.random.default_rng(12)
    n = 600
    y = rng.choice(["a", "b", "c"], n).astype(object)
    where = split_frame(pd.DataFrame({"y": y, "row": np.arange(n)}), "y", seed=42, stratify=False,
                        task="multiclass").frames["test"]["row"].iloc[0]
    y[where] = "d"
    pd.DataFrame({"x": rng.normal(0, 1, n), "y": y}).to_csv(tmp_path / "rare.csv", index=False)
    refused = cli("init", "rare.csv", "-t", "y", cwd=tmp_path)
    assert refused.returncode == ExitCode.DATA, refused.stderr
    assert "'d'" in refused.stderr and "1 row" in refused.stderr
    assert not (tmp_path / "rare.yaml").exists()


# ---------------------------------------------------------------- 6. dates that read both ways
def test_dates_that_read_day_first_or_month_first_are_noted(tmp_path: Path) -> None:
    rng = np.random.default_rng(13)
    n = 300
    days = [f"{int(d):02d}/{int(m):02d}/2023" for d, m in zip(rng.integers(1, 13, n), rng.integers(1, 13, n))]
    pd.DataFrame({"when": days, "x": rng.normal(0, 1, n), "y": rng.integers(0, 2, n)}).to_csv(
        tmp_path / "d.csv", index=False)
    made = cli("init", "d.csv", "-t", "y", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    text = (tmp_path / "d.yaml").read_text()
    assert yaml.safe_load(text)["stages"]["raw"]["dates"] == {"when": "%m/%d/%Y"}
    summary = " ".join(made.stdout.split())
    assert re.search(r"note: when: .*month first \(%m/%d/%Y\).*dates: \{when: \"%d/%m/%Y\"\}", summary), summary
    comment = " ".join(line.strip().lstrip("# ") for line in text.splitlines() if line.strip().startswith("#"))
    assert 'dates: {when: "%d/%m/%Y"}' in comment, text


def test_dates_that_read_one_way_get_no_note(tmp_path: Path) -> None:
    days = [f"{d:02d}/01/2023" for d in range(1, 29)] * 10
    rng = np.random.default_rng(14)
    pd.DataFrame({"when": days, "x": rng.normal(0, 1, 280), "y": rng.integers(0, 2, 280)}).to_csv(
        tmp_path / "d.csv", index=False)
    draft = draft_config(tmp_path / "d.csv", "y")
    assert yaml.safe_load(draft.text)["stages"]["raw"]["dates"] == {"when": "%d/%m/%Y"}
    assert not [n for n in draft.notes if "when" in n]


# ---------------------------------------------------------------- 7. the default output file
def test_name_names_the_default_output_file(tmp_path: Path) -> None:
    kids_table().to_csv(tmp_path / "kids.csv", index=False)
    made = cli("init", "kids.csv", "-t", "kids", "--name", "custom", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert yaml.safe_load((tmp_path / "custom.yaml").read_text())["name"] == "custom"
    assert not (tmp_path / "kids.yaml").exists()


# ---------------------------------------------------------------- 8. how the summary says it
def test_whole_number_classes_print_as_whole_numbers(tmp_path: Path) -> None:
    rng = np.random.default_rng(15)
    y = rng.integers(0, 3, 300).astype(float)
    y[:10] = np.nan
    pd.DataFrame({"x": rng.normal(0, 1, 300), "y": y}).to_csv(tmp_path / "w.csv", index=False)
    reason = draft_config(tmp_path / "w.csv", "y").task.reason
    assert re.search(r"\(0: \d+, ", reason) or re.search(r"\(\d: \d+, \d: ", reason), reason
    assert ".0:" not in reason


def test_roles_print_as_the_docs_name_them(tmp_path: Path) -> None:
    rng = np.random.default_rng(16)
    n = 200
    frame = pd.DataFrame({
        "note": [f"this is a long free text note number {i}" for i in range(n)],
        "ticket_id": rng.choice(10**6, n, replace=False) // 1 * 1,
        "x": rng.normal(0, 1, n), "y": rng.integers(0, 2, n)})
    frame.loc[:5, "ticket_id"] = frame.loc[6:11, "ticket_id"].to_numpy()          # near-unique, not unique
    frame.to_csv(tmp_path / "r.csv", index=False)
    made = cli("init", "r.csv", "-t", "y", "-o", "-", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert re.search(r"note\s*│\s*free text\s*│", made.stderr), made.stderr
    assert re.search(r"ticket_id\s*│\s*likely leak\s*│", made.stderr), made.stderr
    assert "# note: free text (" in made.stdout and "# ticket_id: likely leak (" in made.stdout
    assert classify(frame["note"], "note", n_rows=n).label == "free text"


# ---------------------------------------------------------------- a table from an earlier pipeline
def test_a_table_that_has_a_missing_indicator_already_gets_no_second_one(tmp_path: Path) -> None:
    """`spend` with gaps beside a `spend_missing` column an earlier pipeline exported: init's
    fill_missing indicator named the same column, and init ended in an internal error (exit 1)."""
    rng = np.random.default_rng(8)
    spend = rng.gamma(2.0, 10.0, 300)
    spend[:12] = np.nan
    frame = pd.DataFrame({"spend": spend, "spend_missing": rng.normal(size=300),
                          "y": rng.choice(["a", "b"], 300)})
    frame.to_csv(tmp_path / "t.csv", index=False)
    made = cli("init", "t.csv", "-t", "y", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    ops = yaml.safe_load((tmp_path / "t.yaml").read_text())["stages"]["features"]["ops"]
    fills = [op["fill_missing"] for op in ops if "fill_missing" in op]
    assert any("spend" in fill["columns"] and not fill.get("indicator") for fill in fills)
    assert not any("spend" in fill["columns"] and fill.get("indicator") for fill in fills)


def test_numbers_stored_as_text_with_a_placeholder_in_parquet_are_read_as_numbers(tmp_path: Path) -> None:
    """pandas writes a number column holding ' ' placeholders to Parquet as text; init took
    it for a near-unique id and dropped it (the CSV rules for placeholders ran on CSV only)."""
    rng = np.random.default_rng(9)
    charges = np.round(rng.gamma(2.0, 500.0, 400), 2).astype(str).astype(object)
    charges[:4] = " "
    frame = pd.DataFrame({"charges": charges, "plan": rng.choice(["a", "b", "c"], 400),
                          "y": rng.choice(["yes", "no"], 400)})
    frame.to_parquet(tmp_path / "t.parquet")
    made = cli("init", "t.parquet", "-t", "y", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    config = yaml.safe_load((tmp_path / "t.yaml").read_text())
    assert config["stages"]["raw"]["na_values"] == [" "]
    assert config["stages"]["raw"]["dtypes"] == {"charges": "float64"}
    ops = config["stages"]["features"]["ops"]
    assert not any("charges" in op.get("drop", {}).get("columns", []) for op in ops)
    facts = run_facts(tmp_path, "t.yaml", "features")
    assert facts["raw"]["rows"] == 400


def test_target_classes_written_alike_are_noted(tmp_path: Path) -> None:
    """`Yes`, `yes ` and `YES` became three classes of a multiclass task without a note."""
    rng = np.random.default_rng(10)
    y = rng.choice(["Yes", "No", "yes ", "YES"], 300)
    pd.DataFrame({"x": rng.normal(size=300), "y": y}).to_csv(tmp_path / "t.csv", index=False)
    draft = draft_config(tmp_path / "t.csv", "y")
    assert draft.task.kind == "multiclass"
    assert "classes that differ only in case or spaces ('YES', 'Yes', 'yes ')" in draft.text.replace("\n# ", " ")


def test_a_class_of_a_few_rows_spelt_like_a_big_one_is_noted_once(tmp_path: Path) -> None:
    """3 rows of `Yse` beside 1,866 of `Yes` made Churn multiclass with no word of a typo, and
    the case note for `no` was printed twice (the trial split's warning, then the note)."""
    from tests.support.cli import run_cli

    rng = np.random.default_rng(12)
    y = np.where(rng.random(3000) < 0.3, "Yes", "No").astype(object)
    y[:3], y[3:5] = "Yse", "no"
    pd.DataFrame({"x": rng.normal(size=3000), "Churn": y}).to_csv(tmp_path / "t.csv", index=False)
    made = run_cli("init", "t.csv", "--target", "Churn", "-o", "t.yaml", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    said = made.stdout + made.stderr
    assert "'Yse' (3 rows) is spelt like 'Yes'" in said
    assert said.count("differ only in case or spaces") == 1


def test_a_cp1252_byte_past_the_sniffed_bytes_and_a_utf16_file_are_drafted_with_their_encoding(tmp_path: Path) -> None:
    """A cp1252 accent first met on row 20,000 failed init (exit 3, 'utf-8' codec can't decode),
    and init has no option to say the encoding; a UTF-16 file was read as cp1252."""
    rng = np.random.default_rng(11)
    frame = pd.DataFrame({"pay": ["Carte"] * 20000 + ["Chèque"] * 50, "x": rng.normal(size=20050),
                          "y": rng.choice(["a", "b"], 20050)})
    frame.to_csv(tmp_path / "late.csv", index=False, encoding="cp1252")
    frame.head(300).to_csv(tmp_path / "wide.csv", index=False, encoding="utf-16")
    for name in ("late", "wide"):
        made = cli("init", f"{name}.csv", "-t", "y", cwd=tmp_path)
        assert made.returncode == 0, made.stderr
    assert yaml.safe_load((tmp_path / "late.yaml").read_text())["stages"]["raw"]["encoding"] == "cp1252"
    assert yaml.safe_load((tmp_path / "wide.yaml").read_text())["stages"]["raw"]["encoding"] == "utf-16"


def test_a_row_cut_short_stops_init_as_it_stops_the_run(tmp_path: Path) -> None:
    """A line cut short read as a row of gaps: init drafted missing_target: drop for it, and
    the run then refused the file, naming the line."""
    rng = np.random.default_rng(12)
    frame = pd.DataFrame({"x": rng.normal(size=100), "z": rng.normal(size=100), "y": rng.choice(["a", "b"], 100)})
    lines = frame.to_csv(index=False).splitlines()
    lines[51] = lines[51].split(",")[0]
    (tmp_path / "t.csv").write_text("\n".join(lines) + "\n")
    made = cli("init", "t.csv", "-t", "y", cwd=tmp_path)
    assert made.returncode == ExitCode.DATA and "line 52 has 1 fields where the header has 3" in made.stderr
    assert not (tmp_path / "t.yaml").exists()
