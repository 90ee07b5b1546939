"""The stage cache under unattended use: bad records, a size limit with LRU eviction, the
``pipeline cache`` commands, ``runs prune`` dropping entries, and a steady footprint over 30 nights.

Runs are real (``run_pipeline`` on a small CSV, in process; one ``pipeline run`` subprocess);
the CLI commands go through click in process.
"""

from __future__ import annotations

import json
import logging
import os
import random
import stat
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipeline import ConfigError, load_config, run_pipeline
from pipeline.cache import ENV_MAX_SIZE, STALE_TMP_SECONDS, StageCache, resolve_max_size
from pipeline.cli.app import main
from pipeline.core.errors import ExitCode
from pipeline.core.settings import Settings
from pipeline.core.sizes import parse_size
from pipeline.runs.locks import RunLock
from pipeline.runs.record import read_manifest
from tests.conftest import small_config
from tests.support.cli import run_cli as _pipeline

EVALUATE = "  evaluate:\n    kind: evaluate\n    inputs: [logreg]\n"
STAGES = ("raw", "split", "features", "logreg", "evaluate")


@pytest.fixture(autouse=True)
def no_env_limit(monkeypatch):
    monkeypatch.delenv(ENV_MAX_SIZE, raising=False)


@pytest.fixture
def nightly(tmp_path: Path) -> Path:
    """A small real pipeline (load, split, features, logistic regression, evaluate) and its data."""
    write_data(tmp_path, night=0)
    (tmp_path / "nightly.yaml").write_text(small_config("nightly", tmp_path / "data.csv", after=EVALUATE))
    return tmp_path


def write_data(folder: Path, night: int, rows: int = 80) -> None:
    """Each night's new data: same shape, different values (so a new key for every stage)."""
    rng = random.Random(night)
    lines = ["id,a,b,churn"] + [f"{i},{rng.random():.4f},{rng.random():.4f},{'yes' if i % 3 == 0 else 'no'}"
                                for i in range(rows)]
    (folder / "data.csv").write_text("\n".join(lines) + "\n")


def run_night(folder: Path, **kw):
    return run_pipeline(folder / "nightly.yaml", runs_dir=folder / "runs", **kw)


def keys_of(result) -> dict[str, str]:
    return {name: record.cache_key for name, record in read_manifest(result.run_dir).stages.items()}


def cache_dir(folder: Path) -> Path:
    return folder / "runs" / "nightly" / ".cache"


def entry_keys(folder: Path) -> set[str]:
    return {p.name for p in cache_dir(folder).iterdir() if not p.name.startswith(".")}


def cli(*args: str):
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return result


def small_entry(cache: StageCache, key: str, stage: str = "features", payload: bytes = b"x" * 1000) -> Path:
    cache.store(key, payload, None, {"stage": stage, "kind": "features", "facts": {}, "run_record": {}})
    return cache.root / key


# ---------------------------------------------------------------------------- bad records
def _with(field: str, value):
    def change(record: dict) -> dict:
        return {**record, field: value}
    return change


BAD_RECORDS = {
    "null": "null",
    "list": "[]",
    "string": '"text"',
    "number": "42",
    "empty object": "{}",
    "files null": '{"files": null}',
    "files empty": '{"files": {}}',
    "files a list": '{"files": ["output.pkl"]}',
    "checksum a number": _with("files", {"output.pkl": 5}),
    "file outside the entry": _with("files", {"../../../etc/hostname": "00"}),
    "facts a list": _with("facts", [1, 2]),
    "run_record a string": _with("run_record", "x"),
    "stage a number": _with("stage", 5),
    "another entry's record": _with("key", "0" * 32),
    "deeply nested": "[" * 100_000,
    "not UTF-8": b"\xff\xfe\x00{",
    "truncated": '{"files": {"output.pkl": "ab',
}


