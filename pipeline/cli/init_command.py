"""``pipeline init DATA --target COL``: a first, commented config for a table, ready to run.

The drafting (sample, roles, task, ops, models) is ``pipeline.scaffold``; this module
is the command: where the config goes, how the data path is written into it, never
overwriting a file unless asked, and the summary a person reads.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.table import Table
from rich.text import Text

from pipeline.cli.options import handle_errors, print_wide, stderr, stdout
from pipeline.core.errors import UsageError
from pipeline.core.problems import TASK_KINDS

if TYPE_CHECKING:
    from rich.console import Console

    from pipeline.scaffold import Scaffold


def config_data_path(data: str, cwd: Path | None = None) -> str:
    """How the config names DATA. The load stage reads a relative path from the working
    directory (not from the config's folder), so the path is written as seen from here: a
    relative one as given (tidied), an absolute one inside this folder made relative (the
    project folder can move), any other absolute one as it is."""
    path = Path(data)
    if not path.is_absolute():
        return Path(os.path.normpath(data)).as_posix()
    here = (cwd or Path.cwd()).resolve()
    try:
        return path.resolve().relative_to(here).as_posix()
    except ValueError:
        return str(path)


@click.command("init")
@click.argument("data", type=click.Path(path_type=str))
@click.option("--target", "-t", required=True, metavar="COLUMN", help="The column to predict.")
@click.option("--task", type=click.Choice(TASK_KINDS),
              help="binary, multiclass or regression. Default: inferred from the target's values (and said why).")
@click.option("--positive", metavar="VALUE",
              help="Binary: the target value that means 1 (default: a yes-like value, else the larger number, "
                   "else the rarer value).")
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=str), metavar="FILE",
              help="Where to write the config (default: NAME.yaml here, NAME being --name, else the data file's "
                   "name; - prints it).")
@click.option("--name", metavar="NAME",
              help="Pipeline name, the folder under runs/ (default: the output file's name, else the data file's).")
@click.option("--format", "fmt", type=click.Choice(["csv", "parquet"]),
              help="The data's format when its name does not say (.csv, .txt, .parquet, .pq).")
@click.option("--auto", "auto", is_flag=True,
              help="One auto stage (a time-limited portfolio of models, blended) instead of a features stage and "
                   "three models.")
@click.option("--force", is_flag=True, help="Overwrite FILE if it exists.")
@handle_errors
def init(data: str, target: str, task: str | None, positive: str | None, output: str | None, name: str | None,
         fmt: str | None, auto: bool, force: bool) -> None:
    """Write a commented, runnable config for DATA (CSV or Parquet) predicting --target.

    Reads a sample of DATA, gives each column a role (identifier, numeric, categorical, date,
    constant, free text, likely leak...), picks the task and a few models, and checks the
    result with the config loader before writing it. Then: pipeline run FILE.
    """
    from pipeline.config import load_config
    from pipeline.config.schema import check_pipeline_name
    from pipeline.scaffold import draft_config, pipeline_name
    from pipeline.runs.store import atomic_write_text

    if name is not None:
        try:
            check_pipeline_name(name)
        except ValueError as exc:
            raise UsageError(f"--name: {exc}") from None
    to_stdout = output == "-"
    # The pipeline is named after the config file (runs go to runs/<name>/): `-o my_churn.yaml`
    # gives runs/my_churn, as `pipeline run my_churn.yaml` suggests; without -o, after the data.
    name = name or pipeline_name(Path(output) if output and not to_stdout else Path(data))
    target_file = None if to_stdout else Path(output or f"{name}.yaml")
    if target_file is not None:
        if target_file.is_dir():
            raise UsageError(f"--output {target_file} is a folder; name a file such as {target_file / 'config.yaml'}")
        if target_file.exists() and _same_file(target_file, Path(data)):
            raise UsageError(f"--output {target_file} is the data file the config reads; --force never overwrites "
                             "it: name another file, such as " + f"{pipeline_name(Path(data))}.yaml")
        if target_file.exists() and not force:
            raise UsageError(f"{target_file} exists; pass --force to overwrite it, or -o to write another file")
    draft = draft_config(data, target, task=task, positive=positive, fmt=fmt, data_path=config_data_path(data),
                         name=name, auto=auto)
    console = stderr if to_stdout else stdout
    _summary(draft, console)
    if target_file is None:
        click.echo(draft.text, nl=False)
        return
    atomic_write_text(target_file, draft.text)
    config = load_config(target_file)          # what was written, read back as `pipeline run` reads it
    console.print(Text(f"wrote {target_file} (valid: {len(config.stages)} stages)"))
    for module, folder in _plugins_elsewhere(draft.plugins, target_file):
        console.print(Text(f"note: plugin {module} was imported from {folder}, not from beside {target_file}: "
                           f"run it with {folder} on PYTHONPATH, as init was, or install the module"))
    if target_file.resolve().parent != Path.cwd().resolve():
        console.print(Text(f"run it from {Path.cwd()}: the data path in it is relative to the folder you run "
                           "pipeline in"))
    console.print(Text(f"next: pipeline run {target_file}"))


def _plugins_elsewhere(modules: list[str], config: Path) -> list[tuple[str, Path]]:
    """The config's plugin modules that were imported from a folder on Python's path other than
    the config's own (``PYTHONPATH=lib``), with that folder: the run finds them only there. An
    installed module is found anywhere."""
    from pipeline.core.plugins import searched_folders

    here, outside = config.resolve().parent, set(searched_folders())
    found = []
    for module in modules:
        top = sys.modules.get(module.split(".")[0])
        path = Path(getattr(top, "__file__", None) or "")
        if not path.name:
            continue
        folder = (path.parent.parent if path.name == "__init__.py" else path.parent).resolve()
        if folder != here and str(folder) in outside:
            found.append((module, folder))
    return found


def _same_file(one: Path, other: Path) -> bool:
    """Whether two paths name one file (a link or another spelling of it included)."""
    try:
        return one.samefile(other)
    except OSError:
        return False


def _summary(draft: Scaffold, console: Console) -> None:
    """What was read, the task and why, each column's role and what the config does with it."""
    sample = draft.sample
    console.print(Text(f"{sample.path}: read {sample.describe()}, {len(sample.frame.columns)} columns"))
    if sample.notes:                   # what the sniffer found: the load's sep, encoding, decimal
        console.print(Text(f"read as: {'; '.join(sample.notes)} ({sample.dialect.describe()})"))
    console.print(Text(f"task: {draft.task.kind} ({draft.task.reason})"))
    table = Table(title="columns", title_justify="left")
    for heading in ("column", "role", "seen in the sample", "in the config"):
        table.add_column(heading, min_width=len(heading))
    for column in draft.columns:
        table.add_row(Text(column.name), Text(column.label), Text(column.reason), Text(column.action))
    print_wide(table, console)
    console.print(Text(f"models: {', '.join(draft.models)}"))
    if draft.plugins:
        it = "it" if len(draft.plugins) == 1 else "them"
        console.print(Text(f"plugins: {', '.join(draft.plugins)} (listed in the config: the run imports {it} "
                           "without $PIPELINE_PLUGINS)"))
    for note in draft.notes:
        console.print(Text(f"note: {note}"))
