"""Feature ops and the model matrix on every core: same results as one thread, bit for bit."""

from __future__ import annotations

import threading

import numpy as np
import pandas as pd
import pytest

from pipeline.backends import backend_for
from pipeline.backends import matrices
from pipeline.backends.cpu import CpuBackend
from pipeline.core.errors import ConfigError, DataError
from pipeline.core.threads import THREADS_ENV, available_cores, map_in_threads, thread_count
from pipeline.features.workflow import FeatureWorkflow


# ------------------------------------------------------------------ the pool
def test_thread_count_is_the_available_cores_unless_the_environment_says(monkeypatch):
    monkeypatch.delenv(THREADS_ENV, raising=False)
    assert thread_count() == available_cores() >= 1
    monkeypatch.setenv(THREADS_ENV, "3")
    assert thread_count() == 3


@pytest.mark.parametrize("value", ["0", "-2", "two", "1.5"])
def test_a_bad_thread_count_is_a_config_error_naming_the_variable(monkeypatch, value):
    monkeypatch.setenv(THREADS_ENV, value)
    with pytest.raises(ConfigError, match=THREADS_ENV):
        thread_count()


def test_results_come_back_in_order_from_several_threads(monkeypatch):
    monkeypatch.setenv(THREADS_ENV, "3")
    barrier = threading.Barrier(3, timeout=30)

    def work(i: int) -> tuple[int, str]:
        if i < 3:
            barrier.wait()             # the first three calls can only pass together, on three threads
        return i * i, threading.current_thread().name

    results = map_in_threads(work, range(8))
    assert [r for r, _ in results] == [i * i for i in range(8)]
    assert len({name for _, name in results[:3]}) == 3


def test_one_thread_runs_in_the_caller(monkeypatch):
    monkeypatch.setenv(THREADS_ENV, "1")
    caller = threading.current_thread().name
    assert {name for name in map_in_threads(lambda _: threading.current_thread().name, range(4))} == {caller}


def test_the_first_error_in_item_order_is_raised_after_every_call_finished(monkeypatch):
    monkeypatch.setenv(THREADS_ENV, "2")
    finished = []

    def work(i: int) -> int:
        if i in (1, 3):
            raise ValueError(f"item {i}")
        finished.append(i)
        return i

    with pytest.raises(ValueError, match="item 1"):
        map_in_threads(work, range(6))
    assert sorted(finished) == [0, 2, 4, 5]


def test_a_map_inside_a_pool_thread_runs_there_instead_of_waiting_for_the_pool(monkeypatch):
    monkeypatch.setenv(THREADS_ENV, "2")

    def outer(i: int) -> list[int]:
        # With two pool threads both busy here, a nested map that queued work would wait forever.
        return map_in_threads(lambda j: i * 10 + j, range(3))

    assert map_in_threads(outer, range(2)) == [[0, 1, 2], [10, 11, 12]]


# ------------------------------------------------------------------ category codes
@pytest.mark.parametrize("dtype", ["str", "string[pyarrow]", "string[python]", "object", "large_string[pyarrow]"])
def test_text_category_codes_match_the_index_lookup(dtype):
    values = ["b", None, "a", "c", "a", "", "B", "b"]
    series = pd.Series(values, dtype=dtype)
    categories = ["a", "b", ""]
    codes = CpuBackend().category_codes(series, categories)
    assert codes.dtype == "int32"
    assert codes.tolist() == [2, 0, 1, 0, 1, 3, 0, 2]
    expected = pd.Index(categories, dtype=series.dtype).get_indexer(series) + 1
    assert codes.tolist() == expected.tolist()


def test_category_codes_without_categories_and_with_ones_the_dtype_cannot_hold():
    backend = CpuBackend()
    assert backend.category_codes(pd.Series(["a", None]), []).tolist() == [0, 0]
    # A fitted category of another type (1.5 in an integer column) matches nothing; 2 still does.
    assert backend.category_codes(pd.Series([1, 2, 3]), [2, 1.5]).tolist() == [0, 1, 0]


