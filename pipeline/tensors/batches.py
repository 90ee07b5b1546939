"""Mini-batches as slices of tensors through a per-epoch permutation.

No ``Dataset.__getitem__`` per row and no collate: one ``randperm`` per epoch, then each batch
is one ``index_select`` per tensor, on the device where the tensors already are. When the
tensors are on the host but training runs on a GPU, batches are gathered into pinned buffers
and copied with ``non_blocking=True`` on a side stream one batch ahead, so the copy of batch
k+1 overlaps the compute on batch k.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import torch


class TensorBatches:
    """Iterate over aligned row batches of ``tensors`` (``None`` entries stay ``None``).

    ``min_batch`` drops a final batch smaller than it (BatchNorm cannot train on one row).
    The permutation is drawn on the host from ``generator``, so a seed gives the same batches
    on every device.
    """

    def __init__(
        self,
        tensors: Sequence[torch.Tensor | None],
        batch_size: int,
        *,
        shuffle: bool = True,
        generator: torch.Generator | None = None,
        device: torch.device | str | None = None,
        min_batch: int = 1,
        pin_memory: bool = True,
    ) -> None:
        present = [t for t in tensors if t is not None]
        if not present:
            raise ValueError("TensorBatches needs at least one tensor")
        rows = {int(t.shape[0]) for t in present}
        if len(rows) != 1:
            raise ValueError(f"tensors have different row counts: {sorted(rows)}")
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self.tensors = list(tensors)
        self.rows = rows.pop()
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.generator = generator
        self.source = present[0].device
        self.device = torch.device(device) if device is not None else self.source
        self.min_batch = min_batch
        self.pin_memory = pin_memory

    @property
    def crosses_devices(self) -> bool:
        return self.device != self.source

    def __len__(self) -> int:
        full, rest = divmod(self.rows, self.batch_size)
        return full + (1 if rest and rest >= self.min_batch else 0)

    def _order(self) -> torch.Tensor:
        if self.shuffle:
            order = torch.randperm(self.rows, generator=self.generator)
        else:
            order = torch.arange(self.rows)
        return order.to(self.source, non_blocking=True)

    def _slices(self) -> Iterator[torch.Tensor]:
        order = self._order()
        for start in range(0, self.rows, self.batch_size):
            index = order[start:start + self.batch_size]
            if index.shape[0] < self.min_batch:
                return
            yield index

    def __iter__(self) -> Iterator[list[torch.Tensor | None]]:
        if self.crosses_devices and self.source.type == "cpu":
            yield from self._prefetched()
            return
        for index in self._slices():
            batch = [None if t is None else t.index_select(0, index) for t in self.tensors]
            yield [None if b is None else b.to(self.device) for b in batch] if self.crosses_devices else batch

    # ------------------------------------------------------- host -> GPU
    def _prefetched(self) -> Iterator[list[torch.Tensor | None]]:
        """Gather on the host, copy ahead on a side stream, hand over on the compute stream."""
        cuda = self.device.type == "cuda"
        pin = self.pin_memory and cuda
        copy_stream = torch.cuda.Stream(self.device) if cuda else None
        # Two pinned buffers per tensor: one being copied out while the next is filled.
        buffers = [[None if t is None else _host_buffer(t, self.batch_size, pin) for t in self.tensors]
                   for _ in range(2)]
        copied: list[Any] = [None, None]     # CUDA event per buffer: its last copy has finished

        def stage(k: int, index: torch.Tensor) -> list[torch.Tensor | None]:
            slot = k % 2
            if copied[slot] is not None:
                copied[slot].synchronize()
            n = int(index.shape[0])
            host = [None if t is None else torch.index_select(t, 0, index, out=buf[:n])
                    for t, buf in zip(self.tensors, buffers[slot])]
            if copy_stream is None:
                # No copy engine to overlap with: a plain copy, so the buffer can be refilled.
                return [None if h is None else h.to(self.device, copy=True) for h in host]
            with torch.cuda.stream(copy_stream):
                moved = [None if h is None else h.to(self.device, non_blocking=True) for h in host]
                event = torch.cuda.Event()
                event.record(copy_stream)
                copied[slot] = event
            return moved

        slices = self._slices()
        index = next(slices, None)
        ahead = stage(0, index) if index is not None else None
        k = 0
        while ahead is not None:
            current = ahead
            if copy_stream is not None:
                compute = torch.cuda.current_stream(self.device)
                compute.wait_stream(copy_stream)
                for t in current:
                    if t is not None:
                        t.record_stream(compute)     # the allocator must not reuse it early
            index = next(slices, None)
            k += 1
            ahead = stage(k, index) if index is not None else None
            yield current


def _host_buffer(t: torch.Tensor, rows: int, pin: bool) -> torch.Tensor:
    buf = torch.empty((rows, *t.shape[1:]), dtype=t.dtype)
    return buf.pin_memory() if pin else buf
