"""`worker`, `beat` and `db upgrade`.

Workers and beat never create or migrate tables: they refuse a database that is not at
this version's revision (one line, exit 2), and print at start which database (and its
identity) and which broker they serve, so a misconfigured fleet is visible in its logs.
"""

from __future__ import annotations

import click

from noetl_celery.cli.common import dump_json, load_settings
from noetl_celery.constants import QUEUE_COMMANDS, QUEUE_ORCHESTRATE
from noetl_celery.engine.bootstrap import schema_mode
from noetl_celery.errors import ConfigurationError
from noetl_celery.settings import Settings
from noetl_celery.store.database import SchemaMode, open_database


def _fleet_settings() -> tuple[Settings, str | None]:
    """Settings of a worker or beat, checked; and the engine database's identity."""
    settings = load_settings()
    if settings.embedded:
        raise ConfigurationError("set NOETL_BROKER_URL (e.g. redis://127.0.0.1:6379/0)")
    settings.require_shared_database()
    database = open_database(settings.effective_database_url, schema_mode(settings, writes=True))
    try:
        return settings, database.database_id
    finally:
        database.dispose()


def banner(role: str, settings: Settings, database_id: str | None) -> str:
    return (
        f"noetl-celery {role}: engine database {settings.shown_database_url} "
        f"(identity {database_id or 'unknown'}), broker {settings.shown_broker_url}"
    )


@click.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.argument("celery_args", nargs=-1, type=click.UNPROCESSED, metavar="[CELERY OPTIONS]...")
def worker(celery_args: tuple[str, ...]) -> None:
    """Start a Celery worker on the engine's queues (extra options go to Celery).

    Needs NOETL_DATABASE_URL (Postgres, at this version's revision: `db upgrade`) and
    NOETL_BROKER_URL. Every option but -h/--help goes to Celery's worker unchanged; the
    ones a deployment sets:

    \b
      -c, --concurrency N   commands run at once (default: the number of CPUs)
      -P, --pool POOL       prefork (the default: CPU-heavy steps) or threads
                            (playbooks that wait on HTTP APIs; with a large -c)
      -Q, --queues Q,...    queues to consume (default: noetl.commands,noetl.orchestrate)
      -n, --hostname NAME   this worker's name in Flower and logs (e.g. api@%h)
      -l, --loglevel LEVEL  INFO by default; DEBUG also shows every task received

    The rest: `celery worker --help`.
    """
    settings, database_id = _fleet_settings()
    click.echo(banner("worker", settings, database_id), err=True)
    from noetl_celery.tasks import fleet
    from noetl_celery.tasks.app import app

    fleet.set_identity(database_id, settings.shown_database_url)
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
@click.argument("celery_args", nargs=-1, type=click.UNPROCESSED, metavar="[CELERY OPTIONS]...")
def beat(celery_args: tuple[str, ...]) -> None:
    """Start celery beat with the engine's schedule: the reaper every
    NOETL_REAPER_INTERVAL_SECONDS (extra options go to Celery). Run one or more; the
    reaper sweeps one at a time by a lease in Postgres."""
    settings, database_id = _fleet_settings()
    click.echo(banner("beat", settings, database_id), err=True)
    from noetl_celery.tasks.app import app

    if database_id is not None:
        # a worker on another database refuses beat's messages too (tasks.tasks)
        for entry in app.conf.beat_schedule.values():
            entry["kwargs"] = {"db": database_id}
    # the schedule lives in the app: the in-memory scheduler keeps no state file
    argv = ["beat", "-l", "INFO", "--scheduler", "celery.beat:Scheduler", *celery_args]
    app.start(argv=argv)


@click.group()
def db() -> None:
    """The engine's own database."""


@db.command("upgrade")
@click.option("--json", "as_json", is_flag=True, help='Print {"revision": ...}.')
def upgrade(as_json: bool) -> None:
    """Create or migrate the engine's tables to this version (the only command that
    changes a configured database's tables; the embedded default migrates itself)."""
    database = open_database(load_settings().effective_database_url, SchemaMode.MIGRATE)
    try:
        revision = database.current_revision()
    finally:
        database.dispose()
    if as_json:
        dump_json({"revision": revision})
    else:
        click.echo(f"database at revision {revision}")
