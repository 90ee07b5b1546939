"""The dense matrix a frame becomes (``Backend.to_matrix``), built the way its consumers read it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any


def row_major_matrix(
    xp: ModuleType,
    n_rows: int,
    names: Sequence[Any],
    column_values: Callable[[Any], Any],
    dtype: Any,
) -> Any:
    """A C-contiguous (row-major) ``n_rows x len(names)`` matrix of ``xp`` (numpy or cupy),
    filled one column at a time.

    Every consumer reads rows (batch gathers, XGBoost, cuML's forest inference), but NumPy and
    cuDF both build a column-major matrix from a frame. Filling a preallocated row-major one
    is the single copy; the assignment converts each column's dtype on the way in, so the
    peak is the matrix plus at most one column (``column_values`` returns a column as a 1-D
    array, a view where the frame allows one). Converting a column-major matrix afterwards
    would hold both matrices at once.
    """
    out = xp.empty((n_rows, len(names)), dtype=dtype, order="C")
    for j, name in enumerate(names):
        out[:, j] = column_values(name)
    return out


def host_array(values: Any) -> Any:
    """A device array (CuPy: it has ``__cuda_array_interface__`` and ``.get()``) copied to the
    host as NumPy; anything else as it is. For libraries that read host memory only (LightGBM,
    CatBoost's CPU build) fed the GPU backend's matrices; found by duck typing, so no GPU
    library is imported to ask."""
    return values.get() if hasattr(values, "__cuda_array_interface__") and hasattr(values, "get") else values
