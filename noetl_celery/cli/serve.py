"""`noetl-celery serve`: the REST API, NoETL's routes, `/metrics` and the pages.

With a broker configured, executions it starts run on the Celery workers; without one
(the embedded default) they run on threads of this process, as `run` does.
"""

from __future__ import annotations

import click

from noetl_celery.cli.common import build_engine, load_settings
from noetl_celery.engine.bootstrap import Role
from noetl_celery.errors import ConfigurationError
from noetl_celery.web.auth import ApiAuth, is_loopback

DEFAULT_PORT = 8082  # where NoETL's CLI looks first (http://localhost:8082)


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", type=int, default=DEFAULT_PORT, show_default=True)
@click.pass_context
def serve(ctx: click.Context, host: str, port: int) -> None:
    """Serve the HTTP API (OpenAPI at /docs), NoETL's CLI routes, /metrics and the pages."""
    settings = load_settings()
    auth = ApiAuth.from_settings(settings)
    if not auth.configured and not is_loopback(host):
        raise ConfigurationError(
            f"refusing to serve on {host} without authentication: set NOETL_API_TOKEN "
            "and/or NOETL_API_BASIC_AUTH=user:password, or bind 127.0.0.1"
        )
    import uvicorn

    from noetl_celery.web.app import create_app

    engine = build_engine(settings, Role.SERVER)
    try:
        app = create_app(engine, settings)
        click.echo(
            f"noetl-celery serve on http://{host}:{port} (API docs /docs); engine database "
            f"{settings.shown_database_url}; broker {settings.shown_broker_url}"
            + ("" if auth.configured else "; no authentication (loopback only)"),
            err=True,
        )
        verbose = (ctx.find_root().params.get("verbose") or 0) if ctx.find_root() else 0
        uvicorn.run(
            app,
            host=host,
            port=port,
            log_level="info" if verbose else "warning",
            access_log=bool(verbose),
        )
    finally:
        engine.close()
