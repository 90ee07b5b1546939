"""How anything that watches a run attaches: the run-hook protocol, the registry that turns
run-level outputs on from the config sections they own, the progress hooks for people and logs,
and run signatures as a hook.
"""
