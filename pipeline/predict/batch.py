"""Batch scoring with a model a run exported: ``pipeline predict`` as a library function.

    from pipeline.predict.batch import predict_batch
    result = predict_batch("latest", "new_customers.csv", "scores.parquet", na_values=[" "])

The order of the steps is the point of this module. Everything that can be checked cheaply
is checked before anything expensive happens, and nothing is written until every row has
been scored:

1. the output format (from the suffix) and the threshold;
2. the run (id, folder or ``latest``), its manifest's signature when a signing key is set
   (``pipeline.runs.signing``), and that it succeeded;
3. the run's config (it names the plugins to import) and the model's files against the sha256
   checksums in the run's manifest, so a truncated or edited artifact is reported as corrupt
   instead of being half-loaded (no format loads code from a file: ``pipeline.models.formats``);
   then the model's task: a threshold is for binary models only;
4. the input's columns and types against those the feature workflow was fitted on, file by
   file, so a schema problem names the file and every offending column at once;
5. scoring, then one atomic write: on any error the output path is left as it was;
6. once the scores are written, the drift summary beside them (``drift_path``): the PSI per
   feature of the scored rows' feature matrix against the model's training profile
   (``pipeline.metrics.drift``), counted in the same pass as the scores. Drift only warns: a
   feature over the threshold is a warning line, never an error.

Device handling stays in ``pipeline.backends`` and ``pipeline.scoring.model_folder``: this module only
passes the device name on.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd

from pipeline.backends.csv_dialect import CsvDialect, dialect_of, written_in_utf8
from pipeline.backends.table_read import TableRead
from pipeline.core.errors import DataError, RowsError, StorageError, UsageError
from pipeline.metrics.drift import DRIFT_THRESHOLD, Counts, over_threshold, psi
from pipeline.predict.predict_options import PredictOptions
from pipeline.runs import layout
from pipeline.runs.record import RunManifest  # noqa: F401 - predict's record type, as callers import it
# What predict shares with serving and the promotion gate, kept importable from here.
from pipeline.scoring.input_rows import (  # noqa: F401
    INPUT_SUFFIXES, check_finite, check_headers, check_parquet_types, check_types, csv_text_columns, input_files,
    read_input, training_read_options,
)
from pipeline.scoring.model_folder import scores_with_counts
from pipeline.scoring.run_models import (  # noqa: F401
    DEFAULT_THRESHOLD, OpenedRun, best_exported, checked_run_model, choose_model, decide_threshold, exported_models,
    exported_task, open_run, read_manifest, run_metrics, verify_artifacts, verify_run_config,
)

log = logging.getLogger("pipeline")

OUTPUT_FORMATS = {".parquet": "parquet", ".csv": "csv"}
DRIFT_SUFFIX = ".drift.json"           # scores.parquet -> scores.drift.json, beside it
PARTITIONED_DRIFT = "_drift.json"      # inside a partitioned scores folder: Parquet readers skip "_" names


@dataclass(frozen=True)
class PredictResult:
    """What a batch scoring did: for the summary line and for callers that log it."""

    rows: int
    model: str
    output: Path
    seconds: float
    run_dir: Path
    device: str
    threshold: float | None           # None: the model is not binary (no threshold applies)
    task: str = "binary"
    drift: Path | None = None         # the drift summary; None when the model has no reference profile
    over_threshold: tuple[str, ...] = ()     # features whose PSI is over the drift threshold, largest first


def predict_batch(run: str | os.PathLike[str], input: str | os.PathLike[str], output: str | os.PathLike[str],
                  options: PredictOptions | None = None, /, **changes: Any) -> PredictResult:
    """Score every row of ``input`` with a model of ``run`` and write ``output`` atomically.

    ``options``: a ``PredictOptions``; ``changes``: its fields by name, over it
    (``predict_batch("latest", "rows.csv", "scores.parquet", model="xgb")``).

    ``run`` is a run id, a run folder or ``"latest"`` (under ``runs_dir``/``pipeline``);
    ``na_values`` defaults to the strings the run's load read as missing (and the run's
    ``dtypes`` always apply): new rows are read as the training rows were (a given list, even
    an empty one, replaces the run's). CSV input is read in the run's load's dialect
    (separator, encoding, decimal mark, thousands separator); ``csv_options`` (``sep``,
    ``encoding``, ``decimal``, ``thousands``) replace the ones given.
    ``model`` defaults to the run's best model; ``device`` is ``cpu``, ``gpu`` or ``auto``
    (None: auto); ``threshold`` (binary models only; a ``UsageError`` for any other) defaults
    to the threshold of the run's reported evaluation, else 0.5.
    Output columns: the id column (when the model has one), then by the model's task: binary
    ``score`` and ``prediction`` (1 when score >= threshold, else 0); multiclass ``score_<class>``
    per class and ``prediction`` (the original class value); regression ``prediction``; then
    ``model`` (``pipeline.scoring.model_folder.scores_table``). ``partitioned``: score partition by
    partition with Dask (on the cluster at ``scheduler``, else local threads) into a Parquet
    folder at ``output`` (pipeline.predict.partition_scoring), for input larger than memory.
    ``as_of``: ``input`` is raw events; the run's table stages (aggregate, label, join...) are
    replayed on them at that cut-off and the rebuilt table is scored (``pipeline.predict.rebuild``).
    Once the scores are written, the drift summary goes beside them (``drift_path``; skipped,
    with an info line, for a model exported before reference profiles): a feature whose PSI is
    over ``drift_threshold`` (above 0; None: ``DRIFT_THRESHOLD``, 0.2) is named in a warning
    and in ``over_threshold``.
    Raises ``UsageError`` (a ``ConfigError``: bad options), ``DataError`` (run, artifacts or
    input), ``BackendUnavailable`` or ``StorageError``.
    """
    options = PredictOptions.build(options, **changes)
    started = time.perf_counter()
    output = Path(output)
    as_of, partitioned, scheduler, threshold = options.as_of, options.partitioned, options.scheduler, options.threshold
    if as_of is not None:
        from pipeline.predict.rebuild import parse_as_of

        as_of = parse_as_of(as_of)
        if partitioned:
            raise UsageError("--as-of and --partitioned cannot be combined yet: the features rebuilt from the "
                             "events are scored in memory (they hold one row per entity)")
    if partitioned:
        from pipeline.predict.partition_scoring import check_output_folder

        check_output_folder(output)
    elif scheduler:
        raise UsageError("--scheduler needs --partitioned (only partitioned scoring runs on a cluster)")
    else:
        out_format = output_format(output)
    if threshold is not None and not 0.0 < threshold < 1.0:
        raise UsageError(f"--threshold must be between 0 and 1 (exclusive), got {threshold}")
    drift_threshold = DRIFT_THRESHOLD if options.drift_threshold is None else options.drift_threshold
    if not drift_threshold > 0.0:
        raise UsageError(f"--drift-threshold must be above 0, got {drift_threshold}")
    files = input_files(input)
    refuse_overwriting_input(output, files)

    opened = open_model(run, model=options.model, runs_dir=options.runs_dir, pipeline=options.pipeline,
                        device=options.device, threshold=threshold)
    run_dir, name, task, threshold = opened.run_dir, opened.name, opened.task, opened.threshold
    read, backend, saved = opened.read, opened.backend, opened.saved
    na_values = options.na_values
    if na_values is None:                                # the run's own unless the caller says otherwise
        na_values = read["na_values"] or None
    dialect = utf8_if_written_so(input_dialect(read["dialect"], options.csv_options), files, options.csv_options)
    id_column = saved.meta.get("id_column")
    if partitioned:
        how = TableRead(na_values=list(na_values) if na_values else None, dates=read["dates"], dialect=dialect)
        rows, counts = _predict_partitioned(opened, files, output, how, scheduler)
    else:
        if as_of is not None:
            frame = rebuilt_input(run_dir, name, files, as_of, saved, backend)
        else:
            frame = read_input(files, saved.workflow.input_columns_, backend, id_column=id_column,
                               na_values=na_values, dtypes=read["dtypes"], dates=read["dates"], dialect=dialect)
        try:
            table, counts = scores_with_counts(frame, saved, name, threshold, backend)
        except RowsError as exc:            # its rows are the input's, in file order: name the file(s)
            shown = ", ".join(str(path) for path, _ in files[:3]) + (" ..." if len(files) > 3 else "")
            raise RowsError(f"{shown}: {exc}", list(exc.rows)) from None
        rows = len(table)
        write_table(table, output, out_format)
    drift, over = report_drift(saved, counts, rows, drift_path(output, partitioned=partitioned),
                               run_dir=run_dir, model=name, threshold=drift_threshold)
    return PredictResult(rows=rows, model=name, output=output, seconds=time.perf_counter() - started,
                         run_dir=run_dir, device=backend.name, threshold=threshold, task=task.kind, drift=drift,
                         over_threshold=tuple(over))


def open_model(run: str | os.PathLike[str], *, model: str | None = None, runs_dir: str | os.PathLike[str] = "runs",
               pipeline: str | None = None, device: str | None = None,
               threshold: float | None = None, argument: str = "--run") -> OpenedRun:
    """Steps 2 and 3 of the module docstring, shared by ``pipeline predict`` and ``pipeline serve``
    so that both score with a model checked the same way: ``run`` (an id, a folder, ``latest``
    or ``champion``) found under ``runs_dir``, then opened (``pipeline.scoring.run_models.open_run``).
    ``argument``: how the caller's command line names ``run``, for messages."""
    run_dir = resolve_run(run, runs_dir=runs_dir, pipeline=pipeline, argument=argument)
    return open_run(run_dir, model=model, device=device, threshold=threshold)


def rebuilt_input(run_dir: Path, model: str, files: list[tuple[Path, str]], as_of: str, saved: Any,
                  backend: Any) -> Any:
    """The model's input table rebuilt from raw events at ``as_of`` with the run's own stage
    definitions (its verified config.yaml), checked like any input: columns present, types as at fit."""
    from pipeline.backends import compute_lazy, is_partitioned
    from pipeline.config import load_config
    from pipeline.predict.rebuild import rebuild_table

    config = load_config(run_dir / layout.CONFIG)
    frame = rebuild_table(config.stages, model, files, as_of, backend, seed=config.seed)
    if is_partitioned(frame):
        (frame,) = compute_lazy(frame)
    fitted = saved.workflow.input_columns_
    id_column = saved.meta.get("id_column")
    source = files[0][0].parent if len(files) > 1 else files[0][0]
    missing = [c for c in [*fitted, *([id_column] if id_column else [])] if c not in frame.columns]
    if missing:
        raise DataError(f"the table rebuilt from {source} at {as_of} lacks column(s) {missing} that the model needs")
    return check_types(frame, fitted, backend, source=source, fmt="table")


def _predict_partitioned(opened: OpenedRun, files: list[tuple[Path, str]], output: Path, how: TableRead,
                         scheduler: str | None) -> tuple[int, Counts | None]:
    """The same header and type checks as in memory, on each file's header and Dask's meta;
    returns the rows and their drift counts. ``how``: the missing-value markers, dates and
    dialect of the input (the columns are the model's)."""
    from pipeline.predict.partition_scoring import score_partitioned

    saved, backend = opened.saved, opened.backend
    fitted = saved.workflow.input_columns_
    needed = check_headers(files, fitted, saved.meta.get("id_column"), how.dialect)
    check_parquet_types(files, fitted)
    text_columns = csv_text_columns(fitted, saved.meta.get("id_column"), opened.read["dtypes"])
    dates = {c: f for c, f in (how.dates or {}).items() if c in needed} or None
    return score_partitioned(opened, files, output, how.replace(columns=needed, dates=dates),
                             text_columns=text_columns, scheduler=scheduler,
                             check=lambda meta, source, fmt: check_types(meta, fitted, backend, source=source,
                                                                         fmt=fmt))


def utf8_if_written_so(dialect: CsvDialect, files: list[tuple[Path, str]],
                       options: Mapping[str, str | None] | None) -> CsvDialect:
    """UTF-8 for new rows that surely are (``written_in_utf8``) where the run read another
    encoding and the caller named none: read as the run did, every accented value would be
    other letters, an unseen category, and the scores wrong without an error."""
    csv_files = [path for path, fmt in files if fmt == "csv"]
    if dialect.utf8 or (options or {}).get("encoding") or not csv_files:
        return dialect
    why = [written_in_utf8(path) for path in csv_files]
    if not all(why):
        return dialect
    log.warning("%s: %s, but the run read its rows as %s: read as UTF-8 (pass --encoding %s to read it as the run "
                "did)", csv_files[0], why[0], dialect.encoding, dialect.encoding)
    return replace(dialect, encoding="utf-8")


def input_dialect(run: CsvDialect, options: Mapping[str, str | None] | None) -> CsvDialect:
    """The run's CSV dialect with the caller's ``sep``, ``encoding``, ``decimal`` and
    ``thousands`` in place of its own (checked as the load's keys are); a bad one is a
    ``UsageError`` naming the option."""
    if not options:
        return run
    try:
        return dialect_of(dict(options), run)
    except ValueError as exc:
        raise UsageError(f"--{exc}") from None


# ------------------------------------------------------------------ output
def output_format(path: Path) -> str:
    """``parquet`` or ``csv`` from the suffix; anything else is a usage error (checked first)."""
    fmt = OUTPUT_FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise UsageError(f"--output {path}: the file name must end in .parquet or .csv")
    if path.is_dir():
        raise UsageError(f"--output {path} is a folder; give a file name ending in .parquet or .csv")
    return fmt


def write_table(table: pd.DataFrame, path: Path, fmt: str) -> None:
    """Write to a temporary file beside ``path`` and rename it: readers (and a failed write)
    never see a partial file, and an existing file stays as it was until the rename."""
    from pipeline.runs.store import atomic_destination

    try:
        with atomic_destination(path) as tmp:
            if fmt == "parquet":
                table.to_parquet(tmp, index=False)
            else:
                table.to_csv(tmp, index=False)
    except OSError as exc:
        raise StorageError(f"cannot write {path}: {exc.strerror or exc}") from exc


def refuse_overwriting_input(output: Path, files: list[tuple[Path, str]]) -> None:
    """An ``--output`` that is one of the input's files would replace the rows with their
    scores (a typo a nightly job makes once): refused before anything is read."""
    target = output.resolve()
    for path, _ in files:
        if path.resolve() == target:
            raise UsageError(f"--output {output} is the input file {path}: scoring would replace the rows with their "
                             "scores; write the scores to another file")


# ------------------------------------------------------------------ drift
def drift_path(output: Path, *, partitioned: bool) -> Path:
    """Where the drift summary of the scores at ``output`` goes: ``scores.drift.json`` beside
    ``scores.parquet`` (or ``.csv``); ``_drift.json`` inside a partitioned scores folder, which
    it then moves and is copied with (Parquet readers skip names that start with ``_``)."""
    return output / PARTITIONED_DRIFT if partitioned else output.with_suffix(DRIFT_SUFFIX)


def report_drift(saved: Any, counts: Counts | None, rows: int, path: Path, *, run_dir: Path, model: str,
                 threshold: float) -> tuple[Path | None, list[str]]:
    """Write the drift summary of the scored rows (their ``counts``; None when the model has
    no reference profile) at ``path``, atomically and after the scores, and log it: a warning
    naming the features whose PSI is over ``threshold``, else an info line. Returns the
    summary's path and those features.

    A model exported before reference profiles has none to compare with: no summary (an info
    line says why), and one an earlier scoring left at ``path`` is removed, since it describes
    other rows. With no rows there is no share to compare: the summary has no PSI."""
    from pipeline.runs.store import atomic_write_json, cannot_write

    if counts is None:
        log.info("drift: model %s was exported without a reference profile (%s), before drift summaries: no drift "
                 "summary; export the model again to get one", model, layout.REFERENCE_FILE)
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:
            raise cannot_write(path, exc, verb="remove") from exc
        return None, []
    values = psi(saved.reference, counts) if rows else {}
    over = over_threshold(values, threshold)
    try:
        atomic_write_json(path, {
            "psi": values, "threshold": threshold, "over_threshold": over, "rows": rows,
            "reference_rows": saved.reference["rows"], "model": model, "run": run_dir.name,
            "counts": {name: part.tolist() for name, part in counts.items()},
        })
    except StorageError as exc:        # drift only warns: the scores are written, the exit is theirs
        _unwritten_summary(path, exc)
        return None, over
    if over:
        log.warning("drift: %d feature%s over PSI %g: %s (%s)", len(over), "" if len(over) == 1 else "s", threshold,
                    ", ".join(f"{name} {values[name]:.2f}" for name in over), path)
    elif values:
        largest = max(values, key=lambda name: values[name])
        log.info("drift: no feature over PSI %g (largest: %s %.2f) (%s)", threshold, largest, values[largest], path)
    else:
        log.info("drift: no rows scored, no PSI (%s)", path)
    return path, over


def _unwritten_summary(path: Path, exc: StorageError) -> None:
    """Warn that the drift summary could not be written, and remove one an earlier scoring left
    at ``path``: beside the new scores it would describe other rows."""
    left = ""
    try:
        if path.is_file() or path.is_symlink():
            path.unlink()
    except OSError as gone:
        left = f"; the summary there is an earlier scoring's and could not be removed ({gone.strerror or gone})"
    log.warning("drift: %s; the scores are written, without a drift summary%s", exc, left)


# ------------------------------------------------------------------ the run
def resolve_run(run: str | os.PathLike[str], *, runs_dir: str | os.PathLike[str] = "runs",
                pipeline: str | None = None, argument: str = "--run") -> Path:
    """The run folder for a run id (or unique prefix), a run folder path, or ``latest``.

    The same rules as ``pipeline runs show`` (``pipeline.runs.history.resolve_run``); ``pipeline``
    may be left out when ``runs_dir`` holds one pipeline, so a cron line need not repeat it.
    """
    from pipeline.runs.history import resolve_run as find

    return find(str(run), runs_dir, pipeline, argument=argument).path.resolve()
