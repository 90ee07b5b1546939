"""What a stage used and what it cost: GPU readings replayed through the meter (as NVML gives
them), the cost arithmetic, and real CPU runs that record their usage and price it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from pipeline.backends.devices.gpu_usage import GpuUsageMeter, Reading, visible_indices
from pipeline.core.errors import ExitCode
from pipeline.core.settings import Settings
from pipeline.usage.costs import Rates, idle_gpus, rates_from, run_totals, stage_cost
from pipeline.usage.memory import MemorySampler
from tests.support.cli import newest_run, run_cli as _pipeline


class Replay:
    """Recorded NVML readings, one list per device, handed out in order (the last one repeats)."""

    def __init__(self, devices: dict[int, tuple[str, list[Reading]]]) -> None:
        self.devices = [(index, name) for index, (name, _) in devices.items()]
        self._left = {index: list(readings) for index, (_, readings) in devices.items()}

    def read(self, index: int) -> Reading:
        left = self._left[index]
        return left.pop(0) if len(left) > 1 else left[0]


class Clock:
    def __init__(self, *times: float) -> None:
        self._times = list(times)

    def __call__(self) -> float:
        return self._times.pop(0)


def test_recorded_readings_give_utilisation_memory_power_and_energy():
    gib = 2**30
    replay = Replay({
        # H100 with an energy counter: 36,000 J more over the stage = 10 Wh.
        0: ("NVIDIA H100 80GB HBM3", [Reading(0, 1 * gib, 70.0, 1_000_000), Reading(80, 20 * gib, 500.0, 1_000_000),
                                      Reading(100, 30 * gib, 600.0, 20_000_000), Reading(60, 25 * gib, 400.0,
                                                                                         37_000_000)]),
        # An older board: no energy counter, so mean power x time.
        1: ("Tesla T4", [Reading(0, gib, None, None), Reading(10, gib, 30.0, None), Reading(20, 2 * gib, 50.0, None),
                         Reading(30, gib, 40.0, None)]),
    })
    meter = GpuUsageMeter(replay, clock=Clock(100.0, 172.0))           # a 72 s stage
    meter.begin()
    for _ in range(3):
        meter.sample()
    h100, t4 = meter.finish()
    assert h100 == {"index": 0, "name": "NVIDIA H100 80GB HBM3", "seconds": 72.0, "utilisation_mean": 80.0,
                    "utilisation_peak": 100.0, "memory_peak_bytes": 30 * gib, "power_mean_w": 500.0,
                    "energy_wh": 10.0}
    assert t4["utilisation_mean"] == 20.0 and t4["power_mean_w"] == 40.0
    assert t4["energy_wh"] == pytest.approx(40.0 * 72 / 3600)


def test_a_stage_shorter_than_a_sample_still_gets_a_reading():
    meter = GpuUsageMeter(Replay({0: ("A10G", [Reading(5, 100, 60.0, None), Reading(7, 200, 62.0, None)])}),
                          clock=Clock(0.0, 0.004))
    meter.begin()
    (device,) = meter.finish()
    assert device["utilisation_mean"] == 7 and device["memory_peak_bytes"] == 200


def test_the_sampler_reads_the_gpus_every_nth_sample_and_reports_cpu_time():
    readings = Replay({0: ("A100", [Reading(50, 1, None, None)])})
    sampled = []

    class Counting(GpuUsageMeter):
        def sample(self) -> None:
            sampled.append(1)
            super().sample()

    with MemorySampler(interval=0.001, gpu_meter=Counting(readings), gpu_every=5) as sampler:
        total = sum(i * i for i in range(2_000_000))              # some CPU work
    assert total > 0
    usage = sampler.usage()
    assert usage["cpu_seconds"] > 0 and usage["gpus"][0]["utilisation_mean"] == 50
    assert sampler._ticks >= 5 and len(sampled) <= sampler._ticks // 5 + 2
    with MemorySampler() as plain:
        pass
    assert "gpus" not in plain.usage()                               # no GPU meter: no GPU fields, not zeros


@pytest.mark.parametrize("setting,expected", [
    (None, [0, 1, 2, 3]), ("", []), ("2,0", [2, 0]), ("1,7,2", [1]), ("GPU-bbb", [1]), ("0,0", [0]), ("x", [])])
def test_cuda_visible_devices_picks_the_gpus_in_its_order(setting, expected):
    uuids = {"GPU-aaa-1": 0, "GPU-bbb-2": 1, "GPU-ccc-3": 2, "GPU-ddd-4": 3}
    assert visible_indices(setting, [0, 1, 2, 3], uuids) == expected


def test_rates_come_from_the_config_and_the_environment_overrides_them():
    config = {"gpu_hour": {"H100": 4.0, "H100 80GB": 5.0, "default": 2.0}, "cpu_core_hour": 0.04, "currency": "EUR"}
    rates = rates_from(config, Settings.from_environ({}))
    assert rates.gpu_rate("NVIDIA H100 80GB HBM3") == 5.0 and rates.gpu_rate("NVIDIA H100 PCIe") == 4.0
    assert rates.gpu_rate("Tesla T4") == 2.0 and rates.currency == "EUR"
    env = rates_from(config, Settings(cost_gpu_hour="3", cost_cpu_core_hour="0.1", cost_currency="GBP"))
    assert env.gpu_rate("Tesla T4") == 3.0 and env.gpu_rate("H100") == 4.0 and env.cpu_core_hour == 0.1
    assert env.currency == "GBP"
    assert rates_from({"gpu_hour": 1.5}, Settings.from_environ({})).gpu_rate("anything") == 1.5
    assert not rates_from(None, Settings.from_environ({})).priced
    with pytest.raises(ValueError, match="PIPELINE_COST_CPU_CORE_HOUR must be a number of 0 or more"):
        rates_from(None, Settings.from_environ({"PIPELINE_COST_CPU_CORE_HOUR": "-1"}))


def test_a_stage_and_a_run_are_priced_part_by_part():
    rates = Rates(gpu_hour={"H100": 4.0}, cpu_core_hour=0.05, memory_gb_hour=0.01)
    usage = {"cpu_seconds": 7200.0, "gpus": [{"index": 0, "name": "H100", "seconds": 1800.0, "energy_wh": 250.0},
                                             {"index": 1, "name": "H100", "seconds": 1800.0, "energy_wh": 150.0}]}
    cost = stage_cost(usage, 1800.0, 8 * 10**9, rates)
    assert cost == {"gpu": 4.0, "cpu": 0.1, "memory": 0.04, "total": 4.14, "currency": "USD"}
    assert stage_cost(usage, 1800.0, 0, Rates()) is None                  # nothing priced: no cost recorded
    other = stage_cost({"cpu_seconds": 3600.0}, 10.0, 0, rates)
    total_usage, total_cost = run_totals([(usage, cost), ({"cpu_seconds": 3600.0}, other), (None, None)], "USD")
    assert total_usage == {"cpu_seconds": 10800.0, "gpus": {"0": {"name": "H100", "seconds": 1800.0, "energy_wh": 250.0},
                                                            "1": {"name": "H100", "seconds": 1800.0,
                                                                  "energy_wh": 150.0}}}
    assert total_cost["total"] == pytest.approx(4.14 + 0.05) and total_cost["cpu"] == pytest.approx(0.15)


def test_a_gpu_held_under_ten_percent_is_idle():
    usage = {"gpus": [{"index": 0, "utilisation_mean": 3.0}, {"index": 1, "utilisation_mean": 60.0}]}
    assert [d["index"] for d in idle_gpus(usage, 30.0)] == [0]
    assert idle_gpus(usage, 0.5) == [] and idle_gpus({"cpu_seconds": 1.0}, 30.0) == []


# ------------------------------------------------------------------------ real runs
def cli(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return _pipeline(*args, cwd=cwd, env=env)


def test_a_cpu_run_records_cpu_time_no_gpu_fields_and_a_cost_only_when_priced(project):
    run = ("run", "configs/churn.yaml", "--until", "features", "--device", "cpu", "--no-cache")
    proc = cli(*run, cwd=project)
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((newest_run(project / "runs" / "churn") / "manifest.json").read_text())
    assert manifest["usage"]["cpu_seconds"] > 0 and "gpus" not in manifest["usage"]
    assert manifest["cost"] is None and all(s["cost"] is None for s in manifest["stages"].values())
    proc = cli(*run, "--set", "cost.memory_gb_hour=0.5", cwd=project,
               env={"PIPELINE_COST_CPU_CORE_HOUR": "36", "PIPELINE_REPORT": "on"})
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((newest_run(project / "runs" / "churn") / "manifest.json").read_text())
    stages = [s for s in manifest["stages"].values() if s["status"] == "succeeded"]
    for stage in stages:                                  # 36 per core-hour: a cent per CPU second
        assert stage["cost"]["cpu"] == pytest.approx(stage["usage"]["cpu_seconds"] / 100, abs=1e-6)
        assert stage["cost"]["memory"] == pytest.approx(
            stage["peak_rss_bytes"] / 1e9 * stage["seconds"] / 3600 * 0.5, abs=1e-6)
    assert manifest["cost"]["total"] == pytest.approx(sum(s["cost"]["total"] for s in stages), abs=1e-5)
    from pipeline.report.html import duration
    from pipeline.usage.costs import format_cost
    from tests.report.test_report import Page

    page = Page((newest_run(project / "runs" / "churn") / "report.html").read_text(encoding="utf-8"))
    table = next(t for t in page.tables if t and t[0][:3] == ["stage", "kind", "status"])
    header = table[0]
    for row in table[1:]:
        stage = manifest["stages"][row[0]]
        assert row[header.index("CPU time")] == duration(stage["usage"]["cpu_seconds"])
        assert row[header.index("cost")] == format_cost(stage["cost"])
    summary = next(t for t in page.tables if ["pipeline", "churn"] in t)      # the run details
    assert ["cost", format_cost(manifest["cost"])] in summary
    proc = cli(*run, cwd=project, env={"PIPELINE_COST_GPU_HOUR": "cheap"})
    assert proc.returncode == ExitCode.CONFIG and "PIPELINE_COST_GPU_HOUR" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_runs_list_shows_each_runs_cost_and_totals_a_period(project):
    run = ("run", "configs/churn.yaml", "--until", "split", "--device", "cpu", "--no-cache")
    for _ in range(2):
        proc = cli(*run, cwd=project, env={"PIPELINE_COST_CPU_CORE_HOUR": "3600"})   # one unit per CPU second
        assert proc.returncode == 0, proc.stderr
        assert "usage: " in proc.stdout and " CPU-s · cost " in proc.stdout
    rows = json.loads(cli("runs", "list", "--json", cwd=project).stdout)
    costs = [row["cost"]["total"] for row in rows]
    assert len(costs) == 2 and all(cost > 0 for cost in costs)
    listed = cli("runs", "list", "--since", "2000-01-01", cwd=project)
    assert listed.returncode == 0, listed.stderr
    from pipeline.usage.costs import format_cost

    total = format_cost({"total": sum(costs), "currency": "USD"})
    assert f"total cost of 2 priced run(s) since 2000-01-01 00:00: {total}" in listed.stdout
    later = cli("runs", "list", "--since", "2999-01-01", cwd=project)
    assert later.returncode == 0 and "no runs under runs since 2999-01-01" in later.stderr


@pytest.mark.parametrize(("total", "shown"), [(2.0634, "2.06 USD"), (0.54, "0.54 USD"), (0.01, "0.010 USD"),
                                               (0.0042, "0.0042 USD"), (0.0, "0.00 USD"), (1234.5, "1234.50 USD")])
def test_a_cost_reads_with_two_decimals_or_two_significant_digits(total, shown):
    """Costs printed 0.5400 USD beside 2.06 USD: four decimals below one unit, two above."""
    from pipeline.usage.costs import format_cost

    assert format_cost({"total": total, "currency": "USD"}) == shown


def test_worker_usage_is_the_difference_between_two_snapshots():
    from pipeline.usage.memory import worker_usage

    before = {"tcp://127.0.0.1:1": {"cpu_seconds": 10.0, "time": 100.0,
                                    "gpus": [{"index": 0, "name": "A100", "energy_mj": 1_000_000}]},
              "tcp://127.0.0.1:2": {"cpu_seconds": 1.0, "time": 100.0}}
    after = {"tcp://127.0.0.1:1": {"cpu_seconds": 25.5, "time": 160.0,
                                   "gpus": [{"index": 0, "name": "A100", "energy_mj": 8_200_000}]},
             "tcp://127.0.0.1:2": {"cpu_seconds": 3.0, "time": 160.0},
             "tcp://127.0.0.1:3": {"cpu_seconds": 9.0, "time": 160.0}}          # joined mid-run: no start
    assert worker_usage(before, after) == {
        "tcp://127.0.0.1:1": {"cpu_seconds": 15.5, "seconds": 60.0,
                              "gpus": [{"index": 0, "name": "A100", "energy_wh": 2.0}]},
        "tcp://127.0.0.1:2": {"cpu_seconds": 2.0, "seconds": 60.0}}
