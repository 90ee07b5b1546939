"""One error family for the whole package.

The CLI maps each class to a documented exit code and prints its message as one paragraph;
a traceback is shown only with ``--debug``. Library users catch ``PipelineError``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


class ExitCode:
    """Process exit codes of the ``pipeline`` command (documented in the README).

    Examples:
        >>> from pipeline import ExitCode
        >>> ExitCode.CONFIG, ExitCode.DATA, ExitCode.TERMINATED
        (2, 3, 143)
    """

    OK = 0
    INTERNAL = 1          # a bug: an exception that is not a PipelineError
    CONFIG = 2            # bad config, bad override, bad command-line usage
    DATA = 3              # an input file is missing, unreadable or has the wrong columns
    STAGE = 4             # a stage failed while running
    BACKEND = 5           # the requested device/backend or Dask cluster is not available
    STORAGE = 6           # the run folder cannot be created or written (permissions, disk full)
    LOCKED = 7            # another run of the same pipeline held the lock past --wait
    OUT_OF_MEMORY = 8     # the process could not allocate memory outside a stage (MemoryError)
    BUDGET = 9            # a budget cap stopped the run, or its estimate refused to start it
    PARITY = 10           # pipeline parity: a metric differs between CPU and GPU beyond its band
    INTERRUPTED = 130     # SIGINT / Ctrl-C
    BROKEN_PIPE = 141     # stdout's reader went away (`pipeline runs list | head`): nothing to report
    TERMINATED = 143      # SIGTERM (Kubernetes, systemd, cron timeouts): recorded, then stopped


class PipelineError(Exception):
    """Base of every error the package raises on purpose.

    Examples:
        >>> from pipeline import ConfigError, PipelineError, load_config
        >>> try:
        ...     load_config("configs/no-such-config.yaml")
        ... except PipelineError as error:
        ...     print(type(error).__name__, error.exit_code)
        ConfigError 2
    """

    exit_code: int = ExitCode.INTERNAL

    def __reduce__(self):
        # Errors cross process boundaries (Dask workers): rebuild from the message, keep the stage.
        return (_rebuild, (type(self).__name__, str(self), getattr(self, "stage", None)))


def _rebuild(name: str, message: str, stage: str | None) -> PipelineError:
    cls = globals().get(name)
    if not (isinstance(cls, type) and issubclass(cls, PipelineError)):
        cls = PipelineError
    error = cls.__new__(cls)
    Exception.__init__(error, message)
    if cls is ConfigError:
        error.issues, error.file = [ConfigIssue(path="", message=message)], None  # type: ignore[attr-defined]
    if stage is not None:
        error.stage = stage  # type: ignore[attr-defined]
    return error


@dataclass(frozen=True)
class ConfigIssue:
    """One problem in a config: where it is (key path, line) and what is wrong."""

    path: str
    message: str
    line: int | None = None
    source: str | None = None

    def __str__(self) -> str:
        where = self.path or "(top level)"
        if self.line is not None:
            where = f"{where} (line {self.line})"
        elif self.source:
            where = f"{where} ({self.source})"
        return f"{where}: {self.message}"


class ConfigError(PipelineError):
    """The config (or a --set override, or a command-line option) is invalid.

    Holds every issue found, so the user fixes them all in one round.

    Examples:
        >>> from pipeline import ConfigError, load_config
        >>> try:
        ...     load_config("configs/churn.yaml", overrides=["stages.split.test=2"])
        ... except ConfigError as error:
        ...     print(error.exit_code, "stages.split.test" in str(error))
        2 True
    """

    exit_code = ExitCode.CONFIG

    def __init__(self, issues: list[ConfigIssue] | str, *, file: str | None = None) -> None:
        if isinstance(issues, str):
            issues = [ConfigIssue(path="", message=issues)]
        self.issues = issues
        self.file = file
        super().__init__(self._render())

    def _render(self) -> str:
        head = f"{self.file}: " if self.file else ""
        count = len(self.issues)
        if count == 1 and not self.issues[0].path and self.issues[0].line is None and not self.issues[0].source:
            return f"{head}{self.issues[0].message}"        # one problem that no key locates: one paragraph
        noun = "problem" if count == 1 else "problems"
        lines = [f"{head}{count} config {noun}:"]
        lines += [f"  - {issue}" for issue in self.issues]
        return "\n".join(lines)


class UsageError(ConfigError):
    """A bad command-line option or library argument (exit 2, like every ConfigError), as one
    plain sentence.

    Examples:
        >>> from pipeline import ConfigError, UsageError, load_config, run_pipeline
        >>> try:                 # overrides go to load_config; a loaded config is run as it is
        ...     run_pipeline(load_config("configs/churn.yaml"), overrides=["seed=1"])
        ... except UsageError as error:
        ...     print(isinstance(error, ConfigError), error.exit_code)
        True 2
    """

    def _render(self) -> str:
        return "; ".join(issue.message for issue in self.issues)


class DataError(PipelineError):
    """Input data is missing, unreadable, or does not have the expected columns or types.

    Examples:
        >>> from pipeline import DataError
        >>> from pipeline.stages import load_table
        >>> try:
        ...     load_table("data/no-such-table.csv")
        ... except DataError as error:
        ...     print(error.exit_code, "no-such-table.csv" in str(error))
        3 True
    """

    exit_code = ExitCode.DATA


class RowsError(DataError):
    """Values in some rows of a frame that cannot be scored (a missing value no op fills, a
    number beyond what the models read). The message is the library's; ``rows`` says where, for
    a caller that names rows its own way (the server's ``rows[3].tenure``): (column, 0-based
    position in the frame, what is wrong there) per problem.

    Examples:
        >>> from pipeline.core.errors import RowsError
        >>> error = RowsError("missing values remain", [("tenure", 3, "a missing value remains")])
        >>> error.rows[0], error.exit_code
        (('tenure', 3, 'a missing value remains'), 3)
    """

    rows: tuple[tuple[str, int, str], ...] = ()

    def __init__(self, message: str, rows: list[tuple[str, int, str]]) -> None:
        super().__init__(message)
        self.rows = tuple(rows)


def input_not_found(path: str | os.PathLike[str], what: str = "input file") -> DataError:
    """A missing input, saying where a relative path was looked for: relative paths are read
    from the working directory, so a job started from another folder (cron's is $HOME) finds
    nothing, and the bare name alone does not say why."""
    given = Path(path)
    if given.is_absolute():
        return DataError(f"{what} not found: {given}")
    folder = Path.cwd()
    return DataError(f"{what} not found: {given} (a relative path is read from the working directory {folder}, "
                     f"so it looked for {folder / given}; run from the folder the path is relative to, "
                     "or give an absolute path)")


class StageError(PipelineError):
    """A stage raised while running; names the stage and keeps the cause.

    Examples:
        >>> from pipeline import StageError
        >>> error = StageError("train", "the model could not be fitted")
        >>> error.stage, error.exit_code
        ('train', 4)
    """

    exit_code = ExitCode.STAGE

    def __init__(self, stage: str, message: str) -> None:
        self.stage = stage
        super().__init__(f"stage '{stage}' failed: {message}")


class BackendUnavailable(PipelineError):
    """The requested device cannot be used here (no GPU seen by NVML, RAPIDS not importable).

    Examples:
        >>> from pipeline import BackendUnavailable
        >>> from pipeline.backends import available_devices, get_backend
        >>> if "gpu" in available_devices():       # a GPU machine: the backend loads
        ...     print(BackendUnavailable.exit_code)
        ... else:
        ...     try:
        ...         get_backend("gpu")
        ...     except BackendUnavailable as error:
        ...         print(error.exit_code)
        5
    """

    exit_code = ExitCode.BACKEND


class ClusterUnavailable(BackendUnavailable):
    """The Dask cluster cannot be reached or started (exit code 5, like a missing GPU)."""


class StorageError(PipelineError):
    """The run folder or an artifact cannot be written (permissions, a full disk...).

    Examples:
        >>> from pipeline import StorageError
        >>> StorageError("runs/: permission denied").exit_code
        6
    """

    exit_code = ExitCode.STORAGE


class OutOfMemory(PipelineError):
    """The process could not allocate the memory the input or the work needs (outside a stage,
    where a MemoryError is that stage's failure).

    Examples:
        >>> from pipeline import OutOfMemory
        >>> OutOfMemory("reading data/huge.csv needs 40 GiB").exit_code
        8
    """

    exit_code = ExitCode.OUT_OF_MEMORY


class LockTimeout(PipelineError):
    """Another run of the same pipeline held the lock for longer than the run would wait.

    Examples:
        >>> from pipeline import LockTimeout
        >>> LockTimeout("runs/churn/.lock is held by pid 4242").exit_code
        7
    """

    exit_code = ExitCode.LOCKED


class BudgetError(PipelineError):
    """A budget cap stopped the run (recorded with the figures), or the estimate from earlier
    runs exceeded it before the run started.

    Examples:
        >>> from pipeline import BudgetError
        >>> BudgetError("budget.max_wall 10s reached in stage 'forest'").exit_code
        9
    """

    exit_code = ExitCode.BUDGET


class ParityError(PipelineError):
    """``pipeline parity``: the CPU and GPU runs disagree beyond a metric's tolerance band."""

    exit_code = ExitCode.PARITY
