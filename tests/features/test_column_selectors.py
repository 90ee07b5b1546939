"""Column selectors (``columns: {type: numeric}``): each key, their intersection, ``remaining``,
resolution once on the training split with the names recorded in workflow.json, the error
paths of a bad selector, and a whole run of a config that names no column."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.support.cli import run_cli as _pipeline
from pipeline.backends import get_backend
from pipeline.config import load_config
from pipeline.core.errors import ConfigError, DataError
from pipeline.features import ColumnSelector, FeatureWorkflow
from pipeline.features.auto_ops import default_ops
from pipeline.features.column_types import column_type, column_types
from pipeline.features.ops import Standardize, select_columns
from pipeline.scoring.model_folder import load_model

ROOT = Path(__file__).resolve().parents[2]
CPU = get_backend("cpu")


def table(rows: int = 40) -> pd.DataFrame:
    """Numbers (one with gaps), text (with gaps), a bool, a date (with a gap) and an id."""
    rng = np.random.default_rng(0)
    amount = rng.normal(100, 20, rows)
    amount[::7] = np.nan
    plan = rng.choice(["basic", "plus", "pro"], rows).astype(object)
    plan[3] = None
    when = pd.to_datetime("2024-01-01") + pd.to_timedelta(rng.integers(0, 300, rows), unit="D")
    when = pd.Series(when).where(np.arange(rows) != 5)
    return pd.DataFrame({
        "customer_id": [f"c{i}" for i in range(rows)],
        "amount_paid": amount,
        "amount_due": rng.integers(0, 50, rows),
        "tenure": rng.integers(1, 72, rows),
        "plan": plan,
        "active": rng.random(rows) > 0.5,
        "signup": when,
    })


def fitted(ops: list[dict], frame: pd.DataFrame | None = None) -> FeatureWorkflow:
    wf = FeatureWorkflow(ops, backend="cpu")
    wf.fit_transform(table() if frame is None else frame)
    return wf


def names(wf: FeatureWorkflow) -> dict[str, list[str]]:
    return {op.op: list(op.columns) for op in wf.ops}


# ---------------------------------------------------------------- the column types
def test_column_type_reads_the_dtype_only():
    frame = table()
    assert column_types(frame) == {
        "customer_id": "categorical", "amount_paid": "numeric", "amount_due": "numeric", "tenure": "numeric",
        "plan": "categorical", "active": "bool", "signup": "date",
    }
    assert column_type(pd.Series([0, 1, 1, 0])) == "numeric"            # 0/1 numbers stay numbers
    assert column_type(pd.Series([True, None], dtype="boolean")) == "bool"
    assert column_type(pd.Series(["a"], dtype="category")) == "categorical"
    assert column_type(pd.Series(["a"], dtype="string")) == "categorical"
    assert column_type(pd.Series(pd.to_datetime(["2024-01-01"]).tz_localize("UTC"))) == "date"


# ---------------------------------------------------------------- each key, alone and together
def test_type_selector_takes_columns_of_that_type():
    assert select_columns(ColumnSelector(type="numeric"), table()) == ["amount_paid", "amount_due", "tenure"]
    assert select_columns(ColumnSelector(type=["categorical", "bool"]), table()) == ["customer_id", "plan", "active"]


def test_matching_selector_globs_names():
    assert select_columns(ColumnSelector(matching="amount_*"), table()) == ["amount_paid", "amount_due"]
    assert select_columns(ColumnSelector(matching=["*_due", "ten?re"]), table()) == ["amount_due", "tenure"]
    assert select_columns(ColumnSelector(matching="AMOUNT_*"), table()) == []     # case-sensitive


def test_except_leaves_names_out():
    selector = ColumnSelector.model_validate({"except": ["customer_id", "signup"]})
    assert select_columns(selector, table()) == ["amount_paid", "amount_due", "tenure", "plan", "active"]


def test_keys_combine_as_an_intersection():
    selector = ColumnSelector.model_validate({"type": "numeric", "matching": "amount_*", "except": ["amount_due"]})
    assert select_columns(selector, table()) == ["amount_paid"]


def test_level_bounds_select_by_distinct_values_in_the_training_split():
    frame = table(300)
    frame["store"] = [f"s{i % 150}" for i in range(300)]
    frame.loc[[1, 2], "store"] = None                  # missing values are not a level (s1, s2 stay: rows 151, 152)
    many = ColumnSelector.model_validate({"type": "categorical", "min_levels": 100})
    assert select_columns(many, frame) == ["customer_id", "store"]
    few = ColumnSelector.model_validate({"type": "categorical", "max_levels": 3})
    assert select_columns(few, frame) == ["plan"]
    exact = ColumnSelector.model_validate({"min_levels": 150, "max_levels": 150})
    assert select_columns(exact, frame) == ["store"]
    from pipeline.features.ops.column_selector import describe_selector

    assert describe_selector(many) == "columns of type categorical with at least 100 levels"
    with pytest.raises(ValueError, match=r"min_levels \(9\) is above max_levels \(3\)"):
        ColumnSelector.model_validate({"min_levels": 9, "max_levels": 3})


def test_remaining_leaves_out_explicit_names_and_earlier_selections():
    wf = fitted([
        {"fill_missing": {"columns": {"type": "numeric"}, "strategy": "median"}},
        {"drop": {"columns": ["customer_id"]}},
        {"date_parts": {"columns": {"type": "date"}}},
        {"categorify": {"columns": {"remaining": True}}},
    ])
    # Not customer_id (named by drop), not the numbers (taken by fill_missing) nor signup (date_parts).
    # The date parts are made after the first selector and no selector took them: they remain.
    assert names(wf)["categorify"] == ["plan", "active", "signup_year", "signup_month", "signup_day",
                                       "signup_dayofweek"]


def test_a_selector_sees_the_frame_as_it_reaches_the_op():
    wf = fitted([
        {"drop": {"columns": ["customer_id"]}},
        {"categorify": {"columns": {"type": ["categorical", "bool"]}}},
        {"date_parts": {"columns": {"type": "date"}}},
        {"fill_missing": {"columns": {"type": "numeric"}, "strategy": "median"}},
    ])
    # After categorify the codes are numbers, and date_parts' parts too: fill_missing takes them all.
    assert names(wf)["fill_missing"] == ["amount_paid", "amount_due", "tenure", "plan", "active", "signup_year",
                                         "signup_month", "signup_day", "signup_dayofweek"]


def test_a_selector_that_matches_nothing_skips_its_op(caplog):
    wf = fitted([
        {"drop": {"columns": ["customer_id", "plan", "signup", "active"]}},
        {"log1p": {"columns": {"matching": "price_*"}}},
        {"fill_missing": {"columns": {"type": "numeric"}}},
    ])
    assert [op.op for op in wf.ops] == ["drop", "fill_missing"]
    data = wf.to_dict()
    assert [entry["op"] for entry in data["ops"]] == ["drop", "fill_missing"]
    skipped = [s for s in data["selections"] if s["skipped"]]
    assert skipped == [{"position": 1, "op": "log1p", "selector": "columns matching price_*", "columns": [],
                        "skipped": True}]
    assert "matched no column" in caplog.text


def test_an_optional_selector_that_matches_nothing_is_an_info_line_not_a_warning(caplog):
    """auto's own op list warned "feature ops[3] (target_encode): ... matched no column" about
    ops the user never wrote, on every table without many-level columns."""
    with caplog.at_level("INFO", logger="pipeline"):
        wf = fitted([
            {"drop": {"columns": ["customer_id", "plan", "signup", "active"]}},
            {"log1p": {"columns": {"matching": "price_*", "optional": True}}},
            {"fill_missing": {"columns": {"type": "numeric"}}},
        ])
    assert [op.op for op in wf.ops] == ["drop", "fill_missing"]
    (said,) = [r for r in caplog.records if "matched no column" in r.getMessage()]
    assert said.levelname == "INFO"


def test_plain_lists_work_as_before():
    wf = fitted([{"fill_missing": {"columns": ["amount_paid"]}}, {"drop": {"columns": ["customer_id", "plan",
                                                                                      "signup", "active"]}}])
    assert names(wf) == {"fill_missing": ["amount_paid"], "drop": ["customer_id", "plan", "signup", "active"]}
    assert "selections" not in wf.to_dict()


# ---------------------------------------------------------------- recorded names, scoring
def test_workflow_json_records_names_and_scoring_does_not_retype(tmp_path):
    wf = fitted([
        {"drop": {"columns": ["customer_id", "signup"]}},
        {"fill_missing": {"columns": {"type": "numeric"}, "strategy": "median"}},
        {"categorify": {"columns": {"type": ["categorical", "bool"]}}},
    ])
    wf.save(tmp_path / "workflow.json")
    saved = json.loads((tmp_path / "workflow.json").read_text())
    recorded = {entry["op"]: entry["params"]["columns"] for entry in saved["ops"]}
    assert recorded["fill_missing"] == ["amount_paid", "amount_due", "tenure"]
    assert recorded["categorify"] == ["plan", "active"]
    # A batch whose dtypes differ: the numbers arrive as text-free objects, the bool as text.
    # Typed again, amount_due would be categorical and active categorical; the recorded names rule.
    batch = table(10).drop(columns=["customer_id", "signup"])
    batch["amount_due"] = batch["amount_due"].astype(object)
    batch["active"] = batch["active"].map({True: "True", False: "False"})
    loaded = FeatureWorkflow.load(tmp_path / "workflow.json", backend="cpu")
    assert [list(op.columns) for op in loaded.ops] == [["customer_id", "signup"], recorded["fill_missing"],
                                                      recorded["categorify"]]
    out = loaded.transform(batch)
    assert list(out.columns) == wf.output_columns_
    assert out["amount_due"].tolist() == batch["amount_due"].astype(float).tolist()


def test_an_op_with_an_unresolved_selector_says_how_to_fit_it():
    op = Standardize(columns={"type": "numeric"})
    with pytest.raises(DataError, match="selector.*FeatureWorkflow"):
        op.fit(table(), CPU)


# ---------------------------------------------------------------- config errors and validate
CONFIG = """\
name: sel
stages:
  raw: {{kind: load, path: data.csv}}
  split: {{kind: split, inputs: [raw], target: churned, positive: "yes", test: 0.25}}
  features:
    kind: features
    inputs: [split]
    id: customer_id
    ops:
{ops}
  forest: {{kind: train, inputs: [features], model: random_forest, params: {{n_estimators: 10}}}}
  export: {{kind: export, inputs: [forest]}}
