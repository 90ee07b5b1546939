"""Load a pipeline config: YAML → overrides → schema → graph, every problem reported at once.

Each problem carries its key path (``stages.forest.params.n_estimators``) and the line it is
on, with a did-you-mean for misspelt keys and stage names.
"""

from __future__ import annotations

import difflib
import os
import re
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from pipeline.config.data_checks import data_issues
from pipeline.config.schema import PipelineConfig, config_model
from pipeline.core.yaml_source import (
    MAX_DEPTH,
    ConfigDumper,
    KeyPath,
    YamlDocument,
    format_path,
    parse_value,
    parse_yaml,
    read_document,
)
from pipeline.core.dag import graph_problems, topological_order
from pipeline.core.errors import ConfigError, ConfigIssue, UsageError
from pipeline.features import COLUMNS_TAGS, OPS, SELECTOR_TAG, ColumnSelector
from pipeline.core.plugins import is_module_name, load_plugins
from pipeline.core.local_code import refresh_plugins, remember, use_config_folders
from pipeline.stages import STAGE_KINDS
from pipeline.stages.spec import input_list, kinds_producing


def _tags() -> set[str]:
    """Union tags pydantic puts into error locations: stage kinds and feature op names."""
    return set(STAGE_KINDS) | set(OPS)


def load_config(
    path: str | os.PathLike[str] | None = None,
    *,
    overrides: Sequence[str] = (),
    text: str | None = None,
    check_data: bool = False,
    before_run: bool = False,
) -> PipelineConfig:
    """Validate a config file (or ``text``) with ``--set key.path=value`` overrides applied.

    ``check_data``: also check every column a stage names against the headers and schemas of
    the files the config loads, and the rules across stages (``pipeline.config.data_checks``),
    without reading a data row; paths are relative to the working directory, as in a run.
    ``before_run``: a run follows, so named pipes are left unread and a file that cannot be
    read is left to its load stage, whose failure the run records.

    Examples:
        >>> from pipeline import load_config
        >>> config = load_config("configs/churn.yaml", overrides=["stages.xgb.params.max_depth=6"])
        >>> config.name, config.stages["xgb"].params["max_depth"]
        ('churn', 6)
    """
    source = str(path) if path is not None else "<string>"
    if text is None or path is not None:
        check_config_path(path)
    if text is None:
        text = read_document(path)
    doc = parse_yaml(text, source=source)
    issues = list(doc.duplicates)
    if not isinstance(doc.data, dict):
        raise ConfigError([ConfigIssue("", "the config must be a mapping (name:, stages:, ...)", 1)], file=source)
    overridden = apply_overrides(doc.data, overrides, issues)
    if path is not None:
        _allow_local_modules(Path(path))
    issues += _plugin_issues(doc)
    config = None
    try:
        config = config_model().model_validate(doc.data)
    except ValidationError as exc:
        issues += [_issue_from_error(err, doc, overridden) for err in exc.errors()]
    graph_issues = _graph_issues(doc, overridden)
    issues += graph_issues
    if config is not None and not graph_issues:
        issues += _task_issues(config, doc, overridden)
        issues += _input_issues(config, doc, overridden)
    if config is not None and check_data and not issues:
        issues += data_issues(config, lambda path, message: _issue_at(path, message, doc, overridden),
                              before_run=before_run)
    if issues:
        issues = _dedupe(issues)
        raise ConfigError(sorted(issues, key=_reading_order), file=source)
    assert config is not None
    return config


def located(error: ConfigError, config_path: str | os.PathLike[str] | None,
            overrides: Sequence[str] = ()) -> ConfigError:
    """``error`` with a line for each issue that a run raised at a key (``stages.m.params``,
    found only as the stage trained) and the config file named, as ``validate``'s problems
    have them (or marked ``--set`` where an override set that key or one above it); ``error``
    itself where nothing can be added (no file, a usage error)."""
    if config_path is None or isinstance(error, UsageError) or all(i.line is not None for i in error.issues):
        return error
    try:
        doc = parse_yaml(read_document(config_path), source=str(config_path))
    except ConfigError:
        return error
    overridden = {_override_path(item.partition("=")[0]) for item in overrides}
    issues = [issue if issue.line is not None or issue.source or not issue.path
              else _issue_at(_key_path(issue.path), issue.message, doc, overridden) for issue in error.issues]
    found = type(error)(issues, file=error.file or str(config_path))
    found.__dict__.update({k: v for k, v in error.__dict__.items() if k not in ("issues", "file")})
    return found


