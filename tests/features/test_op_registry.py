"""The open op registry: every op keeps the op contract (``pipeline.testing.ops.check_op``), a
broken twin of one fails it, and an op from a module outside the package
(tests/plugin_example/clip_plugin.py) is validated, documented, run and scored like a built-in
one, with no edit to the package. Also the stage kinds' declarations on ``StageSpec``."""

from __future__ import annotations

import ast
import importlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import pytest
from pydantic import ConfigDict, Field

from tests.support.cli import run_cli as _pipeline
from tests.support.registries import registered
from pipeline.config import json_schema, load_config
from pipeline.core.errors import ConfigError, ExitCode
from pipeline.features import OPS, FeatureOp, FeatureWorkflow, OpState, Standardize, register_op
from pipeline.features.ops import StandardizeState
from pipeline.runs.record import read_manifest
from pipeline.stages import StageSpec
from pipeline.stages.load import LoadSpec
from pipeline.stages.split import SplitSpec
from pipeline.testing import check_op
from pipeline.testing.ops import default_sample_frame

from tests.conftest import ROOT, TELCO

PLUGIN = Path(__file__).resolve().parents[1] / "plugin_example" / "clip_plugin.py"
BUILT_IN = list(OPS)


@pytest.fixture
def clip_op() -> Iterator[type[FeatureOp]]:
    """The plugin's op, registered for one test (importing the module registers it)."""
    with registered():
        module = importlib.import_module("tests.plugin_example.clip_plugin")
        register_op(module.ClipOutliers)              # imported by an earlier test: registered again here
        yield module.ClipOutliers


# ------------------------------------------------------------------ every op keeps the contract
@pytest.mark.parametrize("name", BUILT_IN)
def test_every_built_in_op_passes_check_op(name: str):
    check_op(name)


def test_check_op_takes_a_class_an_instance_and_a_frame_of_ones_own():
    check_op(Standardize)
    frame = pd.DataFrame({"a": [1.0, 5.0, 2.0, 8.0], "b": [0, 1, 0, 1]})
    check_op(Standardize(columns=["a", "b"]), frame)
    check_op("one_hot", frame, params={"columns": ["b"], "drop_binary": True})


def test_the_plugin_op_passes_check_op(clip_op):
    check_op(clip_op)
    check_op(clip_op, params={"columns": ["num"], "quantile": 0.25, "upper": False})


# ------------------------------------------------------------------ broken twins fail it, by name
class ForgetfulState(OpState):
    mean_std: dict[str, tuple[float, float]]
    scale: float = Field(1.0, exclude=True)         # used by transform, never written to workflow.json


class ForgetfulStandardize(Standardize):
    """A twin whose fitted state does not round-trip: part of it is left out of workflow.json."""

    op: ClassVar[str] = "forgetful_standardize"
    state_model: ClassVar[type[OpState]] = ForgetfulState

    def fit_from(self, stats: dict[str, Any], backend: Any) -> ForgetfulState:
        fitted = super().fit_from(stats, backend)
        return ForgetfulState(mean_std=fitted.mean_std, scale=2.0)

    def transform(self, frame: Any, backend: Any, state: Any) -> Any:
        out = super().transform(frame, backend, StandardizeState(mean_std=state.mean_std))
        return out.assign(**{c: out[c] * state.scale for c in self.columns})


class BatchStandardize(Standardize):
    """A twin that standardizes each batch by its own statistics: not row-wise."""

    op: ClassVar[str] = "batch_standardize"

    def transform(self, frame: Any, backend: Any, state: Any) -> Any:
        return frame.assign(**{c: (frame[c] - frame[c].mean()) / (frame[c].std(ddof=0) or 1.0)
                               for c in self.columns})


class LooseStandardize(Standardize):
    """A twin that ignores unknown keys: a typo in a config would pass unnoticed."""

    model_config = ConfigDict(extra="ignore", frozen=True)
    op: ClassVar[str] = "loose_standardize"


class MisdeclaredStandardize(Standardize):
    """A twin that declares a frame method no frame library has."""

    op: ClassVar[str] = "misdeclared_standardize"
    frame_api: ClassVar[tuple[str, ...]] = ("Series.mean", "Series.standardise")