@pytest.mark.parametrize("content", list(BAD_RECORDS.values()), ids=list(BAD_RECORDS))
def test_a_record_that_is_not_a_record_is_set_aside_with_a_warning_naming_the_stage(tmp_path, caplog, content):
    cache = StageCache(tmp_path / ".cache")
    key = "a" * 32
    entry = small_entry(cache, key, stage="old-name")
    record = json.loads((entry / "record.json").read_text())
    if callable(content):
        content = json.dumps(content(record))
    if isinstance(content, str):
        content = content.encode()
    (entry / "record.json").write_bytes(content)
    with caplog.at_level(logging.WARNING, logger="pipeline"):
        assert cache.lookup(key, stage="features") is None
    assert f"cache entry {key} for stage features failed verification" in caplog.text
    assert not entry.exists()
    assert [p.name for p in cache.root.iterdir()] == []          # set aside and removed
    small_entry(cache, key)                                      # recomputed and stored again
    assert cache.lookup(key, stage="features") is not None


@pytest.mark.parametrize("kind", ["missing record", "a file", "a symlink"])
def test_an_entry_that_is_not_a_whole_folder_is_set_aside(tmp_path, caplog, kind):
    cache = StageCache(tmp_path / ".cache")
    key = "b" * 32
    if kind == "missing record":
        (small_entry(cache, key) / "record.json").unlink()
    elif kind == "a file":
        cache.root.mkdir(parents=True)
        (cache.root / key).write_text("junk")
    else:
        elsewhere = small_entry(StageCache(tmp_path / "elsewhere"), key)
        cache.root.mkdir(parents=True)
        (cache.root / key).symlink_to(elsewhere)
    with caplog.at_level(logging.WARNING, logger="pipeline"):
        assert cache.lookup(key, stage="raw") is None
    assert f"cache entry {key} for stage raw" in caplog.text
    assert not (cache.root / key).exists() and not (cache.root / key).is_symlink()
    assert list(cache.root.iterdir()) == []
    if kind == "a symlink":
        assert (tmp_path / "elsewhere" / key / "record.json").is_file()     # the target is untouched


def test_without_a_stage_name_the_warning_uses_the_records_own(tmp_path, caplog):
    """Workers on a cluster look entries up by key only: the record still names the stage."""
    cache = StageCache(tmp_path / ".cache")
    entry = small_entry(cache, "c" * 32, stage="features")
    (entry / "output.pkl").write_bytes(b"tampered")
    with caplog.at_level(logging.WARNING, logger="pipeline"):
        assert cache.lookup("c" * 32) is None
    assert f"cache entry {'c' * 32} for stage features failed verification" in caplog.text
    assert "does not match its checksum" in caplog.text


@pytest.mark.slow
def test_a_run_over_a_null_cache_record_succeeds_and_recomputes_that_stage(nightly):
    first = run_night(nightly)
    key = keys_of(first)["features"]
    (cache_dir(nightly) / key / "record.json").write_text("null")
    proc = _pipeline("run", nightly / "nightly.yaml", "--runs-dir", nightly / "runs", cwd=nightly)
    assert proc.returncode == 0, proc.stderr
    assert f"cache entry {key} for stage features failed verification" in proc.stderr
    assert "record.json holds null" in proc.stderr
    runs = sorted(p for p in (nightly / "runs" / "nightly").iterdir() if p.name[0].isdigit())
    manifest = read_manifest(runs[-1])
    assert manifest.status == "succeeded"
    assert {name: r.status for name, r in manifest.stages.items()} == {
        "raw": "cached", "split": "cached", "features": "succeeded", "logreg": "cached", "evaluate": "cached"}
    assert json.loads((cache_dir(nightly) / key / "record.json").read_text())["stage"] == "features"


# ---------------------------------------------------------------------------- privacy
@pytest.mark.parametrize("umask", [0o000, 0o022, 0o077])
def test_the_cache_folder_is_private_whatever_the_umask(tmp_path, umask):
    old = os.umask(umask)
    try:
        cache = StageCache(tmp_path / "runs" / "p" / ".cache")
        small_entry(cache, "d" * 32)
    finally:
        os.umask(old)
    assert stat.S_IMODE(cache.root.stat().st_mode) == 0o700


def test_a_cache_made_before_is_made_private_by_the_next_store(tmp_path):
    root = tmp_path / ".cache"
    root.mkdir(mode=0o755)
    os.chmod(root, 0o777)
    small_entry(StageCache(root), "e" * 32)
    assert stat.S_IMODE(root.stat().st_mode) == 0o700