# ------------------------------------------------------------------ the ops
def _table(rows: int = 6000) -> tuple[pd.DataFrame, pd.Series]:
    rng = np.random.default_rng(7)
    frame = pd.DataFrame({
        "plan": rng.choice(["basic", "plus", "pro", "max"], rows),
        "region": pd.Series(rng.choice(["n", "s", "e", "w", "x"], rows, p=[.4, .3, .2, .095, .005])),
        "channel": rng.choice(["web", "shop", "phone"], rows),
        "age": rng.normal(40, 12, rows),
        "spend": rng.gamma(2.0, 50.0, rows),
        "visits": rng.integers(0, 30, rows),
    })
    frame.loc[::13, "region"] = None
    frame.loc[::17, "spend"] = np.nan
    labels = pd.Series((rng.random(rows) < 0.3).astype("int64"))
    return frame, labels


OPS = [
    {"fill_missing": {"columns": ["spend"], "strategy": "median", "indicator": True}},
    {"log1p": {"columns": ["spend"]}},
    {"clip": {"columns": ["age"]}},
    {"quantile_bin": {"columns": ["visits"], "bins": 5}},
    {"one_hot": {"columns": ["plan", "region"], "min_frequency": 0.01, "drop_binary": True}},
    {"target_encode": {"columns": ["channel"], "folds": 3}},
    {"standardize": {"columns": ["age", "spend"]}},
]

TEXT_OPS = [
    {"group_rare": {"columns": ["region", "channel"], "min_frequency": 0.05}},
    {"hash_encode": {"columns": ["region", "visits"], "buckets": 7}},
    {"frequency_encode": {"columns": ["plan", "channel"]}},
]


def _fitted(monkeypatch, threads: str) -> tuple[pd.DataFrame, pd.DataFrame, dict, np.ndarray]:
    monkeypatch.setenv(THREADS_ENV, threads)
    frame, labels = _table()
    workflow = FeatureWorkflow(OPS)
    train = workflow.fit_transform(frame.iloc[:4000].reset_index(drop=True), labels.iloc[:4000])
    test = workflow.transform(frame.iloc[4000:].reset_index(drop=True))
    return train, test, workflow.to_dict(), backend_for(train, None).to_matrix(train)


def test_a_workflow_on_several_threads_gives_exactly_what_one_thread_gives(monkeypatch):
    one = _fitted(monkeypatch, "1")
    many = _fitted(monkeypatch, "4")
    pd.testing.assert_frame_equal(one[0], many[0], check_exact=True)
    pd.testing.assert_frame_equal(one[1], many[1], check_exact=True)
    assert one[2] == many[2]
    assert np.array_equal(one[3], many[3]) and one[3].tobytes() == many[3].tobytes()


def test_text_ops_on_several_threads_give_what_one_thread_gives(monkeypatch):
    frame = _table()[0].drop(columns=["spend"])
    outputs = []
    for threads in ("1", "3"):
        monkeypatch.setenv(THREADS_ENV, threads)
        workflow = FeatureWorkflow(TEXT_OPS)
        outputs.append((workflow.fit_transform(frame), workflow.to_dict()))
    pd.testing.assert_frame_equal(outputs[0][0], outputs[1][0], check_exact=True)
    assert outputs[0][1] == outputs[1][1]


def test_an_error_in_a_thread_names_the_first_bad_column_in_order(monkeypatch):
    monkeypatch.setenv(THREADS_ENV, "4")
    frame = pd.DataFrame({"a": [1.0, 2.0], "b": ["x", "y"], "c": ["p", "q"]})
    with pytest.raises(DataError, match="column 'b' is"):
        FeatureWorkflow([{"standardize": {"columns": ["a", "b", "c"]}}]).fit(frame)


