"""``check_hook``: whether a run hook answers the events the runner calls, by their names and
with their arguments.

The runner looks a hook's events up by name (``pipeline.hooks.protocol.HookList``), so a
misspelt event is never called and an event method with the wrong parameters fails only when
its event comes, as a logged warning: a report that never gets drawn, a tracker that never
logs. The check finds both before a run does::

    from pipeline.testing import check_hook

    def test_my_hook_conforms():
        check_hook(MyReportHook)
"""

from __future__ import annotations

import inspect

from pipeline.hooks.protocol import HOOK_EVENTS, RunHook, unknown_events
from pipeline.testing.failures import Check, ConformanceFailure, run_checks

__all__ = ["check_hook", "hook_checks"]


def check_hook(hook: object) -> None:
    """Check a hook class or instance: no method named like an event that is none (``event
    names``), and each event it answers takes the event's arguments (``event arguments``).
    Raises ``ConformanceFailure`` naming the hook and the check.

    Examples:
        >>> from pipeline.hooks.protocol import RunHook
        >>> from pipeline.testing import check_hook
        >>> class Finished(RunHook):
        ...     def run_finished(self, event):
        ...         pass
        >>> check_hook(Finished)                # None: every method is an event, with its arguments
        >>> class Misspelt(RunHook):
        ...     def run_finshed(self, event):
        ...         pass
        >>> check_hook(Misspelt)
        Traceback (most recent call last):
        ...
        pipeline.testing.failures.ConformanceFailure: ...run_finshed...
    """
    run_checks(hook_checks(hook))


def hook_checks(hook: object) -> list[Check]:
    """``check_hook``'s checks, one ``Check`` each (``event names``, ``event arguments``), for
    ``parametrize_with_checks``.

    Examples:
        >>> from pipeline.hooks.protocol import RunHook
        >>> from pipeline.testing import hook_checks
        >>> class Finished(RunHook):
        ...     def run_finished(self, event):
        ...         pass
        >>> [check.test_id.split("-")[-1] for check in hook_checks(Finished)]
        ['event names', 'event arguments']
    """
    cls = hook if isinstance(hook, type) else type(hook)
    extension = f"run hook {cls.__module__}.{cls.__qualname__}"
    return [Check(extension, "event names", lambda: _event_names(cls, extension)),
            Check(extension, "event arguments", lambda: _event_arguments(cls, extension))]


def _event_names(cls: type, extension: str) -> None:
    unknown = unknown_events(cls)
    if unknown:
        raise ConformanceFailure(extension, "event names", f"{', '.join(unknown)} answer(s) no event; the events are "
                                                            f"{', '.join(sorted(HOOK_EVENTS))}")


def _event_arguments(cls: type, extension: str) -> None:
    for event in sorted(HOOK_EVENTS):
        method = getattr(cls, event, None)
        if method is None or method is getattr(RunHook, event, None):
            continue
        wanted = len(inspect.signature(getattr(RunHook, event)).parameters) - 1        # without self
        try:
            inspect.signature(method).bind(None, *([None] * wanted))
        except TypeError as exc:
            raise ConformanceFailure(extension, "event arguments",
                                     f"{event} must take {wanted} argument(s) after self, as RunHook.{event} "
                                     f"does ({exc})") from None
