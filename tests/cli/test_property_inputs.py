"""Property: whatever YAML or CSV a nightly job is handed, ``validate``, ``run`` and ``predict``
end in a documented exit code, never 1 (an internal error is a bug), with a one-paragraph
message and no traceback; a failed command leaves no run ``running`` and no scores behind.

Generated inputs go through the real command line in this process (click's CliRunner: the
same parsing, error mapping and exit codes as the console script, without a Python start per
example). The number of examples is bounded and the generation derandomized, so CI runs the
same inputs every time in bounded time.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result
from hypothesis import HealthCheck, Phase, event, given, settings
from hypothesis import strategies as st

from tests.support.bad_inputs import (CONFIG, DOCUMENTED_EXIT_CODES, ID, INCOMING, TARGET, TINY_CONFIG,
                                       blank_line_inside, latest_target, run_folders, write_tiny_project)

pytestmark = pytest.mark.slow

# derandomized: the same examples on every CI run; no explain phase (it reruns a failure many
# times); a failure is still shrunk to a small input for the report.
BOUNDED = settings(max_examples=50, deadline=None, derandomize=True, database=None, print_blob=True,
                   phases=(Phase.explicit, Phase.generate, Phase.shrink), suppress_health_check=list(HealthCheck))
BOUNDED_RUNS = settings(BOUNDED, max_examples=40)


# ------------------------------------------------------------------ the command, in process
@contextmanager
def isolated_process_state() -> Iterator[None]:
    """``run`` installs a SIGTERM handler and replaces the logging handlers (pointing them at
    CliRunner's stream); put both back, and sys.path, which configs' folders join."""
    from pipeline.cli import options as common

    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    sigterm = signal.getsignal(signal.SIGTERM)
    path = sys.path[:]
    json_errors = dict(common.JSON_ERRORS)
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        signal.signal(signal.SIGTERM, sigterm)
        sys.path[:] = path
        common.JSON_ERRORS.update(json_errors)


def invoke(*args: str) -> Result:
    from pipeline.cli.app import main

    with isolated_process_state():
        return CliRunner().invoke(main, list(args), catch_exceptions=True)


def assert_documented_outcome(result: Result, what: str) -> None:
    """Exit code documented and not 1; on failure one paragraph on stderr, no traceback."""
    stderr = result.stderr
    event(f"exit {result.exit_code}")          # --hypothesis-show-statistics: how far inputs got
    detail = f"{what}\nexit {result.exit_code}\nstderr:\n{stderr[-2000:]}\nexception: {result.exception!r}"
    assert result.exit_code != 1, detail
    assert result.exit_code in DOCUMENTED_EXIT_CODES, detail
    assert "Traceback (most recent call last)" not in stderr, detail
    if result.exit_code != 0:
        assert stderr.strip(), detail
        assert not blank_line_inside(stderr), detail


# ------------------------------------------------------------------ YAML documents
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
    st.sampled_from(["", "..", ".", "/", "a/b", "~", "yes", "no", "null", "cpu", "gpu", "load", "split", "train",
                     "raw", "logit", "data/tiny.csv", "-1", "1e400", ".nan", "-.inf"]))
KEYS = st.one_of(st.text(max_size=8), st.sampled_from(
    ["name", "device", "seed", "runs_dir", "stages", "plugins", "cluster", "kind", "inputs", "path", "params",
     "ops", "columns", "target", "model", "test", "valid", "threshold", "<<", "..", "description"]))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                        st.dictionaries(KEYS, inner, max_size=4)), max_leaves=12)

# YAML text that plain data never dumps to: tags, anchors, aliases, merges, complex keys,
# directives, flow-style breakage, tabs.
FRAGMENTS = [
    "!!python/object/apply:os.system [\"true\"]", "!!python/name:os.system", "!!python/tuple [1, 2]",
    "!!int forty-two", "!!float abc", "!!bool maybe", "!!binary aGk=", "!!timestamp 2026-13-45", "!!set {a, b}",
    "!!omap [a: 1]", "!!str", "!!map", "!!seq", "!local value", "!<tag:example.com,2000:x> 1",
    "&a [1, 2]", "*a", "*undefined", "&b {x: 1}", "<<: *b", "<<: *a", "<<: 5", "? [a, b]\n: 1", "? {k: v}\n: 2",
    "---", "...", "%YAML 1.1\n---", "%TAG ! tag:example.com,2000:\n---", "{", "[", "]", "}", "'", "\"", "\t",
    "key: value: other", "- - -", "a:\n  - b\n c: d", "[" * 50 + "]" * 50, "\x00", "\ufeff", "\u2028",
]
LINES = st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=20),
                  st.builds(lambda k, f: f"{k}: {f}", KEYS, st.sampled_from(FRAGMENTS)))


def _dump(value: Any) -> str:
    return yaml.safe_dump(value, allow_unicode=True, sort_keys=False)


def _leaf_paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    if isinstance(node, dict):
        return [prefix] + [p for k, v in node.items() for p in _leaf_paths(v, (*prefix, k))]
    if isinstance(node, list):
        return [prefix] + [p for i, v in enumerate(node) for p in _leaf_paths(v, (*prefix, i))]
    return [prefix]


@st.composite
def mutated_skeleton(draw) -> str:
    """The tiny pipeline with one value replaced, one key dropped, or one key added."""
    config = yaml.safe_load(TINY_CONFIG)
    paths = [p for p in _leaf_paths(config) if p]
    path = draw(st.sampled_from(paths))
    parent = config
    for part in path[:-1]:
        parent = parent[part]
    action = draw(st.sampled_from(["replace", "drop", "add"]))
    if action == "replace":
        parent[path[-1]] = draw(VALUES)
    elif action == "drop":
        del parent[path[-1]]
    elif isinstance(parent, dict):
        parent[draw(KEYS)] = draw(VALUES)
    else:
        parent.append(draw(VALUES))
    return _dump(config)


@st.composite
def spliced_text(draw) -> str:
    """The tiny pipeline's text with YAML fragments spliced in at random lines."""
    lines = TINY_CONFIG.splitlines()
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(lines)))
        indent = draw(st.sampled_from(["", "  ", "    "]))
        lines.insert(at, indent + draw(LINES))
    return "\n".join(lines) + "\n"


