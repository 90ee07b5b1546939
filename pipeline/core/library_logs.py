"""Libraries that give their loggers handlers of their own, brought back to this process's.

MLflow, when imported, gives the ``mlflow``, ``alembic``, ``huey`` and ``sqlalchemy.engine``
loggers a plain-text stderr handler of its own, at INFO, with propagation off: its lines
("Creating initial MLflow database tables...") would bypass ``--log-format json`` and ``-q``.
Once the CLI has set up logging (``route_library_logs``), ``adopt_library_loggers`` takes those
handlers away again: the loggers propagate to the root's handler (JSON lines in JSON mode) and
say only warnings and errors. A module that imports such a library calls it after the import; in
a process whose logging is its owner's (a library caller, MLflow's own server) it does nothing.
"""

from __future__ import annotations

import logging

# The loggers MLflow configures at import (mlflow.utils.logging_utils._configure_mlflow_loggers).
OWN_HANDLERS = ("mlflow", "alembic", "huey", "sqlalchemy.engine")

_routed: list[bool] = []


def route_library_logs() -> None:
    """This process's logging is the CLI's: adopt those loggers now and whenever asked again."""
    _routed[:] = [True]
    adopt_library_loggers()


def adopt_library_loggers() -> None:
    """Their own handlers removed, propagating to the root, below WARNING silenced (their INFO
    lines are the library's chatter, not the run's log). Nothing unless ``route_library_logs`` ran."""
    if not _routed:
        return
    for name in OWN_HANDLERS:
        logger = logging.getLogger(name)
        logger.handlers = []
        logger.propagate = True
        logger.setLevel(max(logger.level, logging.WARNING))
