"""Shared fixtures. ``backend`` runs a test once per available device: CPU always, GPU only
where NVML sees one and RAPIDS imports (those cases are skipped cleanly elsewhere)."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import dask
import pandas as pd
import pytest

from pipeline.backends import available_devices, get_backend

# Runs in tests write no report.html unless a test asks for one (tests/report/ does):
# drawing it costs a second or two per run, and the suite makes hundreds of runs. Subprocess
# runs of the CLI inherit this.
os.environ.setdefault("PIPELINE_REPORT", "off")

# Dask's worker processes start as forks of a server process that imported Dask once rather than
# as new interpreters (Dask's own test suite does the same): a 2-worker cluster of processes
# starts in a fraction of the time, and the suite starts dozens. They are still processes of
# their own. Subprocesses inherit it; the docs' examples run with Dask's default (spawn), as a
# reader's would (tests/docs/test_readme.py).
DASK_START_METHOD = "DASK_DISTRIBUTED__WORKER__MULTIPROCESSING_METHOD"
os.environ.setdefault(DASK_START_METHOD, "forkserver")
dask.config.set({"distributed.worker.multiprocessing-method": os.environ[DASK_START_METHOD]})

ROOT = Path(__file__).resolve().parents[1]
TELCO = ROOT / "data" / "telco_customer_churn.csv"
DEVICES = available_devices()


@pytest.fixture(params=["cpu", pytest.param("gpu", marks=pytest.mark.gpu)])
def backend(request):
    if request.param not in DEVICES:
        pytest.skip(f"{request.param} backend not available here")
    return get_backend(request.param)


@pytest.fixture(scope="session")
def telco_pandas() -> pd.DataFrame:
    return pd.read_csv(TELCO, na_values=[" "])


def copy_project(folder: Path) -> Path:
    """``folder`` with the example configs and data, as a user's checkout has them."""
    shutil.copytree(ROOT / "configs", folder / "configs")
    shutil.copytree(ROOT / "data", folder / "data")
    return folder


@contextmanager
def script_module(name: str) -> Iterator[object]:
    """``scripts/<name>.py`` imported as a module for its unit tests; dataclasses look their
    module up by name, so it sits in ``sys.modules`` while in use."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(name, None)


@contextmanager
def working_directory(path: Path) -> Iterator[Path]:
    cwd = os.getcwd()
    os.chdir(path)
    try:
        yield path
    finally:
        os.chdir(cwd)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A working directory with the example configs and data, as a user's checkout has."""
    return copy_project(tmp_path)


@pytest.fixture
def in_project(project: Path):
    """``project`` as the working directory (config paths are relative to it)."""
    with working_directory(project):
        yield project


def small_config(name: str, data: Path, *, ops: tuple[str, ...] = ("standardize: {columns: [a, b]}",),
                 after: str = "") -> str:
    """A small real pipeline over a CSV of ``id, a, b, churn`` (yes / no): load, split, the
    feature ``ops`` (YAML flow mappings), logistic regression, then the stages ``after`` adds."""
    op_lines = "".join(f"      - {op}\n" for op in ops)
    return (f"name: {name}\ndevice: cpu\nstages:\n"
            f"  raw:\n    kind: load\n    path: {data}\n"
            "  split:\n    kind: split\n    inputs: [raw]\n    target: churn\n    positive: \"yes\"\n    test: 0.25\n"
            f"  features:\n    kind: features\n    inputs: [split]\n    id: id\n    ops:\n{op_lines}"
            "  logreg:\n    kind: train\n    inputs: [features]\n    model: logistic_regression\n" + after)


def assert_nested_close(a, b, *, rel: float) -> None:
    """Equal nested dicts / lists, floats to ``rel`` (fitted states of two fitting paths)."""
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            assert_nested_close(a[key], b[key], rel=rel)
    elif isinstance(a, list):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_nested_close(x, y, rel=rel)
    elif isinstance(a, float):
        assert a == pytest.approx(b, rel=rel)
    else:
        assert a == b


CHURN_CATEGORICAL = ["Contract", "PaymentMethod", "InternetService"]


def churn_ops() -> list:
    """The churn features with embeddings: categorify for the MLP, one-hot and standardize."""
    from pipeline.features import Categorify, FillMissing, OneHot, Standardize

    return [
        FillMissing(columns=["TotalCharges"]),
        Categorify(columns=CHURN_CATEGORICAL),
        OneHot(columns=["gender", "Partner", "Dependents", "PhoneService", "PaperlessBilling"], drop_binary=True),
        Standardize(columns=["tenure", "MonthlyCharges", "TotalCharges"]),
    ]


