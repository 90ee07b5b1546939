"""``pipeline init``: a config for a table nobody described, that validates and runs.

Five tables of the kinds people bring (generated here, written as real files) each go
through ``pipeline init`` and then ``pipeline run`` as real subprocesses, to a report; the
roles, the task and the exclusions are read from the written config. Bad inputs get one
clear message and their exit code.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from tests.support.cli import run_cli as _pipeline
from pipeline.config import load_config
from pipeline.scaffold.sampling import read_sample
from pipeline.scaffold import draft_config, scalar
from pipeline.features.column_roles import classify, left_out_columns
from pipeline.core.errors import ExitCode

ROWS = 600
ROOT = Path(__file__).resolve().parents[2]


def cli(*args: str, cwd: Path, report: bool = False) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return _pipeline(*args, cwd=cwd, env={"PIPELINE_REPORT": "on" if report else "off", "COLUMNS": "200",
                                          "PYTHONPATH": path})


# ---------------------------------------------------------------- the tables
def binary_with_text(rng: np.random.Generator) -> pd.DataFrame:
    plan = rng.choice(["basic", "plus", "premium"], ROWS)
    region = rng.choice(["north", "south", "east", "west"], ROWS)
    tenure = rng.integers(0, 72, ROWS)
    monthly = np.round(rng.normal(60, 20, ROWS).clip(5), 2)
    score = (plan == "basic") * 1.0 - tenure / 40 + rng.normal(0, 1, ROWS)
    frame = pd.DataFrame({
        "customer_id": [f"C{i:05d}" for i in range(ROWS)],
        "plan": plan, "region": region, "tenure": tenure, "monthly": monthly,
        "paperless": rng.choice(["Yes", "No"], ROWS),
        "churned": np.where(score > 0, "yes", "no"),
    })
    frame.loc[rng.choice(ROWS, 30, replace=False), "plan"] = None         # text gaps
    frame.loc[rng.choice(ROWS, 25, replace=False), "monthly"] = np.nan    # number gaps
    return frame


def multiclass(rng: np.random.Generator) -> pd.DataFrame:
    label = rng.choice(["setosa", "versicolor", "virginica"], ROWS)
    centre = pd.Series(label).map({"setosa": 1.0, "versicolor": 2.0, "virginica": 3.0}).to_numpy()
    return pd.DataFrame({
        "petal_length": np.round(centre + rng.normal(0, 0.6, ROWS), 2),
        "petal_width": np.round(centre / 2 + rng.normal(0, 0.4, ROWS), 2),
        "colour": rng.choice(["white", "blue", "purple", "yellow"], ROWS),
        "species": label,
    })


def regression(rng: np.random.Generator) -> pd.DataFrame:
    sqft = np.round(rng.lognormal(7, 0.9, ROWS), 1)                      # skewed: log1p
    rooms = rng.integers(1, 8, ROWS)
    hood = rng.choice([f"hood_{i}" for i in range(40)], ROWS)             # many values: categorify
    price = 50 * np.log(sqft) + 10 * rooms + rng.normal(0, 40, ROWS)
    frame = pd.DataFrame({"sqft": sqft, "rooms": rooms, "neighbourhood": hood, "price": np.round(price, 2)})
    frame.loc[rng.choice(ROWS, 12, replace=False), "price"] = np.nan      # rows without a target
    return frame


def with_dates(rng: np.random.Generator) -> pd.DataFrame:
    start = pd.Timestamp("2023-01-01")
    signup = start + pd.to_timedelta(rng.integers(0, 700, ROWS), unit="D")
    last = signup + pd.to_timedelta(rng.integers(0, 90, ROWS), unit="D")
    amount = np.round(rng.gamma(2, 30, ROWS), 2)
    frame = pd.DataFrame({
        "signup_date": signup.strftime("%Y-%m-%d"),
        "last_order": last.strftime("%m/%d/%Y"),
        "amount": amount,
        "channel": rng.choice(["web", "store", "phone"], ROWS),
        "converted": (amount + rng.normal(0, 40, ROWS) > 60).astype(int),
    })
    frame.loc[rng.choice(ROWS, 20, replace=False), "last_order"] = None   # missing dates
    return frame


def id_and_constant(rng: np.random.Generator) -> pd.DataFrame:
    tickets = [f"T-{i:06d}" for i in rng.choice(10**6, ROWS, replace=False)]
    for i in rng.choice(ROWS, 30, replace=False):                          # near-unique: a few repeat
        tickets[i] = tickets[(i + 1) % ROWS]
    x1, x2 = rng.normal(0, 1, ROWS), rng.normal(0, 1, ROWS)
    return pd.DataFrame({
        "row_id": np.arange(1, ROWS + 1),
        "ticket": tickets,
        "source": "web",
        "version": 3,
        "x1": np.round(x1, 3), "x2": np.round(x2, 3),
        "segment": rng.choice(["a", "b", "c"], ROWS),
        "outcome": np.where(x1 + rng.normal(0, 1, ROWS) > 0, "accepted", "rejected"),
    })


TABLES = {
    # name: (make, file, target, task, columns that must not be features, the id column)
    "binary_text": (binary_with_text, "customers.csv", "churned", "binary", {"customer_id"}, "customer_id"),
    "multiclass": (multiclass, "flowers.csv", "species", "multiclass", set(), None),
    "regression": (regression, "houses.parquet", "price", "regression", set(), None),
    "dates": (with_dates, "orders.csv", "converted", "binary", set(), None),
    "id_constant": (id_and_constant, "tickets.csv", "outcome", "binary", {"row_id", "ticket", "source", "version"},
                    "row_id"),
}


def write_table(frame: pd.DataFrame, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".parquet":
        frame.to_parquet(path, index=False)
    else:
        frame.to_csv(path, index=False)


def feature_columns(config: dict) -> set[str]:
    """Columns some op other than drop reads: what the models are built from."""
    used: set[str] = set()
    for step in config["stages"]["features"]["ops"]:
        (name, params), = step.items()
        if name != "drop":
            used |= set(params["columns"])
    return used


def dropped_columns(config: dict) -> set[str]:
    return {c for step in config["stages"]["features"]["ops"] for name, p in step.items() if name == "drop"
            for c in p["columns"]}


# ---------------------------------------------------------------- init, then run, per table
@pytest.mark.slow
@pytest.mark.parametrize("table", list(TABLES))
def test_init_then_run_gives_a_report(tmp_path: Path, table: str) -> None:
    make, file, target, task, excluded, id_column = TABLES[table]
    frame = make(np.random.default_rng(7))
    write_table(frame, tmp_path / "data" / file)

    made = cli("init", f"data/{file}", "--target", target, "-o", "config.yaml", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert f"task: {task}" in made.stdout
    assert made.stdout.strip().splitlines()[-1] == "next: pipeline run config.yaml"
    config = yaml.safe_load((tmp_path / "config.yaml").read_text())
    assert config["stages"]["raw"]["path"] == f"data/{file}"       # read from the working directory
    assert config["stages"]["split"]["task"] == task
    assert config["stages"]["split"]["target"] == target
    assert config["stages"]["features"].get("id") == id_column
    features = feature_columns(config)
    assert not features & excluded, features & excluded
    assert excluded - {id_column} <= dropped_columns(config)
    assert target not in features | dropped_columns(config)
    models = [name for name, stage in config["stages"].items() if stage["kind"] == "train"]
    assert len(models) >= 2
    assert set(config["stages"]["evaluate"]["inputs"]) == set(models)

    checked = cli("validate", "config.yaml", cwd=tmp_path)
    assert checked.returncode == 0, checked.stderr
    ran = cli("run", "config.yaml", cwd=tmp_path, report=True)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert list((tmp_path / "runs").glob("*/*/manifest.json"))
    reports = list((tmp_path / "runs").glob("*/*/report.html"))
    assert reports, ran.stderr[-3000:]


@pytest.mark.parametrize("table", ["binary_text", "id_constant"])
def test_init_auto_writes_one_auto_stage_that_leaves_out_the_same_columns(tmp_path: Path, table: str) -> None:
    """``--auto``: the auto stage instead of features and models; auto's own column rule (which
    it applies at run time) leaves out exactly what init would have dropped."""
    make, file, target, task, excluded, id_column = TABLES[table]
    frame = make(np.random.default_rng(7))
    write_table(frame, tmp_path / "data" / file)
    made = cli("init", f"data/{file}", "--target", target, "--auto", "-o", "auto.yaml", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    config = yaml.safe_load((tmp_path / "auto.yaml").read_text())
    assert [s["kind"] for s in config["stages"].values()] == ["load", "split", "auto", "evaluate", "export"]
    assert config["stages"]["auto"] == {"kind": "auto", "inputs": ["split"], "time_limit": "5m",
                                        **({"id": id_column} if id_column else {})}
    assert config["stages"]["evaluate"]["inputs"] == config["stages"]["export"]["inputs"] == ["auto"]
    actions = {c.name: c.action for c in draft_config(tmp_path / "data" / file, target, auto=True).columns}
    assert {name for name, action in actions.items() if action == "left out by auto"} == excluded - {id_column}
    assert cli("validate", "auto.yaml", cwd=tmp_path).returncode == 0
    left_out = left_out_columns(frame, target, task, keep=(id_column,) if id_column else ())
    assert {c.name for c in left_out} == excluded - {id_column}


# ---------------------------------------------------------------- what each table gets
def test_binary_table_roles_and_ops(tmp_path: Path) -> None:
    path = tmp_path / "customers.csv"
    write_table(binary_with_text(np.random.default_rng(7)), path)
    draft = draft_config(path, "churned")
    roles = {c.name: c.role for c in draft.columns}
    assert roles == {"churned": "target", "customer_id": "identifier", "plan": "categorical",
                     "region": "categorical", "tenure": "numeric", "monthly": "numeric", "paperless": "categorical"}
    assert draft.task.kind == "binary" and draft.task.positive == "yes"
    config = yaml.safe_load(draft.text)
    assert config["stages"]["split"]["positive"] == "yes"
    ops = [next(iter(step)) for step in config["stages"]["features"]["ops"]]
    # gaps: the numeric median with an indicator, the text a category of its own
    fills = [step["fill_missing"] for step in config["stages"]["features"]["ops"] if "fill_missing" in step]
    assert {"columns": ["monthly"], "strategy": "median", "indicator": True} in fills
    assert {"columns": ["plan"], "strategy": "constant", "value": "missing"} in fills
    assert ops.index("fill_missing") < ops.index("one_hot")
    assert "# customer_id: identifier (unique per row, named like an id)" in draft.text


def test_dates_are_parsed_by_the_load_and_become_parts(tmp_path: Path) -> None:
    path = tmp_path / "orders.csv"
    write_table(with_dates(np.random.default_rng(7)), path)
    config = yaml.safe_load(draft_config(path, "converted").text)
    assert config["stages"]["raw"]["dates"] == {"signup_date": "%Y-%m-%d", "last_order": "%m/%d/%Y"}
    parts = [step["date_parts"]["columns"] for step in config["stages"]["features"]["ops"] if "date_parts" in step]
    assert parts == [["signup_date"], ["last_order"]]
    assert "order_by: signup_date" in draft_config(path, "converted").text     # out-of-time, suggested


def test_high_cardinality_skew_and_missing_target(tmp_path: Path) -> None:
    path = tmp_path / "houses.parquet"
    write_table(regression(np.random.default_rng(7)), path)
    draft = draft_config(path, "price")
    config = yaml.safe_load(draft.text)
    ops = {next(iter(step)): next(iter(step.values())) for step in config["stages"]["features"]["ops"]}
    assert ops["categorify"]["columns"] == ["neighbourhood"]
    assert ops["log1p"]["columns"] == ["sqft"]
    assert config["stages"]["split"]["missing_target"] == "drop"
    assert any("12 of 600 sampled rows have no price" in note for note in draft.notes)
    models = [s["model"] for s in config["stages"].values() if s["kind"] == "train"]
    assert "ridge" in models and "logistic_regression" not in models


def test_a_column_the_target_can_be_read_off_is_a_likely_leak(tmp_path: Path) -> None:
    frame = multiclass(np.random.default_rng(7))
    frame["species_code"] = frame["species"].map({"setosa": "S", "versicolor": "V", "virginica": "G"})
    write_table(frame, tmp_path / "flowers.csv")
    draft = draft_config(tmp_path / "flowers.csv", "species")
    leak = next(c for c in draft.columns if c.name == "species_code")
    assert leak.role == "leak" and "read off" in leak.reason
    assert "species_code" in dropped_columns(yaml.safe_load(draft.text))


def test_whole_numbers_with_few_values_are_classes_unless_told(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    frame = pd.DataFrame({"x": rng.normal(0, 1, 300), "stars": rng.integers(1, 6, 300)})
    write_table(frame, tmp_path / "ratings.csv")
    assert draft_config(tmp_path / "ratings.csv", "stars").task.kind == "multiclass"
    told = draft_config(tmp_path / "ratings.csv", "stars", task="regression")
    assert told.task.kind == "regression" and "--task regression (given)" in told.task.reason
    assert "# given to pipeline init" in told.text


def test_blank_placeholders_become_na_values(tmp_path: Path) -> None:
    text = "id,charges,y\n" + "".join(f"{i},{' ' if i % 17 == 0 else i * 1.5},{i % 2}\n" for i in range(200))
    (tmp_path / "blank.csv").write_text(text)
    draft = draft_config(tmp_path / "blank.csv", "y")
    config = yaml.safe_load(draft.text)
    assert config["stages"]["raw"]["na_values"] == [" "]
    assert {c.name: c.role for c in draft.columns}["charges"] == "numeric"


def test_a_large_csv_is_sampled_in_bounded_reads(tmp_path: Path) -> None:
    """Windows spread over a file sorted by its target see both classes; the head alone would not."""
    n = 40_000
    frame = pd.DataFrame({"x": np.arange(n) % 97, "y": np.r_[np.zeros(n // 2, int), np.ones(n // 2, int)]})
    write_table(frame, tmp_path / "sorted.csv")
    sample = read_sample(tmp_path / "sorted.csv", max_rows=5_000, max_bytes=64 * 1024)
    assert not sample.complete and len(sample.frame) <= 5_000
    assert set(sample.frame["y"]) == {0, 1}
    assert 20_000 < sample.total_rows < 80_000                            # an estimate from the bytes


def test_classify_rules_on_single_columns() -> None:
    n = 200
    assert classify(pd.Series(["x"] * n), "c", n_rows=n).role == "constant"
    assert classify(pd.Series([None] * n, dtype=object), "c", n_rows=n).role == "constant"
    prose = pd.Series([f"this is a long free text note number {i}" for i in range(n)])
    assert classify(prose, "notes", n_rows=n).role == "free_text"
    assert classify(pd.Series(range(n)), "seq", n_rows=n).role == "identifier"          # counts up row by row
    assert classify(pd.Series(np.random.default_rng(1).permutation(n)), "amount", n_rows=n).role == "numeric"
    assert classify(pd.Series(np.arange(n) % 7), "store_id", n_rows=n).role == "categorical"
    assert classify(pd.Series([True, False] * (n // 2)), "flag", n_rows=n).role == "categorical"


@pytest.mark.parametrize("value, back", [("Yes", "Yes"), ("no", "no"), ("1", "1"), ("a b", "a b"), (1, 1),
                                          (2.5, 2.5), (True, True), ("null", "null"), ("data/x.csv", "data/x.csv"),
                                          ("x: y", "x: y"), ("#tag", "#tag"), ("é", "é")])
def test_scalars_read_back_as_written(value: object, back: object) -> None:
    assert yaml.safe_load(f"k: {scalar(value)}")["k"] == back


def test_odd_column_names_are_quoted_and_the_config_validates(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    frame = pd.DataFrame({"2020 sales": rng.normal(0, 1, 300), "yes": rng.choice(["a", "b"], 300),
                          "na: me": rng.normal(0, 1, 300), "target #1": rng.choice(["p", "q"], 300)})
    write_table(frame, tmp_path / "odd names.csv")
    draft = draft_config(tmp_path / "odd names.csv", "target #1")
    cfg = load_config(text=draft.text)
    assert cfg.stages["split"].target == "target #1"
    assert draft.name == "odd_names"


# ---------------------------------------------------------------- the command's contract
def test_never_overwrites_without_force(tmp_path: Path) -> None:
    write_table(multiclass(np.random.default_rng(1)), tmp_path / "flowers.csv")
    (tmp_path / "flowers.yaml").write_text("# mine\n")
    refused = cli("init", "flowers.csv", "--target", "species", cwd=tmp_path)
    assert refused.returncode == ExitCode.CONFIG
    assert "flowers.yaml exists; pass --force" in refused.stderr
    assert (tmp_path / "flowers.yaml").read_text() == "# mine\n"
    forced = cli("init", "flowers.csv", "--target", "species", "--force", cwd=tmp_path)
    assert forced.returncode == 0, forced.stderr
    assert load_config(tmp_path / "flowers.yaml").stages["split"].task == "multiclass"
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".flowers.yaml")]   # no temporary left


def test_force_never_overwrites_the_data_file_itself(tmp_path: Path) -> None:
    write_table(multiclass(np.random.default_rng(1)), tmp_path / "flowers.csv")
    before = (tmp_path / "flowers.csv").read_bytes()
    (tmp_path / "link.csv").symlink_to(tmp_path / "flowers.csv")
    for output in ("flowers.csv", "./flowers.csv", "link.csv"):
        refused = cli("init", "flowers.csv", "--target", "species", "-o", output, "--force", cwd=tmp_path)
        assert refused.returncode == ExitCode.CONFIG, output
        assert "is the data file the config reads; --force never overwrites it" in refused.stderr
    assert (tmp_path / "flowers.csv").read_bytes() == before


def test_output_dash_prints_the_config(tmp_path: Path) -> None:
    write_table(multiclass(np.random.default_rng(1)), tmp_path / "flowers.csv")
    printed = cli("init", "flowers.csv", "--target", "species", "-o", "-", cwd=tmp_path)
    assert printed.returncode == 0, printed.stderr
    assert load_config(text=printed.stdout).stages["raw"].path == "flowers.csv"
    assert "task: multiclass" in printed.stderr
    assert not list(tmp_path.glob("*.yaml"))


def test_an_absolute_path_inside_the_folder_is_written_relative(tmp_path: Path) -> None:
    write_table(multiclass(np.random.default_rng(1)), tmp_path / "data" / "flowers.csv")
    made = cli("init", str(tmp_path / "data" / "flowers.csv"), "--target", "species", "-o", "configs/f.yaml",
               cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    config = yaml.safe_load((tmp_path / "configs" / "f.yaml").read_text())
    assert config["stages"]["raw"]["path"] == "data/flowers.csv"
    assert config["name"] == "f"                                           # runs/f/, after the config file
    assert "relative to the folder you run pipeline in" in made.stdout


@pytest.mark.parametrize("case", ["missing_file", "unknown_target", "empty_file", "header_only", "constant_target",
                                  "bad_task"])
def test_bad_inputs_get_a_clear_message_and_exit_code(tmp_path: Path, case: str) -> None:
    rng = np.random.default_rng(2)
    write_table(pd.DataFrame({"Churn": rng.choice(["Yes", "No"], 100), "tenure": rng.integers(0, 9, 100),
                              "kind": "same"}), tmp_path / "t.csv")
    (tmp_path / "empty.csv").write_text("")
    (tmp_path / "header.csv").write_text("a,b,c\n")
    args, code, words = {
        "missing_file": (["nowhere.csv", "--target", "Churn"], ExitCode.DATA,
                         ["nowhere.csv: no such file or folder", str(tmp_path)]),
        "unknown_target": (["t.csv", "--target", "churn"], ExitCode.CONFIG,
                           ["--target 'churn' is not a column of t.csv", "did you mean 'Churn'?", "tenure"]),
        "empty_file": (["empty.csv", "--target", "y"], ExitCode.DATA, ["empty.csv is empty"]),
        "header_only": (["header.csv", "--target", "a"], ExitCode.DATA, ["header.csv has a header but no rows"]),
        "constant_target": (["t.csv", "--target", "kind"], ExitCode.DATA,
                            ["target column 'kind' has one value ('same')", "nothing to predict"]),
        "bad_task": (["t.csv", "--target", "Churn", "--task", "regression"], ExitCode.CONFIG,
                     ["--task regression needs a numeric target"]),
    }[case]
    done = cli("init", *args, cwd=tmp_path)
    assert done.returncode == code, (done.returncode, done.stderr)
    message = done.stderr.strip()
    for word in words:
        assert word in message, message
    assert "Traceback" not in message and message.startswith("error:")
    assert not list(tmp_path.glob("*.yaml"))                              # nothing written


def test_a_large_parquet_file_is_sampled_by_row_groups(tmp_path: Path) -> None:
    n = 30_000
    frame = pd.DataFrame({"x": np.arange(n, dtype="float64"), "y": np.repeat(["a", "b", "c"], n // 3)})
    frame.to_parquet(tmp_path / "sorted.parquet", index=False, row_group_size=1_000)
    sample = read_sample(tmp_path / "sorted.parquet", max_rows=3_000)
    assert sample.total_rows == n and sample.total_exact and not sample.complete
    assert len(sample.frame) <= 3_000 and set(sample.frame["y"]) == {"a", "b", "c"}


def test_binary_of_several_values_needs_the_positive_one(tmp_path: Path) -> None:
    write_table(multiclass(np.random.default_rng(1)), tmp_path / "flowers.csv")
    with pytest.raises(Exception, match="name the one that means 1 with --positive VALUE") as refused:
        draft_config(tmp_path / "flowers.csv", "species", task="binary")
    assert refused.value.exit_code == ExitCode.CONFIG
    draft = draft_config(tmp_path / "flowers.csv", "species", positive="setosa")
    config = yaml.safe_load(draft.text)
    assert config["stages"]["split"]["task"] == "binary" and config["stages"]["split"]["positive"] == "setosa"
    with pytest.raises(Exception, match="did you mean 'setosa'"):
        draft_config(tmp_path / "flowers.csv", "species", positive="setoza")


# ---------------------------------------------------------------- real-world files
def test_a_semicolon_latin1_table_with_markers_gets_a_config_that_runs_first_time(tmp_path: Path) -> None:
    """A European export: ';' between fields, decimal commas, cp1252 text, '?' for unknown in
    text columns (one almost all '?'), -999 for unknown in a numeric one."""
    rng = np.random.default_rng(11)
    n = 600
    spend = rng.normal(800, 300, n).round(2)
    frame = pd.DataFrame({
        "kunde": [f"K{i:05d}" for i in range(n)],
        "stadt": rng.choice(["Zürich", "Genève", "Köln", "Malmö"], n),
        "umsatz": [f"{v:.2f}".replace(".", ",") for v in spend],
        "alter": np.where(rng.random(n) < 0.06, -999, rng.integers(18, 80, n)),
        "beruf": np.where(rng.random(n) < 0.45, "?", rng.choice(["Arzt", "Lehrer", "Bäcker"], n)),
        "notiz": np.where(rng.random(n) < 0.97, "?", rng.choice(list("abcdefghij"), n)),
    })
    frame["churn"] = np.where(spend + rng.normal(0, 150, n) < 750, "ja", "nein")
    frame.to_csv(tmp_path / "kunden.csv", sep=";", index=False, encoding="cp1252")
    made = cli("init", "kunden.csv", "--target", "churn", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    config = yaml.safe_load((tmp_path / "kunden.yaml").read_text())
    raw = config["stages"]["raw"]
    assert (raw["sep"], raw["encoding"], raw["decimal"]) == (";", "cp1252", ",")
    assert set(raw["na_values"]) >= {"?", "-999"}
    import re

    with_cwd = os.getcwd()
    try:
        os.chdir(tmp_path)
        reasons = {c.name: c.reason for c in draft_config("kunden.csv", "churn").columns}
    finally:
        os.chdir(with_cwd)
    assert re.search(r"read as missing: '\?' \(9\d% of rows\)", reasons["notiz"]), reasons["notiz"]
    assert re.search(r"read as missing: '\?' \(4\d% of rows\)", reasons["beruf"]), reasons["beruf"]
    assert re.search(r"read as missing: '-999' \(\d% of rows\)", reasons["alter"]), reasons["alter"]
    ran = cli("run", "kunden.yaml", "--device", "cpu", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr


def test_a_marker_after_a_separator_and_a_space_is_read_as_missing() -> None:
    """UCI's Adult writes ", ?": the value read is " ?", the marker with the space before it."""
    from pipeline.scaffold.markers import missing_markers

    frame = pd.DataFrame({"workclass": [" Private", " ?", " Self-emp", " Private"] * 25,
                          "note": [" a-b", " c", " d", " e"] * 25})
    found = missing_markers(frame)
    assert found == {" ?": {"workclass": 0.25}}