# ------------------------------------------------------------------ the model matrix
@pytest.mark.parametrize("threads", ["1", "3"])
def test_the_matrix_filled_by_row_blocks_equals_the_frame(monkeypatch, threads):
    monkeypatch.setenv(THREADS_ENV, threads)
    monkeypatch.setattr(matrices, "BLOCK_BYTES", 1024)        # many blocks, spans of uneven length
    rng = np.random.default_rng(3)
    rows = 5000
    frame = pd.DataFrame({
        "f64": rng.normal(size=rows),
        "f32": rng.normal(size=rows).astype("float32"),
        "u8": rng.integers(0, 9, rows).astype("uint8"),
        "i64": rng.integers(-5, 5, rows),
        "nullable": pd.array(rng.integers(0, 4, rows), dtype="Int64"),
        "flag": rng.random(rows) < 0.5,
    })
    frame.loc[::7, "nullable"] = pd.NA
    matrix = CpuBackend().to_matrix(frame)
    assert matrix.flags.c_contiguous and matrix.flags.writeable and matrix.dtype == np.float32
    assert np.array_equal(matrix, frame.to_numpy(dtype="float32", na_value=np.nan), equal_nan=True)
    picked = CpuBackend().to_matrix(frame, ["u8", "f64"], dtype="float64")
    assert np.array_equal(picked, frame[["u8", "f64"]].to_numpy(dtype="float64"))


def test_row_spans_cover_every_row_once_in_whole_blocks():
    for rows, parts, block in [(10, 2, 3), (5, 4, 256), (1000, 3, 256), (2_000_000, 2, 9709), (7, 1, 2)]:
        spans = matrices.row_spans(rows, parts, block)
        assert len(spans) <= parts and spans[0][0] == 0 and spans[-1][1] == rows
        assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
        assert all((stop - start) % block == 0 for start, stop in spans[:-1])


def test_local_cluster_workers_run_columns_on_one_thread(monkeypatch):
    """Workers already run partitions side by side: no column threads on top in each."""
    from types import SimpleNamespace

    from distributed import Client

    from pipeline.backends.clusters.startup import _local_cluster

    monkeypatch.setenv(THREADS_ENV, "4")
    config = SimpleNamespace(n_workers=1, threads_per_worker=1, memory_limit="auto")
    with _local_cluster(config) as cluster, Client(cluster) as client:
        assert set(client.run(thread_count).values()) == {1}


# ------------------------------------------------------------------ taking rows
def _every_kind_of_column(rows: int) -> pd.DataFrame:
    rng = np.random.default_rng(5)
    text = pd.array(rng.choice(["a", "bb", None, "ccc"], rows), dtype="str")
    frame = pd.DataFrame({
        "int": rng.integers(0, 100, rows), "float": rng.normal(size=rows),
        "float32": rng.normal(size=rows).astype("float32"), "bool": rng.random(rows) > 0.5,
        "text": text, "object": pd.Series(rng.choice(["x", "y"], rows), dtype=object),
        "category": pd.Categorical(rng.choice(["p", "q", "r"], rows)),
        "nullable": pd.array(np.where(rng.random(rows) > 0.9, None, rng.integers(0, 5, rows)), dtype="Int64"),
        "when": pd.date_range("2026-01-01", periods=rows, freq="min", tz="UTC"),
    }, index=pd.RangeIndex(rows) + 7)
    frame.columns.name = "cols"
    frame.attrs["source"] = "every kind"
    return frame


@pytest.mark.parametrize("threads", ["1", "2", "4"])
def test_a_large_take_on_threads_is_pandas_iloc_column_for_column(monkeypatch, threads):
    from pipeline.backends.cpu import THREADED_TAKE_ROWS

    monkeypatch.setenv(THREADS_ENV, threads)
    frame = _every_kind_of_column(THREADED_TAKE_ROWS + 500)
    positions = np.sort(np.random.default_rng(1).choice(len(frame), THREADED_TAKE_ROWS + 100, replace=False))
    taken = CpuBackend().take(frame, positions)
    expected = frame.iloc[positions].reset_index(drop=True)
    pd.testing.assert_frame_equal(taken, expected, check_exact=True)
    assert taken.attrs == {"source": "every kind"} and taken.columns.name == "cols"
    taken.iloc[0, 0] = -1                                     # a copy: the source frame is untouched
    assert frame.iloc[positions[0], 0] != -1


