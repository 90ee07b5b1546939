"""The boosters' parameter ranges: a value their library would fit a broken model with
(XGBoost's constant model for ``n_estimators: 0``, CatBoost's inverted one for a negative
learning rate) or refuse only as a C++ check is refused at validation, at its key."""

from __future__ import annotations

import pytest

from pipeline.config import load_config
from pipeline.core.errors import ConfigError, ExitCode
from pipeline.models import get_model_spec

CONFIG = """\
name: b
device: cpu
stages:
  raw: {kind: load, path: data.csv}
  split: {kind: split, inputs: [raw], target: y}
  features: {kind: features, inputs: [split]}
  m:
    kind: train
    inputs: [features]
    model: MODEL
    params: {PARAMS}
"""


@pytest.mark.parametrize(("model", "params", "said"), [
    ("xgboost", "n_estimators: -3", "'n_estimators' of model 'xgboost': input should be greater than or equal to 1"),
    ("xgboost", "learning_rate: 0", "'learning_rate' of model 'xgboost': input should be greater than 0, not 0"),
    ("xgboost", "subsample: 0", "'subsample' of model 'xgboost': input should be greater than 0"),
    ("lightgbm", "num_leaves: 1", "'num_leaves' of model 'lightgbm': input should be greater than or equal to 2"),
    ("lightgbm", "subsample: 1.5", "'subsample' of model 'lightgbm': input should be less than or equal to 1"),
    ("catboost", "learning_rate: -0.1", "'learning_rate' of model 'catboost': input should be greater than 0"),
    ("catboost", "depth: 0", "'depth' of model 'catboost': input should be greater than or equal to 1"),
])
def test_a_value_out_of_the_models_range_is_refused_at_validation(model, params, said):
    text = CONFIG.replace("MODEL", model).replace("PARAMS", params)
    with pytest.raises(ConfigError) as info:
        load_config(text=text)
    assert info.value.exit_code == ExitCode.CONFIG and said in str(info.value)
    assert "stages.m.params" in str(info.value)


@pytest.mark.parametrize("params", ["n_estimators: 1, learning_rate: 1.0, subsample: 1, max_depth: 0",
                                    "n_estimators: null, learning_rate: 0.3"])
def test_values_at_the_ends_of_a_range_and_the_librarys_default_pass(params):
    assert load_config(text=CONFIG.replace("MODEL", "xgboost").replace("PARAMS", params)).stages["m"].params


@pytest.mark.parametrize("model", ["xgboost", "lightgbm", "catboost"])
def test_every_bound_is_a_parameter_of_its_entry_and_the_portfolio_keeps_to_them(model):
    spec = get_model_spec(model)
    assert spec.bounds and set(spec.bounds) <= set(spec.params)
    for member in spec.portfolio:
        for params in member.params.values():
            assert spec.bound_problems(params) == [], (member, params)


def test_a_tune_space_reaching_out_of_range_is_refused_before_any_trial():
    spec = get_model_spec("xgboost")
    assert spec.value_problems({"learning_rate": 0.0}) == [
        ("learning_rate", "parameter 'learning_rate' of model 'xgboost': input should be greater than 0, not 0.0")]
    assert spec.value_problems({"learning_rate": 0.05}) == []
