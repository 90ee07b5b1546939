#!/usr/bin/env python
"""The anchor of the serving load test: what a user would write by hand with FastAPI.

One exported model folder, loaded once with the project's own loader (the same fitted feature
workflow and estimator ``pipeline serve`` uses), and a ``POST /predict`` that scores each
request's rows in their own model call: no queue, no batching across requests. The handler is a
plain ``def``, so FastAPI runs it on its thread pool and the event loop keeps accepting, as the
FastAPI documentation recommends for blocking work.

    python scripts/serve_anchor.py runs/churn/latest/export/models/xgb --port 8001

It answers ``{"rows": [{column: value, ...}, ...]}`` with ``{"predictions": [{"score": s}, ...]}``
and ``GET /health``. ``scripts/bench_serve.py`` starts it beside ``pipeline serve``.
"""

from __future__ import annotations

import argparse
from typing import Any

import pandas as pd
import uvicorn
from fastapi import FastAPI

from pipeline.scoring.model_folder import load_model


def build_app(folder: str) -> FastAPI:
    saved = load_model(folder, device="cpu")
    dtypes = {name: dtype for name, dtype in saved.workflow.input_columns_.items()
              if dtype.startswith(("int", "float", "uint", "bool"))}
    columns = list(saved.workflow.input_columns_)
    app = FastAPI()

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/predict")
    def predict(body: dict[str, Any]) -> dict[str, Any]:
        frame = pd.DataFrame(body["rows"], columns=columns).astype(dtypes)
        scores = saved.score(frame)
        return {"predictions": [{"score": float(value)} for value in scores.reshape(len(frame), -1)[:, -1]]}

    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_folder")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8001)
    args = parser.parse_args()
    uvicorn.run(build_app(args.model_folder), host=args.host, port=args.port, log_level="warning",
                access_log=False)


if __name__ == "__main__":
    main()
