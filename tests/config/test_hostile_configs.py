"""Hostile configs end as a config error (exit 2) that names the key and line, never a crash.

One test per defect class: what YAML may hold (tags, keys, merges, depth, aliases, size,
non-finite numbers, NUL), what ``--set`` may hold, names that become folders, and the numeric
ranges that used to pass the schema and fail later inside a stage.
"""

from __future__ import annotations

import math
import subprocess
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from tests.support.cli import run_cli as _pipeline
from pipeline.config import load_config
from pipeline.config.schema import ClusterConfig
from pipeline.core import yaml_source
from pipeline.core.yaml_source import MAX_DEPTH, MAX_DOCUMENT_BYTES, MAX_VALUES, parse_yaml
from pipeline.core.errors import ConfigError, ExitCode
from pipeline.features.ops import FillMissing
from pipeline.stages.evaluate import EvaluateSpec
from pipeline.stages.split import SplitSpec
from pipeline.stages.torch_mlp import EarlyStopping, TorchSpec
from tests.config.test_config import issues_of

BASE = """\
name: t
seed: 7
stages:
  raw:
    kind: load
    path: data.csv
  split:
    kind: split
    inputs: [raw]
    target: y
"""


def only_issue(text: str, overrides: tuple[str, ...] = ()):
    issues = issues_of(text, overrides)
    assert len(issues) == 1, issues
    return issues[0]


# ------------------------------------------------------------------ keys and merges
@pytest.mark.parametrize("key", ["? [a, b]\n: 1\n", "? {a: 1}\n: 1\n", "[a, b]: 1\n"])
def test_a_key_that_is_a_list_or_mapping_is_a_config_error_naming_its_line(key):
    issue = only_issue(BASE + key)
    assert issue.line == 11
    assert "key" in issue.message and "list or a mapping" in issue.message


@pytest.mark.parametrize("merge", ["*x", "[*x]", "[*x, *m]"])
def test_a_merge_key_whose_alias_is_not_a_mapping_is_a_config_error(merge):
    text = "x: &x 3\nm: &m {a: 1}\n" + BASE.replace("  split:\n", f"  split:\n    <<: {merge}\n")
    issues = issues_of(text)
    merge_issue = next(i for i in issues if "merge" in i.message)
    assert merge_issue.path == "stages.split" and merge_issue.line == 10


def test_merge_keys_still_merge_with_explicit_keys_winning():
    text = BASE.replace("  raw:\n    kind: load\n    path: data.csv\n",
                        "  raw: &a\n    kind: load\n    path: data.csv\n    description: from a\n"
                        "  other: &b {kind: load, path: b.csv, description: from b, columns: [c]}\n")
    text += "  raw2:\n    <<: [*a, *b]\n    path: explicit.csv\n"
    config = load_config(text=text)
    raw2 = config.stages["raw2"]
    assert raw2.path == "explicit.csv"            # explicit key beats every merged one
    assert raw2.description == "from a"           # earlier merged mapping beats later ones
    assert raw2.columns == ["c"]                  # keys only the later mapping has still arrive


# ------------------------------------------------------------------ tags
@pytest.mark.parametrize("value", [
    "!!python/name:os.system t",
    "!!python/object/apply:os.system ['true']",
    "!foo bar",
    "!!binary aGVsbG8=",
    "!!set {a, b}",
    "!!timestamp 2024-01-01",
    "!!omap [{a: 1}]",
    "!<tag:example.com,2000:thing> x",
])
def test_every_tag_outside_the_core_schema_is_refused_with_key_and_line(value):
    issue = only_issue(BASE.replace("seed: 7", f"seed: 7\ndescription: {value}"))
    assert issue.path == "description" and issue.line == 3
    assert "tag" in issue.message and "not allowed" in issue.message


def test_a_python_tag_inside_a_list_is_refused_not_dropped():
    text = BASE + "    description: x\n  f:\n    kind: features\n    inputs: [split]\n    ops:\n" \
        "      - !!python/object/apply:os.system ['true']\n"
    issue = only_issue(text)
    assert issue.path == "stages.f.ops[0]" and issue.line == 16 and "python/object/apply" in issue.message


