"""The HTTP application: NoETL's routes, the native API, `/metrics` and the pages on one
FastAPI app (OpenAPI at `/docs`), behind `auth.AuthGate` and optional CORS."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware

from noetl_celery import __version__
from noetl_celery.constants import MAX_PLAYBOOK_BYTES
from noetl_celery.engine.service import Engine
from noetl_celery.settings import Settings
from noetl_celery.web import api_gui, api_native, api_noetl, apidocs, metrics, problems
from noetl_celery.web.auth import ApiAuth, AuthGate
from noetl_celery.web.guard import GuardPolicy, RequestGuard
from noetl_celery.web.pages import render
from noetl_celery.web.pages import routes as pages

# what a request may carry besides the largest payload: a playbook's text (base64 in
# JSON: 4/3 of it) and the JSON around them
BODY_OVERHEAD = 2 * MAX_PLAYBOOK_BYTES + 64 * 1024


def guard_policy(settings: Settings) -> GuardPolicy:
    return GuardPolicy.build(
        credentials=ApiAuth.from_settings(settings).configured,
        allowed_hosts=settings.api_allowed_hosts,
        cors_origins=settings.api_cors_origins,
        max_body_bytes=settings.max_payload_bytes + BODY_OVERHEAD,
    )


def create_app(engine: Engine, settings: Settings) -> FastAPI:
    policy = guard_policy(settings)
    app = FastAPI(
        title="noetl-celery",
        version=__version__,
        description="Executions, events, logs, catalog and schedules of a noetl-celery "
        "engine database; NoETL's own CLI routes under /api.",
        # served from the package, not a CDN (web.apidocs)
        docs_url=None,
        redoc_url=None,
    )
    app.state.engine = engine
    app.state.settings = settings
    app.state.metrics_registry = metrics.registry_for(engine)
    problems.install(app)
    app.include_router(api_native.router)
    app.include_router(api_noetl.router)
    app.include_router(api_gui.router)
    app.include_router(metrics.router)
    app.include_router(pages.router)
    app.include_router(apidocs.router)
    # the last middleware added is the outermost: CORS answers preflights and decorates
    # 401s and the guard's refusals too, so a browser sees why, not a CORS failure; the
    # guard (Host, cross-site, content type, size) comes before the credentials
    app.add_middleware(AuthGate, auth=ApiAuth.from_settings(settings))
    app.add_middleware(RequestGuard, policy=policy, html_error=render.error_page)
    if settings.api_cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(settings.api_cors_origins),
            allow_methods=["*"],
            allow_headers=["*"],
            allow_credentials=True,
        )
    return app
