from __future__ import annotations

import pytest

from pipeline.config import dump_config, json_schema, load_config
from pipeline.core.errors import ConfigError
from tests.conftest import ROOT

CHURN = ROOT / "configs" / "churn.yaml"

MINIMAL = """\
name: t
stages:
  raw:
    kind: load
    path: data.csv
  split:
    kind: split
    inputs: [raw]
    target: y
"""


def issues_of(text: str, overrides: tuple[str, ...] = ()) -> list:
    with pytest.raises(ConfigError) as info:
        load_config(text=text, overrides=overrides)
    return info.value.issues


def test_shipped_config_is_valid():
    config = load_config(CHURN)
    assert config.name == "churn"
    assert config.stages["split"].positive == "Yes"
    assert [s for s, spec in config.stages.items() if spec.kind == "train"] == ["logreg", "forest", "xgb"]


def test_every_problem_reported_at_once_with_key_path_and_line():
    text = MINIMAL.replace("name: t", "name: t\ndevise: cpu") + "    tset: 0.2\n  ev:\n    kind: evaluate\n    inputs: [splitt]\n"
    issues = issues_of(text)
    found = {i.path: i for i in issues}
    assert found["devise"].line == 2 and "did you mean 'device'" in found["devise"].message
    assert found["stages.split.tset"].line == 11 and "did you mean 'test'" in found["stages.split.tset"].message
    assert found["stages.ev.inputs"].line == 14 and "did you mean 'split'" in found["stages.ev.inputs"].message


def test_unknown_kind_and_op_get_suggestions():
    text = MINIMAL.replace("kind: load", "kind: lod") + (
        "  f:\n    kind: features\n    inputs: [split]\n    ops:\n      - standardise: {columns: [a]}\n"
        "      - fill_missing: {columns: [a], strategy: medain}\n"
    )
    messages = {i.path: i.message for i in issues_of(text)}
    assert "did you mean 'load'" in messages["stages.raw.kind"]
    assert "did you mean 'standardize'" in messages["stages.f.ops[0]"]
    assert "'median'" in messages["stages.f.ops[1].fill_missing.strategy"]


def test_a_dtype_pandas_does_not_know_is_a_config_error_at_its_key():
    """It was a data error (exit 3) from the reader, mid-run, after validate said valid."""
    text = MINIMAL.replace("    path: data.csv\n", "    path: data.csv\n    dtypes: {age: banana, id: str, n: Int64}\n")
    (issue,) = issues_of(text)
    assert issue.path == "stages.raw.dtypes" and "column 'age': 'banana' is not a dtype" in issue.message
    assert load_config(text=text.replace("banana", "float64")).stages["raw"].dtypes["id"] == "str"


def test_model_param_typo_is_named():
    text = MINIMAL + (
        "  f:\n    kind: features\n    inputs: [split]\n"
        "  m:\n    kind: train\n    inputs: [f]\n    model: random_forest\n    params: {n_estimator: 5}\n"
    )
    (issue,) = issues_of(text)
    assert issue.path == "stages.m.params.n_estimator" and issue.line == 17
    assert "'n_estimator'" in issue.message and "did you mean 'n_estimators'" in issue.message


def test_cycle_names_the_stages_involved():
    text = MINIMAL + "  a:\n    kind: python\n    function: m:f\n    inputs: [b]\n  b:\n    kind: python\n    function: m:f\n    inputs: [a]\n"
    (issue,) = issues_of(text)
    assert "cycle" in issue.message and "a" in issue.message and "b" in issue.message


def test_input_kind_and_count_checked():
    text = MINIMAL + "  m:\n    kind: train\n    inputs: [raw, split]\n    model: xgboost\n"
    messages = [i.message for i in issues_of(text)]
    assert any("at most 1 input" in m for m in messages)
    assert any("input 'raw' is a 'load' stage" in m for m in messages)


def test_duplicate_keys_are_errors():
    (issue,) = issues_of(MINIMAL + "  split:\n    kind: load\n    path: x.csv\n")
    assert "duplicate key 'split'" in issue.message and issue.line == 10


@pytest.mark.parametrize("end", ["", "\n"], ids=["no-newline", "newline"])
def test_yaml_syntax_error_has_line(end):
    """An unclosed [ on the last line was reported on the line after the file's last."""
    (issue,) = issues_of("name: t\nstages:\n  a: [1, 2" + end)
    assert "not valid YAML" in issue.message and issue.line == 3


def test_overrides_are_parsed_as_yaml_and_applied():
    config = load_config(CHURN, overrides=["stages.forest.params.n_estimators=500", "device=cpu",
                                            "stages.features.ops.0.fill_missing.strategy=mean"])
    assert config.stages["forest"].params["n_estimators"] == 500
    assert config.device == "cpu"
    assert config.stages["features"].build_ops()[0].strategy == "mean"