@pytest.mark.parametrize(("tagged", "word"), [("!!int forty-two", "forty-two"), ("!!bool maybe", "maybe"),
                                              ("!!float abc", "abc"), ("!!int 1" + "0" * 5000, "!!int")])
def test_a_core_tag_whose_value_cannot_be_built_is_a_config_error(tagged, word):
    issue = only_issue(BASE.replace("seed: 7", f"seed: {tagged}"))
    assert issue.path == "seed" and issue.line == 2 and word in issue.message


def test_yaml_timestamps_stay_the_text_that_was_written():
    config = load_config(text=BASE.replace("seed: 7", "seed: 7\ndescription: 2024-01-01"))
    assert config.description == "2024-01-01"


# ------------------------------------------------------------------ depth, aliases, size
@pytest.mark.parametrize("style", ["flow", "block"])
def test_nesting_past_the_bound_is_a_config_error_not_a_recursion_error(style):
    block = "".join(f"\n{'  ' * (i + 1)}k{i}:" for i in range(300)) + " 1"
    deep = "[" * 3000 + "]" * 3000 if style == "flow" else block
    issue = only_issue(BASE + f"deep: {deep}\n")
    assert issue.path.startswith("deep") and issue.line is not None
    assert f"deeper than {MAX_DEPTH} levels" in issue.message


def test_nesting_up_to_the_bound_is_read():
    doc = parse_yaml("[" * MAX_DEPTH + "]" * MAX_DEPTH, source="t")
    depth, value = 1, doc.data
    while value:
        depth, value = depth + 1, value[0]
    assert depth == MAX_DEPTH
    with pytest.raises(ConfigError, match="deeper than"):
        parse_yaml("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), source="t")


DEEP_FLOW = "[" * 3000 + "]" * 3000
DEEP_BLOCK = "".join(f"\n{'  ' * (i + 1)}k{i}:" for i in range(300)) + " 1"


@pytest.mark.parametrize("deep", [DEEP_FLOW, DEEP_BLOCK], ids=["flow", "block"])
def test_the_depth_bound_reads_the_same_with_pythons_parser_alone(monkeypatch, deep):
    """PyYAML's Python parser is the one that reads a document again when libyaml refuses it
    (and the only one where PyYAML was built without libyaml): the same issue, key path and line."""
    issue = only_issue(BASE + f"deep: {deep}\n")
    monkeypatch.setattr(yaml_source, "COMPOSERS", {"python": yaml_source.COMPOSERS["python"]})
    assert only_issue(BASE + f"deep: {deep}\n") == issue
    assert issue.path.startswith("deep") and f"deeper than {MAX_DEPTH} levels" in issue.message
    assert issue.line == (11 if deep == DEEP_FLOW else 11 + MAX_DEPTH - 1)


@pytest.fixture
def libyaml_nesting_limit():
    """Set libyaml's own nesting limit (process-wide; PyYAML 6.0.4 and later, libyaml 0.2.6)."""
    cparser = getattr(yaml, "_yaml", None)
    get, put = getattr(cparser, "_get_max_nest_level", None), getattr(cparser, "_set_max_nest_level", None)
    if get is None or put is None or get() < 0:
        pytest.skip("this PyYAML's libyaml has no nesting limit to set")
    before = get()
    yield put
    put(before)


def test_libyaml_s_own_nesting_limit_never_decides_what_a_config_may_hold(libyaml_nesting_limit):
    """libyaml 0.2.6 refuses nesting past its own level (1,000 by default, and any library in the
    process may lower it), and its scanner runs ahead of the events: its refusal must not replace
    the project's bound, nor refuse a config within it."""
    libyaml_nesting_limit(10)
    within = "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1)
    assert parse_yaml(f"deep: {within}", source="t").data["deep"] is not None
    issue = only_issue(BASE + f"deep: {DEEP_FLOW}\n")
    assert issue.path.startswith("deep[0][0]") and issue.line == 11 and "deeper than" in issue.message
    assert "not valid YAML" in only_issue(BASE + "deep: [1, 2\n").message


BOMB = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"{chr(c)}: &{chr(c)} [{','.join([f'*{chr(c - 1)}'] * 9)}]\n" for c in range(ord("b"), ord("j")))