# ---------------------------------------------------------------------------- the limit
@pytest.mark.parametrize(("text", "size"), [
    ("5GiB", 5 * 2**30), ("500MB", 500 * 10**6), ("1.5G", 1_500_000_000), ("20 KiB", 20 * 1024),
    ("1048576", 2**20), (4096, 4096), (0, 0), ("0", 0), ("none", None), ("None", None), (None, None),
    ("unlimited", None),
])
def test_sizes_parse(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["-1", -1, "lots", "5 parsecs", "1e9", True, 1.5, "", "GiB"])
def test_bad_sizes_are_config_errors_naming_the_key(text, nightly):
    with pytest.raises(ValueError):
        parse_size(text)
    with pytest.raises(ConfigError, match="cache.max_size"):
        load_config(nightly / "nightly.yaml", overrides=[f"cache.max_size={json.dumps(text)}"])


def test_a_bad_size_in_the_environment_is_a_config_error_naming_it(nightly, monkeypatch):
    monkeypatch.setenv(ENV_MAX_SIZE, "5 parsecs")
    with pytest.raises(ConfigError, match=ENV_MAX_SIZE):
        run_night(nightly)
    assert not (nightly / "runs").exists()                  # refused before anything was written


def test_the_limit_defaults_to_5_gib_and_the_environment_and_argument_override_it(nightly):
    config = load_config(nightly / "nightly.yaml")
    assert config.cache.max_size == "5GiB"
    assert resolve_max_size(config.cache.max_size, settings=Settings()) == 5 * 2**30
    assert resolve_max_size(config.cache.max_size, settings=Settings.from_environ({ENV_MAX_SIZE: "1MB"})) == 10**6
    assert resolve_max_size(config.cache.max_size, "none", settings=Settings.from_environ({ENV_MAX_SIZE: "1MB"})) is None
    nulled = load_config(nightly / "nightly.yaml", overrides=["cache.max_size=null"])
    assert nulled.cache.max_size == "none"          # stays "no limit" through the run's config.yaml
    assert resolve_max_size(nulled.cache.max_size, settings=Settings()) is None


def test_a_hit_marks_the_entry_used_without_rewriting_it(tmp_path):
    cache = StageCache(tmp_path / ".cache")
    entry = small_entry(cache, "f" * 32)
    long_ago = time.time() - 10_000
    os.utime(entry, (long_ago, long_ago))
    output_mtime = (entry / "output.pkl").stat().st_mtime_ns
    assert cache.lookup("f" * 32, stage="features") is not None
    assert entry.stat().st_mtime > long_ago + 5_000
    assert (entry / "output.pkl").stat().st_mtime_ns == output_mtime


def test_eviction_takes_the_least_recently_used_and_spares_the_runs_own(tmp_path):
    cache = StageCache(tmp_path / ".cache")
    keys = [str(i) * 32 for i in range(4)]
    now = time.time()
    for age, key in zip((4000, 3000, 2000, 1000), keys):
        os.utime(small_entry(cache, key), (now - age, now - age))
    assert cache.lookup(keys[0], stage="features") is not None          # used now: the newest
    size = cache.entries()[0].size
    evicted = cache.trim(2 * size, keep={keys[1]})
    assert [e.key for e in evicted] == [keys[2], keys[3]]
    assert {e.key for e in cache.entries()} == {keys[0], keys[1]}
    assert not [p for p in cache.root.iterdir() if p.name.startswith(".")]
    assert cache.trim(None) == [] and len(cache.entries()) == 2         # none: never evicts


def test_a_run_with_limit_zero_keeps_exactly_what_it_wrote_or_used(nightly):
    first = run_night(nightly)
    write_data(nightly, night=1)
    second = run_night(nightly)
    assert entry_keys(nightly) == set(keys_of(first).values()) | set(keys_of(second).values())   # 5 GiB: all stay
    write_data(nightly, night=2)
    third = run_night(nightly, cache_max_size=0)
    assert entry_keys(nightly) == set(keys_of(third).values())
    # A change downstream: the run uses raw/split/features from the cache and writes the rest.
    fourth = run_night(nightly, overrides=["stages.logreg.params.C=0.5"], cache_max_size="0")
    statuses = {name: r.status for name, r in read_manifest(fourth.run_dir).stages.items()}
    assert statuses == {"raw": "cached", "split": "cached", "features": "cached",
                        "logreg": "succeeded", "evaluate": "succeeded"}
    assert entry_keys(nightly) == set(keys_of(fourth).values())
    assert stat.S_IMODE(cache_dir(nightly).stat().st_mode) == 0o700


