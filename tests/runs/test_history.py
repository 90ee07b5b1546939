"""``pipeline runs list|show|diff|prune`` on real run folders, through the real CLI in a subprocess."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.cli import run_cli as _pipeline
from pipeline.runs import history
from pipeline.core.errors import DataError, ExitCode, StorageError
from pipeline.runs.layout import DELETING_PREFIX, is_run_id
from pipeline.runs.record import RunManifest, read_manifest
from pipeline.runs.store import host_name, utc_now
from tests.conftest import copy_project, working_directory

SMALL = ["device=cpu", "stages.forest.params.n_estimators=10", "stages.xgb.params.n_estimators=10",
         "stages.mlp.epochs=2"]


@dataclass
class Runs:
    root: Path           # project folder (configs/, data/, runs/)
    a: str               # succeeded
    b: str               # succeeded, seed 7 and logreg C=2.0; `latest`
    failed: str          # split.target=Nope: DataError, status failed

    @property
    def runs_dir(self) -> Path:
        return self.root / "runs"

    def manifest(self, run_id: str) -> RunManifest:
        return read_manifest(self.runs_dir / "churn" / run_id)


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> Runs:
    """Three real runs, made once for the module (about 20 s): two that succeed, one that fails."""
    from pipeline import run_pipeline

    root = copy_project(tmp_path_factory.mktemp("history"))
    with working_directory(root):
        a = run_pipeline("configs/churn.yaml", runs_dir="runs", overrides=SMALL).run_id
        b = run_pipeline("configs/churn.yaml", runs_dir="runs",
                         overrides=[*SMALL, "seed=7", "stages.logreg.params.C=2.0"]).run_id
        with pytest.raises(DataError):
            run_pipeline("configs/churn.yaml", runs_dir="runs", overrides=[*SMALL, "stages.split.target=Nope"])
    failed = max(p.name for p in (root / "runs" / "churn").iterdir() if is_run_id(p.name))
    assert a < b < failed
    return Runs(root, a, b, failed)


@pytest.fixture
def copy(made: Runs, tmp_path: Path) -> Runs:
    """A private copy of the runs for tests that change them (symlinks kept, stage cache left out)."""
    shutil.copytree(made.runs_dir, tmp_path / "runs", symlinks=True, ignore=shutil.ignore_patterns(".cache"))
    return Runs(tmp_path, made.a, made.b, made.failed)


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return _pipeline("runs", *args, cwd=cwd)


def clone(runs: Runs, source: str, run_id: str, pipeline: str = "churn", **changes) -> Path:
    """A copy of a real run folder under another id, with manifest fields changed."""
    target = runs.runs_dir / pipeline / run_id
    shutil.copytree(runs.runs_dir / "churn" / source, target)
    manifest = runs.manifest(source).model_copy(update={"run_id": run_id, "pipeline": pipeline, **changes})
    (target / "manifest.json").write_text(manifest.to_json())
    return target


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def run_ids(runs: Runs, pipeline: str = "churn") -> set[str]:
    """Visible entries of a pipeline folder (hidden ones: a run lock, the stage cache)."""
    return {p.name for p in (runs.runs_dir / pipeline).iterdir() if not p.name.startswith(".")}


def deleting(runs: Runs, pipeline: str = "churn") -> list[Path]:
    return [p for p in (runs.runs_dir / pipeline).iterdir() if p.name.startswith(DELETING_PREFIX)]


# ---------------------------------------------------------------------------- list
def test_list_json_is_newest_first_with_latest_and_headline(made):
    proc = cli("list", "--json", cwd=made.root)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert [r["run_id"] for r in rows] == [made.failed, made.b, made.a]
    assert [r["status"] for r in rows] == ["failed", "succeeded", "succeeded"]
    assert [r["latest"] for r in rows] == [False, True, False]
    metrics = made.manifest(made.b).metrics
    assert rows[1]["headline"] == {"metric": metrics["rank_by"], "model": metrics["best"],
                                   "value": metrics["models"][metrics["best"]][metrics["rank_by"]]}
    assert rows[0]["headline"] is None and "Nope" in rows[0]["error"]
    assert rows[1]["duration_s"] == made.manifest(made.b).duration_s and rows[1]["device"] == "cpu"


def test_list_table_limit_and_unknown_pipeline(made):
    proc = cli("list", cwd=made.root)
    assert proc.returncode == 0, proc.stderr
    lines = {line.split()[0]: line for line in proc.stdout.splitlines()[1:] if line.strip()}
    assert list(lines) == [made.failed, made.b, made.a]
    metrics = made.manifest(made.b).metrics
    best = metrics["models"][metrics["best"]]["roc_auc"]
    assert f"roc_auc {best:.4f} ({metrics['best']})" in lines[made.b]
    assert lines[made.b].rstrip().endswith("latest") and "latest" not in lines[made.a]
    assert "failed" in lines[made.failed] and "churn" in lines[made.failed]

    limited = cli("list", "--json", "--limit", "1", cwd=made.root)
    assert [r["run_id"] for r in json.loads(limited.stdout)] == [made.failed]

    unknown = cli("list", "--pipeline", "nope", cwd=made.root)
    assert unknown.returncode == ExitCode.CONFIG
    assert "'nope'" in unknown.stderr and "churn" in unknown.stderr


def test_list_shows_unreadable_runs_instead_of_crashing(copy):
    pipeline_dir = copy.runs_dir / "churn"
    (pipeline_dir / "20200101T000000.000Z-bad001").mkdir()
    (pipeline_dir / "20200101T000000.000Z-bad001" / "manifest.json").write_text('{"status": "succ')
    (pipeline_dir / "20200102T000000.000Z-bad002").mkdir()                      # no manifest at all
    (pipeline_dir / "20200103T000000.000Z-bad003").mkdir()
    (pipeline_dir / "20200103T000000.000Z-bad003" / "manifest.json").write_text("[1, 2]")
    (pipeline_dir / "notes").mkdir()                                            # not a run: not listed
    (pipeline_dir / ".deleting-20200104T000000.000Z-bad004.abc").mkdir()        # hidden: not listed

    proc = cli("list", "--json", cwd=copy.root)
    assert proc.returncode == 0, proc.stderr
    rows = {r["run_id"]: r for r in json.loads(proc.stdout)}
    assert set(rows) == {copy.a, copy.b, copy.failed, "20200101T000000.000Z-bad001",
                         "20200102T000000.000Z-bad002", "20200103T000000.000Z-bad003"}
    assert rows["20200101T000000.000Z-bad001"]["status"] == "unreadable"
    assert "not valid JSON" in rows["20200101T000000.000Z-bad001"]["error"]
    assert rows["20200102T000000.000Z-bad002"]["error"] == "no manifest.json"
    assert rows["20200103T000000.000Z-bad003"]["status"] == "unreadable"
    assert rows["20200102T000000.000Z-bad002"]["started"].startswith("2020-01-02T00:00:00")  # from the id

    table = cli("list", cwd=copy.root)
    assert table.returncode == 0, table.stderr
    assert any("20200102T000000.000Z-bad002" in line and "unreadable" in line for line in table.stdout.splitlines())

    shown = cli("show", "20200101", cwd=copy.root)
    assert shown.returncode == ExitCode.DATA and "not valid JSON" in shown.stderr


def test_list_of_a_missing_runs_dir_is_empty(tmp_path):
    proc = cli("list", "--json", "--runs-dir", "nowhere", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == []


# ---------------------------------------------------------------------------- show
def test_show_by_prefix_path_and_latest(made):
    manifest = made.manifest(made.a)
    proc = cli("show", made.a[:-2], cwd=made.root)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert made.a in out and "succeeded" in out and "(latest)" not in out
    assert manifest.device.reason in out and manifest.host in out
    assert f"scikit-learn {manifest.versions['scikit-learn']}" in out
    assert "peak RSS MiB" in out
    for name, record in manifest.stages.items():
        row = next(line for line in out.splitlines() if line.startswith(f"│ {name} "))
        assert record.status in row and f"{record.seconds:.2f}" in row
    best = manifest.metrics["best"]
    assert f"{best} *" in out and f"{manifest.metrics['models'][best]['roc_auc']:.4f}" in out

    by_path = cli("show", "--json", str(made.runs_dir / "churn" / made.a), cwd=made.root)
    assert by_path.returncode == 0, by_path.stderr
    assert json.loads(by_path.stdout)["run_id"] == made.a

    latest = cli("show", "latest", "--json", cwd=made.root)
    assert latest.returncode == 0, latest.stderr
    data = json.loads(latest.stdout)
    assert data["run_id"] == made.b and data["latest"] is True and data["metrics"] == made.manifest(made.b).metrics


def test_show_failed_run_gives_the_error(made):
    proc = cli("show", made.failed, cwd=made.root)
    assert proc.returncode == 0, proc.stderr
    assert "failed" in proc.stdout
    assert "error: " in proc.stdout and "'Nope'" in proc.stdout
    assert "stage split: " in proc.stdout


def test_unknown_and_ambiguous_runs_are_config_errors(made):
    unknown = cli("show", "19990101", cwd=made.root)
    assert unknown.returncode == ExitCode.CONFIG
    assert "'19990101'" in unknown.stderr and made.a in unknown.stderr and made.b in unknown.stderr

    common = os.path.commonprefix([made.a, made.b, made.failed])
    ambiguous = cli("show", common, cwd=made.root)
    assert ambiguous.returncode == ExitCode.CONFIG
    assert "ambiguous" in ambiguous.stderr and made.a in ambiguous.stderr and made.failed in ambiguous.stderr

    bad_b = cli("diff", made.a, "nope", cwd=made.root)
    assert bad_b.returncode == ExitCode.CONFIG and "RUN_B" in bad_b.stderr and "'nope'" in bad_b.stderr

    not_a_run = cli("show", "configs", cwd=made.root)
    assert not_a_run.returncode == ExitCode.CONFIG and "not a run folder" in not_a_run.stderr


def test_a_whole_run_id_in_two_pipelines_asks_for_pipeline_not_more_of_the_id(copy):
    clone(copy, copy.a, copy.a, pipeline="other")
    both = cli("show", copy.a, cwd=copy.root)
    assert both.returncode == ExitCode.CONFIG
    assert f"run id '{copy.a}' is in 2 pipelines" in both.stderr and "name one with --pipeline" in both.stderr
    assert "give more of the id" not in both.stderr
    one = cli("show", copy.a, "--pipeline", "other", "--json", cwd=copy.root)
    assert one.returncode == 0 and json.loads(one.stdout)["pipeline"] == "other"


def test_latest_needs_pipeline_when_there_are_several(copy):
    clone(copy, copy.a, "20260101T000000.000Z-0000aa", pipeline="other")
    (copy.runs_dir / "other" / "latest").symlink_to("20260101T000000.000Z-0000aa")

    both = cli("show", "latest", cwd=copy.root)
    assert both.returncode == ExitCode.CONFIG
    assert "--pipeline" in both.stderr and "churn" in both.stderr and "other" in both.stderr

    other = cli("show", "latest", "--pipeline", "other", "--json", cwd=copy.root)
    assert other.returncode == 0, other.stderr
    assert json.loads(other.stdout)["run_id"] == "20260101T000000.000Z-0000aa"

    listed = json.loads(cli("list", "--json", cwd=copy.root).stdout)
    assert {(r["pipeline"], r["latest"]) for r in listed if r["latest"]} == {("churn", True), ("other", True)}
    only = json.loads(cli("list", "--json", "--pipeline", "other", cwd=copy.root).stdout)
    assert [r["run_id"] for r in only] == ["20260101T000000.000Z-0000aa"]


# ---------------------------------------------------------------------------- diff
def test_diff_config_and_metrics(made):
    proc = cli("diff", made.a, made.b, "--json", cwd=made.root)
    assert proc.returncode == 0, proc.stderr
    diff = json.loads(proc.stdout)
    assert diff["a"]["run_id"] == made.a and diff["b"]["run_id"] == made.b
    assert diff["config"] == [
        {"key": "seed", "change": "changed", "a": 42, "b": 7},
        {"key": "stages.logreg.params.C", "change": "changed", "a": 0.5, "b": 2.0},
    ]
    assert diff["run"] == []                      # same status, device, host and versions
    models_a, models_b = made.manifest(made.a).metrics["models"], made.manifest(made.b).metrics["models"]
    rows = {(r["model"], r["metric"]): r for r in diff["metrics"]["models"]}
    assert set(rows) == {(m, k) for m, values in models_a.items() for k in values}
    for (model, metric), row in rows.items():
        assert row["a"] == models_a[model][metric] and row["b"] == models_b[model][metric]
        assert row["delta"] == pytest.approx(models_b[model][metric] - models_a[model][metric])

    table = cli("diff", made.a, made.b, cwd=made.root)
    assert table.returncode == 0, table.stderr
    line = next(line for line in table.stdout.splitlines() if "stages.logreg.params.C" in line)
    assert "changed" in line and "0.5" in line and "2.0" in line
    roc = rows[("logreg", "roc_auc")]
    assert f"{roc['delta']:+.4f}" in table.stdout


def test_diff_against_failed_run_shows_status_and_missing_metrics(made):
    proc = cli("diff", made.b, made.failed, cwd=made.root)
    assert proc.returncode == 0, proc.stderr
    status = next(line for line in proc.stdout.splitlines() if "│ status" in line)
    assert "succeeded" in status and "failed" in status
    target = next(line for line in proc.stdout.splitlines() if "stages.split.target" in line)
    assert "Churn" in target and "Nope" in target
    assert "metrics: B has none" in proc.stdout

    data = json.loads(cli("diff", made.b, made.failed, "--json", cwd=made.root).stdout)
    assert {"key": "status", "a": "succeeded", "b": "failed"} in data["run"]
    assert all(r["b"] is None and r["delta"] is None for r in data["metrics"]["models"])


def test_diff_shows_added_and_removed_keys(copy):
    import yaml

    path = copy.runs_dir / "churn" / copy.b / "config.yaml"
    config = yaml.safe_load(path.read_text())
    del config["stages"]["export"]
    config["stages"]["features"]["ops"].append({"drop": {"columns": ["gender"]}})
    path.write_text(yaml.safe_dump(config))

    data = json.loads(cli("diff", copy.a, copy.b, "--json", cwd=copy.root).stdout)
    changes = {r["key"]: r for r in data["config"]}
    removed = [k for k, r in changes.items() if r["change"] == "removed"]
    assert removed and all(k.startswith("stages.export.") for k in removed)
    assert changes["stages.export.kind"]["a"] == "export" and changes["stages.export.kind"]["b"] is None
    added = changes["stages.features.ops.4.drop.columns.0"]
    assert added["change"] == "added" and added["a"] is None and added["b"] == "gender"


def test_flatten_uses_set_paths_and_keeps_empty_containers():
    assert history.flatten({"a": {"b": [1, {"c": 2}], "e": {}, "f": []}, "g": None}) == \
        {"a.b.0": 1, "a.b.1.c": 2, "a.e": {}, "a.f": [], "g": None}
    rows = history.diff_flat({"x": 1, "y": 1, "z": 0}, {"x": 1, "y": True, "w": 2})
    assert rows == [{"key": "w", "change": "added", "a": None, "b": 2},
                    {"key": "y", "change": "changed", "a": 1, "b": True},
                    {"key": "z", "change": "removed", "a": 0, "b": None}]


# ---------------------------------------------------------------------------- prune
def test_prune_keeps_latest_newest_and_live_runs_and_deletes_the_rest(copy):
    here = host_name()
    clone(copy, copy.b, "20990102T000000.000Z-000002", status="succeeded")
    clone(copy, copy.failed, "20990101T000000.000Z-000001", status="failed")
    alive = clone(copy, copy.failed, "20980101T000000.000Z-0000a1", status="running", pid=os.getpid(),
                  host=here, started=utc_now(), ended=None)
    dead = clone(copy, copy.failed, "20970101T000000.000Z-0000d1", status="running", pid=dead_pid(),
                 host=here, started=utc_now(), ended=None)
    clone(copy, copy.failed, "20960101T000000.000Z-0000f1", status="running", pid=dead_pid(),
          host="some-other-host", started=utc_now(), ended=None)
    unreadable = copy.runs_dir / "churn" / "20950101T000000.000Z-0000b1"
    unreadable.mkdir()
    (unreadable / "manifest.json").write_text("{broken")
    (copy.runs_dir / "churn" / "notes").mkdir()
    before = run_ids(copy)
    victims = {dead.name, copy.failed, copy.a}

    dry = cli("prune", "--keep", "2", "--dry-run", cwd=copy.root)
    assert dry.returncode == 0, dry.stderr
    assert run_ids(copy) == before                                   # nothing deleted
    assert {line.split()[2].split("/")[1] for line in dry.stdout.splitlines()
            if line.startswith("would delete")} == victims
    assert f"kept churn/{copy.b}: latest" in dry.stdout
    assert f"kept churn/{alive.name}: running" in dry.stdout

    proc = cli("prune", "--keep", "2", cwd=copy.root)
    assert proc.returncode == 0, proc.stderr
    assert {line.split()[1].split("/")[1] for line in proc.stdout.splitlines()
            if line.startswith("deleted")} == victims
    assert run_ids(copy) == before - victims and deleting(copy) == []
    assert os.readlink(copy.runs_dir / "churn" / "latest") == copy.b
    assert (copy.runs_dir / "churn" / "latest" / "manifest.json").is_file()

    again = cli("prune", "--keep", "2", cwd=copy.root)
    assert again.returncode == 0 and run_ids(copy) == before - victims
    assert not [line for line in again.stdout.splitlines() if line.startswith("deleted")]


def test_prune_keep_zero_still_keeps_latest(copy):
    proc = cli("prune", "--keep", "0", "--pipeline", "churn", cwd=copy.root)
    assert proc.returncode == 0, proc.stderr
    assert run_ids(copy) == {copy.b, "latest"}


def test_prune_needs_a_valid_keep(copy):
    assert cli("prune", cwd=copy.root).returncode == ExitCode.CONFIG
    assert cli("prune", "--keep", "-1", cwd=copy.root).returncode == ExitCode.CONFIG
    assert run_ids(copy) == {copy.a, copy.b, copy.failed, "latest"}


def test_interrupted_deletion_is_hidden_and_finished_by_the_next_prune(copy, monkeypatch):
    run = next(r for r in history.find_runs(copy.runs_dir) if r.run_id == copy.a)

    def fail(path, *args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(history.shutil, "rmtree", fail)
    with pytest.raises(StorageError, match="next prune retries"):
        history.delete_run(run)
    monkeypatch.undo()
    assert copy.a not in [r.run_id for r in history.find_runs(copy.runs_dir)]   # half-deleted: not a run
    hidden = deleting(copy)
    assert len(hidden) == 1

    proc = cli("prune", "--keep", "5", cwd=copy.root)
    assert proc.returncode == 0, proc.stderr
    assert "left by an interrupted prune" in proc.stdout
    assert deleting(copy) == [] and run_ids(copy) == {copy.b, copy.failed, "latest"}


def test_delete_refuses_the_latest_run(copy):
    run = next(r for r in history.find_runs(copy.runs_dir) if r.run_id == copy.b)
    with pytest.raises(StorageError, match="latest"):
        history.delete_run(run)
    assert (copy.runs_dir / "churn" / copy.b).is_dir()


def test_champion_is_an_alias_that_run_arguments_resolve_and_prune_keeps(copy):
    from pipeline.runs.store import RunStore

    with pytest.raises(Exception, match="no run has been promoted yet"):
        history.resolve_run("champion", copy.runs_dir, "churn")
    store = RunStore(copy.runs_dir, "churn")
    store.mark_alias(copy.runs_dir / "churn" / copy.a, "champion")
    assert history.resolve_run("champion", copy.runs_dir, "churn").run_id == copy.a
    shown = cli("show", "champion", "--json", cwd=copy.root)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["run_id"] == copy.a

    run = next(r for r in history.find_runs(copy.runs_dir) if r.run_id == copy.a)
    assert run.aliases == ("champion",) and not run.latest
    with pytest.raises(StorageError, match="'champion' points to it"):
        history.delete_run(run)
    proc = cli("prune", "--keep", "0", "--pipeline", "churn", cwd=copy.root)
    assert proc.returncode == 0, proc.stderr
    assert run_ids(copy) == {copy.a, copy.b, "latest", "champion"}

    store.mark_alias(copy.runs_dir / "churn" / copy.b, "champion")        # moved: the old champion may go
    assert history.resolve_run("champion", copy.runs_dir, "churn").run_id == copy.b
    assert cli("prune", "--keep", "0", "--pipeline", "churn", cwd=copy.root).returncode == 0
    assert run_ids(copy) == {copy.b, "latest", "champion"}


def test_abandoned_means_running_here_with_the_process_gone():
    here = host_name()
    now = utc_now()

    def record(**fields) -> RunManifest:
        return RunManifest(pipeline="churn", run_id="20260101T000000.000Z-000001", **fields)

    assert history.is_abandoned(record(status="running", host=here, pid=dead_pid(), started=now))
    assert not history.is_abandoned(record(status="running", host=here, pid=os.getpid(), started=now))
    assert not history.is_abandoned(record(status="running", host="elsewhere", pid=dead_pid(), started=now))
    assert not history.is_abandoned(record(status="failed", host=here, pid=dead_pid(), started=now))
    # A live pid whose process started after the run did is a reused pid: the run's process is gone.
    assert history.is_abandoned(record(status="running", host=here, pid=os.getpid(),
                                       started="2000-01-01T00:00:00.000+00:00"))
