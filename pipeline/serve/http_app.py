"""The FastAPI application of ``pipeline serve``: endpoints, error mapping, metrics, champion reload.

Request handling is kept lean because it is paid per request: the body is read as bytes and
validated by pydantic-core in one call (``ServedModel.parse_json``), the response is
serialised by ``json.dumps`` into a plain ``Response`` (no ``jsonable_encoder`` pass), and
request metrics are taken by a small ASGI middleware. Everything a client can get wrong is a
4xx whose ``detail`` names the field (and row); an unexpected failure is a 500 that is logged
with its traceback, and the server keeps serving either way.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, Response
from starlette.requests import ClientDisconnect

from pipeline.core.errors import DataError, RowsError
from pipeline.runs.layout import CHAMPION
from pipeline.serve.batcher import Job, MicroBatcher
from pipeline.serve.prometheus_metrics import CONTENT_TYPE, ServeMetrics
from pipeline.serve.serve_options import ServeOptions
from pipeline.serve.served_model import RequestError, ServedModel, load_served_model, rows_request_error

log = logging.getLogger("pipeline")

ARROW_STREAM = "application/vnd.apache.arrow.stream"
PARQUET_TYPES = ("application/vnd.apache.parquet", "application/x-parquet")
CSV_TYPE = "text/csv"
_ENDPOINTS = {"/predict", "/predict/batch", "/health", "/ready", "/metadata", "/metrics"}


# How long a body may send nothing before it is refused: 408 while serving; 503 once the
# server is stopping, so a stalled client does not hold the graceful stop (a pod's grace).
BODY_IDLE_SECONDS = 30.0
STOPPING_IDLE_SECONDS = 5.0


@dataclass
class ServeState:
    """What the endpoints share: the model served now (swapped atomically) and the batcher."""

    options: ServeOptions
    model: ServedModel
    metrics: ServeMetrics
    batcher: MicroBatcher
    ready: bool = False
    draining: bool = False
    failed_target: str | None = None      # a champion run that failed to load: not retried until it moves
    tasks: list[asyncio.Task] = field(default_factory=list)
    # The deadlines of the bodies being read (``read_body``): brought forward when the server stops.
    body_deadlines: set[asyncio.Timeout] = field(default_factory=set)

    def stopping(self) -> None:
        """The server is stopping (SIGTERM): not ready, and a body that stalls from now on waits
        ``STOPPING_IDLE_SECONDS`` at most. Called on the event loop."""
        self.draining = True
        soon = asyncio.get_running_loop().time() + STOPPING_IDLE_SECONDS
        for deadline in self.body_deadlines:
            when = deadline.when()
            if when is None or when > soon:
                deadline.reschedule(soon)


def create_app(run: str, options: ServeOptions | None = None, /, **changes: Any) -> FastAPI:
    """An app serving ``run``'s model (``latest``, ``champion``, a run id or folder), loaded,
    checked and warmed now, as ``pipeline predict`` loads it; mount it, serve it with any ASGI
    server, or test it in-process. ``options``: a ``ServeOptions``; ``changes``: its fields by
    name, over it. ``max_batch_rows`` 1 turns micro-batching off. With ``run="champion"`` (or
    ``watch=True``) the champion alias is re-read every ``reload_seconds`` and a new champion
    swapped in between batches."""
    options = ServeOptions.build(options, run=run, **changes)
    served = load_served_model(run, runs_dir=options.runs_dir, pipeline=options.pipeline, model=options.model,
                               device=options.device, threshold=options.threshold)
    metrics = ServeMetrics(drift_window=options.drift_window)
    batcher = MicroBatcher(max_rows=options.max_batch_rows, max_wait=options.max_wait_ms / 1000.0,
                           observer=metrics.observe_batch)
    state = ServeState(options=options, model=served, metrics=metrics, batcher=batcher)
    metrics.serving(served)
    return build_app(state)


def build_app(state: ServeState) -> FastAPI:
    """The FastAPI app around ``state`` (its lifespan starts the batcher and the watcher)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        await state.batcher.start()
        watching = state.options.watch if state.options.watch is not None else state.options.run == CHAMPION
        if watching:
            state.tasks.append(asyncio.get_running_loop().create_task(watch_champion(app, state)))
        state.ready = True
        try:
            yield
        finally:
            state.ready, state.draining = False, True
            for task in state.tasks:
                task.cancel()
            await state.batcher.stop()

    app = FastAPI(title="pipeline serve", lifespan=lifespan,
                  description="Scores rows with a model a pipeline run exported, as `pipeline predict` does.")
    app.state.serve = state

    @app.post("/predict", summary="Score JSON rows (records or columns)",
              openapi_extra={"requestBody": {"required": True, "content": {"application/json": {
                  "schema": {"$ref": "#/components/schemas/PredictRequest"}}}}})
    async def predict(request: Request) -> Response:
        content_type = request.headers.get("content-type", "application/json")
        if content_type_of(content_type)[0] not in ("application/json", ""):
            raise RequestError(415, f"POST /predict takes application/json, not {content_type}; Arrow and "
                                    "Parquet bodies go to POST /predict/batch")
        with state.batcher.arriving():
            body = await read_body(request, state.options.max_body_bytes)
            served = state.model                          # this request's model, even across a swap
            columns, rows, orientation = served.parse_json(body)
            pending = state.batcher.enqueue(Job(model=served, rows=rows, columns=columns))
        try:
            result = await pending
        except RowsError as exc:                          # values the features refuse, named by row
            raise rows_request_error(exc, orientation, served.fields) from None
        if orientation == "records":
            keys = list(result)
            predictions: Any = [dict(zip(keys, values)) for values in zip(*result.values())]
        else:
            predictions = result
        payload = {"run_id": served.run_id, "model": served.name, "task": served.task, "rows": rows,
                   "predictions": predictions}
        return Response(json.dumps(payload, separators=(",", ":")), media_type="application/json")

    @app.post("/predict/batch", summary="Score an Arrow IPC stream, a Parquet file or a CSV file",
              openapi_extra={"requestBody": {"required": True, "content": {
                  ARROW_STREAM: {"schema": {"type": "string", "format": "binary"}},
                  PARQUET_TYPES[0]: {"schema": {"type": "string", "format": "binary"}},
                  CSV_TYPE: {"schema": {"type": "string"}}}},
                  "parameters": [{"name": key, "in": "query", "required": False, "schema": {"type": "string"},
                                  "description": f"CSV bodies: the {key} (default: the run's load's)"}
                                 for key in ("sep", "encoding", "decimal", "thousands")]})
    async def predict_batch(request: Request) -> Response:
        media_type, parameters = content_type_of(request.headers.get("content-type", ""))
        if media_type not in (ARROW_STREAM, CSV_TYPE, *PARQUET_TYPES):
            raise RequestError(415, f"POST /predict/batch takes {ARROW_STREAM}, {PARQUET_TYPES[0]} "
                                    f"({PARQUET_TYPES[1]}) or {CSV_TYPE}, not {media_type or 'no content type'}")
        body = await read_body(request, state.options.max_body_bytes)
        served = state.model
        if media_type == CSV_TYPE:
            dialect = served.csv_dialect({**({"encoding": parameters["charset"]} if "charset" in parameters else {}),
                                          **dict(request.query_params)})
            frame = await asyncio.to_thread(served.frame_of_csv, body, dialect)
            table = await scored_table(served, frame)
            answer = table.to_csv(index=False, sep=dialect.sep, decimal=dialect.decimal).encode("utf-8")
            return Response(answer, media_type=f"{CSV_TYPE}; charset=utf-8")
        fmt = "arrow" if media_type == ARROW_STREAM else "parquet"
        frame = decode_table(body, fmt)
        frame = served.frame_of_table(frame, source=f"the {fmt} body")
        table = await scored_table(served, frame)
        return Response(encode_table(table, fmt), media_type=media_type)

    async def scored_table(served: ServedModel, frame: Any) -> Any:
        """A table body's scores; values the features refuse are named by row (``rows[3]``, 0-based)."""
        try:
            return await state.batcher.submit(Job(model=served, rows=len(frame), frame=frame))
        except RowsError as exc:
            raise rows_request_error(exc, "records", served.fields) from None

    @app.get("/health", summary="200 while the process lives")
    async def health() -> Response:
        return Response(b'{"status":"ok"}', media_type="application/json")

    @app.get("/ready", summary="200 once the model is loaded and warmed; 503 before and while draining")
    async def ready(request: Request) -> Response:
        server = getattr(request.app.state, "serve_server", None)       # uvicorn's, under `pipeline serve`
        if server is not None and server.should_exit:
            state.draining = True
        if state.ready and not state.draining:
            return Response(json.dumps({"status": "ready", "run_id": state.model.run_id}),
                            media_type="application/json")
        return JSONResponse({"status": "draining" if state.draining else "loading"}, status_code=503)

    @app.get("/metadata", summary="The model served: run, task, threshold, input columns, metrics, versions")
    async def metadata() -> Response:
        return JSONResponse(describe(state))

    @app.get("/metrics", summary="Prometheus metrics")
    async def metrics() -> Response:
        return Response(state.metrics.render(), media_type=CONTENT_TYPE)

    @app.exception_handler(RequestError)
    async def request_error(request: Request, exc: RequestError) -> Response:
        body: dict[str, Any] = {"detail": str(exc)}
        if exc.errors:
            body["errors"] = exc.errors
        return JSONResponse(body, status_code=exc.status)

    @app.exception_handler(ClientGone)
    async def client_gone(request: Request, exc: ClientGone) -> Response:
        path = request.url.path
        state.metrics.client_disconnects.labels(path if path in _ENDPOINTS else "other").inc()
        log.info("serve: %s %s: %s", request.method, path, exc)
        # 499, nginx's "client closed request": no one reads it, the request metrics record it.
        return Response(status_code=499)

    @app.exception_handler(DataError)
    async def data_error(request: Request, exc: DataError) -> Response:
        # Raised while scoring: the rows cannot be scored as given (predict would exit 3 on them).
        return JSONResponse({"detail": str(exc)}, status_code=422)

    @app.exception_handler(Exception)
    async def internal_error(request: Request, exc: Exception) -> Response:
        log.error("serve: %s %s failed", request.method, request.url.path, exc_info=exc)
        return JSONResponse({"detail": f"internal error ({type(exc).__name__}); see the server's log"},
                            status_code=500)

    def openapi() -> dict[str, Any]:
        """FastAPI's document with the served model's request schema (rebuilt after a swap)."""
        if app.openapi_schema is None:
            document = get_openapi(title=app.title, version=_version(), description=app.description,
                                   routes=app.routes)
            schema = dict(state.model.request_schema)
            definitions = schema.pop("$defs", {})
            components = document.setdefault("components", {}).setdefault("schemas", {})
            components.update(definitions)
            components["PredictRequest"] = schema
            app.openapi_schema = document
        return app.openapi_schema

    app.openapi = openapi                                 # type: ignore[method-assign]
    app.add_middleware(RequestMetrics, metrics=state.metrics)
    return app