class UnnamedColumns(Standardize):
    """A twin whose transform adds a column its output_columns does not name."""

    op: ClassVar[str] = "unnamed_columns"

    def transform(self, frame: Any, backend: Any, state: Any) -> Any:
        return super().transform(frame, backend, state).assign(extra=1.0)


@pytest.mark.parametrize(("twin", "check", "detail"), [
    (ForgetfulStandardize, "workflow.json", "the fitted state loads as"),
    (BatchStandardize, "row-wise", "transformed alone differ"),
    (LooseStandardize, "class", "must refuse unknown keys"),
    (MisdeclaredStandardize, "frame api", "'Series.standardise' .* is not in pandas"),
    (UnnamedColumns, "transform", "output_columns says"),
])
def test_a_broken_twin_fails_check_op_naming_the_check(twin, check, detail):
    with registered(twin):
        with pytest.raises(AssertionError, match=rf"feature op '{twin.op}' fails the conformance check '{check}': .*{detail}"):
            check_op(twin)


class BrokenTwice(UnnamedColumns):
    """A twin with two faults that do not depend on each other: an extra column, and a frame
    method no library has."""

    op: ClassVar[str] = "broken_twice"
    frame_api: ClassVar[tuple[str, ...]] = ("Series.standardise",)


def test_check_op_runs_every_check_and_names_each_failure():
    """One failure does not hide the next: both faults are reported, and the checks that need
    the broken transform say they did not run, naming it."""
    from pipeline.testing import ConformanceFailure, op_checks

    with registered(BrokenTwice):
        with pytest.raises(ConformanceFailure) as failed:
            check_op(BrokenTwice)
        outcomes = {}
        for check in op_checks(BrokenTwice):
            try:
                check()
                outcomes[check.id] = "passed"
            except ConformanceFailure as exc:
                outcomes[check.id] = "not run" if "not run: it needs the check 'transform'" in exc.detail else "failed"
    assert [f.check for f in failed.value.failures] == ["transform", "row-wise", "workflow.json", "pickle", "frame api"]
    assert "5 conformance checks failed" in str(failed.value) and "Series.standardise" in str(failed.value)
    assert outcomes == {"class": "passed", "registered": "passed", "invalid params": "passed", "yaml": "passed",
                        "fit": "passed", "transform": "failed", "row-wise": "not run", "workflow.json": "not run",
                        "pickle": "not run", "frame api": "failed"}


def test_parametrize_with_checks_makes_one_test_per_check_with_its_id():
    from pipeline.testing import op_checks, parametrize_with_checks

    mark = parametrize_with_checks(op_checks("standardize"), op_checks("log1p")).mark
    assert mark.args[0] == "check" and len(mark.args[1]) == 20
    assert mark.kwargs["ids"][:3] == ["feature op standardize-class", "feature op standardize-registered",
                                      "feature op standardize-invalid params"]
    assert mark.kwargs["ids"][-1] == "feature op log1p-frame api"


def test_an_op_that_is_not_registered_fails_check_op():
    with pytest.raises(AssertionError, match=r"feature op 'forgetful_standardize' fails the conformance check 'registered': .*@register_op"):
        check_op(ForgetfulStandardize)
    with pytest.raises(AssertionError, match=r"'registered': no op 'no_such_op'"):
        check_op("no_such_op")


def test_register_op_refuses_what_is_not_an_op():
    with pytest.raises(TypeError, match="FeatureOp subclass"):
        register_op(LoadSpec)                                          # type: ignore[type-var]

    class BadName(Standardize):
        op: ClassVar[str] = "Bad Name"

    with registered(), pytest.raises(ValueError, match="not an op name"):
        register_op(BadName)
    assert "Bad Name" not in OPS


