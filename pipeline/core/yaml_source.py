"""Read YAML while remembering the line of every key, so errors can point at it.

PyYAML's composer gives each node a start mark; walking the node tree once yields both the
plain data and a ``{key path: line}`` map. Duplicate keys, which PyYAML would silently
collapse to the last one, are reported here instead.

A config comes from files that scheduled jobs read unattended, so this is also the one place
that decides what YAML may hold; the config file and every ``--set`` value are read here:

- only the core schema's values: text, integers, finite floats, booleans, null, lists and
  mappings. Every other tag (``!!python/...``, ``!!binary``, ``!!set``, ``!custom``) is refused
  wherever it is, and a core tag whose value cannot be built (``!!int forty-two``) too;
- keys are plain values (not lists or mappings); a merge key ``<<`` takes a mapping or a list
  of mappings; a string never holds a NUL character (strings become paths);
- YAML 1.1 timestamps (``2024-01-01``) stay the text that was written: a config has no date
  fields, and a date object would not survive the JSON of the run record;
- booleans are YAML 1.2's: only ``true`` / ``false`` (any case). YAML 1.1 also reads ``on``,
  ``off``, ``yes`` and ``no`` as booleans, which turned a join's ``on:`` key into ``True`` and
  ``positive: yes`` into a boolean; they stay text (a bool field still reads "yes" as true);
- bounded: ``MAX_DOCUMENT_BYTES`` of text, ``MAX_DEPTH`` levels of nesting (checked while
  composing, before PyYAML's recursive composer can exhaust the stack) and ``MAX_VALUES``
  values once aliases are expanded (an 800-byte "billion laughs" document would otherwise
  expand until memory runs out); an alias inside its own anchor is refused. The bounds are
  the project's whatever PyYAML release is installed: libyaml 0.2.6 (in PyYAML 6.0.4's wheels)
  has a nesting limit of its own, and its scanner reads ahead of the events, so it can refuse
  a document before the composer reaches ``MAX_DEPTH`` (see ``COMPOSERS``).

Every problem is a ``ConfigError`` (exit 2) that names the key path and the line.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field, replace
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.parser import Parser
from yaml.reader import Reader
from yaml.resolver import Resolver
from yaml.scanner import Scanner

from pipeline.core.errors import ConfigError, ConfigIssue

KeyPath = tuple[str | int, ...]

MAX_DOCUMENT_BYTES = 10 * 2**20   # a config is a few kilobytes; 10 MiB is far past any real one
MAX_DEPTH = 100                   # levels of nesting, the top-level mapping being level 1
MAX_VALUES = 100_000              # values (scalars, lists, mappings) after expanding aliases

CORE = "tag:yaml.org,2002:"
SCALAR_TAGS = {f"{CORE}{name}" for name in ("str", "int", "float", "bool", "null")}
MERGE_TAG = f"{CORE}merge"
SEQUENCE_TAG = f"{CORE}seq"
MAPPING_TAG = f"{CORE}map"
ALLOWED = "a config holds only text, numbers, true/false, null, lists and mappings"


@dataclass
class YamlDocument:
    data: Any
    lines: dict[KeyPath, int] = field(default_factory=dict)
    duplicates: list[ConfigIssue] = field(default_factory=list)

    def line_of(self, path: KeyPath) -> int | None:
        """Line of ``path``, or of its nearest ancestor that has one."""
        while path:
            if path in self.lines:
                return self.lines[path]
            path = path[:-1]
        return self.lines.get((), None)


class YamlSyntaxError(ConfigError):
    """The text is not YAML at all (as opposed to YAML holding something a config may not)."""


def format_path(path: KeyPath) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def read_document(path: str | os.PathLike[str]) -> str:
    """The text of a config file, refusing one past ``MAX_DOCUMENT_BYTES`` before reading it all."""
    try:
        with open(path, "rb") as stream:
            raw = stream.read(MAX_DOCUMENT_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    if len(raw) > MAX_DOCUMENT_BYTES:
        raise ConfigError(f"cannot read config file {path}: it is larger than {_size_limit()}, the most a config may be")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"cannot read config file {path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def parse_yaml(text: str, *, source: str, root: KeyPath = ()) -> YamlDocument:
    """Plain data and key lines of ``text``; ``root`` is where the text goes in the config
    (a ``--set`` value), so nesting and key paths count from there."""
    if len(text) > MAX_DOCUMENT_BYTES or (len(text) > MAX_DOCUMENT_BYTES // 4
                                          and len(text.encode("utf-8")) > MAX_DOCUMENT_BYTES):
        raise ConfigError([ConfigIssue(format_path(root), f"the YAML is larger than {_size_limit()}, "
                                                          "the most a config may be")], file=source)
    try:
        node = _compose(text, root)
    except _BoundPassed as exc:
        raise ConfigError([ConfigIssue(str(exc.context), str(exc.problem), exc.problem_mark.line + 1)],
                          file=source) from None
    except yaml.YAMLError as exc:
        raise YamlSyntaxError([ConfigIssue(format_path(root), f"not valid YAML: {_problem(exc)}", _line(exc, text))],
                              file=source) from None
    doc = YamlDocument(data=None)
    if node is None:
        doc.data = {}
        return doc
    reader = _NodeReader(doc, source)
    doc.data = reader.read(node, root, len(root) + 1)
    if reader.issues:
        raise ConfigError(reader.issues, file=source)
    return doc


def parse_value(text: str, *, path: KeyPath) -> Any:
    """A ``--set`` value, read by the same rules as the file it overrides; text that is not YAML
    (``'unclosed``) stays the text it was. Problems name the key and ``--set``."""
    try:
        return parse_yaml(text, source="--set", root=path).data
    except YamlSyntaxError:
        return text
    except ConfigError as exc:
        issues = [replace(i, path=i.path or format_path(path), line=None, source="--set") for i in exc.issues]
        raise ConfigError(issues) from None


def _compose(text: str, root: KeyPath) -> Node | None:
    """The node tree of ``text``, from the first of ``COMPOSERS`` that reads it.

    A refusal of the parser's own (libyaml's nesting limit) is not the project's word on the
    document: the next parser reads it again, and its answer stands, a bound passed included.
    Where every parser finds the text is not YAML, the first one's message is kept.
    """
    first_error: yaml.YAMLError | None = None
    for composer in COMPOSERS.values():
        loader = composer(text, root=root)
        try:
            return loader.get_single_node()
        except _BoundPassed:
            raise
        except yaml.YAMLError as exc:
            first_error = first_error or exc
        finally:
            loader.dispose()
    assert first_error is not None
    raise first_error


def _size_limit() -> str:
    return f"{MAX_DOCUMENT_BYTES // 2**20} MiB"


def _problem(exc: yaml.YAMLError) -> str:
    context, problem = getattr(exc, "context", None), getattr(exc, "problem", None)
    if problem is None:
        return str(exc).replace("\n", " ")
    return f"{context}, {problem}" if context else str(problem)


def _line(exc: yaml.YAMLError, text: str) -> int | None:
    """The line the problem is on; where the parser found it past the last line (an unclosed
    ``[`` at the end of the file), the line where what it was reading began."""
    mark = getattr(exc, "problem_mark", None)
    if mark is None:
        return None
    last = max(len(text.splitlines()), 1)
    if mark.line + 1 <= last:
        return mark.line + 1
    began = getattr(exc, "context_mark", None)
    return began.line + 1 if began is not None and began.line + 1 <= last else last


class _BoundPassed(yaml.MarkedYAMLError):
    """A bound passed while composing (depth, size): a config error, not a syntax error.
    ``context`` holds the key path."""


# Booleans by the YAML 1.2 core schema: true and false only, in any case (TRUE, False...).
CORE_BOOL = re.compile(r"^(?:true|false)$", re.IGNORECASE)


# Floats in exponent form (1e-3, 1.5e3, 5E+2), which YAML 1.2 reads as numbers and YAML 1.1
# (PyYAML's) as text unless they have a point and a signed exponent: `learning_rate: 1e-3` was
# the string '1e-3'.
EXPONENT_FLOAT = re.compile(r"^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)[eE][-+]?[0-9]+$")


def _core_resolvers(resolvers: dict[Any, list[tuple[str, Any]]]) -> dict[Any, list[tuple[str, Any]]]:
    """PyYAML's implicit resolvers without timestamps, with YAML 1.2 booleans (true / false)
    in place of YAML 1.1's (which include on / off / yes / no), and YAML 1.2's exponent floats."""
    dropped = {f"{CORE}timestamp", f"{CORE}bool"}
    out = {first: [(tag, regexp) for tag, regexp in entries if tag not in dropped]
           for first, entries in resolvers.items()}
    for first in "tTfF":
        out.setdefault(first, []).insert(0, (f"{CORE}bool", CORE_BOOL))
    for first in "-+.0123456789":
        out.setdefault(first, []).insert(0, (f"{CORE}float", EXPONENT_FLOAT))
    return out


def _either_resolvers(resolvers: dict[Any, list[tuple[str, Any]]]) -> dict[Any, list[tuple[str, Any]]]:
    """PyYAML's implicit resolvers (YAML 1.1: on / yes are booleans, dates are timestamps) and
    the loader's on top: a string either would read as another type is one to quote."""
    ours = _core_resolvers(resolvers)
    return {first: [*ours.get(first, []), *resolvers.get(first, [])] for first in set(ours) | set(resolvers)}


class ConfigDumper(yaml.SafeDumper):
    """PyYAML's safe dumper that quotes a string that this loader ('1e3', 'tRuE') or PyYAML's
    own ('yes', 'on', '2024-01-01') would read as another type: a resolved config reads back the
    same here and in any other YAML reader (a scheduler's, a notebook's ``yaml.safe_load``)."""

    yaml_implicit_resolvers = _either_resolvers(yaml.SafeDumper.yaml_implicit_resolvers)


class _PythonEventParser(Reader, Scanner, Parser):
    """PyYAML's own event parser, in Python: no nesting limit of its own in any 6.0.x."""

    def __init__(self, stream: str) -> None:
        Reader.__init__(self, stream)
        Scanner.__init__(self)
        Parser.__init__(self)


class _BoundedComposer(Composer, Resolver):
    """PyYAML's composer on an event parser (``event_parser``, mixed in by the subclasses
    below), with bounds on depth and size; plain dates are text, and only true / false are
    booleans.

    The composer is PyYAML's Python one even where libyaml's is available: libyaml's composer
    recurses in C with no bound. It recurses once per level (a few stack frames each), so the
    bound is checked before descending: 3,000 nested brackets end here, not in a RecursionError.
    """

    event_parser: Any

    yaml_implicit_resolvers = _core_resolvers(Resolver.yaml_implicit_resolvers)

    def __init__(self, stream: str, *, root: KeyPath = ()) -> None:
        self.event_parser.__init__(self, stream)
        Composer.__init__(self)
        Resolver.__init__(self)
        self.path: list[Any] = [*root, None]    # where the composer is, for the message
        self.nodes = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        self.path.append(index)
        self.nodes += 1
        try:
            if len(self.path) - 1 > MAX_DEPTH:
                self._refuse(f"nesting deeper than {MAX_DEPTH} levels (a config needs a few)")
            if self.nodes > MAX_VALUES:      # a huge document stops early; aliases are counted when read
                self._refuse(f"the YAML holds more than {MAX_VALUES:,} values; a config needs far fewer")
            return super().compose_node(parent, index)
        finally:
            self.path.pop()

    def _refuse(self, problem: str) -> None:
        where = [p.value if isinstance(p, ScalarNode) else "?" if isinstance(p, Node) else p
                 for p in self.path if p is not None]
        raise _BoundPassed(context=_outline(tuple(where)), problem=problem,
                           problem_mark=self.peek_event().start_mark)


class _PythonComposer(_BoundedComposer, _PythonEventParser):
    event_parser = _PythonEventParser


# The event parsers a document is read with, in order (see ``_compose``). libyaml's is about
# 10x faster and reads every valid config; but libyaml 0.2.6 (PyYAML 6.0.4's wheels) refuses
# nesting past its own level (1,000 by default, settable by any library in the process), and
# its scanner reads up to 1,024 characters ahead of the events (a flow collection may turn out
# to be a key), so 3,000 brackets fail in the scanner before the composer reaches MAX_DEPTH.
# PyYAML's Python parser then reads the text again, and the project's bound decides.
COMPOSERS: dict[str, type[_BoundedComposer]] = {"python": _PythonComposer}
try:
    from yaml._yaml import CParser as _LibyamlEventParser
except ImportError:                    # PyYAML built without libyaml
    pass
else:
    class _LibyamlComposer(_BoundedComposer, _LibyamlEventParser):  # type: ignore[misc,valid-type]
        event_parser = _LibyamlEventParser

    COMPOSERS = {"libyaml": _LibyamlComposer, **COMPOSERS}


_INVALID = object()   # a value with a reported problem; the read goes on to find the others


class _NodeReader:
    """Node tree → plain data, refusing what a config may not hold (see the module docstring).

    Tag, key and value problems are collected so all are reported at once; the bounds (depth,
    expansion, an alias inside its own anchor) stop the read at once.
    """

    def __init__(self, doc: YamlDocument, source: str) -> None:
        self.doc = doc
        self.source = source
        self.issues: list[ConfigIssue] = []
        self.values = 0
        self.open: set[int] = set()          # nodes being read: an alias back to one is a cycle
        self.constructor = yaml.SafeLoader("")

    def read(self, node: Node, path: KeyPath, depth: int) -> Any:
        self.values += 1
        if self.values > MAX_VALUES:
            self._stop(path, node, f"the YAML expands to more than {MAX_VALUES:,} values through its aliases "
                                   "(*name); a config needs far fewer")
        if depth > MAX_DEPTH:
            self._stop(path, node, f"nesting deeper than {MAX_DEPTH} levels once aliases are expanded")
        if id(node) in self.open:
            self._stop(path, node, "an alias refers to itself (it sits inside its own anchor)")
        self.doc.lines.setdefault(path, _line_of(node))
        if isinstance(node, ScalarNode):
            value = self.scalar(node, path)
            return None if value is _INVALID else value
        self.open.add(id(node))
        try:
            if isinstance(node, SequenceNode):
                return self.sequence(node, path, depth)
            return self.mapping(node, path, depth)
        finally:
            self.open.discard(id(node))

    def scalar(self, node: ScalarNode, path: KeyPath) -> Any:
        if node.tag == MERGE_TAG:
            return self._problem(path, node, "'<<' is a merge key; quote it ('<<') to use it as text")
        if node.tag not in SCALAR_TAGS:
            return self._refuse_tag(path, node)
        try:
            value = self.constructor.yaml_constructors[node.tag](self.constructor, node)
        except Exception:  # noqa: BLE001 - a core constructor fails in several ways (ValueError, KeyError)
            shown = node.value if len(node.value) <= 40 else node.value[:40] + "..."
            return self._problem(path, node, f"{shown!r} is not a valid {_short(node.tag)}")
        if isinstance(value, float) and not math.isfinite(value):
            return self._problem(path, node, f"{node.value} is not a finite number; a config takes finite numbers only")
        if isinstance(value, str) and "\0" in value:
            return self._problem(path, node, "the text contains a NUL character")
        return value

    def sequence(self, node: SequenceNode, path: KeyPath, depth: int) -> Any:
        if node.tag != SEQUENCE_TAG:
            return self._refuse_tag(path, node)
        return [self.read(item, (*path, i), depth + 1) for i, item in enumerate(node.value)]

    def mapping(self, node: MappingNode, path: KeyPath, depth: int) -> Any:
        if node.tag != MAPPING_TAG:
            return self._refuse_tag(path, node)
        out: dict[Any, Any] = {}
        merges = []
        for key_node, value_node in node.value:
            if isinstance(key_node, ScalarNode) and key_node.tag == MERGE_TAG:
                merges.append((key_node, value_node))
                continue
            key = self.key(key_node, path)
            if key is _INVALID:
                continue
            child = (*path, key)
            if key in out:
                self.doc.duplicates.append(ConfigIssue(
                    format_path(child), f"duplicate key '{key}' (first at line {self.doc.lines[child]})",
                    _line_of(key_node)))
            self.doc.lines.setdefault(child, _line_of(key_node))
            out[key] = self.read(value_node, child, depth + 1)
        return self.merged(merges, out, node, path, depth) if merges else out

    def key(self, node: Node, path: KeyPath) -> Any:
        if not isinstance(node, ScalarNode):
            return self._problem(path, node, "a key must be a plain value (text or a number), not a list or a mapping")
        return self.scalar(node, path)

    def merged(self, merges: list[tuple[Node, Node]], own: dict[Any, Any], node: MappingNode, path: KeyPath,
               depth: int) -> dict[Any, Any]:
        """YAML merge keys: the mapping's own keys win, then earlier merged mappings over later ones."""
        sources: list[Node] = []
        for key, value in merges:
            items = value.value if isinstance(value, SequenceNode) and value.tag == SEQUENCE_TAG else [value]
            if not all(isinstance(item, MappingNode) for item in items):
                self._problem(path, key, "a merge key '<<' takes a mapping or a list of mappings "
                                           "(such as *defaults), not a single value")
                continue
            sources += items
        out: dict[Any, Any] = {}
        for source in reversed(sources):
            data = self.read(source, path, depth)
            if isinstance(data, dict):
                out.update(data)
        out.update(own)
        return out

    def _refuse_tag(self, path: KeyPath, node: Node) -> object:
        return self._problem(path, node, f"the tag {_short(node.tag)} is not allowed: {ALLOWED}")

    def _problem(self, path: KeyPath, node: Node, message: str) -> object:
        self.issues.append(ConfigIssue(format_path(path), message, _line_of(node)))
        return _INVALID

    def _stop(self, path: KeyPath, node: Node, message: str) -> None:
        raise ConfigError([ConfigIssue(_outline(path), message, _line_of(node))], file=self.source)


def _outline(path: KeyPath, parts: int = 6) -> str:
    """The start of a key path that a bound cut off (100 levels would not read as a place)."""
    return format_path(path) if len(path) <= parts else format_path(path[:parts]) + "..."


def _line_of(node: Node) -> int:
    return node.start_mark.line + 1


def _short(tag: str) -> str:
    return f"!!{tag.removeprefix(CORE)}" if tag.startswith(CORE) else tag
