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

import json
import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from pipeline.runs import layout, record
from pipeline.core.errors import DataError, StorageError, UsageError, input_not_found
from pipeline.metrics.drift import DRIFT_THRESHOLD, Counts, over_threshold, psi
from pipeline.config.plugins import load_run_plugins
from pipeline.scoring.model_folder import scores_with_counts
from pipeline.runs.record import RunManifest
from pipeline.runs.signing import signing_key, verify_run
from pipeline.core.problems import Task

log = logging.getLogger("pipeline")

OUTPUT_FORMATS = {".parquet": "parquet", ".csv": "csv"}
INPUT_SUFFIXES = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv"}
DEFAULT_THRESHOLD = 0.5
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


def predict_batch(
    run: str | os.PathLike[str],
    input: str | os.PathLike[str],
    output: str | os.PathLike[str],
    *,
    model: str | None = None,
    runs_dir: str | os.PathLike[str] = "runs",
    pipeline: str | None = None,
    device: str | None = None,
    threshold: float | None = None,
    na_values: Sequence[str] | None = None,
    partitioned: bool = False,
    scheduler: str | None = None,
    as_of: str | None = None,
    drift_threshold: float | None = None,
) -> PredictResult:
    """Score every row of ``input`` with a model of ``run`` and write ``output`` atomically.

    ``run`` is a run id, a run folder or ``"latest"`` (under ``runs_dir``/``pipeline``);
    ``na_values`` defaults to the strings the run's load read as missing (and the run's
    ``dtypes`` always apply): new rows are read as the training rows were (a given list, even
    an empty one, replaces the run's).
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
    started = time.perf_counter()
    output = Path(output)
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
    drift_threshold = DRIFT_THRESHOLD if drift_threshold is None else drift_threshold
    if not drift_threshold > 0.0:
        raise UsageError(f"--drift-threshold must be above 0, got {drift_threshold}")
    files = input_files(input)

    opened = open_model(run, model=model, runs_dir=runs_dir, pipeline=pipeline, device=device, threshold=threshold)
    run_dir, name, task, threshold = opened.run_dir, opened.name, opened.task, opened.threshold
    read, backend, saved = opened.read, opened.backend, opened.saved
    if na_values is None:                                # the run's own unless the caller says otherwise
        na_values = read["na_values"] or None
    id_column = saved.meta.get("id_column")
    if partitioned:
        rows, counts = _predict_partitioned(saved, name, files, output, backend, threshold, id_column, na_values,
                                            scheduler, dates=read["dates"])
    else:
        if as_of is not None:
            frame = rebuilt_input(run_dir, name, files, as_of, saved, backend)
        else:
            frame = read_input(files, saved.workflow.input_columns_, backend, id_column=id_column,
                               na_values=na_values, dtypes=read["dtypes"], dates=read["dates"])
        table, counts = scores_with_counts(frame, saved, name, threshold, backend)
        rows = len(table)
        write_table(table, output, out_format)
    drift, over = report_drift(saved, counts, rows, drift_path(output, partitioned=partitioned),
                               run_dir=run_dir, model=name, threshold=drift_threshold)
    return PredictResult(rows=rows, model=name, output=output, seconds=time.perf_counter() - started,
                         run_dir=run_dir, device=backend.name, threshold=threshold, task=task.kind, drift=drift,
                         over_threshold=tuple(over))


@dataclass(frozen=True)
class OpenedModel:
    """A run's exported model, checked and loaded: what scoring needs besides the rows."""

    run_dir: Path
    manifest: RunManifest
    name: str                          # the model's name in the run
    task: Task
    threshold: float | None            # None: not a binary model
    metrics: dict[str, Any]            # the run's reported evaluation
    read: dict[str, Any]               # how the run read its rows (training_read_options)
    backend: Any
    saved: Any                         # pipeline.scoring.model_folder.SavedModel