def test_a_small_take_or_repeated_names_go_through_iloc():
    frame = _every_kind_of_column(1000)
    positions = np.array([3, 1, 999, 0])
    pd.testing.assert_frame_equal(CpuBackend().take(frame, positions), frame.iloc[positions].reset_index(drop=True))
    repeated = pd.concat([frame[["int"]], frame[["int"]]], axis=1).iloc[np.zeros(40_000, dtype=int) % 1000]
    taken = CpuBackend().take(repeated, np.arange(40_000))
    assert list(taken.columns) == ["int", "int"] and len(taken) == 40_000


# ------------------------------------------------------------------ looking rows up by label
def _keyed(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` on a shuffled index of every third integer, with two more column kinds."""
    rows = len(frame)
    keyed = frame.assign(delay=pd.to_timedelta(np.arange(rows), "s"), small=np.arange(rows, dtype="int8"),
                         arrow=pd.array(np.arange(rows), dtype="int64[pyarrow]"))
    keyed.index = pd.Index(np.random.default_rng(2).permutation(rows) * 3, name="key")
    return keyed


@pytest.mark.parametrize("threads", ["1", "2", "4"])
@pytest.mark.parametrize("missing", [True, False], ids=["labels-missing", "every-label-found"])
def test_a_large_reindex_on_threads_is_pandas_reindex_column_for_column(monkeypatch, threads, missing):
    """Where a label is missing, pandas widens the column (int -> float64, bool -> object) and
    keeps an extension array's dtype; where every label is found, nothing widens."""
    from pipeline.backends.cpu import THREADED_TAKE_ROWS

    monkeypatch.setenv(THREADS_ENV, threads)
    frame = _keyed(_every_kind_of_column(THREADED_TAKE_ROWS + 500))
    rng = np.random.default_rng(3)
    values = rng.integers(0, 3 * len(frame), THREADED_TAKE_ROWS * 2) if missing else \
        rng.choice(frame.index.to_numpy(), THREADED_TAKE_ROWS * 2)
    labels = pd.Index(values, name="key")
    found = CpuBackend().reindex(frame, labels)
    expected = frame.reindex(labels)
    pd.testing.assert_frame_equal(found, expected, check_exact=True)
    assert (found["int"].dtype == "float64") is missing and (found["bool"].dtype == object) is missing
    assert found.attrs == {"source": "every kind"} and found.columns.name == "cols"
    found.iloc[0, 1] = -1.5                                   # a copy: the source frame is untouched
    assert frame["float"].min() != -1.5


def test_a_reindex_on_two_keys_or_repeated_labels_matches_pandas():
    from pipeline.backends.cpu import THREADED_TAKE_ROWS

    rows = THREADED_TAKE_ROWS + 10
    rng = np.random.default_rng(4)
    frame = pd.DataFrame({"x": rng.normal(size=rows), "t": pd.array(rng.choice(["a", "b"], rows), dtype="str")},
                         index=pd.MultiIndex.from_arrays([rng.permutation(rows), rng.integers(0, 2, rows)],
                                                         names=["k", "j"]))
    labels = pd.MultiIndex.from_arrays([rng.integers(0, rows, 2 * rows), rng.integers(0, 2, 2 * rows)],
                                       names=["k", "j"])
    pd.testing.assert_frame_equal(CpuBackend().reindex(frame, labels), frame.reindex(labels), check_exact=True)
    repeated = frame.reset_index(drop=True)
    repeated.index = np.zeros(rows, dtype=int)                # pandas refuses; so does the backend, in its words
    with pytest.raises(ValueError, match="duplicate labels"):
        CpuBackend().reindex(repeated, pd.Index(np.arange(rows)))


@pytest.mark.parametrize("busy, free", [([0.0, 0.0], 2), ([100.0, 0.0], 1), ([60.0, 50.0], 1), ([100.0, 100.0], 1),
                                        ([30.0, 10.0], 2)])
def test_free_cores_are_the_available_ones_less_the_busy_share_and_at_least_one(monkeypatch, busy, free):
    from pipeline.core import threads

    monkeypatch.setattr(threads, "available_cores", lambda: 2)
    assert threads.free_cores(busy) == free


def test_free_cores_samples_this_machine_when_given_no_sample():
    from pipeline.core.threads import available_cores, free_cores

    assert 1 <= free_cores(sample_seconds=0.05) <= available_cores()