class RequestMetrics:
    """Pure ASGI middleware: count every request by endpoint and status, and time it."""

    def __init__(self, app: Any, metrics: ServeMetrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started, status = time.perf_counter(), [500]

        async def sending(message: dict) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            path = scope.get("path", "")
            self.metrics.observe_request(path if path in _ENDPOINTS else "other", status[0],
                                         time.perf_counter() - started)


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refused (413) as soon as it is over ``limit`` bytes: by its Content-Length, or
    while it streams in. A body that stalls is refused too: 408 when nothing more of it comes
    for ``BODY_IDLE_SECONDS``, 503 after ``STOPPING_IDLE_SECONDS`` once the server stops (a
    stalled client held SIGTERM's stop to its 30 s end, then met a cancelled handler's 500).
    One deadline per body, moved on with the chunks (within a second): no task or poll."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise RequestError(413, f"the body is {int(declared)} bytes, over the limit of {limit} (--max-body-bytes)")
    state: ServeState | None = getattr(request.app.state, "serve", None) if "app" in request.scope else None
    deadlines = state.body_deadlines if state is not None else set()
    loop = asyncio.get_running_loop()
    chunks, size = [], 0
    deadline = asyncio.timeout(_idle_seconds(state))
    armed = loop.time()
    try:
        async with deadline:
            deadlines.add(deadline)
            async for chunk in request.stream():
                now = loop.time()
                if now - armed > 1.0:          # moved on at most once a second: a body in one chunk never
                    deadline.reschedule(now + _idle_seconds(state))
                    armed = now
                size += len(chunk)
                if size > limit:
                    raise RequestError(413, f"the body is over the limit of {limit} bytes (--max-body-bytes)")
                chunks.append(chunk)
    except ClientDisconnect:
        raise ClientGone(size) from None
    except TimeoutError:
        if state is not None and state.draining:
            raise RequestError(503, f"the server is stopping, and nothing more of the body arrived for "
                                    f"{STOPPING_IDLE_SECONDS:g}s (after {size} bytes); send the request again") from None
        raise RequestError(408, f"nothing more of the body arrived for {BODY_IDLE_SECONDS:g}s "
                                f"(after {size} bytes)") from None
    finally:
        deadlines.discard(deadline)
    return b"".join(chunks)


def _idle_seconds(state: ServeState | None) -> float:
    return STOPPING_IDLE_SECONDS if state is not None and state.draining else BODY_IDLE_SECONDS


class ClientGone(Exception):
    """The client hung up before its body was read: nobody is left to answer, and nothing
    failed here (counted in ``/metrics``, not logged as an error)."""

    def __init__(self, received: int) -> None:
        super().__init__(f"the client hung up after {received} bytes of its body")
        self.received = received


def content_type_of(header: str) -> tuple[str, dict[str, str]]:
    """A Content-Type header's media type (lower case) and its parameters (``charset``...)."""
    media_type, *rest = header.split(";")
    parameters = {}
    for part in rest:
        key, _, value = part.partition("=")
        if key.strip():
            parameters[key.strip().lower()] = value.strip().strip('"')
    return media_type.strip().lower(), parameters


def decode_table(body: bytes, fmt: str) -> Any:
    """A pandas frame of an Arrow IPC stream or Parquet body; a 400 when it is not one."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not body:
        raise RequestError(400, f"the {fmt} body is empty")
    try:
        if fmt == "arrow":
            table = pa.ipc.open_stream(io.BytesIO(body)).read_all()
        else:
            table = pq.read_table(io.BytesIO(body))
        return table.to_pandas()
    except (pa.ArrowException, OSError, ValueError) as exc:
        name = "an Arrow IPC stream" if fmt == "arrow" else "a Parquet file"
        raise RequestError(400, f"the body is not {name} ({exc})") from None


def encode_table(table: Any, fmt: str) -> bytes:
    """The scores table in the request's format."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    arrow = pa.Table.from_pandas(table, preserve_index=False)
    sink = io.BytesIO()
    if fmt == "arrow":
        with pa.ipc.new_stream(sink, arrow.schema) as writer:
            writer.write_table(arrow)
    else:
        pq.write_table(arrow, sink)
    return sink.getvalue()


def describe(state: ServeState) -> dict[str, Any]:
    """/metadata: the model, the software, and how requests are batched."""
    import platform

    options = state.options
    return {
        **state.model.metadata(),
        "serving": options.run,
        "versions": {"pipeline": _version(), "python": platform.python_version(), **_library_versions()},
        "batching": {"max_batch_rows": options.max_batch_rows, "max_wait_ms": options.max_wait_ms,
                     "enabled": options.batching},
        "max_body_bytes": options.max_body_bytes, "drift_window": options.drift_window,
        "reload_seconds": options.reload_seconds if state.tasks else None,
    }


def _version() -> str:
    from pipeline.version import __version__

    return __version__


def _library_versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for name in ("pandas", "numpy", "scikit-learn", "xgboost", "fastapi", "uvicorn"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            continue
    return found


# ------------------------------------------------------------------ champion reload
async def watch_champion(app: FastAPI, state: ServeState) -> None:
    """Every ``reload_seconds``, read where the champion alias points; when it is another run,
    load and warm that run's model on a thread, then swap it in (one assignment: a request
    keeps the model it started with). A run that fails to load is logged and skipped until the
    alias moves again; the old model serves meanwhile."""
    from pipeline.runs.history import alias_target

    options = state.options
    loop = asyncio.get_running_loop()
    while True:
        await asyncio.sleep(options.reload_seconds)
        pipeline_dir = state.model.opened.run_dir.parent
        try:
            target = await loop.run_in_executor(None, alias_target, pipeline_dir, CHAMPION)
        except DataError as exc:                          # not a link: say so once, keep serving
            if state.failed_target != CHAMPION:
                state.failed_target = CHAMPION
                log.warning("serve: %s; still serving run %s", exc, state.model.run_id)
            continue
        if target is None or target == state.model.run_id or target == state.failed_target:
            continue
        try:
            new = await loop.run_in_executor(None, lambda: load_served_model(
                pipeline_dir / target, runs_dir=options.runs_dir, pipeline=options.pipeline, model=options.model,
                device=options.device, threshold=options.threshold))
        except Exception as exc:                          # noqa: BLE001 - keep serving the old model
            state.failed_target = target
            state.metrics.reloads.labels("failed").inc()
            log.error("serve: the champion moved to run %s, which could not be loaded; still serving run %s "
                      "(%s: %s)", target, state.model.run_id, type(exc).__name__, exc)
            continue
        old, state.model, state.failed_target = state.model, new, None
        app.openapi_schema = None
        state.metrics.serving(new, old)
        state.metrics.reloads.labels("swapped").inc()
        log.warning("serve: the champion moved: now serving run %s model %s (was run %s model %s)",
                    new.run_id, new.name, old.run_id, old.name)
