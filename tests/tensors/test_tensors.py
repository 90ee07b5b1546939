"""The PyTorch hand-off, the batch iterator and the training loop, on real tensors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pipeline.backends import get_backend
from pipeline.core.errors import DataError
from pipeline.tensors import matrix_handoff, to_torch
from pipeline.tensors.batches import TensorBatches
from pipeline.tensors.classifier import MLPClassifier
from pipeline.tensors.mlp import MLPArchitecture, default_embedding_dim
from pipeline.tensors.fit_loop import FitOptions, Split, autocast_dtype, epoch_line, fit, predict_logits


def _matrix(backend, rows=1000, cols=8, dtype="float32"):
    frame = backend.from_pandas(
        __import__("pandas").DataFrame({f"c{i}": np.arange(rows, dtype="float64") * (i + 1) for i in range(cols)}))
    return frame, backend.to_matrix(frame, dtype=dtype)


# ------------------------------------------------------------------ hand-off
def test_handoff_is_zero_copy_by_pointer_and_writes_show_through(backend):
    _, matrix = _matrix(backend)
    tensor, record = to_torch(matrix, backend, "train.X")
    assert tensor.data_ptr() == backend.data_address(matrix)
    assert record.zero_copy and record.bytes_copied == 0 and record.shape == (1000, 8)
    tensor[3, 2] = -7.0                       # write through the tensor ...
    assert float(backend.to_host(matrix[3, 2])) == -7.0
    matrix[5, 1] = 42.0                       # ... and through the array
    assert float(tensor[5, 1]) == 42.0


def test_labels_and_codes_hand_off_without_copy(backend):
    labels = backend.asarray(np.array([0, 1, 1, 0], dtype="int32"))
    codes = backend.asarray(np.array([[1, 0], [2, 3]], dtype="int64"))
    for array, dtype in ((labels, torch.int32), (codes, torch.int64)):
        tensor, record = to_torch(array, backend, "x")
        assert record.zero_copy and tensor.dtype == dtype and tensor.data_ptr() == backend.data_address(array)


@pytest.mark.parametrize("make, why", [
    (lambda: np.arange(12, dtype="float32").reshape(4, 3)[::-1], "negative strides"),
    (lambda: np.arange(12, dtype=">f4").reshape(4, 3), "native byte order"),
])
def test_a_copy_is_recorded_with_its_reason_never_silent(make, why):
    array = make()
    tensor, record = to_torch(array, get_backend("cpu"), "train.X")
    assert not record.zero_copy and record.bytes_copied == array.nbytes == 48
    assert "zero-copy impossible" in record.note and why in record.note
    np.testing.assert_array_equal(tensor.numpy(), array)


def test_a_read_only_array_is_shared_and_says_so():
    readonly = np.ones((10, 3), dtype="float32")
    readonly.flags.writeable = False          # what a pandas copy-on-write view looks like
    tensor, record = to_torch(readonly, get_backend("cpu"), "train.X")
    assert record.zero_copy and tensor.data_ptr() == readonly.__array_interface__["data"][0]
    assert "read-only" in record.note


def test_a_matrix_dlpack_cannot_carry_is_a_data_error():
    with pytest.raises(DataError, match="cannot hand 'train.X'"):
        to_torch(np.array([["a", "b"]], dtype=object), get_backend("cpu"), "train.X")


def test_frame_to_matrix_is_the_one_recorded_copy_and_names_the_dtypes(backend):
    frame, matrix = _matrix(backend, rows=10, cols=3)
    frame["flag"] = frame["c0"] > 3
    matrix = backend.to_matrix(frame)
    record = matrix_handoff("train.X", frame, matrix, backend)
    assert record.bytes_copied == matrix.nbytes == 10 * 4 * 4 and not record.zero_copy
    assert "3 float64" in record.note and "1 bool" in record.note


def test_cpu_matrix_is_row_major_and_writable():
    frame, matrix = _matrix(get_backend("cpu"), rows=50, cols=4)
    assert matrix.flags.c_contiguous and matrix.flags.writeable
    np.testing.assert_array_equal(matrix[:, 2], frame["c2"].to_numpy(dtype="float32"))


# ------------------------------------------------------------------ batches
def _data(rows=103):
    x = torch.arange(rows * 3, dtype=torch.float32).reshape(rows, 3)
    codes = torch.arange(rows, dtype=torch.int64).unsqueeze(1)
    y = (torch.arange(rows) % 2).to(torch.int32)
    return x, codes, y


def test_batches_cover_every_row_once_and_stay_aligned():
    x, codes, y = _data()
    batches = TensorBatches([x, codes, y], 10, generator=torch.Generator().manual_seed(1))
    seen = []
    for bx, bc, by in batches:
        rows = bc[:, 0]
        assert torch.equal(bx[:, 0], rows.float() * 3) and torch.equal(by, (rows % 2).int())
        seen.append(rows)
    assert len(seen) == len(batches) == 11
    assert sorted(torch.cat(seen).tolist()) == list(range(103))


def test_each_epoch_draws_a_new_order_and_a_seed_repeats_it():
    x, codes, y = _data()
    first = TensorBatches([x, None, y], 10, generator=torch.Generator().manual_seed(7))
    epoch1 = [b[0][:, 0].tolist() for b in first]
    epoch2 = [b[0][:, 0].tolist() for b in first]
    again = [b[0][:, 0].tolist() for b in TensorBatches([x, None, y], 10, generator=torch.Generator().manual_seed(7))]
    assert epoch1 != epoch2 and epoch1 == again
    assert all(b[1] is None for b in first)


def test_min_batch_drops_a_short_last_batch():
    x, _, y = _data(rows=21)
    batches = TensorBatches([x, y], 10, min_batch=2)
    assert len(batches) == 2 and sum(int(b[0].shape[0]) for b in batches) == 20


def test_prefetching_path_yields_the_same_batches_as_the_direct_path():
    # The pinned double-buffered path runs here with a CPU "target" (no pinning, no stream):
    # its gather-into-buffer and one-ahead logic must not mix batches up.
    x, codes, y = _data()
    direct = TensorBatches([x, codes, y], 16, generator=torch.Generator().manual_seed(3))
    staged = TensorBatches([x, codes, y], 16, generator=torch.Generator().manual_seed(3))
    got = list(staged._prefetched())
    want = list(direct)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert all(torch.equal(u, v) for u, v in zip(a, b))


def test_batches_reject_misaligned_tensors():
    with pytest.raises(ValueError, match="different row counts"):
        TensorBatches([torch.zeros(5, 2), torch.zeros(4)], 2)


# ------------------------------------------------------------------ model + loop
def _problem(rows=1200, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, 6, generator=g)
    codes = torch.randint(0, 5, (rows, 1), generator=g)
    logit = 2 * x[:, 0] - x[:, 1] + (codes[:, 0] == 3).float() * 2 - 0.5
    y = (torch.rand(rows, generator=g) < torch.sigmoid(logit)).to(torch.int32)
    x[:, 5] = codes[:, 0].float()           # the categorical column also sits in X, as in a FeatureSet
    return x, codes, y


def _arch(**kw):
    base = dict(n_features=6, continuous_index=[0, 1, 2, 3, 4], cardinalities=[5], embedding_dims=[3], hidden=[16, 8])
    return MLPArchitecture(**{**base, **kw})


def _fit(seed=0, options=FitOptions(epochs=8, batch_size=64, patience=3), arch=None):
    x, codes, y = _problem()
    torch.manual_seed(seed)
    module = (arch or _arch()).build()
    result = fit(module, Split(x[:900], codes[:900], y[:900]), Split(x[900:], codes[900:], y[900:]), options)
    return module, result


def test_training_is_deterministic_on_cpu():
    m1, r1 = _fit()
    m2, r2 = _fit()
    assert [h["loss"] for h in r1.history] == [h["loss"] for h in r2.history]
    assert all(torch.equal(a, b) for a, b in zip(m1.state_dict().values(), m2.state_dict().values()))


def test_the_mlp_learns_and_uses_its_embedding():
    module, result = _fit(options=FitOptions(epochs=15, batch_size=64, patience=15))
    assert result.history[-1]["val_auc"] > 0.8
    assert result.history[-1]["loss"] < result.history[0]["loss"]
    assert module.embeddings[0].weight.shape == (5, 3)


def test_early_stopping_keeps_the_best_epoch_weights():
    x, codes, y = _problem()
    module, result = _fit(options=FitOptions(epochs=40, batch_size=32, learning_rate=0.05, patience=2))
    assert result.stopped_early and len(result.history) < 40
    best = min(h["val_loss"] for h in result.history)
    assert result.history[result.best_epoch - 1]["val_loss"] == best
    import torch.nn.functional as F

    restored = F.binary_cross_entropy_with_logits(
        predict_logits(module, Split(x[900:], codes[900:]), torch.device("cpu")), y[900:].float()).item()
    assert restored == pytest.approx(best, rel=1e-5)


def test_a_callback_can_end_training_after_an_epoch_keeping_the_best_weights():
    from pipeline.tensors.fit_loop import StopTraining

    x, codes, y = _problem()
    seen: list[int] = []

    def stop_at_three(epoch, row):
        seen.append(epoch)
        if epoch == 3:
            raise StopTraining("the next epoch would end past the limit")

    torch.manual_seed(0)
    module = _arch().build()
    result = fit(module, Split(x[:900], codes[:900], y[:900]), Split(x[900:], codes[900:], y[900:]),
                 FitOptions(epochs=20, batch_size=64, patience=20), on_epoch=stop_at_three)
    assert seen == [1, 2, 3] and len(result.history) == 3 and result.stopped_early
    assert result.notes == ["stopped after epoch 3: the next epoch would end past the limit"]
    best = min(h["val_loss"] for h in result.history)
    assert result.history[result.best_epoch - 1]["val_loss"] == best      # the best of the three, restored


def test_the_network_scales_its_inputs_by_the_saved_moments_and_old_files_still_load(tmp_path):
    x, codes, _ = _problem()
    plain = _arch()
    scaled = _arch(input_mean=[10.0] * 5, input_std=[2.0] * 5)
    torch.manual_seed(0)
    module = scaled.build()
    twin = plain.build()
    twin.load_state_dict(module.state_dict())            # the same weights: no scaling keys in the state
    shifted = x.clone()
    shifted[:, :5] = x[:, :5] * 2.0 + 10.0
    with torch.no_grad():
        torch.testing.assert_close(module.eval()(shifted, codes), twin.eval()(x, codes))
    assert "input_mean" not in plain.to_dict() and scaled.to_dict()["input_std"] == [2.0] * 5
    with pytest.raises(ValueError, match="input_mean has 2 values for 5 continuous columns"):
        _arch(input_mean=[0.0, 0.0], input_std=[1.0, 1.0])
    classifier = MLPClassifier(module)
    classifier.save(tmp_path)
    again = MLPClassifier.load(tmp_path, device="cpu")
    assert again.arch == scaled
    np.testing.assert_array_equal(again.predict_proba(shifted.numpy(), codes.numpy()),
                                  classifier.predict_proba(shifted.numpy(), codes.numpy()))


def test_val_auc_can_be_the_monitor():
    _, result = _fit(options=FitOptions(epochs=6, batch_size=64, monitor="val_auc", patience=2))
    assert result.monitor == "val_auc"
    best = max(h["val_auc"] for h in result.history)
    assert result.history[result.best_epoch - 1]["val_auc"] == best


def test_without_validation_rows_every_epoch_runs():
    x, codes, y = _problem()
    module = _arch().build()
    result = fit(module, Split(x, codes, y), None, FitOptions(epochs=3, batch_size=128))
    assert len(result.history) == 3 and result.best_epoch == 3 and result.monitor is None
    assert "no early stopping" in result.notes[0]


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_mixed_precision_paths_train(precision):
    # On a GPU these run under autocast (+ GradScaler for fp16); the CPU runs the same code.
    _, result = _fit(options=FitOptions(epochs=3, batch_size=64, precision=precision))
    assert result.precision == precision
    assert all(np.isfinite(h["loss"]) for h in result.history)


def test_precision_auto_is_fp32_on_cpu():
    assert autocast_dtype("auto", torch.device("cpu")) is None
    assert autocast_dtype("bf16", torch.device("cpu")) is torch.bfloat16


def test_compile_option_trains_through_torch_compile():
    _, result = _fit(options=FitOptions(epochs=1, batch_size=300, compile=True))
    assert result.compiled and np.isfinite(result.history[0]["loss"])


def test_epoch_line_is_keras_style():
    row = {"epoch": 3, "seconds": 1.23, "loss": 0.41, "val_loss": 0.43, "val_auc": 0.845}
    assert epoch_line(row, 20) == "Epoch 3/20 - 1.2s - loss: 0.4100 - val_loss: 0.4300 - val_auc: 0.8450"
    assert epoch_line({"epoch": 1, "seconds": 0.05, "loss": 0.5}, 2) == "Epoch 1/2 - 50ms - loss: 0.5000"


def test_embedding_width_rule():
    assert default_embedding_dim(2) == 2 and default_embedding_dim(10) == 6 and default_embedding_dim(10**6) == 32


def test_saved_model_reloads_and_scores_identically(tmp_path):
    module, _ = _fit(options=FitOptions(epochs=2, batch_size=64))
    x, codes, _ = _problem()
    classifier = MLPClassifier(module)
    before = classifier.predict_proba(x.numpy(), codes.numpy())
    classifier.save(tmp_path)
    again = MLPClassifier.load(tmp_path, device="cpu")
    np.testing.assert_array_equal(again.predict_proba(x.numpy(), codes.numpy()), before)
    assert again.arch == module.arch and before.shape == (1200, 2)
    with pytest.raises(ValueError, match="codes"):
        again.predict_proba(x.numpy())


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gpu_trained_model_scores_on_the_cpu(tmp_path):
    x, codes, y = _problem()
    torch.manual_seed(0)
    module = _arch().build()
    fit(module, Split(x[:900].cuda(), codes[:900].cuda(), y[:900].cuda()),
        Split(x[900:].cuda(), codes[900:].cuda(), y[900:].cuda()), FitOptions(epochs=3, precision="auto"))
    on_gpu = MLPClassifier(module, "cuda").predict_proba(x.numpy(), codes.numpy())
    MLPClassifier(module, "cuda").save(tmp_path)
    on_cpu = MLPClassifier.load(tmp_path, device="cpu")
    assert next(on_cpu.module.parameters()).device.type == "cpu"
    np.testing.assert_allclose(on_cpu.predict_proba(x.numpy(), codes.numpy()), on_gpu, atol=1e-5)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_host_data_trains_on_the_gpu_through_pinned_prefetch():
    x, codes, y = _problem()
    batches = TensorBatches([x, codes, y], 64, device="cuda", generator=torch.Generator().manual_seed(0))
    direct = TensorBatches([x, codes, y], 64, generator=torch.Generator().manual_seed(0))
    for got, want in zip(batches, direct):
        assert got[0].device.type == "cuda"
        assert all(torch.equal(g.cpu(), w) for g, w in zip(got, want))
