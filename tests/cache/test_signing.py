"""Signed stage-cache entries: with a signing key set, an entry is used only when its
``record.json`` carries a signature made with that key, and nothing is unpickled before that.

The record holds the sha256 of every file of the entry, so its signature covers the pickled
output, the buffers and the artifacts: someone who can write the runs folder can replace an
output and recompute its checksums, but cannot sign the new record.
"""

from __future__ import annotations

import hashlib
import json
import logging
import pickle
from pathlib import Path

import pytest

from pipeline import run_pipeline
from pipeline.cache import ENV_MAX_SIZE, StageCache
from pipeline.core.errors import DataError
from pipeline.engine.executors import load_cached
from pipeline.runs.record import read_manifest
from pipeline.runs.signing import KEY_ENV, KEY_FILE_ENV, sign_file, verify_file, verify_run
from tests.conftest import small_config

KEY_A = "a-test-key-of-32-characters-aaaa"
KEY_B = "b-test-key-of-32-characters-bbbb"
KEY = "k" * 32
PAYLOAD = {"rows": list(range(100)), "name": "features"}


@pytest.fixture(autouse=True)
def no_env(monkeypatch):
    for name in (KEY_ENV, KEY_FILE_ENV, ENV_MAX_SIZE):
        monkeypatch.delenv(name, raising=False)


def use_key(monkeypatch, key: str | None) -> None:
    if key is None:
        monkeypatch.delenv(KEY_ENV, raising=False)
    else:
        monkeypatch.setenv(KEY_ENV, key)


def store(cache: StageCache, key: str, payload=PAYLOAD, stage: str = "features") -> Path:
    cache.store(key, payload, None, {"stage": stage, "kind": "features", "facts": {}, "run_record": {}})
    return cache.root / key


