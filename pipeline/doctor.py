"""``pipeline doctor``: the "verify your setup" step, done properly.

Reports the NVIDIA driver and CUDA version NVML sees, every GPU and its memory, whether the
GPU libraries import (with versions), whether PyTorch was built with CUDA, and what
``device: auto`` would choose here and why.
"""

from __future__ import annotations

import platform
from dataclasses import asdict
from typing import Any

from pipeline import __version__
from pipeline.backends.detect import REPORTED_MODULES, choose_device, import_status, probe_nvml


def collect() -> dict[str, Any]:
    nvml = probe_nvml()
    choice = choose_device("auto", nvml=nvml)
    return {
        "pipeline": __version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "driver": nvml.driver,
        "cuda_driver": nvml.cuda,
        "nvml_error": nvml.error,
        "gpus": [asdict(d) for d in nvml.devices],
        "modules": [asdict(import_status(m)) for m in REPORTED_MODULES],
        "auto_device": choice.device,
        "auto_reason": choice.reason,
    }


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
    console.print(f"device: auto → [bold]{report['auto_device']}[/] ({report['auto_reason']})")
