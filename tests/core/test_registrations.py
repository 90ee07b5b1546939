"""Registering stage kinds, models, feature ops and run hooks: what a plugin gets wrong is
refused when it registers, naming the kind; a name that another module registered is replaced
with a warning that names both modules (the same module again, a notebook reload, is silent)."""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Literal

import pytest
from pydantic import BaseModel

import pipeline.report.report_section  # noqa: F401 - the built-in report hook, registered on import
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


def test_a_run_function_the_runner_cannot_call_is_refused_when_it_registers(restore):
    """`def run(spec, inputs)` registered, passed check_stage_kind, and failed at run time with
    "TypeError: run() takes 2 positional arguments but 3 were given" naming nothing."""
    def run(spec, inputs):
        return None

    with pytest.raises(TypeError, match=r"stage kind 'probe_kind': its run function .*run\(spec, inputs\) cannot be "
                                        r"called as run\(spec, ctx, inputs\)"):
        register_stage("probe_kind", GoodSpec)(run)
    assert "probe_kind" not in STAGE_KINDS
    register_stage("probe_kind", GoodSpec)(lambda spec, ctx, inputs, **extra: None)    # extra keywords: fine
    register_stage("probe_kind", GoodSpec)(lambda *args: None)
    assert "probe_kind" in STAGE_KINDS


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


STEPS = "rows.csv"


def _plugin_run(tmp_path, monkeypatch, kind: str, **registration):
    """A real run of load -> a plugin kind registered with ``registration``, on a small CSV."""
    from pipeline import run_pipeline
    from pipeline.config import load_config
    from pipeline.stages.spec import Table

    class ProbeSpec(StageSpec):
        kind: Literal["probe_kind"]
        min_inputs = 1
        max_inputs = 1

    register_stage("probe_kind", ProbeSpec, **{"produces": Table, **registration})(
        lambda spec, ctx, inputs: {"not": "a frame"} if kind == "dict" else next(iter(inputs.values())))
    (tmp_path / STEPS).write_text("a,b\n1,2\n3,4\n")
    monkeypatch.chdir(tmp_path)
    config = load_config(text=f"name: probe\ndevice: cpu\nstages:\n  rows: {{kind: load, path: {STEPS}}}\n"
                              "  mid: {kind: probe_kind, inputs: [rows]}\n")
    return run_pipeline(config, runs_dir=tmp_path / "runs")


def test_a_plugin_kind_that_returns_another_type_than_it_produces_fails_its_own_stage(restore, tmp_path, monkeypatch):
    """It used to succeed, and the next stage failed: "stage 'split' failed: AttributeError:
    'dict' object has no attribute 'columns'"."""
    from pipeline.core.errors import StageError

    with pytest.raises(StageError, match=r"stage 'mid' failed: TypeError: stage kind 'probe_kind' is registered to "
                                         r"produce Table, but its run returned dict"):
        _plugin_run(tmp_path, monkeypatch, "dict")


@pytest.mark.parametrize("fingerprint", [lambda spec: "abc", lambda spec: {}["missing"]], ids=["text", "raises"])
def test_a_plugin_fingerprint_that_fails_or_gives_no_mapping_fails_the_stage_naming_it(
        restore, tmp_path, monkeypatch, fingerprint):
    """It was exit 1, "internal error: ValueError: dictionary update sequence element #0 ...",
    naming neither the stage nor its kind."""
    from pipeline.core.errors import StageError

    with pytest.raises(StageError, match=r"stage 'mid' failed: the fingerprint of its kind 'probe_kind' "
                                         r"(returned 'abc'; a fingerprint returns None|failed: KeyError)") as info:
        _plugin_run(tmp_path, monkeypatch, "frame", fingerprint=fingerprint)
    assert info.value.exit_code == 4


def test_a_config_whose_hook_section_a_plugin_replaced_runs_from_the_library(restore, tmp_path, monkeypatch):
    """The config model of a plugin that replaces a built-in hook's section is built on the
    configs' base, not on PipelineConfig: run_pipeline(config) took it for a path (UsageError)."""
    from pipeline.hooks.hook_registry import register_hook

    class Quiet(BaseModel):
        """A report section of the plugin's own."""

        enabled: bool = False

    register_hook("report", lambda section, context: None, config_key="report", section=Quiet)
    result = _plugin_run(tmp_path, monkeypatch, "frame")
    assert result.status == "succeeded"
