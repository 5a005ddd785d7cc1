"""`noetl-celery flower`: Flower on the engine's Celery app.

Bound to 127.0.0.1 unless told otherwise. Flower 2 serves its REST API (`/api/...`)
only with authentication configured, or with `FLOWER_UNAUTHENTICATED_API=true`;
`--basic-auth USER:PASS` (or `NOETL_FLOWER_BASIC_AUTH`) turns on basic auth for the
pages and the API alike. Workers send task events only while a monitor asks for them
(Flower's `--enable_events`, on by default, asks every few seconds), so a deployment
without Flower pays nothing for them.
"""

from __future__ import annotations

import os

import click

from noetl_celery.cli.common import load_settings


@click.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.option("--address", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", type=int, default=5555, show_default=True)
@click.option(
    "--basic-auth",
    "basic_auth",
    metavar="USER:PASS",
    default=lambda: os.environ.get("NOETL_FLOWER_BASIC_AUTH") or None,
    help="HTTP basic auth for pages and API (default: NOETL_FLOWER_BASIC_AUTH).",
)
@click.argument("flower_args", nargs=-1, type=click.UNPROCESSED)
def flower(address: str, port: int, basic_auth: str | None, flower_args: tuple[str, ...]) -> None:
    """Start Flower on the engine's Celery app (extra options go to Flower)."""
    settings = load_settings()
    if settings.embedded:
        raise click.ClickException("set NOETL_BROKER_URL (e.g. redis://127.0.0.1:6379/0)")
    if basic_auth is not None and ":" not in basic_auth:
        raise click.BadParameter("expected USER:PASS", param_hint="--basic-auth")
    from noetl_celery.tasks.app import app

    argv = ["flower", f"--address={address}", f"--port={port}"]
    if basic_auth:
        argv.append(f"--basic-auth={basic_auth}")
    app.start(argv=[*argv, *flower_args])
