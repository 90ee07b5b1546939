"""Distributed training defects found against the installed RAPIDS 26.10, reproduced on the CPU.

- A Dask estimator whose constructor takes ``client`` (cuml.dask's) submits a task to every
  worker and waits for it: built inside a one-thread worker's task before that task seceded it
  found no client (a fresh worker) or waited on its own worker forever. A stand-in class with
  the same constructor trains through the real path (registry entry, backend, feature set) on
  a real LocalCluster.
- XGBoost's ``load_model`` leaves the booster on the CPU whatever the estimator says.
- The RMM pool must leave XGBoost (which allocates beside it) room on the device, and the
  workers' host limit room for external memory's host cache.
"""

from __future__ import annotations

import json
import warnings
from typing import Any

import numpy as np
import pandas as pd
import pytest

from pipeline.models import ModelSpec, register_model
from pipeline.models.registry import MODELS

# How long the stand-in's constructor waits for its per-worker tasks before it gives up: a
# hang guard, so the old construction fails the test instead of hanging it.
CONSTRUCTION_WAIT_SECONDS = 30
STAND_IN = "cluster_bound_stand_in"


# ------------------------------------------------------------------ a cuml.dask-like estimator
def _ready() -> bool:
    return True


class ClusterBoundEstimator:
    """Constructed like ``cuml.dask.ensemble.RandomForestClassifier``: ``client`` or the
    default client, then one task per worker, waited for (cuML builds a model on each)."""

    def __init__(self, *, client: Any = None, random_state: int | None = None, **kwargs: Any) -> None:
        from distributed import default_client, wait

        from pipeline.backends.clusters.startup import cluster_workers

        self.client = default_client() if client is None else client
        self.random_state = random_state
        futures = [self.client.submit(_ready, workers=[w], allow_other_workers=False, pure=False)
                   for w in cluster_workers(self.client)]
        wait(futures, timeout=CONSTRUCTION_WAIT_SECONDS)
        self.workers_ = len(futures)

    def fit(self, X: Any, y: Any) -> ClusterBoundEstimator:
        self.positive_rate_ = float(self.client.compute(y.mean()).result())
        return self

    def predict_proba(self, X: Any) -> Any:
        return X.map_partitions(_constant_scores, self.positive_rate_,
                                meta=pd.DataFrame({"0": [], "1": []}, dtype="float64"))


def _constant_scores(part: pd.DataFrame, rate: float) -> pd.DataFrame:
    return pd.DataFrame({"0": [1 - rate] * len(part), "1": [rate] * len(part)}, dtype="float64")


STAND_IN_SPEC = ModelSpec(
    name=STAND_IN,
    cpu_class=f"{__name__}:ClusterBoundEstimator",
    dask_cpu_class=f"{__name__}:ClusterBoundEstimator",
    description="test stand-in for a cuml.dask estimator",
)


def _train_in_a_worker_task(features: Any) -> tuple[int, float]:
    """A train stage's work as the Dask executor runs it: inside a task on a worker."""
    from pipeline.stages import train_model

    register_model(STAND_IN_SPEC)          # this worker process's registry
    trained = train_model(features, STAND_IN, seed=1)
    return trained.estimator.workers_, trained.estimator.positive_rate_


def _start_worker_client() -> bool:
    """What any earlier computation through the cluster leaves on a worker: its client."""
    from distributed import get_client

    get_client()
    return True


@pytest.fixture
def one_thread_cluster():
    """A fresh LocalCluster per test: two worker processes with one thread each, on 127.0.0.1."""
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address="127.0.0.1:0") as cluster, Client(cluster) as client:
        yield client


@pytest.fixture
def partitioned_features():
    import dask.dataframe as dd

    from pipeline.features.ops import Standardize
    from pipeline.stages import build_features, split_frame

    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"a": rng.normal(size=400), "b": rng.normal(size=400)})
    frame["y"] = (frame["a"] + rng.normal(scale=0.5, size=400) > 0).astype("int64")
    data = split_frame(dd.from_pandas(frame, npartitions=4), "y", test=0.25, seed=3)
    return build_features(data, [Standardize(columns=["a", "b"])])


@pytest.fixture
def stand_in_registered():
    previous = MODELS.get(STAND_IN)
    register_model(STAND_IN_SPEC)
    yield
    if previous is None:
        MODELS.pop(STAND_IN, None)
    else:
        MODELS[STAND_IN] = previous


