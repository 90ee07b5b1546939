"""The ``aggregate`` and ``label`` stage kinds: config checks with key paths, the specs' hooks
for scoring at a cut-off, facts, and a run of the ``pipeline`` command on an event log."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipeline.backends import get_backend
from pipeline.config import load_config
from pipeline.core.errors import ConfigError, DataError, ExitCode
from pipeline.stages import STAGE_KINDS, StageContext
from pipeline.stages.aggregate import AggregateSpec
from pipeline.stages.label import LabelSpec
from tests.cli.test_end_to_end import cli

CONFIG = """\
name: events_test
device: cpu
stages:
  events: {kind: load, path: events.csv, dtypes: {customer_id: str}, dates: {day: "%Y%m%d"}}
  customers:
    kind: aggregate
    inputs: [events]
    by: customer_id
    time: day
    as_of: [2020-06-01, "2020-08-01"]
    windows: [30d, all]
    features:
      orders: count
      spend: {sum: amount}
      recency_days: recency
      gap_days: interval_mean
      biggest: {max: amount, windows: [all]}
  labelled:
    kind: label
    inputs: {entities: customers, events: events}
    by: customer_id
    time: day
    as_of: [2020-06-01, "2020-08-01"]
    horizon: 60d
    target: {churn: no_event}
"""


def issues_of(text: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_config(text=text)
    return [f"{issue.path}: {issue.message}" for issue in info.value.issues]


def test_the_config_loads_with_inputs_by_role_and_dates_as_text():
    config = load_config(text=CONFIG)
    customers, labelled = config.stages["customers"], config.stages["labelled"]
    assert isinstance(customers, AggregateSpec) and isinstance(labelled, LabelSpec)
    assert customers.as_of == ["2020-06-01", "2020-08-01"]               # an unquoted date stays text
    assert labelled.inputs == ["events", "customers"]                   # role order: events, entities
    assert customers.plan().output_names == ["orders_30d", "orders_all", "spend_30d", "spend_all",
                                             "recency_days_30d", "recency_days_all", "gap_days_30d", "gap_days_all",
                                             "biggest_all"]


@pytest.mark.parametrize("old, new, expected", [
    ("windows: [30d, all]", "windows: [30d, 3m]",
     "stages.customers.windows: '3m': months and years are not a fixed length; write 30d / 365d"),
    ("windows: [30d, all]", "windows: [30d, 720h]", "stages.customers.windows: windows: '30d' and '720h' are the same"),
    ("spend: {sum: amount}", "spend: {median: amount}", "stages.customers.features.spend: unknown aggregate 'median'"),
    ("orders: count", "orders: sum", "stages.customers.features.orders: 'sum' needs a column"),
    ("biggest: {max: amount, windows: [all]}", "biggest: {max: amount, windows: [all, 2y]}",
     "stages.customers.features.biggest: '2y': months and years"),
    ("    as_of: [2020-06-01, \"2020-08-01\"]\n    windows", "    as_of: 2020-13-01\n    windows",
     "stages.customers.as_of: '2020-13-01' is not a date"),
    ("target: {churn: no_event}", "target: {churn: no_event, spend: {sum: amount}}",
     "stages.labelled.target: target takes exactly one entry"),
    ("target: {churn: no_event}", "target: {churn: never}", "stages.labelled.target: target.churn: unknown kind 'never'"),
    ("horizon: 60d", "horizon: all", "stages.labelled.horizon: 'all' is not a length here"),
    ("horizon: 60d", "horizon: 6mo", "stages.labelled.horizon: '6mo': months and years are not a fixed length"),
])
def test_config_errors_name_the_key(old, new, expected):
    assert old in CONFIG
    found = issues_of(CONFIG.replace(old, new, 1))
    assert any(issue.startswith(expected) for issue in found), found


def test_a_label_target_the_entity_table_already_has_is_a_config_error_before_any_row(tmp_path):
    """It passed validate and failed the run at the label stage (exit 3)."""
    from tests.conftest import working_directory

    write_events(tmp_path)
    (tmp_path / "p.yaml").write_text(CONFIG.replace("target: {churn: no_event}", "target: {orders_all: no_event}"))
    with working_directory(tmp_path), pytest.raises(ConfigError) as info:
        load_config("p.yaml", check_data=True)
    (issue,) = info.value.issues
    assert issue.path == "stages.labelled.target" and issue.line is not None
    assert "the target 'orders_all' is already a column of the entity table ('customers')" in issue.message


def test_an_aggregate_of_the_events_with_its_own_windows_loads_as_the_guide_writes_it():
    """configuration.md's `last_seen: {recency: true, windows: [all]}`: the config type took no
    `true`, so the form the docs show was always refused."""
    text = CONFIG.replace("      biggest: {max: amount, windows: [all]}\n",
                          "      biggest: {max: amount, windows: [all]}\n      last_seen: {recency: true, windows: [all]}\n")
    spec = load_config(text=text).stages["customers"]
    assert spec.features["last_seen"] == {"recency": True, "windows": ["all"]}
    (message,) = issues_of(text.replace("{recency: true, windows: [all]}", "{recency: amount, windows: [all]}"))
    assert "'recency' takes no column" in message


def test_empty_features_and_clashing_names_are_config_errors():
    text = CONFIG.replace("""    features:
      orders: count""", """    cutoff_column: customer_id
    features:
      orders: count""")
    assert any("cutoff_column 'customer_id' is also a key" in i for i in issues_of(text))
    empty = CONFIG.split("    features:")[0] + "    features: {}\n"
    assert any("stages.customers.features: features is empty" in i for i in issues_of(empty))


def test_specs_rebuild_at_one_cutoff_and_the_label_passes_its_entities_through():
    config = load_config(text=CONFIG)
    customers, labelled = config.stages["customers"], config.stages["labelled"]
    moved = customers.at_cutoff("2021-01-01T00:00:00")
    assert moved.as_of == ["2021-01-01T00:00:00"] and customers.as_of == ["2020-06-01", "2020-08-01"]
    assert moved.plan().cutoffs == (pd.Timestamp("2021-01-01"),)
    assert labelled.at_cutoff("2021-01-01").as_of == ["2021-01-01"]
    assert labelled.scoring_passthrough() == 1 and customers.scoring_passthrough() is None


def write_events(folder: Path) -> None:
    rng = np.random.default_rng(0)
    n = 600
    days = pd.Timestamp("2020-01-01") + pd.to_timedelta(rng.integers(0, 300, n), unit="D")
    pd.DataFrame({"customer_id": [f"{i:03d}" for i in rng.integers(0, 60, n)],
                  "day": days.strftime("%Y%m%d"), "amount": rng.gamma(2.0, 10.0, n).round(2)}).to_csv(
        folder / "events.csv", index=False)


def run_stage(kind: str, spec, inputs: dict) -> tuple[pd.DataFrame, dict]:
    ctx = StageContext(backend=get_backend("cpu"), seed=0, stage=kind, logger=logging.getLogger("test"))
    return STAGE_KINDS[kind].run(spec, ctx, inputs), ctx.facts


def test_stage_facts_list_rows_cutoffs_and_columns(tmp_path):
    write_events(tmp_path)
    config = load_config(text=CONFIG)
    events = pd.read_csv(tmp_path / "events.csv", dtype={"customer_id": str})
    events["day"] = pd.to_datetime(events["day"], format="%Y%m%d")
    events.loc[3, "customer_id"] = None
    customers, facts = run_stage("aggregate", config.stages["customers"], {"events": events})
    assert facts["cutoffs"] == ["2020-06-01T00:00:00", "2020-08-01T00:00:00"]
    assert facts["columns"] == config.stages["customers"].plan().output_names
    assert facts["rows"] == len(customers) and facts["rows_without_key"] == 1
    labelled, facts = run_stage("label", config.stages["labelled"], {"events": events, "customers": customers})
    assert facts["columns"] == ["churn"] and facts["rows"] == len(customers) == len(labelled)
    assert labelled.columns.tolist() == [*customers.columns, "churn"]


def test_a_cutoff_before_every_event_is_a_data_error():
    events = pd.DataFrame({"customer_id": ["a"], "day": pd.to_datetime(["2020-09-01"]), "amount": [1.0]})
    spec = load_config(text=CONFIG).stages["customers"]
    with pytest.raises(DataError, match="no entity has an event before the cut-off"):
        run_stage("aggregate", spec, {"events": events})


def test_one_cutoff_of_a_list_before_every_event_is_named_in_a_warning(caplog):
    """Its rows were dropped in silence: a mistyped year lost a cut-off's training rows."""
    events = pd.DataFrame({"customer_id": ["a", "b"], "day": pd.to_datetime(["2020-07-01", "2020-07-05"]),
                           "amount": [1.0, 2.0]})
    spec = load_config(text=CONFIG).stages["customers"]
    with caplog.at_level("WARNING", logger="test"):
        out, facts = run_stage("aggregate", spec, {"events": events})
    assert facts["empty_cutoffs"] == ["2020-06-01T00:00:00"] and len(out) == 2
    assert any("cut-off(s) 2020-06-01T00:00:00 gave no rows" in r.getMessage() for r in caplog.records)


