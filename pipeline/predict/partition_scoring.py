"""``pipeline predict --partitioned``: score input larger than memory, partition by partition.

The input files become one Dask DataFrame (pandas or cuDF partitions by the device); each
partition goes through the model's workflow and predictor with ``map_partitions`` and the
scores are written as a partitioned Parquet folder, so no process holds more than a few
partitions. Without ``scheduler`` Dask's local threads do the work in this process; with it,
the workers of that cluster do (they must see the input and output paths). The folder is
written beside the output and renamed into place when complete: an existing output stays as
it was until then, and on any error.

Each partition's task also counts its feature matrix into the model's drift buckets
(``pipeline.scoring.model_folder.scores_with_counts``); the counts are added up in the same computation as
the write, so the drift summary costs no second pass over the input.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.backends.input_files import one_line
from pipeline.backends.table_read import TableRead
from pipeline.core.errors import DataError, UsageError
from pipeline.metrics.drift import Counts, sum_counts

if TYPE_CHECKING:
    from pipeline.scoring.run_models import OpenedRun


def check_output_folder(path: Path) -> None:
    """Partitioned scores are a Parquet folder: a CSV name or an existing file is refused first."""
    if path.suffix.lower() == ".csv":
        raise UsageError(f"--output {path}: partitioned scores are written as a Parquet folder, not CSV")
    if path.exists() and not path.is_dir():
        raise UsageError(f"--output {path} is a file; partitioned scores are a folder of Parquet files")


def score_partitioned(opened: OpenedRun, files: Sequence[tuple[Path, str]], output: Path, how: TableRead, *,
                      text_columns: list[str], scheduler: str | None,
                      check: Callable[[Any, Path, str], Any]) -> tuple[int, Counts | None]:
    """Score every row of ``files`` with the ``opened`` model into the Parquet folder ``output``;
    returns the row count and the drift counts of all rows (None when the model has no
    reference profile). ``how``: the columns to read, the missing-value markers, the dates and
    the CSV dialect; ``text_columns`` are read as text from CSV.

    The columns are ``scores_table``'s for the model's task (its threshold None: not binary).

    ``check(frame, source, format)`` is the in-memory type check, applied to Dask's sample
    partition (its dtypes), so a column of the wrong type is refused before anything is read.
    """
    import dask
    import dask.dataframe as dd

    from pipeline.scoring.model_folder import scores_table, scores_with_counts
    from pipeline.runs.store import atomic_folder

    formats = {fmt for _, fmt in files}
    if len(formats) > 1:
        raise DataError(f"partitioned input must be all CSV or all Parquet; {files[0][0].parent} mixes them")
    fmt = formats.pop()
    saved, name, threshold, backend = opened.saved, opened.name, opened.threshold, opened.backend
    dtypes = {c: "str" for c in text_columns} if fmt == "csv" else None
    frame = backend.read_partitioned([str(path) for path, _ in files], how, format=fmt, dtypes=dtypes)
    source = files[0][0].parent if len(files) > 1 else files[0][0]
    check(frame._meta_nonempty, source, fmt)
    # One task per partition (its read fused in) gives its table and its counts: the tables
    # become the output frame, the rows and counts are added up, and all of it is computed
    # together below, as delayed objects (Dask warns on mixing them with DataFrame collections).
    scored = [dask.delayed(scores_with_counts, nout=2)(part, saved, name, threshold, backend)
              for part in frame.to_delayed()]
    tables = dd.from_delayed([table for table, _ in scored],
                             meta=scores_table(frame._meta, saved, name, threshold, backend))
    total = dask.delayed(_total, nout=2)([dask.delayed(len)(table) for table, _ in scored],
                                         [part_counts for _, part_counts in scored])
    with atomic_folder(output) as folder:
        write = tables.to_parquet(str(folder), write_index=False, compute=False).to_delayed()
        try:
            _, (rows, counts) = _compute(scheduler, backend.name, write, total)
        except (ValueError, TypeError, KeyError) as exc:
            raise DataError(f"scoring {source} failed: {_what_failed(exc)}") from exc
    return rows, counts


# A row of Dask's table of CSV columns whose later rows did not fit the first rows' type.
_MISMATCH_ROW = re.compile(r"^\|\s*(.+?)\s*\|\s*(\S+)\s*\|\s*(\S+)\s*\|$", re.M)


def _what_failed(exc: BaseException) -> str:
    """One paragraph for a partition that failed: Dask's table of mismatched CSV dtypes as the
    columns it names (reading in parts, each column's type comes from the first rows)."""
    rows = [(c, found, expected) for c, found, expected in _MISMATCH_ROW.findall(str(exc)) if c != "Column"]
    if not rows:
        return f"{type(exc).__name__}: {one_line(exc)}"
    named = "; ".join(f"column '{c}' holds {found} values in a later part, {expected} in the first rows"
                      for c, found, expected in rows)
    cause = re.search(r"ValueError\((.*?)\)\s*$", str(exc), re.M)
    return (f"{named}{f' ({cause.group(1)})' if cause else ''}: fix the values, or pass --na-values for a "
            "placeholder such as ' '")


def _total(rows: list[int], counts: list[Counts | None]) -> tuple[int, Counts | None]:
    """The partitions' rows and drift counts added up (counts None without a reference profile)."""
    return sum(rows), None if not counts or counts[0] is None else sum_counts(counts)


def _compute(scheduler: str | None, device: str, *collections: Any) -> tuple[Any, ...]:
    """On the cluster at ``scheduler`` (never shut down), else on local threads."""
    import dask

    from pipeline.backends.dask_collections import fused

    collections = fused(collections)
    if scheduler is None:
        return tuple(dask.compute(*collections))
    from pipeline.backends.clusters.connect import check_scheduler_address
    from pipeline.backends.clusters.startup import open_cluster
    from pipeline.config.schema import ClusterConfig

    check_scheduler_address(scheduler, where="--scheduler")
    session = open_cluster(ClusterConfig(address=scheduler), device)
    try:
        return tuple(session.client.gather(session.client.compute(list(collections))))
    finally:
        session.close()
