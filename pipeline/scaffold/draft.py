"""The draft: sample, roles, task, ops and models, rendered, then checked by the project's own
config loader and fitted on the sample before anything is written."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from pipeline.config.loader import load_config
from pipeline.core.errors import ConfigError, DataError, PipelineError, UsageError
from pipeline.core.plugins import ENV_VAR, environment_plugins, load_plugins
from pipeline.core.problems import TASK_KINDS
from pipeline.features import FeatureWorkflow
from pipeline.features.column_roles import (
    LEFT_OUT_ROLES,
    Column,
    classify,
    mark_leaks,
)
from pipeline.models import MODELS
from pipeline.models.registry import portfolio_members
from pipeline.scaffold.markers import numbers_behind_placeholders, placeholders
from pipeline.stages.split import classes_alike_note, misspelt_classes_note
from pipeline.scaffold.ops_and_models import (
    Op,
    choose_models,
    feature_ops,
    first_part,
    load_dates,
    other_date_readings,
    pick_identifier,
    pipeline_name,
)
from pipeline.scaffold.sampling import Sample, read_sample
from pipeline.scaffold.task_choice import (
    TaskChoice,
    check_split,
    check_target,
    choose_task,
    missing_target_note,
)
from pipeline.scaffold.yaml_text import Draft, flow, render


@dataclass
class Scaffold:
    """A drafted config: its text and the choices behind it (for the command's summary)."""

    text: str
    name: str
    columns: list[Column]
    task: TaskChoice
    models: list[str]
    sample: Sample
    notes: list[str]
    # The plugin modules the config lists: loaded by init, they register models it drafted.
    plugins: list[str] = field(default_factory=list)


def draft_config(data: str | Path, target: str, *, task: str | None = None, positive: str | None = None,
                 fmt: str | None = None, data_path: str | None = None, name: str | None = None,
                 auto: bool = False) -> Scaffold:
    """The config for ``data`` predicting ``target``; ``data_path`` is how the config names the
    file (default: ``data`` as given: the load reads it relative to the working directory).
    ``auto``: one ``auto`` stage (a time-limited portfolio) instead of the features stage and
    the chosen models; it leaves out the same columns by the same rule.

    The modules of $PIPELINE_PLUGINS are imported before the data is read (one that does not
    import is a ConfigError), so a plugin's model that chooses itself for ``init``
    (``ModelSpec.init_choices``) is drafted beside the built-in ones; when one is, the config
    lists those modules under ``plugins:``, and so runs where the variable is not set."""
    if task is not None and task not in TASK_KINDS:
        raise UsageError(f"--task must be one of {', '.join(TASK_KINDS)}, not {task!r}")
    named = list(dict.fromkeys(environment_plugins()))
    registered = set(MODELS)
    load_plugins()
    sample = read_sample(data, fmt=fmt)
    check_target(sample.frame, target, sample.path)
    # The load's na_values apply to text; those that are a real value of some column stay out (notes).
    found = placeholders(sample.frame, target)
    tokens = found.tokens
    as_numbers: dict[str, str] = {}
    if tokens and sample.format == "csv":    # read again with them, in the dialect already found
        sample = dataclasses.replace(read_sample(data, fmt=sample.format, na_values=tokens, dialect=sample.dialect),
                                     notes=sample.notes)
    elif tokens:                        # Parquet text: blanked as the load will, numbers typed by dtypes:
        frame, as_numbers = numbers_behind_placeholders(sample.frame, tokens, set(found.read) - {target})
        sample = dataclasses.replace(sample, frame=frame)
    frame = sample.frame
    notes: list[str] = list(found.notes)
    choice = choose_task(frame[target], target, declared=task, positive=positive, sample=sample)
    choice.declared = task is not None or positive is not None
    if choice.kind == "multiclass":
        counts = frame[target].dropna().value_counts()
        notes += filter(None, [classes_alike_note(list(counts.index), target),
                               misspelt_classes_note(counts.to_dict(), target)])
    check_split(frame, target, choice, sample)
    if not choice.stratify:
        notes.append(f"{choice.stratify_why}: split has stratify: false (a random split, so a small class may have "
                     "no rows in the test split)")
    columns = [classify(frame[c], str(c), n_rows=len(frame)) for c in frame.columns if str(c) != target]
    mark_leaks(columns, frame, target, choice.kind)
    for column in columns:              # the markers read as missing, in every column that holds them
        if found.reason(column.name):
            column.reason += f"; {found.reason(column.name)}"
    date_notes = ambiguous_dates(frame, columns)
    id_column = pick_identifier(columns)
    features = [c for c in columns if c.role in ("numeric", "categorical", "high_cardinality", "date")]
    if not features:
        raise DataError(f"{sample.path}: no column is usable as a feature once the target and the columns to "
                        "exclude are set aside (" + "; ".join(c.line() for c in columns) + ")")
    models, model_notes = ([], []) if auto else choose_models(choice.kind)
    notes += model_notes
    drafted = (sorted({m.model for m in portfolio_members() if choice.kind in m.tasks}) if auto   # what auto screens
               else [name for name, _, _ in models])
    from_plugins = [name for name in drafted if name not in registered]
    listed = named if from_plugins else []
    if choice.missing:
        notes.append(missing_target_note(target, choice.missing, len(frame)))
    ops = [] if auto else feature_ops(columns)
    if auto:                            # what the auto stage does with each column
        for c in columns:
            c.action = ("auto.id (written beside predictions, not a feature)" if c.name == id_column else
                        "left out by auto" if c.role in LEFT_OUT_ROLES else "a feature (auto types it)")
    config_name = name or pipeline_name(Path(data))
    text = render(Draft(name=config_name, data_path=data_path or str(data), sample=sample, tokens=tokens,
                        dtypes=as_numbers, target=target, choice=choice, columns=columns, id_column=id_column,
                        ops=ops, models=models, notes=notes, date_notes=date_notes, auto=auto, plugins=listed,
                        plugins_why=_plugins_why(from_plugins, auto) if listed else ""))
    check_config_text(text)
    if not auto:
        check_ops_fit(frame, ops, columns, target=target, id_column=id_column, sample=sample)
    target_reason = "; ".join(r for r in (choice.reason, found.reason(target)) if r)
    return Scaffold(text, config_name, [Column(target, "target", target_reason, "split.target"), *columns],
                    choice, ["auto"] if auto else [m[0] for m in models], sample, notes + date_notes, listed)


def ambiguous_dates(frame: pd.DataFrame, columns: list[Column]) -> list[str]:
    """A note per date column whose sampled values read both month first and day first (no day
    above 12): the layout chosen (month first, the first in ``DATE_FORMATS``) and how to choose
    the other; the column's reason says it too."""
    notes = []
    for column in columns:
        if column.role != "date" or not isinstance(column.date_format, str):
            continue
        others = other_date_readings(frame[column.name], column.date_format)
        if not others:
            continue
        chosen, other = column.date_format, others[0]
        read, instead = first_part(chosen), first_part(other)
        column.reason += f"; reads {instead} ({other}) too"
        notes.append(f"{column.name}: every sampled value reads both {read} ({chosen}) and {instead} ({other}): "
                     f"neither of its first two numbers is above 12. Read {read}, the first layout init tries; if "
                     f"the file writes the {instead.split()[0]} first, set the load's dates: "
                     f"{flow({column.name: other})}")
    return notes


def _plugins_why(models: list[str], auto: bool) -> str:
    """The comment over the config's ``plugins:``: which drafted models need them."""
    role = " (in auto's portfolio)" if auto else ""
    return (f"{', '.join(models)}{role}: registered by a plugin pipeline init loaded (${ENV_VAR}). Listed here, the "
            f"run imports the plugins without ${ENV_VAR}; a module beside this file imports as it is.")


# ---------------------------------------------------------------- checks before writing
def check_config_text(text: str) -> None:
    """The drafted text through the project's config loader; a problem is a bug of ``init``."""
    try:
        load_config(text=text)
    except ConfigError as exc:
        raise PipelineError(f"pipeline init drafted a config the loader refuses (a bug in init; please report it "
                            f"with this message): {exc}") from exc


def check_ops_fit(frame: pd.DataFrame, ops: list[Op], columns: list[Column], *, target: str, id_column: str | None,
                  sample: Sample) -> None:
    """Fit the drafted feature ops on the sample, as the features stage fits them on the
    training split: a config whose features do not fit is not written."""
    from pipeline.backends import get_backend
    from pipeline.backends.dates import parse_dates

    backend = get_backend("cpu")
    dates = load_dates(columns)
    x = frame.drop(columns=[target] + ([id_column] if id_column else []))
    if dates:
        x = parse_dates(backend, x, dates, source=str(sample.path))
    try:
        FeatureWorkflow([{op.name: op.params} for op in ops], backend=backend).fit_transform(x)
    except PipelineError as exc:
        raise DataError(f"{sample.path}: the feature ops pipeline init chose do not fit the sample: {exc}") from exc
