"""A stage's cache key follows which upstream stage feeds which of its inputs: a ``join`` with
its left and right swapped, or a list of inputs in another order, is a different stage and
must not be served the other's entry."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline import run_pipeline

CONFIG = """\
name: roles
device: cpu
stages:
  many: {{kind: load, path: many.csv}}
  few: {{kind: load, path: few.csv}}
  joined:
    kind: join
    inputs: {inputs}
    on: key
    how: left
"""


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "many.csv").write_text("key,a\n" + "".join(f"{i},{i}\n" for i in range(30)))
    (tmp_path / "few.csv").write_text("key,b\n" + "".join(f"{i},{i * 10}\n" for i in range(5)))
    return tmp_path


@pytest.fixture(autouse=True)
def in_folder(folder: Path, monkeypatch):
    monkeypatch.chdir(folder)


def rows_joined(folder: Path, inputs: str, **kw) -> tuple[int, str | None]:
    (folder / "config.yaml").write_text(CONFIG.format(inputs=inputs))
    result = run_pipeline(folder / "config.yaml", runs_dir=folder / "runs", keep_outputs=True, **kw)
    stage = result.manifest.stages["joined"]
    return len(result.outputs["joined"]), stage.cache_key


@pytest.mark.parametrize("first, swapped", [
    ("{left: many, right: few}", "{left: few, right: many}"),      # by role
    ("[many, few]", "[few, many]"),                                # by position
])
def test_swapped_inputs_are_not_served_the_cached_join(folder: Path, first: str, swapped: str):
    rows, key = rows_joined(folder, first)
    fresh, _ = rows_joined(folder, swapped, cache=False)
    cached, swapped_key = rows_joined(folder, swapped)
    assert (rows, fresh) == (30, 5)
    assert swapped_key != key and cached == fresh


def test_the_same_inputs_by_role_or_by_position_share_the_entry(folder: Path):
    _, by_role = rows_joined(folder, "{left: many, right: few}")
    _, by_position = rows_joined(folder, "[many, few]")
    assert by_role == by_position
