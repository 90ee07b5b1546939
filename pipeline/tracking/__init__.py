"""Sending runs to the tracking server a team already uses, as hooks on the run.

``MlflowHook`` logs a run to MLflow (``tracking: {mlflow: {...}}``; the ``mlflow`` extra). A
tracking server that is down, slow or refusing never fails a run that was otherwise fine: the
hook warns once, stops calling it, and says what happened in the run folder's
``tracking.json``. ``pipeline.tracking.tracking_section`` registers it with the ``tracking:`` section.

Each exported model of a succeeded run is also logged as an MLflow pyfunc model
(``pipeline.tracking.mlflow_pyfunc``, loaded by MLflow through ``pyfunc_entry.py``: code and
the model's own files, no pickle), and with ``register:`` the run's best model becomes a
registry version carrying the aliases the run's stages ask for (``champion``); ``pipeline runs
promote`` moves the registry's ``champion`` with the run folder's (``promote_version``).
"""

from pipeline.tracking.mlflow_hook import TRACKING_FILE, MlflowHook

__all__ = ["TRACKING_FILE", "MlflowHook"]
