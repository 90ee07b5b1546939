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
from pipeline.testing.failures import ConformanceFailure

__all__ = ["check_hook"]


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
    cls = hook if isinstance(hook, type) else type(hook)
    extension = f"run hook {cls.__module__}.{cls.__qualname__}"
    unknown = unknown_events(cls)
    if unknown:
        raise ConformanceFailure(extension, "event names", f"{', '.join(unknown)} answer(s) no event; the events are "
                                                            f"{', '.join(sorted(HOOK_EVENTS))}")
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
