"""What the stages need to know about a model, held by its registry entry: its place and
defaults in ``auto``'s portfolio (``PortfolioMember``), its defaults in the config ``init``
drafts (``InitChoice``), and whether a ``stack`` takes it as its meta-model by default
(``ModelSpec.meta_model_for``). The stages read these from the registry, so a model added by a
plugin joins the portfolio, ``init`` and tuning (``ModelSpec.pruning``) from its own file, and
no stage names a model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pipeline.features.auto_ops import ENCODED

__all__ = ["InitChoice", "PortfolioMember"]


@dataclass(frozen=True)
class PortfolioMember:
    """One configuration of a model in ``auto``'s portfolio: its registry name, its parameters
    per task kind (``"*"``: every task), and who fits one fold (``train_model`` for registry
    estimators; the MLP's own trainer)."""

    model: str
    params: Mapping[str, Mapping[str, Any]]
    trainer: str = "registry"           # "registry" or "torch": see pipeline.stages.auto._TRAINERS
    tasks: tuple[str, ...] = ("binary", "multiclass", "regression")
    # One fit's seconds relative to the first member's on the same rows; the plan projects a
    # member's first fit from the first member's. The built-in entries' costs are LightGBM's
    # multiples measured on fold 0 of Telco (5,634 rows) and of a generated 20,000-row table,
    # between the two (CatBoost 32x and 4.3x, the MLP 34x and 2.1x, the random forest 9.1x and
    # 9.4x, extra trees 7.9x and 3.3x, XGBoost 1.1x and 1.3x, the linear model 0.3x and 0.1x):
    # a projection, corrected by the fits the stage measures as it goes.
    cost: float = 1.0
    # The same multiple on a GPU run, where the members with CUDA builds fit on the device and
    # LightGBM (the first member) stays on the host's cores; None: ``cost`` (a member that fits
    # on the host either way). The built-in entries' are ``cost`` times the member's GPU-run
    # multiple over its CPU-run multiple on the same host, measured by
    # ``scripts/gpu_kit/probe_members.py`` on an H200 beside 16 cores (2026-12-04: a 100,000-row
    # binary and a 20,000-row 7-class table, the geometric mean of the two; docs/gpu.md): the
    # MLP 0.54x, XGBoost 0.95x, CatBoost 0.92x, cuML's linear model 1.2x and forest 1.4x.
    device_cost: float | None = None
    # The member's name in the leaderboard and the blend, where it is a second configuration of
    # a model already in the portfolio (None: the model's name).
    name: str | None = None
    # A second configuration, fitted only with the time the others left (planned mode): after
    # every member that earned weight is bagged, in the order of its model's holdout score.
    extra: bool = False
    # Its fit grows with the classes of a multiclass task (a booster's tree per class per round).
    per_class: bool = False
    # What it reads of a categorical column of many levels (``pipeline.features.auto_ops``):
    # the column's target encoding, or its codes (a model with category statistics of its own).
    reads: str = ENCODED
    # Its place in the fitting order (lower first; the first member is fitted whatever the clock
    # says, so it is cheap and strong), and whether the ``quick`` preset fits it.
    rank: float = 100.0
    quick: bool = False

    @property
    def label(self) -> str:
        return self.name or self.model

    def params_for(self, task: str) -> dict[str, Any]:
        return {**self.params.get("*", {}), **self.params.get(task, {})}


@dataclass(frozen=True)
class InitChoice:
    """A model ``pipeline init`` writes into a drafted config for ``tasks``, with ``params`` and
    the comment that says why; ``rank`` orders the models of one task (lower first)."""

    tasks: tuple[str, ...]
    params: Mapping[str, Any]
    why: str
    rank: float = 100.0