def open_model(run: str | os.PathLike[str], *, model: str | None = None, runs_dir: str | os.PathLike[str] = "runs",
               pipeline: str | None = None, device: str | None = None,
               threshold: float | None = None, argument: str = "--run") -> OpenedModel:
    """Steps 2 and 3 of the module docstring, shared by ``pipeline predict`` and ``pipeline serve``
    so that both score with a model checked the same way: the run resolved, its signature,
    status, config and the model's checksums verified, its plugins imported, the model chosen
    and loaded on ``device`` (None: auto), and the threshold decided (``decide_threshold``).
    ``argument``: how the caller's command line names ``run``, for messages."""
    from pipeline.backends import resolve_backend
    from pipeline.scoring.model_folder import load_model

    run_dir = resolve_run(run, runs_dir=runs_dir, pipeline=pipeline, argument=argument)
    manifest = read_manifest(run_dir)
    verify_run_config(run_dir, manifest)                 # it names the plugins imported next
    load_run_plugins(run_dir, manifest.config_file)     # models a plugin registered load like built-ins
    models = exported_models(run_dir, manifest)
    metrics = run_metrics(manifest)
    name = choose_model(models, model, metrics, run_dir)
    verify_artifacts(run_dir, manifest.artifacts, models[name])
    task = exported_task(run_dir / models[name])
    threshold = decide_threshold(task, threshold, metrics, name)
    read = training_read_options(run_dir, manifest, name)
    backend, _ = resolve_backend(device or "auto")
    saved = load_model(run_dir / models[name], device=backend.name)
    return OpenedModel(run_dir=run_dir, manifest=manifest, name=name, task=task, threshold=threshold,
                       metrics=metrics, read=read, backend=backend, saved=saved)


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


def exported_task(folder: Path) -> Task:
    """The task of the exported model in ``folder`` (its model.json, verified by now)."""
    meta_path = folder / "model.json"
    try:
        return Task.from_dict(json.loads(meta_path.read_text(encoding="utf-8")).get("task"))
    except (OSError, ValueError, TypeError, AttributeError) as exc:
        raise DataError(f"{meta_path}: not a model description ({type(exc).__name__}: {exc})") from None


def decide_threshold(task: Task, requested: float | None, metrics: dict[str, Any], name: str) -> float | None:
    """The threshold of a binary model: the requested one, else the run's evaluation's, else
    0.5. Other tasks have none: one given is a usage error (it would change nothing, and a
    cron line that passes it expects a binary model)."""
    if task.kind != "binary":
        if requested is not None:
            raise UsageError(f"--threshold applies to binary models only; model {name} is {task.describe()}: "
                             "leave --threshold out")
        return None
    if requested is not None:
        return requested
    return float(metrics.get("threshold", DEFAULT_THRESHOLD)) if metrics else DEFAULT_THRESHOLD


def _predict_partitioned(saved: Any, name: str, files: list[tuple[Path, str]], output: Path, backend: Any,
                         threshold: float | None, id_column: str | None, na_values: Sequence[str] | None,
                         scheduler: str | None, *,
                         dates: Mapping[str, str | None] | None = None) -> tuple[int, Counts | None]:
    """The same header and type checks as in memory, on each file's header and Dask's meta;
    returns the rows and their drift counts."""
    from pipeline.predict.partition_scoring import score_partitioned

    fitted = saved.workflow.input_columns_
    needed = check_headers(files, fitted, id_column)
    text_columns = [c for c, dtype in fitted.items() if not numeric_dtype_name(dtype)]
    return score_partitioned(saved, name, files, output, backend=backend, threshold=threshold, needed=needed,
                             text_columns=text_columns, na_values=na_values, scheduler=scheduler,
                             dates={c: f for c, f in (dates or {}).items() if c in needed} or None,
                             check=lambda meta, source, fmt: check_types(meta, fitted, backend, source=source,
                                                                         fmt=fmt))


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
    atomic_write_json(path, {
        "psi": values, "threshold": threshold, "over_threshold": over, "rows": rows,
        "reference_rows": saved.reference["rows"], "model": model, "run": run_dir.name,
        "counts": {name: part.tolist() for name, part in counts.items()},
    })
    if over:
        log.warning("drift: %d feature%s over PSI %g: %s (%s)", len(over), "" if len(over) == 1 else "s", threshold,
                    ", ".join(f"{name} {values[name]:.2f}" for name in over), path)
    elif values:
        largest = max(values, key=lambda name: values[name])
        log.info("drift: no feature over PSI %g (largest: %s %.2f) (%s)", threshold, largest, values[largest], path)
    else:
        log.info("drift: no rows scored, no PSI (%s)", path)
    return path, over


# ------------------------------------------------------------------ the run
def resolve_run(run: str | os.PathLike[str], *, runs_dir: str | os.PathLike[str] = "runs",
                pipeline: str | None = None, argument: str = "--run") -> Path:
    """The run folder for a run id (or unique prefix), a run folder path, or ``latest``.

    The same rules as ``pipeline runs show`` (``pipeline.runs.history.resolve_run``); ``pipeline``
    may be left out when ``runs_dir`` holds one pipeline, so a cron line need not repeat it.
    """
    from pipeline.runs.history import resolve_run as find

    return find(str(run), runs_dir, pipeline, argument=argument).path.resolve()


