"""The slow-test list (tests/slow_tests.txt) names tests that exist, each with why it is slow."""

from __future__ import annotations

import re

from tests.conftest import ROOT, listed_slow_tests


def test_every_listed_slow_test_exists_and_says_why():
    listed = listed_slow_tests()
    assert listed, "the list is read"
    for node, why in listed.items():
        path, _, name = node.partition("::")
        function = name.split("[", 1)[0]
        source = (ROOT / path).read_text(encoding="utf-8")
        assert re.search(rf"^def {re.escape(function)}\(", source, re.M), f"{node}: no such test"
        assert why, f"{node}: say why it is slow"


class _Item:
    """What the collection hook reads of a test item: its node id and its markers."""

    def __init__(self, nodeid: str) -> None:
        self.nodeid, self.markers = nodeid, []

    def add_marker(self, marker) -> None:
        self.markers.append(marker.name)


def test_listed_tests_are_marked_slow_and_the_costliest_files_are_queued_first():
    from tests.conftest import pytest_collection_modifyitems

    listed = next(node for node, why in listed_slow_tests().items() if "[" not in node and why[0].isdigit())
    file = listed.split("::")[0]
    names = ["tests/a/test_light.py::test_one", "tests/a/test_light.py::test_two",
             f"{file}::test_before_it", listed, f"{file}::test_after_it"]
    items = [_Item(n) for n in names]
    pytest_collection_modifyitems(None, items)
    assert [i.nodeid for i in items] == names[2:] + names[:2]          # the listed file first, order kept
    assert [i.nodeid for i in items if "slow" in i.markers] == [listed]


def test_an_entry_without_seconds_counts_each_case_at_the_threshold():
    from tests.conftest import _listed_seconds

    assert _listed_seconds("57 s: its setup runs the sweep") == 57
    assert _listed_seconds("every case, 12 s for the first: runs logged") == 12
    assert _listed_seconds("every case: builds the four runs") == 9
