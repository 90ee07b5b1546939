"""Stage inputs given by role (``inputs: {left: a, right: b}``) for kinds that declare roles."""

from __future__ import annotations

from typing import ClassVar, Literal

import pytest

from pipeline.config import load_config
from pipeline.core.errors import ConfigError
from pipeline.stages.spec import STAGE_KINDS, StageSpec, Table, register_stage


class PairSpec(StageSpec):
    kind: Literal["pair_for_test"]
    input_roles: ClassVar[tuple[str, ...]] = ("left", "right")
    min_inputs = 2
    max_inputs = 2


@pytest.fixture
def pair_kind():
    register_stage("pair_for_test", PairSpec, produces=Table, accepts=(Table,))(lambda spec, ctx, inputs: None)
    yield
    STAGE_KINDS.pop("pair_for_test")


CONFIG = """\
name: t
stages:
  a: {kind: load, path: a.csv}
  b: {kind: load, path: b.csv}
  both:
    kind: pair_for_test
    inputs: {INPUTS}
"""


def test_inputs_by_role_become_a_list_in_role_order(pair_kind):
    config = load_config(text=CONFIG.replace("{INPUTS}", "{right: a, left: b}"))
    assert config.stages["both"].inputs == ["b", "a"]
    assert config.inputs_of()["both"] == ["b", "a"]


def test_an_unknown_stage_named_by_role_is_reported_with_its_line(pair_kind):
    with pytest.raises(ConfigError) as info:
        load_config(text=CONFIG.replace("{INPUTS}", "{left: a, right: nowhere}"))
    (issue,) = [i for i in info.value.issues if "nowhere" in i.message]
    assert issue.path == "stages.both.inputs" and issue.line == 7


@pytest.mark.parametrize("inputs, expected", [
    ("{left: a}", "missing ['right']"),
    ("{left: a, right: b, middle: b}", "unknown role(s) ['middle']"),
])
def test_roles_must_be_named_exactly(pair_kind, inputs, expected):
    with pytest.raises(ConfigError) as info:
        load_config(text=CONFIG.replace("{INPUTS}", inputs))
    assert any(expected in i.message and i.path.startswith("stages.both.inputs") for i in info.value.issues)


def test_a_kind_without_roles_refuses_a_mapping():
    text = "name: t\nstages:\n  a: {kind: load, path: a.csv}\n  s:\n    kind: split\n    inputs: {data: a}\n    target: y\n"
    with pytest.raises(ConfigError) as info:
        load_config(text=text)
    assert any("not a mapping" in i.message for i in info.value.issues)