@pytest.mark.slow
def test_pipeline_run_builds_a_labelled_customer_table_and_trains_on_it(tmp_path):
    from pipeline.runs.record import read_manifest

    write_events(tmp_path)
    text = CONFIG + """\
  split: {kind: split, inputs: [labelled], target: churn, order_by: as_of, test: 0.3}
  features:
    kind: features
    inputs: [split]
    id: customer_id
    ops:
      - drop: {columns: [as_of]}
      - fill_missing: {columns: [recency_days_30d, gap_days_30d, gap_days_all], strategy: constant, value: -1}
  logreg: {kind: train, inputs: [features], model: logistic_regression}
"""
    (tmp_path / "events.yaml").write_text(text)
    proc = cli("run", "events.yaml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    record = read_manifest(tmp_path / "runs" / "events_test" / "latest")
    facts = record.stages["customers"].facts
    assert facts["columns"][:2] == ["orders_30d", "orders_all"] and facts["rows"] > 60
    assert record.stages["labelled"].facts["columns"] == ["churn"]
    assert record.stages["labelled"].facts["rows"] == facts["rows"]


@pytest.mark.slow
def test_pipeline_run_says_to_read_dates_when_the_time_column_is_text(tmp_path):
    write_events(tmp_path)
    (tmp_path / "events.yaml").write_text(CONFIG.replace(', dates: {day: "%Y%m%d"}', ""))
    proc = cli("run", "events.yaml", cwd=tmp_path)
    assert proc.returncode == ExitCode.DATA, proc.stderr
    assert "time column 'day'" in proc.stderr and "add `dates: {day: FORMAT}` to the load stage" in proc.stderr
