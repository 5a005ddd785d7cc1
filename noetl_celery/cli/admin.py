"""`worker` and `db upgrade`."""

from __future__ import annotations

import click

from noetl_celery.cli.common import dump_json, load_settings
from noetl_celery.constants import QUEUE_COMMANDS, QUEUE_ORCHESTRATE
from noetl_celery.store.database import Database


@click.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.argument("celery_args", nargs=-1, type=click.UNPROCESSED)
def worker(celery_args: tuple[str, ...]) -> None:
    """Start a Celery worker on the engine's queues (extra options go to Celery)."""
    settings = load_settings()
    if settings.embedded:
        raise click.ClickException("set NOETL_BROKER_URL (e.g. redis://127.0.0.1:6379/0)")
    Database(settings.effective_database_url).ensure_schema(upgrade=True)
    from noetl_celery.tasks.app import app

    argv = [
        "worker",
        "-Q",
        f"{QUEUE_COMMANDS},{QUEUE_ORCHESTRATE}",
        "--without-gossip",
        "--without-mingle",
        "-l",
        "INFO",
        *celery_args,
    ]
    app.worker_main(argv=argv)


@click.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.argument("celery_args", nargs=-1, type=click.UNPROCESSED)
def beat(celery_args: tuple[str, ...]) -> None:
    """Start celery beat with the engine's schedule: the reaper every
    NOETL_REAPER_INTERVAL_SECONDS (extra options go to Celery). Run one or more; the
    reaper sweeps one at a time by a lease in Postgres."""
    settings = load_settings()
    if settings.embedded:
        raise click.ClickException("set NOETL_BROKER_URL (e.g. redis://127.0.0.1:6379/0)")
    Database(settings.effective_database_url).ensure_schema(upgrade=True)
    from noetl_celery.tasks.app import app

    # the schedule lives in the app: the in-memory scheduler keeps no state file
    argv = ["beat", "-l", "INFO", "--scheduler", "celery.beat:Scheduler", *celery_args]
    app.start(argv=argv)


@click.group()
def db() -> None:
    """The engine's own database."""


@db.command("upgrade")
@click.option("--json", "as_json", is_flag=True, help='Print {"revision": ...}.')
def upgrade(as_json: bool) -> None:
    """Create or migrate the engine's tables to this version."""
    database = Database(load_settings().effective_database_url)
    try:
        database.upgrade()
        revision = database.current_revision()
    finally:
        database.dispose()
    if as_json:
        dump_json({"revision": revision})
    else:
        click.echo(f"database at revision {revision}")
