"""The run-level outputs the package ships, as registered hooks (``pipeline.hooks.hook_registry``).

Importing a module registers its hook with the config section it owns; the sections join the
config model in this order. A new run-level output is one module that calls ``register_hook``,
listed here (or, from outside the package, listed under a config's ``plugins:``).
"""

# Imported in the order of the config's keys: report, cost, tracking, budget.
# isort: off
from pipeline.report import report_section as report_hook
from pipeline.usage import cost_hook
from pipeline.tracking import tracking_section as tracking_hook
from pipeline.usage import budget as budget_hook
from pipeline.hooks import signature_hook as signing_hook
# isort: on

MODULES = tuple(module.__name__ for module in (report_hook, cost_hook, tracking_hook, budget_hook, signing_hook))
