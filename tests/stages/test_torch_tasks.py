"""The torch MLP for every task: multiclass (cross-entropy) and regression (MSE of the
standardised target, predictions in the target's units), their monitors, the per-epoch
callback, and the exported files of each task loading back to the same scores."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch

from pipeline.core.errors import DataError
from pipeline.features import FeatureWorkflow
from pipeline.featuresets import InMemoryFeatures
from pipeline.models.formats import TORCH_STATE_DICT, ClassifierPredictor
from pipeline.stages.spec import StageContext
from pipeline.stages.torch_mlp import TorchSpec, run_torch, train_torch
from pipeline.core.problems import BINARY, REGRESSION, Task
from pipeline.tensors.classifier import MLPClassifier
from pipeline.tensors.learning_curve import history_csv
from pipeline.tensors.mlp import MLPArchitecture
from pipeline.tensors.objectives import Objective
from pipeline.tensors.fit_loop import FitOptions, Split, epoch_line, fit

MULTICLASS = Task("multiclass", classes=("NO", ">30", "<30"))
SIZES = {"train": 800, "valid": 200, "test": 200}
FAST = dict(hidden=[32], epochs=15, batch_size=128, learning_rate=1e-2, dropout=0.0)
TARGET_MEAN, TARGET_SCALE = 500.0, 80.0       # far from 0 / 1: undoing the standardisation shows


def _frame(seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    n = sum(SIZES.values())
    frame = pd.DataFrame({f"x{i}": rng.normal(size=n) for i in range(4)})
    frame["kind"] = rng.choice(["a", "b", "c", "d"], size=n)
    signal = 2 * frame["x0"] - frame["x1"] + 1.5 * (frame["kind"] == "c")
    frame["value"] = TARGET_MEAN + TARGET_SCALE * (signal + rng.normal(scale=0.3, size=n))
    logits = np.column_stack([frame["x0"] * 2, frame["x1"] * 2, 2.0 * (frame["kind"] == "b") - frame["x0"]])
    frame["label"] = (logits + rng.gumbel(scale=0.3, size=logits.shape)).argmax(axis=1)
    return frame


def _features(task: Task, backend, seed: int = 0) -> InMemoryFeatures:
    """Features built as ``build_in_memory`` builds them, with the task set by hand."""
    frame = _frame(seed)
    target = "value" if task.kind == "regression" else "label"
    if task.kind == "binary":
        frame["label"] = (frame["label"] == 0).astype("int64")
    columns = ["x0", "x1", "x2", "x3", "kind"]
    workflow = FeatureWorkflow([{"categorify": {"columns": ["kind"]}}], backend=backend)
    X, y, codes, ids, start = {}, {}, {}, {}, 0
    for name, rows in SIZES.items():
        part = backend.from_pandas(frame.iloc[start:start + rows].reset_index(drop=True))
        start += rows
        out = workflow.fit_transform(part[columns]) if name == "train" else workflow.transform(part[columns])
        X[name] = backend.to_matrix(out, dtype="float32")
        codes[name] = backend.to_matrix(out, columns=["kind"], dtype="int64")
        y[name] = backend.to_vector(part[target], dtype=task.label_dtype)
        ids[name] = None
    return InMemoryFeatures(X=X, y=y, ids=ids, feature_names=list(workflow.output_columns_), workflow=workflow,
                            target=target, id_column=None, backend=backend, categorical_columns=["kind"],
                            codes=codes, task=task)


def _labels(features: InMemoryFeatures, split: str) -> np.ndarray:
    return np.asarray(features.backend.to_host(features.y[split]))


@pytest.fixture
def regression(backend):
    return _features(REGRESSION, backend)


@pytest.fixture
def multiclass(backend):
    return _features(MULTICLASS, backend)


# ------------------------------------------------------------------ learning per task
def test_regression_mlp_beats_the_mean_and_predicts_in_the_targets_units(regression):
    trained = train_torch(regression, seed=1, **FAST)
    y_test = _labels(regression, "test").astype("float64")
    scores = trained.scores["test"]
    assert scores.dtype == np.float64 and scores.shape == (SIZES["test"],)
    rmse = float(np.sqrt(np.mean((scores - y_test) ** 2)))
    assert rmse < 0.5 * y_test.std()                        # the trivial model (the mean) scores std
    assert abs(scores.mean() - y_test.mean()) < 0.1 * y_test.std()     # original units, not standardised
    objective = trained.estimator.objective
    y_train = _labels(regression, "train").astype("float64")
    assert objective.target_mean == pytest.approx(y_train.mean()) and objective.target_std == pytest.approx(y_train.std())
    # The history's val_rmse is the RMSE of the kept model's validation predictions, in the target's units.
    best = trained.history[trained.fit_result["best_epoch"] - 1]
    y_valid = _labels(regression, "valid").astype("float64")
    valid_rmse = float(np.sqrt(np.mean((trained.scores["valid"] - y_valid) ** 2)))
    assert best["val_rmse"] == pytest.approx(valid_rmse, rel=1e-4)
    assert set(best) >= {"loss", "val_loss", "val_rmse"} and "val_auc" not in best
    np.testing.assert_array_equal(trained.estimator.predict(regression.backend.to_host(regression.X["test"]),
                                                            regression.backend.to_host(regression.codes["test"])),
                                  scores)


def test_multiclass_mlp_beats_the_majority_class_with_a_probability_per_class(multiclass):
    trained = train_torch(multiclass, seed=1, **FAST)
    y_test = _labels(multiclass, "test")
    scores = trained.scores["test"]
    assert scores.dtype == np.float64 and scores.shape == (SIZES["test"], 3)
    np.testing.assert_allclose(scores.sum(axis=1), 1.0, atol=1e-9)
    accuracy = float((scores.argmax(axis=1) == y_test).mean())
    majority = np.bincount(y_test).max() / len(y_test)
    assert accuracy > majority + 0.2
    best = trained.history[trained.fit_result["best_epoch"] - 1]
    valid_accuracy = float((trained.scores["valid"].argmax(axis=1) == _labels(multiclass, "valid")).mean())
    assert best["val_accuracy"] == pytest.approx(valid_accuracy)
    assert trained.estimator.arch.n_outputs == 3
    host = multiclass.backend.to_host
    proba = trained.estimator.predict_proba(host(multiclass.X["test"]), host(multiclass.codes["test"]))
    np.testing.assert_array_equal(proba, scores)
    predicted = trained.estimator.predict(host(multiclass.X["test"]), host(multiclass.codes["test"]))
    assert list(predicted[:20]) == [MULTICLASS.classes[i] for i in scores.argmax(axis=1)[:20]]


def test_multiclass_labels_outside_the_class_codes_are_a_data_error(backend):
    features = _features(Task("multiclass", classes=("a", "b")), backend)     # labels go up to 2
    with pytest.raises(DataError, match=r"class codes 0\.\.1 .* found 0\.\.2"):
        train_torch(features, **{**FAST, "epochs": 1})


def test_a_regression_target_with_missing_values_is_a_data_error(backend):
    features = _features(REGRESSION, backend)
    y = np.asarray(backend.to_host(features.y["train"])).copy()
    y[3] = np.nan
    features.y["train"] = backend.asarray(y)
    with pytest.raises(DataError, match="missing or infinite"):
        train_torch(features, **{**FAST, "epochs": 1})


# ------------------------------------------------------------------ monitors
@pytest.mark.parametrize("task, monitor, higher", [
    (MULTICLASS, "val_accuracy", True), (REGRESSION, "val_rmse", False), (MULTICLASS, "val_loss", False),
])
def test_each_task_early_stops_on_its_own_metric(task, monitor, higher, backend):
    features = _features(task, backend)
    trained = train_torch(features, seed=2, early_stopping={"monitor": monitor, "patience": 2},
                          **{**FAST, "epochs": 6})
    assert trained.fit_result["monitor"] == monitor
    values = [row[monitor] for row in trained.history]
    best = max(values) if higher else min(values)
    assert trained.history[trained.fit_result["best_epoch"] - 1][monitor] == best


@pytest.mark.parametrize("task, monitor, allowed", [
    (REGRESSION, "val_auc", "val_loss, val_rmse"),
    (MULTICLASS, "val_rmse", "val_loss, val_accuracy"),
    (BINARY, "val_accuracy", "val_loss, val_auc"),
])
def test_a_monitor_of_another_task_is_refused_naming_the_allowed_ones(task, monitor, allowed, backend):
    features = _features(task, backend)
    with pytest.raises(DataError, match=f"'{monitor}' does not apply to a {task.kind} task; use one of {allowed}"):
        train_torch(features, early_stopping={"monitor": monitor}, **FAST)


def test_the_config_accepts_every_tasks_monitor_and_nothing_else():
    for monitor in ("val_loss", "val_auc", "val_accuracy", "val_rmse"):
        assert TorchSpec(kind="torch", early_stopping={"monitor": monitor}).early_stopping.monitor == monitor
    with pytest.raises(ValueError, match="val_rmse"):
        TorchSpec(kind="torch", early_stopping={"monitor": "val_r2"})


# ------------------------------------------------------------------ the per-epoch callback
def test_on_epoch_is_called_once_per_epoch_with_its_history_row(regression):
    calls = []
    trained = train_torch(regression, seed=1, on_epoch=lambda epoch, row: calls.append((epoch, row)),
                          **{**FAST, "epochs": 3, "early_stopping": {"patience": 10}})
    assert [epoch for epoch, _ in calls] == [1, 2, 3]
    assert [row for _, row in calls] == trained.history
    assert all("val_rmse" in row for _, row in calls)


def test_an_exception_from_on_epoch_stops_training_and_propagates(multiclass):
    class Pruned(Exception):
        pass

    seen = []

    def prune_at_two(epoch, row):
        seen.append(epoch)
        if epoch == 2:
            raise Pruned(row["val_loss"])

    with pytest.raises(Pruned):
        train_torch(multiclass, seed=1, on_epoch=prune_at_two, **{**FAST, "epochs": 5})
    assert seen == [1, 2]


# ------------------------------------------------------------------ files per task
# A GPU run's scores against its export loaded on the CPU: the same float32 network and inputs
# (no autocast or TF32 when scoring, float32 weights on both sides), but cuBLAS and the CPU's BLAS
# sum each dot product in a different order, so an output differs by a few float32 ulps of the
# *network's output scale* -- not of the score, which can be near 0 after a regression adds back
# the target's mean (on the H200: -18.44636 vs -18.44640, 4.4e-5 apart, relative 2.4e-6 -- exactly
# 1 ulp of the standardised output, -2.98, times the target's std, 184; every other score differed
# by 0-2 such ulps). 16 ulps of that scale (1.9e-6 of it) leaves a wide margin over what was seen,
# and is ~250x below what TF32 (10-bit mantissa, ~5e-4 of the scale) or a bf16 autocast (~4e-3)
# on one side would leave behind.
CROSS_DEVICE_ULPS = 16


def _cross_device_atol(estimator: MLPClassifier, expected: np.ndarray) -> float:
    """Absolute tolerance between one float32 network evaluated on two devices: ``CROSS_DEVICE_ULPS``
    float32 ulps of the network's output scale, in the scores' units. Regression: the standardised
    outputs' largest magnitude (at least 1) times the target's std (the mean is added in float64,
    exactly). Probabilities: 1, since a sigmoid or softmax changes by at most ~0.25 x a logit's
    change and p(1-p)|logit| < 0.23, so a few ulps relative to a logit stay under a few ulps."""
    scale = 1.0
    objective = estimator.objective
    if objective.kind == "regression":
        standardised = np.abs(expected - objective.target_mean) / objective.target_std
        scale = objective.target_std * max(1.0, float(standardised.max()))
    return CROSS_DEVICE_ULPS * float(np.finfo(np.float32).eps) * scale


@pytest.mark.parametrize("task", [BINARY, MULTICLASS, REGRESSION], ids=lambda t: t.kind)
def test_exported_files_of_each_task_load_back_to_the_same_scores(task, backend, tmp_path):
    features = _features(task, backend)
    trained = train_torch(features, seed=1, **{**FAST, "epochs": 2})
    written, meta = TORCH_STATE_DICT.save(trained.estimator, tmp_path, backend=backend)
    meta = {**meta, "format": TORCH_STATE_DICT.name, "task": task.to_dict()}
    arch = json.loads((tmp_path / "architecture.json").read_text())
    if task.kind == "binary":                       # as written before tasks existed
        assert "task" not in arch and "n_outputs" not in arch and "target" not in arch
    else:
        assert arch["task"] == task.to_dict()
        assert ("target" in arch) == (task.kind == "regression")
    host = features.backend.to_host
    expected = trained.scores["test"]
    for load_on in (None, backend):              # a machine without a GPU, and the run's own device
        for saved_meta in (meta, {k: v for k, v in meta.items() if k != "task"}):  # with and without export's task
            predictor = TORCH_STATE_DICT.load(tmp_path, saved_meta, backend=load_on)
            assert isinstance(predictor, ClassifierPredictor) and predictor.task.kind == task.kind
            got = predictor(host(features.X["test"]), host(features.codes["test"]))
            assert got.dtype == np.float64 and got.shape == expected.shape
            if predictor.classifier.device == trained.estimator.device and trained.estimator.device.type == "cpu":
                # The same float32 weights, inputs and kernels on the CPU: the same bits. (On a GPU,
                # cuBLAS may pick another kernel for another batch size, so the bound below holds.)
                np.testing.assert_array_equal(got, expected)
            else:
                np.testing.assert_allclose(got, expected, rtol=0, atol=_cross_device_atol(trained.estimator, expected))
    loaded = MLPClassifier.load(tmp_path)
    assert loaded.task == (task if task.kind != "binary" else BINARY)
    assert loaded.objective == trained.estimator.objective


def test_a_model_trained_under_autocast_scores_in_float32_as_its_export_does(regression, tmp_path):
    """Autocast is for the training steps: the network keeps float32 weights, and the run's scores
    and its export's both come from it in float32 on the device, bit for bit. A scoring path left
    under the training's bf16 autocast, or an export loaded in another dtype, would not."""
    trained = train_torch(regression, seed=1, **{**FAST, "epochs": 2, "precision": "bf16"})
    assert trained.fit_result["precision"] == "bf16"
    _, meta = TORCH_STATE_DICT.save(trained.estimator, tmp_path, backend=regression.backend)
    predictor = TORCH_STATE_DICT.load(tmp_path, meta, backend=regression.backend)
    for network in (trained.estimator.module, predictor.classifier.module):
        assert {p.dtype for p in network.parameters()} == {torch.float32}
    host = regression.backend.to_host
    got = predictor(host(regression.X["test"]), host(regression.codes["test"]))
    if trained.estimator.device.type == "cpu":
        np.testing.assert_array_equal(got, trained.scores["test"])
    else:                                      # another batch size may mean another cuBLAS kernel
        np.testing.assert_allclose(got, trained.scores["test"], rtol=0,
                                   atol=_cross_device_atol(trained.estimator, trained.scores["test"]))


