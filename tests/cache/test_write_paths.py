"""The stage cache's write path, made cheap for large outputs, still gives whole, verified entries.

What is made cheap, and what each test holds it to:

- large buffers (NumPy arrays, Arrow columns) are written beside the pickle stream, hashed from
  memory, and stored once when two entries hold the same bytes (a train stage's output carries
  the feature matrices the features stage already stored);
- Arrow-backed pandas columns are stored chunk by chunk instead of first combined into a copy;
- a stage's artifacts are hard-linked into the entry, not copied.

and what must still hold: an entry loads equal to what was stored (arrays writable as before), is
complete or absent (a failed or killed write leaves no entry, only a hidden ``.tmp-`` folder),
every file of it is verified on lookup, and a hit restores the artifacts into the run.
"""

from __future__ import annotations

import os
import pickle
import resource
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipeline import run_pipeline
from pipeline.cache import STALE_TMP_SECONDS, StageCache
from pipeline.runs.record import read_manifest
from tests.conftest import script_module, small_config

RECORD = {"stage": "features", "kind": "features", "facts": {}, "run_record": {}}
MiB = 1 << 20


def stored(cache: StageCache, key: str, output, artifacts: Path | None = None):
    cache.store(key, output, artifacts, dict(RECORD))
    entry = cache.lookup(key)
    assert entry is not None, f"entry {key} was not stored or failed verification"
    return entry


def files_of(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file())


def disk_bytes(*folders: Path) -> int:
    """Bytes the folders' files hold on disk, a file linked into several of them counted once."""
    seen: dict[tuple[int, int], int] = {}
    for folder in folders:
        for path in files_of(folder):
            info = path.stat()
            seen[(info.st_dev, info.st_ino)] = info.st_size
    return sum(seen.values())


def string_frame(rows: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "id": [f"c{seed}-{i:07d}" for i in range(rows)],
        "plan": rng.choice(["Month-to-month", "One year", "Two year"], rows),
        "charges": rng.random(rows),
        "tenure": rng.integers(0, 72, rows),
    })


