"""Built-in stage kinds. Each is a params model plus a run function, and each has a library
function that works on data you already hold (``load_table``, ``split_frame``,
``build_features``, ``train_model``, ``train_torch``, ``evaluate_models``, ``predictions_frame``)."""

# Imported in data-flow order: registration order is the order kinds are listed to users.
# isort: off
from pipeline.stages.spec import STAGE_KINDS, StageContext, StageKind, StageSpec, register_stage
from pipeline.stages.load import LoadSpec, load_table
from pipeline.stages.aggregate import AggregateSpec, aggregate_events
from pipeline.stages.label import LabelSpec, label_events
from pipeline.stages.join import JoinSpec, join_tables
from pipeline.stages.split import SplitData, SplitSpec, split_frame
from pipeline.stages.features import FeatureSet, FeaturesSpec, build_features
from pipeline.stages.training.cross_validation import CVResult, cross_validate
from pipeline.stages.train import TrainedModel, TrainSpec, train_model
from pipeline.stages.training.bagging import BaggedModel, bag_model
from pipeline.stages.torch_mlp import TorchSpec, TorchTrainedModel, train_torch
from pipeline.stages.ensemble import EnsembleModel, EnsembleSpec, fit_ensemble
from pipeline.stages.stack import StackedModel, StackSpec, fit_stack
from pipeline.stages.auto import AutoSpec, fit_auto
from pipeline.stages.evaluate import EvaluateSpec, Evaluation, binary_metrics, evaluate_models
from pipeline.stages.export import ExportSpec, predictions_frame, save_model
from pipeline.stages.promote import PromoteSpec, Promotion
from pipeline.stages.python import PythonSpec
# isort: on

__all__ = [
    "STAGE_KINDS", "AggregateSpec", "LabelSpec", "aggregate_events", "label_events", "JoinSpec", "join_tables", "CVResult", "EnsembleModel", "EnsembleSpec", "EvaluateSpec", "Evaluation", "ExportSpec", "FeatureSet", "FeaturesSpec",
    "LoadSpec", "PythonSpec", "SplitData", "SplitSpec", "StageContext", "StageKind", "StageSpec",
    "TorchSpec", "TorchTrainedModel", "TrainSpec", "TrainedModel", "binary_metrics", "build_features", "cross_validate", "evaluate_models",
    "load_table", "predictions_frame", "register_stage", "save_model", "split_frame", "train_model",
    "fit_ensemble", "train_torch", "StackedModel", "StackSpec", "fit_stack", "bag_model", "BaggedModel",
    "AutoSpec", "fit_auto", "PromoteSpec", "Promotion",
]