def test_an_override_takes_a_list_index_as_messages_write_it():
    """A message names `stages.mlp.hidden[0]` or `feature ops[2]`; the same path given to --set
    was refused as "unknown key 'ops[0]'", though `ops.0` worked."""
    config = load_config(CHURN, overrides=["stages.features.ops[0].fill_missing.strategy=mean",
                                            "stages.mlp.hidden[1]=16"])
    assert config.stages["features"].build_ops()[0].strategy == "mean"
    assert config.stages["mlp"].hidden[1] == 16


def test_an_override_inside_a_stage_that_does_not_exist_names_the_stages():
    """`--set stages.train.models=[...]` on a config without a stage `train` made one, and the
    message was "stages.train.kind: missing 'kind'", as if the user had left a key out."""
    (issue,) = issues_of(MINIMAL, overrides=("stages.splitt.test=0.3",))
    assert issue.source == "--set" and issue.path == "stages.splitt"
    assert "no stage named 'splitt'" in issue.message and "raw, split" in issue.message
    assert "did you mean 'split'?" in issue.message
    added = load_config(text=MINIMAL, overrides=["stages.more={kind: load, path: other.csv}"])
    assert added.stages["more"].path == "other.csv"
    piecewise = load_config(text=MINIMAL, overrides=["stages.more.path=o.csv", "stages.more.kind=load"])
    assert piecewise.stages["more"].path == "o.csv"


def test_an_override_of_a_dash_is_the_text_dash():
    """`--set stages.raw.path=-` (standard input, as the docs write `path: '-'`) read as YAML is
    a list holding null, refused as "Input should be a valid string"."""
    assert load_config(text=MINIMAL, overrides=["stages.raw.path=-"]).stages["raw"].path == "-"


def test_an_unknown_parameter_from_set_is_marked_set_not_a_line_of_the_file():
    """`--set stages.forest.params.n_estimator=5` was reported at the params' line of the file."""
    with pytest.raises(ConfigError) as caught:
        load_config(CHURN, overrides=["stages.forest.params.n_estimator=5"])
    (issue,) = caught.value.issues
    assert issue.path == "stages.forest.params.n_estimator" and issue.source == "--set" and issue.line is None
    assert "did you mean 'n_estimators'" in issue.message


def test_validate_refuses_a_parameter_value_the_estimator_refuses_at_its_key():
    """`max_depth: abc` and `C: high` passed validate and failed the run after the stages before."""
    with pytest.raises(ConfigError) as caught:
        load_config(CHURN, overrides=["stages.xgb.params.max_depth=abc", "stages.logreg.params.C=high"],
                    check_data=True)
    found = {issue.path: issue for issue in caught.value.issues}
    assert "takes an integer, not 'abc'" in found["stages.xgb.params.max_depth"].message
    with pytest.raises(ConfigError, match=r"stages\.xgb\.params\.max_depth.*takes an integer, not \[3\]"):
        load_config(CHURN, overrides=["stages.xgb.params.max_depth=[3]"], check_data=True)
    assert "must be a float" in found["stages.logreg.params.C"].message
    assert {issue.source for issue in found.values()} == {"--set"}


def test_a_problem_inside_keys_an_override_made_is_marked_set():
    """`--set stages.nosuch.kind=load` said "stages.nosuch.path (line 4): missing required key",
    the line of another key of the file."""
    (issue,) = issues_of(MINIMAL, overrides=("stages.more.kind=load",))
    assert issue.path == "stages.more.path" and issue.source == "--set" and issue.line is None
    (issue,) = issues_of(MINIMAL, overrides=("nosuchtop.x=1",))
    assert issue.source == "--set" and issue.line is None


def test_bad_override_reports_its_source():
    issues = issues_of(MINIMAL, overrides=("seed=abc", "nonsense"))
    assert {i.source for i in issues} == {"--set"}
    assert any(i.path == "seed" for i in issues)


def test_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.yaml")


def test_resolved_config_round_trips():
    config = load_config(CHURN)
    assert load_config(text=dump_config(config)) == config


def test_json_schema_lists_stage_kinds_and_ops():
    schema = json_schema()
    text = str(schema)
    for kind in ("load", "split", "features", "train", "evaluate", "export", "python"):
        assert f"'{kind}'" in text
    assert "one_hot" in text and "random_forest" in text


def test_a_model_with_a_stage_kind_of_its_own_in_a_train_stage_says_so():
    """`mlp` is in the registry (auto's member, the torch stage's model): "unknown model" was wrong."""
    text = MINIMAL + "  f:\n    kind: features\n    inputs: [split]\n  m:\n    kind: train\n    inputs: [f]\n    model: mlp\n"
    (issue,) = issues_of(text)
    assert issue.path == "stages.m.model"
    assert "is not fitted by a train stage: it is trained by its own stage kind" in issue.message


