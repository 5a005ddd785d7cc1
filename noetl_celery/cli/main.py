"""The `noetl-celery` command."""

from __future__ import annotations

import click

from noetl_celery.cli.admin import beat, db, worker
from noetl_celery.cli.catalog import catalog, validate
from noetl_celery.cli.common import setup_logging
from noetl_celery.cli.flower import flower
from noetl_celery.cli.history import events, logs
from noetl_celery.cli.inspect import cancel, executions, status
from noetl_celery.cli.rerun import rerun
from noetl_celery.cli.run import run
from noetl_celery.cli.schedule import schedule
from noetl_celery.cli.watch import watch

# commands whose logging Celery configures (levels from its own options)
CELERY_COMMANDS = frozenset({"worker", "beat", "flower"})


@click.group()
@click.option("-v", "--verbose", count=True, help="More logging on stderr (-vv for debug).")
@click.pass_context
def cli(ctx: click.Context, verbose: int) -> None:
    """Run NoETL DSL v2 playbooks on Celery workers with Postgres as the source of truth.

    With no NOETL_DATABASE_URL / NOETL_BROKER_URL everything runs in this process on an
    embedded SQLite database (~/.noetl-celery/noetl.sqlite3).
    """
    setup_logging(verbose, capture=ctx.invoked_subcommand not in CELERY_COMMANDS)


for command in (
    run,
    watch,
    rerun,
    validate,
    status,
    executions,
    events,
    logs,
    cancel,
    catalog,
    schedule,
    worker,
    beat,
    flower,
    db,
):
    cli.add_command(command)


def main() -> None:
    cli(prog_name="noetl-celery")


if __name__ == "__main__":
    main()