def test_an_alias_bomb_is_refused_before_it_expands():
    assert len(BOMB) < 1000
    issue = only_issue(BASE + BOMB)
    assert "aliases" in issue.message and "100000" in issue.message.replace(",", "")


def test_a_merge_key_bomb_is_refused_before_it_expands():
    bomb = "m0: &m0 {a: 1, b: 2, c: 3, d: 4, e: 5, f: 6, g: 7, h: 8}\n" + "".join(
        f"m{i}: &m{i} {{<<: [{', '.join([f'*m{i - 1}'] * 10)}]}}\n" for i in range(1, 10))
    issue = only_issue(BASE + bomb)
    assert "aliases" in issue.message


@pytest.mark.parametrize("text", ["x: &a [*a]\n", "x: &a {<<: *a}\n", "x: &a {k: *a}\n"])
def test_an_alias_inside_its_own_anchor_is_a_config_error(text):
    issue = only_issue(BASE + text)
    assert issue.path.startswith("x") and issue.line == 11 and "refers to itself" in issue.message


def test_a_document_with_too_many_values_stops_while_it_is_read():
    issue = only_issue(BASE + "many: [" + "0," * MAX_VALUES + "0]\n")
    assert issue.line == 11 and "more than 100,000 values" in issue.message


def test_a_document_past_the_size_bound_is_refused(tmp_path):
    big = BASE + "#" * MAX_DOCUMENT_BYTES + "\n"
    assert "MiB" in only_issue(big).message
    path = tmp_path / "big.yaml"
    path.write_text(big)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(path) in str(info.value) and f"{MAX_DOCUMENT_BYTES // 2**20} MiB" in str(info.value)


def test_several_documents_in_one_file_are_a_config_error():
    assert "single document" in only_issue(BASE + "---\nname: u\n").message


# ------------------------------------------------------------------ values
@pytest.mark.parametrize(("line", "path"), [
    ("    test: .nan", "stages.split.test"),
    ("    test: -.inf", "stages.split.test"),
    ("    positive: .NaN", "stages.split.positive"),
])
def test_non_finite_numbers_are_refused_where_they_are_written(line, path):
    issue = only_issue(BASE + line + "\n")
    assert issue.path == path and issue.line == 11 and "finite" in issue.message


def test_non_finite_numbers_in_free_form_params_are_refused():
    text = BASE + "  f: {kind: features, inputs: [split]}\n  m:\n    kind: train\n    inputs: [f]\n" \
        "    model: logistic_regression\n    params: {C: .inf}\n"
    issue = only_issue(text)
    assert issue.path == "stages.m.params.C" and issue.line == 16


def test_a_nul_character_in_any_string_is_refused():
    issue = only_issue(BASE.replace("path: data.csv", 'path: "data\\0.csv"'))
    assert issue.path == "stages.raw.path" and issue.line == 6 and "NUL" in issue.message


# ------------------------------------------------------------------ --set
@pytest.mark.parametrize("value", ["!!int forty-two", "!!python/name:os.system x", "!foo 1", ".nan",
                                   "[" * 3000 + "]" * 3000, "&a [*a]"])
def test_set_values_are_read_by_the_same_rules(value):
    issue = only_issue(BASE, (f"seed={value}",))
    assert issue.source == "--set" and issue.path.startswith("seed") and issue.line is None


