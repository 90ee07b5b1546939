"""Models built of other models: an ensemble, a bag and a stack; each member is saved in its own
model's format, found in the registry (so a plugin's model can be a member)."""

from __future__ import annotations

from pipeline.models.blending import BaggedFormat, EnsembleFormat, StackFormat
from pipeline.models.formats import ModelFormat
from pipeline.models.registry import BAGGED_MODEL, ENSEMBLE_MODEL, STACKED_MODEL, get_model_spec, register_model
from pipeline.models.model_spec import ModelSpec


def _format_of(name: str) -> ModelFormat:
    """A registered model's format: an ensemble saves and loads each member with its own."""
    return get_model_spec(name).format


# Built by the ensemble stage from trained models, not trained (like the MLP, an entry for its
# format). Its format finds members' formats here, so a plugin's model can be a member.
register_model(ModelSpec(
    name=ENSEMBLE_MODEL, seed_param=None, tasks=("binary", "multiclass", "regression"),
    description="weighted average of other models' scores (built by the ensemble stage)",
    format=EnsembleFormat(_format_of),
))

# Built by ``bag:`` on a train stage: k fits of one model on k folds of the training rows,
# averaged; each member is saved in its base model's format.
register_model(ModelSpec(
    name=BAGGED_MODEL, seed_param=None, tasks=("binary", "multiclass", "regression"),
    description="k fits of one model on k folds of the training rows, averaged (built by bag: on a train stage)",
    format=BaggedFormat(_format_of),
))

# Built by the stack stage: a meta-model fitted on its members' out-of-fold scores.
register_model(ModelSpec(
    name=STACKED_MODEL, seed_param=None, tasks=("binary", "multiclass", "regression"),
    description="a meta-model fitted on other models' out-of-fold scores (built by the stack stage)",
    format=StackFormat(_format_of),
))