@pytest.mark.slow
@pytest.mark.parametrize("worker_has_a_client", [False, True], ids=["fresh-worker", "worker-with-a-client"])
def test_a_cluster_bound_estimator_trains_inside_a_one_thread_worker_task(
        one_thread_cluster, partitioned_features, stand_in_registered, worker_has_a_client):
    """Built before the task secedes, the constructor raised 'No clients found' on a fresh
    worker and, once the worker had a client, waited on its own busy thread (here: until the
    stand-in's bounded wait gave up)."""
    client = one_thread_cluster
    worker = sorted(client.scheduler_info(n_workers=-1)["workers"])[0]
    if worker_has_a_client:
        assert client.submit(_start_worker_client, workers=[worker], pure=False).result()
    future = client.submit(_train_in_a_worker_task, partitioned_features, workers=[worker],
                           allow_other_workers=False, pure=False)
    workers, rate = future.result(timeout=3 * CONSTRUCTION_WAIT_SECONDS)
    assert workers == 2
    expected = float(partitioned_features.y["train"].mean().compute())
    assert rate == pytest.approx(expected)


@pytest.mark.slow
def test_a_cluster_bound_estimator_trains_from_the_client_process(
        one_thread_cluster, partitioned_features, stand_in_registered):
    """Library use: no worker task, the process's default client is the one passed."""
    from pipeline.stages import train_model

    trained = train_model(partitioned_features, STAND_IN, seed=1)
    assert trained.estimator.client is None           # the fitted estimator pickles without it
    assert trained.estimator.workers_ == 2
    assert trained.scores["test"].shape == (partitioned_features.rows()["test"],)


# ------------------------------------------------------------------ the booster's device after loading
def _trained_raw_model() -> bytes:
    import xgboost

    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 3)).astype("float32")
    matrix = xgboost.DMatrix(X, label=(X[:, 0] > 0).astype("int64"))
    booster = xgboost.train({"objective": "binary:logistic", "max_depth": 2, "device": "cpu"}, matrix, 3)
    return bytes(booster.save_raw("ubj"))


def _booster_device(booster: Any) -> str:
    return json.loads(booster.save_config())["learner"]["generic_param"]["device"]


def _gpu_refusal(caught: list[warnings.WarningMessage]) -> bool:
    """XGBoost's warning when a booster is set to a CUDA device on a machine without one: the
    only trace the setting leaves there (the configuration falls back to 'cpu')."""
    return any("No visible GPU" in str(w.message) or "Device is changed from GPU" in str(w.message)
               for w in caught)


def test_the_model_trained_with_external_memory_keeps_the_estimators_cuda_device():
    """load_model resets the booster to the CPU; the loaded booster must be set to 'cuda' again
    (on a machine with a GPU its configuration says so; without one, XGBoost says it fell back)."""
    from xgboost.dask import DaskXGBClassifier

    from pipeline.distributed.xgboost_external import load_trained_model

    estimator = DaskXGBClassifier(device="cuda", tree_method="hist")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_trained_model(estimator, _trained_raw_model())
        device = _booster_device(estimator.get_booster())     # XGBoost configures (and warns) here
    assert device.startswith("cuda") or _gpu_refusal(caught)
    assert estimator.n_classes_ == 2                   # the model itself loaded


def test_the_model_trained_with_external_memory_stays_on_the_cpu_there():
    from xgboost.dask import DaskXGBClassifier

    from pipeline.distributed.xgboost_external import load_trained_model

    estimator = DaskXGBClassifier(device="cpu", tree_method="hist")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_trained_model(estimator, _trained_raw_model())
        device = _booster_device(estimator.get_booster())
    assert device == "cpu" and not _gpu_refusal(caught)
    scores = estimator.get_booster().inplace_predict(np.array([[-2.0, 0, 0], [2.0, 0, 0]], dtype="float32"))
    assert scores[0] < 0.5 < scores[1]


def test_the_xgboost_format_loads_the_booster_on_the_device_asked_for(tmp_path):
    """scoring.load_model(..., device=...) goes through the format, which sets the device after
    loading (the CPU backend here; on a GPU machine the GPU backend reads 'cuda')."""
    import xgboost

    from pipeline.backends import get_backend
    from pipeline.models.formats import XGBOOST_JSON

    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 3)).astype("float32")
    model = xgboost.XGBClassifier(n_estimators=3, max_depth=2).fit(X, (X[:, 0] > 0).astype("int64"))
    backend = get_backend("cpu")
    _, meta = XGBOOST_JSON.save(model, tmp_path, backend=backend)
    predictor = XGBOOST_JSON.load(tmp_path, meta, backend=backend)
    assert _booster_device(predictor.estimator.get_booster()) == "cpu"
    np.testing.assert_allclose(predictor(X, None), model.predict_proba(X)[:, 1], rtol=1e-6)


# ------------------------------------------------------------------ GPU worker memory
GiB = 2**30


def _cluster_config(**values: Any) -> Any:
    from pipeline.config.schema import ClusterConfig

    return ClusterConfig(**values)


