"""Log output for people and for log shippers.

``text``: one timestamped line per event. ``json``: one JSON object per line with the
message and the event's fields (``event``, ``stage``, ``seconds``, ``metrics``...), which
Loki, Elasticsearch, CloudWatch and friends index without a parser.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
from datetime import datetime, timezone
from typing import Any

from pipeline.errors import request_termination

# Extra fields the reporters attach to records (logging's ``extra=``).
EVENT_FIELDS = ("event", "run_id", "stage", "kind", "status", "seconds", "peak_rss_bytes", "worker",
                "device", "stages", "metrics", "best", "error", "exit_code")
NOISY = ("matplotlib", "PIL", "distributed", "tornado")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in EVENT_FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                entry[name] = value
        if record.exc_info:
            entry["traceback"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def setup_logging(*, quiet: bool = False, log_format: str = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s",
                                               datefmt="%Y-%m-%dT%H:%M:%S%z"))
    logging.basicConfig(level=logging.WARNING if quiet else logging.INFO, handlers=[handler], force=True)
    # Libraries' own chatter (matplotlib's font cache notice) is not part of a run's log.
    for noisy in NOISY:
        logging.getLogger(noisy).setLevel(logging.WARNING)


def stop_on_sigterm() -> None:
    """Turn SIGTERM (Kubernetes, systemd, timeouts) into an exception in the main thread, so
    the run records itself as interrupted, releases its lock and exits 143."""

    def handler(signum: int, frame: Any) -> None:
        raise request_termination()

    signal.signal(signal.SIGTERM, handler)
