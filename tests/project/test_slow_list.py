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
