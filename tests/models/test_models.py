from __future__ import annotations

import importlib

import pytest

from pipeline.models import MODELS, get_model_spec, trainable_models


def test_random_forest_params_translate_for_cuml():
    spec = get_model_spec("random_forest")
    gpu, dropped = spec.translate({"criterion": "entropy", "n_jobs": 4, "n_bins": 64, "n_estimators": 10}, "gpu", seed=7)
    assert gpu["split_criterion"] == "entropy" and "criterion" not in gpu
    assert gpu["n_bins"] == 64 and gpu["random_state"] == 7 and gpu["output_type"] == "cupy"
    assert dropped == ["n_jobs"]
    cpu, dropped = spec.translate({"criterion": "entropy", "n_bins": 64}, "cpu", seed=7)
    assert cpu["criterion"] == "entropy" and dropped == ["n_bins"]


def test_explicit_seed_param_wins_over_run_seed():
    spec = get_model_spec("xgboost")
    params, _ = spec.translate({"random_state": 1}, "cpu", seed=42)
    assert params["random_state"] == 1
    assert spec.translate({}, "gpu", seed=42)[0]["device"] == "cuda"


def test_unknown_params_and_models_get_suggestions():
    assert "did you mean 'n_estimators'" in get_model_spec("xgboost").check_params({"n_estimator": 3})[0]
    with pytest.raises(KeyError, match="did you mean 'xgboost'"):
        get_model_spec("xgbost")


@pytest.mark.parametrize("name", trainable_models())
def test_every_model_constructs_on_cpu_with_translated_params(name):
    spec = MODELS[name]
    params, _ = spec.translate({}, "cpu", seed=3)
    module, _, cls = spec.cpu_class.partition(":")
    estimator = getattr(importlib.import_module(module), cls)(**params)
    got = estimator.get_params()
    for key, value in params.items():
        assert got[key] == value


def test_a_model_whose_package_is_not_installed_names_the_install_extra():
    """XGBoost comes with an install extra, not the base requirements: without it, training says
    which package is missing and how to install it (exit code 5), not an ImportError."""
    from pipeline.backends import get_backend
    from pipeline.core.errors import BackendUnavailable, ExitCode

    class Spec:
        name = "boosted"

        def class_path(self, device, *, distributed=False):
            return "no_such_boosting_package.sklearn:Classifier"

    with pytest.raises(BackendUnavailable) as caught:
        get_backend("cpu").estimator(Spec(), {})
    message = str(caught.value)
    assert "model 'boosted' needs the Python package 'no_such_boosting_package'" in message
    assert "pip install -e '.[cpu]'" in message
    assert caught.value.exit_code == ExitCode.BACKEND
