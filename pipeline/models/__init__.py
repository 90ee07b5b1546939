"""The models: the contract, the registry, the catalogue of built-in entries and the file
formats exported models are saved in.

``model_spec`` is the contract (``ModelSpec``: a model's estimators, parameter translation,
capabilities, format, and what the stages read of it: ``roles``, ``steps``); ``registry`` maps a
name to its entry; ``catalogue`` holds the built-in entries, one module per family (linear,
forests, xgboost, lightgbm, catboost, tabular_mlp, composites); ``formats`` writes and reads the model
files. Names are re-exported here so callers import ``from pipeline.models import ...``
whichever module a name lives in.
"""

from pipeline.models.formats import (
    JOBLIB,
    LINEAR_COEFFICIENTS,
    SKLEARN_TRUSTED_TYPES,
    SKOPS,
    TORCH_STATE_DICT,
    XGBOOST_JSON,
    JoblibFormat,
    LinearCoefficientsFormat,
    ModelFormat,
    Predictor,
    SkopsFormat,
    TorchStateDictFormat,
    XGBoostJsonFormat,
)
from pipeline.models.gbdt_formats import CATBOOST_CBM, LIGHTGBM_TEXT, CatBoostCbmFormat, LightGBMTextFormat
from pipeline.models.registry import (
    checked_params,
    get_model_spec,
    register_model,
    trainable_model_named,
    trainable_models,
)
from pipeline.models.roles import InitChoice, PortfolioMember
from pipeline.models.model_spec import MODELS, EstimatorClasses, FitArguments, FitInputs, ModelSpec, ParamMap, models_for
from pipeline.models.steps import Pruning

# The built-in entries, registered when the package is first imported (one module per family).
import pipeline.models.catalogue  # noqa: E402,F401  isort: skip

__all__ = [
    "JOBLIB", "LINEAR_COEFFICIENTS", "MODELS", "SKLEARN_TRUSTED_TYPES", "SKOPS", "TORCH_STATE_DICT", "XGBOOST_JSON", "JoblibFormat",
    "LinearCoefficientsFormat", "ModelFormat", "ModelSpec", "ParamMap", "Predictor", "SkopsFormat", "TorchStateDictFormat", "XGBoostJsonFormat",
    "EstimatorClasses", "get_model_spec", "CATBOOST_CBM", "LIGHTGBM_TEXT", "CatBoostCbmFormat", "LightGBMTextFormat",
    "FitArguments", "FitInputs", "InitChoice", "PortfolioMember", "Pruning", "checked_params", "models_for", "register_model", "trainable_model_named",
    "trainable_models",
]