def read_manifest(run_dir: Path) -> RunManifest:
    """The run record (``pipeline.runs.record``: a ManifestError, exit 3, when unreadable) of a
    succeeded run: a failed or running one may have a partial export and no complete checksums.

    With a signing key set (``pipeline.runs.signing``) the manifest's signature is checked first, so
    nothing in it (status, checksums, plugins) is believed before it is known to be the run's."""
    verify_run(run_dir)
    manifest = record.read_manifest(run_dir)
    if manifest.status != "succeeded":
        raise DataError(f"run {run_dir.name} did not succeed (status: {manifest.status}); "
                        "score with a succeeded run")
    return manifest


def exported_models(run_dir: Path, manifest: RunManifest) -> dict[str, str]:
    """Model name -> folder relative to the run, as the run record declares them.

    Runs recorded before the manifest had ``models`` are read from their artifact list: a
    listed ``<stage>/models/<name>/model.json`` is an exported model (the first stage, by
    name, wins a name), so files that are not in the manifest are never offered.
    """
    models = dict(manifest.models)
    if not models:
        for key in sorted(manifest.artifacts):
            found = layout.exported_model_of(key)
            if found is not None:
                models.setdefault(found[1], layout.model_folder(*found))
    if not models:
        raise DataError(f"run {run_dir.name} exported no models (add an export stage with models: true)")
    return models


def run_metrics(manifest: RunManifest) -> dict[str, Any]:
    """The evaluation the run reported (threshold, best model...); empty when it has none."""
    return dict(manifest.metrics or {})


def choose_model(models: dict[str, str], requested: str | None, metrics: dict[str, Any], run_dir: Path) -> str:
    """The requested model, else the run's best (as its evaluation recorded it), else the best
    exported one by the evaluation's ranking metric, in that metric's direction (lower is
    better for losses and errors), else the only one."""
    available = ", ".join(sorted(models))
    if requested is not None:
        if requested not in models:
            raise UsageError(f"--model {requested}: run {run_dir.name} has no such exported model "
                              f"(available: {available})")
        return requested
    best = metrics.get("best")
    if best in models:
        return str(best)
    ranked = best_exported(models, metrics)
    if ranked is not None:
        log.warning("run %s: its best model %s was not exported; scoring with %s, the best exported one by %s",
                    run_dir.name, best, ranked, metrics.get("rank_by"))
        return ranked
    if len(models) == 1:
        return next(iter(models))
    raise UsageError(f"run {run_dir.name} names no best model; pass --model (available: {available})")


def best_exported(models: dict[str, str], metrics: dict[str, Any]) -> str | None:
    """The exported model with the best value of the evaluation's ``rank_by`` metric (None when
    the record does not say, or names a metric of unknown direction). Ties go to the first
    name in sorted order; a model with no finite value is never chosen
    (``pipeline.metrics.best_of``, which the MLflow registry's choice shares)."""
    from pipeline.metrics import best_of

    return best_of(metrics.get("models"), models, metrics.get("rank_by"))


def verify_run_config(run_dir: Path, manifest: RunManifest) -> None:
    """The run's config.yaml against its checksum before the plugins it names are imported.
    One the manifest does not list is accepted (older runs), unless runs must be signed."""
    digest = manifest.artifacts.get(layout.CONFIG)
    if digest is not None:
        _verify_file(run_dir, layout.CONFIG, digest, what="run config")
    elif signing_key() is not None and (run_dir / layout.CONFIG).exists():
        raise DataError(f"{run_dir / layout.CONFIG} is not in run {run_dir.name}'s signed manifest; "
                        "its plugins were not imported")