def test_the_environment_limit_applies_to_a_run(nightly, monkeypatch):
    run_night(nightly)
    write_data(nightly, night=1)
    monkeypatch.setenv(ENV_MAX_SIZE, "0")
    latest = run_night(nightly)
    assert entry_keys(nightly) == set(keys_of(latest).values())


def test_trim_removes_stale_leftovers_and_spares_a_write_in_progress(tmp_path):
    cache = StageCache(tmp_path / ".cache")
    small_entry(cache, "9" * 32)
    stale, fresh = cache.root / ".tmp-old-1-aa", cache.root / ".tmp-new-2-bb"
    aside = [cache.root / ".corrupt-x-cc", cache.root / ".evicted-y-dd"]
    for folder in (stale, fresh, *aside):
        folder.mkdir()
        (folder / "output.pkl").write_bytes(b"x")
    old = time.time() - STALE_TMP_SECONDS - 60
    os.utime(stale, (old, old))
    cache.trim(None)
    assert sorted(p.name for p in cache.root.iterdir()) == sorted([fresh.name, "9" * 32])


def test_a_removal_that_stops_half_way_leaves_only_hidden_remains(tmp_path, monkeypatch):
    """Eviction renames an entry aside before deleting it: a run looking it up concurrently finds
    the whole entry or nothing, and what a failed deletion leaves is finished next time."""
    cache = StageCache(tmp_path / ".cache")
    small_entry(cache, "7" * 32)
    small_entry(cache, "8" * 32)
    monkeypatch.setattr("pipeline.cache.entries.shutil.rmtree", lambda *a, **k: None)
    assert [e.key for e in cache.trim(0, keep={"8" * 32})] == ["7" * 32]
    assert cache.lookup("7" * 32, stage="x") is None
    assert [e.key for e in cache.entries()] == ["8" * 32]
    monkeypatch.undo()
    assert [p.name.split("-")[0] for p in cache.remove_leftovers()] == [".evicted"]
    vanished = cache.entries()[0]
    (cache.root / vanished.key).rename(tmp_path / "gone")                  # removed by someone else
    assert cache.evict(vanished) is False


