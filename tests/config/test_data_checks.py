"""Checks before the data is read: every column a stage names is checked against the headers
and schemas of the files the config loads (``pipeline.config.data_checks``), with its key path,
its line and a did-you-mean, and cross-stage rules fail at validation, not in the run."""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from tests.support.cli import run_cli as _pipeline
from pipeline.config import load_config
from pipeline.core.errors import ConfigError, DataError, ExitCode

from tests.conftest import working_directory


def cli(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return _pipeline(*args, cwd=cwd, env={"COLUMNS": "200"}, timeout=timeout)


def line_of(text: str, needle: str) -> int:
    """The 1-based line of the config text that holds ``needle`` (once)."""
    lines = [i for i, line in enumerate(text.splitlines(), 1) if needle in line]
    assert len(lines) == 1, (needle, lines)
    return lines[0]


# --------------------------------------------------------------------------- the acceptance test
class HeaderOnlyPipe:
    """A named pipe that gives its header line to one reader and then holds the pipe open
    without ever writing a row: a reader that wants any row, or opens the file a second time,
    waits forever. A command that returns, having used the header, read no row."""

    def __init__(self, path: Path, header: str) -> None:
        self.path = path
        self.header = header
        self.release = threading.Event()
        self.opened = threading.Event()
        os.mkfifo(path)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        try:
            with open(self.path, "w") as pipe:      # blocks until a reader opens the pipe
                if self.release.is_set():           # opened by close() only to end this thread
                    return
                self.opened.set()
                pipe.write(self.header + "\n")
                pipe.flush()
                self.release.wait()
        except BrokenPipeError:                     # the reader closed the pipe after the header
            pass

    def close(self) -> None:
        self.release.set()
        if not self.opened.is_set():                # nobody opened it: unblock the writer's open
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
            os.close(fd)
        self.thread.join(timeout=10)


@pytest.fixture
def pipes(tmp_path: Path) -> Iterator[dict[str, HeaderOnlyPipe]]:
    made = {
        "events": HeaderOnlyPipe(tmp_path / "events.csv", "customer_id,date,amount,channel"),
        "customers": HeaderOnlyPipe(tmp_path / "customers.csv", "customer_id,plan,monthly_fee,region,signup"),
    }
    yield made
    for pipe in made.values():
        pipe.close()


MISSPELT = """\
name: misspelt
stages:
  events:
    kind: load
    path: events.csv
    dates: {date: "%Y-%m-%d"}
  customers:
    kind: load
    path: customers.csv
  history:
    kind: aggregate
    inputs: [events]
    by: customer_id
    time: date
    as_of: "2024-01-01"
    features:
      orders: count
      spend: {sum: amout}
  labelled:
    kind: label
    inputs: {events: events, entities: customers}
    by: customer_id
    time: date
    as_of: "2024-01-01"
    horizon: 30d
    target: {churn: no_event}
  table:
    kind: join
    inputs: [labelled, history]
    on: [custmer_id, as_of]
  split:
    kind: split
    inputs: [table]
    target: chrun
  features:
    kind: features
    inputs: [split]
    id: customer_id
    ops:
      - one_hot: {columns: [plan, region]}
      - standardize: {columns: [monthly_fe, orders_all]}
  model:
    kind: train
    inputs: [features]
    model: logistic_regression
"""


def test_validate_names_each_misspelt_column_with_path_line_and_suggestion_without_reading_rows(tmp_path, pipes):
    (tmp_path / "pipeline.yaml").write_text(MISSPELT)
    proc = cli("validate", "pipeline.yaml", cwd=tmp_path)
    assert proc.returncode == ExitCode.CONFIG, proc.stderr
    err = proc.stderr
    assert "Traceback" not in err
    expected = [
        ("stages.history.features.spend.sum", "amout", "amount"),          # an event column
        ("stages.table.on[0]", "custmer_id", "customer_id"),               # a join key
        ("stages.split.target", "chrun", "churn"),                         # the target
        ("stages.features.ops[1].standardize.columns[0]", "monthly_fe", "monthly_fee"),   # an op column
    ]
    for path, wrong, meant in expected:
        line = line_of(MISSPELT, wrong)
        assert f"{path} (line {line}): " in err, (path, err)
        shown = next(text for text in err.splitlines() if f"{path} (line {line})" in text)
        assert f"'{wrong}'" in shown and f"did you mean '{meant}'?" in shown, shown
    # Columns that do exist at their point of the graph pass: orders_all (the aggregate's
    # output, through the join), plan and region (the entity file's), the id.
    assert "orders_all" not in err and "'plan'" not in err and "id column" not in err
    # Both pipes were opened once, gave their header, and never a row: validate returned.
    assert all(pipe.opened.is_set() for pipe in pipes.values())


def test_validate_passes_the_same_config_spelt_right_reading_only_headers(tmp_path, pipes):
    fixed = (MISSPELT.replace("amout", "amount").replace("custmer_id", "customer_id")
             .replace("chrun", "churn").replace("monthly_fe,", "monthly_fee,"))
    (tmp_path / "pipeline.yaml").write_text(fixed)
    proc = cli("validate", "pipeline.yaml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "valid (8 stages)" in proc.stdout


def test_before_a_run_pipes_and_missing_files_are_left_to_the_load_stage(tmp_path, pipes):
    """A run reads a pipe for real afterwards (its header goes to the first reader only), and
    records the failure of a load whose file is missing: the checks leave both alone."""
    from pipeline.backends.headers import HeaderReader

    before_run = HeaderReader(before_run=True)
    assert before_run.columns(str(tmp_path / "events.csv")) is None
    assert not pipes["events"].opened.is_set()
    assert before_run.columns(str(tmp_path / "nope.csv")) is None
    with pytest.raises(DataError, match="input file not found"):
        HeaderReader().columns(str(tmp_path / "nope.csv"))
    found = HeaderReader().columns(str(tmp_path / "customers.csv"))
    assert found is not None and found.names == ("customer_id", "plan", "monthly_fee", "region", "signup")


# --------------------------------------------------------------------------- how columns flow
CHURN = (Path(__file__).resolve().parents[2] / "data" / "telco_customer_churn.csv")


def config_text(stages: str, *, path: str = "data.csv") -> str:
    return f"""\
name: flow
stages:
  raw:
    kind: load
    path: {path}
{stages}"""


def issues_of(text: str, folder: Path) -> list[str]:
    """The config problems of ``text`` as 'path: message' lines (empty when it is valid)."""
    with working_directory(folder):
        try:
            load_config(text=text, check_data=True)
        except ConfigError as exc:
            return [str(issue) for issue in exc.issues]
    return []


@pytest.fixture
def small(tmp_path: Path) -> Path:
    pd.DataFrame({"id": [1, 2, 3, 4], "Contract": ["a", "b", "a", "b"], "tenure": [1, 2, 3, 4],
                  "charges": [1.0, None, 3.0, 4.0], "signed": ["2024-01-01"] * 4,
                  "churned": ["Yes", "No", "No", "Yes"]}).to_csv(tmp_path / "data.csv", index=False)
    return tmp_path


SPLIT = """\
  split:
    kind: split
    inputs: [raw]
    target: churned
    positive: "Yes"
"""


def test_ops_see_the_columns_earlier_ops_leave(small):
    text = config_text(SPLIT + """\
  features:
    kind: features
    inputs: [split]
    id: id
    ops:
      - fill_missing: {columns: [charges], indicator: true}
      - one_hot: {columns: [Contract]}
      - date_parts: {columns: [signed], parts: [year]}
      - standardize: {columns: [charges_missing, tenure, signed_year, "Contract=a"]}
""")
    assert issues_of(text, small) == []


def test_a_column_an_earlier_op_removed_says_which_op(small):
    text = config_text(SPLIT + """\
  features:
    kind: features
    inputs: [split]
    ops:
      - one_hot: {columns: [Contract]}
      - standardize: {columns: [Contract]}
      - drop: {columns: [churned]}
""")
    found = issues_of(text, small)
    assert found == [
        f"stages.features.ops[1].standardize.columns[0] (line {line_of(text, 'standardize')}): standardize column "
        "'Contract' is removed by ops[0] (one_hot) before this op",
        f"stages.features.ops[2].drop.columns[0] (line {line_of(text, '- drop')}): drop column 'churned' is the "
        "split's target: the ops never see the label",
    ], found


ID_IS_TARGET = """\
  features:
    kind: features
    inputs: [split]
    id: {target}
    ops:
      - standardize: {{columns: [tenure]}}
"""


def test_the_id_column_cannot_be_the_target(small):
    """The label as the id: the model could not score a row without its label (predict wants
    the id column), so it is refused with the key path as an op naming the target is."""
    text = config_text(SPLIT + ID_IS_TARGET.format(target="churned"))
    found = issues_of(text, small)
    assert found == [
        f"stages.features.id (line {line_of(text, 'id: churned')}): id column 'churned' is the split's target: "
        "the label cannot be the id (rows to score have no label); name a column that identifies a row",
    ], found


def test_the_id_column_cannot_be_the_target_where_the_columns_are_unknown(small):
    (small / "my_steps.py").write_text("def passthrough(ctx, inputs):\n    return next(iter(inputs.values()))\n")
    text = config_text("""\
  custom:
    kind: python
    inputs: [raw]
    function: my_steps:passthrough
""" + SPLIT.replace("[raw]", "[custom]").replace("target: churned", "target: made")
                       + ID_IS_TARGET.format(target="made"))
    found = issues_of(text, small)
    assert len(found) == 1 and found[0].startswith("stages.features.id ") and "'made' is the split's target" in found[0]


def test_load_keys_name_columns_of_the_file(small):
    text = config_text("""\
    columns: [id, tenure, churned]
    dtypes: {tenur: float64}
    filters: [[contract, "==", "a"]]
""" + SPLIT.replace("target: churned", "target: Contract"))
    found = issues_of(text, small)
    assert any("stages.raw.dtypes.tenur" in f and "did you mean 'tenure'?" in f for f in found), found
    assert any("stages.raw.filters[0][0]" in f and "did you mean 'Contract'?" in f for f in found), found
    # columns: [id, tenure, churned] leaves Contract out of the table the split reads.
    assert any(f.startswith("stages.split.target") and "'Contract' is left out by stages.raw.columns" in f for f in found), found


def test_a_python_stage_makes_the_columns_unknown_and_nothing_downstream_is_refused(small):
    (small / "my_steps.py").write_text("def passthrough(ctx, inputs):\n    return next(iter(inputs.values()))\n")
    text = config_text("""\
  custom:
    kind: python
    inputs: [raw]
    function: my_steps:passthrough
""" + SPLIT.replace("[raw]", "[custom]").replace("target: churned", "target: made_by_python"))
    (small / "flow.yaml").write_text(text)
    with working_directory(small):
        assert len(load_config(small / "flow.yaml", check_data=True).stages) == 3


def test_parquet_folder_schema_includes_hive_partition_keys(tmp_path):
    frame = pd.DataFrame({"x": [1.0, 2.0, 3.0, 4.0], "label": [0, 1, 0, 1], "region": ["n", "n", "s", "s"]})
    frame.to_parquet(tmp_path / "table", partition_cols=["region"])
    good = config_text(SPLIT.replace("churned", "label").replace('    positive: "Yes"\n', "")
                       + "    group: region\n", path="table")
    assert issues_of(good, tmp_path) == []
    bad = good.replace("group: region", "group: regoin")
    found = issues_of(bad, tmp_path)
    assert len(found) == 1 and "group column 'regoin'" in found[0] and "did you mean 'region'?" in found[0]


def test_an_override_is_named_as_the_source(small):
    text = config_text(SPLIT)
    with working_directory(small), pytest.raises(ConfigError) as caught:
        load_config(text=text, overrides=["stages.split.target=churnd"], check_data=True)
    (issue,) = caught.value.issues
    assert issue.source == "--set" and issue.line is None and "did you mean 'churned'?" in issue.message


def test_a_missing_input_file_is_a_data_error_naming_the_stage(tmp_path):
    (tmp_path / "flow.yaml").write_text(config_text(SPLIT, path="nope.csv"))
    with working_directory(tmp_path), pytest.raises(DataError, match="input file not found: nope.csv") as caught:
        load_config(tmp_path / "flow.yaml", check_data=True)
    assert caught.value.stage == "raw"
    proc = cli("validate", "flow.yaml", cwd=tmp_path)
    assert proc.returncode == ExitCode.DATA and "stage 'raw'" in proc.stderr and "nope.csv" in proc.stderr


# --------------------------------------------------------------------------- cross-stage rules
FEATURES = """\
  features:
    kind: features
    inputs: [split]
    ops:
      - one_hot: {columns: [Contract]}
"""


def test_tune_scored_on_a_valid_split_the_split_lacks_is_refused_at_validation(small):
    text = config_text(SPLIT + FEATURES + """\
  xgb:
    kind: train
    inputs: [features]
    model: xgboost
    tune:
      trials: 2
      scoring: valid
      space: {max_depth: {int: [2, 4]}}
""")
    found = issues_of(text, small)
    assert found == [f"stages.xgb.tune (line {line_of(text, 'tune:')}): trials are scored on validation rows "
                     "(scoring: valid) and this split has none: set valid: (e.g. 0.1) on the split stage, or "
                     "score by cross-validation (scoring: cv)"], found
    assert issues_of(text.replace('positive: "Yes"', 'positive: "Yes"\n    valid: 0.25'), small) == []
    # Scored by cross-validation (the default for train stages) the training rows suffice.
    assert issues_of(text.replace("      scoring: valid\n", ""), small) == []


def test_an_ensemble_of_models_from_different_features_is_refused_at_validation(small):
    text = config_text(SPLIT.replace('positive: "Yes"', 'positive: "Yes"\n    valid: 0.25') + FEATURES + """\
  other:
    kind: features
    inputs: [split]
    ops:
      - standardize: {columns: [tenure]}
  a:
    kind: train
    inputs: [features]
    model: logistic_regression
  b:
    kind: train
    inputs: [other]
    model: logistic_regression
  blend:
    kind: ensemble
    inputs: [a, b]
""")
    found = issues_of(text, small)
    assert len(found) == 1, found
    assert found[0].startswith(f"stages.blend.inputs (line {line_of(text, 'inputs: [a, b]')}): ensemble: all "
                               "models must be trained on the same features stage; b read other features than a")
    same = text.replace("inputs: [other]", "inputs: [features]")
    assert issues_of(same, small) == []
    # The same members without valid rows or folds have nothing to fit the weights on.
    found = issues_of(same.replace("valid: 0.25", "valid: 0"), small)
    assert len(found) == 1 and "ensemble needs rows its members were not trained on" in found[0], found


# --------------------------------------------------------------------------- the commands
def test_run_refuses_a_misspelt_target_before_the_first_stage(tmp_path):
    (tmp_path / "data.csv").write_bytes(CHURN.read_bytes())
    (tmp_path / "flow.yaml").write_text(config_text("""\
  split:
    kind: split
    inputs: [raw]
    target: churn
    positive: "Yes"
""", path="data.csv"))
    proc = cli("run", "flow.yaml", "--device", "cpu", cwd=tmp_path)
    assert proc.returncode == ExitCode.CONFIG, proc.stderr
    assert "stages.split.target (line 9): target 'churn' is not a column of data.csv; did you mean 'Churn'?" \
        in proc.stderr
    assert not (tmp_path / "runs").exists()          # refused before a run folder or a stage


def test_every_shipped_config_passes_the_checks(project):
    # bench_churn.yaml reads a table that scripts/bench.py generates first.
    for config in sorted(c for c in (project / "configs").glob("*.yaml") if c.name != "bench_churn.yaml"):
        proc = cli("validate", f"configs/{config.name}", cwd=project)
        assert proc.returncode == 0, (config.name, proc.stderr)


@pytest.mark.parametrize(("split", "train", "refused"), [
    ("", "", True),                                   # no valid rows
    ("    valid: 0.25\n", "", False),
    ("    folds: 2\n", "", True),                    # each fold trains to the end
    ("", "    bag: 2\n", False),                     # a member stops on its own fold
])
def test_early_stopping_without_valid_rows_is_refused_at_its_key(small, split, train, refused):
    """XGBoost's fit raised "Must have at least 1 validation dataset": a stage failure (exit 4)."""
    text = config_text(SPLIT + split + "  f:\n    kind: features\n    inputs: [split]\n"
                       "  m:\n    kind: train\n    inputs: [f]\n    model: xgboost\n"
                       "    params: {early_stopping_rounds: 5}\n" + train)
    found = issues_of(text, small)
    if not refused:
        assert found == [], found
        return
    assert len(found) == 1 and found[0].startswith("stages.m.params.early_stopping_rounds ") and "no valid rows" in found[0]


def test_an_export_of_models_from_two_features_stages_is_refused_at_validate(small):
    """It trained every model and then failed at the export (exit 3)."""
    features = "  {name}:\n    kind: features\n    inputs: [split]\n"
    text = config_text(SPLIT + features.format(name="fa") + features.format(name="fb")
                       + "  a:\n    kind: train\n    inputs: [fa]\n    model: logistic_regression\n"
                       + "  b:\n    kind: train\n    inputs: [fb]\n    model: logistic_regression\n"
                       + "  export:\n    kind: export\n    inputs: [a, b]\n")
    found = issues_of(text, small)
    assert len(found) == 1 and found[0].startswith("stages.export.inputs ") and "(a: fa, b: fb)" in found[0], found


def test_problems_on_one_line_are_listed_in_the_order_of_their_positions(tmp_path):
    """A list of twelve misspelt columns was listed columns[0], columns[10], columns[11],
    columns[1]...: key paths sorted as text."""
    pd.DataFrame({"a": [1, 2], "y": [0, 1]}).to_csv(tmp_path / "t.csv", index=False)
    names = ", ".join(f"c{i}" for i in range(12))
    (tmp_path / "t.yaml").write_text(f"name: t\nstages:\n  raw: {{kind: load, path: t.csv, columns: [{names}]}}\n")
    with working_directory(tmp_path), pytest.raises(ConfigError) as info:
        load_config("t.yaml", check_data=True)
    paths = [issue.path for issue in info.value.issues]
    positions = [int(p.rsplit("[", 1)[1].rstrip("]")) for p in paths if p.startswith("stages.raw.columns[")]
    assert len(positions) == 12 and positions == sorted(positions), paths


def test_a_column_the_loads_columns_leave_out_is_named_as_left_out_not_missing_from_the_file(tmp_path):
    """With `columns: [..., Partnr]`, a later `drop: Partner` said "'Partner' is not a column
    of t.csv; did you mean 'Partnr'?": the file has Partner, and Partnr is the typo."""
    pd.DataFrame({"id": [1, 2], "Partner": ["y", "n"], "tenure": [1, 2], "y": [0, 1]}).to_csv(
        tmp_path / "t.csv", index=False)
    (tmp_path / "t.yaml").write_text(
        "name: t\nstages:\n  raw: {kind: load, path: t.csv, columns: [id, Partnr, tenure, y]}\n"
        "  split: {kind: split, inputs: [raw], target: y}\n"
        "  features: {kind: features, inputs: [split], ops: [{drop: {columns: [Partner]}}]}\n")
    with working_directory(tmp_path), pytest.raises(ConfigError) as info:
        load_config("t.yaml", check_data=True)
    messages = {issue.path: issue.message for issue in info.value.issues}
    assert "did you mean 'Partner'" in messages["stages.raw.columns[1]"]
    dropped = messages["stages.features.ops[0].drop.columns[0]"]
    assert "'Partner' is left out by stages.raw.columns" in dropped and "Partnr" not in dropped
