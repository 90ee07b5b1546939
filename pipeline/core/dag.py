"""The stage graph: checks, topological order and sub-selection.

Pure functions over ``{stage: [inputs]}`` so the config loader can report graph problems
together with schema problems, and the runner can plan without re-reading the config.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence
from graphlib import CycleError, TopologicalSorter

Graph = Mapping[str, Sequence[str]]


def graph_problems(graph: Graph) -> list[tuple[str, str]]:
    """(stage, message) for unknown inputs and for cycles, naming the stages involved."""
    problems = []
    names = list(graph)
    for stage, inputs in graph.items():
        for i, name in enumerate(inputs):
            if name == stage:
                problems.append((stage, f"inputs[{i}]: stage '{stage}' lists itself as an input"))
            elif name not in graph:
                close = difflib.get_close_matches(name, names, n=1)
                hint = f"; did you mean '{close[0]}'?" if close else f" (stages: {', '.join(names)})"
                problems.append((stage, f"inputs[{i}]: unknown stage '{name}'{hint}"))
    known = {name: [i for i in inputs if i in graph and i != name] for name, inputs in graph.items()}
    try:
        topological_order(known)
    except CycleError as exc:
        cycle = exc.args[1]
        problems.append((cycle[0], "cycle in stage inputs: " + " -> ".join(cycle)))
    return problems


def topological_order(graph: Graph) -> list[str]:
    """Stages in an order where every stage follows its inputs; ties keep the config's order."""
    sorter = TopologicalSorter({name: list(inputs) for name, inputs in graph.items()})
    position = {name: i for i, name in enumerate(graph)}
    order: list[str] = []
    sorter.prepare()
    while sorter.is_active():
        ready = sorted(sorter.get_ready(), key=position.__getitem__)
        order.extend(ready)
        sorter.done(*ready)
    return order


def ancestors(graph: Graph, stages: Iterable[str]) -> set[str]:
    return _reachable(graph, stages)


def descendants(graph: Graph, stages: Iterable[str]) -> set[str]:
    children: dict[str, list[str]] = {name: [] for name in graph}
    for name, inputs in graph.items():
        for parent in inputs:
            children[parent].append(name)
    return _reachable(children, stages)


def _reachable(edges: Graph, start: Iterable[str]) -> set[str]:
    """Every node reachable from ``start`` along ``edges`` (not ``start`` itself, unless on a path)."""
    seen: set[str] = set()
    todo = list(start)
    while todo:
        for nxt in edges[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def select(
    graph: Graph,
    *,
    only: Sequence[str] = (),
    from_: Sequence[str] = (),
    until: Sequence[str] = (),
) -> set[str]:
    """Stages chosen by ``--only`` / ``--from`` / ``--until`` (all stages when none is given).

    ``--only A,B`` is exactly A and B; ``--from A`` is A and everything downstream of it;
    ``--until A`` is A and everything upstream of it. Given together, they intersect.
    """
    unknown = [n for n in (*only, *from_, *until) if n not in graph]
    if unknown:
        raise KeyError(", ".join(f"'{n}'" for n in unknown))
    chosen = set(graph)
    if only:
        chosen &= set(only)
    if from_:
        chosen &= set(from_) | descendants(graph, from_)
    if until:
        chosen &= set(until) | ancestors(graph, until)
    return chosen


def plan(graph: Graph, selected: set[str]) -> list[tuple[str, bool]]:
    """Execution order of the selected stages plus the upstream stages they need.

    Each entry is (stage, selected?): needed-but-unselected stages run to produce inputs,
    because outputs are not persisted between runs yet.
    """
    needed = selected | ancestors(graph, selected)
    return [(name, name in selected) for name in topological_order(graph) if name in needed]


def to_text(graph: Graph, kinds: Mapping[str, str]) -> str:
    lines = []
    for name in topological_order(graph):
        inputs = graph[name]
        arrow = f" <- {', '.join(inputs)}" if inputs else ""
        lines.append(f"{name} [{kinds[name]}]{arrow}")
    return "\n".join(lines)


def to_mermaid(graph: Graph, kinds: Mapping[str, str]) -> str:
    lines = ["flowchart LR"]
    for name in topological_order(graph):
        lines.append(f'    {_mermaid_id(name)}["{name}<br/><i>{kinds[name]}</i>"]')
    for name, inputs in graph.items():
        for parent in inputs:
            lines.append(f"    {_mermaid_id(parent)} --> {_mermaid_id(name)}")
    return "\n".join(lines)


def _mermaid_id(name: str) -> str:
    return "s_" + name.replace("-", "_")