# ---------------------------------------------------------------------------- pipeline cache
def test_cache_list_shows_each_entry_with_the_runs_that_use_it(nightly):
    first = run_night(nightly)
    again = run_night(nightly)                                 # all cached: the same keys
    result = cli("cache", "list", "--runs-dir", str(nightly / "runs"), "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert {row["key"] for row in rows} == set(keys_of(first).values())
    for row in rows:
        assert row["pipeline"] == "nightly" and row["stage"] in STAGES and row["size_bytes"] > 0
        assert row["runs"] == [again.run_id, first.run_id] and row["problem"] is None
        assert row["created"] and row["last_used"]
    text = cli("cache", "list", "--runs-dir", str(nightly / "runs"))
    assert text.exit_code == 0
    assert all(key in text.stdout for key in keys_of(first).values())
    assert "nightly: 5 entries" in text.stdout


def test_cache_prune_evicts_to_a_size_and_dry_run_removes_nothing(nightly):
    run_night(nightly)
    write_data(nightly, night=1)
    newer = run_night(nightly)
    before = entry_keys(nightly)
    dry = cli("cache", "prune", "--runs-dir", str(nightly / "runs"), "--max-size", "0", "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert entry_keys(nightly) == before and dry.stdout.count("would drop cache entry") == 10
    size = sum(e.size for e in StageCache(cache_dir(nightly)).entries() if e.key in keys_of(newer).values())
    pruned = cli("cache", "prune", "--runs-dir", str(nightly / "runs"), "--max-size", str(size))
    assert pruned.exit_code == 0, pruned.output
    assert entry_keys(nightly) == set(keys_of(newer).values())          # the older night was used least recently
    bad = cli("cache", "prune", "--runs-dir", str(nightly / "runs"), "--max-size", "lots")
    assert bad.exit_code == ExitCode.CONFIG and "--max-size" in bad.stderr


def test_cache_prune_unreferenced_drops_what_no_run_uses(nightly):
    import shutil

    old = run_night(nightly)
    write_data(nightly, night=1)
    new = run_night(nightly)
    shutil.rmtree(old.run_dir)
    result = cli("cache", "prune", "--runs-dir", str(nightly / "runs"), "--unreferenced", "--max-size", "none")
    assert result.exit_code == 0, result.output
    assert entry_keys(nightly) == set(keys_of(new).values())
    assert "no run uses it" in result.stdout


def test_cache_clear_refuses_while_a_run_holds_the_lock(nightly):
    first = run_night(nightly)
    with RunLock(nightly / "runs" / "nightly" / ".lock", wait=0):
        held = cli("cache", "clear", "--runs-dir", str(nightly / "runs"), "--pipeline", "nightly")
    assert held.exit_code == ExitCode.LOCKED and "holds" in held.stderr
    assert entry_keys(nightly) == set(keys_of(first).values())
    cleared = cli("cache", "clear", "--runs-dir", str(nightly / "runs"), "--pipeline", "nightly")
    assert cleared.exit_code == 0, cleared.output
    assert entry_keys(nightly) == set() and (first.run_dir / "manifest.json").is_file()
    unknown = cli("cache", "clear", "--runs-dir", str(nightly / "runs"), "--pipeline", "nope")
    assert unknown.exit_code == ExitCode.CONFIG and "nope" in unknown.stderr


# ---------------------------------------------------------------------------- runs prune
def test_runs_prune_drops_the_entries_no_kept_run_uses(nightly):
    results = []
    for night in range(3):
        write_data(nightly, night=night)
        results.append(run_night(nightly))
    everything = entry_keys(nightly)
    runs_dir = str(nightly / "runs")
    dry = cli("runs", "prune", "--keep", "1", "--runs-dir", runs_dir, "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert entry_keys(nightly) == everything and dry.stdout.count("would drop cache entry") == 10
    with RunLock(nightly / "runs" / "nightly" / ".lock", wait=0):
        held = cli("runs", "prune", "--keep", "2", "--runs-dir", runs_dir)
    assert held.exit_code == 0 and "cache not pruned" in held.stdout
    assert entry_keys(nightly) == everything
    pruned = cli("runs", "prune", "--keep", "1", "--runs-dir", runs_dir)
    assert pruned.exit_code == 0, pruned.output
    assert entry_keys(nightly) == set(keys_of(results[-1]).values())
    assert "nightly: cache: 10 entries" in pruned.stdout


def test_thirty_nights_of_new_data_reach_a_steady_footprint(nightly):
    """A nightly job: new data every night retrains the pipeline, then ``runs prune --keep 3``.
    After the first few nights the pipeline folder neither grows nor keeps anything extra."""
    keep = 3
    footprint, entries, runs = [], [], []
    for night in range(30):
        write_data(nightly, night=night)
        run_night(nightly)
        result = cli("runs", "prune", "--keep", str(keep), "--runs-dir", str(nightly / "runs"))
        assert result.exit_code == 0, result.output
        footprint.append(disk_bytes(nightly / "runs" / "nightly"))
        entries.append(len(entry_keys(nightly)))
        runs.append(sum(1 for p in (nightly / "runs" / "nightly").iterdir() if p.name[0].isdigit()))
    settled = keep + 1
    assert runs[settled:] == [keep] * (30 - settled)
    assert entries[settled:] == [keep * len(STAGES)] * (30 - settled)
    assert max(footprint[settled:]) <= 1.1 * min(footprint[settled:])
    assert footprint[-1] <= 1.1 * footprint[settled]


def disk_bytes(folder: Path) -> int:
    """Bytes under ``folder``, each file once (artifacts are hard-linked from the cache)."""
    seen, total = set(), 0
    for path in folder.rglob("*"):
        info = path.lstat()
        if stat.S_ISREG(info.st_mode) and (info.st_dev, info.st_ino) not in seen:
            seen.add((info.st_dev, info.st_ino))
            total += info.st_size
    return total