# ------------------------------------------------------------------ a plugin op, in process
PLUGIN_CONFIG = """\
name: clipped
device: cpu
plugins: [clip_plugin]
stages:
  raw: {kind: load, path: telco.csv, na_values: [" "]}
  split: {kind: split, inputs: [raw], target: Churn, positive: "Yes", test: 0.2, valid: 0.1}
  features:
    kind: features
    inputs: [split]
    id: customerID
    ops:
      - fill_missing: {columns: [TotalCharges], strategy: median}
      - clip_outliers: {columns: [tenure, MonthlyCharges, TotalCharges], quantile: 0.05}
      - one_hot: {columns: [Contract, PaymentMethod, InternetService, gender, Partner], drop_binary: true}
      - categorify:
          columns: [Dependents, PhoneService, MultipleLines, OnlineSecurity, OnlineBackup, DeviceProtection,
                    TechSupport, StreamingTV, StreamingMovies, PaperlessBilling]
      - standardize: {columns: [tenure, MonthlyCharges, TotalCharges]}
  logreg: {kind: train, inputs: [features], model: logistic_regression}
  evaluate: {kind: evaluate, inputs: [logreg]}
  export: {kind: export, inputs: [logreg]}
"""


def test_a_plugin_op_is_validated_with_key_paths_and_lines(clip_op):
    config = load_config(text=PLUGIN_CONFIG.replace("plugins: [clip_plugin]\n", ""))
    ops = config.stages["features"].build_ops()
    assert isinstance(ops[1], clip_op) and ops[1].quantile == 0.05
    bad = PLUGIN_CONFIG.replace("plugins: [clip_plugin]\n", "").replace("quantile: 0.05", "quantile: 0.7, uper: true")
    with pytest.raises(ConfigError) as caught:
        load_config(text=bad)
    found = {(issue.path, issue.line) for issue in caught.value.issues}
    assert found == {("stages.features.ops[1].clip_outliers.quantile", 12),
                     ("stages.features.ops[1].clip_outliers.uper", 12)}
    assert "did you mean 'upper'?" in str(caught.value)
    typo = PLUGIN_CONFIG.replace("plugins: [clip_plugin]\n", "").replace("clip_outliers:", "clip_outlier:")
    with pytest.raises(ConfigError, match="unknown feature op 'clip_outlier'.*did you mean 'clip_outliers'"):
        load_config(text=typo)


def test_without_the_plugin_the_op_is_unknown_and_the_built_in_model_is_back(clip_op):
    load_config(text=PLUGIN_CONFIG.replace("plugins: [clip_plugin]\n", ""))
    with registered():
        del OPS["clip_outliers"]
        with pytest.raises(ConfigError, match="unknown feature op 'clip_outliers'"):
            load_config(text=PLUGIN_CONFIG.replace("plugins: [clip_plugin]\n", ""))
        from pipeline.config.schema import PipelineConfig, config_model
        from pipeline.stages.features import FeaturesSpec

        assert config_model() is PipelineConfig and FeaturesSpec.validating_model() is FeaturesSpec


def test_a_plugin_op_is_in_the_schema_and_the_generated_reference(clip_op):
    schema = json.dumps(json_schema())
    assert '"clip_outliers"' in schema and "Lower quantile; the upper is 1 - quantile." in schema
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import docs_reference
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    page, missing = docs_reference.config_page()
    section = page.split("### `clip_outliers`", 1)[1].split("\n### ", 1)[0]
    assert "Limit numeric columns to the training split's quantiles" in section
    assert "| `quantile` | float | 0.01 |" in section and "| `upper` | bool | true |" in section
    assert missing == []


def test_a_plugin_op_round_trips_through_workflow_json(clip_op, tmp_path):
    train = default_sample_frame()[["num", "count"]].fillna(0.0)
    wf = FeatureWorkflow([clip_op(columns=["num", "count"], quantile=0.2), {"standardize": {"columns": ["num"]}}])
    fitted = wf.fit_transform(train)
    wf.save(tmp_path / "workflow.json")
    saved = json.loads((tmp_path / "workflow.json").read_text())
    assert saved["ops"][0]["op"] == "clip_outliers" and set(saved["ops"][0]["state"]["bounds"]) == {"num", "count"}
    again = FeatureWorkflow.load(tmp_path / "workflow.json")
    pd.testing.assert_frame_equal(again.transform(train), fitted)


