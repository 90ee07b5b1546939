"""Mini-batches as slices of tensors through a per-epoch permutation.

No ``Dataset.__getitem__`` per row and no collate: one ``randperm`` per epoch, then each batch
is one ``index_select`` per tensor, on the device where the tensors already are. When the
tensors are on the host but training runs on a GPU, batches are gathered into pinned buffers
and copied with ``non_blocking=True`` on a side stream one batch ahead, so the copy of batch
k+1 overlaps the compute on batch k. A copied batch stays referenced here until an event
recorded on the compute stream after its use has completed (``InFlightBatches``): its memory
is never back in the allocator while the GPU may still read it, whatever the allocator.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

import torch

Batch = list[torch.Tensor | None]


class Marker(Protocol):
    """A point in a stream's work (``torch.cuda.Event`` is one)."""

    def query(self) -> bool: ...
    def synchronize(self) -> None: ...


class TensorBatches:
    """Iterate over aligned row batches of ``tensors`` (``None`` entries stay ``None``).

    ``min_batch`` drops a final batch smaller than it (BatchNorm cannot train on one row).
    The permutation is drawn on the host from ``generator``, so a seed gives the same batches
    on every device.

    ``steps`` fixes the number of batches per epoch, every one full: a DDP rank whose shard is
    shorter than its peers' wraps around into a fresh permutation of its rows rather than
    running fewer steps (a rank that stops early leaves the others waiting in an all-reduce).
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
        steps: int | None = None,
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
        self.steps = steps
        if steps is not None and (steps < 1 or not self.rows):
            raise ValueError("a fixed number of steps needs at least one step and one row")

    @property
    def crosses_devices(self) -> bool:
        return self.device != self.source

    def __len__(self) -> int:
        if self.steps is not None:
            return self.steps
        full, rest = divmod(self.rows, self.batch_size)
        return full + (1 if rest and rest >= self.min_batch else 0)

    def _order(self) -> torch.Tensor:
        if self.shuffle:
            order = torch.randperm(self.rows, generator=self.generator)
        else:
            order = torch.arange(self.rows)
        return order.to(self.source, non_blocking=True)

    def _slices(self) -> Iterator[torch.Tensor]:
        if self.steps is not None:
            yield from self._fixed_slices(self.steps)
            return
        order = self._order()
        for start in range(0, self.rows, self.batch_size):
            index = order[start:start + self.batch_size]
            if index.shape[0] < self.min_batch:
                return
            yield index

    def _fixed_slices(self, steps: int) -> Iterator[torch.Tensor]:
        """``steps`` full batches: one permutation after another, as many as it takes."""
        wanted = steps * self.batch_size
        orders, have = [], 0
        while have < wanted:
            orders.append(self._order())
            have += self.rows
        order = torch.cat(orders) if len(orders) > 1 else orders[0]
        for start in range(0, wanted, self.batch_size):
            yield order[start:start + self.batch_size]

    def __iter__(self) -> Iterator[Batch]:
        if self.crosses_devices and self.source.type == "cpu":
            yield from self._prefetched()
            return
        for index in self._slices():
            batch = [None if t is None else t.index_select(0, index) for t in self.tensors]
            yield [None if b is None else b.to(self.device) for b in batch] if self.crosses_devices else batch

    # ------------------------------------------------------- host -> GPU
    def _prefetched(self) -> Iterator[Batch]:
        """Gather on the host, copy ahead on a side stream, hand over on the compute stream."""
        cuda = self.device.type == "cuda"
        pin = self.pin_memory and cuda
        copy_stream = torch.cuda.Stream(self.device) if cuda else None
        # Two pinned buffers per tensor: one being copied out while the next is filled.
        buffers = [[None if t is None else _host_buffer(t, self.batch_size, pin) for t in self.tensors]
                   for _ in range(2)]
        copied: list[Any] = [None, None]     # CUDA event per buffer: its last copy has finished

        def stage(k: int, index: torch.Tensor) -> Batch:
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

        in_flight = InFlightBatches()
        compute = None
        handed: Batch | None = None
        slices = self._slices()
        index = next(slices, None)
        ahead = stage(0, index) if index is not None else None
        k = 0
        try:
            while ahead is not None:
                compute = None if copy_stream is None else torch.cuda.current_stream(self.device)
                handed = _hand_over(ahead, copy_stream, compute)
                index = next(slices, None)
                k += 1
                ahead = stage(k, index) if index is not None else None
                yield handed
                # Asked for the next batch: whatever the consumer does with this one is queued.
                in_flight.retire(handed, _compute_done(compute))
                handed = None
        finally:
            if handed is not None:           # the consumer stopped with a batch in hand
                in_flight.retire(handed, _compute_done(compute))
            in_flight.drain()
            for event in copied:             # a batch copied ahead and never handed over
                if event is not None:
                    event.synchronize()


class InFlightBatches:
    """Batches the consumer has moved past, each kept until the compute stream is done with it.

    ``record_stream`` asks PyTorch's caching allocator to hold a freed block until the streams
    that used it finish, but RMM's PyTorch allocator (Dask-CUDA's
    ``rmm_allocator_external_lib_list``) ignores it: a batch freed when the consumer drops it
    went back to the pool at once, and the next copy on the side stream could overwrite it
    while the compute stream still read it. Holding the tensors until the event recorded after
    their use completes makes the lifetime explicit under any allocator. At most ``limit``
    batches wait; past that the host waits for the oldest, which bounds the memory held (the
    compute stream still has ``limit`` batches of work queued, so it does not idle).
    """

    def __init__(self, limit: int = 2) -> None:
        self.limit = limit
        self._held: deque[tuple[Batch, Marker]] = deque()

    def __len__(self) -> int:
        return len(self._held)

    def retire(self, batch: Batch, done: Marker) -> None:
        """Keep ``batch`` until ``done`` completes; let go of the batches already finished."""
        self._held.append((batch, done))
        while self._held:
            oldest = self._held[0][1]
            if not oldest.query():
                if len(self._held) <= self.limit:
                    return
                oldest.synchronize()
            self._held.popleft()

    def drain(self) -> None:
        """Wait for every held batch's work, then let go of them all."""
        while self._held:
            self._held[0][1].synchronize()
            self._held.popleft()


class _Done:
    """The marker of work that ran as it was called (the CPU path): already complete."""

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass


def _compute_done(stream: Any) -> Marker:
    """A marker after the work queued on the compute ``stream`` so far (None: the CPU path)."""
    if stream is None:
        return _Done()
    event = torch.cuda.Event()
    event.record(stream)
    return event


def _hand_over(batch: Batch, copy_stream: Any, compute: Any) -> Batch:
    """Order the ``compute`` stream after the copy of ``batch`` (no-op on the CPU path)."""
    if copy_stream is None:
        return batch
    compute.wait_stream(copy_stream)
    for t in batch:
        if t is not None:
            # PyTorch's own allocator then also guards a batch the consumer keeps past the next one.
            t.record_stream(compute)
    return batch


def _host_buffer(t: torch.Tensor, rows: int, pin: bool) -> torch.Tensor:
    buf = torch.empty((rows, *t.shape[1:]), dtype=t.dtype)
    return buf.pin_memory() if pin else buf
