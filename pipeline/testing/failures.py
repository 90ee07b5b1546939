"""What every conformance check raises: an ``AssertionError`` that names the extension and the
check it failed, so a plugin's test output says what to fix without a traceback to read; and
the checks as values (``Check``), so every one runs and is reported by its id, each alone in
pytest (``parametrize_with_checks``) or all together (``run_checks``), as scikit-learn's
``parametrize_with_checks`` and ``check_estimator`` do."""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterable, Iterator, MutableMapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Check", "ConformanceFailure", "ConformanceFailures", "Prerequisites", "first_line", "parametrize_with_checks",
    "pickled", "registered_while_checked", "run_checks",
]


class ConformanceFailure(AssertionError):
    """An extension broke its contract: ``extension`` (``stage kind 'key_join'``) failed
    ``check`` (``pickle``) because of ``detail``.

    Examples:
        >>> from pipeline.testing import ConformanceFailure, check_stage_kind
        >>> try:
        ...     check_stage_kind("no_such_kind")
        ... except ConformanceFailure as failure:
        ...     print(failure.extension, "/", failure.check)
        stage kind 'no_such_kind' / registered
    """

    def __init__(self, extension: str, check: str, detail: str) -> None:
        self.extension, self.check, self.detail = extension, check, detail
        super().__init__(f"{extension} fails the conformance check '{check}': {detail}")

    def __reduce__(self):
        return (type(self), (self.extension, self.check, self.detail))


class ConformanceFailures(ConformanceFailure):
    """Several checks failed: each is in ``failures`` and on a line of the message; ``check``
    and ``detail`` are the first one's."""

    def __init__(self, failures: Iterable[ConformanceFailure]) -> None:
        self.failures = list(failures)
        first = self.failures[0]
        self.extension, self.check, self.detail = first.extension, first.check, first.detail
        AssertionError.__init__(self, f"{len(self.failures)} conformance checks failed:\n"
                                + "\n".join(f"- {failure}" for failure in self.failures))

    def __reduce__(self):
        return (type(self), (self.failures,))


class _Unmet(Exception):
    """A check needs a step (a fitted state) whose own check failed."""

    def __init__(self, step: str, failure: ConformanceFailure) -> None:
        super().__init__(step)
        self.step, self.failure = step, failure


class Prerequisites:
    """Steps that several checks need (the op's fitted state, the validated spec), each done
    once: its value, or the failure it raised. A check that needs a failed step fails as
    "not run", naming it; the step's own check reports the failure itself."""

    def __init__(self) -> None:
        self._done: dict[str, tuple[bool, Any]] = {}

    def get(self, step: str, make: Callable[[], Any]) -> Any:
        if step not in self._done:
            try:
                self._done[step] = (True, make())
            except ConformanceFailure as failure:
                self._done[step] = (False, failure)
        ok, value = self._done[step]
        if ok:
            return value
        raise _Unmet(step, value)


@dataclass(frozen=True)
class Check:
    """One conformance check of one extension, runnable alone: calling it returns None when
    the extension passes it and raises ``ConformanceFailure`` otherwise.

    Examples:
        >>> from pipeline.testing import op_checks
        >>> check = op_checks("log1p")[-1]
        >>> check.id, check.test_id, check()
        ('frame api', 'feature op log1p-frame api', None)
    """

    extension: str                          # "feature op 'clip_outliers'"
    id: str                                 # "pickle"
    run: Callable[[], object]
    owns: tuple[str, ...] = ()              # steps whose failure is this check's own (besides ``id``)

    def __call__(self) -> None:
        try:
            self.run()
        except _Unmet as unmet:
            if unmet.step == self.id or unmet.step in self.owns or unmet.failure.check == self.id:
                raise unmet.failure from None
            raise ConformanceFailure(self.extension, self.id,
                                     f"not run: it needs the check '{unmet.failure.check}', which failed") from None

    @property
    def test_id(self) -> str:
        """The check's pytest id: the extension and the check (``feature op clip_outliers-pickle``)."""
        return f"{self.extension.replace(chr(39), '')}-{self.id}"


def run_checks(checks: Iterable[Check]) -> None:
    """Run every check, whatever fails before it; raise the one failure, or every failure at
    once (``ConformanceFailures``), or return None when all pass.

    Examples:
        >>> from pipeline.testing import op_checks, run_checks
        >>> run_checks(op_checks("log1p"))          # None: every check passed
    """
    failures = []
    for check in checks:
        try:
            check()
        except ConformanceFailure as failure:
            failures.append(failure)
    if len(failures) == 1:
        raise failures[0]
    if failures:
        raise ConformanceFailures(failures)


def parametrize_with_checks(*groups: Iterable[Check]) -> Any:
    """A ``pytest.mark.parametrize`` over every check of the given extensions, one test each,
    with its id, so a plugin's test run lists each check that passed or failed::

        from pipeline.testing import hook_checks, model_checks, op_checks, parametrize_with_checks

        @parametrize_with_checks(op_checks("clip_outliers"), model_checks("centroid"), hook_checks(AuditHook))
        def test_my_plugin(check):
            check()

    The checks are made when the test module is collected; they run only when called.

    Examples:
        >>> from pipeline.testing import op_checks, parametrize_with_checks
        >>> mark = parametrize_with_checks(op_checks("log1p")).mark
        >>> mark.args[0], mark.kwargs["ids"][:2]
        ('check', ['feature op log1p-class', 'feature op log1p-registered'])
    """
    import pytest

    checks = [check for group in groups for check in group]
    return pytest.mark.parametrize("check", checks, ids=[check.test_id for check in checks])


def first_line(exc: BaseException) -> str:
    """``Type: first line of the message``, for a failure's detail."""
    text = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def pickled(value: Any) -> Any:
    """``value`` through ``pickle`` and back, as Dask sends it to a worker (by reference for
    classes and functions: a worker imports the plugin that defines them)."""
    return pickle.loads(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))


@contextmanager
def registered_while_checked(registry: MutableMapping[str, Any], name: str, entry: Any) -> Iterator[None]:
    """``entry`` under ``name`` in ``registry`` while a check runs (a config block validates
    against the registries), and the registry as it was afterwards."""
    previous = registry.get(name)
    if previous is entry:
        yield
        return
    registry[name] = entry
    try:
        yield
    finally:
        if previous is None:
            registry.pop(name, None)
        else:
            registry[name] = previous