def _plan(machine: Any = None, **values: Any) -> Any:
    from pipeline.backends.clusters.memory_plan import MachineMemory, plan_gpu_memory

    machine = machine or MachineMemory(device_bytes=80 * GiB, host_bytes=512 * GiB, gpus=4)
    return plan_gpu_memory(_cluster_config(**values), machine)


def test_the_pool_may_not_grow_into_the_room_xgboost_allocates_from():
    plan = _plan(rmm_pool_size="40GiB")
    assert plan.rmm_pool_size == 40 * GiB
    assert plan.rmm_maximum_pool_size == 60 * GiB and plan.xgboost_device_room == 20 * GiB
    assert plan.device_memory_limit == 48 * GiB          # spill at 80% of what the pool may reach
    assert plan.warnings == ()
    assert plan.cluster_options() == {"rmm_maximum_pool_size": 60 * GiB, "device_memory_limit": 48 * GiB}


def test_a_pool_that_leaves_xgboost_no_room_is_kept_and_warned_about():
    plan = _plan(rmm_pool_size="76GiB")
    assert plan.rmm_maximum_pool_size == 76 * GiB and plan.xgboost_device_room == 4 * GiB
    (warning,) = plan.warnings
    assert "cluster.rmm_pool_size 76.00 GiB leaves XGBoost 4.00 GiB" in warning
    assert "at most 60.00 GiB" in warning


def test_a_spill_threshold_above_the_pool_cap_spills_at_the_cap():
    plan = _plan(rmm_pool_size="40GiB", device_memory_limit="70GiB")
    assert plan.device_memory_limit == 60 * GiB
    assert any("device_memory_limit 70.00 GiB is above the RMM pool's cap" in w for w in plan.warnings)
    assert _plan(rmm_pool_size="40GiB", device_memory_limit="30GiB").device_memory_limit is None   # as configured


def test_without_a_pool_or_without_xgboost_nothing_is_capped():
    from pipeline.backends.clusters.memory_plan import MachineMemory, plan_gpu_memory

    assert _plan().cluster_options() == {} and _plan().rmm_maximum_pool_size is None
    machine = MachineMemory(device_bytes=80 * GiB, host_bytes=512 * GiB, gpus=4)
    plan = plan_gpu_memory(_cluster_config(rmm_pool_size="76GiB"), machine, xgboost_on_workers=False)
    assert plan.cluster_options() == {} and plan.warnings == ()


def test_a_fractional_pool_size_is_a_share_of_the_device():
    assert _plan(rmm_pool_size="0.5").rmm_pool_size == 40 * GiB


def test_the_host_limit_leaves_external_memory_its_cache_or_says_so():
    from pipeline.backends.clusters.memory_plan import MachineMemory

    roomy = _plan()                                           # auto: 512 GiB / 4 workers
    assert roomy.memory_limit == 128 * GiB and roomy.warnings == ()
    assert roomy.host_cache_room == int(128 * GiB * 0.95) - 2 * GiB
    tight = _plan(memory_limit="8GiB")
    (warning,) = tight.warnings
    assert "external-memory cache" in warning and "cluster.memory_limit" in warning
    assert "needs at least 20.00 GiB" in warning
    small_host = _plan(MachineMemory(device_bytes=80 * GiB, host_bytes=64 * GiB, gpus=8))
    assert small_host.memory_limit == 8 * GiB and small_host.warnings     # auto, but 8 GPUs share 64 GiB


def test_a_host_limit_the_machine_cannot_give_every_worker_is_warned_about():
    plan = _plan(memory_limit="200GiB")
    assert any("200.00 GiB x 4 workers is more than the machine's 512.00 GiB" in w for w in plan.warnings)


def test_the_cluster_options_carry_the_plan():
    from pipeline.backends.clusters.startup import local_cuda_cluster_options

    config = _cluster_config(rmm_pool_size="40GiB", device_memory_limit="70GiB")
    options = local_cuda_cluster_options(config, _plan(rmm_pool_size="40GiB", device_memory_limit="70GiB"))
    assert options["rmm_pool_size"] == "40GiB" and options["rmm_maximum_pool_size"] == 60 * GiB
    assert options["device_memory_limit"] == 60 * GiB
    assert "rmm_maximum_pool_size" not in local_cuda_cluster_options(config)      # no plan: as configured
    assert options["host"] == "127.0.0.1" and options["dashboard_address"] == "127.0.0.1:0"   # never every interface


