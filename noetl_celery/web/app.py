"""The HTTP application: NoETL's routes, the native API, `/metrics` and the pages on one
FastAPI app (OpenAPI at `/docs`), behind `auth.AuthGate` and optional CORS."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware

from noetl_celery import __version__
from noetl_celery.engine.service import Engine
from noetl_celery.settings import Settings
from noetl_celery.web import api_native, api_noetl, metrics, problems
from noetl_celery.web.auth import ApiAuth, AuthGate
from noetl_celery.web.pages import routes as pages


def create_app(engine: Engine, settings: Settings) -> FastAPI:
    app = FastAPI(
        title="noetl-celery",
        version=__version__,
        description="Executions, events, logs, catalog and schedules of a noetl-celery "
        "engine database; NoETL's own CLI routes under /api.",
        docs_url="/docs",
    )
    app.state.engine = engine
    app.state.settings = settings
    app.state.metrics_registry = metrics.registry_for(engine)
    problems.install(app)
    app.include_router(api_native.router)
    app.include_router(api_noetl.router)
    app.include_router(metrics.router)
    app.include_router(pages.router)
    # the last middleware added is the outermost: CORS answers preflights and decorates
    # 401s too, so a browser sees "unauthorised", not a CORS failure
    app.add_middleware(AuthGate, auth=ApiAuth.from_settings(settings))
    if settings.api_cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(settings.api_cors_origins),
            allow_methods=["*"],
            allow_headers=["*"],
            allow_credentials=True,
        )
    return app
