"""The model registry and the file formats exported models are saved in.

``registry`` maps a model name to its estimators, parameter translation, capabilities and
format; ``formats`` writes and reads the model files. Both are re-exported here so callers
import ``from pipeline.models import ...`` whichever module a name lives in.
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
    MODELS,
    EstimatorClasses,
    FitArguments,
    FitInputs,
    ModelSpec,
    ParamMap,
    checked_params,
    get_model_spec,
    models_for,
    register_model,
    trainable_model_named,
    trainable_models,
)
from pipeline.models.roles import InitChoice, PortfolioMember
from pipeline.models.steps import Pruning

__all__ = [
    "JOBLIB", "LINEAR_COEFFICIENTS", "MODELS", "SKLEARN_TRUSTED_TYPES", "SKOPS", "TORCH_STATE_DICT", "XGBOOST_JSON", "JoblibFormat",
    "LinearCoefficientsFormat", "ModelFormat", "ModelSpec", "ParamMap", "Predictor", "SkopsFormat", "TorchStateDictFormat", "XGBoostJsonFormat",
    "EstimatorClasses", "get_model_spec", "CATBOOST_CBM", "LIGHTGBM_TEXT", "CatBoostCbmFormat", "LightGBMTextFormat",
    "FitArguments", "FitInputs", "InitChoice", "PortfolioMember", "Pruning", "checked_params", "models_for", "register_model", "trainable_model_named",
    "trainable_models",
]