def _override_path(key: str) -> KeyPath:
    """The key path of a ``--set`` key: ``stages.features.ops.0.fill_missing``, or as messages
    write it, ``stages.features.ops[0].fill_missing``."""
    return _key_path(key.strip())


def _key_path(text: str) -> KeyPath:
    """``stages.m.params[0]`` as the key path it was formatted from."""
    return tuple(int(part[1:-1]) if part.startswith("[") else int(part) if part.isdigit() else part
                 for part in re.findall(r"\[\d+\]|[^.\[\]]+", text))


def check_config_path(path: object) -> None:
    """A ``UsageError`` unless ``path`` is a path (``str`` or ``os.PathLike``): an int would be
    opened as a file descriptor (0 reads stdin), a mapping or bytes would fail deep inside with
    Python's own message."""
    if isinstance(path, (str, os.PathLike)):
        return
    given = f"{type(path).__name__} {path!r:.60}" if path is not None else "None"
    hint = ("; a config held as a mapping is read with load_config(text=yaml.safe_dump(mapping)), which validates "
            "it as the file would be" if isinstance(path, Mapping) else "")
    raise UsageError(f"the config must be a path to a YAML file (a str or os.PathLike) or a loaded PipelineConfig, "
                     f"got {given}{hint}")


def _plugin_issues(doc: YamlDocument) -> list[ConfigIssue]:
    """Import the config's ``plugins`` (and $PIPELINE_PLUGINS) before the schema is built;
    modules beside the config file import (``_allow_local_modules`` ran first). An entry that is
    not a module name, or a ``plugins`` that is not a list, is the schema's problem (reported
    with its line) and stops no other import: what the other entries register is known."""
    listed = doc.data.get("plugins") or []
    listed = listed if isinstance(listed, list) else []
    malformed = {f"plugins[{i}]" for i, module in enumerate(listed) if not is_module_name(module)}
    named = [module for module in listed if is_module_name(module)]
    refresh_plugins(named)          # another project's plugin of the same name, or an edited one
    try:
        load_plugins(listed)
        for module in named:
            remember(module, plugin=True)
    except ConfigError as exc:
        return [ConfigIssue(i.path, i.message, doc.line_of(("plugins",)) if i.path.startswith("plugins") else None,
                            i.source) for i in exc.issues if i.path not in malformed]
    return []


# ---------------------------------------------------------------- overrides
def apply_overrides(data: dict[str, Any], overrides: Sequence[str], issues: list[ConfigIssue]) -> set[KeyPath]:
    """Apply ``a.b.c=value`` overrides in place; values are read by the config file's own YAML
    rules (500, true, [a, b]; no tags beyond the core ones, bounded nesting), except a bare
    ``-``, which is the text ``-`` (standard input as a load's path), not a list holding null.
    Keys set inside a stage the config does not have make a new stage; one that ends without a
    ``kind`` was most often a misspelt stage name, refused naming the config's stages."""
    done: set[KeyPath] = set()
    stages = data.get("stages")
    named = [str(n) for n in stages] if isinstance(stages, dict) else []
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            issues.append(ConfigIssue(item, "an override is KEY.PATH=VALUE, e.g. stages.forest.params.n_estimators=500",
                                      source="--set"))
            continue
        parts: list[str | int] = list(_override_path(key))
        if len(parts) >= MAX_DEPTH:
            issues.append(ConfigIssue(key.strip(), f"the key path is deeper than {MAX_DEPTH} levels", source="--set"))
            continue
        try:
            value = "-" if raw.strip() == "-" else parse_value(raw, path=tuple(parts)) if raw.strip() else ""
        except ConfigError as exc:
            issues.extend(exc.issues)
            continue
        node: Any = data
        try:
            for part in parts[:-1]:
                if isinstance(node, dict):
                    node = node.setdefault(part, {})
                else:
                    node = node[part]
            if isinstance(node, list) and isinstance(parts[-1], int):
                node[parts[-1]] = value
            elif isinstance(node, dict):
                node[parts[-1]] = value
            else:
                raise TypeError
        except (IndexError, KeyError, TypeError):
            issues.append(ConfigIssue(key, "cannot set this key: a parent is not a mapping or the index is out of range",
                                      source="--set"))
            continue
        done.add(tuple(parts))
    if isinstance(stages, dict):
        for name in [n for n in stages if str(n) not in named]:
            if isinstance(stages[name], dict) and "kind" not in stages[name]:
                del stages[name]
                done = {p for p in done if p[:2] != ("stages", name)}
                issues.append(ConfigIssue(f"stages.{name}", f"no stage named '{name}' (stages: {', '.join(named)})"
                                          f"{_did_you_mean(name, named)}", source="--set"))
    return done