def test_a_model_json_whose_task_disagrees_with_the_network_is_refused(tmp_path, backend):
    features = _features(MULTICLASS, backend)
    trained = train_torch(features, seed=1, **{**FAST, "epochs": 1})
    _, meta = TORCH_STATE_DICT.save(trained.estimator, tmp_path, backend=backend)
    with pytest.raises(DataError, match="model.json says the task is regression"):
        TORCH_STATE_DICT.load(tmp_path, {**meta, "task": {"kind": "regression"}}, backend=None)


def test_an_architecture_json_from_before_tasks_loads_as_binary(tmp_path):
    arch = MLPArchitecture(n_features=3, continuous_index=[0, 1, 2], hidden=[4])
    module = arch.build()
    torch.save({k: v.detach() for k, v in module.state_dict().items()}, tmp_path / "model.pt")
    old = {"format_version": 1, "n_features": 3, "continuous_index": [0, 1, 2], "cardinalities": [],
           "embedding_dims": [], "hidden": [4], "dropout": 0.1, "batch_norm": False}
    (tmp_path / "architecture.json").write_text(json.dumps(old))
    predictor = TORCH_STATE_DICT.load(tmp_path, {"file": "model.pt", "architecture": "architecture.json"}, backend=None)
    assert predictor.task == BINARY and predictor.classifier.arch == arch
    x = np.random.default_rng(0).normal(size=(5, 3)).astype("float32")
    with torch.inference_mode():
        want = torch.sigmoid(module.eval()(torch.as_tensor(x))).double().numpy()
    np.testing.assert_allclose(predictor(x, None), want, rtol=1e-6)