"""


def project(folder: Path, ops: list[str], rows: int = 120) -> Path:
    frame = table(rows)
    frame["churned"] = np.where(frame["tenure"] < 30, "yes", "no")
    frame.to_csv(folder / "data.csv", index=False)
    (folder / "sel.yaml").write_text(CONFIG.format(ops="\n".join(f"      - {op}" for op in ops)))
    return folder / "sel.yaml"


@pytest.mark.parametrize("op, path, words", [
    ("one_hot: {columns: {type: [categorical, text]}}", "stages.features.ops[1].one_hot.columns.type",
     "unknown column type 'text'"),
    ("standardize: {columns: {matching: 'amount_[*'}}", "stages.features.ops[1].standardize.columns.matching",
     "never closes"),
    ("standardize: {columns: {typ: numeric}}", "stages.features.ops[1].standardize.columns.typ",
     "did you mean 'type'"),
    ("standardize: {columns: {remaining: false}}", "stages.features.ops[1].standardize.columns.remaining",
     "only true"),
    ("standardize: {columns: {}}", "stages.features.ops[1].standardize.columns", "at least one of"),
    ("standardize: {columns: numeric}", "stages.features.ops[1].standardize.columns", "selector mapping"),
])
def test_a_bad_selector_is_a_config_error_at_its_key(tmp_path, op, path, words):
    config = project(tmp_path, ["drop: {columns: [signup]}", op])
    with pytest.raises(ConfigError) as caught:
        load_config(config)
    (issue,) = caught.value.issues
    assert issue.path == path and words in issue.message
    assert issue.line == 11


def test_except_names_are_checked_before_data_is_read(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = project(tmp_path, ["fill_missing: {columns: {type: numeric}}",
                                "categorify: {columns: {type: categorical, except: [customer_id, churned, plna]}}"])
    with pytest.raises(ConfigError) as caught:
        load_config(config, check_data=True)
    (issue,) = caught.value.issues
    assert issue.path == "stages.features.ops[1].categorify.columns.except[2]"
    assert "'plna'" in issue.message and "did you mean 'plan'" in issue.message


def test_an_except_name_an_earlier_op_removed_is_refused_at_its_key(tmp_path, monkeypatch):
    """``except`` may name the target and the id (the ops never see them), not a column an earlier
    op removed: it would leave out nothing. The fill_missing selector between them (whose
    outputs are known only at fit) does not hide the removal; nor for a list of names."""
    monkeypatch.chdir(tmp_path)
    config = project(tmp_path, ["drop: {columns: [plan]}", "fill_missing: {columns: {type: numeric}}",
                                "categorify: {columns: {type: categorical, except: [customer_id, churned, plan]}}",
                                "standardize: {columns: [plan]}"])
    with pytest.raises(ConfigError) as caught:
        load_config(config, check_data=True)
    assert [issue.path for issue in caught.value.issues] == ["stages.features.ops[2].categorify.columns.except[2]",
                                                             "stages.features.ops[3].standardize.columns[0]"]
    assert all("'plan' is removed by ops[0] (drop) before this op" in issue.message for issue in caught.value.issues)


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return _pipeline(*args, cwd=cwd, env={"PYTHONPATH": str(ROOT), "COLUMNS": "200"})


def test_validate_shows_each_selector(tmp_path):
    project(tmp_path, ["fill_missing: {columns: {type: numeric}}",
                       "one_hot: {columns: {type: [categorical, bool], except: [customer_id]}}",
                       "date_parts: {columns: [signup]}"])
    proc = cli("validate", "sel.yaml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "stages.features.ops[0].fill_missing.columns: selects columns of type numeric" in lines[1]
    assert "stages.features.ops[1].one_hot.columns: selects columns of type categorical or bool except " \
           "customer_id" in lines[2]
    assert len(lines) == 3                        # a list of names needs no note


# ---------------------------------------------------------------- no column named anywhere
def test_a_config_that_names_no_column_runs_and_scores(tmp_path):
    ops = [json.dumps(op) for op in default_ops("binary")]
    project(tmp_path, ops)
    (tmp_path / "sel.yaml").write_text((tmp_path / "sel.yaml").read_text().replace("    id: customer_id\n", ""))
    proc = cli("run", "sel.yaml", "--device", "cpu", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    (workflow_file,) = (tmp_path / "runs" / "sel" / "latest").rglob("workflow.json")
    saved = json.loads(workflow_file.read_text())
    recorded = {entry["op"]: entry["params"]["columns"] for entry in saved["ops"]}
    # The CSV's dates are read as text (no dates: on the load): categorical, so date_parts is skipped.
    assert recorded == {"fill_missing": ["amount_paid", "amount_due", "tenure"],
                        "categorify": ["customer_id", "plan", "active", "signup"]}
    assert [s["op"] for s in saved["selections"] if s["skipped"]] == ["date_parts", "target_encode"]
    model = load_model(workflow_file.parent, device="cpu")
    scores = model.score(pd.read_csv(tmp_path / "data.csv").head(5))
    assert scores.shape[0] == 5


# ---------------------------------------------------------------- the op list for any table
@pytest.mark.parametrize("task", ["binary", "regression"])
def test_default_ops_make_a_numeric_matrix_of_any_table(task):
    frame = table(60)
    frame["note"] = ["free text " * (i % 3) if i % 4 else None for i in range(60)]
    frame["flag"] = pd.Series([True, False, None] * 20, dtype=object)
    wf = FeatureWorkflow(default_ops(task), backend="cpu")
    out = wf.fit_transform(frame)
    assert len(out.columns) == len(wf.output_columns_) and not out.isna().any().any()
    assert all(pd.api.types.is_numeric_dtype(out[c].dtype) for c in out.columns)
    assert out.to_numpy(dtype="float32").shape == (60, 12)
    # A table with no dates or no text: those ops are skipped, the rest still fits.
    numbers_only = FeatureWorkflow(default_ops(task), backend="cpu").fit(frame[["amount_paid", "tenure"]])
    assert [op.op for op in numbers_only.ops] == ["fill_missing"]
    with pytest.raises(ValueError, match="task kind"):
        default_ops("ranking")


def test_default_ops_target_encode_a_column_of_many_levels_out_of_fold():
    rng = np.random.default_rng(3)
    frame = table(600)
    frame["store"] = [f"s{i}" for i in rng.integers(0, 150, 600)]
    effect = {f"s{i}": v for i, v in enumerate(rng.normal(size=150))}
    frame["target"] = (frame["store"].map(effect) + rng.normal(size=600) > 0).astype(int)
    wf = FeatureWorkflow(default_ops("binary"), backend="cpu")
    out = wf.fit_transform(frame.drop(columns="target"), frame["target"])
    recorded = names(wf)
    assert recorded["target_encode"] == ["customer_id", "store"]           # 600 and 150 levels
    # Kept beside its encoding and coded too (CatBoost reads the codes, the others the encoding).
    assert {"store", "plan"} <= set(recorded["categorify"])
    assert wf.output_columns_[-2:] == ["customer_id=te", "store=te"]
    assert out["store"].dtype.kind == "u" and out["store"].max() <= 150
    # A rate, not a code; on the training rows out of fold (each row by the other folds' rows), so
    # not the whole split's means that scoring the same rows gives.
    assert out["store=te"].between(0, 1).all()
    scored = wf.transform(frame.drop(columns="target"))
    assert (out["store=te"] != scored["store=te"]).mean() > 0.9


@pytest.mark.gpu
def test_selectors_resolve_on_a_gpu_frame():
    pytest.importorskip("cudf")
    gpu = get_backend("gpu")
    frame = gpu.from_pandas(table())
    assert column_types(frame, gpu) == column_types(table())
    wf = FeatureWorkflow(default_ops("binary"), backend=gpu)
    out = wf.fit_transform(frame)
    cpu = FeatureWorkflow(default_ops("binary"), backend="cpu")
    expected = cpu.fit_transform(table())
    assert list(out.columns) == list(expected.columns)
    assert [list(op.columns) for op in wf.ops] == [list(op.columns) for op in cpu.ops]


def test_a_selector_after_an_op_that_learns_from_the_label() -> None:
    """The ops before a selector are fitted to show it the frame; target_encode among them needs
    the label, which the workflow passes on (it once failed with "no target was given")."""
    import numpy as np
    import pandas as pd

    from pipeline.features import FeatureWorkflow

    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"city": rng.choice(["a", "b", "c"], 200), "amount": rng.normal(size=200)})
    target = pd.Series(rng.integers(0, 2, 200))
    workflow = FeatureWorkflow([{"target_encode": {"columns": {"type": "categorical"}}},
                                {"standardize": {"columns": {"type": "numeric"}}}], backend="cpu")
    out = workflow.fit_transform(frame, target)
    assert [op.columns for op in workflow.ops] == [["city"], ["city", "amount"]]
    assert abs(float(out["city"].mean())) < 1e-6       # the encoded column was standardized too


def test_numbers_made_text_by_a_stray_word_are_named_when_a_selector_takes_them(caplog):
    """'12a' among 200 numbers makes tenure text, and {type: categorical} one-hot encodes it (a
    column per number): the resolution warns, naming the column and the value."""
    frame = table(200).drop(columns=["signup"]).assign(tenure=lambda t: t["tenure"].astype(str))
    frame.loc[7, "tenure"] = "12a"
    with caplog.at_level("WARNING"):
        fitted([{"one_hot": {"columns": {"type": "categorical"}}}, {"fill_missing": {"columns": ["amount_paid"]}}], frame)
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any("column 'tenure' is text, but" in m and "'12a'" in m for m in warned), warned
    assert not any("'plan'" in m for m in warned)               # words with no number among them: no warning


def test_integers_past_int64_that_made_a_column_text_are_named_when_a_selector_takes_them(caplog):
    """A CSV reader keeps a column holding 99999999999999999999 as text although every value is a
    number: {type: categorical} one-hot encoded tenure without a word; now the resolution warns,
    naming the value and the dtype to set. Numbers pinned as text (zip codes) are not named."""
    frame = table(200).drop(columns=["signup"]).assign(tenure=lambda t: t["tenure"].astype(str),
                                                       zip=lambda t: [f"{i:05d}" for i in range(len(t))])
    frame.loc[7, "tenure"] = "99999999999999999999"
    with caplog.at_level("WARNING"):
        fitted([{"one_hot": {"columns": {"type": "categorical"}}}, {"fill_missing": {"columns": ["amount_paid"]}}], frame)
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any("column 'tenure' is text, but every value" in m and "99999999999999999999" in m
               and "float64" in m for m in warned), warned
    assert not any("'zip'" in m for m in warned), warned
