"""``pipeline doctor``: the "verify your setup" step, done properly.

Reports the NVIDIA driver and CUDA version NVML sees, every GPU and its memory, whether the
GPU libraries import (with versions), whether PyTorch was built with CUDA, what
``device: auto`` would choose here and why, and whether the installed GPU wheels fit together
and fit the driver: wheels built for different CUDA majors in one environment, a wheel that
needs a newer driver, and two builds of one package overwriting each other are the most
common broken GPU installs, and each gets a verdict that says what to install instead.
"""

from __future__ import annotations

import platform
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from importlib.metadata import packages_distributions
from typing import Any

from pipeline.version import __version__
from pipeline.backends.devices.detect import (
    REPORTED_MODULES, CudaNeed, choose_device, import_status, installed_cuda_needs, probe_nvml,
)

# The install flavours (pyproject extras) by the CUDA major they are built for.
EXTRA_FOR_MAJOR = {13: "gpu", 12: "gpu-cu12"}
# The oldest driver that runs each CUDA major: (driver CUDA version, driver branch).
MIN_DRIVER = {13: ("13.0", 580), 12: ("12.0", 525), 11: ("11.0", 450)}
# Modules whose CPU and CUDA builds are published under one distribution name (torch): an
# installed build of the wrong CUDA major still meets the base requirement, and the CPU build
# runs without a GPU.
ONE_NAME_FOR_EVERY_BUILD = frozenset({"torch"})


@dataclass(frozen=True)
class CudaProblem:
    """One reason the installed GPU wheels will not work here, and the command that fixes it."""

    kind: str                  # "mixed-cuda" | "driver-too-old" | "same-module-twice"
    message: str
    fix: str
    packages: tuple[str, ...]  # distribution names involved


@dataclass
class CudaVerdict:
    """The installed GPU wheels against each other and against the driver."""

    status: str                # "ok" | "mismatch" | "no-driver"
    summary: str
    problems: list[CudaProblem] = field(default_factory=list)
    fix: str = ""
    rows: dict[str, str] = field(default_factory=dict)    # distribution -> its verdict


def cuda_verdict(needs: Sequence[CudaNeed], driver_cuda: str | None) -> CudaVerdict:
    """Judge the wheels' CUDA needs (``detect.installed_cuda_needs``) against the driver's CUDA
    version (NVML's, ``"12.4"``; None without a driver). Pure: tested on fake metadata."""
    driver_major = int(driver_cuda.split(".")[0]) if driver_cuda else None
    problems = [*_mixed_majors(needs, driver_major), *_driver_too_old(needs, driver_cuda),
                *_same_module_twice(needs, driver_major)]
    rows = _row_verdicts(needs, problems, driver_major)
    if problems:
        fix = _combined_fix(needs, problems, driver_major)
        noun = "problem" if len(problems) == 1 else "problems"
        return CudaVerdict("mismatch", f"{len(problems)} {noun} with the installed GPU wheels", problems, fix, rows)
    majors = _by_major(needs)
    if not majors:
        return CudaVerdict("ok", "no installed wheel needs CUDA (CPU builds only)", rows=rows)
    wanted = "; ".join(f"CUDA {major}: {_listing(group)}" for major, group in majors.items())
    if driver_major is None:
        return CudaVerdict("no-driver", f"the installed wheels need {wanted}; there is no NVIDIA driver "
                           "here to check them against (fine on a machine without a GPU)", rows=rows)
    return CudaVerdict("ok", f"all GPU wheels are built for CUDA {' and '.join(map(str, majors))}, "
                       f"which the driver (CUDA {driver_cuda}) supports", rows=rows)


def _by_major(needs: Iterable[CudaNeed]) -> dict[int, list[CudaNeed]]:
    groups: dict[int, list[CudaNeed]] = defaultdict(list)
    for need in needs:
        if need.cuda_major is not None:
            groups[need.cuda_major].append(need)
    return dict(sorted(groups.items()))


def _listing(needs: Iterable[CudaNeed]) -> str:
    return ", ".join(f"{n.distribution} {n.version}" for n in needs)


def _mixed_majors(needs: Sequence[CudaNeed], driver_major: int | None) -> list[CudaProblem]:
    majors = _by_major(needs)
    if len(majors) < 2:
        return []
    groups = "; ".join(f"CUDA {major}: {_listing(group)}" for major, group in majors.items())
    message = (f"wheels built for different CUDA majors share this environment ({groups}); they load "
               "CUDA libraries of different majors into one process and do not work together")
    return [CudaProblem("mixed-cuda", message, _fix(needs, driver_major),
                        tuple(n.distribution for group in majors.values() for n in group))]


