"""Budget caps: a run or a stage over its wall time or cost is stopped while it runs, recorded
as stopped by the budget with the figures, and exits 9; a run whose earlier runs passed a cap
is refused before it starts."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.cli import run_cli as _pipeline
from pipeline.usage.budget import BudgetHook
from pipeline.usage.costs import Budget, Rates
from pipeline.core.sizes import parse_duration
from pipeline.core.errors import ExitCode
from pipeline.usage.memory import cpu_seconds

STAGES = '''\
import time


def sleepy(ctx, inputs, seconds=30.0):
    if ctx.artifacts_dir is not None:         # a file written before the stop: half of its output
        ctx.artifact_path("partial.json").write_text("{}")
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(0.05)


def swallowed(ctx, inputs, seconds=6.0):
    """A library's C code calling back into Python (XGBoost's data iterator): an exception in a
    ctypes callback is printed as "Exception ignored" and the C code goes on."""
    import ctypes

    tick = ctypes.CFUNCTYPE(None)(lambda: time.sleep(0.05))
    if ctx.artifacts_dir is not None:
        ctx.artifact_path("started").write_text("")
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        tick()
    return "done"


def busy(ctx, inputs, seconds=30.0):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        sum(range(1000))
'''


def project(tmp_path: Path, config: str) -> Path:
    (tmp_path / "slow_stages.py").write_text(STAGES)
    (tmp_path / "budget.yaml").write_text(config)
    return tmp_path


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return _pipeline(*args, cwd=cwd, env={"PIPELINE_REPORT": "off"})


def only_run(folder: Path) -> dict:
    (run,) = [p for p in (folder / "runs" / "b").iterdir() if p.name[0].isdigit()]
    return json.loads((run / "manifest.json").read_text())


def test_a_run_over_its_wall_time_is_stopped_recorded_and_exits_9(tmp_path):
    folder = project(tmp_path, """\
name: b
device: cpu
budget: {max_wall: 1.5s}
stages:
  slow: {kind: python, function: "slow_stages:sleepy", params: {seconds: 60}}
""")
    started = time.monotonic()
    proc = cli("run", "budget.yaml", cwd=folder)
    assert time.monotonic() - started < 45                      # stopped, not the 60 s the stage wanted
    assert proc.returncode == ExitCode.BUDGET, proc.stderr
    assert "stopped by the budget: the run reached" in proc.stderr and "max_wall 1.5 s" in proc.stderr
    assert "Traceback" not in proc.stderr
    manifest = only_run(folder)
    assert manifest["status"] == "interrupted" and manifest["error"].startswith("stopped by the budget")
    assert manifest["budget"]["scope"] == "run" and manifest["budget"]["cap"] == "max_wall"
    assert manifest["budget"]["limit"] == 1.5 and manifest["budget"]["reached"] > 1.5
    assert manifest["stages"]["slow"]["status"] == "interrupted"
    assert not (folder / "runs" / "b" / "latest").exists()     # nothing taken as finished
    # What the stopped stage wrote stays for a look, but is no artifact of the run.
    run = next(p for p in (folder / "runs" / "b").iterdir() if p.name[0].isdigit())
    assert (run / "slow" / "partial.json").is_file()
    assert not any(path.startswith("slow/") for path in manifest["artifacts"]), manifest["artifacts"]


def test_a_stage_over_its_cost_on_cpu_time_is_stopped_and_the_stage_named(tmp_path):
    folder = project(tmp_path, """\
name: b
device: cpu
cost: {cpu_core_hour: 3600}
stages:
  first: {kind: python, function: "slow_stages:sleepy", params: {seconds: 0.1}}
  burn: {kind: python, function: "slow_stages:busy", inputs: [first], params: {seconds: 60},
         budget: {max_cost: 1.0}}
""")
    proc = cli("run", "budget.yaml", cwd=folder)
    assert proc.returncode == ExitCode.BUDGET, proc.stderr
    assert "stage burn reached" in proc.stderr and "max_cost 1" in proc.stderr
    manifest = only_run(folder)
    budget = manifest["budget"]
    assert (budget["scope"], budget["cap"], budget["limit"]) == ("burn", "max_cost", 1.0)
    # The record rounds to 6 places: a stop just past the cap (1.0000004) is recorded as 1.0.
    assert budget["reached"] >= 1.0 and budget["run_spent"]["max_cost"] >= budget["reached"]
    assert manifest["stages"]["first"]["status"] == "succeeded"
    assert manifest["stages"]["burn"]["status"] == "interrupted"


def test_the_stopped_stage_records_its_usage_and_cost_and_the_run_adds_it_up(tmp_path):
    folder = project(tmp_path, """\
