"""``pipeline serve``: answer scoring requests over HTTP with a model a run exported.

Parsing and the ready line only; the server is ``pipeline.serve`` (imported here only once the
``serve`` extra is known to be installed, so the rest of the CLI works without it).
"""

from __future__ import annotations

import click

from pipeline.cli.options import JSON_ERRORS, handle_errors, scoring_options


@click.command()
@click.argument("run", metavar="RUN|latest|champion")
@click.option("--model", metavar="NAME", help="Exported model to serve (default: the run's best).")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to bind. Only this machine can connect by default; use 0.0.0.0 only behind a reverse "
                   "proxy that adds TLS and authentication.")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535),
              help="Port to listen on; 0 picks a free one (the ready line says which).")
@scoring_options()
@click.option("--max-batch-rows", default=1024, show_default=True, type=click.IntRange(min=1),
              help="Most rows scored in one model call; requests that arrive together are batched up to this.")
@click.option("--max-wait-ms", default=2.0, show_default=True, type=click.FloatRange(min=0),
              help="How long the first request of a batch waits for others to join it.")
@click.option("--no-batching", is_flag=True, help="Score every request alone (--max-batch-rows 1 --max-wait-ms 0).")
@click.option("--max-body-bytes", default=16 * 1024 * 1024, show_default=True, type=click.IntRange(min=1),
              help="Largest request body; a larger one is refused with 413.")
@click.option("--drift-window", default=10_000, show_default=True, type=click.IntRange(min=1), metavar="ROWS",
              help="Rows per drift window: the PSI per feature of each full window goes to /metrics.")
@click.option("--reload-seconds", default=2.0, show_default=True, type=click.FloatRange(min=0.1),
              help="Serving 'champion': how often to check whether the alias moved (then load the new run and "
                   "swap it in without dropping requests).")
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="json: every log line on stderr is one JSON object, for log shippers.")
@handle_errors
def serve(run: str, model: str | None, host: str, port: int, runs_dir: str, pipeline_name: str | None, device: str,
          threshold: float | None, max_batch_rows: int, max_wait_ms: float, no_batching: bool, max_body_bytes: int,
          drift_window: int, reload_seconds: float, log_format: str) -> None:
    """Serve RUN's model over HTTP: POST /predict (JSON), POST /predict/batch (Arrow, Parquet),
    GET /health, /ready, /metadata, /metrics, /docs.

    Scores are those `pipeline predict` gives for the same rows. The model is loaded, checked
    and warmed once; 'champion' follows the alias as it moves. SIGTERM or Ctrl-C stops
    accepting, answers the requests in flight and exits 0. Prints `serving <run> model <name>
    on http://HOST:PORT` once ready. Without the serve extra: exit 5.
    """
    from pipeline.cli.log_output import json_line, setup_logging
    from pipeline.serve import require_serve_extra

    setup_logging(quiet=False, log_format=log_format)
    JSON_ERRORS["on"] = log_format == "json"
    require_serve_extra()
    from pipeline.serve.http_app import create_app
    from pipeline.serve.serve_options import ServeOptions
    from pipeline.serve.server import bind
    from pipeline.serve.server import serve as run_server

    sock = bind(host, port)                  # before the model loads: a taken port fails fast
    if no_batching:
        max_batch_rows, max_wait_ms = 1, 0.0
    options = ServeOptions(run=run, runs_dir=runs_dir, pipeline=pipeline_name, model=model, device=device,
                           threshold=threshold, max_batch_rows=max_batch_rows, max_wait_ms=max_wait_ms,
                           max_body_bytes=max_body_bytes, drift_window=drift_window, reload_seconds=reload_seconds)
    app = create_app(run, options)
    served = app.state.serve.model

    def ready(bound_host: str, bound_port: int) -> None:
        shown = f"[{bound_host}]" if ":" in bound_host else bound_host
        line = f"serving {served.run_id} model {served.name} on http://{shown}:{bound_port}"
        if log_format == "json":
            click.echo(json_line(line, event="serve_ready", run_id=served.run_id, model=served.name,
                                 host=bound_host, port=bound_port))
        else:
            click.echo(line)

    run_server(app, sock, on_ready=ready)
