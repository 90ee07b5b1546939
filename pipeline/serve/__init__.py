"""Online scoring: ``pipeline serve`` (an HTTP server around a run's exported model) as a library.

    from pipeline.serve import create_app
    app = create_app("champion", runs_dir="runs", pipeline="churn")     # a FastAPI app

FastAPI, uvicorn and prometheus-client come with the ``serve`` extra and are imported only in
this package; without them ``require_serve_extra`` raises ``BackendUnavailable`` (exit 5)
saying how to install them. The API and its decisions: docs/guides/serving.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pipeline.core.errors import BackendUnavailable
from pipeline.serve.serve_options import ServeOptions

if TYPE_CHECKING:
    from fastapi import FastAPI

__all__ = ["ServeOptions", "create_app", "require_serve_extra"]

_SERVE_MODULES = ("fastapi", "uvicorn", "prometheus_client")


def require_serve_extra() -> None:
    """Raise ``BackendUnavailable`` naming the missing libraries when the ``serve`` extra is not installed."""
    import importlib.util

    missing = [name for name in _SERVE_MODULES if importlib.util.find_spec(name) is None]
    if missing:
        verb = "is" if len(missing) == 1 else "are"
        raise BackendUnavailable(f"pipeline serve needs {', '.join(missing)}, which {verb} not installed here; "
                                 "install the serve extra: pip install 'pipeline[serve]' "
                                 "(in a checkout: pip install -e '.[serve]')")


def create_app(run: str, options: ServeOptions | None = None, /, **changes: Any) -> FastAPI:
    """``pipeline.serve.http_app.create_app``: the app serving ``run``'s model (see there)."""
    require_serve_extra()
    from pipeline.serve.http_app import create_app as build

    return build(run, options, **changes)
