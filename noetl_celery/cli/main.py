"""The `noetl-celery` command."""

from __future__ import annotations

import click

from noetl_celery.cli.admin import beat, db, worker
from noetl_celery.cli.catalog import catalog, validate
from noetl_celery.cli.common import setup_logging
from noetl_celery.cli.example_api import example_api
from noetl_celery.cli.flower import flower
from noetl_celery.cli.inspect import cancel, events, executions, status
from noetl_celery.cli.run import run
from noetl_celery.cli.schedule import schedule


@click.group()
@click.option("-v", "--verbose", count=True, help="More logging on stderr (-vv for debug).")
def cli(verbose: int) -> None:
    """Run NoETL DSL v2 playbooks on Celery workers with Postgres as the source of truth.

    With no NOETL_DATABASE_URL / NOETL_BROKER_URL everything runs in this process on an
    embedded SQLite database (~/.noetl-celery/noetl.sqlite3).
    """
    setup_logging(verbose)


for command in (
    run,
    validate,
    status,
    executions,
    events,
    cancel,
    catalog,
    schedule,
    worker,
    beat,
    flower,
    db,
    example_api,
):
    cli.add_command(command)


def main() -> None:
    cli(prog_name="noetl-celery")


if __name__ == "__main__":
    main()