def test_the_machine_is_measured_on_the_gpus_the_workers_use(monkeypatch):
    from pipeline.backends.clusters import memory_plan as cluster
    from pipeline.backends.devices import detect

    report = detect.NvmlReport(devices=[detect.GpuDevice(0, "big", 80 * GiB, 0),
                                        detect.GpuDevice(1, "small", 40 * GiB, 0)])
    monkeypatch.setattr(detect, "probe_nvml", lambda: report)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert cluster.machine_memory(_cluster_config()).device_bytes == 40 * GiB          # the smallest
    only_big = cluster.machine_memory(_cluster_config(CUDA_VISIBLE_DEVICES="0"))
    assert (only_big.device_bytes, only_big.gpus) == (80 * GiB, 1)
    assert cluster.machine_memory(_cluster_config(CUDA_VISIBLE_DEVICES=[1])).device_bytes == 40 * GiB
    monkeypatch.setattr(detect, "probe_nvml", lambda: detect.NvmlReport(error="no driver"))
    assert cluster.machine_memory(_cluster_config()) is None


# ------------------------------------------------------------------ the same on a GPU
def _gpu_missing() -> str | None:
    import importlib.util

    from pipeline.backends import available_devices

    if "gpu" not in available_devices():
        return "needs an NVIDIA GPU with RAPIDS installed"
    if importlib.util.find_spec("dask_cuda") is None or importlib.util.find_spec("raft_dask") is None:
        return "needs dask-cuda and raft-dask (the gpu extra)"
    return None


GPU_MISSING = _gpu_missing()
needs_gpu = pytest.mark.skipif(GPU_MISSING is not None, reason=GPU_MISSING or "")


@pytest.mark.slow
@pytest.mark.gpu
@needs_gpu
def test_gpu_partitioned_random_forest_trains_on_a_one_thread_cuda_worker(in_project):
    """cuml.dask's RandomForestClassifier through the train stage on a LocalCUDACluster worker."""
    from pipeline import run_pipeline
    from pipeline.runs.record import read_manifest

    result = run_pipeline("configs/churn_partitioned.yaml", overrides=[
        "device=gpu", "cluster.n_workers=1", "stages.xgb.model=random_forest",
        "stages.xgb.params={n_estimators: 20, max_depth: 8}"], until=["evaluate"])
    manifest = read_manifest(result.run_dir)
    assert manifest.status == "succeeded"
    assert manifest.stages["xgb"].facts["estimator"].startswith("cuml.dask.ensemble")
    assert manifest.metrics["models"]["xgb"]["roc_auc"] > 0.75


@pytest.mark.gpu
@needs_gpu
def test_gpu_a_loaded_external_memory_model_predicts_device_data_on_the_device():
    """A CPU booster given CuPy data warns that it falls back to a host copy; after loading
    on the estimator's device it predicts there."""
    import cupy
    from xgboost.dask import DaskXGBClassifier

    from pipeline.distributed.xgboost_external import load_trained_model

    estimator = DaskXGBClassifier(device="cuda", tree_method="hist")
    load_trained_model(estimator, _trained_raw_model())
    assert _booster_device(estimator.get_booster()).startswith("cuda")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scores = estimator.get_booster().inplace_predict(cupy.asarray([[-2.0, 0, 0], [2.0, 0, 0]], dtype="float32"))
    assert isinstance(scores, cupy.ndarray)
    assert not [w for w in caught if "mismatched devices" in str(w.message)]


def _fill_pool_then_train_xgboost() -> dict[str, Any]:
    """On a GPU worker: take device memory through the RMM pool (CuPy) until it refuses, then
    train XGBoost on the device, which allocates beside the pool."""
    import cupy
    import xgboost

    held, chunk = [], 256 * 2**20
    while True:
        try:
            held.append(cupy.empty(chunk, dtype="uint8"))
        except Exception:               # noqa: BLE001 - RMM's MemoryError or CuPy's OutOfMemoryError
            break
    X = cupy.random.default_rng(0).standard_normal((200_000, 20), dtype="float32")
    y = (X[:, 0] > 0).astype("float32")
    booster = xgboost.train({"device": "cuda", "objective": "binary:logistic", "max_depth": 6},
                            xgboost.QuantileDMatrix(X, label=y), num_boost_round=20)
    result = {"pool_bytes": len(held) * chunk, "trees": booster.num_boosted_rounds()}
    del held
    return result


@pytest.mark.slow
@pytest.mark.gpu
@needs_gpu
def test_gpu_xgboost_trains_beside_a_full_rmm_pool():
    """With the pool capped (plan_gpu_memory), a pool grown as far as it may still leaves
    XGBoost room; uncapped it grew to the whole device and XGBoost ran out of memory."""
    from pipeline.backends.clusters.startup import open_cluster

    session = open_cluster(_cluster_config(n_workers=1, rmm_pool_size="0.5"), "gpu")
    try:
        plan = session.details["gpu_memory"]
        result = session.client.submit(_fill_pool_then_train_xgboost, pure=False).result()
    finally:
        session.close()
    assert result["trees"] == 20
    assert result["pool_bytes"] <= plan["rmm_maximum_pool_size"]
    assert plan["xgboost_device_room"] >= 0.2 * plan["device_bytes"]