# ------------------------------------------------------------------ a plugin op, through the CLI
def cli(folder: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return _pipeline(*args, cwd=folder, env=env, unset=["PIPELINE_PLUGINS"])


@pytest.fixture(scope="module")
def plugin_project(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("op-plugin-project")
    shutil.copy(PLUGIN, folder / PLUGIN.name)
    shutil.copy(TELCO, folder / "telco.csv")
    telco = pd.read_csv(TELCO, dtype=str, keep_default_na=False)
    telco.drop(columns=["Churn"]).to_csv(folder / "new_customers.csv", index=False)
    (folder / "config.yaml").write_text(PLUGIN_CONFIG)
    return folder


@pytest.mark.slow
def test_a_plugin_op_runs_exports_and_scores_with_pipeline_predict(plugin_project: Path):
    done = cli(plugin_project, "run", "config.yaml")
    assert done.returncode == 0, done.stderr
    run_dir = plugin_project / "runs" / "clipped" / "latest"
    manifest = read_manifest(run_dir)
    assert manifest.status == "succeeded" and manifest.models["logreg"] == "export/models/logreg"
    workflow = json.loads((run_dir / "export/models/logreg/workflow.json").read_text())
    clip = workflow["ops"][1]
    assert clip["op"] == "clip_outliers" and clip["params"] == {
        "columns": ["tenure", "MonthlyCharges", "TotalCharges"], "quantile": 0.05, "upper": True}
    low, high = clip["state"]["bounds"]["tenure"]
    assert 0 <= low < high <= 72

    done = cli(plugin_project, "predict", "--run", "latest", "--input", "new_customers.csv", "--output",
               "scores.csv", "--na-values", " ")
    assert done.returncode == 0, done.stderr
    scores = pd.read_csv(plugin_project / "scores.csv").set_index("customerID")
    exported = pd.read_parquet(run_dir / "export" / "predictions.parquet").set_index("customerID")
    assert len(scores) == 7043
    np.testing.assert_allclose(scores.loc[exported.index, "score"], exported["score_logreg"], atol=1e-6)


@pytest.mark.slow
def test_a_plugin_op_is_checked_by_validate_and_listed_by_schema_and_the_reference(plugin_project: Path):
    (plugin_project / "bad.yaml").write_text(PLUGIN_CONFIG.replace("quantile: 0.05", "quantile: 0.5"))
    done = cli(plugin_project, "validate", "bad.yaml")
    assert done.returncode == ExitCode.CONFIG
    assert "stages.features.ops[1].clip_outliers.quantile (line 13)" in done.stderr
    path = os.pathsep.join(p for p in (str(plugin_project), os.environ.get("PYTHONPATH", "")) if p)
    schema = cli(plugin_project, "schema", "--plugin", "clip_plugin", env={"PYTHONPATH": path})
    assert schema.returncode == 0, schema.stderr
    assert '"clip_outliers"' in schema.stdout
    assert '"clip_outliers"' not in cli(plugin_project, "schema").stdout
    reference = subprocess.run([sys.executable, str(ROOT / "scripts" / "docs_reference.py"), "--plugin", "clip_plugin",
                                "--out", "reference"], cwd=plugin_project, capture_output=True, text=True, timeout=300)
    assert reference.returncode == 0, reference.stderr
    assert "### `clip_outliers`" in (plugin_project / "reference" / "config.md").read_text()


# ------------------------------------------------------------------ stage kinds declare, nobody sniffs
def test_stage_spec_declarations_default_to_nothing():
    class Plain(StageSpec):
        kind: str = "plain"
        sample: int | None = None                   # a field of that name is no declaration
        path: str = "x.csv"

    spec = Plain()
    assert spec.declared_task() is None and spec.task_problems("binary") == []
    assert spec.sample_overrides(100) == {}
    assert spec.reading("new.csv", "csv").path == "new.csv"
    assert Plain.validating_model() is Plain


def test_the_built_in_kinds_declare_what_they_take_part_in():
    load = LoadSpec(kind="load", path="a.csv")
    assert load.sample_overrides(500) == {"sample": 500}
    assert LoadSpec(kind="load", path="a/", partitioned=True).sample_overrides(500) == {}
    moved = load.reading("new.parquet", "parquet")
    assert (moved.path, moved.format, load.path) == ("new.parquet", "parquet", "a.csv")
    assert SplitSpec(kind="split", target="y", positive="Yes").declared_task() == "binary"
    assert SplitSpec(kind="split", target="y").declared_task() is None


def test_commands_and_config_code_do_not_sniff_stage_specs():
    """No getattr/hasattr on a spec and no field-name test on its model in the config loader,
    the commands and predict: kinds declare what they take part in on StageSpec."""
    offenders = []
    for package in ("config", "cli", "predict"):
        for path in (ROOT / "pipeline" / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if (isinstance(node, ast.Call) and getattr(node.func, "id", "") in ("getattr", "hasattr")
                        and node.args and getattr(node.args[0], "id", "") == "spec"):
                    offenders.append(f"{path.name}:{node.lineno}")
                if (isinstance(node, ast.Compare) and isinstance(node.comparators[0], ast.Attribute)
                        and node.comparators[0].attr == "model_fields"
                        and "spec" in ast.unparse(node.comparators[0].value)):
                    offenders.append(f"{path.name}:{node.lineno}")
    assert offenders == []


# ----------------------------------------------------------------------- text where numbers go
# The sample frame's numeric columns: an op whose example names only these reads numbers.
NUMERIC_SAMPLE_COLUMNS = {"num", "count"}


def example_on_text(op: type[FeatureOp]) -> dict[str, Any]:
    """The op's example params with each column it names (``columns``, and a parameter naming
    one, as date_diff's ``until``) replaced by the text column ``words``."""
    sample = set(default_sample_frame().columns)
    params = json.loads(json.dumps(op.example))
    params["columns"] = ["words" for _ in params["columns"]]
    return {key: "words" if isinstance(value, str) and value in sample else value for key, value in params.items()}


@pytest.mark.parametrize("name", BUILT_IN)
def test_every_op_refuses_text_where_it_needs_numbers_with_a_data_error(name: str):
    """Every op given a text column either takes it or refuses it with a DataError naming the
    column (exit 3), never a raw TypeError from a comparison (exit 4); an op that reads numbers
    (its example names numeric columns only) says so as every such op does."""
    from pipeline.core.errors import DataError

    op = OPS[name]
    frame = pd.DataFrame({"words": ["x", "y", "z"] * 4, "n": np.arange(12.0)})
    uses_target = getattr(op, "uses_target", False)
    target = np.array([i % 2 for i in range(len(frame))]) if uses_target else None
    try:
        FeatureWorkflow([{name: example_on_text(op)}]).fit(frame, target)
    except DataError as exc:
        assert "'words'" in str(exc), str(exc)
        if set(op.example["columns"]) <= NUMERIC_SAMPLE_COLUMNS and name != "fill_missing":
            assert f"{name}: column 'words' is " in str(exc) and str(exc).endswith(", not numeric"), str(exc)
    else:
        assert not set(op.example["columns"]) <= NUMERIC_SAMPLE_COLUMNS or name == "fill_missing", (
            f"{name} reads numbers but took a text column")


@pytest.mark.parametrize("op", [{"standardize": {"columns": ["n"]}},
                                {"fill_missing": {"columns": ["n"], "strategy": "median"}}])
def test_numbers_with_a_stray_word_name_how_many_values_are_not_numbers_and_the_first(op):
    """A '12a' among numbers (or a header line repeated where two files were joined) reads the
    column as text; the error names that value, not only the dtype."""
    from pipeline.core.errors import DataError

    frame = pd.DataFrame({"n": [str(i) for i in range(50)] + ["12a", None, "n"]})
    workflow = FeatureWorkflow([op], backend="cpu")
    with pytest.raises(DataError, match=r"column.*'n' is \w+.*2 of its 52 values are not numbers \(the first: '12a'\)"):
        workflow.fit(frame)
    words = pd.DataFrame({"n": ["a", "b", None]})
    with pytest.raises(DataError) as info:
        FeatureWorkflow([op], backend="cpu").fit(words)
    assert "are not numbers" not in str(info.value)       # a column of words: the dtype says it all
    # Every value a number, held as text (a Parquet file's text column): the dtype to set.
    with pytest.raises(DataError, match=r"every value is a number held as text.*dtype to float64"):
        FeatureWorkflow([op], backend="cpu").fit(pd.DataFrame({"n": ["1.5", "2", None]}))
