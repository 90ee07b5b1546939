"""The hand-off from the feature matrices to PyTorch, and a record of what each one copied.

The feature workflow's output becomes one dense matrix exactly once (``Backend.to_matrix``);
after that every consumer reads that buffer. PyTorch gets it through DLPack with
``copy=False``, so sharing is checked by the producer, and the record compares addresses as
well: a hand-off the manifest calls zero-copy is one whose tensor starts at the array's
first byte.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

from pipeline.backends import Backend
from pipeline.core.errors import DataError


@dataclass(frozen=True)
class Handoff:
    """One conversion on the way to a model: what it was, and how many bytes it copied."""

    name: str                 # e.g. "train.X" or "torch:train.X"
    shape: tuple[int, ...]
    dtype: str
    device: str
    bytes_copied: int
    zero_copy: bool
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def matrix_handoff(name: str, frame: Any, matrix: Any, backend: Backend) -> Handoff:
    """Record the frame -> dense matrix conversion: the one copy the hand-off allows.

    A columnar frame cannot be shared as one 2-D buffer (its columns live apart and may have
    different dtypes), so this step always copies; the note says what was gathered.
    """
    dtypes = Counter(str(frame[c].dtype) for c in frame.columns)
    mix = ", ".join(f"{n} {dtype}" for dtype, n in sorted(dtypes.items()))
    order = "column-major" if _is_column_major(matrix) else "row-major"
    return Handoff(
        name=name, shape=tuple(int(n) for n in matrix.shape), dtype=str(matrix.dtype),
        device=backend.name, bytes_copied=int(matrix.nbytes), zero_copy=False,
        note=f"columnar frame ({mix}) gathered into one {order} {matrix.dtype} matrix: the one allowed copy",
    )


def to_torch(array: Any, backend: Backend, name: str) -> tuple[Any, Handoff]:
    """``array`` as a tensor on its own device, shared through DLPack when at all possible.

    Where sharing is impossible (negative strides, non-native byte order, a dtype DLPack
    cannot carry) the array is copied once and the record says so and why, instead of
    copying silently.
    """
    shape = tuple(int(n) for n in array.shape)
    reason = _unshareable(array)
    tensor = None
    if reason is None:
        try:
            tensor = backend.to_torch(array, copy=False)
        except (BufferError, RuntimeError, TypeError, ValueError) as exc:
            reason = f"{type(exc).__name__}: {exc}".splitlines()[0]
    if tensor is None:
        try:
            fresh = backend.array.array(array, dtype=array.dtype.newbyteorder("="), copy=True)
            tensor = backend.to_torch(fresh, copy=False)
        except (BufferError, RuntimeError, TypeError, ValueError) as again:
            raise DataError(f"cannot hand '{name}' ({array.dtype}, shape {shape}) to PyTorch: {again}; "
                            "the features stage must produce numeric matrices") from again
        note = f"copied: zero-copy impossible ({reason})"
        zero_copy = False
    else:
        zero_copy = tensor.data_ptr() == backend.data_address(array)
        note = "" if zero_copy else "copied: the tensor does not start at the array's address"
        if zero_copy and not getattr(array.flags, "writeable", True):
            note = "shared a read-only array: PyTorch does not enforce read-only, and nothing here writes to it"
    record = Handoff(
        name=name, shape=shape, dtype=str(tensor.dtype).removeprefix("torch."), device=str(tensor.device),
        bytes_copied=0 if zero_copy else int(tensor.nbytes), zero_copy=zero_copy, note=note,
    )
    return tensor, record


def _unshareable(array: Any) -> str | None:
    """Why DLPack must not be tried at all (PyTorch 2.13 aborts the process on these)."""
    if any(stride < 0 for stride in array.strides):
        return "negative strides, which PyTorch tensors cannot express"
    return None


def _is_column_major(matrix: Any) -> bool:
    flags = getattr(matrix, "flags", None)
    return bool(flags is not None and flags.f_contiguous and not flags.c_contiguous)
