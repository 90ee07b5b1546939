"""``pipeline init``: a commented, runnable config for a table nobody has described yet.

From a bounded sample of the file (``pipeline.config.sampling``) each column gets one role
(``ROLES``), built on its basic type (``pipeline.features.column_types``, the rule column
selectors use), the target gives the task, each role gets feature ops from the op registry and
the task a few models from the model registry. The YAML is written by hand, not dumped, so
every choice carries a comment that says why; before anything is written the text goes
through the project's own config loader and its feature ops are fitted on the sample, so a
config that ``init`` writes validates and its features fit.

Rules are deliberately simple and stated in docs/guides/init.md; every threshold is a
module constant below. They read a sample, so a rule can misread a column whose rare values
the sample missed: the comments say what was seen, for the user to correct.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.util
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pipeline.backends.csv_dialect import show
from pipeline.config.loader import load_config
from pipeline.config.sampling import Sample, format_of, read_sample
from pipeline.config.schema import NAME_MAX_LENGTH
from pipeline.core.dtypes import dtype_kind, is_number
from pipeline.core.errors import ConfigError, DataError, PipelineError, UsageError
from pipeline.core.problems import MAX_INFERRED_CLASSES, TASK_KINDS
from pipeline.features import OPS, FeatureWorkflow
from pipeline.features.column_roles import (
    FREE_TEXT_WORDS,
    LEFT_OUT_ROLES,
    LOW_CARDINALITY,
    Column,
    classify,
    is_text,
    mark_leaks,
    plain_value,
)
from pipeline.features.column_types import column_type
from pipeline.models.registry import get_model_spec, models_for
from pipeline.stages.split import ZERO_ONE, SplitSpec

# ---------------------------------------------------------------- the rules' thresholds
# (the column roles' own are in pipeline.features.column_roles)
RARE_CODE = 5                  # categorify: values seen fewer times share code 0
INTEGER_CLASSES = 10           # a whole-number target with at most this many values is classes
VALID_FROM_ROWS = 1_000        # a validation split only when there are rows to spare

ROLES: dict[str, str] = {
    "target": "what the models predict (--target)",
    "identifier": "unique per row (a key, a row number): never a feature; the first one is written beside "
                  "predictions (features.id)",
    "numeric": "numbers: missing values filled with the training median, log1p when skewed, then standardized",
    "categorical": f"text, true/false or a category with at most {LOW_CARDINALITY} values: one 0/1 column per value",
    "high_cardinality": f"text with more than {LOW_CARDINALITY} values: integer codes by frequency (categorify)",
    "date": "dates or date text: calendar parts as numbers (date_parts)",
    "constant": "one value in every row (or none at all): carries no information; dropped",
    "free_text": f"prose (about {FREE_TEXT_WORDS:g}+ words per value, most values different): no op reads text; "
                 "dropped",
    "leak": "likely leak: near-unique id-like values, or the target can be read off it; dropped",
}

_YES = ("yes", "y", "true", "t", "positive", "pos", "1")
# Models per task, first choice first: a linear baseline, a forest, boosted trees. Only those
# the registry offers for the task and whose CPU estimator imports here are written.
MODEL_CHOICES: dict[str, tuple[tuple[str, dict[str, Any], str], ...]] = {
    "binary": (("logistic_regression", {"C": 1.0}, "a linear baseline: fast, and a yardstick for the trees"),
               ("random_forest", {"n_estimators": 200, "min_samples_leaf": 5}, "robust trees, little tuning"),
               ("xgboost", {"n_estimators": 300, "learning_rate": 0.05, "max_depth": 6, "subsample": 0.8},
                "gradient-boosted trees: usually the strongest on tables")),
    "regression": (("ridge", {"alpha": 1.0}, "a linear baseline: fast, and a yardstick for the trees"),
                   ("random_forest", {"n_estimators": 200, "min_samples_leaf": 5}, "robust trees, little tuning"),
                   ("xgboost", {"n_estimators": 300, "learning_rate": 0.05, "max_depth": 6, "subsample": 0.8},
                    "gradient-boosted trees: usually the strongest on tables")),
}
MODEL_CHOICES["multiclass"] = MODEL_CHOICES["binary"]
# `init --auto`: one auto stage instead of the features stage and the models above.
AUTO_TIME_LIMIT = "5m"
AUTO_WHY = ("auto: a portfolio of boosted trees, forests, an MLP and a linear model, planned against time_limit "
            "(each member screened on a holdout, those that earn weight bagged) and blended")


@dataclass
class TaskChoice:
    kind: str
    reason: str
    positive: Any = None
    write_positive: bool = False
    missing: int = 0
    declared: bool = False


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


def draft_config(data: str | Path, target: str, *, task: str | None = None, positive: str | None = None,
                 fmt: str | None = None, data_path: str | None = None, name: str | None = None,
                 auto: bool = False) -> Scaffold:
    """The config for ``data`` predicting ``target``; ``data_path`` is how the config names the
    file (default: ``data`` as given: the load reads it relative to the working directory).
    ``auto``: one ``auto`` stage (a time-limited portfolio) instead of the features stage and
    the chosen models; it leaves out the same columns by the same rule."""
    if task is not None and task not in TASK_KINDS:
        raise UsageError(f"--task must be one of {', '.join(TASK_KINDS)}, not {task!r}")
    sample = read_sample(data, fmt=fmt)
    markers = missing_markers(sample.frame)
    tokens = sorted(markers) if sample.format == "csv" else []
    if tokens:                          # read again with them, in the dialect already found
        sample = dataclasses.replace(read_sample(data, fmt=sample.format, na_values=tokens, dialect=sample.dialect),
                                     notes=sample.notes)
    frame = sample.frame
    _check_target(frame, target, sample.path)
    notes: list[str] = []
    choice = choose_task(frame[target], target, declared=task, positive=positive, sample=sample)
    choice.declared = task is not None or positive is not None
    columns = [classify(frame[c], str(c), n_rows=len(frame)) for c in frame.columns if str(c) != target]
    mark_leaks(columns, frame, target, choice.kind)
    for column in columns:              # the markers read as missing, by their share of the rows
        read = [f"{token!r} ({shares[column.name]:.0%} of rows)" for token, shares in markers.items()
                if column.name in shares and tokens]
        if read:
            column.reason += f"; read as missing: {', '.join(read)}"
    id_column = _pick_identifier(columns)
    features = [c for c in columns if c.role in ("numeric", "categorical", "high_cardinality", "date")]
    if not features:
        raise DataError(f"{sample.path}: no column is usable as a feature once the target and the columns to "
                        "exclude are set aside (" + "; ".join(c.line() for c in columns) + ")")
    models, model_notes = ([], []) if auto else choose_models(choice.kind)
    notes += model_notes
    if choice.missing:
        notes.append(_missing_target_note(target, choice.missing, len(frame)))
    ops = [] if auto else feature_ops(columns)
    if auto:                            # what the auto stage does with each column
        for c in columns:
            c.action = ("auto.id (written beside predictions, not a feature)" if c.name == id_column else
                        "left out by auto" if c.role in LEFT_OUT_ROLES else "a feature (auto types it)")
    config_name = name or pipeline_name(Path(data))
    text = render(name=config_name, data_path=data_path or str(data), sample=sample, tokens=tokens, target=target,
                  choice=choice, columns=columns, id_column=id_column, ops=ops, models=models, notes=notes, auto=auto)
    check_config_text(text)
    if not auto:
        check_ops_fit(frame, ops, columns, target=target, id_column=id_column, sample=sample)
    return Scaffold(text, config_name, [Column(target, "target", choice.reason, "split.target"), *columns],
                    choice, ["auto"] if auto else [m[0] for m in models], sample, notes)


# ---------------------------------------------------------------- reading the sample
# A text value made of punctuation alone ("?", "-", "--", "."), at least this share of a column's
# values: a missing-value marker, not a level.
MARKER_SHARE = 0.01
MARKER_TEXT = re.compile(r"^[^\w\s]{1,3}$")
# Numbers that exports write for "unknown": nines, negative or not, outside the column's other values.
SENTINELS = (-99999.0, -9999.0, -999.0, -99.0, 999.0, 9999.0, 99999.0, 999999.0)


def missing_markers(frame: pd.DataFrame) -> dict[str, dict[str, float]]:
    """Values that mean "missing", each with the share of rows it holds per column:

    - blank or whitespace-only text anywhere;
    - in a text column, a value of punctuation alone (``?``, ``-``, ``--``) holding at least 1%
      of it, and the few non-numbers of a column that is otherwise at least 90% numbers
      (``n/a``);
    - in a numeric column, a sentinel of nines (-999, 9999...) holding at least 1% of it, and
      outside the range of its other values (so a real 999 among values up to 5,000 stays)."""
    found: dict[str, dict[str, float]] = {}

    def add(token: str, column: Any, rows: int) -> None:
        found.setdefault(token, {})[str(column)] = rows / max(len(frame), 1)

    for column in frame.columns:
        series = frame[column]
        if is_number(series.dtype):
            _numeric_sentinels(series, lambda token, rows, c=column: add(token, c, rows))
            continue
        if not is_text(series):
            continue
        counts = series.dropna().astype(str).value_counts()      # each distinct value once
        if counts.empty:
            continue
        blank = counts.index.str.strip() == ""
        for token in counts.index[blank]:
            add(token, column, int(counts[token]))
        rest = counts[~blank]
        numbers = pd.to_numeric(pd.Series(rest.index), errors="coerce").to_numpy()
        bad = rest.index[np.isnan(numbers)].tolist()
        share = float(rest[~np.isnan(numbers)].sum() / max(rest.sum(), 1))
        if share >= 0.9 and 0 < len(bad) <= 3 and all(len(b) <= 10 for b in bad):
            for token in bad:
                add(token, column, int(rest[token]))
        total = int(counts.sum())
        for token in rest.index:
            if MARKER_TEXT.match(token) and rest[token] >= MARKER_SHARE * total:
                add(token, column, int(rest[token]))
    return found


def _numeric_sentinels(series: pd.Series, add: Callable[[str, int], None]) -> None:
    values = series.dropna().to_numpy(dtype="float64")
    if not values.size:
        return
    for sentinel in SENTINELS:
        hits = int(np.count_nonzero(values == sentinel))
        if not hits or hits < MARKER_SHARE * values.size:
            continue
        others = values[values != sentinel]
        outside = not others.size or (sentinel < others.min() if sentinel < 0 else sentinel > 10 * max(others.max(), 1))
        if outside:
            add(f"{sentinel:g}", hits)


def missing_tokens(frame: pd.DataFrame) -> list[str]:
    """The strings ``missing_markers`` finds, as the load's ``na_values``."""
    return sorted(missing_markers(frame))


