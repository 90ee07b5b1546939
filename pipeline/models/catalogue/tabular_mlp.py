"""The tabular MLP (PyTorch): trained by the torch stage, an entry for its file format and its
place in ``auto``'s portfolio."""

from __future__ import annotations

from pipeline.models.formats import TORCH_STATE_DICT
from pipeline.models.registry import MLP_MODEL
from pipeline.models.roles import PortfolioMember
from pipeline.models.model_spec import ModelSpec

MLP = ModelSpec(
    name=MLP_MODEL,
    seed_param=None,
    description="tabular MLP with categorical embeddings (PyTorch; trained by the torch stage)",
    format=TORCH_STATE_DICT,
    tasks=("binary", "multiclass", "regression"),
    portfolio=(PortfolioMember(MLP_MODEL, {"*": {"hidden": [256, 128], "dropout": 0.1, "epochs": 40,
                                                 "batch_size": 512, "learning_rate": 0.003,
                                                 "weight_decay": 1e-5,
                                                 "early_stopping": {"monitor": "val_loss", "patience": 5}}},
                               trainer="torch", cost=6.0, device_cost=3.3, rank=6),),
)
