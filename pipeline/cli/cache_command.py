"""``pipeline cache``: list, prune and clear the stage cache under a runs directory.

A pipeline's entries are ``<runs_dir>/<pipeline>/.cache/<key>/`` (``pipeline.cache``); the runs
that use an entry are those whose manifest names its key (``history.cache_keys``). Anything
that removes entries takes the pipeline's run lock first (``pipeline.runs.locks``), so it never
pulls an entry from under a run that has looked it up and not yet loaded it; with the lock
held elsewhere it exits 7 after ``--wait`` seconds, like ``pipeline run``. ``runs prune`` calls
``prune_unreferenced`` here to drop the entries no kept run uses.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import click
from rich.table import Table
from rich.text import Text

from pipeline.runs import history
from pipeline.cache import (
    DEFAULT_MAX_SIZE, ENV_MAX_SIZE, EntryInfo, StageCache, format_size, least_recently_used, resolve_max_size,
)
from pipeline.cli.options import handle_errors, print_wide, stderr, stdout
from pipeline.core.errors import LockTimeout, StorageError
from pipeline.runs.layout import CACHE_DIR, LOCK_FILE
from pipeline.runs.locks import RunLock

runs_dir_option = click.option("--runs-dir", default="runs", show_default=True, type=click.Path(file_okay=False),
                               help="Folder holding <pipeline>/.cache/ (a config's runs_dir).")
pipeline_option = click.option("--pipeline", "pipeline_name", metavar="NAME",
                               help="Only this pipeline (the config's name).")
dry_run_option = click.option("--dry-run", is_flag=True, help="Print what would be removed; remove nothing.")
wait_option = click.option("--wait", type=click.FloatRange(min=0), default=0, show_default=True, metavar="SECONDS",
                           help="How long to wait for a run of the pipeline to finish (then exit 7).")


@click.group()
def cache() -> None:
    """The stage cache: list entries, prune to a size, clear."""


@cache.command("list")
@runs_dir_option
@pipeline_option
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@handle_errors
def list_entries(runs_dir: str, pipeline_name: str | None, as_json: bool) -> None:
    """One line per entry, most recently used first, with the runs that use it."""
    rows = []
    for folder in history.pipeline_dirs(runs_dir, pipeline_name):
        users = history.cache_keys(history.runs_in(folder))
        entries = sorted(StageCache(folder / CACHE_DIR).entries(), key=lambda e: e.last_used, reverse=True)
        rows += [{"pipeline": folder.name, **entry.as_dict(), "runs": users.get(entry.key, [])} for entry in entries]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        stderr.print(Text(f"no stage cache entries under {runs_dir}"))
        return
    table = Table(box=None, pad_edge=False)
    for name in ("pipeline", "key", "stage", "kind"):
        table.add_column(name, no_wrap=True)
    table.add_column("size", justify="right", no_wrap=True)
    table.add_column("created (UTC)", no_wrap=True)
    table.add_column("last used (UTC)", no_wrap=True)
    table.add_column("used by runs")
    for row in rows:
        table.add_row(Text(row["pipeline"]), Text(row["key"]), Text(row["stage"] or "?"), Text(row["kind"] or "?"),
                      Text(format_size(row["size_bytes"])), Text(_time(row["created"])), Text(_time(row["last_used"])),
                      _runs_cell(row["runs"], row["problem"]))
    print_wide(table)
    for name in dict.fromkeys(row["pipeline"] for row in rows):
        mine = [row for row in rows if row["pipeline"] == name]
        stdout.print(Text(f"{name}: {len(mine)} entries, {format_size(sum(r['size_bytes'] for r in mine))}"))


@cache.command("prune")
@runs_dir_option
@pipeline_option
@click.option("--max-size", metavar="SIZE",
              help=f"Evict least recently used entries until the cache fits SIZE (5GiB, 500MB, 0, none). "
                   f"Default: ${ENV_MAX_SIZE}, else {DEFAULT_MAX_SIZE}.")
@click.option("--unreferenced", is_flag=True, help="Also remove the entries that no run folder uses.")
@dry_run_option
@wait_option
@handle_errors
def prune_entries(runs_dir: str, pipeline_name: str | None, max_size: str | None, unreferenced: bool,
                  dry_run: bool, wait: float) -> None:
    """Shrink each pipeline's cache to --max-size, least recently used entries first.

    Also removes what interrupted writes and removals left behind.
    """
    limit = resolve_max_size(DEFAULT_MAX_SIZE, max_size, option="--max-size")
    failures: list[str] = []
    folders = history.pipeline_dirs(runs_dir, pipeline_name)
    if not folders:
        stderr.print(Text(f"no runs under {runs_dir}, so no stage cache entries"))
        return
    for folder in folders:
        cache_ = StageCache(folder / CACHE_DIR)
        with _locked(folder, wait, dry_run):
            _remove_leftovers(cache_, dry_run)
            entries = cache_.entries()
            used = history.cache_keys(history.runs_in(folder)) if unreferenced else None
            unused = [e for e in entries if used is not None and e.key not in used]
            unused_keys = {e.key for e in unused}
            over = least_recently_used([e for e in entries if e.key not in unused_keys], limit)
            removed = _remove(cache_, [*unused, *over], dry_run, failures,
                              why=lambda e: "no run uses it" if e.key in unused_keys else "least recently used")
            _summary(folder.name, cache_, removed, dry_run, f"limit {format_size(limit)}")
    _raise_failures(failures)


@cache.command("clear")
@runs_dir_option
@pipeline_option
@dry_run_option
@wait_option
@handle_errors
def clear_entries(runs_dir: str, pipeline_name: str | None, dry_run: bool, wait: float) -> None:
    """Remove every entry of each pipeline's cache (of one with --pipeline).

    Refuses (exit 7) while a run of the pipeline holds its lock.
    """
    failures: list[str] = []
    folders = history.pipeline_dirs(runs_dir, pipeline_name)
    if not folders:
        stderr.print(Text(f"no runs under {runs_dir}, so no stage cache entries"))
        return
    for folder in folders:
        cache_ = StageCache(folder / CACHE_DIR)
        with _locked(folder, wait, dry_run):
            _remove_leftovers(cache_, dry_run)
            removed = _remove(cache_, cache_.entries(), dry_run, failures, why=lambda e: "clear")
            _summary(folder.name, cache_, removed, dry_run, "cleared")
    _raise_failures(failures)


def prune_unreferenced(folder: Path, kept: Sequence[history.Run], dry_run: bool) -> list[str]:
    """For ``runs prune``: drop the entries of ``folder``'s cache that no kept run uses.

    Skipped (with a line saying why) while a run may still be adding references: one that is
    running and not abandoned, or one holding the lock. Returns the failures.
    """
    failures: list[str] = []
    cache_ = StageCache(folder / CACHE_DIR)
    if not (folder / CACHE_DIR).is_dir():
        return failures
    live = [run for run in kept if run.status == "running" and run.manifest is not None
            and history.run_abandoned(run) is None]
    if live:
        stdout.print(Text(f"{folder.name}: cache not pruned: run {live[0].run_id} is still running"))
        return failures
    try:
        with _locked(folder, 0, dry_run):
            _remove_leftovers(cache_, dry_run)
            removed = _remove(cache_, cache_.unreferenced(history.cache_keys(kept)), dry_run, failures,
                              why=lambda e: "no kept run uses it")
            _summary(folder.name, cache_, removed, dry_run, "entries no kept run uses")
    except LockTimeout as exc:
        stdout.print(Text(f"{folder.name}: cache not pruned: {exc}"))
    except StorageError as exc:                 # the lock cannot be taken (a read-only folder)
        failures.append(f"{folder.name}: cache not pruned: {exc}")
    return failures


# ---------------------------------------------------------------------------- helpers
class _locked:
    """The pipeline's run lock (none for a dry run, which changes nothing)."""

    def __init__(self, folder: Path, wait: float, dry_run: bool) -> None:
        self.lock = None if dry_run else RunLock(folder / LOCK_FILE, wait=wait)

    def __enter__(self) -> None:
        if self.lock is not None:
            try:
                self.lock.__enter__()
            except OSError as exc:
                raise StorageError(f"cannot take the run lock {self.lock.path}: {exc.strerror or exc}") from exc

    def __exit__(self, *exc: object) -> None:
        if self.lock is not None:
            self.lock.__exit__()