def _driver_too_old(needs: Sequence[CudaNeed], driver_cuda: str | None) -> list[CudaProblem]:
    if driver_cuda is None:
        return []
    driver_major = int(driver_cuda.split(".")[0])
    problems = []
    for major, group in _by_major(needs).items():
        if major <= driver_major:
            continue
        least, branch = MIN_DRIVER.get(major, (f"{major}.0", None))
        driver = f"CUDA {least} or newer" + (f" (driver {branch}+)" if branch else "")
        message = (f"{_listing(group)} {'is' if len(group) == 1 else 'are'} built for CUDA {major} and "
                   f"need{'s' if len(group) == 1 else ''} a driver for {driver}; "
                   f"this driver supports CUDA {driver_cuda}")
        fix = f"upgrade the NVIDIA driver to {branch or 'a newer one'} or newer"
        if _extra_for(driver_major):
            fix += f", or install the build for this driver: {_fix(needs, driver_major)}"
        problems.append(CudaProblem("driver-too-old", message, fix, tuple(n.distribution for n in group)))
    return problems


def _same_module_twice(needs: Sequence[CudaNeed], driver_major: int | None) -> list[CudaProblem]:
    by_module: dict[str, list[CudaNeed]] = defaultdict(list)
    for need in needs:
        by_module[need.module].append(need)
    problems = []
    for module, group in by_module.items():
        if len(group) < 2:
            continue
        message = (f"{module} is installed by {len(group)} distributions ({_listing(group)}): they write "
                   "the same files, so the one installed last overwrote the other, and uninstalling "
                   "either deletes files the other needs")
        problems.append(CudaProblem("same-module-twice", message, _fix(group, driver_major, remove=[n.distribution for n in group]),
                                    tuple(n.distribution for n in group)))
    return problems


def _extra_for(driver_major: int | None) -> str | None:
    """The flavour for a driver: the newest CUDA major it runs (None: too old for any)."""
    if driver_major is None:
        return None
    return next((extra for major, extra in EXTRA_FOR_MAJOR.items() if major <= driver_major), None)


def _fix(needs: Sequence[CudaNeed], driver_major: int | None, remove: Iterable[str] = ()) -> str:
    """``pip uninstall`` what the right flavour would not replace, then ``pip install`` it.

    ``remove``: distributions that go whatever the flavour (builds that share files: all of
    them go, and the install puts the right one back). Without a driver every flavour is offered.
    """
    remove = set(remove)
    extra = _extra_for(driver_major)
    if extra is not None:
        return _install_command(needs, extra, remove)
    if driver_major is not None:
        return f"upgrade the NVIDIA driver to {MIN_DRIVER[12][1]} or newer"
    options = {"cpu": "without a GPU", "gpu": "on a CUDA 13 driver (580+)", "gpu-cu12": "on a CUDA 12 driver (525+)"}
    return "; ".join(f"{where}: {_install_command(needs, extra, remove)}" for extra, where in options.items())


def _install_command(needs: Sequence[CudaNeed], extra: str, remove: set[str]) -> str:
    strays = {n.distribution for n in needs if n.distribution in remove or _stray(n, extra)}
    # Uninstalling a build deletes the files of another build of its module: that one goes too.
    touched = {n.module for n in needs if n.distribution in strays}
    strays |= {n.distribution for n in needs if n.module in touched}
    install = f"pip install -e '.[{extra}]'"
    ordered = [n.distribution for n in needs if n.distribution in strays]
    return f"pip uninstall -y {' '.join(dict.fromkeys(ordered))} && {install}" if strays else install


def _stray(need: CudaNeed, extra: str) -> bool:
    """Would ``need`` stay behind, wrong, after ``pip install -e '.[extra]'``?

    Other builds have other names (pip keeps them); torch is one name, and an installed torch
    of the wrong build still meets the base requirement, so it must go too.
    """
    major = next((m for m, e in EXTRA_FOR_MAJOR.items() if e == extra), None)
    one_name = need.module in ONE_NAME_FOR_EVERY_BUILD
    if major is None:                           # cpu: no CUDA wheels but torch (which runs on a CPU)
        return bool(need.needs_cuda) and not one_name
    if need.module == "xgboost":
        return need.distribution != f"xgboost-cu{major}"
    return need.cuda_major != major if one_name else need.cuda_major not in (None, major)


def _combined_fix(needs: Sequence[CudaNeed], problems: Sequence[CudaProblem], driver_major: int | None) -> str:
    """One command that fixes every problem at once."""
    if len(problems) == 1:
        return problems[0].fix
    twice = [d for p in problems if p.kind == "same-module-twice" for d in p.packages]
    return _fix(needs, driver_major, remove=twice)


def _row_verdicts(needs: Sequence[CudaNeed], problems: Sequence[CudaProblem], driver_major: int | None) -> dict[str, str]:
    words = {"mixed-cuda": "mixed CUDA majors", "driver-too-old": "needs a newer driver",
             "same-module-twice": "same module twice"}
    rows = {}
    for need in needs:
        kinds = [words[p.kind] for p in problems if need.distribution in p.packages]
        if kinds:
            rows[need.distribution] = ", ".join(dict.fromkeys(kinds))
        elif need.needs_cuda and driver_major is None:
            rows[need.distribution] = "no driver to check"
        elif need.needs_cuda and need.cuda_major is None:
            rows[need.distribution] = "CUDA major unknown"
        else:
            rows[need.distribution] = "ok"
    return rows


