"""Worker processes that import the user's script: a local cluster started from a script
without ``if __name__ == "__main__":`` would start itself again in every worker, so the script's
AST is read first and the run refused with the fix."""

from __future__ import annotations

import ast
import os
import sys
from typing import Any

from pipeline.core.errors import UsageError

GUARD = 'if __name__ == "__main__":'


def refuse_run_in_worker_bootstrap() -> None:
    """Fail at once when a run starts while this process is a new worker importing its parent's
    main script (multiprocessing's spawn bootstrap): the parent holds the run lock, so the
    run would wait on it until the worker's start times out."""
    import multiprocessing

    if getattr(multiprocessing.current_process(), "_inheriting", False):
        main = sys.modules.get("__main__")
        script = getattr(main, "__file__", None) or "the main script"
        raise UsageError(
            f"a pipeline run was started while a new worker process was importing {script}: Dask's local "
            f"worker processes import the script that started them, so code at its top level runs again in "
            f"each of them; put the call under `{GUARD}` (see the README's Library use)")


def refuse_unguarded_main_script(starting: str = "a local Dask cluster", *, method: str | None = None) -> None:
    """Before starting local worker processes (``starting`` says which; ``method`` is their start
    method, Dask's when None): refuse when the call comes from top-level code of a ``__main__``
    script that the workers will import again (spawn, forkserver), outside an
    ``if __name__ == "__main__":`` block, where each worker would start the run again."""
    main = sys.modules.get("__main__")
    if main is None or not _workers_import_main(main, method or worker_start_method()):
        return
    frame = sys._getframe(1)
    while frame is not None and not (frame.f_globals is main.__dict__ and frame.f_code.co_name == "<module>"):
        frame = frame.f_back
    if frame is None:                 # not called while the script's top level runs
        return
    path, line = frame.f_code.co_filename, frame.f_lineno
    try:
        with open(path, encoding="utf-8") as handle:
            tree = ast.parse(handle.read(), path)
    except (OSError, SyntaxError, ValueError):
        return                        # cannot read it: do not guess
    if not _guarded(tree, line):
        raise UsageError(
            f"{path}, line {line}, starts {starting} from the script's top level: its "
            f"processes import {os.path.basename(path)} again and would each start the run once more "
            f"(waiting on this run's lock). Put the code that runs the pipeline under `{GUARD}` (see the "
            "README's Library use), or use an existing cluster (scheduler=...)")


def worker_start_method() -> str:
    """How Dask starts a local worker process (``distributed.worker.multiprocessing-method``:
    spawn by default, forkserver or fork)."""
    import dask

    return str(dask.config.get("distributed.worker.multiprocessing-method", "spawn"))


def _workers_import_main(main: Any, method: str) -> bool:
    """Whether processes started by ``method`` run ``main`` again, as multiprocessing's spawn
    (and forkserver, which prepares its children the same way) decides it."""
    if method == "fork":
        return False
    name = getattr(getattr(main, "__spec__", None), "name", None)
    if name is not None:
        return name != "__main__" and not name.endswith(".__main__")
    path = getattr(main, "__file__", None)
    return bool(path) and os.path.splitext(os.path.basename(path))[0] != "ipython"


def _guarded(tree: ast.Module, line: int) -> bool:
    """Whether ``line`` lies in the body of an ``if __name__ == "__main__":`` (or the else of
    ``!=``)."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.If):
            continue
        equal = _main_test(node.test)
        block = node.body if equal else node.orelse if equal is False else []
        if block and block[0].lineno <= line <= (block[-1].end_lineno or block[-1].lineno):
            return True
    return False


def _main_test(test: ast.expr) -> bool | None:
    """True for ``__name__ == "__main__"``, False for ``!=``, None for any other test."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Eq, ast.NotEq))):
        return None
    sides = [test.left, test.comparators[0]]
    names = any(isinstance(s, ast.Name) and s.id == "__name__" for s in sides)
    main = any(isinstance(s, ast.Constant) and s.value == "__main__" for s in sides)
    return isinstance(test.ops[0], ast.Eq) if names and main else None


