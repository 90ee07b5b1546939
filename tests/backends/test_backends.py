from __future__ import annotations

import pickle

import numpy as np
import pandas as pd
import pytest

from pipeline.backends import get_backend, resolve_backend
from pipeline.backends.devices.detect import GpuDevice, NvmlReport, choose_device, probe_nvml
from pipeline.core.errors import BackendUnavailable, DataError
from tests.conftest import TELCO


def test_read_csv_with_na_values_columns_and_filters(backend):
    frame = backend.read(TELCO, columns=["customerID", "tenure", "TotalCharges"], na_values=[" "],
                         filters=[("tenure", ">", 70)])
    host = backend.to_host(frame)
    assert list(host.columns) == ["customerID", "tenure", "TotalCharges"]
    assert (host["tenure"] > 70).all() and len(host) > 0
    assert host["TotalCharges"].dtype.kind == "f"


def test_blank_total_charges_read_as_missing(backend):
    frame = backend.to_host(backend.read(TELCO, na_values=[" "]))
    assert int(frame["TotalCharges"].isna().sum()) == 11
    assert (frame.loc[frame["TotalCharges"].isna(), "tenure"] == 0).all()


def test_parquet_round_trip_with_filters(backend, tmp_path):
    frame = backend.from_pandas(pd.DataFrame({"a": [1, 2, 3], "b": ["x", "y", "z"]}))
    backend.write_parquet(frame, tmp_path / "t.parquet")
    back = backend.to_host(backend.read(tmp_path / "t.parquet", filters=[("b", "in", ["x", "z"])]))
    assert back["a"].tolist() == [1, 3]


def test_read_errors_name_the_file(backend, tmp_path):
    with pytest.raises(DataError, match="not found"):
        backend.read(tmp_path / "missing.csv")
    with pytest.raises(DataError, match="filter on unknown column .nope."):
        backend.read(TELCO, filters=[("nope", "==", 1)])
    (tmp_path / "x.bin").write_text("1")
    with pytest.raises(DataError, match="cannot tell the format"):
        backend.read(tmp_path / "x.bin")


def test_to_matrix_is_one_writable_float32_copy(backend):
    frame = backend.from_pandas(pd.DataFrame({"a": [1.0, 2.0], "b": [3, 4]}))
    matrix = backend.to_matrix(frame)
    assert matrix.dtype == np.float32 and matrix.shape == (2, 2)
    host = np.asarray(backend.to_host(matrix))
    assert host.tolist() == [[1.0, 3.0], [2.0, 4.0]]
    if backend.name == "cpu":
        assert matrix.flags.writeable  # DLPack export refuses read-only arrays
        matrix[0, 0] = 99  # a copy: the frame is untouched
        assert frame["a"].iloc[0] == 1.0


def test_category_codes_zero_for_unknown_and_missing(backend):
    series = backend.from_pandas(pd.DataFrame({"c": ["b", "a", None, "z"]}))["c"]
    codes = backend.to_host(backend.category_codes(series, ["a", "b"]))
    assert codes.tolist() == [2, 1, 0, 0]


def test_backend_pickles_by_name(backend):
    assert pickle.loads(pickle.dumps(backend)) is backend


def test_cpu_is_always_available():
    backend, choice = resolve_backend("cpu")
    assert backend.name == "cpu" and "requested" in choice.reason


def test_auto_without_gpu_chooses_cpu_and_says_why():
    choice = choose_device("auto", nvml=NvmlReport(error="NVML unavailable: no driver"))
    assert choice.device == "cpu" and "no driver" in choice.reason


def test_gpu_requested_without_one_is_a_clear_error():
    with pytest.raises(BackendUnavailable, match="device: gpu was requested.*pipeline doctor"):
        choose_device("gpu", nvml=NvmlReport(error="NVML unavailable: no driver"))


def test_gpu_seen_but_rapids_missing(monkeypatch):
    from pipeline.backends.devices import detect

    monkeypatch.setattr(detect, "rapids_installed", lambda: ["cudf", "cuml"])
    nvml = NvmlReport(driver="550", cuda="12.4", devices=[GpuDevice(0, "H100", 80 << 30, 0)])
    assert choose_device("auto", nvml=nvml).device == "cpu"
    with pytest.raises(BackendUnavailable, match="RAPIDS modules not installed: cudf, cuml"):
        choose_device("gpu", nvml=nvml)


def test_probe_nvml_answers_without_raising():
    report = probe_nvml()
    assert report.devices or report.error


def test_unknown_device_name():
    with pytest.raises(BackendUnavailable, match="unknown device"):
        get_backend("tpu")
