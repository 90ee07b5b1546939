"""The Parquet files of a written split, in partition order, with their row counts: what
training that reads its own share of the files (external-memory XGBoost, DDP ranks) deals out."""

from __future__ import annotations

import re
from pathlib import Path


def partition_files(folder: str | Path) -> list[tuple[str, int]]:
    """``(path, rows)`` of the split's Parquet files that hold rows, in partition order (part.2
    before part.10). A random split can leave a partition empty; a file of no rows is not dealt.
    Row counts come from the files' footers: nothing is read."""
    import pyarrow.parquet as pq

    def number(path: Path) -> tuple[int, str]:
        digits = re.findall(r"\d+", path.stem)
        return (int(digits[-1]) if digits else -1, path.name)

    paths = sorted(Path(folder).glob("*.parquet"), key=number)
    counted = [(str(p), pq.read_metadata(p).num_rows) for p in paths]
    return [(path, rows) for path, rows in counted if rows > 0]


def parquet_files(folder: str | Path) -> list[str]:
    """The paths of ``partition_files``."""
    return [path for path, _ in partition_files(folder)]
