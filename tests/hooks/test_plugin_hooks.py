"""Run-level outputs are registered hooks: a hook from a module outside the package
(tests/plugin_example/stamp_plugin.py) owns a config key of its own and writes into every run
folder, through the real CLI, with no edit to the package; it loads from a config's
``plugins:`` and from the ``pipeline.hooks`` entry-point group of an installed distribution.
The hook order and the registry's refusals are checked in this process."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.cli import run_cli as _pipeline
from pipeline.core.errors import ConfigError, ExitCode, UsageError
from pipeline.hooks.protocol import HookList, RunHook, RunPlan

PLUGIN = Path(__file__).resolve().parents[1] / "plugin_example" / "stamp_plugin.py"

STEPS = '''\
def count(ctx, inputs, fail=False):
    if fail:
        raise RuntimeError("asked to fail")
    (frame,) = inputs.values()
    return len(frame)
'''

CONFIG = """\
name: stamped
device: cpu
plugins: [stamp_plugin]
stamp:
  note: nightly
stages:
  rows: {kind: load, path: rows.csv}
  count: {kind: python, inputs: [rows], function: "steps:count"}
"""


def cli(folder: Path, *args: str, pythonpath: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {"PYTHONPATH": os.pathsep.join(p for p in (str(pythonpath), os.environ.get("PYTHONPATH")) if p)} \
        if pythonpath is not None else {}
    return _pipeline(*args, cwd=folder, env=env, unset=["PIPELINE_PLUGINS"])


def run_folders(folder: Path, pipeline: str = "stamped") -> list[Path]:
    return sorted(p for p in (folder / "runs" / pipeline).iterdir() if p.name[0].isdigit())


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("hook-plugin")
    shutil.copy(PLUGIN, folder / PLUGIN.name)
    (folder / "steps.py").write_text(STEPS)
    (folder / "rows.csv").write_text("a,b\n1,2\n3,4\n5,6\n")
    (folder / "config.yaml").write_text(CONFIG)
    return folder


def test_a_plugin_hook_writes_into_every_run_folder(project: Path):
    done = cli(project, "run", "config.yaml", "--no-cache")
    assert done.returncode == 0, done.stderr
    stamp = json.loads((project / "runs" / "stamped" / "latest" / "stamp.json").read_text())
    assert stamp["status"] == "succeeded" and stamp["note"] == "nightly" and stamp["stages"] == ["count", "rows"]
    assert "stamp:" in (project / "runs" / "stamped" / "latest" / "config.yaml").read_text()   # the resolved config

    failed = cli(project, "run", "config.yaml", "--set", "stages.count.params.fail=true")
    assert failed.returncode == ExitCode.STAGE, failed.stderr
    stamp = json.loads((run_folders(project)[-1] / "stamp.json").read_text())
    assert stamp["status"] == "failed"                  # a failed run's folder gets one too


def test_the_hook_is_off_when_its_section_says_so(project: Path):
    before = set(run_folders(project))
    done = cli(project, "run", "config.yaml", "--set", "stamp.enabled=false", "--set", "stamp.file=other.json")
    assert done.returncode == 0, done.stderr
    (new,) = set(run_folders(project)) - before
    assert not (new / "stamp.json").exists() and not (new / "other.json").exists()


def test_the_plugin_key_validates_with_its_path_and_line(project: Path):
    bad = CONFIG.replace("  note: nightly\n", "  note: nightly\n  enabled: sometimes\n  fiel: x.json\n")
    (project / "bad.yaml").write_text(bad)
    done = cli(project, "validate", "bad.yaml")
    assert done.returncode == ExitCode.CONFIG, done.stderr
    assert "stamp.enabled (line 6): Input should be a valid boolean" in done.stderr
    assert "stamp.fiel (line 7): unknown key 'fiel'; did you mean 'file'?" in done.stderr

    (project / "unowned.yaml").write_text(CONFIG.replace("plugins: [stamp_plugin]\n", ""))
    done = cli(project, "validate", "unowned.yaml")            # without the plugin nobody owns the key
    assert done.returncode == ExitCode.CONFIG and "stamp (line 3): unknown key 'stamp'" in done.stderr


def test_the_schema_lists_the_plugin_key(project: Path):
    done = cli(project, "schema", "--plugin", "stamp_plugin")
    assert done.returncode == 0, done.stderr
    schema = json.loads(done.stdout)
    assert schema["properties"]["stamp"]["$ref"] == "#/$defs/StampConfig"
    stamp = schema["$defs"]["StampConfig"]
    assert stamp["description"] == "A stamp file in every run folder, saying how the run ended."
    assert list(stamp["properties"]) == ["enabled", "file", "note"] and stamp["additionalProperties"] is False
    assert {"report", "cost", "tracking", "budget"} <= set(schema["properties"])
    without = json.loads(cli(project, "schema").stdout)
    assert "stamp" not in without["properties"]


def installed(site: Path, group: str, value: str = "stamp_plugin") -> Path:
    """A distribution as pip leaves one in site-packages: the module and a dist-info folder
    whose entry_points.txt declares it in ``group``."""
    site.mkdir(parents=True, exist_ok=True)
    shutil.copy(PLUGIN, site / PLUGIN.name)
    info = site / "stamp_plugin-1.0.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: stamp-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[{group}]\nstamp = {value}\n")
    return site


@pytest.mark.parametrize("group", ["pipeline.hooks", "pipeline.plugins"])
def test_an_installed_package_exposes_hooks_through_an_entry_point_group(project: Path, tmp_path: Path, group: str):
    site = installed(tmp_path / "site", group)
    folder = tmp_path / "work"
    folder.mkdir()
    shutil.copy(project / "steps.py", folder)
    shutil.copy(project / "rows.csv", folder)
    (folder / "config.yaml").write_text(CONFIG.replace("plugins: [stamp_plugin]\n", ""))   # named nowhere
    done = cli(folder, "run", "config.yaml", pythonpath=site)
    assert done.returncode == 0, done.stderr
    assert json.loads((folder / "runs" / "stamped" / "latest" / "stamp.json").read_text())["note"] == "nightly"
    schema = cli(folder, "schema", pythonpath=site)
    assert schema.returncode == 0 and "stamp" in json.loads(schema.stdout)["properties"]


def test_an_entry_point_that_cannot_load_is_a_config_error_naming_its_group(tmp_path: Path):
    site = installed(tmp_path / "site", "pipeline.hooks", value="no_such_hook_module")
    done = cli(tmp_path, "schema", pythonpath=site)
    assert done.returncode == ExitCode.CONFIG
    assert "entry point stamp (pipeline.hooks)" in done.stderr and "no_such_hook_module" in done.stderr


def test_the_entry_point_groups_are_public_names_not_module_paths():
    from pipeline.core import plugins

    assert plugins.ENTRY_POINT_GROUP == "pipeline.plugins"      # what installed plugins declare: never renamed
    assert plugins.HOOK_ENTRY_POINT_GROUP == "pipeline.hooks"


# ------------------------------------------------------------------ in this process: order and refusals
class Caller(RunHook):
    pass


def test_registered_hooks_sit_around_the_callers_in_their_order(tmp_path, monkeypatch):
    from pipeline.config import load_config
    from pipeline.engine.runner import Runner
    from pipeline.report import ReportHook

    monkeypatch.setenv("PIPELINE_REPORT", "on")
    config = load_config(text="""\