# ---------------------------------------------------------------- errors
def _issue_from_error(err: Mapping[str, Any], doc: YamlDocument, overridden: set[KeyPath]) -> ConfigIssue:
    loc = tuple(err["loc"])
    if loc and loc[-1] == "[key]":        # a dict key failed (a stage name): the key is the place
        loc = loc[:-1]
    path = _data_path(doc.data, loc)
    message = err["msg"].removeprefix("Value error, ")
    kind = err["type"]
    if kind == "extra_forbidden":
        message = f"unknown key '{path[-1]}'"
        close = difflib.get_close_matches(str(path[-1]), _allowed_keys(err["loc"]), n=1)
        if close:
            message += f"; did you mean '{close[0]}'?"
    elif kind == "missing":
        message = f"missing required key '{path[-1]}'"
    elif kind in ("union_tag_not_found", "union_tag_invalid") and "ops" in err["loc"]:
        tag = err.get("ctx", {}).get("tag")
        known = ", ".join(OPS)
        if kind == "union_tag_not_found":
            message = f"a feature op is a mapping with one key, the op name (one of: {known})"
        else:
            path = path[:-1] if path and path[-1] == tag else path
            message = f"unknown feature op '{tag}' (one of: {known}){_did_you_mean(tag, OPS)}"
    elif kind == "union_tag_not_found":
        message = f"missing 'kind' (one of: {', '.join(STAGE_KINDS)})"
        path = (*path, "kind")
    elif kind == "union_tag_invalid":
        tag = err.get("ctx", {}).get("tag")
        message = f"unknown stage kind '{tag}' (one of: {', '.join(STAGE_KINDS)}){_did_you_mean(tag, STAGE_KINDS)}"
        path = (*path, "kind")
    return _issue_at(path, message, doc, overridden)


def _did_you_mean(word: Any, choices: Any) -> str:
    close = difflib.get_close_matches(str(word), list(choices), n=1)
    return f"; did you mean '{close[0]}'?" if close else ""


def _data_path(data: Any, loc: Sequence[Any]) -> KeyPath:
    """The key path in the user's YAML for a pydantic error location.

    Pydantic puts the discriminator tag of a union member in the location; it is not a key in
    the data, so it is skipped: a stage's kind right after its block, an op's name repeated
    after its own key. A field named like a kind or an op (``features`` of an ``aggregate``
    stage) is a key, kept even where it is missing. Locations past the data (a missing key)
    are kept as they are.
    """
    path: list[str | int] = []
    node = data
    tags = _tags()
    skipped: Any = None                 # the node whose tag was skipped: a node has one tag
    for part in loc:
        if part in COLUMNS_TAGS:         # which form of an op's columns (names, selector): no key
            continue
        if isinstance(node, dict):
            if isinstance(part, str) and part in tags and node is not skipped \
                    and (node.get("kind") == part or (path and path[-1] == part)):
                skipped = node
                continue
            if part in node:
                path.append(part)
                node = node[part]
            else:
                path.append(part)
                node = None
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            path.append(part)
            node = node[part]
        elif node is None or not isinstance(part, str) or part not in tags:
            path.append(part)
            node = None
    return tuple(path)