def verify_artifacts(run_dir: Path, artifacts: Mapping[str, str], folder: str) -> None:
    """Every file of the model folder must match its sha256 in the run record (``artifacts``)
    before anything is loaded: a corrupt model file or state_dict is never deserialised."""
    prefix = folder.rstrip("/") + "/"
    listed = {key: digest for key, digest in artifacts.items() if key.startswith(prefix)}
    for required in ("model.json", "workflow.json"):
        if prefix + required not in listed:
            raise DataError(f"model artifact {run_dir / folder / required} is not in the run's manifest; "
                            "cannot verify it")
    for key, digest in sorted(listed.items()):
        _verify_file(run_dir, key, digest, what="model")
    from pipeline.scoring.model_folder import model_format_of

    meta_path = run_dir / prefix / "model.json"
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        # The model's format says which files it has (model.json is verified by now).
        needed = model_format_of(meta, meta_path).files(meta)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise DataError(f"{run_dir / prefix / 'model.json'}: not a model description ({exc})") from exc
    unlisted = [name for name in needed if prefix + name not in listed]
    if unlisted:
        raise DataError(f"model file(s) {unlisted} of {run_dir / folder} are not in the run's manifest; "
                        "cannot verify them")


def _verify_file(run_dir: Path, key: str, digest: str, *, what: str) -> None:
    from pipeline.runs.store import sha256_file

    path = run_dir / key
    if not path.is_file():
        raise DataError(f"{what} artifact {path} is missing (the run's manifest lists it); "
                        "the run folder is incomplete or corrupt")
    if sha256_file(path) != digest:
        raise DataError(f"{what} artifact {path} is corrupt: its sha256 does not match the run's manifest; "
                        "it was not loaded")


# ------------------------------------------------------------------ the input
def input_files(input: str | os.PathLike[str]) -> list[tuple[Path, str]]:
    """(file, format) pairs: the file itself, or a folder's .csv/.parquet files in name order
    (subfolders and other files are not read)."""
    path = Path(input)
    if path.is_dir():
        files = sorted((p, INPUT_SUFFIXES[p.suffix.lower()]) for p in path.iterdir()
                       if p.is_file() and not p.name.startswith(".") and p.suffix.lower() in INPUT_SUFFIXES)
        if not files:
            raise DataError(f"input folder {path} holds no .csv or .parquet files")
        return files
    if not path.is_file():
        raise input_not_found(path)
    fmt = INPUT_SUFFIXES.get(path.suffix.lower())
    if fmt is None:
        raise DataError(f"input {path}: cannot tell the format from the name (expected .csv or .parquet)")
    return [(path, fmt)]


def read_input(files: list[tuple[Path, str]], fitted: dict[str, str], backend: Any, *,
               id_column: str | None = None, na_values: Sequence[str] | None = None,
               dtypes: Mapping[str, str] | None = None, dates: Mapping[str, str | None] | None = None) -> Any:
    """Read and check every file, then concatenate them (in order).

    All headers are checked before any file is read in full, then each file's types, so a
    schema problem is reported before any scoring and names the file. Only the columns the
    workflow needs (and the id) are read; extra columns are ignored. ``dtypes``: the run's
    load dtypes (those of columns read here apply); ``dates``: the run's load date formats (the
    same: new rows' dates parse as the training rows' did).
    """
    needed = check_headers(files, fitted, id_column)
    text_columns = [c for c, dtype in fitted.items() if not numeric_dtype_name(dtype)]
    run_dtypes = {c: t for c, t in (dtypes or {}).items() if c in needed}
    run_dates = {c: f for c, f in (dates or {}).items() if c in needed} or None
    frames = []
    for path, fmt in files:
        # Text columns are read as text from CSV, as at training: digits-only categories would
        # otherwise become numbers and silently match no category.
        types = {**run_dtypes, **({c: "str" for c in text_columns} if fmt == "csv" else {})} or None
        frame = backend.read(path, format=fmt, columns=needed, dtypes=types,
                             na_values=list(na_values) if na_values else None, dates=run_dates)
        frames.append(check_types(frame, fitted, backend, source=path, fmt=fmt))
    if len(frames) == 1:
        return frames[0]
    return backend.frame.concat(frames, ignore_index=True)


def check_headers(files: list[tuple[Path, str]], fitted: dict[str, str], id_column: str | None) -> list[str]:
    """The columns to read; every file must have them (the first file missing any is named)."""
    needed = list(fitted) + ([id_column] if id_column and id_column not in fitted else [])
    for path, fmt in files:
        present = set(_header(path, fmt))
        missing = [c for c in needed if c not in present]
        if missing:
            raise DataError(f"{path}: missing column(s) {missing} that the model needs"
                            + (f" (id column: {id_column})" if id_column in missing else ""))
    return needed


def _header(path: Path, fmt: str) -> list[str]:
    """The names as the file has them (a repeated name is refused when the file is read)."""
    from pipeline.backends.input_files import read_header

    return read_header(path, fmt)