DOCUMENTS = st.one_of(
    st.builds(_dump, VALUES),
    mutated_skeleton(),
    spliced_text(),
    st.lists(LINES, max_size=8).map("\n".join),
)
OVERRIDES = st.lists(st.one_of(
    st.builds(lambda k, v: f"{k}={v}", st.sampled_from(["seed", "name", "device", "description", "runs_dir",
                                                        "stages.split.test", "stages.logit.params",
                                                        "stages.features.ops.0", "stages.raw", "x.y.0"]),
              st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=10), VALUES.map(lambda v: _dump(v).strip()))),
    st.text(max_size=10)), max_size=2)


@BOUNDED
@given(document=DOCUMENTS, overrides=OVERRIDES)
def test_validate_never_ends_in_an_internal_error(document: str, overrides: list[str]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "case.yaml"
        path.write_text(document, encoding="utf-8")
        args = ["validate", str(path)] + [a for o in overrides for a in ("--set", o)]
        result = invoke(*args)
    assert_documented_outcome(result, f"document:\n{document[:2000]}\noverrides: {overrides}")
    assert result.exit_code in (0, 2)


# ------------------------------------------------------------------ CSV files
ODD_CELLS = ["", "nan", "NaN", "inf", "-inf", "Infinity", "1e200", "-1e308", "1e400", "0", "-0", "3.5", "Yes", "No",
             "yes", "basic", "pro", "plus", "é", "列", "\"quoted, comma\"", "NULL", "  ", "\"", "1,5", "TRUE",
             "0x10", "1_000", "\u2028", "c0001"]
CELLS = st.one_of(st.sampled_from(ODD_CELLS), st.floats(allow_nan=True, allow_infinity=True).map(repr),
                  st.integers(-(2**70), 2**70).map(str),
                  st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n"), max_size=6))
COLUMNS = ["cust_id", "plan", "amount", "visits", TARGET]
HEADERS = st.lists(st.sampled_from([*COLUMNS, "", "amount", "extra", "naïve 列", "Unnamed: 0", " "]),
                   min_size=1, max_size=7)


def _csv(header: list[str], rows: list[list[str]]) -> str:
    return "\n".join(",".join(line) for line in [header, *rows]) + "\n"


@st.composite
def random_csv(draw) -> bytes:
    """Any header (repeated or blank names), ragged rows, any cells; sometimes not UTF-8."""
    header = draw(HEADERS)
    rows = draw(st.lists(st.lists(CELLS, min_size=max(0, len(header) - 1), max_size=len(header) + 1), max_size=12))
    text = _csv(header, rows)
    return text.encode("latin-1", errors="replace") if draw(st.booleans()) and draw(st.booleans()) else text.encode()


NUMERIC_ODDITIES = ["", "nan", "inf", "-inf", "Infinity", "1e200", "-1e308", "1e400", "-0", "1e-320"]
TEXT_ODDITIES = ["", "enterprise", "é", "列", "NULL", " ", "0"]


@st.composite
def mostly_valid_csv(draw, *, target: bool = True) -> bytes:
    """The tiny data's columns and sensible values with a few odd cells (inf, 1e200, blanks,
    unseen categories, a one-class or blank label): inputs that get past the header and type
    checks and reach split, the feature ops, the model and scoring."""
    columns = COLUMNS if target else COLUMNS[:-1]
    odd_percent = draw(st.sampled_from([0, 3, 10, 30]))

    def cell(normal, odd):
        return draw(st.sampled_from(odd)) if draw(st.integers(0, 99)) < odd_percent else draw(normal)

    labels = draw(st.sampled_from([["Yes", "No"], ["Yes", "No"], ["Yes", "No"], ["Yes"], ["Yes", "No", ""],
                                   ["Yes", "No", "Maybe"]]))
    rows = []
    for i in range(draw(st.sampled_from([0, 1, 3, 16, 24, 40]))):
        rows.append([f"c{i:04d}",
                     cell(st.sampled_from(["basic", "plus", "pro"]), TEXT_ODDITIES),
                     cell(st.floats(0, 100).map(lambda x: f"{x:.2f}"), NUMERIC_ODDITIES),
                     cell(st.integers(0, 12).map(str), NUMERIC_ODDITIES),
                     draw(st.sampled_from(labels))][: len(columns)])
    return _csv(list(columns), rows).encode()


def _refuse(constant: str) -> None:
    raise AssertionError(f"{constant} written into a JSON file")


def _project(folder: Path) -> Path:
    return write_tiny_project(folder)


@BOUNDED_RUNS
@given(data=st.one_of(random_csv(), mostly_valid_csv(), mostly_valid_csv()))
def test_run_never_ends_in_an_internal_error(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as folder:
        project = _project(Path(folder))
        (project / "data" / "case.csv").write_bytes(data)
        config = project / CONFIG
        config.write_text(TINY_CONFIG.replace("path: data/tiny.csv", f"path: {project / 'data' / 'case.csv'}"))
        result = invoke("run", str(config), "--runs-dir", str(project / "runs"), "--no-cache", "--wait", "0")
        assert_documented_outcome(result, f"data:\n{data[:2000]!r}")
        for rel, run_dir in run_folders(project).items():
            status = json.loads((run_dir / "manifest.json").read_text()).get("status")
            assert status != "running", rel
            assert (status == "succeeded") == (result.exit_code == 0), (rel, status, result.exit_code)
            for written in run_dir.rglob("*.json"):         # JSON has no NaN or Infinity
                json.loads(written.read_text(), parse_constant=_refuse)


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """One succeeded run of the tiny pipeline, for every predict example."""
    project = _project(tmp_path_factory.mktemp("property") / "trained")
    config = project / CONFIG
    config.write_text(TINY_CONFIG.replace("path: data/tiny.csv", f"path: {project / 'data' / 'tiny.csv'}"))
    result = invoke("run", str(config), "--runs-dir", str(project / "runs"))
    assert result.exit_code == 0, result.stderr
    assert latest_target(project)
    return project


@BOUNDED_RUNS
@given(data=st.one_of(random_csv(), mostly_valid_csv(target=False), mostly_valid_csv(target=False)))
def test_predict_never_ends_in_an_internal_error(trained: Path, data: bytes) -> None:
    with tempfile.TemporaryDirectory() as folder:
        source = Path(folder) / "new.csv"
        source.write_bytes(data)
        output = Path(folder) / "out" / "scores.parquet"
        result = invoke("predict", "--run", "latest", "--runs-dir", str(trained / "runs"), "--input", str(source),
                        "--output", str(output))
        assert_documented_outcome(result, f"data:\n{data[:2000]!r}")
        assert result.exit_code in (0, 2, 3), result.stderr
        if result.exit_code != 0:
            left = list(output.parent.rglob("*")) if output.parent.exists() else []
            assert not left, left
        else:
            import pandas as pd

            scores = pd.read_parquet(output)
            assert scores["score"].between(0.0, 1.0).all(), scores


def test_the_tiny_project_scores_its_own_new_rows(trained: Path, tmp_path: Path) -> None:
    """The generated inputs fail for their own reasons: the shared run scores clean rows."""
    output = tmp_path / "scores.parquet"
    result = invoke("predict", "--run", "latest", "--runs-dir", str(trained / "runs"), "--input",
                    str(trained / INCOMING), "--output", str(output))
    assert result.exit_code == 0, result.stderr
    import pandas as pd

    assert len(pd.read_parquet(output)) == 30 and ID in pd.read_parquet(output).columns
