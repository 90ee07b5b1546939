"""``pipeline report RUN``: (re)build a run's report.html from what the run recorded."""

from __future__ import annotations

import click
from rich.text import Text

from pipeline.runs import history
from pipeline.cli.options import handle_errors, stdout
from pipeline.cli.runs_command import pipeline_option, runs_dir_option


@click.command("report")
@click.argument("run")
@runs_dir_option
@pipeline_option
@click.option("--output", type=click.Path(dir_okay=False), metavar="FILE",
              help="Write the page here instead of RUN/report.html.")
@click.option("--open", "open_it", is_flag=True, help="Open the page in the default browser afterwards.")
@handle_errors
def report(run: str, runs_dir: str, pipeline_name: str | None, output: str | None, open_it: bool) -> None:
    """Build the HTML report of RUN (a run id, a unique prefix, a run folder, or `latest`).

    The page is one file with its figures inline; it opens offline. A run writes it when it
    ends unless `report: {enabled: false}` or PIPELINE_REPORT=off; this builds it again
    (after an upgrade, or for a run that had it off).
    """
    from pipeline.report import build_report

    found = history.resolve_run(run, runs_dir, pipeline_name)
    history.require_manifest(found)
    path = build_report(found.path, output)
    stdout.print(Text(str(path)))
    if open_it:
        import webbrowser

        webbrowser.open(path.resolve().as_uri())
