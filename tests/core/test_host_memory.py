"""Host memory in 4 KiB pages by default (``PIPELINE_HUGE_PAGES``): NumPy's huge-page advice off
and pyarrow on the system allocator once a backend exists; ``on`` gives both their own back."""

from __future__ import annotations

import os
import subprocess
import sys

import pyarrow
import pytest

from pipeline.core import host_memory
from pipeline.core.errors import ConfigError
from pipeline.core.settings import Settings
from tests.support.cli import ROOT, run_cli

PROBE = ("from pipeline.backends import get_backend; import pyarrow; from pipeline.core.host_memory import _numpy_switch\n"
         "def advice():\n"
         "    switch = _numpy_switch()\n"
         "    current = None if switch is None else bool(switch(True))\n"
         "    return current if switch is None else (switch(current), current)[1]\n"
         "before, was = pyarrow.default_memory_pool().backend_name, advice()\n"
         "get_backend('cpu')\n"
         "print(before, was, pyarrow.default_memory_pool().backend_name, advice())")


def numpy_huge_pages() -> bool | None:
    """Whether NumPy advises huge pages for its large arrays now (None: this NumPy has no switch)."""
    switch = host_memory._numpy_switch()
    if switch is None:
        return None
    current = bool(switch(True))
    switch(current)
    return current


def _probe(**env: str) -> list[str]:
    # A fresh interpreter: what is checked is process-wide state from the first import on.
    environ = {k: v for k, v in os.environ.items() if k not in ("PIPELINE_HUGE_PAGES", "ARROW_DEFAULT_MEMORY_POOL")}
    done = subprocess.run([sys.executable, "-c", PROBE], env={**environ, **env}, capture_output=True, text=True,
                          check=True, timeout=120)
    return done.stdout.split()


def test_a_process_takes_small_pages_once_it_has_a_backend():
    before_pool, before_advice, pool, advice = _probe()
    assert pool == "system"
    if before_advice != "None":              # this NumPy has the switch: its advice is off now
        assert advice == "False"


def test_on_leaves_numpy_and_pyarrow_their_own_choice():
    before_pool, before_advice, pool, advice = _probe(PIPELINE_HUGE_PAGES="on")
    assert (pool, advice) == (before_pool, before_advice)


def test_on_after_off_restores_what_the_libraries_had():
    try:
        assert host_memory.apply_page_policy(Settings(huge_pages="off")) == "off"
        assert pyarrow.default_memory_pool().backend_name == "system"
        advice = numpy_huge_pages()
        assert advice in (False, None)
        # What each library had before this process's first backend changed it.
        had = dict(host_memory._library_defaults)
        assert host_memory.apply_page_policy(Settings(huge_pages="ON ")) == "on"
        assert numpy_huge_pages() == (had["numpy"] if advice is not None else None)
        assert pyarrow.default_memory_pool().backend_name == had["arrow"].backend_name
    finally:
        host_memory.apply_page_policy(Settings())       # the suite's processes run with the default
    assert pyarrow.default_memory_pool().backend_name == "system"


def test_an_unknown_value_is_refused_naming_the_variable():
    with pytest.raises(ConfigError, match=r"\$PIPELINE_HUGE_PAGES is 'sometimes': use off"):
        host_memory.huge_pages_choice(Settings(huge_pages="sometimes"))


def test_a_run_with_an_unknown_value_stops_with_exit_2_naming_it(tmp_path):
    done = run_cli("run", ROOT / "configs" / "churn.yaml", "--runs-dir", tmp_path, cwd=tmp_path,
                   env={"PIPELINE_HUGE_PAGES": "sometimes"})
    assert done.returncode == 2
    assert "$PIPELINE_HUGE_PAGES is 'sometimes'" in done.stderr + done.stdout
    assert "Traceback" not in done.stderr
    assert not list(tmp_path.glob("*/manifest.json"))          # nothing ran, nothing recorded
