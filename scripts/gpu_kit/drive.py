#!/usr/bin/env python3
"""One call on a lent GPU host: install what has arrived, then run the checks in order of value.

    python3 scripts/gpu_kit/drive.py --parts gpu-kit/carry --out "$OUT" [--budget 480] [--steps ...]

A GPU host lent for minutes takes several calls, each carrying a part or two of the kit (and
the checkout). Every call runs this script, which:

1. copies the parts that arrived (any folder under ``--parts``) into ``--store`` and unpacks
   them into ``--target`` (both stay on the host between calls), before anything else;
2. starts, once, the **CPU side** in the background, in a session of its own so that it
   outlives the call: the benchmark tables (1M and 10M rows of ``generate_churn.py``), then the
   same ``pipeline run`` of ``configs/bench_churn.yaml`` with ``--device cpu`` on every core,
   then ``kind: auto`` on the CPU. It uses the transfers' idle minutes, and each GPU step that
   compares against it waits for its CPU twin, so the two never share the machine;
3. once RAPIDS imports, runs the GPU steps not done in an earlier call, most valuable first,
   each in a process group of its own with a time limit inside ``--budget``:
   ``smoke`` (import, a cuDF group-by, a cuML forest, which libraries were loaded),
   ``e2e`` (``pipeline run configs/churn.yaml --device gpu``, report included), ``parity``
   (``pipeline parity`` on churn), ``bench_1m`` / ``bench_10m`` (the benchmark table with
   ``--device gpu``), ``auto`` (``configs/churn_auto.yaml`` on the GPU, the CPU's time limit),
   ``gpu_tests`` (``pytest -m gpu``, a per-test timeout), ``events`` (``scripts/bench_events.py`` at
   10M events: the pipeline's functions on cuDF against Polars on every core, pandas checking both).

After every step it writes ``OUT/drive.json`` (every outcome) and ``OUT/results.tar.gz`` (logs,
run manifests, metrics, the report): a call cut short returns what finished. Without a GPU or
RAPIDS (here, in a rehearsal) the same order runs with the GPU steps recorded as skipped, so
``--dry-run`` rehearses it all on any machine.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

CHECKOUT = Path(__file__).resolve().parents[2]
KIT = Path(__file__).resolve().parent
if str(KIT.parent) not in sys.path:
    sys.path.insert(0, str(KIT.parent))                 # makes `gpu_kit` importable

from gpu_kit.install import kit_environment  # noqa: E402

STEPS = ("smoke", "e2e", "serve_calls", "members", "parity", "bench_1m", "bench_10m", "auto", "gpu_tests", "events")
# The CPU side, in the background, in this order; each writes its outcome to bg/<name>.json.
# The CPU side's steps: name -> (what, table size). `gen` writes a table, `cpu` times the benchmark
# config on it, `auto` times configs/churn_auto.yaml.
BACKGROUND = {"gen_1m": ("gen", "1m"), "gen_10m": ("gen", "10m"), "cpu_1m": ("cpu", "1m"),
              "cpu_10m": ("cpu", "10m"), "auto_cpu": ("auto", None)}
# GPU steps that time nothing and may share the host with a timed run.
UNTIMED = frozenset({"smoke"})
# Which background step a GPU step waits for (its CPU twin, or the data it reads).
WAITS_FOR = {"bench_1m": "cpu_1m", "bench_10m": "cpu_10m", "auto": "auto_cpu"}
ROWS = {"1m": 1_000_000, "10m": 10_000_000}
AUTO_LIMIT = "60s"
# The test modules holding `gpu`-marked tests: collecting only these keeps modules whose imports
# need what the host lacks (the report's browser, MLflow) out of the way.
GPU_TEST_FILES = (
    "tests/tensors/test_tensors.py", "tests/tensors/test_precision_prefetch_and_memory.py",
    "tests/stages/test_torch_tasks.py", "tests/distributed/test_torch_ddp.py",
    "tests/backends/test_fills_and_matrix_layout.py", "tests/backends/test_dates.py",
    "tests/events/test_aggregate_events.py", "tests/events/test_label_events.py", "tests/stages/test_join.py",
    "tests/cli/test_parity.py", "tests/models/test_safe_models.py", "tests/distributed/test_training_on_cpu.py",
)
# A step is started only with at least this many seconds of the call's budget left.
MIN_STEP_SECONDS = {"smoke": 30, "e2e": 60, "serve_calls": 40, "members": 60, "parity": 60, "bench_1m": 40,
                    "bench_10m": 60, "auto": 90, "gpu_tests": 60, "events": 150}
# The served models whose model call is timed per batch size on the device path and the host
# copy's (``serve_calls``): where they cross sets ``DEVICE_FROM_ROWS``.
SERVE_MODELS, SERVE_CALLS = ("xgb", "mlp"), "1,16,64,256,1024,4096,16384"
# The events benchmark on the GPU: cuDF against Polars on every core, pandas as the check's reference.
EVENTS_SIZE, EVENTS_ENGINES = "10M", "pandas,pipeline-gpu,polars"
SMOKE = r"""
import json, time
t0 = time.perf_counter()
import cudf, cuml, cupy as cp
from cuml.ensemble import RandomForestClassifier
t1 = time.perf_counter()
frame = cudf.DataFrame({"k": cp.random.randint(0, 1000, 5_000_000), "v": cp.random.rand(5_000_000)})
means = frame.groupby("k").v.mean().sort_index()
t2 = time.perf_counter()
X = cp.random.rand(200_000, 16, dtype=cp.float32)
y = (X[:, 0] + X[:, 1] > 1.0).astype(cp.int32)
forest = RandomForestClassifier(n_estimators=20, max_depth=8, random_state=0).fit(X, y)
accuracy = float((forest.predict(X) == y).mean())
t3 = time.perf_counter()
maps = open("/proc/self/maps").read().splitlines()
libs = sorted({line.split()[-1] for line in maps if any(k in line for k in ("libcudf", "libcuml", "libcuvs", "nvJitLink", "libcufft"))})
print(json.dumps({"cudf": cudf.__version__, "cuml": cuml.__version__, "groups": int(len(means)),
                  "group_mean_ok": bool(abs(float(means.mean()) - 0.5) < 0.01), "forest_train_accuracy": accuracy,
                  "import_s": round(t1 - t0, 2), "groupby_s": round(t2 - t1, 2), "forest_s": round(t3 - t2, 2),
                  "loaded": libs}))
