"""Run signatures as a hook: the key is checked before a run starts, and a succeeded run's final
manifest is signed once it is written (``pipeline.runs.signing``: ``PIPELINE_SIGNING_KEY`` or
``PIPELINE_SIGNING_KEY_FILE``; without a key nothing is signed). No config section: the key is
the environment's, never a config file's.
"""

from __future__ import annotations

from typing import Any

from pipeline.hooks.protocol import RunEvent, RunHook, RunPlan
from pipeline.hooks.hook_registry import HookContext, register_hook
from pipeline.runs.signing import check_signing_key, sign_run


class SigningHook(RunHook):
    """Fails a run whose key is set but unusable before any work, and signs it when it succeeded.

    Critical: a signature that cannot be written fails the run, since a job that meant to sign
    must never end with an unsigned run taken as its result.
    """

    critical = True

    def preflight(self, plan: RunPlan) -> None:
        check_signing_key()              # a key that is set but unusable fails before any work

    def run_recorded(self, event: RunEvent) -> None:
        if event.status == "succeeded":
            sign_run(event.run.run_dir)  # manifest.json.sig, with a key set


def signing_hook(section: Any, context: HookContext) -> SigningHook:
    return SigningHook()


# First of all: a run refused for its key is refused before any other hook's check or watch.
register_hook("signing", signing_hook, order=-200)
