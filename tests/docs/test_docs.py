"""The docs site: generated references match the code, every config field is described, and
``mkdocs build --strict`` passes (every page in the nav, every link and anchor resolves).
Code blocks in the pages run in tests/docs/test_readme.py."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
import docs_reference  # noqa: E402


def test_every_config_field_has_a_description():
    assert docs_reference.missing_descriptions() == []


def test_the_generated_reference_pages_are_up_to_date():
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "docs_reference.py"), "--check"],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr


def test_the_config_reference_covers_every_stage_kind_op_model_and_field():
    from pipeline.features import OPS
    from pipeline.models.registry import MODELS
    from pipeline.stages import STAGE_KINDS

    page = docs_reference.CONFIG_PAGE.read_text(encoding="utf-8")
    for kind_name, kind in STAGE_KINDS.items():
        section = page.split(f"### `kind: {kind_name}`", 1)[1].split("\n### ", 1)[0]
        for name, field in kind.spec.model_fields.items():
            if name != "kind":
                assert f"| `{field.alias or name}` |" in section, f"{kind_name}.{name} is not in its section"
    assert all(f"### `{op}`" in page for op in OPS)
    assert all(f"| `{model}` |" in page for model in MODELS)


def test_a_field_without_a_description_is_reported_with_its_path():
    from pydantic import BaseModel, Field

    class Inner(BaseModel):
        knob: int = 3

    class Outer(BaseModel):
        documented: int = Field(1, description="Says what it does.")
        inner: Inner | None = Field(None, description="Holds the knob.")

    tables = docs_reference.ModelTables()
    lines: list[str] = []
    tables.table(Outer, "stages.<name>(demo)", lines, level=4)
    assert tables.missing == ["stages.<name>(demo).inner.knob"]
    assert any("`stages.<name>(demo).inner` (Inner)" in line for line in lines)


def test_the_cli_reference_lists_every_command():
    from pipeline.cli.app import main as cli

    page = docs_reference.CLI_PAGE.read_text(encoding="utf-8")
    assert all(f"## `pipeline {name}`" in page for name in cli.commands)


def nav_pages(nav: list) -> list[str]:
    out = []
    for item in nav:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        out += nav_pages(value) if isinstance(value, list) else [value]
    return out


def test_every_page_is_in_the_nav_and_every_nav_entry_exists():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    listed = set(nav_pages(config["nav"]))
    pages = {str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md")}
    assert listed == pages


@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None, reason="mkdocs is not installed (the dev extra has it)")
def test_mkdocs_build_strict_passes(tmp_path):
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          capture_output=True, text=True, cwd=ROOT, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stderr[-4000:]
    assert (tmp_path / "site" / "reference" / "config" / "index.html").is_file()