def test_an_open_top_level_is_a_level_not_a_placeholder() -> None:
    """Household sizes 1, 2, 3, 4, 5+ had `5+` (8% of rows, the largest households) read as missing."""
    from pipeline.scaffold.markers import missing_markers

    frame = pd.DataFrame({"household_size": ["1", "2", "3", "4", "5+"] * 20 + ["2"] * 100,
                          "age_band": ["<18", "18-24", "25-34", "65 and over"] * 50,
                          "income": ["12", "15"] * 95 + ["n/a"] * 10})
    assert missing_markers(frame) == {"n/a": {"income": 0.05}}


def test_a_number_the_target_can_be_read_off_by_a_cut_or_its_order_is_a_likely_leak():
    """A 0-100 retention score below 40 for every churner, a CRM churn probability, and a rounded
    log of a regression target were kept as numeric features (test ROC AUC 1.0, exit 0); a
    strong but honest feature stays."""
    rng = np.random.default_rng(2)
    n = 2000
    churn = rng.random(n) < 0.3
    frame = pd.DataFrame({
        "retention_score": np.where(churn, rng.integers(1, 40, n), rng.integers(45, 100, n)),
        "honest": rng.normal(size=n) + 1.5 * churn,                 # ROC AUC about 0.85
        "plan": np.where(churn, rng.choice(["a", "b"], n), rng.choice(["b", "c"], n)),
        "Churn": np.where(churn, "Yes", "No")})
    left = {c.name: c.reason for c in left_out_columns(frame, "Churn", "binary")}
    assert "retention_score" in left and "by 1 cut point in 100.0% of rows" in left["retention_score"]
    assert "honest" not in left and "plan" not in left
    three = rng.choice(["low", "mid", "high"], n)
    score = np.select([three == "low", three == "mid"], [rng.uniform(0, 1, n), rng.uniform(2, 3, n)],
                      rng.uniform(5, 9, n))
    left = {c.name for c in left_out_columns(pd.DataFrame({"score": score, "y": three}), "y", "multiclass")}
    assert left == {"score"}
    value = rng.lognormal(12, 0.5, n)
    regression = pd.DataFrame({"band": np.round(np.log(value), 2), "rooms": rng.normal(size=n) + value / 1e5,
                               "value": value})
    left = {c.name: c.reason for c in left_out_columns(regression, "value", "regression")}
    assert list(left) == ["band"] and "rank correlation 1.000" in left["band"]