def _allowed_keys(loc: Sequence[Any]) -> list[str]:
    """Field names of the model the unknown key was found in, for the did-you-mean (hooks'
    sections and plugins' kinds included)."""
    model: type[BaseModel] = config_model()
    for part in loc[:-1]:
        if part in STAGE_KINDS:
            model = STAGE_KINDS[part].spec
        elif part in OPS:
            model = OPS[part]
        elif part == SELECTOR_TAG:
            model = ColumnSelector
        elif part == "stages":
            continue
        elif isinstance(part, str) and part in model.model_fields:
            annotation = model.model_fields[part].annotation
            # `X | None` fields (cluster:) name their model inside the union.
            for candidate in (annotation, *typing.get_args(annotation)):
                if isinstance(candidate, type) and issubclass(candidate, BaseModel):
                    model = candidate
                    break
    return [field.alias or name for name, field in model.model_fields.items()]


def _graph_issues(doc: YamlDocument, overridden: set[KeyPath]) -> list[ConfigIssue]:
    """Unknown inputs, cycles, input counts and input kinds, checked on the raw data.

    Done on the raw data so these problems are reported even when a stage block has
    schema errors too.
    """
    stages = doc.data.get("stages")
    if not isinstance(stages, dict):
        return []
    graph: dict[str, list[str]] = {}
    kinds: dict[str, str] = {}
    for name, block in stages.items():
        block = block if isinstance(block, dict) else {}
        kinds[str(name)] = str(block.get("kind", ""))
        kind = STAGE_KINDS.get(kinds[str(name)])
        listed = input_list(block.get("inputs", []), kind.spec.input_roles if kind is not None else ())
        graph[str(name)] = listed if isinstance(listed, list) else []     # a bad mapping: the schema says why
    issues = []

    def issue(stage: str, message: str) -> ConfigIssue:
        return _issue_at(("stages", stage, "inputs"), message, doc, overridden)

    for stage, message in graph_problems(graph):
        issues.append(issue(stage, message.partition(": ")[2] if message.startswith("inputs[") else message))
    for stage, inputs in graph.items():
        kind = STAGE_KINDS.get(kinds[stage])
        if kind is None:
            continue
        spec = kind.spec
        if len(inputs) < spec.min_inputs:
            issues.append(issue(stage, f"{_a(kinds[stage])} '{kinds[stage]}' stage needs at least {spec.min_inputs} "
                                       "input(s)"))
        if spec.max_inputs is not None and len(inputs) > spec.max_inputs:
            allowed = "no inputs" if spec.max_inputs == 0 else f"at most {spec.max_inputs} input(s)"
            issues.append(issue(stage, f"{_a(kinds[stage])} '{kinds[stage]}' stage takes {allowed}"))
        for parent in inputs:
            producer = STAGE_KINDS.get(kinds.get(parent, ""))
            if producer is not None and not kind.accepts_output_of(producer):
                readers = " or ".join(repr(k) for k in kinds_producing(kind.accepts or ()))
                issues.append(issue(stage, f"input '{parent}' is {_a(producer.kind)} '{producer.kind}' stage; "
                                           f"{_a(kinds[stage])} '{kinds[stage]}' stage reads {readers} stages"))
    return issues


def _a(word: str) -> str:
    """The article before a stage kind's name: an 'ensemble' stage, a 'load' stage."""
    return "an" if word[:1].lower() in "aeiou" else "a"


def _task_issues(config: PipelineConfig, doc: YamlDocument, overridden: set[KeyPath]) -> list[ConfigIssue]:
    """A task fixed upstream checked by the stages downstream that depend on it.

    Two declarations of ``StageSpec`` take part, so no stage kind is named here: a spec's
    ``declared_task()`` returns the task it fixes before any data is read (a split with
    ``task:``), or None (the default); a spec's ``task_problems(task)`` returns ``(key path in
    its block, message)`` pairs for what cannot serve the task it receives (a train stage's
    classifier fed a regression split; none by default). A stage that declares no task passes
    on the task of its inputs when they agree. An inferred task is known only when the data is
    read; the stages check it then.
    """
    graph = config.inputs_of()
    received: dict[str, str | None] = {}
    issues = []
    for name in topological_order(graph):
        spec = config.stages[name]
        upstream = {received[parent] for parent in graph[name]} - {None}
        task = spec.declared_task() or (upstream.pop() if len(upstream) == 1 else None)
        received[name] = task
        if task is None:
            continue
        for where, message in spec.task_problems(task):
            issues.append(_issue_at(("stages", name, *where), message, doc, overridden))
    return issues


