"""Checks of a config against its data before any data row is read.

``pipeline validate`` and ``pipeline run`` (before the first stage) read the header of every
CSV and the schema of every Parquet file the config loads, follow the columns along the stage
graph, and report every column a stage names that cannot be there, with its key path, its line
and the real column it most likely means. Rules across stages that would otherwise fail only
when the run gets there (a ``tune:`` on a split without validation rows, an ensemble of models
from different features) are reported the same way.

No stage kind is named here: each kind says what its output is (``StageSpec.preview``), which
columns its block names (``columns_read``) and what it refuses of its inputs
(``preview_problems``). What a kind does not say is unknown, and a check that needs it is
skipped, so a config is refused only for what cannot work.
"""

from __future__ import annotations

from collections.abc import Callable

from pipeline.backends.headers import ColumnSet, HeaderReader, closest_column
from pipeline.config.schema import PipelineConfig
from pipeline.core.dag import topological_order
from pipeline.core.errors import ConfigIssue, DataError
from pipeline.stages.spec import ColumnRef, KeyPath, Preview

# Where an issue is: (key path) -> ConfigIssue with its line, or "--set" when an override set it.
IssueAt = Callable[[KeyPath, str], ConfigIssue]


def data_issues(config: PipelineConfig, issue_at: IssueAt, *, before_run: bool = False) -> list[ConfigIssue]:
    """Every column a stage names that its input cannot have, and every cross-stage rule broken.

    A file that is missing or unreadable raises ``DataError`` (exit 3) naming the stage, as the
    run would when it got there; everything else is a config issue (exit 2). ``before_run``:
    a run follows, which reads such a file in its load stage and records the failure, and
    reads named pipes (``HeaderReader``).
    """
    headers = HeaderReader(before_run=before_run)
    graph = config.inputs_of()
    previews: dict[str, Preview] = {}
    issues: list[ConfigIssue] = []
    for name in topological_order(graph):
        spec = config.stages[name]
        inputs = {parent: previews[parent] for parent in graph[name]}
        try:
            refs = spec.columns_read(inputs, headers)
            previews[name] = spec.preview(name, inputs, headers)
        except DataError as exc:
            exc.stage = name            # type: ignore[attr-defined]  # "stage 'raw': input file not found ..."
            raise
        tables = [inputs[parent].columns for parent in graph[name]]
        for ref in refs:
            among = ref.among if ref.among is not None else (tables[ref.input] if ref.input < len(tables) else None)
            message = missing_column(ref, among)
            if message:
                issues.append(issue_at(("stages", name, *ref.where), message))
        for where, message in spec.preview_problems(inputs):
            issues.append(issue_at(("stages", name, *where), message))
    return issues


def missing_column(ref: ColumnRef, among: ColumnSet | None) -> str | None:
    """Why ``ref`` cannot name a column of ``among`` (with the column it most likely means), or
    None when it can, or when the columns there are not known. A column removed on the way
    (``gone``) is reported even where other columns may have been added (an op whose outputs
    are known only at fit): no op adds a column back under a name it removed."""
    if among is None:
        return None
    if ref.column in among.gone and ref.column not in among.names:
        return f"{ref.what} '{ref.column}' {among.gone[ref.column]}"
    if among.may_have(ref.column):
        return None
    close = closest_column(ref.column, among.names)
    hint = f"; did you mean '{close}'?" if close else f" (columns: {_shown(among.names)})"
    return f"{ref.what} '{ref.column}' is not a column of {among.source}{hint}"


def _shown(names: tuple[str, ...], most: int = 12) -> str:
    return ", ".join(names[:most]) + (f", ... ({len(names)} in all)" if len(names) > most else "")
