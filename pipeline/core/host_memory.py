"""How this process takes host memory: 4 KiB pages unless ``$PIPELINE_HUGE_PAGES`` is ``on``.

NumPy advises the kernel to back every array of 4 MiB or more with transparent huge pages
(``madvise(MADV_HUGEPAGE)``), and pyarrow's default allocator (mimalloc) takes huge pages for
its own. Where the host has taken those pages back (a VM or sandbox that reports free memory
to its host: cloud sandboxes, microVM-based Kubernetes nodes), a huge page's first touch costs
~14 ms per MiB, 25x a 4 KiB page's: on the 2-core machine the project is measured on, eleven
80 MiB arrays took 1.1 s each with huge pages and 28 ms each without, and the events
benchmark's 10M-event run took 9.2 s against 3.1 s, most of it in the kernel. Where huge pages
are warm they save ~0.17 s per GiB first touched (14 against 28 ms per 80 MiB here). One
costs seconds, the other saves a fraction of one: so by default this process takes 4 KiB
pages (NumPy's advice off, pyarrow on the system allocator), and ``PIPELINE_HUGE_PAGES=on``
gives both libraries their own choice back, for bare metal that keeps its huge pages warm.

Two steps, as the libraries allow:

- ``arrow_pool_before_load``, when ``pipeline`` is imported: pyarrow's C++ readers (Parquet,
  CSV) take their allocator from ``$ARROW_DEFAULT_MEMORY_POOL`` once, as pyarrow loads, so
  where it has not loaded yet that variable is set to ``system`` (unless it is set already);
  the processes this one starts (Dask workers, DDP ranks) inherit it.
- ``apply_page_policy``, when a run starts (with the settings it records) and when the process
  makes its first backend (``contract.instance_of``), before any table is read: NumPy's advice,
  and pyarrow's Python-level pool (``to_pandas`` and the conversions) where pyarrow had loaded
  first. Both switches are process-wide.
"""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping
from typing import Any

from pipeline.core.errors import ConfigError
from pipeline.core.settings import Settings, current_settings, register_check

HUGE_PAGES_VARIABLE = Settings.variable("huge_pages")
HUGE_PAGES = ("off", "on")
ARROW_POOL_VARIABLE = "ARROW_DEFAULT_MEMORY_POOL"

# What the libraries did before this module changed them (restored by ``on``), and the choice applied.
_library_defaults: dict[str, Any] = {}
_applied: str | None = None


def huge_pages_choice(settings: Settings | None = None) -> str:
    """``off`` unless ``$PIPELINE_HUGE_PAGES`` says ``on``; anything else is refused."""
    text = ((settings or current_settings()).huge_pages or "").strip().lower() or "off"
    if text not in HUGE_PAGES:
        raise ConfigError(f"${HUGE_PAGES_VARIABLE} is {text!r}: use off (the default: host memory in 4 KiB "
                          "pages) or on (NumPy's and pyarrow's own transparent huge pages)")
    return text


register_check("huge_pages", check=huge_pages_choice)


def arrow_pool_before_load(environ: MutableMapping[str, str] = os.environ) -> None:
    """``$ARROW_DEFAULT_MEMORY_POOL=system`` where pyarrow has not loaded, the variable is unset
    and huge pages are off (see the module); a value this module refuses is left to the first
    backend to report."""
    if "pyarrow" in sys.modules or ARROW_POOL_VARIABLE in environ:
        return
    try:
        choice = huge_pages_choice(Settings.from_environ(environ))
    except ConfigError:
        return
    if choice == "off":
        environ[ARROW_POOL_VARIABLE] = "system"


def apply_page_policy(settings: Settings | None = None) -> str:
    """Apply the setting to NumPy and pyarrow (once per choice); the choice applied."""
    global _applied
    choice = huge_pages_choice(settings)
    if choice == _applied:
        return choice
    _set_numpy_advice(choice == "on")
    _set_arrow_pool(choice == "on")
    _applied = choice
    return choice


def _numpy_switch() -> Any:
    """NumPy's ``_set_madvise_hugepage`` (sets the advice, returns the previous one), where it has it."""
    from numpy._core import multiarray

    return getattr(multiarray, "_set_madvise_hugepage", None)


def _set_numpy_advice(huge: bool) -> None:
    switch = _numpy_switch()
    if switch is None:
        return
    if huge:                              # NumPy's own choice back, where this module changed it
        if "numpy" in _library_defaults:
            switch(_library_defaults["numpy"])
        return
    _library_defaults.setdefault("numpy", bool(switch(False)))


def _set_arrow_pool(huge: bool) -> None:
    import pyarrow

    if huge:
        if "arrow" in _library_defaults:
            pyarrow.set_memory_pool(_library_defaults["arrow"])
        return
    _library_defaults.setdefault("arrow", pyarrow.default_memory_pool())
    pyarrow.set_memory_pool(pyarrow.system_memory_pool())