def gpu_ready(report: dict[str, Any]) -> bool:
    """What ``doctor --require-gpu`` asks: auto picks the GPU and the GPU wheels fit the driver."""
    return report["auto_device"] == "gpu" and report["cuda"]["status"] != "mismatch"


def not_ready_reason(report: dict[str, Any]) -> str:
    """Why ``gpu_ready`` is False, in one sentence for stderr (the report says the rest)."""
    if report["auto_device"] != "gpu":
        return f"no usable GPU: {report['auto_reason']}"
    cuda = report["cuda"]
    return f"{cuda['summary']}; fix: {cuda['fix']}" if cuda.get("fix") else cuda["summary"]


def cuda_section(needs: Sequence[CudaNeed], driver_cuda: str | None) -> dict[str, Any]:
    """The report's ``cuda`` key: each wheel with its need and verdict, and the overall verdict."""
    verdict = cuda_verdict(needs, driver_cuda)
    return {
        "driver_cuda": driver_cuda,
        "status": verdict.status,
        "summary": verdict.summary,
        "fix": verdict.fix,
        "wheels": [{**asdict(n), "verdict": verdict.rows[n.distribution]} for n in needs],
        "problems": [asdict(p) for p in verdict.problems],
    }


def collect() -> dict[str, Any]:
    nvml = probe_nvml()
    choice = choose_device("auto", nvml=nvml)
    provided = packages_distributions()          # read once: it walks every installed package
    report = {
        "pipeline": __version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "driver": nvml.driver,
        "cuda_driver": nvml.cuda,
        "nvml_error": nvml.error,
        "gpus": [asdict(d) for d in nvml.devices],
        "modules": [asdict(import_status(m, provided)) for m in REPORTED_MODULES],
        "auto_device": choice.device,
        "auto_reason": choice.reason,
        "cuda": cuda_section(installed_cuda_needs(provided), nvml.cuda),
    }
    report["gpu_ready"] = gpu_ready(report)
    return report


def render(report: dict[str, Any], console: Any) -> None:
    from rich.table import Table

    console.print(f"[bold]pipeline {report['pipeline']}[/] on Python {report['python']} ({report['platform']})")
    if report["driver"]:
        console.print(f"NVIDIA driver {report['driver']}, CUDA driver API {report['cuda_driver']}")
    else:
        console.print(f"[yellow]No NVIDIA driver:[/] {report['nvml_error']}")
    if report["gpus"]:
        gpus = Table("GPU", "name", "memory total", "memory used", title="GPUs (NVML)")
        for g in report["gpus"]:
            gpus.add_row(str(g["index"]), g["name"], f"{g['memory_total'] / 2**30:.1f} GiB",
                         f"{g['memory_used'] / 2**30:.1f} GiB")
        console.print(gpus)
    mods = Table("module", "imports", "version", "detail", title="Libraries")
    for m in report["modules"]:
        mods.add_row(m["module"], "[green]yes[/]" if m["importable"] else "[red]no[/]", m["version"] or "-", m["detail"])
    console.print(mods)
    render_cuda(report["cuda"], console)
    console.print(f"device: auto → [bold]{report['auto_device']}[/] ({report['auto_reason']})")


def render_cuda(cuda: dict[str, Any], console: Any) -> None:
    """The wheels table (package, version, CUDA needs, verdict), then the verdict and its fix."""
    from rich.markup import escape
    from rich.table import Table

    if cuda["wheels"]:
        table = Table("package", "version", "CUDA needs", "verdict", title="GPU wheels and CUDA")
        for w in cuda["wheels"]:
            needs = (f"CUDA {w['cuda_major']}" if w["cuda_major"] is not None
                     else "CUDA (major unknown)" if w["needs_cuda"] else "none" if w["needs_cuda"] is False else "?")
            style = "green" if w["verdict"] == "ok" else "yellow" if w["verdict"].startswith("no driver") else "red"
            table.add_row(w["distribution"], w["version"], needs, f"[{style}]{escape(w['verdict'])}[/]")
        console.print(table)
    colour = {"ok": "green", "no-driver": "yellow"}.get(cuda["status"], "red")
    label = {"ok": "OK", "no-driver": "not checked"}.get(cuda["status"], "MISMATCH")
    console.print(f"CUDA: [bold {colour}]{label}[/] — {escape(cuda['summary'])}")
    for problem in cuda["problems"]:
        console.print(f"  [red]✗[/] {escape(problem['message'])}")
        _print_fix("    fix: ", problem["fix"], console)
    if len(cuda["problems"]) > 1 and cuda["fix"]:
        _print_fix("  all at once: ", cuda["fix"], console)


def _print_fix(head: str, fix: str, console: Any) -> None:
    """A fix, one line per option (without a driver there is one per flavour)."""
    from rich.markup import escape

    options = fix.split("; ")
    console.print(head + escape(options[0]))
    for option in options[1:]:
        console.print(" " * len(head) + escape(option))
