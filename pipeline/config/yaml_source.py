"""Read YAML while remembering the line of every key, so errors can point at it.

PyYAML's composer gives each node a start mark; walking the node tree once yields both the
plain data and a ``{key path: line}`` map. Duplicate keys, which PyYAML would silently
collapse to the last one, are reported here instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from pipeline.errors import ConfigError, ConfigIssue

KeyPath = tuple[str | int, ...]


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


def format_path(path: KeyPath) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def parse_yaml(text: str, *, source: str) -> YamlDocument:
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError([ConfigIssue("", f"not valid YAML: {problem}", line)], file=source) from None
    doc = YamlDocument(data=None)
    if node is None:
        doc.data = {}
        return doc
    constructor = yaml.SafeLoader("")
    doc.data = _walk(node, (), doc, constructor)
    return doc


def _walk(node: yaml.Node, path: KeyPath, doc: YamlDocument, constructor: yaml.SafeLoader) -> Any:
    doc.lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        constructor.flatten_mapping(node)  # resolves YAML merge keys (<<)
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = constructor.construct_object(key_node, deep=True)
            child = (*path, key)
            if key in out:
                doc.duplicates.append(ConfigIssue(
                    format_path(child), f"duplicate key '{key}' (first at line {doc.lines[child]})",
                    key_node.start_mark.line + 1,
                ))
            doc.lines.setdefault(child, key_node.start_mark.line + 1)
            out[key] = _walk(value_node, child, doc, constructor)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_walk(item, (*path, i), doc, constructor) for i, item in enumerate(node.value)]
    return constructor.construct_object(node, deep=True)
