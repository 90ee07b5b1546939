"""A plugin op that breaks is named where it breaks: an exception from its fit or transform
names the op and its position in the ops list (``feature ops[2] (name): KeyError: 'nope'``),
and a transform that returns other rows than it was given is refused there, with both counts,
not found later by the model's fit as ``inconsistent numbers of samples``. A ``PipelineError``
an op raises (the built-in ops' own messages) passes through as it was raised."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

from pipeline.core.errors import DataError, ExitCode, PipelineError
from pipeline.features import FeatureOp, FeatureWorkflow, FillMissing, OpState, Standardize, register_op
from pipeline.features.fitting import FeatureOpError
from pipeline.testing import check_op

from tests.support.cli import run_cli
from tests.support.registries import registered


class LookupFails(FeatureOp):
    """Transform reads a key its author forgot to fill in."""

    op: ClassVar[str] = "lookup_fails"

    def transform(self, frame: Any, backend: Any, state: OpState) -> Any:
        return frame.assign(**{c: frame[c].map({}.__getitem__("nope")) for c in self.columns})


class FitFails(FeatureOp):
    """Its statistics divide by the count of a column it was never given."""

    op: ClassVar[str] = "fit_fails"

    def statistics(self, frame: Any, backend: Any) -> dict[str, Any]:
        return {"ratio": 1 / 0}

    def transform(self, frame: Any, backend: Any, state: OpState) -> Any:
        return frame


class RefusesData(FeatureOp):
    """Raises a DataError of its own, with its own message."""

    op: ClassVar[str] = "refuses_data"

    def transform(self, frame: Any, backend: Any, state: OpState) -> Any:
        raise DataError("refuses_data: column 'x' is not what it looks for")


class DoublesRows(FeatureOp):
    """Returns every row twice (a concat that should have been along the columns)."""

    op: ClassVar[str] = "doubles_rows"

    def transform(self, frame: Any, backend: Any, state: OpState) -> Any:
        return backend.frame.concat([frame, frame])


class DropsRows(FeatureOp):
    """Drops the rows with a gap, as a row filter would: the labels no longer line up."""

    op: ClassVar[str] = "drops_rows"

    def transform(self, frame: Any, backend: Any, state: OpState) -> Any:
        return frame.dropna(subset=list(self.columns))


class ReturnsNothing(FeatureOp):
    """Changes the frame in place and returns None."""

    op: ClassVar[str] = "returns_nothing"

    def transform(self, frame: Any, backend: Any, state: OpState) -> Any:
        return None


@pytest.fixture
def frame() -> pd.DataFrame:
    return pd.DataFrame({"x": [1.0, np.nan, 3.0, 4.0, 5.0, 6.0], "y": [2.0, 1.0, 0.0, 1.0, 2.0, 3.0]})


def _workflow(last: FeatureOp) -> FeatureWorkflow:
    return FeatureWorkflow([FillMissing(columns=["x"]), Standardize(columns=["y"]), last])


# ------------------------------------------------------------------ an exception names the op and its place
def test_an_exception_in_transform_names_the_op_and_its_position(frame):
    with pytest.raises(FeatureOpError) as caught:
        _workflow(LookupFails(columns=["x"])).fit_transform(frame)
    assert str(caught.value) == "feature ops[2] (lookup_fails): KeyError: 'nope'"
    assert isinstance(caught.value.__cause__, KeyError)
    assert not isinstance(caught.value, PipelineError)      # a bug in the op: exit 4 in a stage, as before


def test_an_exception_in_fit_names_the_op_and_its_position(frame):
    with pytest.raises(FeatureOpError, match=r"^feature ops\[1\] \(fit_fails\): ZeroDivisionError: division by zero$"):
        FeatureWorkflow([FillMissing(columns=["x"]), FitFails(columns=["y"])]).fit_transform(frame)


class FailsLater(FeatureOp):
    """Fits, then fails on a batch of fewer than three rows (as scoring sends)."""

    op: ClassVar[str] = "fails_later"

    def transform(self, frame: Any, backend: Any, state: OpState) -> Any:
        if len(frame) < 3:
            raise ValueError("too few rows to look up")
        return frame


def test_an_exception_at_scoring_names_the_op_too(frame):
    workflow = _workflow(FailsLater(columns=["x"]))
    workflow.fit_transform(frame)
    with pytest.raises(FeatureOpError, match=r"^feature ops\[2\] \(fails_later\): ValueError: too few rows"):
        workflow.transform(frame.head(2))


def test_a_loaded_workflow_names_the_configured_position_past_a_skipped_selector_op(frame, tmp_path):
    ops = [FillMissing(columns=["x"]), {"standardize": {"columns": {"type": "date"}}}, FailsLater(columns=["x"])]
    with registered(FailsLater):
        workflow = FeatureWorkflow(ops)
        workflow.fit_transform(frame)
        assert [op.op for op in workflow.ops] == ["fill_missing", "fails_later"]
        workflow.save(tmp_path / "workflow.json")
        loaded = FeatureWorkflow.load(tmp_path / "workflow.json")
        for fitted in (workflow, loaded):
            with pytest.raises(FeatureOpError, match=r"^feature ops\[2\] \(fails_later\)"):
                fitted.transform(frame.head(2))


def test_a_pipeline_error_an_op_raises_passes_through_unchanged(frame):
    with pytest.raises(DataError) as caught:
        _workflow(RefusesData(columns=["x"])).fit_transform(frame)
    assert str(caught.value) == "refuses_data: column 'x' is not what it looks for"
    with pytest.raises(DataError, match=r"^feature op 'standardize': column\(s\) \['z'\] not in the data"):
        _workflow(Standardize(columns=["z"])).fit_transform(frame)


def test_the_position_is_the_configured_one_when_a_selector_op_before_it_is_skipped(frame):
    ops = [{"standardize": {"columns": {"type": "date"}}}, FillMissing(columns=["x"]), LookupFails(columns=["x"])]
    with pytest.raises(FeatureOpError, match=r"^feature ops\[2\] \(lookup_fails\)"):
        FeatureWorkflow(ops).fit_transform(frame)


def test_the_position_is_the_configured_one_when_a_selector_op_comes_after_it(frame):
    ops = [FillMissing(columns=["x"]), {"standardize": {"columns": {"type": "numeric"}}}, LookupFails(columns=["x"]),
           {"standardize": {"columns": {"remaining": True}}}]
    with pytest.raises(FeatureOpError, match=r"^feature ops\[2\] \(lookup_fails\)"):
        FeatureWorkflow(ops).fit_transform(frame)
    ops = [FillMissing(columns=["x"]), DoublesRows(columns={"type": "numeric"}),     # a selector op's copy fails
           {"drop": {"columns": {"remaining": True}}}]
    with pytest.raises(FeatureOpError, match=r"^feature ops\[1\] \(doubles_rows\): transform returned 12 rows"):
        FeatureWorkflow(ops).fit_transform(frame)


def test_the_error_pickles_with_its_message(frame):
    import pickle

    error = FeatureOpError(2, "lookup_fails", "KeyError: 'nope'")
    assert str(pickle.loads(pickle.dumps(error))) == "feature ops[2] (lookup_fails): KeyError: 'nope'"


# ------------------------------------------------------------------ the rows an op returns
@pytest.mark.parametrize(("op", "rows"), [(DoublesRows, 12), (DropsRows, 5)])
def test_an_op_that_changes_the_rows_is_refused_with_both_counts(frame, op, rows):
    ops = [Standardize(columns=["y"]), op(columns=["x"]), FillMissing(columns=["x"])]
    with pytest.raises(FeatureOpError, match=rf"^feature ops\[1\] \({op.op}\): transform returned {rows} rows for 6"):
        FeatureWorkflow(ops).fit_transform(frame)


def test_a_transform_that_returns_no_frame_is_named(frame):
    with pytest.raises(FeatureOpError, match=r"^feature ops\[2\] \(returns_nothing\): transform returned None, "
                                             r"not a frame"):
        _workflow(ReturnsNothing(columns=["x"])).fit_transform(frame)


def test_rows_are_checked_at_scoring_and_on_each_partition(frame):
    workflow = FeatureWorkflow([FillMissing(columns=["x"]), DropsRows(columns=["y"])])
    workflow.fit_transform(frame)                                  # no gap in y here: the rows stay
    scored = frame.assign(y=[1.0, np.nan, 2.0, 3.0, 4.0, 5.0])
    with pytest.raises(FeatureOpError, match=r"^feature ops\[1\] \(drops_rows\): transform returned 5 rows for 6"):
        workflow.transform(scored)
    with pytest.raises(FeatureOpError, match=r"^feature ops\[1\] \(drops_rows\): transform returned 2 rows for 3"):
        workflow.transform(dd.from_pandas(scored, npartitions=2)).compute()


def test_the_checks_leave_a_good_plugin_op_alone(frame):
    with registered():                   # importing the plugin registers its op: taken back out after
        from tests.plugin_example.clip_plugin import ClipOutliers

        register_op(ClipOutliers)
        check_op("clip_outliers")
        out = FeatureWorkflow([FillMissing(columns=["x"]), ClipOutliers(columns=["x", "y"])]).fit_transform(frame)
    assert len(out) == len(frame)


# ------------------------------------------------------------------ through the CLI: a failed features stage
PLUGIN = '''\
from typing import Any, ClassVar
from pipeline.features import FeatureOp, OpState, register_op


@register_op
class LookupFails(FeatureOp):
    op: ClassVar[str] = "lookup_fails"

    def transform(self, frame: Any, backend: Any, state: OpState) -> Any:
        return frame.assign(**{c: frame[c].map({}.__getitem__("nope")) for c in self.columns})


@register_op
class DoublesRows(FeatureOp):
    op: ClassVar[str] = "doubles_rows"

    def transform(self, frame: Any, backend: Any, state: OpState) -> Any:
        return backend.frame.concat([frame, frame])
'''

CONFIG = """\
name: faulty
device: cpu
plugins: [faulty_ops]
stages:
  raw: {{kind: load, path: data.csv}}
  split: {{kind: split, inputs: [raw], target: label, test: 0.25}}
  features:
    kind: features
    inputs: [split]
    ops:
      - standardize: {{columns: [a]}}
      - {op}: {{columns: [b]}}
"""


@pytest.mark.parametrize(("op", "detail"), [("lookup_fails", "KeyError: 'nope'"),
                                            ("doubles_rows", "transform returned 150 rows for 75")])
def test_a_failing_plugin_op_fails_the_features_stage_naming_it(tmp_path: Path, op: str, detail: str):
    rng = np.random.default_rng(0)
    pd.DataFrame({"a": rng.normal(size=100), "b": rng.normal(size=100),
                  "label": rng.integers(0, 2, size=100)}).to_csv(tmp_path / "data.csv", index=False)
    (tmp_path / "faulty_ops.py").write_text(PLUGIN)
    (tmp_path / "config.yaml").write_text(CONFIG.format(op=op))
    with registered():                   # the run imports the plugin in this process: its ops go again after
        done = run_cli("run", "config.yaml", cwd=tmp_path, unset=["PIPELINE_PLUGINS"])
    assert done.returncode == ExitCode.STAGE, done.stderr
    assert f"stage 'features' failed: FeatureOpError: feature ops[1] ({op}): {detail}" in done.stderr
