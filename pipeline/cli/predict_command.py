"""``pipeline predict``: score a file or folder of rows with a model a run exported.

Parsing and rendering only; the work (and every check) is ``pipeline.predict.batch.predict_batch``.
"""

from __future__ import annotations

import click

from pipeline.cli.options import JSON_ERRORS, handle_errors, scoring_options, stderr

_DRIFT_THRESHOLD = click.FloatRange(min=0.0, min_open=True)


@click.command()
@click.option("--run", "run", required=True, metavar="RUN|latest|champion",
              help="Run id (or a unique prefix), run folder, 'latest' (the pipeline's last run that succeeded with every stage; a run of some stages does not move it) or "
                   "'champion' (the run a promotion gate or runs promote last promoted).")
@click.option("--input", "input_", required=True, type=click.Path(path_type=str), metavar="FILE_OR_DIR",
              help="CSV or Parquet file, or a folder of them (read in name order).")
@click.option("--output", required=True, type=click.Path(path_type=str), metavar="PATH",
              help="Where the scores go: .parquet or .csv (written atomically); with --partitioned a "
                   "folder of Parquet files.")
@click.option("--model", metavar="NAME", help="Exported model to use (default: the run's best).")
@scoring_options(" Multiclass and regression models have no threshold: giving one is a usage error (exit 2).")
@click.option("--drift-threshold", type=_DRIFT_THRESHOLD, metavar="PSI",
              help="Features whose population stability index (scored rows against the training rows) is over "
                   "this are named in a warning (default: 0.2, a significant shift); the drift summary is "
                   "written beside --output either way.")
@click.option("--na-values", multiple=True, metavar="TEXT",
              help="Strings read as missing in CSV input (repeatable). Default: those the run's load stage "
                   "read as missing (its na_values); given here, they replace them.")
@click.option("--sep", metavar="CHAR", help="CSV input's field separator (a tab: '\\t' or tab). Default: the "
                                          "run's load stage's (its sep), else a comma.")
@click.option("--encoding", metavar="CODEC", help="CSV input's text encoding (utf-8, cp1252, latin-1...). Default: "
                                                 "the run's load stage's (UTF-8 for a file that is surely UTF-8 where the run read another).")
@click.option("--decimal", metavar="CHAR", help="CSV input's decimal mark ('.' or ','). Default: the run's.")
@click.option("--thousands", metavar="CHAR", help="CSV input's thousands separator. Default: the run's (none).")
@click.option("--partitioned", is_flag=True,
              help="Score partition by partition with Dask into a Parquet folder: input larger than memory.")
@click.option("--scheduler", metavar="ADDRESS",
              help="With --partitioned: score on the Dask cluster at this scheduler (default: local threads).")
@click.option("--as-of", "as_of", metavar="DATE",
              help="--input is raw events: rebuild the run's features from them at this cut-off (the run's own "
                   "aggregate, label and join definitions) and score the rebuilt rows.")
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="json: every line on stdout and stderr is one JSON object, for log shippers.")
@handle_errors
def predict(run: str, input_: str, output: str, model: str | None, runs_dir: str, pipeline_name: str | None,
            device: str, threshold: float | None, drift_threshold: float | None, na_values: tuple[str, ...],
            sep: str | None, encoding: str | None, decimal: str | None, thousands: str | None,
            partitioned: bool, scheduler: str | None, as_of: str | None, log_format: str) -> None:
    """Score the rows of --input with a model of --run and write --output.

    Columns by the model's task: binary score and prediction (0/1 at the threshold);
    multiclass score_<class> per class and prediction (the original class value; a class
    value keeps its letters, digits and _ in the column name); regression prediction. Then
    the model's name; the id column first when the model has one.

    The drift summary (PSI per feature against the training rows) goes beside the scores:
    scores.drift.json for scores.parquet, _drift.json inside a --partitioned folder. Drift
    only warns: the exit code does not change.
    """
    from pipeline.cli.log_output import json_line, setup_logging, stop_on_sigterm
    from pipeline.predict.batch import predict_batch
    from pipeline.predict.predict_options import PredictOptions

    # SIGTERM (a scheduler's timeout) as run takes it: an error line and exit 143, and the
    # output's temporary file removed on the way out; it ended the process silently and left it.
    stop_on_sigterm()

    if log_format == "json":                 # text: predict's own line only, as before
        setup_logging(quiet=False, log_format=log_format)
        JSON_ERRORS["on"] = True

    if scheduler is not None:                # a typo is a usage error before any input is read
        from pipeline.backends.clusters.connect import check_scheduler_address

        check_scheduler_address(scheduler, where="--scheduler")
    options = PredictOptions(model=model, runs_dir=runs_dir, pipeline=pipeline_name, device=device,
                             threshold=threshold, na_values=list(na_values) or None, partitioned=partitioned,
                             scheduler=scheduler, as_of=as_of, drift_threshold=drift_threshold,
                             csv_options={"sep": sep, "encoding": encoding, "decimal": decimal, "thousands": thousands})
    result = predict_batch(run, input_, output, options)
    how = f"threshold {result.threshold:g}" if result.threshold is not None else result.task
    line = (f"scored {result.rows} rows with {result.model} (run {result.run_dir.name}, {result.device}, "
            f"{how}) -> {result.output} in {result.seconds:.2f}s")
    if log_format == "json":
        click.echo(json_line(line, event="predict_result", rows=result.rows, model=result.model,
                             run_id=result.run_dir.name, device=result.device, threshold=result.threshold,
                             task=result.task, output=str(result.output), seconds=round(result.seconds, 3),
                             drift=str(result.drift) if result.drift else None,
                             over_threshold=list(result.over_threshold)), err=True)
    else:
        stderr.print(line, markup=False, highlight=False)
