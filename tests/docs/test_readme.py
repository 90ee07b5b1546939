"""The examples of the README and of every page of the docs site, run as written, so they stay true.

Every ```python block runs as a script and every ``$ pipeline ...`` line of a ```console
block runs as a command, in a copy of the project. The README's commands run in a new shell that
has only activated the environment, as its set-up says; the guides' commands and the scripts
run in this process (the suite's CLI runner: the same entry point, a fresh process's state),
except a script whose spawned workers import it, which runs as ``python FILE``. The crontab
lines and the systemd ``ExecStart`` run as the scheduler would run them. The only rewrites are the ones a reader
makes too: ``/srv/churn`` is the project folder, ``.venv/bin/`` this environment's scripts,
the placeholder ``tcp://scheduler:8786`` the address of a real scheduler started here on
127.0.0.1, and run ids in ``runs diff`` the ids of runs that exist. The inputs the examples
score (``new_customers.csv``, ``incoming/``) are the bundled data without its label.
"""

from __future__ import annotations

import configparser
import json
import os
import re
import shlex
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import DASK_START_METHOD, ROOT, TELCO, copy_project
from tests.support.cli import run_cli, run_script

README = ROOT / "README.md"
DOCS = ROOT / "docs"
BIN = Path(sys.executable).parent
PLACEHOLDER = "tcp://scheduler:8786"
# The example that the other examples build on (it makes the runs they show, list and score).
SETUP_EXAMPLE = DOCS / "guides" / "library.md"


def documents() -> list[Path]:
    """The README, then every page of the docs site (the generated references hold no examples)."""
    return [README, *sorted(p for p in DOCS.rglob("*.md") if p.parent.name != "reference" or p.stem == "exit-codes")]


@dataclass(frozen=True)
class Block:
    language: str
    line: int
    text: str
    source: Path = README

    @property
    def where(self) -> str:
        return f"{self.source.relative_to(ROOT)}:{self.line}"

    @property
    def id(self) -> str:
        return f"{self.language}-{self.where}"


def file_blocks(path: Path, language: str) -> list[Block]:
    blocks, current, start, lines = [], None, 0, path.read_text(encoding="utf-8").splitlines()
    for number, line in enumerate(lines, start=1):
        fence = re.match(r"^```(\w*)\s*$", line)
        if fence and current is None:
            current, start, body = fence.group(1), number, []
        elif line.startswith("```") and current is not None:
            if current == language:
                blocks.append(Block(language, start, "\n".join(body) + "\n", path))
            current = None
        elif current is not None:
            body.append(line)
    return blocks


def doc_blocks(language: str) -> list[Block]:
    return [block for path in documents() for block in file_blocks(path, language)]


def setup_example() -> Block:
    return file_blocks(SETUP_EXAMPLE, "python")[0]


def console_commands() -> list[tuple[str, str]]:
    """``$ pipeline ...`` lines of the console blocks (``make`` targets are what CI runs)."""
    out = []
    for block in doc_blocks("console"):
        for offset, line in enumerate(block.text.splitlines(), start=1):
            if line.startswith("$ pipeline "):
                command = re.sub(r"\s+#.*$", "", line[2:])          # trailing comments
                out.append((f"{block.source.relative_to(ROOT)}:{block.line + offset}", command))
    return out


def activate_script() -> Path | None:
    """The environment's own ``activate``, which the README's set-up tells a new shell to source."""
    script = Path(sys.prefix) / "bin" / "activate"
    return script if sys.prefix != sys.base_prefix and script.is_file() else None


def _env(*, activated: bool = False) -> dict[str, str]:
    path = os.environ.get("PATH", "")
    if activated:                                   # a new shell: the environment is not on PATH yet
        path = os.pathsep.join(p for p in path.split(os.pathsep) if Path(p) != BIN)
    else:
        path = f"{BIN}{os.pathsep}{path}"
    env = {key: value for key, value in os.environ.items() if key != DASK_START_METHOD}   # Dask's default
    return {**env, "PATH": path, "PYTHONPATH": str(ROOT), "COLUMNS": "80", "PYTHONUNBUFFERED": "1"}


def _shell(command: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=_env(), capture_output=True, text=True,
                          timeout=timeout)