name: ordered
budget: {max_wall: 1h}
tracking: {mlflow: {uri: "file:///nowhere"}}
stages:
  a: {kind: python, function: "steps:count"}
""")
    runner = Runner(config, runs_dir=tmp_path, hooks=[Caller()])
    names = [type(hook).__name__ for hook in runner.hooks.hooks]
    assert names == ["SigningHook", "BudgetHook", "CostHook", "Caller", "ReportHook", "MlflowHook"]
    mine = ReportHook()
    runner = Runner(config, runs_dir=tmp_path, hooks=[mine])                # the caller's report is the one
    assert [hook for hook in runner.hooks.hooks if isinstance(hook, ReportHook)] == [mine]
    monkeypatch.setenv("PIPELINE_REPORT", "off")
    plain = Runner(load_config(text="name: plain\nstages:\n  a: {kind: python, function: 'steps:count'}\n"),
                   runs_dir=tmp_path, hooks=[])
    assert [type(hook).__name__ for hook in plain.hooks.hooks] == ["SigningHook", "CostHook"]


@pytest.fixture
def registry():
    """The hook registry, restored after the test."""
    from pipeline.hooks import hook_registry as registry

    saved = dict(registry.HOOKS)
    yield registry
    registry.HOOKS.clear()
    registry.HOOKS.update(saved)


def test_a_config_key_belongs_to_one_hook_and_never_to_the_config_itself(registry):
    from pydantic import BaseModel

    class Section(BaseModel):
        """A section."""

    def factory(section, context):
        return None

    with pytest.raises(ValueError, match="owned by hook 'report'"):
        registry.register_hook("mine", factory, config_key="report", section=Section)
    with pytest.raises(ValueError, match="the pipeline config's own"):
        registry.register_hook("mine", factory, config_key="stages", section=Section)
    with pytest.raises(TypeError, match="come together"):
        registry.register_hook("mine", factory, config_key="mine")
    with pytest.raises(ValueError, match="not a plain name"):
        registry.register_hook("mine", factory, config_key="my-key", section=Section)
    entry = registry.register_hook("mine", factory, config_key="mine", section=Section, default=False)
    assert entry.description == "A section." and registry.HOOKS["mine"] is entry


def test_a_section_registered_in_process_is_validated_with_its_line(registry):
    from pydantic import BaseModel

    from pipeline.config import load_config
    from pipeline.config.schema import PipelineConfig, config_model
    from pipeline.core.errors import ConfigError

    class Retention(BaseModel):
        """How long run folders are kept."""

        days: int = 30

    registry.register_hook("retention", lambda section, context: None, config_key="retention", section=Retention)
    text = "name: kept\nretention:\n  days: many\nstages:\n  a: {kind: python, function: 'steps:count'}\n"
    with pytest.raises(ConfigError) as caught:
        load_config(text=text)
    assert "retention.days (line 3)" in str(caught.value)
    # The model says nothing of extra keys: a misspelt one is refused, as any config key is
    # (it was dropped, and the default used).
    with pytest.raises(ConfigError, match=r"retention\.dayz \(line 3\): unknown key 'dayz'; did you mean 'days'"):
        load_config(text=text.replace("days: many", "dayz: 7"))
    config = load_config(text=text.replace("many", "7"))
    assert config.retention.days == 7 and isinstance(config, PipelineConfig)
    assert load_config(text=text.replace("retention:\n  days: many\n", "")).retention.days == 30
    registry.HOOKS.pop("retention")
    assert config_model() is PipelineConfig


def test_a_preflight_refusal_and_a_critical_hook_raise_other_hooks_are_logged(caplog):
    class Refuses(RunHook):
        def preflight(self, plan):
            raise UsageError("refused")

    class Breaks(RunHook):
        def run_finishing(self, event):
            raise RuntimeError("a watcher's bug")

    class Must(Breaks):
        critical = True

    plan = RunPlan("p", Path("."), ("a",), frozenset({"a"}))
    with pytest.raises(UsageError, match="refused"):
        HookList([Caller(), Refuses()]).preflight(plan)
    with caplog.at_level(logging.WARNING, logger="pipeline"):
        HookList([Breaks(), Caller()]).run_finishing(None)
    assert "run hook Breaks.run_finishing failed: RuntimeError: a watcher's bug" in caplog.text
    with pytest.raises(RuntimeError, match="a watcher's bug"):
        HookList([Must()]).run_finishing(None)


def test_the_cost_hook_prices_a_recorded_stage_and_names_idle_gpus(caplog):
    from pipeline.hooks.protocol import RunEvent, RunInfo, StageEvent
    from pipeline.runs.record import RunManifest, StageRecord
    from pipeline.usage.cost_hook import CostHook
    from pipeline.usage.costs import Rates

    record = StageRecord(name="train", kind="train", seconds=10.0)
    record.usage = {"cpu_seconds": 3600.0, "gpus": [{"index": 0, "name": "NVIDIA H100", "seconds": 3600.0,
                                                     "energy_wh": 5.0, "utilisation_mean": 2.0}]}
    hook = CostHook(Rates(gpu_hour={"H100": 2.0}, cpu_core_hour=0.5, currency="EUR"))
    on_gpu = RunInfo("r", Path("."), "p", "gpu", "asked for", 1)
    with caplog.at_level(logging.WARNING, logger="pipeline"):
        hook.stage_recorded(StageEvent(on_gpu, record, None, 1))
    assert record.cost == {"gpu": 2.0, "cpu": 0.5, "memory": 0.0, "total": 2.5, "currency": "EUR"}
    assert record.usage["idle_gpus"] == [0]
    assert "stage train held GPU 0 for 10.0 s at under 10% utilisation (2%): paid for, barely used" in caplog.text

    manifest = RunManifest(pipeline="p", run_id="r", status="running", started="2026-01-01T00:00:00+00:00", stages={"train": record})
    hook.run_finishing(RunEvent(on_gpu, "succeeded", manifest))
    assert manifest.cost["total"] == 2.5 and manifest.usage["gpus"]["0"]["energy_wh"] == 5.0


def test_a_plugin_hooks_own_bugs_are_named_and_never_an_internal_error(registry, tmp_path, caplog):
    """A misspelt event method was exit 1 "internal error: TypeError" (and a plain TypeError
    to a library caller); a factory or a preflight that raised was exit 1 without the hook's
    name. Now: the misspelling is a usage error (exit 2) naming the method; a broken factory or
    preflight is logged naming the hook and skipped, as a hook that fails later is."""
    from pipeline.config import load_config
    from pipeline.engine.runner import Runner

    class Misspelt(RunHook):
        def stage_finshed(self, event):
            pass

    with pytest.raises(UsageError, match=r"Misspelt: 'stage_finshed' \(did you mean 'stage_finished'\?\)") as info:
        HookList([Misspelt()])
    assert info.value.exit_code == ExitCode.CONFIG

    def broken(section, context):
        raise ValueError("factory broke")

    registry.register_hook("broken_probe", broken)
    config = load_config(text="name: probe\nstages:\n  a: {kind: python, function: 'steps:count'}\n")
    with caplog.at_level(logging.WARNING, logger="pipeline"):
        runner = Runner(config, runs_dir=tmp_path, hooks=[])
    assert "run hook 'broken_probe' could not be built (ValueError: factory broke)" in caplog.text
    assert "SigningHook" in [type(hook).__name__ for hook in runner.hooks.hooks]

    class Buggy(RunHook):
        def preflight(self, plan):
            raise RuntimeError("preflight bug")

    class Critical(Buggy):
        critical = True

    plan = RunPlan("p", Path("."), ("a",), frozenset({"a"}))
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="pipeline"):
        HookList([Buggy(), Caller()]).preflight(plan)
    assert "run hook Buggy.preflight failed: RuntimeError: preflight bug" in caplog.text
    with pytest.raises(ConfigError, match=r"run hook Critical\.preflight failed: RuntimeError: preflight bug"):
        HookList([Critical()]).preflight(plan)
