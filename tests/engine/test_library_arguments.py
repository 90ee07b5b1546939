"""The library's entry points given the wrong kind of argument: a typed error (exit 2) that
says what was expected, never a bare AttributeError or TypeError from deep inside, nor a
device that silently runs on the CPU."""

from __future__ import annotations

import pytest

from pipeline import RunOptions, load_config, run_pipeline
from pipeline.core.errors import BackendUnavailable, UsageError
from pipeline.backends import available_devices


@pytest.mark.parametrize("device", ["GPU", "cuda", "tpu", "", "Cpu"])
def test_a_device_the_config_does_not_take_is_refused_with_the_choices(device):
    with pytest.raises(UsageError, match=r"device .* auto, cpu, gpu"):
        RunOptions(device=device)
    with pytest.raises(UsageError, match="auto, cpu, gpu"):
        RunOptions(device="cpu").replace(device=device)
    assert RunOptions(device="cpu").device == "cpu" and RunOptions().device is None


@pytest.mark.parametrize("device", ["GPU", "tpu"])
def test_run_pipeline_refuses_a_bad_device_before_the_run(in_project, device):
    with pytest.raises(UsageError, match="auto, cpu, gpu"):
        run_pipeline("configs/churn.yaml", device=device, until=["raw"], runs_dir="runs")
    assert not (in_project / "runs").exists()


@pytest.mark.skipif("gpu" in available_devices(), reason="a GPU is here")
def test_lower_case_gpu_without_one_is_still_backend_unavailable(in_project):
    with pytest.raises(BackendUnavailable):
        run_pipeline("configs/churn.yaml", device="gpu", until=["raw"], runs_dir="runs")


def test_options_given_as_a_mapping_are_refused_naming_the_keywords(in_project):
    with pytest.raises(UsageError, match=r"RunOptions.*got dict.*device="):
        run_pipeline("configs/churn.yaml", {"device": "cpu"})
    with pytest.raises(UsageError, match="RunOptions"):
        RunOptions.build({"device": "cpu"})


@pytest.mark.parametrize("config", [{"name": "x", "stages": {}}, 42, 0, None, b"configs/churn.yaml"])
def test_a_config_that_is_not_a_path_is_refused(in_project, config):
    with pytest.raises(UsageError, match=r"a path to a YAML file .*got") as error:
        load_config(config)
    if isinstance(config, dict):
        assert "load_config(text=" in str(error.value)
    with pytest.raises(UsageError, match="got"):
        run_pipeline(config, device="cpu", runs_dir="runs")
    assert not (in_project / "runs").exists()


@pytest.mark.parametrize("hooks", [object(), 3, "report", [object()]])
def test_hooks_that_are_not_run_hooks_are_refused(hooks):
    with pytest.raises(UsageError, match=r"hooks.*RunHook"):
        RunOptions(hooks=hooks)


def test_the_text_path_still_loads_a_config_held_as_a_mapping(in_project):
    import yaml

    data = yaml.safe_load(open("configs/churn.yaml", encoding="utf-8"))
    assert load_config(text=yaml.safe_dump(data)).name == "churn"


def test_overrides_with_a_loaded_config_are_refused_not_ignored(in_project):
    """They applied only to a path: with a loaded config the run went on without them (a user's
    `C=0.001` ignored, same metrics, no word)."""
    config = load_config("configs/churn.yaml")
    with pytest.raises(UsageError, match=r"overrides \['stages.logreg.params.C=0.001'\] apply to a config file path"):
        run_pipeline(config, overrides=["stages.logreg.params.C=0.001"])


@pytest.mark.parametrize(("changes", "words"), [
    ({"cache": "false"}, "cache must be True or False, got str 'false'"),
    ({"progress": "no"}, "progress must be True or False, got str 'no'"),
    ({"keep_outputs": 1}, "keep_outputs must be True or False, got int 1"),
    ({"wait": "30"}, "wait must be a number of seconds, 0 or more, got '30'"),
    ({"wait": -1}, "wait must be a number of seconds, 0 or more, got -1"),
])
def test_switches_and_waits_of_the_wrong_type_are_refused(changes, words):
    """A string is truthy: cache="false" used the cache, progress="no" wrote progress lines, and
    wait="30" failed deep in the lock with a TypeError."""
    with pytest.raises(UsageError, match=words):
        RunOptions(**changes)
    assert RunOptions(cache=False, wait=0, progress=True).cache is False


@pytest.mark.parametrize("make", [lambda: {"x": [1.0, 2.0, 3.0], "y": [0, 1, 0]},
                                  lambda: __import__("polars").DataFrame({"x": [1.0, 2.0, 3.0], "y": [0, 1, 0]}),
                                  lambda: __import__("pyarrow").table({"x": [1.0, 2.0, 3.0], "y": [0, 1, 0]})])
def test_a_frame_that_is_not_pandas_is_a_usage_error_not_a_missing_gpu(make):
    """A dict, a Polars frame or an Arrow table was taken for a GPU frame: BackendUnavailable
    (exit 5) saying cuDF is missing, on a machine that needs none."""
    from pipeline.stages import split_frame

    with pytest.raises(UsageError, match=r"a frame of pandas \(or cuDF, on a GPU\) is what this takes, not a"):
        split_frame(make(), "y")


@pytest.mark.parametrize(("read", "words"), [
    ({"dates": ["ts"]}, r"load_table dates= takes a mapping, not list \['ts'\] \(dates=\{'ts': None\}"),
    ({"dates": "ts"}, "load_table dates= takes a mapping, not str 'ts'"),
    ({"columns": "ts"}, "load_table columns= takes a list, not str 'ts'"),
    ({"na_value": ["?"]}, "load_table has no read option 'na_value'; it takes sep, encoding, decimal, thousands and"),
])
def test_load_tables_read_options_of_the_wrong_shape_are_usage_errors(tmp_path, read, words):
    """dates=["ts"] failed with an AttributeError deep inside; dates="ts" and columns="ts" were
    read letter by letter (columns 't' and 's')."""
    from pipeline.stages import load_table

    (tmp_path / "t.csv").write_text("ts,x\n2024-01-01,1\n", encoding="utf-8")
    with pytest.raises(UsageError, match=words):
        load_table(tmp_path / "t.csv", **read)
    assert load_table(tmp_path / "t.csv", na_values="?", dates={"ts": None})["ts"].dtype.kind == "M"
