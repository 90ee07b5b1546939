"""Shared pieces of the adversarial suite: a tiny project, a case table's shape, and the one
checker every case goes through.

A case is a real ``pipeline`` command run as a subprocess in its own copy of a tiny project
that already holds one succeeded run. The checker holds every case to what the README promises
an unattended job: the documented exit code, one paragraph on stderr that names the offending
thing (no traceback), nothing left looking finished or still running, and the earlier run
(``latest``, its artifacts) exactly as it was.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tests.support.cli import exit_status

CONFIG = "configs/tiny.yaml"
DATA = "data/tiny.csv"
INCOMING = "incoming/new.csv"
PIPELINE = "tiny"
TARGET = "churned"
ID = "cust_id"

TINY_CONFIG = f"""\
name: {PIPELINE}
device: cpu
seed: 7
stages:
  raw:
    kind: load
    path: {DATA}
  split:
    kind: split
    inputs: [raw]
    target: {TARGET}
    positive: "Yes"
    test: 0.25
  features:
    kind: features
    inputs: [split]
    id: {ID}
    ops:
      - one_hot: {{columns: [plan]}}
      - standardize: {{columns: [amount, visits]}}
  logit:
    kind: train
    inputs: [features]
    model: logistic_regression
  evaluate:
    kind: evaluate
    inputs: [logit]
  export:
    kind: export
    inputs: [logit]
"""

# A python stage that says when it has started and then sleeps: something to interrupt.
NAPPER = """\
import pathlib
import time


def nap(ctx, inputs, marker="napping", seconds=60.0):
    pathlib.Path(marker).write_text("started")
    time.sleep(seconds)
    return {}
"""

# Run a command as `python -m pipeline` with resource limits, so that a defect (an alias bomb
# that expands without bound) fails the case instead of exhausting the test machine.
LAUNCHER = """\
import os, resource, runpy, sys
for name in ("AS", "FSIZE"):
    value = os.environ.get("ADVERSARIAL_RLIMIT_" + name)
    if value:
        limit = int(value)
        resource.setrlimit(getattr(resource, "RLIMIT_" + name), (limit, limit))
