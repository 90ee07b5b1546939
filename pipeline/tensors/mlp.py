"""A multilayer perceptron for tabular data: continuous columns plus embedded categories.

The architecture is a small dataclass saved as JSON beside the ``state_dict``, so a model
rebuilds on any machine from plain numbers (no pickled classes).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import nn


def default_embedding_dim(cardinality: int) -> int:
    """fastai's rule of thumb, capped: 1.6 * n^0.56, at most 32."""
    return max(2, min(32, round(1.6 * cardinality ** 0.56)))


@dataclass(frozen=True)
class MLPArchitecture:
    """Everything needed to rebuild the network; ``continuous_index`` selects X's columns."""

    n_features: int
    continuous_index: list[int]
    cardinalities: list[int] = field(default_factory=list)
    embedding_dims: list[int] = field(default_factory=list)
    hidden: list[int] = field(default_factory=lambda: [128, 64])
    dropout: float = 0.1
    batch_norm: bool = False
    # Outputs per row: 1 (a binary logit or a regression value) or K class logits.
    n_outputs: int = 1
    # The continuous columns' training mean and standard deviation, which the network scales
    # its input by (None: it takes them as they are, as networks saved before these did).
    input_mean: list[float] | None = None
    input_std: list[float] | None = None

    def __post_init__(self) -> None:
        for name in ("input_mean", "input_std"):
            values = getattr(self, name)
            if values is not None and len(values) != len(self.continuous_index):
                raise ValueError(f"{name} has {len(values)} values for {len(self.continuous_index)} continuous columns")

    def to_dict(self) -> dict[str, Any]:
        """Plain numbers for ``architecture.json``; a one-output network's file is written as
        before ``n_outputs`` existed, and one without input scaling as before it, so older
        readers still load them."""
        data = {"format_version": 1, **asdict(self)}
        if self.n_outputs == 1:
            del data["n_outputs"]
        for name in ("input_mean", "input_std"):
            if data[name] is None:
                del data[name]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MLPArchitecture:
        data = dict(data)
        if data.pop("format_version", None) != 1:
            raise ValueError("unsupported MLP architecture format")
        return cls(**data)

    def build(self) -> TabularMLP:
        return TabularMLP(self)


class TabularMLP(nn.Module):
    """[continuous | embeddings] -> (Linear, [BatchNorm], ReLU, [Dropout]) x len(hidden) -> n_outputs.

    One output comes back as a vector (n,), several as a matrix (n, n_outputs)."""

    def __init__(self, arch: MLPArchitecture) -> None:
        super().__init__()
        self.arch = arch
        all_columns = len(arch.continuous_index) == arch.n_features
        # Selecting every column would copy each batch for nothing.
        self.register_buffer("continuous_index", None if all_columns else
                             torch.tensor(arch.continuous_index, dtype=torch.long), persistent=False)
        # Not in the state_dict: architecture.json holds them, so older model.pt files still load.
        scaled = arch.input_mean is not None and arch.input_std is not None
        self.register_buffer("input_mean", torch.tensor(arch.input_mean, dtype=torch.float32) if scaled else None,
                             persistent=False)
        self.register_buffer("input_std", torch.tensor(arch.input_std, dtype=torch.float32) if scaled else None,
                             persistent=False)
        self.embeddings = nn.ModuleList(nn.Embedding(n, d) for n, d in zip(arch.cardinalities, arch.embedding_dims))
        width = len(arch.continuous_index) + sum(arch.embedding_dims)
        layers: list[nn.Module] = []
        for size in arch.hidden:
            layers.append(nn.Linear(width, size))
            if arch.batch_norm:
                layers.append(nn.BatchNorm1d(size))
            layers.append(nn.ReLU())
            if arch.dropout:
                layers.append(nn.Dropout(arch.dropout))
            width = size
        layers.append(nn.Linear(width, arch.n_outputs))
        self.body = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor, codes: torch.Tensor | None = None) -> torch.Tensor:
        continuous = x if self.continuous_index is None else x.index_select(1, self.continuous_index)
        if self.input_mean is not None:
            continuous = (continuous - self.input_mean) / self.input_std
        parts = [continuous]
        if self.embeddings:
            if codes is None:
                raise ValueError("this network embeds categorical columns: pass their codes")
            parts += [emb(codes[:, i]) for i, emb in enumerate(self.embeddings)]
        hidden = parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)
        out = self.body(hidden)
        return out.squeeze(1) if self.arch.n_outputs == 1 else out
