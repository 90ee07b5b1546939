#!/usr/bin/env python3
"""One call on a lent GPU host: install what has arrived, then run the checks in order of value.

    python3 scripts/gpu_kit/drive.py --parts gpu-kit/parts --out "$OUT" [--budget 480] [--steps ...]

A GPU host lent for minutes takes a few calls, each carrying one part of the kit; every call
runs this script. It unpacks the parts present (``unpack.py``, into ``--target``, which stays on
the host between calls), and then runs whichever of these steps can run and were not done in an
earlier call on the same host, most valuable first, each in a process of its own with a time
limit that keeps the whole call inside ``--budget`` seconds:

1. ``probes``: ``probe.py`` (the kit's probes of the project's GPU paths), once the base profile
   is installed;
2. ``gpu_tests``: the ``gpu``-marked tests (``pytest -m gpu``), JUnit XML and the log;
3. ``bench_torch``: ``scripts/bench_torch.py --device cuda`` (hand-off, batches, epoch time);
4. ``e2e``: ``pipeline run configs/churn.yaml --device gpu`` and ``pipeline parity``, only with
   RAPIDS installed;
5. ``bench_churn``: the 1M-row ``configs/bench_churn.yaml`` timed with ``--device gpu`` and
   ``--device cpu``, only with RAPIDS installed.

Results are written as they come into ``--results`` (kept on the host across calls) and, after
every step, packed into ``OUT/results.tar.gz`` next to ``OUT/drive.json`` (the steps' outcomes),
so a call cut short still returns what finished. Two files: the channel back carries at most
eight. Without a GPU the probes say "skipped: no device" and the RAPIDS steps are skipped, so
the script can be rehearsed anywhere.
"""

from __future__ import annotations

import argparse
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
STEPS = ("probes", "gpu_tests", "bench_torch", "e2e", "bench_churn")
# The test modules holding `gpu`-marked tests: collecting only these keeps modules whose imports
# need what the host lacks (the report's browser, MLflow) out of the way.
GPU_TEST_FILES = (
    "test_tensors.py", "test_tensor_gpu_defects.py", "test_torch_tasks.py", "test_torch_ddp.py",
    "test_backend_defects.py", "test_dates.py", "test_events_aggregate.py", "test_events_label.py",
    "test_join.py", "test_parity.py", "test_safe_models.py", "test_distributed_gpu_fixes.py",
)
# A step is started only with at least this many seconds of the call's budget left.
MIN_STEP_SECONDS = {"probes": 60, "gpu_tests": 60, "bench_torch": 45, "e2e": 120, "bench_churn": 150}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", type=Path, default=CHECKOUT / "gpu-kit" / "parts", help="folder of the kit's parts")
    parser.add_argument("--target", type=Path, default=Path("/opt/gpu-kit-site"), help="where wheels are installed")
    parser.add_argument("--results", type=Path, default=Path("/opt/gpu-kit-results"),
                        help="results kept on the host across calls")
    parser.add_argument("--out", type=Path, required=True, help="folder whose files come back")
    parser.add_argument("--budget", type=float, default=480, help="seconds this call may take in all")
    parser.add_argument("--steps", default=",".join(STEPS), help=f"comma-separated subset of {', '.join(STEPS)}")
    parser.add_argument("--again", action="store_true", help="rerun steps an earlier call finished")
    return parser.parse_args(argv)