def test_set_a_deeply_nested_value_on_a_text_field_is_refused_not_kept_as_text():
    """A text field would take the brackets as text: the value must be refused as YAML first."""
    for deep in ("[" * 3000 + "]" * 3000, "{a: " * 3000 + "1" + "}" * 3000):
        issue = only_issue(BASE, (f"description={deep}",))
        assert issue.source == "--set" and issue.path.startswith("description") and issue.line is None
        assert f"deeper than {MAX_DEPTH} levels" in issue.message


def test_set_nesting_counts_the_key_path():
    key = ".".join(f"k{i}" for i in range(MAX_DEPTH - 2))
    issue = only_issue(BASE, (f"{key}=[[[[1]]]]",))
    assert issue.source == "--set" and "deeper than" in issue.message


def test_set_text_that_is_not_yaml_stays_text():
    config = load_config(text=BASE, overrides=("description='not closed",))
    assert config.description == "'not closed"


# ------------------------------------------------------------------ names that become folders
@pytest.mark.parametrize("name", ['".."', '"."', ".hidden", '"a/b"', '"a\\\\b"', "-x", "a" * 101, '"a\\n"',
                                  '"a\\0"', '""'])
def test_a_pipeline_name_must_be_a_plain_folder_name(name):
    issue = only_issue(BASE.replace("name: t", f"name: {name}"))
    assert issue.path == "name" and issue.line == 1


@pytest.mark.parametrize("name", ["churn", "churn.v2", "2024_model", "a-b", "a" * 100])
def test_plain_folder_names_are_accepted(name):
    assert load_config(text=BASE.replace("name: t", f"name: {name}")).name == name


def test_the_name_message_says_why():
    message = only_issue(BASE.replace("name: t", 'name: ".."')).message
    assert "folder" in message and "runs_dir" in message


@pytest.mark.parametrize("stage", ['"raw\\n"', "r" * 101, '"a.b"', '".."'])
def test_a_stage_name_must_be_a_plain_folder_name(stage):
    issues = issues_of(BASE.replace("  split:\n", f"  {stage}: {{kind: load, path: x.csv}}\n  split:\n"))
    bad = [i for i in issues if i.path.startswith("stages") and "folder" in i.message]
    assert bad and bad[0].line is not None


def test_runs_dir_may_not_be_empty():
    assert only_issue(BASE + 'runs_dir: ""\n').path == "runs_dir"


@pytest.mark.parametrize("module", ["../evil", "os; rm", "", ".rel", "a..b"])
def test_a_plugin_entry_must_be_a_module_name(module):
    issue = only_issue(BASE + f'plugins: ["{module}"]\n')
    assert issue.path == "plugins[0]" and issue.line == 11 and "module name" in issue.message


def test_load_path_may_not_be_empty():
    assert only_issue(BASE.replace("path: data.csv", 'path: ""')).path == "stages.raw.path"


# ------------------------------------------------------------------ numeric ranges
@pytest.mark.parametrize("seed", [-1, 2**32, 10**30])
def test_seed_outside_numpys_range_is_a_config_error_naming_seed(seed):
    issue = only_issue(BASE.replace("seed: 7", f"seed: {seed}"))
    assert issue.path == "seed" and issue.line == 2


@pytest.mark.parametrize("seed", [0, 2**32 - 1])
def test_seed_range_ends_are_accepted(seed):
    assert load_config(text=BASE.replace("seed: 7", f"seed: {seed}")).seed == seed


@pytest.mark.parametrize("build", [
    lambda: TorchSpec(kind="torch", inputs=["f"], learning_rate=math.inf),
    lambda: TorchSpec(kind="torch", inputs=["f"], weight_decay=math.nan),
    lambda: TorchSpec(kind="torch", inputs=["f"], dropout=math.nan),
    lambda: EarlyStopping(min_delta=math.inf),
    lambda: SplitSpec(kind="split", inputs=["r"], target="y", test=math.nan),
    lambda: EvaluateSpec(kind="evaluate", inputs=["m"], threshold=math.nan),
    lambda: FillMissing(columns=["a"], strategy="constant", value=math.nan),
    lambda: ClusterConfig(connect_timeout=math.inf),
])
def test_spec_models_refuse_non_finite_floats_for_library_callers(build):
    with pytest.raises(ValidationError, match="finite"):
        build()


