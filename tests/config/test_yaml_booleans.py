"""Config YAML resolves booleans by the YAML 1.2 core schema: only true / false (any case).

YAML 1.1 (PyYAML's default) also reads on / off / yes / no as booleans, so a join's ``on:`` key
arrived as the boolean True and the stage saw no ``on`` at all.
"""

from __future__ import annotations

import pytest

from pipeline.config import load_config
from pipeline.core.yaml_source import parse_value, parse_yaml

SPLIT = """\
name: t
stages:
  raw: {kind: load, path: data.csv}
  split:
    kind: split
    inputs: [raw]
    target: y
"""


@pytest.mark.parametrize("word", ["on", "off", "yes", "no", "On", "OFF", "Yes", "NO", "y", "n"])
def test_yaml_1_1_boolean_words_stay_text_as_keys_and_values(word):
    data = parse_yaml(f"{word}: {word}\nlist: [{word}]\n", source="t").data
    assert data == {word: word, "list": [word]}


@pytest.mark.parametrize("word, value", [("true", True), ("True", True), ("TRUE", True), ("tRuE", True),
                                         ("false", False), ("False", False), ("FALSE", False)])
def test_true_and_false_in_any_case_are_booleans(word, value):
    assert parse_yaml(f"a: {word}\n{word}: 1\n", source="t").data == {"a": value, value: 1}


def test_quoted_and_tagged_forms_keep_their_meaning():
    data = parse_yaml("a: 'true'\nb: !!bool true\nc: !!str on\n", source="t").data
    assert data == {"a": "true", "b": True, "c": "on"}


def test_a_set_value_reads_by_the_same_rules():
    assert parse_value("on", path=("x",)) == "on"
    assert parse_value("false", path=("x",)) is False


def test_a_join_block_keeps_its_on_key():
    data = parse_yaml("joined:\n  kind: join\n  on: household_id\n  how: left\n", source="t").data
    assert data["joined"]["on"] == "household_id" and True not in data["joined"]


@pytest.mark.parametrize("word, expected", [("no", False), ("off", False), ("yes", True), ("false", False)])
def test_a_bool_field_still_reads_yes_and_no(word, expected):
    config = load_config(text=SPLIT + f"    stratify: {word}\n")
    assert config.stages["split"].stratify is expected


def test_a_text_field_gets_the_word_that_was_written():
    config = load_config(text=SPLIT + "    positive: yes\n")
    assert config.stages["split"].positive == "yes"


@pytest.mark.parametrize("text, value", [("1e-3", 0.001), ("5E+2", 500.0), ("1.5e3", 1500.0), (".5e1", 5.0),
                                         ("-2e-2", -0.02), ("1.0e+3", 1000.0), ("12", 12), ("e5", "e5")])
def test_numbers_in_exponent_form_are_numbers_as_yaml_1_2_reads_them(text, value):
    """`learning_rate: 1e-3` was the string '1e-3' (YAML 1.1 wants a point and a signed
    exponent): validate passed, and the run failed at the model after the stages before it."""
    assert parse_yaml(f"a: {text}\n", source="t").data == {"a": value}
    assert parse_value(text, path=("x",)) == value


@pytest.mark.parametrize("label", ["1e3", "yes", "On", "tRuE", "2024-01-01"])
def test_a_resolved_config_reads_back_the_same_here_and_in_other_yaml_readers(label):
    """Text this loader or PyYAML's own reads as another type is written quoted: `1e3` would
    be a number here, `yes` a boolean to a scheduler's yaml.safe_load of the run's config.yaml."""
    import yaml

    from pipeline.config import dump_config

    config = load_config(text=SPLIT + f"    positive: '{label}'\n")
    text = dump_config(config)
    assert load_config(text=text).stages["split"].positive == label
    assert yaml.safe_load(text)["stages"]["split"]["positive"] == label