class Driver:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.deadline = time.monotonic() + args.budget
        self.results: Path = args.results
        self.results.mkdir(parents=True, exist_ok=True)
        self.state_file = self.results / "drive.json"
        self.state: dict[str, Any] = json.loads(self.state_file.read_text()) if self.state_file.is_file() else {}
        self.state.setdefault("calls", 0)
        self.state["calls"] += 1
        self.state.setdefault("steps", {})
        self.env = dict(os.environ)
        self.env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(CHECKOUT), str(args.target), self.env.get("PYTHONPATH", "")) if p)
        self.env["PYTHONUNBUFFERED"] = "1"
        (args.target / "bin").mkdir(parents=True, exist_ok=True)
        self.env["PATH"] = f"{args.target / 'bin'}{os.pathsep}{self.env.get('PATH', '')}"

    # ------------------------------------------------------------------ plumbing
    def left(self) -> float:
        return self.deadline - time.monotonic()

    def command(self, name: str, argv: list[str], *, limit: float, cwd: Path = CHECKOUT) -> dict[str, Any]:
        """Run ``argv`` with its output in ``results/<name>.log``; kill its group past ``limit``."""
        log_path = self.results / f"{name}.log"
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
        tail = log_path.read_text(errors="replace")[-1500:]
        print(f"[{name}] rc={rc} {seconds}s", flush=True)
        return {"argv": argv[1:] if argv[0] == sys.executable else argv, "rc": rc, "seconds": seconds,
                "timed_out": rc is None, "log_tail": tail}

    def record(self, step: str, outcome: dict[str, Any]) -> None:
        self.state["steps"][step] = {**outcome, "call": self.state["calls"]}
        self.flush()

    def flush(self) -> None:
        self.state_file.write_text(json.dumps(self.state, indent=2, default=str))
        out: Path = self.args.out
        out.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(self.state_file, out / "drive.json")
        temporary = out / ".results.tar.gz.tmp"
        with tarfile.open(temporary, "w:gz") as tar:
            tar.add(self.results, arcname="results")
        temporary.replace(out / "results.tar.gz")

    def python(self, *args: str) -> list[str]:
        return [sys.executable, *args]

    # ------------------------------------------------------------------ what is here
    def gpu_count(self) -> int:
        sys.path.insert(0, str(CHECKOUT))
        try:
            from pipeline.backends.detect import probe_nvml
            return len(probe_nvml().devices)
        except Exception:  # noqa: BLE001 - NVML's bindings may be missing before the kit is in
            return 0

    def has_rapids(self) -> bool:
        done = subprocess.run(self.python("-c", "import cudf, cuml"), env=self.env, capture_output=True)
        return done.returncode == 0

    # ------------------------------------------------------------------ steps
    def unpack(self) -> int | None:
        if not (self.args.parts / "manifest.json").is_file():
            self.record("unpack", {"rc": None, "reason": f"no manifest in {self.args.parts}"})
            return None
        outcome = self.command("unpack", self.python(str(KIT / "unpack.py"), str(self.args.parts),
                                                     "--target", str(self.args.target)), limit=self.left())
        history = self.state["steps"].get("unpack", {}).get("history", [])
        outcome["history"] = [*history, {"call": self.state["calls"], "rc": outcome["rc"],
                                         "seconds": outcome["seconds"]}]
        self.record("unpack", outcome)
        return outcome["rc"]

    def base_ready(self) -> bool:
        """Every wheel of the base profile is installed (unpack's record in the target)."""
        manifest = self.args.parts / "manifest.json"
        state = self.args.target / ".gpu-kit-installed.json"
        if not manifest.is_file():
            return False
        wheels = [w for w in json.loads(manifest.read_text())["wheels"] if w.get("profile", "base") == "base"]
        installed = json.loads(state.read_text()).get("installed", {}) if state.is_file() else {}
        return all(installed.get(w["name"]) == w["sha256"] for w in wheels)

    def step(self, name: str, gpus: int, rapids: bool) -> None:
        done = self.state["steps"].get(name, {})
        if done.get("finished") and not self.args.again:
            print(f"[{name}] done in call {done.get('call')}; skipped (--again reruns it)")
            return
        if self.left() < MIN_STEP_SECONDS[name]:
            self.record(name, {"finished": False, "reason": f"not started: {self.left():.0f} s of the budget left"})
            return
        if name in ("e2e", "bench_churn") and not rapids:
            self.record(name, {"finished": True, "skipped": "RAPIDS not installed (cudf, cuml)"})
            return
        if name != "probes" and not gpus:
            self.record(name, {"finished": True, "skipped": "no device: NVML reports no GPU"})
            return
        outcome = getattr(self, f"run_{name}")()
        outcome.setdefault("finished", not outcome.get("timed_out"))
        self.record(name, outcome)

    def pending_probes(self) -> list[str]:
        """Probes not yet passed whose modules are installed (XGBoost arrives in a later part)."""
        from gpu_kit.probes import PROBES

        passed = self.state.get("probes", {})
        importable = subprocess.run(
            self.python("-c", "import importlib.util, sys; print(' '.join(m for m in sys.argv[1:] "
                              "if importlib.util.find_spec(m)))", *{m for p in PROBES.values() for m in p.needs}),
            env=self.env, capture_output=True, text=True).stdout.split()
        return [name for name, probe in PROBES.items()
                if passed.get(name, {}).get("status") != "passed"
                and (name == "rapids_stages" or all(m in importable for m in probe.needs))]

    def run_probes(self) -> dict[str, Any]:
        names = self.pending_probes()
        if not names:
            return {"finished": True, "reason": "every probe passed in an earlier call or waits for its modules"}
        out = self.results / f"probes-call{self.state['calls']}"
        limit = self.left() - 5
        # Every probe gets a share of what is left, so one hung probe cannot starve the rest.
        outcome = self.command("probes", self.python(str(KIT / "probe.py"), "--out", str(out), "--only", ",".join(names),
                                                     "--timeout", str(max(min(limit / 3, 240), 30))), limit=limit)
        for name in names:
            result = out / f"{name}.json"
            if result.is_file():
                data = json.loads(result.read_text())
                self.state.setdefault("probes", {})[name] = {
                    "status": data["status"], "reason": data["reason"], "seconds": data.get("seconds"),
                    "call": self.state["calls"]}
        outcome["probes"] = {n: self.state.get("probes", {}).get(n) for n in names}
        # Done once no probe is left to pass.
        from gpu_kit.probes import PROBES
        outcome["finished"] = all(self.state.get("probes", {}).get(n, {}).get("status") in ("passed", "skipped")
                                  for n in PROBES)
        return outcome

    def run_gpu_tests(self) -> dict[str, Any]:
        files = [f"tests/{f}" for f in GPU_TEST_FILES if (CHECKOUT / "tests" / f).is_file()]
        xml = self.results / "gpu-tests.xml"
        outcome = self.command("gpu_tests", self.python(
            "-m", "pytest", "-m", "gpu", "-q", "-rfEs", "-p", "no:cacheprovider", "-o", "faulthandler_timeout=120",
            "--timeout=300", f"--junitxml={xml}", *files), limit=self.left() - 5)
        outcome["summary"] = outcome["log_tail"].strip().splitlines()[-1:] if outcome["log_tail"].strip() else []
        return outcome

    def run_bench_torch(self) -> dict[str, Any]:
        out = self.results / "bench-torch.json"
        outcome = self.command("bench_torch", self.python(str(CHECKOUT / "scripts" / "bench_torch.py"), "--device", "cuda",
                                                          "--output", str(out)), limit=min(self.left() - 5, 240))
        if out.is_file():
            outcome["results"] = json.loads(out.read_text())
        return outcome

    def pipeline(self, name: str, *args: str, limit: float) -> dict[str, Any]:
        return self.command(name, self.python("-m", "pipeline", *args), limit=limit)

    def run_e2e(self) -> dict[str, Any]:
        runs = self.results / "runs"
        run = self.pipeline("e2e_run", "run", "configs/churn.yaml", "--device", "gpu", "--runs-dir", str(runs),
                            limit=min(self.left() - 5, 300))
        parity = self.pipeline("e2e_parity", "parity", "configs/churn.yaml", "--runs-dir", str(runs),
                               limit=max(min(self.left() - 5, 300), 1))
        return {"run": run, "parity": parity, "timed_out": run["timed_out"] or parity["timed_out"]}

    def run_bench_churn(self) -> dict[str, Any]:
        data = self.results / "bench-data" / "churn_1000000_s0.csv"
        gen = {"rc": 0}
        if not data.is_file():
            gen = self.command("bench_churn_data", self.python(str(CHECKOUT / "scripts" / "generate_churn.py"),
                                                               "--rows", "1000000", "--output", str(data)), limit=120)
        timings: dict[str, Any] = {"generate": gen}
        for device in ("gpu", "cpu"):
            timings[device] = self.pipeline(f"bench_churn_{device}", "run", "configs/bench_churn.yaml",
                                            "--device", device, "--set", f"stages.raw.path={data}",
                                            "--runs-dir", str(self.results / "bench-runs"), "--no-cache",
                                            limit=max(min(self.left() - 5, 240), 1))
        timings["timed_out"] = any(v.get("timed_out") for v in timings.values() if isinstance(v, dict))
        return timings

    # ------------------------------------------------------------------ the call
    def main(self) -> int:
        gpus = self.gpu_count()
        self.state["device"] = {"gpus_seen_by_nvml": gpus}
        print(f"budget {self.args.budget:.0f} s; NVML sees {gpus} GPU(s)", flush=True)
        if "host" not in self.state["steps"]:             # what the host is, once: the card, the image's packages
            smi = self.command("host_nvidia_smi", ["nvidia-smi"], limit=30) if shutil.which("nvidia-smi") else {}
            freeze = self.command("host_pip_freeze", self.python("-m", "pip", "freeze"), limit=60)
            self.record("host", {"finished": True, "nvidia_smi_rc": smi.get("rc"), "pip_freeze_rc": freeze["rc"]})
        rc = self.unpack()
        wanted = [s.strip() for s in self.args.steps.split(",") if s.strip()]
        gpus = gpus or self.gpu_count()               # nvidia-ml-py may have just been installed
        base = self.base_ready()
        rapids = base and self.has_rapids()
        self.state["device"].update({"gpus_seen_by_nvml": gpus, "base_installed": base, "rapids": rapids,
                                     "unpack_rc": rc})
        for name in STEPS:
            if name not in wanted:
                continue
            if name != "probes" and not base:
                print(f"[{name}] waits for the rest of the base profile (unpack exit {rc})")
                continue
            self.step(name, gpus, rapids)
        self.flush()
        return 0


def main(argv: list[str] | None = None) -> int:
    return Driver(parse_args(argv)).main()


if __name__ == "__main__":
    sys.exit(main())
