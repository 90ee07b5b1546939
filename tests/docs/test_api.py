"""The Python API page (docs/reference/api.md): every name it renders has a docstring with an
example, every example runs (from the repository's root, as the page says) and gives what it
shows, and every name ``pipeline`` and ``pipeline.testing`` export is on the page."""

from __future__ import annotations

import contextlib
import doctest
import importlib
import io
import os
import re
from pathlib import Path

import pytest

from tests.conftest import ROOT

PAGE = ROOT / "docs" / "reference" / "api.md"
ENTRY = re.compile(r"^::: ([\w.]+)\s*$", re.MULTILINE)


SETUP = re.compile(r"```python\n(.*?)```", re.DOTALL)


def page_entries() -> list[str]:
    return ENTRY.findall(PAGE.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def setup_names() -> dict[str, object]:
    """What the page's setup block makes (the churn table, its split and features, a saved
    model), run once from the repository's root: the examples start from it, as the page says."""
    (block,) = SETUP.findall(PAGE.read_text(encoding="utf-8"))
    names: dict[str, object] = {}
    here = os.getcwd()
    os.chdir(ROOT)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(block, f"{PAGE}:setup", "exec"), names)
    finally:
        os.chdir(here)
    return names


def resolve(dotted: str) -> object:
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def test_the_page_renders_every_exported_name() -> None:
    import pipeline
    import pipeline.testing

    shown = {dotted.rpartition(".")[2] for dotted in page_entries()}
    exported = {name for name in pipeline.__all__ if name != "__version__"} | set(pipeline.testing.__all__)
    assert exported <= shown, f"not on {PAGE.name}: {sorted(exported - shown)}"
    for name in exported:               # the entry is the object the package exports
        module = pipeline.testing if name in pipeline.testing.__all__ else pipeline
        entry = next(d for d in page_entries() if d.rpartition(".")[2] == name)
        assert resolve(entry) is getattr(module, name), entry


@pytest.mark.parametrize("dotted", page_entries())
def test_every_entry_has_an_example_that_runs(dotted: str, setup_names, monkeypatch) -> None:
    monkeypatch.chdir(ROOT)
    obj = resolve(dotted)
    docstring = obj.__doc__ or ""
    assert docstring.strip(), f"{dotted} has no docstring"
    assert "Examples:" in docstring and ">>>" in docstring, f"{dotted}'s docstring has no example"
    finder = doctest.DocTestFinder(recurse=False)
    tests = finder.find(obj, dotted, globs=dict(setup_names))
    assert tests and tests[0].examples, dotted
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in tests:
        runner.run(test, out=lambda text: pytest.fail(text, pytrace=False))
    assert runner.summarize(verbose=False).failed == 0


def test_an_example_that_gives_something_else_fails(tmp_path) -> None:
    """The check above can fail: an example whose output differs is reported."""

    def documented() -> None:
        """Examples:
            >>> 1 + 1
            3
        """

    failures: list[str] = []
    runner = doctest.DocTestRunner()
    for test in doctest.DocTestFinder().find(documented, "documented", globs={}):
        runner.run(test, out=failures.append)
    assert runner.summarize(verbose=False).failed == 1 and "Expected:\n    3" in "".join(failures)
