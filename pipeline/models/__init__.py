"""The model registry and the file formats exported models are saved in.

``registry`` maps a model name to its estimators, parameter translation, capabilities and
format; ``formats`` writes and reads the model files. Both are re-exported here so callers
import ``from pipeline.models import ...`` whichever module a name lives in.
"""

from pipeline.models.formats import (
    JOBLIB,
    TORCH_STATE_DICT,
    XGBOOST_JSON,
    JoblibFormat,
    ModelFormat,
    Predictor,
    TorchStateDictFormat,
    XGBoostJsonFormat,
)
from pipeline.models.registry import MODELS, ModelSpec, ParamMap, get_model_spec, register_model, trainable_models

__all__ = [
    "JOBLIB", "MODELS", "TORCH_STATE_DICT", "XGBOOST_JSON", "JoblibFormat", "ModelFormat", "ModelSpec",
    "ParamMap", "Predictor", "TorchStateDictFormat", "XGBoostJsonFormat", "get_model_spec", "register_model",
    "trainable_models",
]
