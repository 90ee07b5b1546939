"""What a run uses and what it may use: memory and GPU sampling per stage, costs priced from the
config's rates, and the budget caps that stop a run. Costs (``cost_hook``) and budgets
(``budget``) reach runs as hooks registered with the ``cost:`` and ``budget:`` sections they own.
"""
