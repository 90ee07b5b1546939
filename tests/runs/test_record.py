"""The run record: ``manifest.json`` written and read back through ``pipeline.runs.record``.

Every reader (``runs``, ``predict``, tests) goes through ``read_manifest``, so each way a file
can be broken must come back as one ManifestError that names the file and says why.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from pipeline.runs import history
from pipeline.core.errors import DataError
from pipeline.runs.record import DeviceRecord, ManifestError, RunManifest, StageRecord, read_manifest

RUN_ID = "20260101T000000.000Z-abc123"


def sample() -> RunManifest:
    return RunManifest(
        pipeline="churn", run_id=RUN_ID, status="succeeded", started="2026-01-01T00:00:00.000+00:00",
        duration_s=1.5, device=DeviceRecord(name="cpu", requested="auto", reason="no GPU"), host="here", pid=42,
        versions={"pipeline": "1.0"},
        stages={"evaluate": StageRecord(name="evaluate", kind="evaluate", status="succeeded", seconds=0.25,
                                        facts={"best": "xgb"})},
        metrics={"split": "test", "threshold": 0.5, "rank_by": "roc_auc", "best": "xgb",
                 "models": {"xgb": {"roc_auc": 0.8, "log_loss": math.nan}}},
        models={"xgb": "export/models/xgb"},
        artifacts={"export/models/xgb/model.json": "0" * 64},
    )


def write(folder: Path, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "manifest.json").write_text(text)
    return folder


def test_a_manifest_round_trips(tmp_path):
    manifest = sample()
    read = read_manifest(write(tmp_path, manifest.to_json()))
    assert read.model_dump(exclude={"metrics"}) == manifest.model_dump(exclude={"metrics"})
    assert math.isnan(read.metrics["models"]["xgb"]["log_loss"])          # NaN stays NaN, not null
    assert read.metrics["models"]["xgb"]["roc_auc"] == 0.8
    assert read.stages["evaluate"].facts == {"best": "xgb"} and read.device.name == "cpu"
    assert read.headline() == {"metric": "roc_auc", "model": "xgb", "value": 0.8}


def test_unknown_keys_are_kept(tmp_path):
    data = json.loads(sample().to_json())
    data["written_by_a_newer_version"] = {"x": 1}
    data["stages"]["evaluate"]["plugin_fact"] = "kept"
    read = read_manifest(write(tmp_path, json.dumps(data)))
    assert read.model_extra == {"written_by_a_newer_version": {"x": 1}}
    assert read.stages["evaluate"].model_extra == {"plugin_fact": "kept"}
    assert json.loads(read.to_json())["written_by_a_newer_version"] == {"x": 1}    # and written again


@pytest.mark.parametrize("text, reason", [
    (None, "no manifest.json"),
    ('{"status": "succ', "manifest.json is not valid JSON"),
    ("[1, 2]", "manifest.json has no status"),
    ('{"pipeline": "churn", "run_id": "x"}', "manifest.json has no status"),
    ('{"pipeline": "churn", "run_id": "x", "status": "succeeded", "pid": "not a pid"}',
     "manifest.json is not a run record (pid:"),
    ('{"pipeline": "churn", "run_id": "x", "status": "succeeded", "stages": {"a": {"name": "a"}}}',
     "manifest.json is not a run record (stages.a.kind:"),
])
def test_each_failure_is_a_manifest_error_naming_path_and_reason(tmp_path, text, reason):
    folder = tmp_path / RUN_ID
    if text is None:
        folder.mkdir()
    else:
        write(folder, text)
    with pytest.raises(ManifestError) as info:
        read_manifest(folder)
    error = info.value
    assert isinstance(error, DataError)                                   # exit 3 in the CLI
    assert error.path == folder / "manifest.json" and error.reason.startswith(reason)
    assert str(error) == f"{folder / 'manifest.json'}: {error.reason}"


def test_history_lists_a_run_with_a_bad_manifest_as_unreadable_with_the_reason(tmp_path):
    pipeline_dir = tmp_path / "runs" / "churn"
    good = sample()
    write(pipeline_dir / RUN_ID, good.to_json())
    bad = write(pipeline_dir / "20260102T000000.000Z-def456",
                '{"pipeline": "churn", "run_id": "x", "status": "succeeded", "duration_s": "long"}')
    with pytest.raises(ManifestError) as info:
        read_manifest(bad)

    runs = {run.run_id: run for run in history.find_runs(tmp_path / "runs")}
    assert runs[RUN_ID].status == "succeeded" and runs[RUN_ID].manifest.models == good.models
    unreadable = runs[bad.name]
    assert unreadable.status == history.UNREADABLE and unreadable.manifest is None
    assert unreadable.problem == info.value.reason and "duration_s" in unreadable.problem
    row = history.summary(unreadable)
    assert row["status"] == "unreadable" and row["error"] == info.value.reason
    assert row["started"].startswith("2026-01-02T00:00:00")                 # from the run id
    with pytest.raises(DataError, match="duration_s"):
        history.require_manifest(unreadable)