name: b
device: cpu
cost: {cpu_core_hour: 3600}
stages:
  first: {kind: python, function: "slow_stages:busy", params: {seconds: 0.2}}
  burn: {kind: python, function: "slow_stages:busy", inputs: [first], params: {seconds: 60},
         budget: {max_cost: 0.5}}
""")
    proc = cli("run", "budget.yaml", cwd=folder)
    assert proc.returncode == ExitCode.BUDGET, proc.stderr
    manifest = only_run(folder)
    burn = manifest["stages"]["burn"]
    assert burn["status"] == "interrupted" and burn["error"].startswith("the run ended (interrupted)")
    # What the stopped stage used is recorded, as a failed stage's is: the budget saw it spend.
    assert burn["seconds"] > 0 and burn["ended"] is not None
    assert burn["usage"]["cpu_seconds"] >= 0.4
    assert burn["cost"]["total"] >= 0.4
    # The run's cost is its stages' added up, the stopped one included.
    stages = [s["cost"]["total"] for s in manifest["stages"].values()]
    assert manifest["cost"]["total"] == pytest.approx(sum(stages), abs=1e-5)
    assert manifest["cost"]["total"] >= manifest["budget"]["reached"] * 0.8
    assert manifest["usage"]["cpu_seconds"] >= burn["usage"]["cpu_seconds"]


def test_the_estimate_from_earlier_runs_refuses_to_start_unless_told(tmp_path):
    folder = project(tmp_path, """\
name: b
device: cpu
stages:
  slow: {kind: python, function: "slow_stages:sleepy", params: {seconds: 0.6}}
