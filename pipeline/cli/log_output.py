"""Log output for people and for log shippers.

``text``: one timestamped line per event. ``json``: one JSON object per line with the
message and the event's fields (``event``, ``stage``, ``seconds``, ``metrics``...), which
Loki, Elasticsearch, CloudWatch and friends index without a parser. In JSON mode nothing else
reaches the log: Python warnings are log records, Dask's local worker processes log JSON lines
too (``worker_json_logging``), a library's loggers with handlers of their own (MLflow's) are
brought back to this one (``pipeline.core.library_logs``), and the CLI writes its own output
(metrics, the run's result, errors) with ``json_line``.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from datetime import datetime, timezone
from typing import Any

from pipeline.core.interrupts import request_termination, request_user_interrupt, stop_handler
from pipeline.core.library_logs import route_library_logs

# Extra fields the reporters attach to records (logging's ``extra=``).
EVENT_FIELDS = ("event", "run_id", "stage", "kind", "status", "seconds", "peak_rss_bytes", "worker",
                "device", "stages", "metrics", "best", "error", "exit_code")
NOISY = ("matplotlib", "PIL", "distributed", "tornado")


def json_line(message: str, *, level: str = "info", logger: str = "pipeline", created: float | None = None,
              **fields: Any) -> str:
    """One log event as a JSON object on one line: what ``--log-format json`` writes for log
    records and for the CLI's own output (metrics, the run's result, errors)."""
    when = datetime.now(timezone.utc) if created is None else datetime.fromtimestamp(created, timezone.utc)
    entry: dict[str, Any] = {"time": when.isoformat(timespec="milliseconds"), "level": level,
                             "logger": logger, "message": message}
    entry.update({name: value for name, value in fields.items() if value is not None})
    from pipeline.runs.store import json_text

    return json_text(entry, indent=None, default=str)     # NaN is not JSON: an undefined metric is null


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        fields = {name: getattr(record, name, None) for name in EVENT_FIELDS}
        if record.exc_info:
            fields["traceback"] = self.formatException(record.exc_info)
        return json_line(record.getMessage(), level=record.levelname.lower(), logger=record.name,
                         created=record.created, **fields)


# Logging of processes this one starts (Dask's local workers): in JSON mode their records are
# JSON lines on the same stderr. Dask reads this variable when a worker imports ``distributed``.
WORKER_LOGGING_ENV = "DASK_DISTRIBUTED__LOGGING"


def worker_json_logging() -> dict[str, Any]:
    """The ``logging.config`` dictionary Dask applies when a process imports ``distributed``:
    the root logger writes JSON lines to stderr (levels stay as they are). In this process
    it replaces the root handler with an equal one."""
    handler = {"class": "logging.StreamHandler", "stream": "ext://sys.stderr", "formatter": "json"}
    return {"version": 1, "disable_existing_loggers": False,
            "formatters": {"json": {"()": f"{__name__}.json_formatter_capturing_warnings"}},
            "handlers": {"stderr": handler}, "root": {"handlers": ["stderr"]}}


def json_formatter_capturing_warnings() -> JsonFormatter:
    """The formatter of ``worker_json_logging``; building it also routes Python warnings into
    logging, as ``setup_logging`` does here: a worker runs none of this package's setup code."""
    logging.captureWarnings(True)
    return JsonFormatter()


def setup_logging(*, quiet: bool = False, log_format: str = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
        # Python warnings (a library's FutureWarning) become log records, hence JSON lines too.
        logging.captureWarnings(True)
        os.environ.setdefault(WORKER_LOGGING_ENV, repr(worker_json_logging()))
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s",
                                               datefmt="%Y-%m-%dT%H:%M:%S%z"))
    logging.basicConfig(level=logging.WARNING if quiet else logging.INFO, handlers=[handler], force=True)
    # Libraries' own chatter (matplotlib's font cache notice) is not part of a run's log.
    for noisy in NOISY:
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # Loggers a library gives a handler of its own (MLflow's, at import) come back to this one,
    # now and after the modules that import it do so.
    route_library_logs()


def stop_on_sigterm() -> None:
    """Turn SIGTERM (Kubernetes, systemd, timeouts) into an exception in the main thread, so
    the run records itself as interrupted, releases its lock and exits 143; and note SIGINT
    too. Each is raised where it arrives unless the main thread is inside an import or a
    library's callback from C code, where an exception would be swallowed or corrupt the
    library: then it is raised a moment later, out of it (``interrupts.stop_handler``)."""
    signal.signal(signal.SIGTERM, stop_handler(request_termination))
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:     # not when a parent ignores it
        signal.signal(signal.SIGINT, stop_handler(request_user_interrupt))
