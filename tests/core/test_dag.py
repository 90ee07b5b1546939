from __future__ import annotations

import pytest

from pipeline.core import dag

GRAPH = {"raw": [], "split": ["raw"], "features": ["split"], "a": ["features"], "b": ["features"],
         "evaluate": ["a", "b"], "export": ["a"]}


def test_topological_order_follows_inputs_and_config_order():
    order = dag.topological_order(GRAPH)
    assert order == ["raw", "split", "features", "a", "b", "evaluate", "export"]
    for stage, inputs in GRAPH.items():
        assert all(order.index(i) < order.index(stage) for i in inputs)


def test_unknown_input_and_self_loop_reported():
    problems = dag.graph_problems({"a": ["a"], "b": ["c"]})
    messages = [m for _, m in problems]
    assert any("lists itself" in m for m in messages)
    assert any("unknown stage 'c'" in m for m in messages)


def test_cycle_reported_with_its_stages():
    ((stage, message),) = dag.graph_problems({"x": ["z"], "y": ["x"], "z": ["y"]})
    assert "cycle" in message and all(s in message for s in "xyz")


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({}, set(GRAPH)),
        ({"only": ["a"]}, {"a"}),
        ({"from_": ["a"]}, {"a", "evaluate", "export"}),
        ({"until": ["features"]}, {"raw", "split", "features"}),
        ({"from_": ["split"], "until": ["a"]}, {"split", "features", "a"}),
    ],
)
def test_select(kwargs, expected):
    assert dag.select(GRAPH, **kwargs) == expected


def test_select_unknown_stage():
    with pytest.raises(KeyError, match="nope"):
        dag.select(GRAPH, only=["nope"])


def test_plan_adds_needed_upstream_stages_unselected():
    steps = dag.plan(GRAPH, {"evaluate"})
    assert [s for s, _ in steps] == ["raw", "split", "features", "a", "b", "evaluate"]
    assert dict(steps)["evaluate"] is True and dict(steps)["a"] is False


def test_renderings_name_every_edge():
    kinds = {name: "k" for name in GRAPH}
    mermaid = dag.to_mermaid(GRAPH, kinds)
    assert mermaid.startswith("flowchart LR")
    assert mermaid.count("-->") == sum(len(v) for v in GRAPH.values())
    assert "evaluate [k] <- a, b" in dag.to_text(GRAPH, kinds)