""")
    assert cli("run", "budget.yaml", cwd=folder).returncode == 0
    proc = cli("run", "budget.yaml", "--set", "budget.max_wall=0.3", cwd=folder)
    assert proc.returncode == ExitCode.BUDGET and "not started: the last 1 succeeded run(s)" in proc.stderr
    assert "--ignore-budget-estimate" in proc.stderr and "over the budget's max_wall of 0.3 s" in proc.stderr
    assert len([p for p in (folder / "runs" / "b").iterdir() if p.name[0].isdigit()]) == 1   # no run folder
    proc = cli("run", "budget.yaml", "--set", "budget.max_wall=0.3", "--ignore-budget-estimate", "--no-cache",
               cwd=folder)
    assert proc.returncode == ExitCode.BUDGET and "stopped by the budget" in proc.stderr


@pytest.mark.parametrize("text,seconds", [(90, 90.0), ("90s", 90.0), ("30m", 1800.0), ("2h", 7200.0),
                                          ("1h30m", 5400.0)])
def test_durations(text, seconds):
    assert parse_duration(text) == seconds
    assert Budget(max_wall=text).limits == {"max_wall": seconds}


@pytest.mark.parametrize("bad", ["soon", "0s", -5, True, "2 weeks"])
def test_a_bad_duration_is_refused(bad):
    with pytest.raises(ValueError):
        parse_duration(bad)


def test_the_watch_prices_a_running_stage_on_the_gpus_it_may_use():
    hook = BudgetHook(Budget(max_gpu_hours=1.0), {"train": Budget(max_cost=5.0)}, Rates(gpu_hour={"H100": 4.0}),
                      gpus=[(0, "NVIDIA H100"), (1, "NVIDIA H100")])
    hook._started = 0.0
    from pipeline.usage.budget import _Running

    hook._running["train"] = _Running(started=0.0, cpu=cpu_seconds(hook._process))
    assert hook.check(now=1000.0) is None                         # 2 GPUs x 1000 s: 0.56 GPU-h, 2.22 cost
    over = hook.check(now=2000.0)                                 # 1.11 GPU-h; cost 4.44: under the stage's 5
    assert (over.scope, over.cap) == ("run", "max_gpu_hours") and over.reached == pytest.approx(2000 * 2 / 3600)
    over = hook.check(now=2400.0)                                 # cost 5.33: the stage's cap comes first
    assert (over.scope, over.cap) == ("train", "max_cost") and over.reached == pytest.approx(2400 * 8 / 3600)


def test_a_budget_does_not_change_a_stages_cache_key():
    from pipeline.cache import stage_key
    from pipeline.stages.python import PythonSpec

    plain = PythonSpec(kind="python", function="m:f")
    capped = PythonSpec(kind="python", function="m:f", budget={"max_wall": "1h"})
    key = dict(fingerprint={"code": "x"}, code=(), backend="cpu", versions={}, seed=0)
    assert stage_key(plain, {}, **key) == stage_key(capped, {}, **key) is not None


def test_a_cost_cap_without_a_rate_to_price_anything_says_it_can_never_stop_the_run(tmp_path, caplog):
    """`budget: {max_cost: 2}` with no rate set ran 32 s of a busy loop, exit 0, not a word."""
    import logging

    from pipeline.config import load_config
    from pipeline.hooks.hook_registry import HookContext
    from pipeline.usage.budget import budget_hook

    config = load_config(text="name: b\nbudget: {max_cost: 2, max_wall: 1h}\nstages:\n"
                              "  slow: {kind: python, function: 'slow_stages:sleepy', budget: {max_cost: 1}}\n")
    context = HookContext(config=config, pipeline="b", runs_dir=tmp_path)
    with caplog.at_level(logging.WARNING, logger="pipeline"):
        assert budget_hook(config.budget, context) is not None           # the wall cap still holds
    assert "budget, stages.slow.budget: max_cost can never stop this run: no cost rate is set" in caplog.text
    caplog.clear()
    priced = load_config(text="name: b\ncost: {cpu_core_hour: 0.05}\nbudget: {max_cost: 2}\nstages:\n"
                              "  slow: {kind: python, function: 'slow_stages:sleepy'}\n")
    with caplog.at_level(logging.WARNING, logger="pipeline"):
        budget_hook(priced.budget, HookContext(config=priced, pipeline="b", runs_dir=tmp_path))
    assert "can never stop" not in caplog.text


def _watched(budget: Budget, **kwargs) -> BudgetHook:
    """A budget hook watching this thread, as it watches the thread that runs the stages."""
    hook = BudgetHook(budget, {}, Rates(), gpus=[], interval=0.02, **kwargs)
    hook.run_started(None)
    return hook


def _ended(hook: BudgetHook, status: str) -> None:
    from types import SimpleNamespace

    from pipeline.core.interrupts import clear_budget_stop

    event = SimpleNamespace(status=status, manifest=SimpleNamespace(budget=None))
    hook.run_finishing(event)
    hook.run_finished(event)
    clear_budget_stop()


def test_a_stop_that_comes_during_an_import_waits_for_the_import_to_finish(tmp_path, monkeypatch):
    """A budget stop landed inside ``import torch`` in library use: torch stayed half-imported,
    and every later run in that process failed its torch stage (exit 4, "Trying to override a
    python impl ... aten::broadcast_tensors")."""
    import sys

    from pipeline.core.interrupts import BudgetExceeded

    (tmp_path / "slow_to_import.py").write_text("import time\ntime.sleep(0.5)\nDONE = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "slow_to_import", raising=False)
    hook = _watched(Budget(max_wall=0.05))
    stopped_in = "nowhere"
    try:
        try:
            import slow_to_import  # noqa: F401 - imported for its side effect: half a second
            stopped_in = "not yet"
            end = time.monotonic() + 5
            while time.monotonic() < end:
                sum(range(100))
        except BudgetExceeded:
            stopped_in = "after the import" if stopped_in == "not yet" else "the import"
    finally:
        _ended(hook, "interrupted")
    assert stopped_in == "after the import"
    assert sys.modules["slow_to_import"].DONE is True and hook.overrun is not None


def test_a_run_that_ends_while_the_watch_decides_is_never_stopped_after_it_ended(monkeypatch):
    """The watch read the figures, the run ended, then the watch raised its stop into whatever
    the caller ran next (and sent SIGUSR1 after its default action was back: a killed process)."""
    import signal

    from pipeline.core.interrupts import BudgetExceeded, budget_stop
    from pipeline.usage.budget import Overrun

    def slow_check(now=None):
        time.sleep(0.3)
        return Overrun("run", "max_wall", 0.01, 0.3, {})

    signals: list[int] = []
    def ours(signum, frame):
        signals.append(signum)

    previous = signal.signal(signal.SIGUSR1, ours)
    try:
        hook = BudgetHook(Budget(max_wall=0.01), {}, Rates(), gpus=[], interval=0.02)
        monkeypatch.setattr(hook, "check", slow_check)
        hook.run_started(None)
        time.sleep(0.1)                        # the watch is reading the figures
        _ended(hook, "succeeded")
        raised = False
        try:
            end = time.monotonic() + 0.6
            while time.monotonic() < end:
                sum(range(100))
        except BudgetExceeded:
            raised = True
        assert not raised and signals == [] and hook.overrun is None and budget_stop() is None
        assert signal.getsignal(signal.SIGUSR1) is ours            # back, not the watch's
    finally:
        signal.signal(signal.SIGUSR1, previous)


@pytest.mark.parametrize("stop", ["budget", "sigterm", "sigint"])
def test_a_stop_that_c_code_swallowed_still_stops_the_run(tmp_path, stop):
    """A budget cap or SIGTERM raised inside XGBoost's ctypes callback was swallowed ("Exception
    ignored on calling ctypes callback function"): the run went on and ended succeeded, exit 0,
    'latest' moved. The note the stop leaves is raised again when the stage returns."""
    import signal

    budget = "budget: {max_wall: 1s}\n" if stop == "budget" else ""
    folder = project(tmp_path, f"""\
name: b
device: cpu
{budget}stages:
  slow: {{kind: python, function: "slow_stages:swallowed"}}
""")
    if stop == "budget":
        proc = cli("run", "budget.yaml", cwd=folder)
        assert proc.returncode == ExitCode.BUDGET, proc.stderr
    else:
        import os
        import sys

        started = subprocess.Popen([sys.executable, "-m", "pipeline", "run", "budget.yaml"], cwd=folder,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   env={**os.environ, "PIPELINE_REPORT": "off",
                                        "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
        deadline = time.monotonic() + 120
        while not list((folder / "runs").glob("b/*/slow/started")) and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)                                         # inside the callbacks
        started.send_signal(signal.SIGTERM if stop == "sigterm" else signal.SIGINT)
        out, err = started.communicate(timeout=120)
        proc = subprocess.CompletedProcess(started.args, started.returncode, out, err)
        assert proc.returncode == (143 if stop == "sigterm" else 130), proc.stderr
    assert "Exception ignored" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    manifest = only_run(folder)
    assert manifest["status"] == "interrupted" and manifest["stages"]["slow"]["status"] == "interrupted"
    assert not (folder / "runs" / "b" / "latest").exists()


def test_a_signal_inside_a_c_callback_is_raised_once_out_of_it(monkeypatch):
    """SIGINT, SIGTERM or a budget stop raised inside XGBoost's data iterator callback was
    swallowed by ctypes, and at times left XGBoost's C++ state broken (SIGABRT, SIGSEGV: the
    run stayed 'running'). Met there, the handler notes the stop and leaves the raising to a
    moment later, out of the callback."""
    from pipeline.core import interrupts

    namespace: dict = {}
    exec(compile("import sys\ndef _next_wrapper():\n    return sys._getframe()\n", "/site/xgboost/core.py", "exec"),
         namespace)
    inside = namespace["_next_wrapper"]()
    assert interrupts.unsafe_to_raise(inside) and not interrupts.unsafe_to_raise(__import__("sys")._getframe())
    later = []
    monkeypatch.setattr(interrupts, "raise_when_safe", lambda thread, exc, **kw: later.append(exc))
    monkeypatch.setattr(interrupts, "_user_interrupt", __import__("threading").Event())
    handler = interrupts.stop_handler(interrupts.request_user_interrupt)
    handler(2, inside)                                     # returns: raised later, out of the callback
    assert later == [KeyboardInterrupt]
    with pytest.raises(KeyboardInterrupt):
        handler(2, __import__("sys")._getframe())          # anywhere else: at once
    with pytest.raises(KeyboardInterrupt):
        interrupts.raise_if_stopped()                      # and the note outlives a swallowed one