def _input_issues(config: PipelineConfig, doc: YamlDocument, overridden: set[KeyPath]) -> list[ConfigIssue]:
    """Each stage's ``input_problems`` for the types its inputs produce (``StageSpec``: no kind is
    named here), at its ``inputs`` key."""
    issues = []
    for name, spec in config.stages.items():
        produced = [STAGE_KINDS[config.stages[parent].kind].produces for parent in spec.inputs]
        issues += [_issue_at(("stages", name, "inputs"), message, doc, overridden)
                   for message in spec.input_problems(produced)]
    return issues


def _issue_at(path: KeyPath, message: str, doc: YamlDocument, overridden: set[KeyPath]) -> ConfigIssue:
    """An issue at ``path`` with its line, or marked as set by ``--set`` when an override set it."""
    path = _at_named_key(doc.data, path, message)
    source = "--set" if any(path[: len(o)] == o for o in overridden) or _made_by_override(doc, path, overridden) \
        else None
    return ConfigIssue(format_path(path), message, None if source else doc.line_of(path), source)


def _made_by_override(doc: YamlDocument, path: KeyPath, overridden: set[KeyPath]) -> bool:
    """Whether the first key of ``path`` that the file lacks is one an override made (a stage
    ``--set stages.new.kind=load`` began, missing its ``path``): its line would be another key's."""
    known = path
    while known and known not in doc.lines:
        known = known[:-1]
    if known == path:
        return False
    made = path[: len(known) + 1]
    return any(o[: len(made)] == made for o in overridden)


def _at_named_key(data: Any, path: KeyPath, message: str) -> KeyPath:
    """A mapping's validator that names one of its keys (``unknown parameter 'n_estimator'``)
    reports at the mapping; the key's own path gives its line, or says it came from --set."""
    found = re.search(r"unknown parameter '([^']+)'", message)
    if not found:
        return path
    node, key = data, found.group(1)
    for part in path:
        node = node.get(part) if isinstance(node, dict) else None
    if not isinstance(node, dict):
        return path
    if key in node:
        return (*path, key)
    inner = next((name for name, child in node.items() if isinstance(child, dict) and key in child), None)
    return (*path, inner, key) if inner is not None else path     # a tune's space.max_dept


def _reading_order(issue: ConfigIssue) -> tuple[int, list[tuple[int, str]]]:
    """By line, then by key path with its numbers as numbers: ``columns[2]`` before
    ``columns[10]`` (as text, ``columns[10]`` came first)."""
    parts = re.split(r"(\d+)", issue.path)
    return issue.line or 10**9, [(int(part), "") if part.isdigit() else (-1, part) for part in parts]


def _dedupe(issues: list[ConfigIssue]) -> list[ConfigIssue]:
    seen, out = set(), []
    for issue in issues:
        key = (issue.path, issue.message)
        if key not in seen:
            seen.add(key)
            out.append(issue)
    return out


def _allow_local_modules(config_path: Path) -> None:
    """Let ``python`` stages import modules that sit beside the config file (ahead of other
    configs' folders: ``pipeline.core.local_code``)."""
    use_config_folders([config_path.resolve().parent])


def dump_config(config: PipelineConfig) -> str:
    """The resolved config (defaults filled in, overrides applied) as YAML."""
    data = config.model_dump(mode="json", exclude_none=True)
    if not data.get("plugins"):
        data.pop("plugins", None)
    data["stages"] = {name: {"kind": block.pop("kind"), **block} for name, block in data["stages"].items()}
    return yaml.dump(data, Dumper=ConfigDumper, sort_keys=False, allow_unicode=True)
