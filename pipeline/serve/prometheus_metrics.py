"""The server's Prometheus metrics, in a registry of its own (two apps in one process, or a
test, never share counters), and drift per window of scored rows.

Drift: the rows of every model call are binned against the model's training profile
(``pipeline.metrics.drift``; the counts come from the same pass as the scores). Once a window
of ``drift_window`` rows is full, the PSI per feature of that window is published
(``pipeline_serve_drift_psi``) and a new window starts; a model exported without a reference
profile has no drift metrics. A swapped-in model starts a new window.
"""

from __future__ import annotations

import threading
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from pipeline.metrics.drift import DRIFT_THRESHOLD, Counts, over_threshold, psi, sum_counts

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_ROW_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096, 16384, 65536)


class ServeMetrics:
    """Counters, histograms and drift gauges of one server."""

    def __init__(self, *, drift_window: int = 10_000, drift_threshold: float = DRIFT_THRESHOLD) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter("pipeline_serve_requests", "HTTP requests by endpoint and status.",
                                ["endpoint", "status"], registry=r)
        self.errors = Counter("pipeline_serve_errors", "Requests answered with a 4xx or 5xx, by endpoint and status.",
                              ["endpoint", "status"], registry=r)
        self.latency = Histogram("pipeline_serve_request_seconds", "Time from request to response, by endpoint.",
                                 ["endpoint"], buckets=_LATENCY_BUCKETS, registry=r)
        self.batch_rows = Histogram("pipeline_serve_batch_rows", "Rows per model call (micro-batch sizes).",
                                    buckets=_ROW_BUCKETS, registry=r)
        self.batch_seconds = Histogram("pipeline_serve_batch_seconds", "Time of one model call.",
                                       buckets=_LATENCY_BUCKETS, registry=r)
        self.rows = Counter("pipeline_serve_rows", "Rows scored.", ["model"], registry=r)
        self.batches = Counter("pipeline_serve_batches", "Model calls by how they were scored: few_rows (NumPy "
                               "columns on the host), frame (pandas) or device.", ["path"], registry=r)
        self.model_info = Gauge("pipeline_serve_model_info", "The model being served (1).", ["run_id", "model"],
                                registry=r)
        self.reloads = Counter("pipeline_serve_reloads", "Champion swaps, by outcome.", ["outcome"], registry=r)
        self.client_disconnects = Counter("pipeline_serve_client_disconnects",
                                          "Requests whose client hung up before its body was read, by endpoint.",
                                          ["endpoint"], registry=r)
        self.drift_psi = Gauge("pipeline_serve_drift_psi",
                               "PSI per feature of the last full window of scored rows against the training rows.",
                               ["feature"], registry=r)
        self.drift_over = Gauge("pipeline_serve_drift_features_over_threshold",
                                f"Features of the last full window with a PSI over {drift_threshold:g}.", registry=r)
        self.drift_windows = Counter("pipeline_serve_drift_windows", "Full drift windows.", registry=r)
        self.drift_window_rows = Gauge("pipeline_serve_drift_window_rows", "Rows in the current drift window.",
                                       registry=r)
        self.drift_window = drift_window
        self.drift_threshold = drift_threshold
        self._lock = threading.Lock()
        self._window: list[Counts] = []
        self._window_rows = 0
        self._window_model: Any = None

    def serving(self, model: Any, previous: Any = None) -> None:
        """``model`` is now the one served (the info gauge follows it)."""
        if previous is not None:
            self.model_info.remove(previous.run_id, previous.name)
        self.model_info.labels(model.run_id, model.name).set(1)

    def observe_request(self, endpoint: str, status: int, seconds: float) -> None:
        code = str(status)
        self.requests.labels(endpoint, code).inc()
        self.latency.labels(endpoint).observe(seconds)
        if status >= 400:
            self.errors.labels(endpoint, code).inc()

    def observe_batch(self, model: Any, rows: int, counts: Counts | None, seconds: float) -> None:
        """One model call: its size and time, its rows, and its drift counts into the window."""
        self.batch_rows.observe(rows)
        self.batch_seconds.observe(seconds)
        self.rows.labels(model.name).inc(rows)
        if getattr(model, "last_path", ""):
            self.batches.labels(model.last_path).inc()
        reference = model.opened.saved.reference
        if counts is None or reference is None:
            return
        with self._lock:
            if self._window_model is not model:          # a new model: its own window
                self._window, self._window_rows, self._window_model = [], 0, model
            self._window.append(counts)
            self._window_rows += rows
            if self._window_rows >= self.drift_window:
                values = psi(reference, sum_counts(self._window))
                for feature, value in values.items():
                    self.drift_psi.labels(feature).set(value)
                self.drift_over.set(len(over_threshold(values, self.drift_threshold)))
                self.drift_windows.inc()
                self._window, self._window_rows = [], 0
            self.drift_window_rows.set(self._window_rows)

    def render(self) -> bytes:
        return generate_latest(self.registry)
