"""The model registry: a name -> its entry (``pipeline.models.model_spec.ModelSpec``), what is
registered, and what the stages ask of it: the models a ``train`` stage accepts, ``auto``'s
portfolio (``portfolio_members``), ``init``'s choices for a task (``init_choices``) and a
stack's default meta-model (``meta_model_for``), each read from the entries when asked, so a
model a plugin registers is among them.

Everything that depends on which model it is (what ``train`` offers, what can stream from
Parquet, how ``export`` writes it and ``predict`` reads it back, what importances it computes
itself, where ``auto`` and ``init`` place it) is a field of the entry, so plugin code adds a
model with ``register_model`` and no module here names it. The built-in entries are in
``pipeline.models.catalogue``.
"""

from __future__ import annotations

import difflib
from typing import Any

from pipeline.core.plugins import note_replacement
from pipeline.models.formats import (
    ModelFormat,
)
from pipeline.models.roles import InitChoice, PortfolioMember
from pipeline.models.model_spec import MODELS, FitInputs, ModelSpec, models_for  # noqa: F401 - the registry's names

# The entry the torch stage trains (the MLP), and the composites the ensemble, bag and stack
# stages build: names the stages take from here rather than spell.
MLP_MODEL, ENSEMBLE_MODEL, BAGGED_MODEL, STACKED_MODEL = "mlp", "ensemble", "bagged", "stacked"
LINEAR_BASELINE = "a linear baseline: fast, and a yardstick for the trees"


def register_model(spec: ModelSpec) -> ModelSpec:
    """Add ``spec`` to the registry (plugin code calls this); an existing name is replaced, so a
    plugin reloaded in a notebook does not fail. Returns ``spec``.

    Examples:
        >>> from pipeline.models import MODELS, ModelSpec, register_model
        >>> spec = register_model(ModelSpec(name="nearest_centroid", cpu_class="sklearn.neighbors:NearestCentroid",
        ...                                 seed_param=None, description="class centroids (scikit-learn)"))
        >>> MODELS["nearest_centroid"] is spec, spec.tasks
        (True, ('binary', 'multiclass'))
        >>> del MODELS["nearest_centroid"]       # the example's model, taken back out
    """
    if not isinstance(spec, ModelSpec):
        raise TypeError(f"register_model takes a ModelSpec, not {type(spec).__name__}")
    if not isinstance(spec.format, ModelFormat):
        raise TypeError(f"model '{spec.name}': format must be a ModelFormat, not {type(spec.format).__name__}")
    import sys

    by = sys._getframe(1).f_globals.get("__name__")
    note_replacement("model", spec.name, _REGISTERED_BY.get(spec.name), by)
    _REGISTERED_BY[spec.name] = by
    MODELS[spec.name] = spec
    return spec


# The module that registered each model (for the warning when another replaces it).
_REGISTERED_BY: dict[str, str | None] = {}


def portfolio_members() -> list[PortfolioMember]:
    """Every configuration of every registered model in ``auto``'s portfolio, in fitting order
    (``rank``, then registration order), read now: a plugin's model is among them."""
    members = [member for spec in MODELS.values() for member in spec.portfolio]
    return sorted(members, key=lambda member: member.rank)


def init_choices(task: str) -> list[tuple[str, InitChoice]]:
    """The models ``init`` writes for ``task``: ``(name, choice)`` by ``rank``, read now."""
    found = [(spec.name, choice) for spec in MODELS.values() for choice in spec.init_choices if task in choice.tasks]
    return sorted(found, key=lambda pair: pair[1].rank)


def meta_model_for(task: str) -> str:
    """The registered model a ``stack`` fits on its members' scores for ``task`` by default."""
    for spec in MODELS.values():
        if task in spec.meta_model_for:
            return spec.name
    raise KeyError(f"no registered model is a stack's default meta-model for a {task} task; name one "
                   "(stages.<name>.model)")


def trainable_models() -> list[str]:
    """Names a ``train`` stage accepts, read now (so models registered later are included)."""
    return sorted(name for name, spec in MODELS.items() if spec.trainable)


def trainable_model_named(model: str) -> str:
    """``model`` if a ``train`` stage can fit it, else a ValueError naming the closest one. Read
    when a config is validated, not at import: plugins register models later."""
    known = trainable_models()
    if model in MODELS and model not in known:         # a model with a stage kind of its own
        raise ValueError(f"model '{model}' is not fitted by a train stage: it is trained by its own stage kind; "
                         f"train fits {', '.join(known)}")
    if model not in known:
        close = difflib.get_close_matches(model, known, n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise ValueError(f"unknown model '{model}' (known: {', '.join(known)}){hint}")
    return model


def checked_params(model: str | None, params: dict[str, Any]) -> dict[str, Any]:
    """``params`` if every key is a parameter of ``model`` (None: not known yet), else a
    ValueError naming each unknown key and its closest valid name."""
    problems = get_model_spec(model).check_params(params) if model else []
    if problems:
        raise ValueError("; ".join(problems))
    return params


def get_model_spec(name: str) -> ModelSpec:
    """The entry called ``name``; KeyError with the closest known name otherwise.

    Not cached: a dict lookup is cheap, and a cache would hide models registered later.

    Examples:
        >>> from pipeline.models import get_model_spec
        >>> spec = get_model_spec("xgboost")
        >>> spec.cpu_class, spec.supports_eval_set
        ('xgboost:XGBClassifier', True)
        >>> get_model_spec("xgbost")
        Traceback (most recent call last):
        ...
        KeyError: "unknown model 'xgbost' (known: ...); did you mean 'xgboost'?"
    """
    try:
        return MODELS[name]
    except KeyError:
        close = difflib.get_close_matches(name, list(MODELS), n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise KeyError(f"unknown model '{name}' (known: {', '.join(sorted(MODELS))}){hint}") from None


