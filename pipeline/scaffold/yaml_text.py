"""The config's YAML, written by hand so that every choice carries a comment that says why."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pipeline.backends.csv_dialect import show
from pipeline.features.column_roles import (
    Column,
    plain_value,
)
from pipeline.scaffold.ops_and_models import Op, format_by_name, load_dates
from pipeline.scaffold.rules import AUTO_TIME_LIMIT, AUTO_WHY, SEED, TEST_SHARE, VALID_FROM_ROWS
from pipeline.scaffold.sampling import Sample
from pipeline.scaffold.task_choice import TaskChoice, valid_share
from pipeline.stages.split import SplitSpec

# ---------------------------------------------------------------- the YAML text
_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_./-]*")
_YAML_WORDS = {"y", "n", "yes", "no", "true", "false", "on", "off", "null"}


def scalar(value: Any) -> str:
    """``value`` as a YAML flow scalar that reads back as the same value and type."""
    value = plain_value(value)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    text = str(value)
    if _PLAIN.fullmatch(text) and text.lower() not in _YAML_WORDS:
        return text
    return json.dumps(text, ensure_ascii=False)


def flow(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{scalar(k)}: {flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(flow(v) for v in value) + "]"
    return scalar(value)


def _wrapped_list(items: Sequence[Any], indent: int, width: int = 100) -> str:
    """A flow list broken over lines, each continuation aligned under the first item."""
    pieces = [scalar(item) + ("]" if i == len(items) - 1 else ",") for i, item in enumerate(items)]
    lines, line = [], ""
    for piece in pieces:
        candidate = f"{line} {piece}" if line else piece
        if line and indent + 1 + len(candidate) > width:
            lines.append(line)
            line = piece
        else:
            line = candidate
    lines.append(line)
    pad = "\n" + " " * (indent + 1)
    return "[" + lines[0] + "".join(pad + rest for rest in lines[1:])


def _comment_lines(text: str, indent: int, width: int = 100) -> list[str]:
    """``text`` as ``#`` comment lines of at most ``width`` characters."""
    words, lines, line = text.split(), [], ""
    for word in words:
        if line and indent + 2 + len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    if line:
        lines.append(line)
    return [" " * indent + "# " + ln for ln in lines]


def render_op(op: Op, indent: int = 6) -> list[str]:
    lines = _comment_lines(op.why, indent)
    one_line = " " * indent + f"- {op.name}: {flow(op.params)}"
    if len(one_line) <= 100:
        return lines + [one_line]
    inner = " " * (indent + 4)
    lines.append(" " * indent + f"- {op.name}:")
    for key, value in op.params.items():
        if key == "columns":
            lines.append(f"{inner}columns: " + _wrapped_list(value, len(inner) + len("columns: ")))
        else:
            lines.append(f"{inner}{key}: {flow(value)}")
    return lines


# Why init writes each CSV dialect key (the sniffer found the file written so).
_DIALECT_WHY = {"sep": "the fields are separated by this, not a comma",
                "encoding": "the bytes are not UTF-8: this reads them",
                "decimal": "numbers are written with a decimal comma",
                "thousands": "and with this between thousands"}


@dataclass(frozen=True)
class Draft:
    """What ``init`` decided, for ``render`` to write: the names, the sample read and its missing
    markers (``tokens``), the target and task, the columns with their roles and actions, the
    identifier, the feature ops, the models with their parameters and why, and the notes
    (``date_notes``: on dates that read two ways, written over the load's ``dates:``).
    ``auto``: one auto stage after the split, in place of the features stage and ``models``.
    ``plugins``: the modules the config lists (a drafted model is theirs), with why."""

    name: str
    data_path: str
    sample: Sample
    tokens: list[str]
    target: str
    choice: TaskChoice
    columns: list[Column]
    id_column: str | None
    ops: list[Op]
    models: list[tuple[str, dict[str, Any], str]]
    notes: list[str]
    auto: bool = False
    plugins: Sequence[str] = ()
    date_notes: Sequence[str] = ()
    plugins_why: str = ""
    # Text columns of a Parquet file that hold numbers once the placeholders are blanked.
    dtypes: Mapping[str, str] = field(default_factory=dict)