sys.argv = ["pipeline", *sys.argv[1:]]
runpy.run_module("pipeline", run_name="__main__", alter_sys=True)
"""

DOCUMENTED_EXIT_CODES = frozenset({0, 2, 3, 4, 5, 6, 7, 130, 143})


def tiny_frame(rows: int = 120, seed: int = 0) -> pd.DataFrame:
    """Two numeric columns, one categorical, an id and a Yes/No target that depends on them."""
    rng = np.random.default_rng(seed)
    amount = rng.normal(50.0, 20.0, rows).round(2)
    visits = rng.integers(0, 12, rows)
    plan = rng.choice(["basic", "plus", "pro"], rows)
    signal = (amount - 50.0) / 20.0 + rng.normal(0.0, 0.7, rows)
    return pd.DataFrame({ID: [f"c{i:04d}" for i in range(rows)], "plan": plan, "amount": amount,
                         "visits": visits, TARGET: np.where(signal > 0, "Yes", "No")})


def write_tiny_project(folder: Path) -> Path:
    """``folder`` with the tiny config, its data, a file of new rows to score and the napper."""
    (folder / "configs").mkdir(parents=True)
    (folder / "data").mkdir()
    (folder / "incoming").mkdir()
    (folder / CONFIG).write_text(TINY_CONFIG)
    (folder / "configs" / "napper.py").write_text(NAPPER)
    frame = tiny_frame()
    frame.to_csv(folder / DATA, index=False)
    tiny_frame(rows=30, seed=1).drop(columns=[TARGET]).to_csv(folder / INCOMING, index=False)
    return folder


def cli_command(args: Iterable[str]) -> list[str]:
    return [sys.executable, "-c", LAUNCHER, *args]


def cli_env(**extra: str) -> dict[str, str]:
    return {**os.environ, **extra}


def run_cli(args: Iterable[str], cwd: Path, *, timeout: float = 120.0, env: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess[str]:
    """``pipeline ARGS`` in ``cwd``; a run past ``timeout`` comes back with exit code -9 and a
    note on stderr, so one hung case fails alone instead of stopping the suite."""
    try:
        return subprocess.run(cli_command(args), cwd=cwd, env=env or cli_env(), capture_output=True,
                              text=True, errors="replace", timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        return subprocess.CompletedProcess(exc.cmd, -9, out, err + f"\n[timed out after {timeout:g} s]")


# ------------------------------------------------------------------ many processes at once
ROOT = Path(__file__).resolve().parents[2]
MAIN_SCRIPT = str(ROOT / "pipeline" / "__main__.py")
PRELOAD = ("pipeline.cli.app", "pipeline.engine.runner", "pipeline.predict.batch", "pipeline.scoring.model_folder", "pipeline.runs.history",
           "pipeline.stages", "pipeline.features", "pipeline.models", "sklearn.linear_model",
           "sklearn.model_selection", "sklearn.metrics", "pyarrow.parquet", "skops.io")


def preload() -> None:
    """Import what the cases import, once, in the zygote they are forked from (a module this
    environment lacks is left to the cases)."""
    import importlib

    for module in PRELOAD:
        try:
            importlib.import_module(module)
        except ImportError:
            pass


@dataclass
class Launch:
    """How one case's process starts and is driven.

    ``exec_``: a fresh ``python`` running ``pipeline`` (interpreter start and shutdown as a
    user gets them); otherwise a fork of the zygote, a fresh interpreter that has imported the
    package once, running the same ``pipeline.cli.app.main`` with the case's argv, streams, working
    directory, environment and limits. ``signal`` is sent once ``trigger`` holds (a file
    exists, that many seconds passed, or ``("open", path)``: the process has that file open);
    ``holder`` is started first and must write ``holder_ready``.
    """

    args: list[str]
    cwd: Path
    env: dict[str, str]
    timeout: float = 120.0
    exec_: bool = False
    signal: int | None = None
    trigger: Path | float | tuple[str, Path] | None = None
    holder: list[str] | None = None
    holder_ready: Path | None = None


@dataclass
class Finished:
    args: list[str]
    returncode: int
    stdout: str
    stderr: str
    cpu_seconds: float


def _apply_limits(env: dict[str, str]) -> None:
    import resource

    for name in ("AS", "FSIZE"):
        value = env.get("ADVERSARIAL_RLIMIT_" + name)
        if value:
            resource.setrlimit(getattr(resource, "RLIMIT_" + name), (int(value), int(value)))


def _forked_child(args: list[str], cwd: str, env: dict[str, str], out: str, err: str) -> None:
    """In a fork of the zygote: become ``python -m pipeline ARGS`` and exit with its code."""
    code = 1
    try:
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(env)
        _apply_limits(env)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        os.dup2(os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), 1)
        os.dup2(os.open(err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), 2)
        sys.stdin = open(0, closefd=False)
        sys.stdout = open(1, "w", closefd=False, errors="backslashreplace")
        sys.stderr = open(2, "w", closefd=False, errors="backslashreplace")
        import signal

        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        sys.argv = [MAIN_SCRIPT, *args]
        from pipeline.cli.app import main

        try:
            main()
            code = 0
        except SystemExit as exc:
            code = exit_status(exc.code, sys.stderr)
        except BaseException:  # noqa: BLE001 - what the interpreter would print and exit 1 on
            import traceback

            traceback.print_exc()
            code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def zygote_main() -> None:
    """A fresh interpreter that preloads the package, then forks one child per request line
    on stdin (JSON: key, args, cwd, env, out, err) and reports on stdout, one JSON line each,
    ``{"key", "pid"}`` when a child started and ``{"key", "status", "cpu"}`` when it ended."""
    import select

    preload()
    children: dict[int, str] = {}
    buffer, closed = b"", False

    def say(message: dict) -> None:
        os.write(1, (json.dumps(message) + "\n").encode())

    while not closed or children:
        if not closed and select.select([0], [], [], 0.01)[0]:
            chunk = os.read(0, 65536)
            closed = not chunk
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                request = json.loads(line)
                pid = os.fork()
                if pid == 0:
                    _forked_child(request["args"], request["cwd"], request["env"], request["out"], request["err"])
                children[pid] = request["key"]
                say({"key": request["key"], "pid": pid})
        elif closed:
            time.sleep(0.01)
        while children:
            pid, status, usage = os.wait4(-1, os.WNOHANG)
            if not pid:
                break
            say({"key": children.pop(pid), "status": status, "cpu": usage.ru_utime + usage.ru_stime})


ZYGOTE = "from tests.support.bad_inputs import zygote_main; zygote_main()"


def interruptible() -> None:
    """In the child before exec: SIGINT back to its default, as at a terminal. A job started in
    the background of a non-interactive shell (a CI script's ``cmd &``) inherits SIGINT ignored,
    and Python then never raises KeyboardInterrupt: the Ctrl-C cases would test the shell."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Zygote:
    """The parent's end of ``zygote_main``."""

    def __init__(self) -> None:
        path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
        self.proc = subprocess.Popen([sys.executable, "-c", ZYGOTE], cwd=ROOT, env={**os.environ, "PYTHONPATH": path},
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.buffer = b""
        self.ended: dict[str, tuple[int, float]] = {}

    def start(self, key: str, launch: Launch, out: Path, err: Path) -> int:
        request = {"key": key, "args": launch.args, "cwd": str(launch.cwd), "env": launch.env,
                   "out": str(out), "err": str(err)}
        self.proc.stdin.write((json.dumps(request) + "\n").encode())
        self.proc.stdin.flush()
        while True:
            for message in self._messages(block=True):
                if message.get("key") == key and "pid" in message:
                    return message["pid"]

    def poll(self) -> None:
        for _ in self._messages(block=False):
            pass

    def _messages(self, *, block: bool) -> list[dict]:
        import select

        fd = self.proc.stdout.fileno()
        if block or select.select([fd], [], [], 0)[0]:
            chunk = os.read(fd, 65536)
            if not chunk:
                raise RuntimeError(f"the zygote ended (exit {self.proc.wait()})")
            self.buffer += chunk
        messages = []
        while b"\n" in self.buffer:
            line, self.buffer = self.buffer.split(b"\n", 1)
            message = json.loads(line)
            if "status" in message:
                self.ended[message["key"]] = (message["status"], message["cpu"])
            messages.append(message)
        return messages

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


class _Running:
    def __init__(self, key: str, launch: Launch, outdir: Path, zygote: Zygote) -> None:
        self.key, self.launch, self.zygote = key, launch, zygote
        self.out, self.err = outdir / f"{key}.stdout", outdir / f"{key}.stderr"
        self.holder: subprocess.Popen | None = None
        self.signalled = False
        self.note = ""
        if launch.holder:
            self.holder = subprocess.Popen(launch.holder, cwd=launch.cwd, env=launch.env,
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + 60
            while not launch.holder_ready.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
        self.started = time.monotonic()
        self.pid = self._start()

    def _start(self) -> int:
        if self.launch.exec_:
            with open(self.out, "wb") as out, open(self.err, "wb") as err:
                proc = subprocess.Popen(cli_command(self.launch.args), cwd=self.launch.cwd, env=self.launch.env,
                                        stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                        preexec_fn=interruptible)
            proc.returncode = 0          # reaped below with os.wait4; keep Popen from reaping it
            return proc.pid
        return self.zygote.start(self.key, self.launch, self.out, self.err)

    def drive(self) -> None:
        """Send the signal once its trigger holds; kill past the timeout."""
        launch, now = self.launch, time.monotonic()
        if launch.signal is not None and not self.signalled:
            if isinstance(launch.trigger, Path):
                ready = launch.trigger.exists()
            elif isinstance(launch.trigger, tuple):
                ready = _has_open(self.pid, launch.trigger[1])
            else:
                ready = now - self.started >= float(launch.trigger or 0)
            if ready:
                os.kill(self.pid, launch.signal)
                self.signalled = True
        if now - self.started > launch.timeout and not self.note:
            self.note = f"\n[killed: still running after {launch.timeout:g} s]"
            os.kill(self.pid, 9)

    def ended(self) -> tuple[int, float] | None:
        if not self.launch.exec_:
            return self.zygote.ended.get(self.key)
        pid, status, usage = os.wait4(self.pid, os.WNOHANG)
        return (status, usage.ru_utime + usage.ru_stime) if pid else None

    def finish(self, status: int, cpu: float) -> Finished:
        if self.holder is not None:
            self.holder.kill()
            self.holder.wait()
        code = os.waitstatus_to_exitcode(status)
        read = lambda p: p.read_bytes().decode("utf-8", errors="replace") if p.exists() else ""  # noqa: E731
        return Finished(self.launch.args, code, read(self.out), read(self.err) + self.note, cpu)


def _has_open(pid: int, path: Path) -> bool:
    """Whether process ``pid`` has ``path`` open (Linux /proc)."""
    folder = Path(f"/proc/{pid}/fd")
    try:
        return any(os.readlink(folder / fd) == str(path) for fd in os.listdir(folder))
    except OSError:
        return False


def run_processes(launches: dict[str, Launch], outdir: Path, *, workers: int) -> dict[str, Finished]:
    """Run every launch, ``workers`` at a time; forks happen in the zygote, a fresh
    single-threaded interpreter, never in this (pytest's) process."""
    pending = list(launches.items())
    running: dict[str, _Running] = {}
    done: dict[str, Finished] = {}
    zygote = Zygote()
    try:
        while pending or running:
            while pending and len(running) < workers:
                key, launch = pending.pop(0)
                running[key] = _Running(key, launch, outdir, zygote)
            zygote.poll()
            for key, job in list(running.items()):
                job.drive()
                ended = job.ended()
                if ended is not None:
                    done[key] = job.finish(*ended)
                    del running[key]
            time.sleep(0.02)
    finally:
        zygote.close()
    return done


# ------------------------------------------------------------------ the case table
Setup = Callable[[Path], "dict[str, str] | None"]
Check = Callable[[Path, "Finished"], "list[str]"]


@dataclass(frozen=True)
class Case:
    """One bad input: the command, how to prepare the project, and what must come of it.

    ``expect``: the documented exit code(s). ``names``: a failure's message must contain one of
    these (the offending key, column, file, stage, option or address). ``args`` may hold
    ``{placeholders}`` that ``setup`` returns (a run id it made, a port it opened).
    """

    id: str
    args: tuple[str, ...]
    expect: frozenset[int]
    names: tuple[str, ...] = ()
    setup: Setup | None = None
    check: Check | None = None
    env: dict[str, str] = field(default_factory=dict)
    timeout: float = 120.0
    exec_: bool = False
    abandoned_ok: bool = False


def case(id: str, args: Iterable[str], expect: int | Iterable[int], names: str | Iterable[str] = (), *,
         setup: Setup | None = None, check: Check | None = None, env: dict[str, str] | None = None,
         timeout: float = 120.0, exec_: bool = False, abandoned_ok: bool = False) -> Case:
    """``exec_``: run it in a fresh interpreter (what happens at start-up and shutdown matters:
    a Dask client torn down at exit, a signal handler). ``abandoned_ok``: the disk refuses the
    final write of the run record, so a record left 'running' is acceptable when ``runs list``
    reports it as abandoned (``check`` says so)."""
    expected = frozenset([expect] if isinstance(expect, int) else expect)
    named = (names,) if isinstance(names, str) else tuple(names)
    return Case(id, tuple(args), expected, named, setup, check, dict(env or {}), timeout, exec_, abandoned_ok)


# ------------------------------------------------------------------ what a project holds
def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run_folders(project: Path, runs_dir: str = "runs") -> dict[str, Path]:
    """Every run folder (a folder holding manifest.json) under ``runs_dir``, by relative path."""
    root = project / runs_dir
    if not root.is_dir():
        return {}
    return {str(p.parent.relative_to(root)): p.parent for p in root.glob("*/*/manifest.json")}


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def latest_target(project: Path, runs_dir: str = "runs", pipeline: str = PIPELINE) -> str | None:
    link = project / runs_dir / pipeline / "latest"
    try:
        return os.readlink(link)
    except OSError:
        return None


@dataclass(frozen=True)
class Snapshot:
    """What must not change behind a failed command's back."""

    top_level: frozenset[str]
    runs: frozenset[str]
    latest: str | None
    earlier: dict[str, str]           # artifact -> sha256 of the earlier (base) run


def snapshot(project: Path, base_run: str | None) -> Snapshot:
    """Taken after a case's setup: the earlier run as the setup left it (some cases damage it
    on purpose), file by file."""
    earlier: dict[str, str] = {}
    if base_run:
        run_dir = project / "runs" / PIPELINE / base_run
        earlier = {str(p.relative_to(run_dir)): sha256(p) for p in sorted(run_dir.rglob("*")) if p.is_file()}
    return Snapshot(frozenset(p.name for p in project.iterdir()), frozenset(run_folders(project)),
                    latest_target(project), earlier)


# ------------------------------------------------------------------ the checker
ERROR_START = re.compile(r"^(internal error|error)\b.*:|^\{.*\"event\": \"error\"", re.IGNORECASE)


def blank_line_inside(text: str) -> bool:
    lines = text.strip("\n").splitlines()
    return any(not line.strip() for line in lines)


def error_message(stderr: str) -> str:
    """The error the command reported: from its first ``error:`` line to the end (log lines of
    a run come before it), or all of stderr when no line starts that way."""
    lines = stderr.strip("\n").splitlines()
    for i, line in enumerate(lines):
        if ERROR_START.match(line.strip()):
            return "\n".join(lines[i:])
    return "\n".join(lines)


def message_problems(stderr: str, names: tuple[str, ...]) -> list[str]:
    """stderr of a failed command: one paragraph, no traceback, naming the offending thing."""
    problems = []
    if not stderr.strip():
        return ["nothing on stderr"]
    if blank_line_inside(stderr):
        problems.append("stderr is more than one paragraph")
    message = error_message(stderr)
    if names and not any(name in message for name in names):
        problems.append(f"the message names none of {list(names)}")
    return problems


def noise_problems(stderr: str) -> list[str]:
    problems = []
    for marker in ("Traceback (most recent call last)", "Exception ignored"):
        if marker in stderr:
            problems.append(f"stderr holds {marker!r}")
    return problems


def state_problems(project: Path, before: Snapshot, returncode: int, base_run: str | None, *,
                   abandoned_ok: bool = False) -> list[str]:
    """Nothing left running, nothing new looks finished after a failure, the earlier run intact,
    nothing written outside the project's known folders."""
    problems = []
    for rel, folder in run_folders(project).items():
        if rel in before.runs:
            continue                      # a run a case's setup made (a corrupt one, on purpose)
        manifest = read_json(folder / "manifest.json")
        status = manifest.get("status") if isinstance(manifest, dict) else None
        if status == "running" and not abandoned_ok:
            problems.append(f"run {rel} is left 'running'")
        if returncode != 0 and status == "succeeded":
            problems.append(f"the failed command left run {rel} marked 'succeeded'")
    if returncode != 0 and latest_target(project) != before.latest:
        problems.append(f"'latest' moved from {before.latest} to {latest_target(project)}")
    if base_run:
        run_dir = project / "runs" / PIPELINE / base_run
        for name, digest in before.earlier.items():
            if not (run_dir / name).is_file() or sha256(run_dir / name) != digest:
                problems.append(f"the earlier run's {name} changed or disappeared")
    new_top = {p.name for p in project.iterdir()} - before.top_level - {"out", "runs"}
    if new_top:
        problems.append(f"written outside the runs folder: {sorted(new_top)}")
    return problems


def output_problems(project: Path, returncode: int) -> list[str]:
    """predict's --output goes under out/ (absent before): after a failure nothing may be there."""
    out = project / "out"
    if returncode != 0 and out.exists():
        left = sorted(str(p.relative_to(out)) for p in out.rglob("*")) if out.is_dir() else ["out (a file)"]
        if left:
            return [f"a failed predict left {left} in the output folder"]
    return []


def check_case(case: Case, project: Path, before: Snapshot, proc: Finished,
               base_run: str | None) -> list[str]:
    problems = []
    if proc.returncode not in case.expect:
        problems.append(f"exit {proc.returncode}, expected {sorted(case.expect)}")
    problems += noise_problems(proc.stderr)
    if proc.returncode != 0:
        problems += message_problems(proc.stderr, case.names)
    problems += state_problems(project, before, proc.returncode, base_run, abandoned_ok=case.abandoned_ok)
    problems += output_problems(project, proc.returncode)
    if case.check is not None:
        problems += case.check(project, proc)
    return problems


def describe(case: Case, proc: Finished, problems: list[str]) -> str:
    tail = proc.stderr.strip()[-1500:]
    return (f"{case.id}: " + "; ".join(problems) + f"\n  command: pipeline {' '.join(proc.args)}"
            f"\n  exit code: {proc.returncode}\n  stderr (tail):\n{tail}")


def copy_project(base: Path, destination: Path) -> Path:
    """A copy of the base project (symlinks kept: ``latest`` must stay a link)."""
    shutil.copytree(base, destination, symlinks=True)
    return destination