def _new_shell(command: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    """``command`` as the README runs it: a new shell that sourced the environment's activate."""
    script = activate_script()
    if script is None:                              # not run from a virtualenv: its scripts on PATH
        return _shell(command, cwd, timeout)
    return subprocess.run(["bash", "-c", f"source {shlex.quote(str(script))} && {command}"], cwd=cwd,
                          env=_env(activated=True), capture_output=True, text=True, timeout=timeout)


def _adapt(text: str, project: Path, scheduler: str) -> str:
    text = re.sub(r"(/srv/churn/)?\.venv/bin/", lambda _: f"{BIN}/", text)
    return text.replace("/srv/churn", str(project)).replace(PLACEHOLDER, scheduler)


@pytest.fixture(scope="module")
def project_dir(tmp_path_factory) -> Path:
    """A copy of the project with the scoring inputs the examples name."""
    project = copy_project(tmp_path_factory.mktemp("readme"))
    rows = pd.read_csv(TELCO, dtype=str, keep_default_na=False).drop(columns=["Churn"])
    rows.to_csv(project / "new_customers.csv", index=False)
    (project / "incoming").mkdir()
    rows.iloc[:3000].to_csv(project / "incoming" / "part-0.csv", index=False)
    rows.iloc[3000:].to_csv(project / "incoming" / "part-1.csv", index=False)
    return project


@pytest.fixture(scope="module")
def scheduler(project_dir):
    """A real Dask scheduler and worker on 127.0.0.1, started in the project folder as an
    operator would start them beside the data (the config's paths are relative)."""
    script = textwrap.dedent("""
        import sys
        from distributed import LocalCluster
        with LocalCluster(n_workers=1, threads_per_worker=1, host="127.0.0.1", dashboard_address=None,
                          processes=True) as cluster:
            print(cluster.scheduler_address, flush=True)
            sys.stdin.read()
    """)
    process = subprocess.Popen([sys.executable, "-c", script], cwd=project_dir, stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True, env=_env())
    address = process.stdout.readline().strip()
    assert address.startswith("tcp://127.0.0.1:"), address
    yield address
    process.stdin.close()
    process.wait(timeout=60)


@pytest.fixture(scope="module")
def readme_project(project_dir, scheduler) -> Path:
    """The project after the library page's first example ran in it (three runs)."""
    _run_python(setup_example(), project_dir, scheduler, project_dir / "first_example.py")
    return project_dir


def _run_python(block: Block, project: Path, scheduler: str, script: Path) -> subprocess.CompletedProcess:
    source = _adapt(block.text, project, scheduler)
    script.write_text(source, encoding="utf-8")
    if _spawns_importers(source):
        done = subprocess.run([sys.executable, str(script)], cwd=project, env=_env(), capture_output=True,
                              text=True, timeout=900)
    else:
        done = run_script(script, cwd=project, env=_env())
    assert done.returncode == 0, f"python block at {block.where} failed:\n{done.stderr[-4000:]}"
    return done


def _spawns_importers(source: str) -> bool:
    """A script guarded by ``if __name__ == "__main__":`` starts processes that import it (a local
    Dask cluster's workers, DDP ranks): it runs as ``python FILE``, as its reader would run it."""
    return re.search(r"^if __name__ == .__main__.:", source, re.MULTILINE) is not None


def run_ids(project: Path) -> list[str]:
    folder = project / "runs" / "churn"
    return sorted(p.name for p in folder.iterdir() if p.is_dir() and not p.is_symlink() and not p.name.startswith("."))


def test_the_docs_have_the_examples_these_tests_run():
    assert len(doc_blocks("python")) >= 5
    assert any("predict" in command for _, command in console_commands())
    assert all("10.0." not in block.text and "192.168." not in block.text
               for language in ("python", "console", "cron", "bash", "yaml") for block in doc_blocks(language))


def test_the_readme_is_short_and_its_setup_puts_pipeline_on_path():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    setup = next(b for b in file_blocks(README, "console") if "make setup" in b.text)
    assert "source .venv/bin/activate" in setup.text
    assert file_blocks(README, "console") and any(w.startswith("README.md:") for w, _ in console_commands())


def test_a_new_shell_without_activation_has_no_pipeline_command(tmp_path):
    """The check below means something: without sourcing activate, `pipeline` is not found."""
    if activate_script() is None:
        pytest.skip("the tests do not run from a virtualenv")
    done = subprocess.run(["bash", "-c", "command -v pipeline || echo missing"], cwd=tmp_path,
                          env=_env(activated=True), capture_output=True, text=True)
    assert Path(done.stdout.strip()).parent != BIN


def test_first_library_example_ran_three_runs(readme_project):
    statuses = [json.loads((readme_project / "runs" / "churn" / run / "manifest.json").read_text())["status"]
                for run in run_ids(readme_project)]
    assert statuses == ["succeeded"] * 3


@pytest.mark.parametrize("block", [b for b in doc_blocks("python") if b != setup_example()], ids=lambda b: b.id)
def test_python_example(block, readme_project, scheduler):
    done = _run_python(block, readme_project, scheduler, readme_project / f"example_{block.line}.py")
    if "print(" in block.text:
        assert done.stdout.strip(), "the example prints something"


@pytest.mark.parametrize("where,command", console_commands(), ids=lambda v: v if ".md:" in v else "")
def test_console_command(where, command, readme_project):
    ids = iter(run_ids(readme_project))
    command = re.sub(r"\b\d{8}T\d{4}\b", lambda _: next(ids), command)
    if where.startswith("README.md:"):           # the README's journey: a new shell, as its set-up says
        done = _new_shell(command, readme_project)
    else:
        done = run_cli(*shlex.split(command)[1:], cwd=readme_project, env=_env())
    assert done.returncode == 0, f"{where}: {command}\n{done.stderr[-3000:]}"


def crontab_lines() -> list[str]:
    return [line for block in doc_blocks("cron") for line in block.text.splitlines()
            if line.strip() and not line.startswith("#")]


@pytest.mark.parametrize("entry", crontab_lines(), ids=lambda e: e.split()[1] + "h")
def test_crontab_line_runs_and_logs_json(entry, readme_project, scheduler):
    command = _adapt(entry.split(maxsplit=5)[5], readme_project, scheduler).replace("\\%", "%")
    log_file = re.search(r">> (\S+)", command).group(1)
    done = _shell(command, readme_project)
    assert done.returncode == 0, Path(readme_project / log_file).read_text()[-3000:]
    lines = (readme_project / log_file).read_text().splitlines()
    assert lines, "the job wrote its log"
    for text in lines:                     # --log-format json: every line is a JSON object
        assert isinstance(json.loads(text), dict), text


def test_systemd_units_are_two_files_and_the_service_runs(readme_project, scheduler):
    units = doc_blocks("ini")
    assert len(units) == 2
    parsed = []
    for block in units:
        parser = configparser.ConfigParser(strict=False, interpolation=None)
        parser.read_string(block.text)
        parsed.append(parser)
    service, timer = parsed
    assert service.has_section("Service") and not service.has_section("Timer")
    assert timer.has_section("Timer") and timer.has_section("Install")
    command = _adapt(service["Service"]["ExecStart"], readme_project, scheduler)
    done = subprocess.run(shlex.split(command), cwd=readme_project, env=_env(), capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
