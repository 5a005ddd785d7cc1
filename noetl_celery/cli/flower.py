"""`noetl-celery flower`: Flower on the engine's Celery app.

Bound to 127.0.0.1 unless told otherwise. Flower 2 serves its REST API (`/api/...`)
only with authentication configured, or with `FLOWER_UNAUTHENTICATED_API=true`;
`--basic-auth USER:PASS` (or `NOETL_FLOWER_BASIC_AUTH`) turns on basic auth for the
pages, the API and `/metrics` alike (Flower itself leaves `/metrics` open: see
tasks.flower_metrics). Workers send task events only while a monitor asks for them:
Flower asks every few seconds, and this command asks them to stop when Flower exits
(see tasks.task_events), so a deployment pays for them only while Flower runs.

The executions and schedules pages (the same as `serve`'s) are added to Flower's routes,
navigation and task pages before it starts (tasks.flower_pages), on an engine that can
cancel and rerun: cancels and reruns publish to the workers like any other command.
"""

from __future__ import annotations

import os

import click

from noetl_celery.cli.common import build_engine, load_settings
from noetl_celery.engine.bootstrap import Role
from noetl_celery.errors import ConfigurationError


def check_basic_auth(value: str) -> str:
    """Flower splits the value on commas into `user:password` entries and accepts any
    entry as the whole credentials: a password with a comma would let in whoever sends
    its tail, so every entry must be a user and a password, both non-empty."""
    for entry in value.split(","):
        user, sep, password = entry.partition(":")
        if not (user and sep and password):
            raise click.BadParameter(
                "expected USER:PASS or USER:PASS,USER2:PASS2 (Flower splits on commas)",
                param_hint="--basic-auth / NOETL_FLOWER_BASIC_AUTH",
            )
    return value


@click.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.option("--address", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", type=int, default=5555, show_default=True)
@click.option(
    "--basic-auth",
    "basic_auth",
    metavar="USER:PASS",
    default=lambda: os.environ.get("NOETL_FLOWER_BASIC_AUTH") or None,
    help="HTTP basic auth for pages, API and /metrics (default: NOETL_FLOWER_BASIC_AUTH).",
)
@click.argument("flower_args", nargs=-1, type=click.UNPROCESSED)
def flower(address: str, port: int, basic_auth: str | None, flower_args: tuple[str, ...]) -> None:
    """Start Flower on the engine's Celery app (extra options go to Flower)."""
    settings = load_settings()
    if settings.embedded:
        raise ConfigurationError(
            "set NOETL_BROKER_URL (e.g. redis://127.0.0.1:6379/0 or amqp://guest:guest@127.0.0.1:5672//)"
        )
    argv = ["flower", f"--address={address}", f"--port={port}"]
    if basic_auth:
        # Flower runs in this process: with NOETL_FLOWER_BASIC_AUTH the password is on no
        # command line
        argv.append(f"--basic-auth={check_basic_auth(basic_auth)}")
    from noetl_celery.tasks.app import app
    from noetl_celery.tasks.flower_metrics import protect_metrics
    from noetl_celery.tasks.flower_pages import install_pages
    from noetl_celery.tasks.task_events import disable_task_events

    protect_metrics()
    engine = build_engine(settings, Role.SERVER)
    install_pages(engine)

    try:
        app.start(argv=[*argv, *flower_args])
    finally:
        disable_task_events(app)
        engine.close()