def test_regression_has_no_class_probabilities(tmp_path):
    module = MLPArchitecture(n_features=2, continuous_index=[0, 1], hidden=[4]).build()
    model = MLPClassifier(module, objective=Objective(REGRESSION, 10.0, 2.0))
    with pytest.raises(ValueError, match="use predict"):
        model.predict_proba(np.zeros((2, 2), dtype="float32"))
    with pytest.raises(ValueError, match="needs 3"):
        MLPClassifier(module, objective=Objective(MULTICLASS))


# ------------------------------------------------------------------ the stage's artifacts
def test_the_stage_writes_each_tasks_columns_and_learning_curve_labels(regression, tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    labels = []
    original = Figure.savefig

    def record(fig, *args, **kwargs):
        labels.extend(ax.get_ylabel() for ax in fig.axes)
        return original(fig, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", record)
    ctx = StageContext(backend=regression.backend, seed=1, stage="mlp", artifacts_dir=tmp_path)
    spec = TorchSpec(kind="torch", inputs=["features"], **{**FAST, "epochs": 2})
    trained = run_torch(spec, ctx, {"features": regression})
    history = pd.read_csv(tmp_path / "history.csv")
    assert list(history.columns) == ["epoch", "seconds", "loss", "val_loss", "val_rmse"]
    assert history_csv(trained.history).splitlines()[0] == "epoch,seconds,loss,val_loss,val_rmse"
    assert labels == ["mean squared error (standardised target)", "validation RMSE"]


def test_epoch_line_shows_each_tasks_metric():
    row = {"epoch": 2, "seconds": 0.5, "loss": 0.3, "val_loss": 0.35, "val_rmse": 12.5}
    assert epoch_line(row, 5) == "Epoch 2/5 - 500ms - loss: 0.3000 - val_loss: 0.3500 - val_rmse: 12.5000"
    row = {"epoch": 2, "seconds": 0.5, "loss": 0.3, "val_loss": 0.35, "val_accuracy": 0.75}
    assert epoch_line(row, 5).endswith("val_loss: 0.3500 - val_accuracy: 0.7500")


# ------------------------------------------------------------------ mixed precision, CPU and GPU
DEVICES = ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device")])]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("precision", ["bf16", "fp16"])
@pytest.mark.parametrize("task", [MULTICLASS, REGRESSION], ids=lambda t: t.kind)
def test_new_losses_train_under_autocast_and_score_on_the_cpu(task, precision, device, tmp_path):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(600, 4, generator=g)
    y = (x[:, :3].argmax(dim=1).to(torch.int32) if task.kind == "multiclass"
         else (100 + 20 * x[:, 0] - 10 * x[:, 1]).to(torch.float32))
    objective = Objective.for_training(task, y[:400])
    torch.manual_seed(0)
    module = MLPArchitecture(n_features=4, continuous_index=[0, 1, 2, 3], hidden=[16],
                             n_outputs=task.n_outputs).build()
    moved = [t.to(device) for t in (x, y)]
    result = fit(module, Split(moved[0][:400], None, moved[1][:400]), Split(moved[0][400:], None, moved[1][400:]),
                 FitOptions(epochs=4, batch_size=64, precision=precision, learning_rate=1e-2, objective=objective),
                 device=device)
    assert result.precision == precision
    assert all(np.isfinite(row["loss"]) and np.isfinite(row["val_loss"]) for row in result.history)
    assert result.history[-1]["loss"] < result.history[0]["loss"]
    on_device = MLPClassifier(module, device, objective).scores(x[400:].numpy())
    MLPClassifier(module, device, objective).save(tmp_path)
    on_cpu = MLPClassifier.load(tmp_path, device="cpu").scores(x[400:].numpy())
    np.testing.assert_allclose(on_cpu, on_device, rtol=1e-5, atol=1e-5)