def render(draft: Draft) -> str:
    """The config's YAML of ``draft``, every choice with its reason as a comment."""
    name, data_path, sample, tokens, target = draft.name, draft.data_path, draft.sample, draft.tokens, draft.target
    choice, columns, id_column, ops, models = draft.choice, draft.columns, draft.id_column, draft.ops, draft.models
    notes, auto = draft.notes, draft.auto
    out: list[str] = []
    add = out.append
    add(f"# Written by `pipeline init` for {data_path} (target: {target}) from {sample.describe()}.")
    add("# Each choice says why in a comment: edit freely, then check it with `pipeline validate`.")
    add("# Relative paths (the data, runs/) are read from the folder you run `pipeline` in, not from")
    add("# this file's folder: run it from the folder `pipeline init` ran in.")
    if not sample.complete:
        add("# The rules read a sample; a column whose rare values the sample missed may need a change.")
    for note in notes:
        out.extend(_comment_lines(f"Note: {note}.", 0))
    add(f"name: {scalar(name)}")
    add("device: auto                 # auto | gpu | cpu: the GPU when one is usable, else the CPU")
    add(f"seed: {SEED}".ljust(29) + "# splits and models are repeatable")
    if draft.plugins:
        out.extend(_comment_lines(draft.plugins_why, 0))
        add(f"plugins: {flow(list(draft.plugins))}")
    add("")
    add("stages:")
    add("  raw:")
    add("    kind: load")
    add(f"    path: {scalar(data_path)}")
    if format_by_name(data_path) != sample.format:
        add(f"    format: {sample.format}         # the file's name does not say")
    for key, value in sample.dialect.reader_options().items():
        add(f"    {key}: {show(value)}" + f"   # {_DIALECT_WHY[key]}")
    if tokens:
        add(f"    na_values: {flow(tokens)}" + "   # read as missing: placeholders seen in the sample")
    if draft.dtypes:
        add(f"    dtypes: {flow(dict(draft.dtypes))}" + "   # numbers stored as text in the file")
    dates = load_dates(columns)
    if dates:
        add("    # date text read as dates" + (" (null: the layout of the first value, ISO 8601)"
                                        if None in dates.values() else ""))
        for note in draft.date_notes:
            out.extend(_comment_lines(f"Note: {note}.", 4))
        add(f"    dates: {flow(dates)}")
    add("")
    add("  split:")
    add("    kind: split")
    add("    inputs: [raw]")
    add(f"    target: {scalar(target)}")
    out.extend(_comment_lines(f"{choice.kind}: {choice.reason}", 4))
    add(f"    task: {choice.kind}".ljust(31) + ("# given to pipeline init" if choice.declared else
                                          "# inferred; pipeline init --task chooses another"))
    if choice.write_positive:
        add(f"    positive: {scalar(choice.positive)}")
    valid = valid_share(sample.total_rows)
    add(f"    test: {TEST_SHARE}".ljust(31) + f"# a random {TEST_SHARE:.0%} held out to compare the models on"
        + ("" if choice.kind == "regression" or not choice.stratify else ", with the class ratio kept"))
    if not choice.stratify:
        add("    stratify: false".ljust(31) + f"# {choice.stratify_why}")
    if valid:
        add(f"    valid: {valid}".ljust(31) + f"# {valid:.0%} more for validation")
    else:
        add(f"    valid: 0.0                 # under {VALID_FROM_ROWS:,} rows: every other row trains")
    if choice.missing:
        if "missing_target" in SplitSpec.model_fields:
            add(f"    missing_target: drop       # {choice.missing:,} sampled rows have no {target}: left out")
        else:
            out.extend(_comment_lines(
                f"{choice.missing:,} sampled rows have no {target}; split refuses them and has no option to drop "
                "them yet: remove those rows from the file", 4))
    date_names = [c.name for c in columns if c.role == "date"]
    if date_names:
        out.extend(_comment_lines(f"For out-of-time validation (train on the past, test on the newest rows): "
                                  f"order_by: {date_names[0]}", 4))
    add("")
    if auto:
        add("  auto:")
        out.extend(_comment_lines(AUTO_WHY, 4))
        add("    # Columns (role: what was seen in the sample); auto leaves out the identifiers, constants,")
        add("    # likely leaks, free text and nested columns itself, by the same rule, and types the rest:")
        for c in columns:
            out.extend(_comment_lines(f"{c.name}: {c.label} ({c.reason})", 4, width=120))
        add("    kind: auto")
        add("    inputs: [split]")
        if id_column is not None:
            add(f"    id: {scalar(id_column)}".ljust(31) + "# written beside predictions, not a feature")
        add(f"    time_limit: {AUTO_TIME_LIMIT}".ljust(31) + "# more time: more members, bagged on 5 folds")
        return "\n".join(out + _evaluate_and_export(["auto"])) + "\n"
    add("  features:")
    add("    kind: features")
    add("    inputs: [split]")
    add("    # Columns (role: what was seen in the sample; what this config does with it):")
    for c in columns:
        out.extend(_comment_lines(c.line(), 4, width=120))
    if id_column is not None:
        add(f"    id: {scalar(id_column)}")
    add("    ops:")
    for op in ops:
        out.extend(render_op(op))
    names = []
    for model, params, why in models:
        names.append(model)
        add("")
        add(f"  {model}:")
        out.extend(_comment_lines(f"{model}: {why}", 4))
        add("    kind: train")
        add("    inputs: [features]")
        add(f"    model: {model}")
        if params:
            add(f"    params: {flow(params)}")
    return "\n".join(out + _evaluate_and_export(names)) + "\n"


def _evaluate_and_export(names: list[str]) -> list[str]:
    return ["",
            "  evaluate:",
            "    # Scores every model on the test split and ranks them; the report shows the best first.",
            "    kind: evaluate",
            f"    inputs: {flow(names)}",
            "",
            "  export:",
            "    # Saves each model with its feature workflow: `pipeline predict` scores new rows with them.",
            "    kind: export",
            f"    inputs: {flow(names)}"]


