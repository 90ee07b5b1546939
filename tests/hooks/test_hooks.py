"""Run hooks get structured events (run folder, spec, metrics as numbers, per-epoch metrics),
and a hook that raises never fails the run."""

from __future__ import annotations

from pipeline import run_pipeline
from pipeline.hooks.protocol import ArtifactEvent, MetricEvent, RunEvent, RunHook, RunInfo, StageEvent

FAST = ["device=cpu", "stages.forest.params.n_estimators=20", "stages.xgb.params.n_estimators=20",
        "stages.mlp.epochs=2"]


class Recorder(RunHook):
    def __init__(self) -> None:
        self.events: list[tuple[str, object]] = []

    def run_started(self, run: RunInfo) -> None:
        self.events.append(("run_started", run))

    def stage_started(self, event: StageEvent) -> None:
        self.events.append(("stage_started", event))

    def stage_finished(self, event: StageEvent) -> None:
        self.events.append(("stage_finished", event))

    def metric(self, event: MetricEvent) -> None:
        self.events.append(("metric", event))

    def artifact(self, event: ArtifactEvent) -> None:
        self.events.append(("artifact", event))

    def run_finished(self, event: RunEvent) -> None:
        self.events.append(("run_finished", event))

    def of(self, name: str) -> list:
        return [event for kind, event in self.events if kind == name]


class Broken(RunHook):
    def stage_finished(self, event: StageEvent) -> None:
        raise RuntimeError("a report that cannot be drawn")


def test_hooks_get_structured_events(in_project):
    recorder = Recorder()
    result = run_pipeline("configs/churn.yaml", overrides=FAST, hooks=[Broken(), recorder], cache=False)
    (started,) = recorder.of("run_started")
    assert started.run_dir == result.run_dir and started.stages == 9 and started.device == "cpu"
    finished = {e.record.name: e for e in recorder.of("stage_finished")}
    assert set(finished) == set(result.manifest.stages)
    assert finished["xgb"].spec.params["n_estimators"] == 20 and finished["xgb"].record.status == "succeeded"
    assert finished["xgb"].artifacts_dir == result.run_dir / "xgb"
    epochs = [e for e in recorder.of("metric") if e.stage == "mlp" and e.step is not None]
    assert [e.step for e in epochs] == [1, 2] and all(isinstance(e.values["loss"], float) for e in epochs)
    final = {e.model: e.values for e in recorder.of("metric") if e.model is not None}
    assert final["xgb"]["roc_auc"] == result.manifest.metrics["models"]["xgb"]["roc_auc"]
    artifacts = {e.path: e.sha256 for e in recorder.of("artifact")}
    assert artifacts == result.manifest.artifacts and "export/predictions.parquet" in artifacts
    (done,) = recorder.of("run_finished")
    assert done.status == "succeeded" and done.manifest is result.manifest
    assert recorder.events[0][0] == "run_started" and recorder.events[-1][0] == "run_finished"


def test_a_failed_run_reports_the_error_to_hooks(in_project):
    import pytest

    from pipeline.core.errors import DataError

    class Errors(Recorder):
        def error(self, event):
            self.events.append(("error", event))

    recorder = Errors()
    with pytest.raises(DataError):
        run_pipeline("configs/churn.yaml", overrides=[*FAST, "stages.raw.path=data/nope.csv"], hooks=[recorder])
    (error,) = recorder.of("error")
    assert error.stage == "raw" and "nope.csv" in str(error.error)
    (done,) = recorder.of("run_finished")
    assert done.status == "failed" and done.manifest.stages["raw"].status == "failed"