"""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", type=Path, default=CHECKOUT / "gpu-kit" / "carry",
                        help="folder whose sub-folders hold the parts carried so far")
    parser.add_argument("--store", type=Path, default=Path("/opt/gpu-kit-parts"), help="where parts are gathered")
    parser.add_argument("--target", type=Path, default=Path("/opt/gpu-kit-site"), help="where wheels are installed")
    parser.add_argument("--results", type=Path, default=Path("/opt/gpu-kit-results"),
                        help="results kept on the host across calls")
    parser.add_argument("--data", type=Path, default=Path("/opt/gpu-kit-data"), help="generated benchmark tables")
    parser.add_argument("--out", type=Path, required=True, help="folder whose files come back")
    parser.add_argument("--budget", type=float, default=480, help="seconds this call may take in all")
    parser.add_argument("--steps", default=",".join(STEPS), help=f"comma-separated subset of {', '.join(STEPS)}")
    parser.add_argument("--again", action="store_true", help="rerun steps an earlier call finished")
    parser.add_argument("--dry-run", action="store_true",
                        help="rehearse: the same order, each step's command printed instead of run")
    parser.add_argument("--cpu-steps", default=",".join(BACKGROUND),
                        help=f"the CPU side's steps, in order (default {','.join(BACKGROUND)}; '' for none)")
    parser.add_argument("--wait-cpu", action="store_true",
                        help="after the GPU steps, wait (within the budget) for the CPU side to end")
    parser.add_argument("--print-env", action="store_true",
                        help="print the kit's environment as shell exports (for commands beside the steps) and exit")
    parser.add_argument("--background", action="store_true", help=argparse.SUPPRESS)   # the CPU side itself
    return parser.parse_args(argv)


class Driver:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.deadline = time.monotonic() + args.budget
        self.results: Path = args.results
        (self.results / "bg").mkdir(parents=True, exist_ok=True)
        self.state_file = self.results / "drive.json"
        self.state: dict[str, Any] = json.loads(self.state_file.read_text()) if self.state_file.is_file() else {}
        self.state.setdefault("calls", 0)
        self.state.setdefault("steps", {})
        self.env = self.environment()

    def environment(self) -> dict[str, str]:
        """The kit's environment (unpack's exports), with the overrides' libraries preloaded."""
        preload: list[Path] = []
        manifest = self.args.store / "manifest.json"
        if manifest.is_file():
            from gpu_kit.unpack import native_overrides, override_libraries
            data = json.loads(manifest.read_text())
            preload = override_libraries(native_overrides(data, self.args.target, list(data["profiles"])))
        env = kit_environment(self.args.target, CHECKOUT, preload)
        env["PYTHONUNBUFFERED"] = "1"
        return env

    # ------------------------------------------------------------------ plumbing
    def left(self) -> float:
        return self.deadline - time.monotonic()

    def command(self, name: str, argv: list[str], *, limit: float, cwd: Path = CHECKOUT,
                always: bool = False) -> dict[str, Any]:
        """Run ``argv`` with its output in ``results/<name>.log``; kill its group past ``limit``.
        In a dry run only the ``always`` commands (host facts, unpack) run; the rest are printed."""
        log_path = self.results / f"{name}.log"
        shown = [str(a) for a in (argv[1:] if argv[0] == sys.executable else argv)]
        if self.args.dry_run and not always:
            print(f"[{name}] dry run: {' '.join(shown)} (limit {limit:.0f} s)", flush=True)
            log_path.write_text("dry run\n")
            return {"argv": shown, "rc": 0, "seconds": 0.0, "timed_out": False, "dry_run": True, "log_tail": ""}
        started = time.perf_counter()
        with open(log_path, "wb") as log:
            process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=cwd, env=self.env,
                                       start_new_session=True)
            try:
                rc: int | None = process.wait(timeout=max(limit, 1))
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, 9)
                process.wait()
                rc = None
        seconds = round(time.perf_counter() - started, 1)
        tail = log_path.read_text(errors="replace")[-2000:]
        print(f"[{name}] rc={rc} {seconds}s", flush=True)
        return {"argv": shown, "rc": rc, "seconds": seconds, "timed_out": rc is None, "log_tail": tail}

    def record(self, step: str, outcome: dict[str, Any]) -> None:
        self.state["steps"][step] = {**outcome, "call": self.state["calls"]}
        self.flush()

    def flush(self) -> None:
        self.state["background"] = self.background_state()
        self.state_file.write_text(json.dumps(self.state, indent=2, default=str))
        out: Path = self.args.out
        out.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(self.state_file, out / "drive.json")
        temporary = out / ".results.tar.gz.tmp"
        with tarfile.open(temporary, "w:gz") as tar:
            tar.add(self.results, arcname="results", filter=_small_files)
        temporary.replace(out / "results.tar.gz")

    def python(self, *args: str) -> list[str]:
        return [sys.executable, *map(str, args)]

    # ------------------------------------------------------------------ what is here
    def gpu_count(self) -> int:
        """GPUs NVML reports, asked in a child with the kit's environment (NVML's bindings and the
        package's imports may live in the kit's folder, not on this process's path)."""
        done = subprocess.run(self.python("-c", "from pipeline.backends.devices.detect import probe_nvml; "
                                                "print(len(probe_nvml().devices))"),
                              env=self.env, capture_output=True, text=True, cwd=CHECKOUT)
        try:
            return int(done.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            self.state.setdefault("import_errors", {})["nvml"] = done.stderr[-1500:]
            return 0

    def importable(self, modules: str) -> bool:
        if self.args.dry_run:
            return False
        done = subprocess.run(self.python("-c", f"import {modules}"), env=self.env, capture_output=True, text=True)
        if done.returncode != 0:
            self.state.setdefault("import_errors", {})[modules] = done.stderr[-1500:]
        return done.returncode == 0

    def base_ready(self) -> bool:
        """Every wheel of the base profile is installed (unpack's record in the target)."""
        manifest = self.args.store / "manifest.json"
        state = self.args.target / ".gpu-kit-installed.json"
        if not manifest.is_file():
            return False
        wheels = [w for w in json.loads(manifest.read_text())["wheels"] if w.get("profile", "base") == "base"]
        installed = json.loads(state.read_text()).get("installed", {}) if state.is_file() else {}
        return all(installed.get(w["name"]) == w["sha256"] for w in wheels)

    # ------------------------------------------------------------------ parts
    def gather(self) -> list[str]:
        """Copy every part carried so far into the store (a later call's carry replaces the folder)."""
        self.args.store.mkdir(parents=True, exist_ok=True)
        copied = []
        for source in sorted(self.args.parts.glob("**/*")) if self.args.parts.is_dir() else []:
            if not source.is_file():
                continue
            dest = self.args.store / source.name
            if source.name == "manifest.json" or not dest.is_file() or dest.stat().st_size != source.stat().st_size:
                shutil.copyfile(source, dest)
                copied.append(source.name)
        return copied

    def unpack(self) -> int | None:
        copied = self.gather()
        if not (self.args.store / "manifest.json").is_file():
            self.record("unpack", {"rc": None, "reason": f"no manifest under {self.args.parts}"})
            return None
        outcome = self.command("unpack", self.python(KIT / "unpack.py", self.args.store, "--target", self.args.target),
                               limit=self.left(), always=True)
        history = self.state["steps"].get("unpack", {}).get("history", [])
        outcome["history"] = [*history, {"call": self.state["calls"], "rc": outcome["rc"], "copied": copied,
                                         "seconds": outcome["seconds"]}]
        self.record("unpack", outcome)
        self.env = self.environment()              # the overrides' libraries may have just arrived
        return outcome["rc"]

    @contextlib.contextmanager
    def machine_to_itself(self, name: str, *, timed: bool):
        """While a timed run (a CPU run, a GPU step) holds the host, no other timed run starts:
        an exclusive lock on ``results/timing.lock`` shared by the call and the CPU side. On the
        H200 a parity run's CPU side beside the 10M CPU run made that run 2.2x slower."""
        if not timed or self.args.dry_run:
            yield
            return
        with open(self.results / "timing.lock", "a") as lock:
            started = time.monotonic()
            fcntl.flock(lock, fcntl.LOCK_EX)
            waited = time.monotonic() - started
            if waited > 1:
                print(f"[{name}] waited {waited:.0f} s for the host to be free of another timed run", flush=True)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    # ------------------------------------------------------------------ the CPU side
    def data(self, size: str) -> Path:
        return self.args.data / f"churn_{ROWS[size]}_s0.csv"

    def cpu_steps(self) -> list[str]:
        steps = [s.strip() for s in self.args.cpu_steps.split(",") if s.strip()]
        unknown = [s for s in steps if s not in BACKGROUND]
        if unknown:
            raise SystemExit(f"--cpu-steps: unknown {', '.join(unknown)} (choose from {', '.join(BACKGROUND)})")
        return steps

    def background_state(self) -> dict[str, Any]:
        found = {}
        for name in BACKGROUND:
            path = self.results / "bg" / f"{name}.json"
            if path.is_file():
                found[name] = json.loads(path.read_text())
        started = self.results / "bg" / "started.json"
        if started.is_file():
            found["started"] = json.loads(started.read_text())
        return found

    def start_background(self) -> None:
        started = self.results / "bg" / "started.json"
        if (started.is_file() and not self.args.again) or not self.cpu_steps():
            return
        argv = self.python(Path(__file__), "--background", "--out", self.results / "bg" / "out",
                           "--parts", self.args.parts, "--store", self.args.store, "--target", self.args.target,
                           "--results", self.args.results, "--data", self.args.data, "--cpu-steps", self.args.cpu_steps,
                           *(["--dry-run"] if self.args.dry_run else []))
        started.write_text(json.dumps({"call": self.state["calls"], "at": time.time(), "argv": argv[1:]}, default=str))
        log = open(self.results / "bg" / "background.log", "ab")
        subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=CHECKOUT, env=self.env,
                         start_new_session=True)           # outlives this call, as the host allows
        print("[background] CPU side started (data, the CPU runs, auto on the CPU)", flush=True)

    def run_background(self) -> int:
        """The CPU side, step by step; waits for the base profile before the first pipeline run."""
        self.args.budget = 3600
        self.deadline = time.monotonic() + 3600
        for name in self.cpu_steps():
            path = self.results / "bg" / f"{name}.json"
            if path.is_file() and json.loads(path.read_text()).get("rc") == 0:
                continue
            what, size = BACKGROUND[name]
            if what != "gen":
                while not self.base_ready() and not self.args.dry_run:
                    time.sleep(5)
                    self.env = self.environment()
            with self.machine_to_itself(name, timed=what != "gen"):
                began, load_before = time.time(), os.getloadavg()
                outcome = getattr(self, f"bg_{what}")(size)
            outcome.update(began=began, load_before=load_before, load_after=os.getloadavg())
            path.write_text(json.dumps(outcome, indent=2, default=str))
        return 0

    def bg_gen(self, size: str) -> dict[str, Any]:
        data = self.data(size)
        if data.is_file() and not self.args.dry_run:
            return {"rc": 0, "reason": "already there", "path": str(data)}
        data.parent.mkdir(parents=True, exist_ok=True)
        temporary = data.with_name(data.stem + ".part.csv")
        outcome = self.command(f"gen_{size}", self.python(CHECKOUT / "scripts" / "generate_churn.py", "--rows",
                                                          ROWS[size], "--output", temporary), limit=900)
        if outcome["rc"] == 0 and not self.args.dry_run:
            temporary.replace(data)
        return outcome

    def bg_cpu(self, size: str) -> dict[str, Any]:
        return self.bench_run(f"cpu_{size}", "cpu", size, limit=1200)

    def bg_auto(self, _: None) -> dict[str, Any]:
        return self.auto_run("auto_cpu", "cpu", limit=600)

    # ------------------------------------------------------------------ runs
    def pipeline(self, name: str, *args: Any, limit: float) -> dict[str, Any]:
        return self.command(name, self.python("-m", "pipeline", *args), limit=limit)

    @staticmethod
    def newest_run(runs: Path) -> Path | None:
        """The folder of the newest run under the runs folder ``runs``, or None."""
        manifests = sorted(runs.glob("*/*/manifest.json"), key=lambda p: p.stat().st_mtime)
        return manifests[-1].parent if manifests else None

    def keep_run(self, name: str, runs: Path) -> dict[str, Any]:
        """The run's manifest and metrics (and report, where small) copied under results/runs/name."""
        folder = self.newest_run(runs)
        if folder is None:
            return {}
        keep = self.results / "runs" / name
        keep.mkdir(parents=True, exist_ok=True)
        for pattern in ("manifest.json", "*/metrics.json", "report.html"):
            for path in folder.glob(pattern):
                dest = keep / path.relative_to(folder)
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, dest)
        manifest = json.loads((folder / "manifest.json").read_text())
        return {"run": folder.name, "status": manifest.get("status"), "duration_s": manifest.get("duration_s"),
                "device": manifest.get("device"),
                "stages": {n: s.get("seconds") for n, s in manifest.get("stages", {}).items()},
                "metrics": manifest.get("metrics")}

    def recorded_run(self, name: str, config: str, device: str, setting: str, *, limit: float) -> dict[str, Any]:
        """``pipeline run CONFIG --device DEVICE --set SETTING`` uncached in a scratch folder, its
        manifest and metrics kept under results/runs/NAME."""
        runs = self.results / "scratch" / name
        shutil.rmtree(runs, ignore_errors=True)
        outcome = self.pipeline(name, "run", config, "--device", device, "--set", setting, "--runs-dir", runs,
                                "--no-cache", limit=limit)
        outcome["record"] = self.keep_run(name, runs)
        shutil.rmtree(runs, ignore_errors=True)
        return outcome

    def bench_run(self, name: str, device: str, size: str, *, limit: float) -> dict[str, Any]:
        return self.recorded_run(name, "configs/bench_churn.yaml", device, f"stages.raw.path={self.data(size)}",
                                 limit=limit)

    def auto_run(self, name: str, device: str, *, limit: float) -> dict[str, Any]:
        return self.recorded_run(name, "configs/churn_auto.yaml", device, f"stages.auto.time_limit={AUTO_LIMIT}",
                                 limit=limit)

    def wait_for(self, name: str, *, keep: float = 60) -> dict[str, Any] | None:
        """The background step's outcome once it has ended, waiting while more than ``keep``
        seconds of the budget are left."""
        path = self.results / "bg" / f"{name}.json"
        while not path.is_file():
            if self.args.dry_run or self.left() < keep:
                return None
            time.sleep(2)
        return json.loads(path.read_text())

    # ------------------------------------------------------------------ GPU steps
    def step(self, name: str, gpus: int, rapids: bool) -> None:
        done = self.state["steps"].get(name, {})
        if done.get("finished") and not self.args.again:
            print(f"[{name}] done in call {done.get('call')}; skipped (--again reruns it)")
            return
        if not self.args.dry_run and (not gpus or not rapids):
            why = "no device: NVML reports no GPU" if not gpus else "RAPIDS does not import (import_errors)"
            self.record(name, {"finished": False, "skipped": why})
            return
        if self.left() < MIN_STEP_SECONDS[name]:
            self.record(name, {"finished": False, "reason": f"not started: {self.left():.0f} s of the budget left"})
            return
        twin = WAITS_FOR.get(name)
        if twin and self.wait_for(twin) is None and not self.args.dry_run:
            self.record(name, {"finished": False, "reason": f"its CPU twin {twin} has not ended"})
            return
        with self.machine_to_itself(name, timed=name not in UNTIMED):
            outcome = getattr(self, f"run_{name}")()
        outcome.setdefault("finished", not outcome.get("timed_out"))
        self.record(name, outcome)

    def run_smoke(self) -> dict[str, Any]:
        outcome = self.command("smoke", self.python("-c", SMOKE), limit=min(self.left() - 5, 180))
        lines = [line for line in outcome["log_tail"].splitlines() if line.startswith("{")]
        if lines:
            outcome["result"] = json.loads(lines[-1])
        return outcome

    def run_e2e(self) -> dict[str, Any]:
        runs = self.results / "scratch" / "e2e"
        outcome = self.pipeline("e2e", "run", "configs/churn.yaml", "--device", "gpu", "--runs-dir", runs,
                                limit=min(self.left() - 5, 300))
        outcome["record"] = self.keep_run("e2e", runs)
        return outcome

    def run_serve_calls(self) -> dict[str, Any]:
        """The e2e run's exported models served on the GPU: each one's model call timed per batch
        size on the device path and on its host copy (``bench_serve.py --calls``)."""
        run = self.newest_run(self.results / "scratch" / "e2e")
        if run is None and not self.args.dry_run:
            return {"finished": False, "reason": "no e2e run to serve"}
        run = run or self.results / "scratch" / "e2e" / "none"
        outcome: dict[str, Any] = {"run": run.name, "models": {}}
        for model in SERVE_MODELS:
            out = self.results / f"serve-calls-{model}.json"
            done = self.command(f"serve_calls_{model}", self.python(
                CHECKOUT / "scripts" / "bench_serve.py", "--run", run, "--model", model, "--device", "gpu",
                "--sides", "", "--calls", SERVE_CALLS, "--output", out), limit=min(self.left() - 5, 120))
            outcome["models"][model] = {"rc": done["rc"], "log_tail": done["log_tail"][-1500:],
                                        "calls": json.loads(out.read_text())["model_calls"] if out.is_file() else None}
            outcome["timed_out"] = outcome.get("timed_out") or done.get("timed_out")
        return outcome

    def run_members(self) -> dict[str, Any]:
        """Each auto portfolio member's first fit on the GPU backend, then on the host's cores
        (``probe_members.py``): the multiples ``PortfolioMember.device_cost`` is set from."""
        out = self.results / "members.json"
        budget = max(self.left() - 60, 30)
        outcome = self.command("members", self.python(
            KIT / "probe_members.py", "--budget", f"{budget:.0f}", "--out", out), limit=self.left() - 5)
        if out.is_file():                             # written after each table, so also when stopped
            outcome["results"] = json.loads(out.read_text())
        return outcome

    def run_parity(self) -> dict[str, Any]:
        runs = self.results / "scratch" / "parity"
        return self.pipeline("parity", "parity", "configs/churn.yaml", "--runs-dir", runs, "--json",
                             limit=min(self.left() - 5, 300))

    def run_bench_1m(self) -> dict[str, Any]:
        return self.bench_run("gpu_1m", "gpu", "1m", limit=min(self.left() - 5, 300))

    def run_bench_10m(self) -> dict[str, Any]:
        return self.bench_run("gpu_10m", "gpu", "10m", limit=min(self.left() - 5, 400))

    def run_auto(self) -> dict[str, Any]:
        return self.auto_run("auto_gpu", "gpu", limit=min(self.left() - 5, 300))

    def run_gpu_tests(self) -> dict[str, Any]:
        files = [f for f in GPU_TEST_FILES if (CHECKOUT / f).is_file()]
        xml = self.results / "gpu-tests.xml"
        outcome = self.command("gpu_tests", self.python(
            "-m", "pytest", "-m", "gpu", "-q", "-rfEs", "-p", "no:cacheprovider", "-o", "faulthandler_timeout=60",
            "--timeout=90", f"--junitxml={xml}", *files), limit=self.left() - 5)
        outcome["summary"] = outcome["log_tail"].strip().splitlines()[-1:] if outcome["log_tail"].strip() else []
        return outcome

    def run_events(self) -> dict[str, Any]:
        out = self.results / "events.json"
        outcome = self.command("events", self.python(
            CHECKOUT / "scripts" / "bench_events.py", "--sizes", EVENTS_SIZE, "--repeats", "1", "--engines",
            EVENTS_ENGINES, "--data-dir", self.args.data / "events", "--output", out), limit=self.left() - 5)
        if out.is_file():
            outcome["results"] = json.loads(out.read_text())
        return outcome

    # ------------------------------------------------------------------ the call
    def main(self) -> int:
        if self.args.print_env:
            import shlex

            names = ("PYTHONPATH", "LD_LIBRARY_PATH", "LD_PRELOAD", "PATH", "PYTHONUNBUFFERED")
            print("\n".join(f"export {n}={shlex.quote(self.env[n])}" for n in names if n in self.env))
            return 0
        if self.args.background:
            return self.run_background()
        self.state["calls"] += 1
        gpus = self.gpu_count()
        print(f"call {self.state['calls']}: budget {self.args.budget:.0f} s; NVML sees {gpus} GPU(s)", flush=True)
        if "host" not in self.state["steps"]:             # what the host is, once: the card, the image's packages
            smi = self.command("host_nvidia_smi", ["nvidia-smi"], limit=30, always=True) if shutil.which("nvidia-smi") else {}
            freeze = self.command("host_pip_freeze", self.python("-m", "pip", "freeze"), limit=60, always=True)
            self.record("host", {"finished": True, "nvidia_smi_rc": smi.get("rc"), "pip_freeze_rc": freeze["rc"],
                                 "cpus": os.cpu_count()})
        self.start_background()                           # the data needs nothing from the kit
        rc = self.unpack()
        wanted = [s.strip() for s in self.args.steps.split(",") if s.strip()]
        gpus = gpus or self.gpu_count()               # nvidia-ml-py may have just been installed
        base = self.base_ready()
        rapids = base and self.importable("cudf, cuml")
        self.state["device"] = {"gpus_seen_by_nvml": gpus, "base_installed": base, "rapids": rapids, "unpack_rc": rc}
        self.flush()
        if not rapids and not self.args.dry_run:
            print(f"GPU steps wait for RAPIDS (unpack exit {rc}; base installed: {base})", flush=True)
            if self.args.wait_cpu and base:
                self.wait_for_cpu_side()
            return 0
        for name in STEPS:
            if name in wanted:
                self.step(name, gpus, rapids)
        self.flush()
        if self.args.wait_cpu:
            self.wait_for_cpu_side()
        return 0

    def wait_for_cpu_side(self) -> None:
        steps = self.cpu_steps()
        if steps:
            self.wait_for(steps[-1], keep=5)
        self.flush()


def _small_files(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    """Keep the results tarball small: no scratch run folders, nothing over 4 MiB."""
    if "/scratch" in info.name or (info.isfile() and info.size > 4 << 20):
        return None
    return info


def main(argv: list[str] | None = None) -> int:
    return Driver(parse_args(argv)).main()


if __name__ == "__main__":
    sys.exit(main())
