"""The ranks a training runs on: this process alone (``Solo``) or a torch.distributed group.

``fit`` is written once. What differs under DDP goes through a ``Ranks``: the module is
wrapped so gradients are averaged across ranks, the epoch's loss sums are added up, every
rank's validation outputs are gathered (metrics such as AUC cannot be averaged from shards),
and rank 0's early-stopping decision is broadcast, so every rank stops at the same epoch
whatever rounding its own arithmetic did.
"""

from __future__ import annotations

from typing import Protocol

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel


class Ranks(Protocol):
    """The collective steps of a training loop; every rank calls each one in the same order."""

    rank: int
    world: int

    def wrap(self, module: nn.Module, device: torch.device) -> nn.Module: ...
    def total(self, values: torch.Tensor) -> torch.Tensor: ...
    def gather(self, rows: torch.Tensor) -> torch.Tensor: ...
    def decide(self, flags: torch.Tensor) -> torch.Tensor: ...


class Solo:
    """One process: every collective step is the identity."""

    rank = 0
    world = 1

    def wrap(self, module: nn.Module, device: torch.device) -> nn.Module:
        return module

    def total(self, values: torch.Tensor) -> torch.Tensor:
        return values

    def gather(self, rows: torch.Tensor) -> torch.Tensor:
        return rows

    def decide(self, flags: torch.Tensor) -> torch.Tensor:
        return flags


SOLO = Solo()


class GroupRanks:
    """The default torch.distributed process group (gloo on CPUs, NCCL on GPUs), counting the
    bytes each rank hands to its collectives: gradient buckets and the loop's own steps."""

    def __init__(self) -> None:
        self.rank = dist.get_rank()
        self.world = dist.get_world_size()
        self.gradient_bytes = 0      # all-reduced by DDP, summed over the buckets of every step
        self.other_bytes = 0         # loss sums, validation gathers, broadcast decisions

    def wrap(self, module: nn.Module, device: torch.device) -> nn.Module:
        ddp = DistributedDataParallel(module, device_ids=[device] if device.type == "cuda" else None)
        ddp.register_comm_hook(self, _counted_allreduce)
        return ddp

    def total(self, values: torch.Tensor) -> torch.Tensor:
        summed = values.clone()
        self.other_bytes += _nbytes(summed)
        dist.all_reduce(summed)
        return summed

    def gather(self, rows: torch.Tensor) -> torch.Tensor:
        """Every rank's ``rows`` concatenated in rank order (shards may differ in length:
        each is padded to the longest for ``all_gather`` and cut back after)."""
        count = torch.tensor([rows.shape[0]], dtype=torch.int64, device=rows.device)
        counts = [torch.empty_like(count) for _ in range(self.world)]
        dist.all_gather(counts, count)
        sizes = [int(c.item()) for c in counts]
        longest = max(max(sizes), 1)
        padded = rows.new_zeros((longest, *rows.shape[1:]))
        padded[:rows.shape[0]] = rows
        parts = [torch.empty_like(padded) for _ in range(self.world)]
        self.other_bytes += _nbytes(padded) + _nbytes(count)
        dist.all_gather(parts, padded)
        return torch.cat([part[:size] for part, size in zip(parts, sizes)])

    def decide(self, flags: torch.Tensor) -> torch.Tensor:
        decided = flags.clone()
        self.other_bytes += _nbytes(decided)
        dist.broadcast(decided, src=0)
        return decided


def _counted_allreduce(ranks, bucket):  # type: ignore[no-untyped-def]
    """DDP's own all-reduce (the mean of the ranks' gradients), with the bucket's bytes counted.

    Unannotated on purpose: DDP refuses a hook whose ``bucket`` annotation is not the
    ``dist.GradBucket`` class itself, and postponed annotations are strings."""
    ranks.gradient_bytes += _nbytes(bucket.buffer())
    return allreduce_hook(None, bucket)


def _nbytes(tensor: torch.Tensor) -> int:
    return int(tensor.numel() * tensor.element_size())