def check_types(frame: Any, fitted: dict[str, str], backend: Any, *, source: Path, fmt: str) -> Any:
    """A column numeric at fit must be numeric now, and a text column text; a column with no
    values at all is accepted and cast to its fit-time kind."""
    problems, text_now = [], False
    for column, fit_dtype in fitted.items():
        series = frame[column]
        numeric_now = backend.is_numeric(series)
        if int(backend.to_host(series.notna().sum())) == 0:
            # No values at all (an empty file, a column left blank): nothing can mismatch; give
            # it the fit-time kind so the ops see the type they were fitted on.
            frame[column] = series.astype("float64" if numeric_dtype_name(fit_dtype) else "str")
        elif numeric_dtype_name(fit_dtype):
            if not numeric_now:
                problems.append(f"'{column}' is {series.dtype} now, {fit_dtype} at fit")
                text_now = True
        elif numeric_now:
            problems.append(f"'{column}' is {series.dtype} now, {fit_dtype} (text) at fit")
    if problems:
        hint = (" (a placeholder such as ' ' makes a numeric CSV column text: pass --na-values ' ')"
                if text_now and fmt == "csv" else "")
        raise DataError(f"{source}: column type(s) differ from training: {'; '.join(problems)}{hint}")
    check_finite(frame, [c for c, dtype in fitted.items() if numeric_dtype_name(dtype)], backend, source=source)
    return frame


def check_finite(frame: Any, columns: list[str], backend: Any, *, source: Path) -> None:
    """No infinity in a numeric column ("inf", "-Infinity" in a CSV read as numbers): training
    refused them too, and a model scores them as nonsense or not at all."""
    from pipeline.features.workflow import first_infinite_row, infinite_columns

    for column in infinite_columns(frame, columns, backend):
        row = first_infinite_row(frame[column], backend)
        raise DataError(f"{source}: column '{column}' holds infinite values (first at row {row}); the model was "
                        "trained on finite numbers: replace them, or leave them blank where the features fill "
                        "missing values")


def training_read_options(run_dir: Path, manifest: RunManifest, model: str) -> dict[str, Any]:
    """How the run read the rows ``model`` was trained on: the ``read_options`` its reading
    stages recorded (``na_values``, ``dtypes``), taken from the stages upstream of the model's
    in the run's config (every stage when that cannot be told), merged in name order. Values
    that are not the expected types are ignored: the manifest is data, not trusted code."""
    upstream = _upstream_stages(run_dir, model) or set(manifest.stages)
    na_values: list[str] = []
    dtypes: dict[str, str] = {}
    dates: dict[str, str | None] = {}
    for stage in sorted(upstream):
        record_ = manifest.stages.get(stage)
        options = record_.facts.get("read_options") if record_ is not None else None
        if not isinstance(options, dict):
            continue
        values = options.get("na_values")
        na_values += [v for v in values if isinstance(v, str) and v not in na_values] if isinstance(values, list) else []
        types = options.get("dtypes")
        if isinstance(types, dict):
            dtypes.update({k: v for k, v in types.items() if isinstance(k, str) and isinstance(v, str)})
        formats = options.get("dates")
        if isinstance(formats, dict):
            dates.update({k: v for k, v in formats.items() if isinstance(k, str) and (v is None or isinstance(v, str))})
    return {"na_values": na_values, "dtypes": dtypes, "dates": dates}


def _upstream_stages(run_dir: Path, stage: str) -> set[str]:
    """``stage`` and every stage it reads from, directly or not, in the run's config.yaml;
    empty when the config cannot be read or does not name ``stage``."""
    import yaml

    try:
        data = yaml.safe_load((run_dir / layout.CONFIG).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return set()
    stages = data.get("stages") if isinstance(data, dict) else None
    if not isinstance(stages, dict) or stage not in stages:
        return set()
    seen, todo = set(), [stage]
    while todo:
        name = todo.pop()
        if name in seen or not isinstance(stages.get(name), dict):
            continue
        seen.add(name)
        inputs = stages[name].get("inputs")
        inputs = list(inputs.values()) if isinstance(inputs, dict) else inputs      # inputs by role
        todo += [i for i in inputs if isinstance(i, str)] if isinstance(inputs, list) else []
    return seen


def numeric_dtype_name(name: str) -> bool:
    try:
        dtype = pd.api.types.pandas_dtype(name)
    except TypeError:
        return False
    return bool(pd.api.types.is_numeric_dtype(dtype) or pd.api.types.is_bool_dtype(dtype))