class Plant:
    """A pickle that, when loaded, writes a marker file: code an attacker wants run."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (self.marker, "ran"))


def plant_pickle(entry: Path, marker: Path) -> None:
    """Replace the entry's output with ``Plant`` and recompute its checksum in record.json (what a
    writer of the runs folder can do; only the signature cannot be redone without the key)."""
    (entry / "output.pkl").write_bytes(pickle.dumps(Plant(marker), protocol=5))
    record = json.loads((entry / "record.json").read_text())
    record["files"]["output.pkl"] = hashlib.sha256((entry / "output.pkl").read_bytes()).hexdigest()
    (entry / "record.json").write_text(json.dumps(record, indent=2))


# ---------------------------------------------------------------------------- store and lookup
def test_an_entry_signed_with_the_key_is_used_under_that_key(tmp_path, monkeypatch):
    use_key(monkeypatch, KEY_A)
    cache = StageCache(tmp_path / ".cache")
    entry = store(cache, "1" * 32)
    assert (entry / "record.json.sig").is_file()
    assert verify_file(entry / "record.json", KEY_A.encode()) == (entry / "record.json").read_bytes()
    found = cache.lookup("1" * 32, stage="features")
    assert found is not None and found.load_output() == PAYLOAD
    assert not [p for p in cache.root.iterdir() if p.name.startswith(".")]     # nothing left in the folder


@pytest.mark.parametrize(("stored_with", "why"), [
    (KEY_B, "signed with another key"),
    (None, "not signed"),
])
def test_an_entry_signed_with_another_key_or_unsigned_is_set_aside(tmp_path, monkeypatch, caplog, stored_with, why):
    cache = StageCache(tmp_path / ".cache")
    use_key(monkeypatch, stored_with)
    entry = store(cache, "2" * 32, stage="old-name")
    use_key(monkeypatch, KEY_A)
    with caplog.at_level(logging.WARNING, logger="pipeline"):
        assert cache.lookup("2" * 32, stage="features") is None
    assert f"cache entry {'2' * 32} for stage features failed verification" in caplog.text
    assert why in caplog.text and "recomputing" in caplog.text
    assert not entry.exists() and list(cache.root.iterdir()) == []
    store(cache, "2" * 32)                                     # recomputed: stored again, signed with A
    assert cache.lookup("2" * 32, stage="features") is not None


@pytest.mark.parametrize("stored_with", [KEY_A, KEY_B, None])
def test_a_planted_pickle_with_recomputed_checksums_never_runs_under_the_key(tmp_path, monkeypatch, caplog, stored_with):
    cache = StageCache(tmp_path / ".cache")
    marker = tmp_path / "marker"
    use_key(monkeypatch, stored_with)
    entry = store(cache, "3" * 32)
    plant_pickle(entry, marker)
    use_key(monkeypatch, KEY_A)
    with caplog.at_level(logging.WARNING, logger="pipeline"):
        assert cache.lookup("3" * 32, stage="features") is None
    assert "failed verification" in caplog.text
    assert not marker.exists()
    assert not entry.exists()


def test_without_a_key_the_planted_pickle_would_run(tmp_path, monkeypatch):
    """The control for the test above: the plant is a working attack when nothing is signed."""
    cache = StageCache(tmp_path / ".cache")
    marker = tmp_path / "marker"
    use_key(monkeypatch, KEY_A)
    entry = store(cache, "4" * 32)
    plant_pickle(entry, marker)
    use_key(monkeypatch, None)
    found = cache.lookup("4" * 32, stage="features")
    assert found is not None
    found.load_output()
    assert marker.read_text() == "ran"


def test_a_record_edited_after_signing_is_refused(tmp_path, monkeypatch, caplog):
    use_key(monkeypatch, KEY_A)
    cache = StageCache(tmp_path / ".cache")
    entry = store(cache, "5" * 32)
    record = json.loads((entry / "record.json").read_text())
    (entry / "record.json").write_text(json.dumps({**record, "facts": {"rows": 1}}, indent=2))
    with caplog.at_level(logging.WARNING, logger="pipeline"):
        assert cache.lookup("5" * 32, stage="features") is None
    assert "changed after it was signed" in caplog.text


def test_a_file_the_signed_record_does_not_list_is_refused(tmp_path, monkeypatch, caplog):
    """Artifacts are restored into the run by walking the folder: an extra file would be laundered
    into a run (and its signed manifest) unless a signed entry holds exactly what its record lists."""
    use_key(monkeypatch, KEY_A)
    cache = StageCache(tmp_path / ".cache")
    entry = store(cache, "6" * 32)
    (entry / "artifacts" / "model").mkdir(parents=True)
    (entry / "artifacts" / "model" / "extra.pkl").write_bytes(b"planted")
    with caplog.at_level(logging.WARNING, logger="pipeline"):
        assert cache.lookup("6" * 32, stage="features") is None
    assert "artifacts/model/extra.pkl is not in the signed record" in caplog.text


@pytest.mark.parametrize("signature", [b"", b"null", b"[1]", b'{"algorithm": "md5"}', b"[" * 100_000, b"\xff"])
def test_a_signature_file_that_is_not_one_is_refused_without_a_crash(tmp_path, monkeypatch, caplog, signature):
    use_key(monkeypatch, KEY_A)
    cache = StageCache(tmp_path / ".cache")
    entry = store(cache, "7" * 32)
    (entry / "record.json.sig").write_bytes(signature)
    with caplog.at_level(logging.WARNING, logger="pipeline"):
        assert cache.lookup("7" * 32, stage="features") is None
    assert "record.json.sig is not" in caplog.text


def test_without_a_key_nothing_is_signed_or_checked(tmp_path, monkeypatch):
    cache = StageCache(tmp_path / ".cache")
    entry = store(cache, "8" * 32)
    assert sorted(p.name for p in entry.iterdir()) == ["output.pkl", "record.json"]
    use_key(monkeypatch, KEY_A)
    signed = store(cache, "9" * 32)
    (signed / "record.json.sig").unlink()
    use_key(monkeypatch, None)
    assert cache.lookup("8" * 32, stage="features").load_output() == PAYLOAD
    assert cache.lookup("9" * 32, stage="features").load_output() == PAYLOAD


def test_a_worker_loading_a_refused_entry_names_the_stage(tmp_path, monkeypatch, caplog):
    """``load_cached`` (a cluster worker's lookup) names the stage it loads for, not the record's."""
    cache = StageCache(tmp_path / ".cache")
    store(cache, "c" * 32, stage="old-name")
    use_key(monkeypatch, KEY_A)
    with caplog.at_level(logging.WARNING, logger="pipeline"):
        outcome = load_cached(cache.root, "c" * 32, "features")
    assert outcome.status == "failed"
    assert f"cache entry {'c' * 32} for stage features failed verification" in caplog.text


# ---------------------------------------------------------------------------- signature files of runs
def test_a_deeply_nested_signature_or_signed_manifest_is_a_data_error(tmp_path):
    """json.loads raises RecursionError on deep nesting: that must be a refusal (exit 3), not a crash."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "manifest.json").write_text("[" * 100_000)
    sign_file(run / "manifest.json", KEY.encode())
    with pytest.raises(DataError, match="not valid JSON"):
        verify_run(run, KEY.encode())
    (run / "manifest.json.sig").write_text("[" * 100_000)
    with pytest.raises(DataError, match="not a signature file"):
        verify_run(run, KEY.encode())


# ---------------------------------------------------------------------------- whole runs


def statuses(result) -> dict[str, str]:
    return {name: record.status for name, record in read_manifest(result.run_dir).stages.items()}


def test_runs_reuse_entries_signed_with_their_key_and_recompute_the_others(tmp_path, monkeypatch, caplog):
    lines = ["id,a,b,churn"] + [f"{i},{(i * 7) % 11 / 10},{(i * 3) % 5 / 4},{'yes' if i % 3 == 0 else 'no'}"
                                for i in range(80)]
    (tmp_path / "data.csv").write_text("\n".join(lines) + "\n")
    (tmp_path / "signed.yaml").write_text(small_config("signed", tmp_path / "data.csv"))

    def run():
        return run_pipeline(tmp_path / "signed.yaml", runs_dir=tmp_path / "runs")

    use_key(monkeypatch, KEY_A)
    assert set(statuses(run()).values()) == {"succeeded"}
    assert set(statuses(run()).values()) == {"cached"}
    use_key(monkeypatch, KEY_B)
    with caplog.at_level(logging.WARNING, logger="pipeline"):
        assert set(statuses(run()).values()) == {"succeeded"}
    assert "for stage raw failed verification" in caplog.text and "signed with another key" in caplog.text
    assert set(statuses(run()).values()) == {"cached"}
    use_key(monkeypatch, None)
    assert set(statuses(run()).values()) == {"cached"}                 # no key: signatures are not checked


def test_a_signature_that_is_a_lone_surrogate_is_refused_without_a_crash(tmp_path, monkeypatch, caplog):
    """JSON can spell a string that UTF-8 cannot encode: comparing it must refuse, not raise."""
    forged = b'{"algorithm": "hmac-sha256", "signature": "\\ud800"}'
    run = tmp_path / "run"
    run.mkdir()
    (run / "manifest.json").write_text("{}")
    (run / "manifest.json.sig").write_bytes(forged)
    with pytest.raises(DataError, match="does not match"):
        verify_run(run, KEY.encode())
    use_key(monkeypatch, KEY_A)
    cache = StageCache(tmp_path / ".cache")
    (store(cache, "d" * 32) / "record.json.sig").write_bytes(forged)
    with caplog.at_level(logging.WARNING, logger="pipeline"):
        assert cache.lookup("d" * 32, stage="features") is None
    assert "record.json does not match its signature" in caplog.text
