"""The dense matrix a frame becomes (``Backend.to_matrix``), built the way its consumers read it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any


# Rows filled together by the blocked fill: about 1 MiB of the matrix, which stays in a core's
# L2 cache while each column writes its stretch of those rows.
BLOCK_BYTES = 1 << 20


def row_major_matrix(
    xp: ModuleType,
    n_rows: int,
    names: Sequence[Any],
    column_values: Callable[[Any], Any],
    dtype: Any,
    *,
    map_spans: Callable[[Callable[[tuple[int, int]], None], list[tuple[int, int]]], Any] | None = None,
    spans: int = 1,
) -> Any:
    """A C-contiguous (row-major) ``n_rows x len(names)`` matrix of ``xp`` (numpy or cupy).

    Every consumer reads rows (batch gathers, XGBoost, cuML's forest inference), but NumPy and
    cuDF both build a column-major matrix from a frame. Filling a preallocated row-major one
    is the single copy; the assignment converts each column's dtype on the way in, so the
    peak is the matrix plus at most one column (``column_values`` returns a column as a 1-D
    array, a view where the frame allows one). Converting a column-major matrix afterwards
    would hold both matrices at once.

    Without ``map_spans`` (the GPU) the matrix is filled a column at a time. With it (the CPU),
    a column that had to be converted (it owns its data) is still written whole at once, and
    freed before the next; the columns that are views are written a block of rows at a time,
    every column's stretch of a block before the next block: a whole column written into a
    row-major matrix touches every cache line of it, so 27 columns of 2M rows passed the
    matrix through memory 27 times (0.66 s of CPU; by blocks 0.25 s). The rows are cut into
    ``spans`` contiguous spans, which ``map_spans(fill, spans)`` runs (on threads: each writes
    its own rows). The values written are the same either way.
    """
    out = xp.empty((n_rows, len(names)), dtype=dtype, order="C")
    if map_spans is None:
        for j, name in enumerate(names):
            out[:, j] = column_values(name)
        return out
    views = []
    for j, name in enumerate(names):
        values = column_values(name)
        if values.flags.owndata:             # a conversion made for this matrix: write it, let it go
            out[:, j] = values
        else:
            views.append((j, values))
    block = max(256, BLOCK_BYTES // max(1, len(names) * out.itemsize))

    def fill(span: tuple[int, int]) -> None:
        start, stop = span
        for first in range(start, stop, block):
            last = min(first + block, stop)
            for j, values in views:
                out[first:last, j] = values[first:last]

    if views and n_rows:
        map_spans(fill, row_spans(n_rows, spans, block))
    return out


def row_spans(n_rows: int, parts: int, block: int) -> list[tuple[int, int]]:
    """``n_rows`` cut into at most ``parts`` contiguous (start, stop) spans of whole blocks."""
    blocks = -(-n_rows // block)
    per = -(-blocks // max(1, min(parts, blocks)))
    return [(start, min(start + per * block, n_rows)) for start in range(0, n_rows, per * block)]


def host_array(values: Any) -> Any:
    """A device array (CuPy: it has ``__cuda_array_interface__`` and ``.get()``) copied to the
    host as NumPy; anything else as it is. For libraries that read host memory only (LightGBM,
    CatBoost's CPU build) fed the GPU backend's matrices; found by duck typing, so no GPU
    library is imported to ask."""
    return values.get() if hasattr(values, "__cuda_array_interface__") and hasattr(values, "get") else values