def dump_unloadable(path: Path, module: str, class_name: str, tmp_path: Path, monkeypatch) -> None:
    """joblib-pickle an instance of ``module.class_name`` to ``path``, then make the module
    unimportable: a model pickled where a library (cuML) exists, loaded where it does not."""
    import importlib
    import sys

    import joblib

    lib = tmp_path / f"lib-{module}"
    lib.mkdir()
    (lib / f"{module}.py").write_text(f"class {class_name}:\n    pass\n")
    monkeypatch.syspath_prepend(str(lib))
    joblib.dump(getattr(importlib.import_module(module), class_name)(), path)
    monkeypatch.delitem(sys.modules, module)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(lib)])


@pytest.fixture(scope="module")
def cluster_client():
    """A real 2-worker, 1-thread process cluster on 127.0.0.1 and a client to it, for a module."""
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                      dashboard_address="127.0.0.1:0") as cluster, Client(cluster) as client:
        yield client


# ------------------------------------------------------------------ the slow-test budget
# A test (setup, call and teardown together) over SLOW_SECONDS must be listed in slow_tests.txt,
# which marks it `slow`; a run of the suite fails on one that is not. This is a budget kept in one
# place, not a timing assertion: nothing about a test's result depends on it. The list holds every
# test over 9 s on a quiet 2-core machine, so a CI machine up to ~2x slower does not trip it.
# PIPELINE_SLOW_BUDGET=off turns the check off (a run under coverage is slower throughout).
SLOW_SECONDS = 20.0
SLOW_LIST = Path(__file__).parent / "slow_tests.txt"


def listed_slow_tests() -> dict[str, str]:
    """``node id -> why`` from slow_tests.txt (``nodeid  # why`` per line; # starts a comment line)."""
    listed = {}
    for line in SLOW_LIST.read_text(encoding="utf-8").splitlines():
        node, _, why = line.partition("  # ")
        if node.strip() and not node.lstrip().startswith("#"):
            listed[node.strip()] = why.strip()
    return listed


def _listed_entry(nodeid: str, listed: dict[str, str]) -> str | None:
    """The entry that covers ``nodeid``: its own, or its test's when the entry has no ``[...]``
    (every parameter case)."""
    for entry in (nodeid, nodeid.split("[", 1)[0]):
        if entry in listed:
            return entry
    return None


def _is_listed(nodeid: str, listed: dict[str, str]) -> bool:
    return _listed_entry(nodeid, listed) is not None


# What a test costs when the list does not say (the suite's median is well under a second).
UNLISTED_SECONDS = 0.3


def _listed_seconds(why: str) -> float:
    """The seconds an entry's why starts with ("57 s: ..."); a case of an entry without them is
    counted at the listing threshold."""
    found = re.match(r"(?:every case, )?(\d+(?:\.\d+)?) s\b", why)
    return float(found.group(1)) if found else 9.0


def pytest_collection_modifyitems(config, items):
    """Mark the listed tests slow, and put the costliest files first (their tests in their own
    order): the workers take files from the front of the queue, so the long ones start early and
    the run ends on short ones rather than on one worker finishing a long file alone."""
    listed = listed_slow_tests()
    cost: dict[str, float] = {}
    for item in items:
        entry = _listed_entry(item.nodeid, listed)
        seconds = UNLISTED_SECONDS
        if entry is not None:
            item.add_marker(pytest.mark.slow)
            seconds = _listed_seconds(listed[entry])
        file = item.nodeid.split("::", 1)[0]
        cost[file] = cost.get(file, 0.0) + seconds
    items.sort(key=lambda item: -cost[item.nodeid.split("::", 1)[0]])      # stable: order within a file kept


_test_seconds: dict[str, float] = {}


def pytest_runtest_logreport(report):
    _test_seconds[report.nodeid] = _test_seconds.get(report.nodeid, 0.0) + report.duration


def _slow_unlisted(config) -> list[tuple[str, float]]:
    if hasattr(config, "workerinput") or os.environ.get("PIPELINE_SLOW_BUDGET", "on") == "off":
        return []                          # xdist workers: the controller sees every report
    listed = listed_slow_tests()
    return sorted(((node, seconds) for node, seconds in _test_seconds.items()
                   if seconds > SLOW_SECONDS and not _is_listed(node, listed)), key=lambda x: -x[1])


def pytest_sessionfinish(session, exitstatus):
    over = _slow_unlisted(session.config)
    session.config._slow_unlisted = over
    if over and exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    over = getattr(config, "_slow_unlisted", [])
    if over:
        terminalreporter.section("slow-test budget", sep="=", red=True, bold=True)
        terminalreporter.write_line(
            f"{len(over)} test(s) took over {SLOW_SECONDS:g} s and are not in tests/slow_tests.txt: make them "
            "faster (smaller data, a shared built-once run, the CLI in process), or list them there with why.")
        for node, seconds in over:
            terminalreporter.write_line(f"  {seconds:6.1f} s  {node}")