def _remove(cache_: StageCache, entries: list[EntryInfo], dry_run: bool, failures: list[str],
            *, why: Any) -> list[EntryInfo]:
    verb = "would drop" if dry_run else "dropped"
    removed = []
    for entry in sorted(entries, key=lambda e: (e.last_used, e.key)):
        if not dry_run:
            try:
                if not cache_.evict(entry):
                    continue                    # already gone (another process removed it)
            except StorageError as exc:
                failures.append(str(exc))
                continue
        removed.append(entry)
        stdout.print(Text(f"{verb} cache entry {entry.key} (stage {entry.stage or '?'}, "
                          f"{format_size(entry.size)}, {why(entry)})"))
    return removed


def _remove_leftovers(cache_: StageCache, dry_run: bool) -> None:
    for path in cache_.remove_leftovers(dry_run=dry_run):
        stdout.print(Text(f"{'would remove' if dry_run else 'removed'} {path} (left by an interrupted "
                          f"cache write or removal)"))


def _summary(pipeline: str, cache_: StageCache, removed: list[EntryInfo], dry_run: bool, what: str) -> None:
    left = sum(e.size for e in cache_.entries()) - (sum(e.size for e in removed) if dry_run else 0)
    stdout.print(Text(f"{pipeline}: cache: {len(removed)} entr{'y' if len(removed) == 1 else 'ies'} "
                      f"({format_size(sum(e.size for e in removed))}) {'would be ' if dry_run else ''}dropped "
                      f"({what}); {format_size(max(left, 0))} kept" + (" (dry run)" if dry_run else "")))


def _raise_failures(failures: list[str]) -> None:
    if failures:
        raise StorageError(f"{len(failures)} cache entr{'y' if len(failures) == 1 else 'ies'} could not be "
                           "removed: " + "; ".join(failures))


def _runs_cell(runs: list[str], problem: str | None) -> Text:
    if problem:
        return Text(f"unusable: {problem}", style="magenta")
    if not runs:
        return Text("none", style="yellow")
    shown = ", ".join(runs[:2])
    return Text(shown + (f" +{len(runs) - 2} more" if len(runs) > 2 else ""))


def _time(value: str | None) -> str:
    if not value:
        return "—"
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).strftime("%Y-%m-%d %H:%M:%S")
    except ValueError:
        return value


__all__ = ["cache", "prune_unreferenced"]