@pytest.mark.parametrize(("line", "path"), [
    ("cluster: {n_workers: 100000}", "cluster.n_workers"),
    ("cluster: {threads_per_worker: 100000}", "cluster.threads_per_worker"),
    ("cluster: {memory_limit: lots}", "cluster.memory_limit"),
    ("cluster: {memory_limit: -5}", "cluster.memory_limit"),
    # Less than a worker holds by itself: the nanny restarted it forever and the run never ended.
    ("cluster: {memory_limit: 150MB}", "cluster.memory_limit"),
    ("cluster: {memory_limit: 1.5}", "cluster.memory_limit"),
    ("cluster: {rmm_pool_size: lots}", "cluster.rmm_pool_size"),
    ("cluster: {device_memory_limit: -1GB}", "cluster.device_memory_limit"),
    ("cluster: {CUDA_VISIBLE_DEVICES: [-1]}", "cluster.CUDA_VISIBLE_DEVICES"),
])
def test_cluster_values_that_would_fail_at_start_are_config_errors(line, path):
    assert only_issue(BASE + line + "\n").path == path


def test_a_share_past_one_is_said_to_be_neither_share_nor_size():
    """1.5 was refused as "less than a worker needs": the mistake is a share past 1."""
    issue = only_issue(BASE + "cluster: {memory_limit: 1.5}\n")
    assert "neither a share of the machine's memory (a number up to 1: 0.25) nor a size" in issue.message


@pytest.mark.parametrize("limit", ["2GiB", "auto", 0, 10**9, None, 0.25, "'0.5'", 1])
def test_cluster_sizes_dask_reads_are_accepted(limit):
    value = "null" if limit is None else limit
    config = load_config(text=BASE + f"cluster: {{memory_limit: {value}, rmm_pool_size: '0.5'}}\n")
    assert config.cluster is not None


def test_partitioned_blocksize_must_be_a_size():
    issue = only_issue(BASE.replace("path: data.csv", "path: data.csv\n    blocksize: lots"))
    assert issue.path == "stages.raw.blocksize"


# ------------------------------------------------------------------ through the command line
def validate(tmp_path: Path, text: str, *args: str) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "c.yaml"
    config.write_text(text, encoding="utf-8")
    return _pipeline("validate", config, *args, cwd=tmp_path, env={"COLUMNS": "200"})


def assert_config_error(proc: subprocess.CompletedProcess[str], *words: str) -> None:
    assert proc.returncode == ExitCode.CONFIG, proc.stderr
    message = proc.stderr.strip()
    assert message.startswith("error:") and "\n\n" not in message and "Traceback" not in message, message
    for word in words:
        assert word in message, message


@pytest.mark.parametrize(("text", "words"), [
    (BASE + "  f:\n    kind: features\n    inputs: [split]\n    ops:\n"
     "      - !!python/object/apply:os.system ['touch PWNED']\n", ("stages.f.ops[0] (line 15)", "tag")),
    (BASE + "deep: " + "[" * 3000 + "]" * 3000 + "\n", ("deep[0][0]", "line 11", "deeper than")),
    (BASE + BOMB, ("aliases",)),
    (BASE + "? [a, b]\n: 1\n", ("line 11",)),
    (BASE.replace("name: t", 'name: ".."'), ("name (line 1)", "folder")),
])
def test_cli_validate_reports_hostile_yaml_as_exit_2(tmp_path, text, words):
    assert_config_error(validate(tmp_path, text), *words)
    assert not (tmp_path / "PWNED").exists()


def test_cli_set_with_a_bad_tag_or_seed_is_exit_2(tmp_path):
    assert_config_error(validate(tmp_path, BASE, "--set", "seed=!!int forty-two"), "seed (--set)", "forty-two")
    assert_config_error(validate(tmp_path, BASE, "--set", "seed=-1"), "seed (--set)")
