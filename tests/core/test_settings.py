"""The PIPELINE_* environment: read in one module (pipeline.core.settings), recorded in the run's
manifest with the secret redacted, shown in the report, and documented variable by variable."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from pipeline.core.settings import REDACTED, Settings, current_settings, describe, environment
from tests.conftest import ROOT

VARIABLE = re.compile(r"PIPELINE_[A-Z0-9_]+")
SETTINGS_MODULE = ROOT / "pipeline" / "core" / "settings.py"
# Knobs of the test suite, not of the package: documented beside the tests they steer.
SUITE_VARIABLES = {"PIPELINE_SLOW_BUDGET", "PIPELINE_REPORT_FIRST_SCREEN"}


def environment_reads(source: str) -> list[str]:
    """Each place ``source`` names a PIPELINE_* variable as a string of its own (how a module
    reads or writes one: ``os.environ["PIPELINE_X"]``, ``getenv("PIPELINE_X")``, a constant)."""
    found = [(node.lineno, node.value) for node in ast.walk(ast.parse(source))
             if isinstance(node, ast.Constant) and isinstance(node.value, str) and VARIABLE.fullmatch(node.value)]
    return [f"line {line}: {value}" for line, value in sorted(found)]


def test_pipeline_variables_are_named_in_the_settings_module_only() -> None:
    found = {}
    for path in sorted((ROOT / "pipeline").rglob("*.py")):
        if path != SETTINGS_MODULE:
            reads = environment_reads(path.read_text(encoding="utf-8"))
            if reads:
                found[str(path.relative_to(ROOT))] = reads
    assert not found, f"read PIPELINE_* through pipeline.core.settings, not here: {found}"


def test_the_scan_finds_a_read_outside_the_module() -> None:
    """The check above can fail: a direct read, a write and a constant are each found."""
    source = ('import os\nos.environ.get("PIPELINE_THREADS")\nos.environ["PIPELINE_REPORT"] = "off"\n'
              'NAME = "PIPELINE_CPU_ENGINE"\nHELP = "see $PIPELINE_THREADS"\n')
    assert environment_reads(source) == ["line 2: PIPELINE_THREADS", "line 3: PIPELINE_REPORT",
                                         "line 4: PIPELINE_CPU_ENGINE"]


def test_settings_read_every_variable_and_redact_the_secret() -> None:
    environ = {variable: f"value-{i}" for i, (variable, _, _) in enumerate(describe())}
    environ["UNRELATED"] = "x"
    settings = Settings.from_environ(environ)
    record = settings.record()
    assert set(record) == {variable for variable, _, _ in describe()}
    assert record["PIPELINE_SIGNING_KEY"] == REDACTED and environ["PIPELINE_SIGNING_KEY"] not in record.values()
    assert record["PIPELINE_THREADS"] == environ["PIPELINE_THREADS"]
    assert settings.environ() == {k: v for k, v in environ.items() if k != "UNRELATED"}     # secrets kept there
    assert Settings.from_environ({}).record() == {}
    with pytest.raises(KeyError, match="no setting 'thread'"):
        Settings.variable("thread")


def test_environment_sets_and_restores(monkeypatch) -> None:
    monkeypatch.setenv("PIPELINE_CPU_ENGINE", "polars")
    monkeypatch.delenv("PIPELINE_THREADS", raising=False)
    with environment(cpu_engine="pandas", threads="1") as inside:
        assert inside.cpu_engine == "pandas" and current_settings().threads == "1"
    assert current_settings().cpu_engine == "polars" and current_settings().threads is None


def test_every_setting_is_documented_and_the_docs_name_no_other() -> None:
    guide = (ROOT / "docs" / "guides" / "configuration.md").read_text(encoding="utf-8")
    section = guide.split("## The environment: `PIPELINE_*` settings", 1)[1]
    table = set(re.findall(r"^\| `(PIPELINE_[A-Z0-9_]+)` \|", section, flags=re.MULTILINE))
    assert table == {variable for variable, _, _ in describe()}
    named: set[str] = set()
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        named |= set(VARIABLE.findall(path.read_text(encoding="utf-8")))
    assert named - table - SUITE_VARIABLES == set(), "the docs name variables that are not settings"


def test_a_run_records_its_settings_and_the_report_shows_them(tmp_path, monkeypatch) -> None:
    from pipeline import load_config, run_pipeline
    from tests.conftest import small_config

    key = "k" * 32
    for variable, _, _ in describe():          # only what this test sets
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("PIPELINE_REPORT", "on")
    monkeypatch.setenv("PIPELINE_SAMPLING", "off")
    monkeypatch.setenv("PIPELINE_COST_CURRENCY", "EUR")
    monkeypatch.setenv("PIPELINE_SIGNING_KEY", key)
    data = tmp_path / "rows.csv"
    data.write_text("id,a,b,churn\n" + "".join(f"{i},{i % 7},{i % 5},{'yes' if i % 2 else 'no'}\n"
                                               for i in range(80)), encoding="utf-8")
    config = load_config(text=small_config("recorded", data))
    result = run_pipeline(config, runs_dir=tmp_path / "runs", device="cpu")
    manifest = json.loads((Path(result.run_dir) / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["settings"] == {"PIPELINE_REPORT": "on", "PIPELINE_SAMPLING": "off",
                                    "PIPELINE_COST_CURRENCY": "EUR", "PIPELINE_SIGNING_KEY": REDACTED}
    report = (Path(result.run_dir) / "report.html").read_text(encoding="utf-8")
    assert "PIPELINE_COST_CURRENCY" in report and key not in report
    assert key not in json.dumps(manifest)


# A value each setting refuses. The settings missing here take any text: FREE_TEXT says why.
BAD_VALUES = {
    "cpu_engine": "duckdb", "threads": "abc", "reductions": "sloppy", "huge_pages": "maybe", "report": "maybe",
    "progress_seconds": "soon", "sampling": "sometimes", "cache_max_size": "lots", "cost_gpu_hour": "cheap",
    "cost_cpu_core_hour": "-1", "cost_memory_gb_hour": "free", "signing_key": "short",
    "signing_key_file": "/nonexistent/pipeline-key",
}


@pytest.fixture(scope="module")
def cached_run(tmp_path_factory) -> Path:
    """A small pipeline run once with no setting, so that every stage of a rerun is in the cache."""
    from pipeline import run_pipeline
    from tests.conftest import small_config

    folder = tmp_path_factory.mktemp("settings")
    data = folder / "rows.csv"
    data.write_text("id,a,b,churn\n" + "".join(f"{i},{i % 7},{i % 5},{'yes' if i % 2 else 'no'}\n"
                                               for i in range(80)), encoding="utf-8")
    (folder / "config.yaml").write_text(small_config("checked", data), encoding="utf-8")
    with pytest.MonkeyPatch.context() as patch:
        for variable, _, _ in describe():
            patch.delenv(variable, raising=False)
        run_pipeline(folder / "config.yaml", runs_dir=folder / "runs")
    return folder


@pytest.mark.parametrize("name", sorted(BAD_VALUES))
def test_a_run_refuses_a_bad_setting_as_it_starts(cached_run: Path, monkeypatch, name: str) -> None:
    """Whether or not a stage would read it (here every stage is cached), a setting the run
    cannot use stops it before any stage, exit 2, in one paragraph naming the variable."""
    from pipeline import ConfigError, run_pipeline

    for variable, _, _ in describe():
        monkeypatch.delenv(variable, raising=False)
    variable = Settings.variable(name)
    monkeypatch.setenv(variable, BAD_VALUES[name])
    runs = sorted((cached_run / "runs" / "checked").iterdir())
    with pytest.raises(ConfigError) as caught:
        run_pipeline(cached_run / "config.yaml", runs_dir=cached_run / "runs")
    message = str(caught.value)
    assert caught.value.exit_code == 2 and variable in message and "\n" not in message, message
    assert "(top level)" not in message, message
    assert sorted((cached_run / "runs" / "checked").iterdir()) == runs        # no run folder was started


def test_every_setting_is_checked_as_a_run_starts_or_takes_any_text() -> None:
    """Each setting's owner registers its parser (``register_check``) where the runner's imports
    reach it, so a new setting without one fails here. Run in a fresh interpreter: only what
    importing the runner registers counts."""
    import subprocess
    import sys

    code = ("import pipeline.engine.runner\nfrom pipeline.core.settings import checked_settings\n"
            "print(','.join(sorted(checked_settings())))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    checked = set(done.stdout.strip().split(","))
    from pipeline.core.settings import FREE_TEXT

    every = {f for f in Settings.__dataclass_fields__}
    assert every - checked - set(FREE_TEXT) == set(), "a setting nothing checks as a run starts"
    assert set(BAD_VALUES) == every - set(FREE_TEXT)