def _check_target(frame: pd.DataFrame, target: str, path: Path) -> None:
    names = [str(c) for c in frame.columns]
    if target in names:
        return
    close = difflib.get_close_matches(target, names, n=1, cutoff=0.6)
    if not close:
        lowered = {n.lower(): n for n in names}
        match = difflib.get_close_matches(target.lower(), list(lowered), n=1, cutoff=0.6)
        close = [lowered[match[0]]] if match else []
    hint = f"; did you mean '{close[0]}'?" if close else ""
    shown = ", ".join(names[:30]) + (", ..." if len(names) > 30 else "")
    raise UsageError(f"--target '{target}' is not a column of {path}{hint} (columns: {shown})")


# ---------------------------------------------------------------- the task
def choose_task(series: pd.Series, column: str, *, declared: str | None, positive: str | None,
                sample: Sample) -> TaskChoice:
    """The task and why: binary for two values, multiclass for a few text values or up to
    ``INTEGER_CLASSES`` whole numbers, regression for other numbers; ``declared`` wins where
    the values allow it."""
    missing = int(series.isna().sum())
    values = series.dropna()
    counts = values.value_counts()
    distinct = len(counts)
    where = f"in {sample.describe()} read"
    if distinct == 0:
        raise DataError(f"target column '{column}' has no values {where}: there is nothing to predict")
    if distinct == 1:
        only = counts.index[0]
        partial = "" if sample.complete else " (unless other rows differ: the sample saw one value)"
        raise DataError(f"target column '{column}' has one value ({plain_value(only)!r}) {where}: there is nothing to "
                        f"predict{partial}; choose another --target")
    numeric = column_type(values) == "numeric"
    shown = _shown_counts(counts)
    if positive is not None:
        if declared not in (None, "binary"):
            raise UsageError(f"--positive applies to --task binary (that value against every other); with --task "
                             f"{declared} leave it out")
        match = [v for v in counts.index if str(plain_value(v)) == positive]
        if not match:
            close = difflib.get_close_matches(positive, [str(plain_value(v)) for v in counts.index], n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            raise UsageError(f"--positive {positive!r} is not a value of target column '{column}'{hint} "
                             f"(values {where}: {shown})")
        return TaskChoice("binary", f"--positive {positive!r}: that value against every other ({shown})",
                          plain_value(match[0]), True, missing)
    if declared == "regression":
        if not numeric:
            raise UsageError(f"--task regression needs a numeric target; '{column}' holds {values.dtype} values "
                             f"({shown}): use --task binary or multiclass")
        return TaskChoice("regression", f"--task regression (given); {distinct} distinct values", missing=missing)
    if declared == "multiclass":
        return TaskChoice("multiclass", f"--task multiclass (given): {distinct} classes ({shown})", missing=missing)
    if distinct == 2 or declared == "binary":
        if distinct > 2:
            raise UsageError(f"--task binary: target column '{column}' has {distinct} values ({shown}); name the "
                             "one that means 1 with --positive VALUE (one against the rest), or use --task multiclass")
        given = " (given)" if declared else ""
        if {str(plain_value(v)) for v in counts.index} <= ZERO_ONE or dtype_kind(values.dtype) == "bool":
            return TaskChoice("binary", f"two values, 0/1 or true/false{given}: 1 is the positive class ({shown})",
                              missing=missing)
        chosen, why = _positive_of(counts, numeric)
        return TaskChoice("binary", f"two values{given} ({shown}); positive: {plain_value(chosen)!r}, {why}",
                          plain_value(chosen), True, missing)
    whole = numeric and bool(np.all(np.mod(values.to_numpy(dtype="float64"), 1) == 0))
    if numeric and not (whole and distinct <= INTEGER_CLASSES):
        return TaskChoice("regression", f"numbers with {distinct} distinct values; --task multiclass would "
                                        "take them as classes", missing=missing)
    if numeric:
        return TaskChoice("multiclass", f"{distinct} whole numbers ({shown}): taken as classes; --task regression "
                                        "predicts them as numbers", missing=missing)
    if distinct > MAX_INFERRED_CLASSES:
        raise DataError(f"target column '{column}' has {distinct} distinct text values {where}, too many to take as "
                        "classes without being told (an id or free text?); pass --task multiclass to predict each "
                        "value as a class, or choose another --target")
    return TaskChoice("multiclass", f"{distinct} text values ({shown}): each one a class", missing=missing)


def _positive_of(counts: pd.Series, numeric: bool) -> tuple[Any, str]:
    """The value that means 1: a yes-like word, else the larger number, else the rarer value."""
    for value in counts.index:
        if str(value).strip().lower() in _YES:
            return value, "the yes-like value"
    if numeric:
        return max(counts.index), "the larger value"
    return counts.index[-1], "the rarer value (usually the event to predict)"


def _shown_counts(counts: pd.Series, limit: int = 6) -> str:
    parts = [f"{plain_value(v)!r}: {int(n):,}" for v, n in counts.iloc[:limit].items()]
    return ", ".join(parts) + (", ..." if len(counts) > limit else "")


def _missing_target_note(target: str, missing: int, rows: int) -> str:
    if "missing_target" in SplitSpec.model_fields:
        return (f"{missing:,} of {rows:,} sampled rows have no {target}: split has missing_target: drop, "
                "so they are left out of training and testing (the run record counts them)")
    return (f"{missing:,} of {rows:,} sampled rows have no {target}, and the split stage has no option to drop "
            f"such rows yet: the run will stop at split until they are removed from the file")


# ---------------------------------------------------------------- the columns
def _pick_identifier(columns: list[Column]) -> str | None:
    ids = [c for c in columns if c.role == "identifier"]
    if not ids:
        return None
    ids.sort(key=lambda c: "named like an id" not in c.reason)   # named ids first, then file order
    ids[0].action = "features.id (written beside predictions, not a feature)"
    for other in ids[1:]:
        other.action = "dropped"
    return ids[0].name


# ---------------------------------------------------------------- ops and models
@dataclass
class Op:
    """One feature op as the YAML writes it, with the comment that says why."""

    name: str
    params: dict[str, Any]
    why: str


def feature_ops(columns: list[Column]) -> list[Op]:
    """Ops per role, in an order each op's input is ready for: drop, dates to numbers, fill the
    gaps, transform the numbers, encode the categories."""
    by_role: dict[str, list[Column]] = {}
    for c in columns:
        by_role.setdefault(c.role, []).append(c)
    ops: list[Op] = []
    dropped = [c.name for c in columns if c.action == "dropped"]
    if dropped:
        ops.append(Op("drop", {"columns": dropped}, "the constant, id-like, leaking and free-text columns above"))
    dates = by_role.get("date", [])
    numbers = [c.name for c in by_role.get("numeric", [])]
    for c in dates:
        parts = c.date_parts
        ops.append(Op("date_parts", {"columns": [c.name], "parts": parts},
                      f"{c.name} as numbers: {', '.join(parts)} (a missing date gives missing parts)"))
        numbers += [f"{c.name}_{p}" for p in parts]
    with_gaps = [c.name for c in by_role.get("numeric", []) if c.missing]
    with_gaps += [f"{c.name}_{c.date_parts[0]}" for c in dates if c.missing]   # one indicator per date
    if with_gaps:
        ops.append(Op("fill_missing", {"columns": with_gaps, "strategy": "median", "indicator": True},
                      "gaps in the sample: the training median, and a <column>_missing 0/1 column"))
    guarded = [n for n in numbers if n not in with_gaps]
    if guarded:
        ops.append(Op("fill_missing", {"columns": guarded, "strategy": "median"},
                      "no gaps in the sample; models refuse missing values, so rows the sample did not read "
                      "and new rows to score are covered too"))
    text_gaps = [c.name for r in ("categorical", "high_cardinality") for c in by_role.get(r, [])
                 if c.missing and "true/false" not in c.reason]
    if text_gaps:
        ops.append(Op("fill_missing", {"columns": text_gaps, "strategy": "constant", "value": "missing"},
                      "a missing category becomes the value 'missing', a category of its own"))
    skewed = [c.name for c in by_role.get("numeric", []) if c.skewed]
    if skewed:
        ops.append(Op("log1p", {"columns": skewed}, "non-negative and skewed in the sample: log(1 + x) evens them"))
    if numbers:
        ops.append(Op("standardize", {"columns": numbers},
                      "zero mean, unit variance (the linear model needs it; trees do not mind)"))
    low = [c.name for c in by_role.get("categorical", [])]
    if low:
        ops.append(Op("one_hot", {"columns": low, "drop_binary": True},
                      f"at most {LOW_CARDINALITY} values: one 0/1 column each (one column for two values); "
                      "a value not seen in training gets zeros"))
    high = [c.name for c in by_role.get("high_cardinality", [])]
    if high:
        ops.append(Op("categorify", {"columns": high, "min_frequency": RARE_CODE},
                      f"many values: integer codes by frequency, values seen under {RARE_CODE} times share code 0"))
    unknown = {op.name for op in ops} - set(OPS)
    assert not unknown, f"ops not in the registry: {unknown}"
    for c in columns:
        if c.action == "dropped" or c.action.startswith("features.id"):
            continue
        own = {c.name} | {f"{c.name}_{p}" for p in c.date_parts}
        steps = list(dict.fromkeys(o.name for o in ops if own & set(o.params["columns"])))
        c.action = ", ".join((["load dates:"] if c.date_format is not False else []) + steps)
    return ops


def choose_models(task: str) -> tuple[list[tuple[str, dict[str, Any], str]], list[str]]:
    """The task's models from ``MODEL_CHOICES`` that the registry serves and that import here."""
    chosen, notes = [], []
    offered = set(models_for(task))
    for name, params, why in MODEL_CHOICES[task]:
        if name not in offered:
            continue
        path = get_model_spec(name).class_path("cpu", task=task)
        module = path.split(":")[0] if path else None
        if module is None or importlib.util.find_spec(module.split(".")[0]) is None:
            notes.append(f"model {name} is left out: {module or 'its estimator'} is not installed here")
            continue
        chosen.append((name, params, why))
    if not chosen:
        raise DataError(f"no model for a {task} task imports here (registry: {', '.join(sorted(offered))})")
    return chosen, notes


def pipeline_name(data: Path) -> str:
    """A pipeline name (a plain folder name) from the file's name."""
    stem = data.name.split(".")[0] if data.name else "pipeline"
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", stem).lstrip(".-") or "pipeline"
    return name[:NAME_MAX_LENGTH]


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


def render(*, name: str, data_path: str, sample: Sample, tokens: list[str], target: str, choice: TaskChoice,
           columns: list[Column], id_column: str | None, ops: list[Op], models: list[tuple[str, dict[str, Any], str]],
           notes: list[str], auto: bool = False) -> str:
    """The config's YAML, every choice with its reason as a comment; ``auto``: one auto stage
    after the split, in place of the features stage and ``models``."""
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
    add("seed: 42                     # splits and models are repeatable")
    add("")
    add("stages:")
    add("  raw:")
    add("    kind: load")
    add(f"    path: {scalar(data_path)}")
    if _format_by_name(data_path) != sample.format:
        add(f"    format: {sample.format}         # the file's name does not say")
    for key, value in sample.dialect.reader_options().items():
        add(f"    {key}: {show(value)}" + f"   # {_DIALECT_WHY[key]}")
    if tokens:
        add(f"    na_values: {flow(tokens)}" + "   # read as missing: placeholders seen in the sample")
    dates = load_dates(columns)
    if dates:
        add("    # date text read as dates" + (" (null: the layout of the first value, ISO 8601)"
                                        if None in dates.values() else ""))
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
    rows = sample.total_rows
    valid = 0.1 if rows >= VALID_FROM_ROWS else 0.0
    add("    test: 0.2                  # a random 20% held out to compare the models on"
        + ("" if choice.kind == "regression" else ", with the class ratio kept"))
    if valid:
        add("    valid: 0.1                 # 10% more for validation")
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
        add("    # likely leaks and free text itself, by the same rule, and types the rest:")
        for c in columns:
            out.extend(_comment_lines(f"{c.name}: {c.role.replace('_', '-')} ({c.reason})", 4, width=120))
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


def load_dates(columns: list[Column]) -> dict[str, str | None]:
    """The load's ``dates:``: date columns the file holds as text (or with a time zone)."""
    return {c.name: c.date_format for c in columns  # type: ignore[misc]
            if c.role == "date" and c.date_format is not False}


def _format_by_name(path: str) -> str | None:
    try:
        return format_of(Path(path))
    except DataError:
        return None