# ---------------------------------------------------------------------------- round trips
def test_large_and_small_outputs_load_equal_and_arrays_stay_writable(tmp_path):
    matrix = np.arange(3 * MiB // 4, dtype=np.float32).reshape(-1, 4)      # 3 MiB: out of band
    frame = string_frame(50_000)
    output = {"X": matrix, "frame": frame, "small": np.arange(10), "objects": np.array(["a", None, 3], dtype=object),
              "text": "x" * 100}
    entry = stored(StageCache(tmp_path / ".cache"), "a" * 32, output)
    loaded = entry.load_output()
    np.testing.assert_array_equal(loaded["X"], matrix)
    assert loaded["X"].flags.writeable and loaded["small"].flags.writeable
    pd.testing.assert_frame_equal(loaded["frame"], frame)
    assert list(loaded["objects"]) == ["a", None, 3] and loaded["text"] == output["text"]
    loaded["X"][0, 0] = -1.0                            # a stage may still write to what it loaded
    assert entry.load_output()["X"][0, 0] == 0.0       # ... without changing the entry


def test_read_only_arrays_load_read_only_as_pickle_makes_them(tmp_path):
    array = np.arange(MiB, dtype=np.float64)
    array.flags.writeable = False
    loaded = stored(StageCache(tmp_path / ".cache"), "a" * 32, array).load_output()
    np.testing.assert_array_equal(loaded, array)
    assert loaded.flags.writeable == pickle.loads(pickle.dumps(array, protocol=5)).flags.writeable


# ---------------------------------------------------------------------------- no second copy
def test_arrow_string_columns_are_stored_without_combining_their_chunks(tmp_path, monkeypatch):
    frame = pd.concat([string_frame(30_000, seed=1), string_frame(30_000, seed=2)], ignore_index=True)
    chunks = frame["id"].array._pa_array.num_chunks
    assert chunks == 2, "the test needs a column of several Arrow chunks (pandas' string dtype)"

    def combine(self):
        raise AssertionError("the cache combined an Arrow column's chunks into a copy to store it")

    monkeypatch.setattr(pd.arrays.ArrowExtensionArray, "__getstate__", combine)
    loaded = stored(StageCache(tmp_path / ".cache"), "a" * 32, frame).load_output()
    monkeypatch.undo()
    pd.testing.assert_frame_equal(loaded, frame)
    assert loaded["id"].str.startswith("c").all()       # a working string column, not just equal bytes


def test_many_small_chunks_leave_the_stream_packed_into_a_few_aligned_files(tmp_path):
    """A table read from CSV holds its text in chunks of well under 1 MiB: they go to packed
    buffer files (written after the stage, off its thread), not through the pickle stream."""
    import pyarrow as pa

    from pipeline.cache.output_pickling import ALIGNMENT, LAYOUT_FILE, OUTPUT_FILE, PACK_BYTES

    parts = [pa.array([f"customer-{c:03d}-{i:05d}" for i in range(2_000)]) for c in range(300)]
    column = pd.arrays.ArrowStringArray(pa.chunked_array(parts))
    frame = pd.DataFrame({"id": column, "x": np.arange(600_000, dtype="float64")})
    assert frame["id"].array._pa_array.num_chunks == 300      # ~45 KiB of text a chunk
    text_bytes = sum(chunk.nbytes for chunk in parts)
    entry = stored(StageCache(tmp_path / ".cache"), "a" * 32, frame)
    assert (entry.path / OUTPUT_FILE).stat().st_size < 0.02 * text_bytes
    packed = [p for p in (entry.path / "buffers").iterdir() if p.suffix == ".bin"]
    assert 1 < len(packed) <= 2 + text_bytes // PACK_BYTES    # the 4.6 MiB float column's own file, the packs
    assert (entry.path / LAYOUT_FILE).is_file() and LAYOUT_FILE in entry.record["files"]
    loaded = entry.load_output()
    pd.testing.assert_frame_equal(loaded, frame)
    chunks = loaded["id"].array._pa_array.chunks
    assert len(chunks) == 300 and all(b.address % 16 == 0 for c in chunks for b in c.buffers() if b is not None)
    assert ALIGNMENT % 16 == 0
    assert loaded["id"].str.endswith("01999").sum() == 300     # a working string column


def test_a_changed_byte_in_a_packed_buffer_fails_verification(tmp_path):
    small = [np.zeros(64 << 10, dtype=np.uint8) for _ in range(5)]      # 64 KiB each: packed together
    cache = StageCache(tmp_path / ".cache")
    pending = cache.prepare("a" * 32, small)
    small[3][100] = 1
    pending.finish(None, dict(RECORD))
    assert cache.lookup("a" * 32) is None


def test_a_small_slice_of_a_large_arrow_column_is_stored_small(tmp_path):
    """Chunks that are slices of larger buffers pickle those buffers whole; pandas' own way
    (combine into a copy of the slice) is kept for them."""
    head = string_frame(200_000).iloc[:100]
    entry = stored(StageCache(tmp_path / ".cache"), "a" * 32, head)
    assert disk_bytes(entry.path) < 64 * 1024
    pd.testing.assert_frame_equal(entry.load_output(), head)


def test_the_same_large_buffer_in_two_entries_is_stored_once(tmp_path):
    """A train stage's output holds the feature matrices the features stage stored."""
    matrix = np.random.default_rng(0).random((MiB // 8, 8))            # 8 MiB
    cache = StageCache(tmp_path / ".cache")
    features = stored(cache, "f" * 32, {"X": matrix})
    model = stored(cache, "m" * 32, ("model", {"coef": np.ones(3)}, {"X": matrix}))
    assert disk_bytes(features.path, model.path) < 1.5 * matrix.nbytes
    np.testing.assert_array_equal(model.load_output()[2]["X"], matrix)
    cache.evict(next(e for e in cache.entries() if e.key == "f" * 32))   # removing one keeps the other whole
    again = cache.lookup("m" * 32)
    assert again is not None
    np.testing.assert_array_equal(again.load_output()[2]["X"], matrix)


def test_a_buffer_is_not_linked_to_a_file_that_now_holds_other_bytes(tmp_path):
    """An entry removed and stored again under the same key puts other bytes at the same path."""
    first, other = np.zeros(MiB, np.uint8), np.ones(MiB, np.uint8)
    cache = StageCache(tmp_path / ".cache")
    stored(cache, "a" * 32, first)
    cache.evict(next(e for e in cache.entries() if e.key == "a" * 32))
    stored(cache, "a" * 32, other)
    again = stored(cache, "b" * 32, first)
    np.testing.assert_array_equal(again.load_output(), first)


def test_artifacts_are_linked_into_the_entry_and_restored_on_a_hit(tmp_path):
    stage_dir = tmp_path / "run" / "export"
    (stage_dir / "models" / "xgb").mkdir(parents=True)
    (stage_dir / "predictions.parquet").write_bytes(os.urandom(300_000))
    (stage_dir / "models" / "xgb" / "model.json").write_text('{"trees": 300}')
    entry = stored(StageCache(tmp_path / ".cache"), "a" * 32, {"ok": True}, stage_dir)
    for source in files_of(stage_dir):
        copy = entry.artifacts / source.relative_to(stage_dir)
        assert os.path.samefile(source, copy), f"{copy} is a copy, not a link"
    restored = tmp_path / "run2" / "export"
    entry.restore_artifacts(restored)
    assert {p.relative_to(restored): p.read_bytes() for p in files_of(restored)} == \
           {p.relative_to(stage_dir): p.read_bytes() for p in files_of(stage_dir)}


# ---------------------------------------------------------------------------- verification
def test_a_changed_byte_in_a_large_buffer_fails_verification(tmp_path, caplog):
    cache = StageCache(tmp_path / ".cache")
    entry = stored(cache, "a" * 32, {"X": np.zeros(MiB, dtype=np.uint8)})
    big = max(files_of(entry.path), key=lambda p: p.stat().st_size)
    assert big.name != "output.pkl" and big.stat().st_size == MiB
    with open(big, "r+b") as fh:
        fh.seek(MiB // 2)
        fh.write(b"\x01")
    with caplog.at_level("WARNING", logger="pipeline"):
        assert cache.lookup("a" * 32) is None
    assert "failed verification" in caplog.text and not (cache.root / ("a" * 32)).exists()


def test_a_missing_buffer_file_fails_verification(tmp_path):
    cache = StageCache(tmp_path / ".cache")
    entry = stored(cache, "a" * 32, [np.zeros(MiB, dtype=np.uint8), np.ones(MiB, dtype=np.uint8)])
    big = [p for p in files_of(entry.path) if p.stat().st_size == MiB]
    assert len(big) == 2
    big[-1].unlink()
    assert cache.lookup("a" * 32) is None


# ---------------------------------------------------------------------------- complete or absent
class Unpicklable:
    def __reduce__(self):
        raise TypeError("cannot pickle this")


def test_an_output_that_fails_to_pickle_half_way_leaves_nothing(tmp_path):
    cache = StageCache(tmp_path / ".cache")
    with pytest.raises(TypeError):
        cache.store("a" * 32, (np.zeros(2 * MiB), Unpicklable()), None, dict(RECORD))
    assert list(cache.root.iterdir()) == []


def test_a_full_disk_while_writing_leaves_nothing(tmp_path):
    """RLIMIT_FSIZE makes any write past 2 MiB fail (EFBIG), as a full disk would."""
    script = textwrap.dedent(f"""
        import resource, signal, numpy as np
        from pipeline.cache import StageCache
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (2 << 20, 2 << 20))
        try:
            StageCache({str(tmp_path / ".cache")!r}).store("a" * 32, {{"X": np.ones(4 << 20, np.uint8)}}, None,
                                                         {{"stage": "s", "kind": "features"}})
        except OSError as exc:
            print("OSError", exc.errno)
    """)
    hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
    if hard != resource.RLIM_INFINITY and hard < (2 << 20):
        pytest.skip("the file size limit here is already below what the test sets")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("OSError"), proc.stdout + proc.stderr
    assert list((tmp_path / ".cache").iterdir()) == []


@pytest.mark.parametrize("moment", ["pickling", "writing buffers"])
def test_a_process_killed_while_writing_leaves_only_a_hidden_tmp_folder(tmp_path, moment):
    cache_root = tmp_path / ".cache"
    script = textwrap.dedent(f"""
        import os, signal, numpy as np
        import pipeline.cache as cache
        import pipeline.cache.output_pickling as output_pickling

        class Die:
            def __reduce__(self):
                os.kill(os.getpid(), signal.SIGKILL)

        output = [np.ones(3 << 20, np.uint8), np.zeros(3 << 20, np.uint8)]
        if {moment!r} == "pickling":
            output.append(Die())
        else:
            real, calls = os.link, []
            real_open = open

            def dying_open(path, mode="r", *args, **kwargs):
                if "buffers" in str(path) and "w" in mode:
                    calls.append(path)
                    if len(calls) == 2:          # the first buffer file is written, the second not
                        os.kill(os.getpid(), signal.SIGKILL)
                return real_open(path, mode, *args, **kwargs)

            output_pickling.open = dying_open     # the buffer files are opened there
        cache.StageCache({str(cache_root)!r}).store("a" * 32, output, None, {{"stage": "s", "kind": "features"}})
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    names = [p.name for p in cache_root.iterdir()]
    assert len(names) == 1 and names[0].startswith(".tmp-"), names
    cache = StageCache(cache_root)
    assert cache.lookup("a" * 32) is None and cache.entries() == []
    assert cache.remove_leftovers(now=time.time() + STALE_TMP_SECONDS + 1) and list(cache_root.iterdir()) == []


def test_an_output_changed_after_it_was_read_fails_verification_never_loads_changed(tmp_path):
    """The entry is finished on another thread while the next stage runs: if that stage wrote
    into its input, the entry does not silently hold the changed bytes."""
    array = np.zeros(2 * MiB, dtype=np.uint8)
    cache = StageCache(tmp_path / ".cache")
    pending = cache.prepare("a" * 32, {"X": array})
    assert cache.lookup("a" * 32) is None                # absent until finished
    array[123] = 7
    pending.finish(None, dict(RECORD))
    assert cache.lookup("a" * 32) is None and cache.entries() == []


def test_a_write_stopped_by_sigterm_leaves_nothing(tmp_path, monkeypatch):
    import pipeline.cache.output_pickling as output_pickling
    from pipeline.core.interrupts import Terminated

    cache = StageCache(tmp_path / ".cache")
    pending = cache.prepare("a" * 32, [np.ones(2 * MiB, np.uint8)])
    monkeypatch.setattr(output_pickling, "termination_requested", lambda: True)
    with pytest.raises(Terminated):
        pending.finish(None, dict(RECORD))
    assert list(cache.root.iterdir()) == []


# ---------------------------------------------------------------------------- through a run


def speed_project(folder: Path, rows: int = 3000) -> Path:
    rng = np.random.default_rng(0)
    pd.DataFrame({"id": [f"c{i}" for i in range(rows)], "a": rng.random(rows), "b": rng.random(rows),
                  "plan": rng.choice(["m", "y", "2y"], rows),
                  "churn": rng.choice(["yes", "no"], rows)}).to_csv(folder / "data.csv", index=False)
    (folder / "speed.yaml").write_text(small_config(
        "speed", folder / "data.csv", ops=("standardize: {columns: [a, b]}", "one_hot: {columns: [plan]}"),
        after="  export:\n    kind: export\n    inputs: [logreg]\n"))
    return folder / "speed.yaml"


def test_a_run_returns_only_once_every_entry_it_wrote_is_complete(tmp_path):
    result = run_pipeline(speed_project(tmp_path, rows=200_000), runs_dir=tmp_path / "runs")
    keys = {name: record.cache_key for name, record in read_manifest(result.run_dir).stages.items()}
    cache = StageCache(tmp_path / "runs" / "speed" / ".cache")
    assert sorted(p.name for p in cache.root.iterdir()) == sorted(keys.values())     # no .tmp- left
    for name, key in keys.items():
        assert cache.lookup(key, stage=name) is not None, name
    assert any((cache.root / key / "buffers").is_dir() for key in keys.values())    # large enough to test


def test_an_entry_that_cannot_be_finished_only_warns(tmp_path, monkeypatch, caplog):
    import pipeline.cache.entries as entries

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(entries, "write_buffers", full_disk)            # what PendingEntry.finish calls
    with caplog.at_level("WARNING", logger="pipeline"):
        result = run_pipeline(speed_project(tmp_path), runs_dir=tmp_path / "runs")
    assert result.status == "succeeded"
    assert "stage raw: output not cached (OSError" in caplog.text
    assert list((tmp_path / "runs" / "speed" / ".cache").iterdir()) == []


def test_a_cached_rerun_restores_every_artifact_and_the_same_outputs(tmp_path):
    speed_project(tmp_path)
    first = run_pipeline(tmp_path / "speed.yaml", runs_dir=tmp_path / "runs")
    second = run_pipeline(tmp_path / "speed.yaml", runs_dir=tmp_path / "runs")
    manifest = read_manifest(second.run_dir)
    assert {s.status for s in manifest.stages.values()} == {"cached"}
    assert manifest.artifacts == read_manifest(first.run_dir).artifacts
    assert any(path.startswith("export/") for path in manifest.artifacts)
    pd.testing.assert_frame_equal(second.outputs["raw"], first.outputs["raw"])
    np.testing.assert_array_equal(second.outputs["features"].X["train"], first.outputs["features"].X["train"])


def test_the_benchmark_counts_a_file_linked_into_two_entries_once(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "x.bin").write_bytes(b"x" * 1000)
    os.link(tmp_path / "a" / "x.bin", tmp_path / "b" / "x.bin")
    (tmp_path / "b" / "y.bin").write_bytes(b"y" * 10)
    with script_module("bench_overhead") as bench:
        assert bench.disk_bytes(tmp_path) == 1010
        assert bench.disk_bytes(tmp_path / "missing") == 0
