"""How one run runs, as one frozen object: everything ``pipeline run`` and ``run_pipeline`` take
besides the config.

The CLI builds it from its flags and the library from keyword arguments, once, at the boundary;
the runner reads it and passes it on. A caller that runs one config several ways keeps one
``RunOptions`` and changes a field (``options.replace(device="gpu")``) rather than threading
fifteen arguments through its own code.

The ``PIPELINE_*`` environment is not an option here: the run takes it as it starts
(``pipeline.core.settings``) and records it. Two sources for one setting would let the record
and the run disagree.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import ClassVar, get_args

from pipeline.config.schema import PipelineConfig
from pipeline.core.errors import UsageError
from pipeline.core.option_objects import Options, names
from pipeline.hooks.protocol import RunHook

# The devices a run takes: the config's ``device:`` values (the CLI's --device choices), as written.
DEVICES: tuple[str, ...] = get_args(PipelineConfig.model_fields["device"].annotation)


@dataclass(frozen=True)
class RunOptions(Options):
    """The options of one run (``pipeline run``'s flags; ``run_pipeline``'s keyword arguments).

    ``device``: cpu, gpu or auto (None: the config's). ``runs_dir``: where runs are kept (None:
    the config's). ``overrides``: ``key=value`` edits of a config read from a file.
    ``only``/``from_``/``until``: the stage selection. ``hooks``: the caller's run hooks (None:
    the library's log lines). ``keep_outputs``: keep every stage's output in the result.
    ``progress``: also write progress lines to stderr. ``scheduler``: a Dask scheduler's address
    for the config's cluster. ``cache``: use the stage cache. ``force``: rerun all stages (True)
    or the named ones and what depends on them. ``cache_max_size``: the cache budget, over the
    environment and the config. ``wait``: seconds to wait for another run of the pipeline.
    ``check_budget_estimate``: refuse to start a run that earlier runs say will pass a cap.
    ``mark_latest``: a run of every stage moves ``latest`` (False: a look that must not, such as
    ``pipeline parity --sample``'s runs on a sample of the rows).

    Examples:
        >>> from pipeline import RunOptions
        >>> options = RunOptions(device="cpu", until=["split"], cache=False)
        >>> options.until, options.replace(device="gpu").device
        (('split',), 'gpu')
        >>> RunOptions.build(None, devise="gpu")
        Traceback (most recent call last):
        ...
        TypeError: unknown run option(s) 'devise'; the options are: device, runs_dir, ...
    """

    device: str | None = None
    runs_dir: str | os.PathLike[str] | None = None
    overrides: tuple[str, ...] = ()
    only: tuple[str, ...] = ()
    from_: tuple[str, ...] = ()
    until: tuple[str, ...] = ()
    hooks: tuple[RunHook, ...] | None = None
    keep_outputs: bool = True
    progress: bool = False
    scheduler: str | None = None
    cache: bool = True
    force: bool | tuple[str, ...] = False
    cache_max_size: int | str | None = None
    wait: float = 600.0
    check_budget_estimate: bool = True
    mark_latest: bool = True

    what: ClassVar[str] = "run option"

    def __post_init__(self) -> None:
        for name in ("overrides", "only", "from_", "until"):
            object.__setattr__(self, name, names(getattr(self, name)))
        if self.device is not None and self.device not in DEVICES:
            raise UsageError(f"device {self.device!r} is not one of {', '.join(DEVICES)} (lower case, as the "
                             "config's device: key and --device take it)")
        if self.hooks is not None:
            object.__setattr__(self, "hooks", run_hooks(self.hooks))
        if not isinstance(self.force, bool):
            object.__setattr__(self, "force", names(self.force))
        # A string is truthy: cache="false" used the cache and progress="no" wrote progress.
        for name in ("keep_outputs", "progress", "cache", "check_budget_estimate", "mark_latest"):
            if not isinstance(getattr(self, name), bool):
                raise UsageError(f"{name} must be True or False, got {type(getattr(self, name)).__name__} "
                                 f"{getattr(self, name)!r:.40}")
        if isinstance(self.wait, bool) or not isinstance(self.wait, (int, float)) or self.wait < 0:
            raise UsageError(f"wait must be a number of seconds, 0 or more, got {self.wait!r:.40}")


def run_hooks(hooks: object) -> tuple[RunHook, ...]:
    """``hooks`` (a list of ``RunHook`` objects, or one) as a tuple; a ``UsageError`` naming
    what is not a hook."""
    if isinstance(hooks, RunHook):
        return (hooks,)
    items = tuple(hooks) if isinstance(hooks, Iterable) and not isinstance(hooks, (str, bytes, Mapping)) else None
    wrong = [hooks] if items is None else [item for item in items if not isinstance(item, RunHook)]
    if wrong:
        raise UsageError(f"hooks must be a list of RunHook objects (pipeline.hooks.protocol.RunHook subclasses), "
                         f"got {'' if items is None else 'a list holding '}{type(wrong[0]).__name__} {wrong[0]!r:.60}")
    return items  # type: ignore[return-value]


__all__ = ["DEVICES", "RunOptions"]
