"""Registering stage kinds, models, feature ops and run hooks: what a plugin gets wrong is
refused when it registers, naming the kind; a name that another module registered is replaced
with a warning that names both modules (the same module again, a notebook reload, is silent)."""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Literal

import pytest
from pydantic import BaseModel

from pipeline.features import OPS, FeatureOp, register_op
from pipeline.hooks.hook_registry import HOOKS, register_hook
from pipeline.models import MODELS, get_model_spec, register_model
from pipeline.stages import STAGE_KINDS, StageSpec, register_stage


class GoodSpec(StageSpec):
    kind: Literal["probe_kind"]


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]


@pytest.fixture
def restore():
    """The registries as they were: each test's registrations taken back out."""
    saved = [(registry, dict(registry)) for registry in (STAGE_KINDS, MODELS, OPS, HOOKS)]
    yield
    for registry, before in saved:
        registry.clear()
        registry.update(before)


class _NoLiteral(StageSpec):
    kind: str


class _OtherName(StageSpec):
    kind: Literal["other_name"]


class _NotAStageSpec(BaseModel):
    kind: Literal["probe_kind"]


@pytest.mark.parametrize(("spec", "words"), [
    (_NoLiteral, r"_NoLiteral\.kind must be declared kind: Literal\['probe_kind'\]"),
    (_OtherName, r"must be declared kind: Literal\['probe_kind'\] \(it is Literal\['other_name'\]\)"),
    (_NotAStageSpec, "must be a StageSpec subclass"),
], ids=["str", "other-name", "plain-model"])
def test_a_stage_kind_whose_spec_the_loader_cannot_use_is_refused_when_it_registers(restore, spec, words):
    """These registered, then failed every `validate` with exit 1 ("internal error: ...
    PydanticUserError", "AttributeError: validating_model"), or gave "unknown stage kind
    'mism' ...; did you mean 'mism'?"."""
    with pytest.raises(TypeError, match=words):
        register_stage("probe_kind", spec)
    assert "probe_kind" not in STAGE_KINDS


def test_a_built_in_name_taken_by_another_module_is_replaced_with_a_warning(restore, caplog):
    entry = dataclasses.replace(get_model_spec("logistic_regression"), name="xgboost")
    with caplog.at_level("WARNING"):
        register_model(entry)
    assert MODELS["xgboost"] is entry
    (warned,) = _warnings(caplog)
    assert ("model 'xgboost' registered by tests.core.test_registrations replaces the one registered by "
            "pipeline.models.catalogue;") in warned

    class Standardize(FeatureOp):
        op: ClassVar[str] = "standardize"

    import pipeline.report.report_section  # noqa: F401 - the built-in report hook, registered on import

    caplog.clear()
    with caplog.at_level("WARNING"):
        register_op(Standardize)
        register_hook("report", lambda section, context: None)
        register_stage("load", type("LoadAgain", (StageSpec,), {"__annotations__": {"kind": Literal["load"]}}))(
            lambda spec, ctx, inputs: None)
    warned = _warnings(caplog)
    assert [w.split(" registered by ")[0] for w in warned] == [
        "feature op 'standardize'", "run hook 'report'", "stage kind 'load'"], warned
    assert "replaces the one registered by pipeline.report.report_section" in warned[1]


def test_the_same_module_registering_again_is_silent(restore, caplog):
    with caplog.at_level("WARNING"):
        for _ in range(2):
            register_stage("probe_kind", GoodSpec)(lambda spec, ctx, inputs: None)
    assert _warnings(caplog) == [] and STAGE_KINDS["probe_kind"].spec is GoodSpec
