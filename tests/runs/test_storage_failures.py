"""Run records that always end, storage failures that are exit 6, manifests that never crash a reader.

Every run here is a tiny pipeline of ``python`` stages (a second or two), through ``run_pipeline``
or the real ``pipeline`` command in a subprocess. A full disk is simulated by making the writes
of one file name fail with ENOSPC: in this process through ``monkeypatch``, in a subprocess by
a stage that installs the same fault into its own process.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd
import pytest

from pipeline import run_pipeline
from pipeline.runs import history
from pipeline.core.errors import ExitCode, PipelineError, StorageError
from pipeline.runs.layout import is_run_id
from pipeline.runs.record import read_manifest
from pipeline.runs.store import atomic_destination, atomic_folder, atomic_write_parquet, atomic_write_text, host_name
from tests.conftest import working_directory

STAGES = '''\
import errno
import os
from pathlib import Path

def first(ctx, inputs):
    return {"n": 1}

def second(ctx, inputs):
    return {"n": inputs["first"]["n"] + 1}

def artifact(ctx, inputs):
    ctx.artifact_path("out.txt").write_text("x")
    return {}

def fill_the_disk(ctx, inputs, fail_writes):
    """Make this process's writes of manifest.json fail as on a full disk (the first
    ``fail_writes`` of them; -1: all)."""
    real = Path.write_bytes
    left = {"n": fail_writes}

    def write_bytes(self, data):
        if self.name.startswith(".manifest.json.") and left["n"] != 0:
            left["n"] -= 1
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(self, data)

    Path.write_bytes = write_bytes
    return {}

def leave(ctx, inputs, code):
    raise SystemExit(code)
'''


def project(tmp_path: Path, stages: str = "", name: str = "p") -> Path:
    """A config of two python stages (plus ``stages``, YAML lines) in ``tmp_path/configs``."""
    configs = tmp_path / "configs"
    configs.mkdir(exist_ok=True)
    (configs / "steps.py").write_text(STAGES)
    (configs / f"{name}.yaml").write_text(
        f"name: {name}\ndevice: cpu\nruns_dir: runs\nstages:\n"
        "  first: {kind: python, function: 'steps:first'}\n"
        "  second: {kind: python, function: 'steps:second', inputs: [first]}\n" + stages)
    return configs / f"{name}.yaml"


def run_folders(root: Path, name: str = "p") -> list[Path]:
    folder = root / "runs" / name
    return sorted(p for p in folder.iterdir() if is_run_id(p.name)) if folder.is_dir() else []


def cli(root: Path, *args: str, umask: int | None = None) -> subprocess.CompletedProcess[str]:
    # A process: the umask is the process's, set before it starts.
    def preexec() -> None:
        if umask is not None:
            os.umask(umask)

    return subprocess.run([sys.executable, "-m", "pipeline", *args], cwd=root, capture_output=True, text=True,
                          timeout=180, stdin=subprocess.DEVNULL, preexec_fn=preexec)


def one_paragraph(text: str) -> bool:
    return bool(text.strip()) and "\n\n" not in text.strip() and "Traceback" not in text


def full_disk(monkeypatch, name: str, *, fail_from: int, fail_until: int | None = None) -> None:
    """``os.replace`` onto a file called ``name`` fails with ENOSPC from its ``fail_from``-th call on."""
    real = os.replace
    calls = {"n": 0}

    def replace(src, dst, *args, **kwargs):
        if Path(dst).name == name:
            calls["n"] += 1
            if calls["n"] >= fail_from and (fail_until is None or calls["n"] <= fail_until):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", replace)


# ---------------------------------------------------------------------------- the store
@pytest.mark.parametrize("umask, file_mode, folder_mode", [(0o022, 0o644, 0o755), (0o027, 0o640, 0o750)])
def test_atomic_writes_respect_the_umask(tmp_path, umask, file_mode, folder_mode):
    old = os.umask(umask)
    try:
        atomic_write_text(tmp_path / "a.json", "{}")
        atomic_write_parquet(pd.DataFrame({"a": [1]}), tmp_path / "t.parquet")
        with atomic_destination(tmp_path / "b.bin") as tmp:
            tmp.write_bytes(b"x")
        with atomic_folder(tmp_path / "scores") as folder:
            (folder / "part.0.parquet").write_bytes(b"x")
    finally:
        os.umask(old)
    for name in ("a.json", "t.parquet", "b.bin", "scores/part.0.parquet"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == file_mode, name
    assert stat.S_IMODE((tmp_path / "scores").stat().st_mode) == folder_mode


def test_a_run_folder_is_readable_by_the_group_under_umask_027(tmp_path):
    project(tmp_path)
    proc = cli(tmp_path, "run", "configs/p.yaml", umask=0o027)
    assert proc.returncode == 0, proc.stderr
    (run,) = run_folders(tmp_path)
    for name in ("manifest.json", "config.yaml"):
        assert stat.S_IMODE((run / name).stat().st_mode) == 0o640, name


def test_files_taken_from_the_cache_get_this_runs_mode_not_the_first_runs(tmp_path):
    """A run's cached artifacts were hard links to the entry, with the mode of the run that
    first wrote them: after one run under umask 077, every later run's files were 0600,
    unreadable to the group or a scoring service, whatever its own umask."""
    project(tmp_path, stages="  art: {kind: python, function: 'steps:artifact'}\n")
    assert cli(tmp_path, "run", "configs/p.yaml", umask=0o077).returncode == 0
    proc = cli(tmp_path, "run", "configs/p.yaml", umask=0o022)
    assert proc.returncode == 0, proc.stderr
    first, second = run_folders(tmp_path)
    restored = [p for p in second.rglob("*") if p.is_file() and p.parent != second]
    assert restored, "the second run took nothing from the cache"
    assert {stat.S_IMODE(p.stat().st_mode) for p in restored} == {0o644}
    assert {stat.S_IMODE(p.stat().st_mode) for p in first.rglob("*") if p.is_file() and p.parent != first} == {0o600}


@pytest.mark.parametrize("failing", ["replace", "body", "parent_is_a_file", "create"])
def test_every_storage_failure_of_an_atomic_write_is_a_storage_error_naming_the_path(tmp_path, monkeypatch,
                                                                                      failing):
    target = tmp_path / "out.json"
    atomic_write_text(target, "old")
    if failing == "replace":
        full_disk(monkeypatch, "out.json", fail_from=1)
    elif failing == "create":
        def no_quota(*args, **kwargs):
            raise OSError(errno.EDQUOT, os.strerror(errno.EDQUOT))

        monkeypatch.setattr(tempfile, "mkstemp", no_quota)
        monkeypatch.setattr(os, "open", no_quota)
    elif failing == "parent_is_a_file":
        target = tmp_path / "out.json" / "inside.json"
    with pytest.raises(StorageError) as info:
        with atomic_destination(target) as tmp:
            if failing == "body":
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            tmp.write_text("new")
    monkeypatch.undo()
    assert str(target) in str(info.value)
    assert (tmp_path / "out.json").read_text() == "old" or failing == "parent_is_a_file"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]         # no temporary file left


def test_an_error_of_the_writer_itself_is_not_called_a_storage_error(tmp_path):
    with pytest.raises(FileNotFoundError):
        with atomic_destination(tmp_path / "out.json"):
            (tmp_path / "some input that is missing").read_text()


def test_schema_output_under_a_file_is_exit_6_naming_the_path(tmp_path):
    (tmp_path / "afile").write_text("x")
    proc = cli(tmp_path, "schema", "-o", "afile/schema.json")
    assert proc.returncode == ExitCode.STORAGE, proc.stderr
    assert "afile/schema.json" in proc.stderr and one_paragraph(proc.stderr)


# ---------------------------------------------------------------------------- a run always ends
def test_a_full_disk_while_writing_the_manifest_is_recorded_as_failed(tmp_path, monkeypatch):
    config = project(tmp_path)
    full_disk(monkeypatch, "manifest.json", fail_from=2, fail_until=2)     # after the first stage, once
    with pytest.raises(StorageError) as info:
        run_pipeline(config, runs_dir=tmp_path / "runs")
    assert "manifest.json" in str(info.value) and "No space left on device" in str(info.value)
    (run,) = run_folders(tmp_path)
    manifest = read_manifest(run)
    assert manifest.status == "failed" and "No space left on device" in manifest.error
    assert not (tmp_path / "runs" / "p" / "latest").exists()


def test_a_manifest_that_cannot_be_finished_is_shown_as_abandoned(tmp_path, monkeypatch):
    config = project(tmp_path)
    full_disk(monkeypatch, "manifest.json", fail_from=2)                   # the disk stays full
    with pytest.raises(StorageError) as info:
        run_pipeline(config, runs_dir=tmp_path / "runs")
    assert "abandoned" in str(info.value)
    (run,) = run_folders(tmp_path)
    assert read_manifest(run).status == "running"                          # the last record that was written
    monkeypatch.undo()
    # This process is alive, but it has let go of the run lock: the run is over.
    (row,) = [history.summary(r) for r in history.find_runs(tmp_path / "runs")]
    assert row["status"] == "abandoned" and row["pid"] == os.getpid() and row["host"] == host_name()


def test_the_first_manifest_failing_leaves_no_run_folder_behind(tmp_path, monkeypatch):
    config = project(tmp_path)
    full_disk(monkeypatch, "manifest.json", fail_from=1)
    with pytest.raises(StorageError, match="manifest.json"):
        run_pipeline(config, runs_dir=tmp_path / "runs")
    assert run_folders(tmp_path) == []
    monkeypatch.undo()
    assert run_pipeline(config, runs_dir=tmp_path / "runs").status == "succeeded"   # the lock was released


@pytest.mark.parametrize("stays_full", [False, True])
def test_a_full_disk_in_a_cli_run_is_exit_6_and_the_run_never_looks_finished(tmp_path, stays_full):
    # Full for one write only: the run's end is recorded as failed. Full for good: the record
    # cannot be finished, so the run must show as abandoned.
    project(tmp_path, "  fill: {kind: python, function: 'steps:fill_the_disk', "
                      f"params: {{fail_writes: {-1 if stays_full else 1}}}}}\n")
    proc = cli(tmp_path, "run", "configs/p.yaml", "--no-cache")
    assert proc.returncode == ExitCode.STORAGE, proc.stderr
    assert "manifest.json" in proc.stderr and "No space left on device" in proc.stderr
    assert one_paragraph(proc.stderr.split("error:", 1)[-1])
    (run,) = run_folders(tmp_path)
    listed = cli(tmp_path, "runs", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    (row,) = json.loads(listed.stdout)
    if not stays_full:
        assert row["status"] == "failed" and "No space left on device" in row["error"]
    else:
        assert read_manifest(run).status == "running"
        assert row["status"] == "abandoned" and row["abandoned"] is True
        assert row["host"] == host_name() and isinstance(row["pid"], int)
        table = cli(tmp_path, "runs", "list")
        line = next(line for line in table.stdout.splitlines() if run.name in line)
        assert "abandoned" in line and f"pid {row['pid']}" in line and host_name() in line
    assert not (tmp_path / "runs" / "p" / "latest").exists()


def _fail(monkeypatch, target: str, error: BaseException) -> None:
    def raiser(*args, **kwargs):
        raise error

    monkeypatch.setattr(target, raiser)


@pytest.mark.parametrize("where, error, status, said", [
    ("pipeline.cache.StageCache.lookup", TypeError("'NoneType' object is not subscriptable"), "failed",
     "internal error: TypeError"),
    ("pipeline.engine.runner.Runner._executor", PipelineError("the cluster would not start"), "failed",
     "the cluster would not start"),
    ("pipeline.hooks.protocol.HookList.run_started", KeyboardInterrupt(), "interrupted", "interrupted"),
    ("pipeline.engine.runner.Runner._executor", OSError(errno.EROFS, os.strerror(errno.EROFS)), "failed",
     "Read-only file system"),
])
def test_a_failure_before_any_stage_runs_is_recorded(tmp_path, monkeypatch, where, error, status, said):
    config = project(tmp_path)
    _fail(monkeypatch, where, error)
    with pytest.raises(BaseException) as info:
        run_pipeline(config, runs_dir=tmp_path / "runs")
    assert type(info.value) is type(error) or isinstance(info.value, PipelineError)
    (run,) = run_folders(tmp_path)
    manifest = read_manifest(run)
    assert manifest.status == status and said in manifest.error
    assert manifest.ended is not None
    assert all(record.status != "running" for record in manifest.stages.values())


def test_sys_exit_inside_a_stage_is_a_stage_failure(tmp_path):
    """sys.exit() in user code ends the stage (exit 4), never the process with the code it chose."""
    from pipeline.core.errors import StageError

    config = project(tmp_path, "  leave: {kind: python, function: 'steps:leave', params: {code: 1}}\n")
    with pytest.raises(StageError, match=r"leave.*sys.exit\(1\)"):
        run_pipeline(config, runs_dir=tmp_path / "runs")
    manifest = read_manifest(run_folders(tmp_path)[0])
    assert manifest.status == "failed" and "sys.exit(1)" in manifest.error
    assert manifest.stages["leave"].status == "failed"


def test_latest_that_cannot_be_moved_is_a_storage_error(tmp_path, monkeypatch):
    config = project(tmp_path)
    full_disk(monkeypatch, "latest", fail_from=1)
    with pytest.raises(StorageError, match="latest"):
        run_pipeline(config, runs_dir=tmp_path / "runs")
    assert not [p for p in (tmp_path / "runs" / "p").iterdir() if p.name.startswith(".latest")]


# ---------------------------------------------------------------------------- reading manifests
def _good_run(tmp_path: Path) -> Path:
    config = project(tmp_path)
    return run_pipeline(config, runs_dir=tmp_path / "runs").run_dir


def _with(data: dict, dotted: str, value) -> str:
    data = json.loads(json.dumps(data))
    parts = dotted.split(".")
    node = data
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value
    return json.dumps(data)


METRICS = {"split": "test", "threshold": 0.5, "rank_by": "roc_auc", "best": "a",
           "models": {"a": {"roc_auc": 0.8}}}

BAD = {
    "best is a list": ("metrics.best", ["a"]),
    "rank_by is a list": ("metrics.rank_by", ["roc_auc"]),
    "models is a list": ("metrics.models", [1]),
    "a model's metrics are a list": ("metrics.models.a", [1]),
    "threshold is text": ("metrics.threshold", "half"),
    "stages is a string": ("stages", "abc"),
    "started is a number": ("started", 5),
    "started is not a time": ("started", "yesterday"),
    "duration is NaN": ("duration_s", float("nan")),
    "duration is negative": ("duration_s", -1.0),
    "status is unknown": ("status", "bogus"),
    "pid is a boolean": ("pid", True),
    "pid is huge": ("pid", 10**30),
    "a stage's seconds are text": ("stages.first.seconds", "x"),
    "a stage's status is unknown": ("stages.first.status", "great"),
}
RAW = {
    "truncated": lambda good: good[:40],
    "null": lambda good: "null",
    "an array": lambda good: "[1, 2]",
    "deeply nested": lambda good: '{"status": "running", "x": ' + "[" * 100_000 + "]" * 100_000 + "}",
}


@pytest.fixture(scope="module")
def bad_runs(tmp_path_factory) -> tuple[Path, str, dict[str, str]]:
    """One good run, then one folder per broken manifest (a copy of the good one's config)."""
    root = tmp_path_factory.mktemp("bad")
    good = _good_run(root)
    data = {**json.loads((good / "manifest.json").read_text()), "metrics": METRICS}
    (good / "manifest.json").write_text(json.dumps(data))
    text = json.dumps(data)
    ids = {}
    for i, (name, broken) in enumerate([*((n, _with(data, *change)) for n, change in BAD.items()),
                                        *((n, make(text)) for n, make in RAW.items())]):
        run_id = f"20200101T0000{i:02d}.000Z-{i:06x}"
        folder = good.parent / run_id
        folder.mkdir()
        (folder / "config.yaml").write_text((good / "config.yaml").read_text())
        (folder / "manifest.json").write_text(broken)
        ids[name] = run_id
    return root, good.name, ids


def test_every_broken_manifest_is_listed_as_unreadable_with_its_reason(bad_runs):
    root, good, ids = bad_runs
    listed = cli(root, "runs", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = {row["run_id"]: row for row in json.loads(listed.stdout)}
    assert rows[good]["status"] == "succeeded"
    assert rows[good]["headline"] == {"metric": "roc_auc", "model": "a", "value": 0.8}
    for name, run_id in ids.items():
        assert rows[run_id]["status"] == "unreadable", name
        assert rows[run_id]["error"], name
    assert "metrics.best" in rows[ids["best is a list"]]["error"]
    assert "duration_s" in rows[ids["duration is NaN"]]["error"]

    table = cli(root, "runs", "list")
    assert table.returncode == 0, table.stderr
    lines = {line.split()[0]: line for line in table.stdout.splitlines()[1:] if line.strip()}
    assert "succeeded" in lines[good]
    for name, run_id in ids.items():
        assert "unreadable" in lines[run_id], name
    assert "metrics.best" in lines[ids["best is a list"]]


def test_show_and_diff_of_a_broken_manifest_are_data_errors(bad_runs):
    root, good, ids = bad_runs
    shown = cli(root, "runs", "show", ids["best is a list"])                  # once through the real command
    assert shown.returncode == ExitCode.DATA and "metrics.best" in shown.stderr and one_paragraph(shown.stderr)
    from click.testing import CliRunner

    from pipeline.cli.app import main

    runner = CliRunner()
    with working_directory(root):
        for name, run_id in ids.items():
            for args in (["show", run_id], ["show", run_id, "--json"], ["diff", good, run_id]):
                result = runner.invoke(main, ["runs", *args])
                assert result.exit_code == ExitCode.DATA, (name, args, result.output)
                assert run_id in result.output and one_paragraph(result.output), (name, args)


def test_show_and_diff_of_the_good_run_still_work(bad_runs):
    root, good, _ = bad_runs
    shown = cli(root, "runs", "show", good)
    assert shown.returncode == 0, shown.stderr
    assert "best by roc_auc: a" in shown.stdout
    diff = cli(root, "runs", "diff", good, good, "--json")
    assert diff.returncode == 0, diff.stderr


def test_prune_keeps_broken_runs_and_says_why(bad_runs):
    root, good, ids = bad_runs
    proc = cli(root, "runs", "prune", "--keep", "0", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    for run_id in ids.values():
        assert any(run_id in line and "unreadable" in line for line in proc.stdout.splitlines())


# ---------------------------------------------------------------------------- abandoned runs
def _clone(run: Path, run_id: str, **changes) -> Path:
    target = run.parent / run_id
    target.mkdir()
    data = {**json.loads((run / "manifest.json").read_text()), "run_id": run_id, **changes}
    (target / "manifest.json").write_text(json.dumps(data))
    (target / "config.yaml").write_text((run / "config.yaml").read_text())
    return target


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_run_on_another_host_is_abandoned_once_a_later_run_took_the_lock(tmp_path):
    good = _good_run(tmp_path)
    elsewhere = _clone(good, "20200101T000000.000Z-e15e01", status="running", host="elsewhere", pid=4242)
    rows = {r["run_id"]: r for r in map(history.summary, history.find_runs(tmp_path / "runs"))}
    row = rows[elsewhere.name]
    assert row["status"] == "abandoned" and row["pid"] == 4242 and row["host"] == "elsewhere"
    assert "lock" in row["error"]

    # The lock's note names the run from elsewhere: it may still be running there.
    note = json.loads((good.parent / ".lock").read_text())
    (good.parent / ".lock").write_text(json.dumps({**note, "run_id": elsewhere.name, "host": "elsewhere"}))
    rows = {r["run_id"]: r for r in map(history.summary, history.find_runs(tmp_path / "runs"))}
    assert rows[elsewhere.name]["status"] == "running" and rows[elsewhere.name]["abandoned"] is False


def test_a_run_whose_process_died_here_is_abandoned_in_list_and_show(tmp_path):
    good = _good_run(tmp_path)
    pid = _dead_pid()
    dead = _clone(good, "20300101T000000.000Z-dead01", status="running", host=host_name(), pid=pid, ended=None)
    listed = cli(tmp_path, "runs", "list", "--json")
    (row,) = [r for r in json.loads(listed.stdout) if r["run_id"] == dead.name]
    assert row["status"] == "abandoned" and row["pid"] == pid and row["host"] == host_name()
    table = cli(tmp_path, "runs", "list")
    line = next(line for line in table.stdout.splitlines() if dead.name in line)
    assert f"abandoned (pid {pid} on {host_name()})" in line
    shown = cli(tmp_path, "runs", "show", dead.name)
    assert shown.returncode == 0 and "abandoned" in shown.stdout
    # Its report says so too: it said "running", and that no evaluate stage ran.
    report = cli(tmp_path, "report", dead.name)
    assert report.returncode == 0, report.stderr
    page = (dead / "report.html").read_text(encoding="utf-8")
    assert '<span class="status-abandoned">abandoned</span>' in page
    assert f"The run was abandoned:</b> its record says running, but process {pid}" in page
    assert "no evaluate stage ran" not in page


# ---------------------------------------------------------------------------- 'latest'
def test_latest_needs_pipeline_lists_only_pipelines_that_succeeded(tmp_path):
    ok = project(tmp_path, name="good")
    assert cli(tmp_path, "run", str(ok.relative_to(tmp_path))).returncode == 0
    project(tmp_path, "  boom: {kind: python, function: 'steps:leave', params: {code: 3}}\n", name="broken")
    assert cli(tmp_path, "run", "configs/broken.yaml").returncode != 0
    proc = cli(tmp_path, "runs", "show", "latest")
    assert proc.returncode == ExitCode.CONFIG
    # Only "good" can be picked; "broken" is named as having no succeeded run, not as a choice.
    assert "--pipeline good" in proc.stderr and "no succeeded run yet: broken" in proc.stderr
    assert "--pipeline broken" not in proc.stderr

    (tmp_path / "runs" / "good" / "latest").unlink()
    none = cli(tmp_path, "runs", "show", "latest")
    assert none.returncode == ExitCode.CONFIG and "no run has succeeded" in none.stderr
