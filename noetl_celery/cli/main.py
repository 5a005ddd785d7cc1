"""The `noetl-celery` command.

Every error the engine raises on purpose (`NoetlError`: a bad setting, a database that
cannot be used, tables at another revision, ...) is printed here, once, as one line, with
exit code 2 and no traceback; commands only handle the ones they turn into their own
output (`run --json` prints its JSON object).
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from noetl_celery import __version__
from noetl_celery.cli.admin import beat, db, worker
from noetl_celery.cli.catalog import catalog, validate
from noetl_celery.cli.common import EXIT_INVALID, setup_logging
from noetl_celery.cli.example_api import example_api
from noetl_celery.cli.flower import flower
from noetl_celery.cli.history import events, logs
from noetl_celery.cli.inspect import cancel, executions, status
from noetl_celery.cli.rerun import rerun
from noetl_celery.cli.run import run
from noetl_celery.cli.schedule import schedule
from noetl_celery.cli.serve import serve
from noetl_celery.cli.watch import watch
from noetl_celery.errors import NoetlError

# commands whose logging Celery configures (levels from its own options)
CELERY_COMMANDS = frozenset({"worker", "beat", "flower"})


@click.group()
# the package's location too: "which install is this?" is the first question when a
# deployment misbehaves (an editable checkout, a wheel, a stale copy)
@click.version_option(
    __version__,
    prog_name="noetl-celery",
    message=f"%(prog)s %(version)s ({Path(__file__).resolve().parents[1]})",
)
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
    serve,
    db,
    example_api,
):
    cli.add_command(command)


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def main() -> None:
    try:
        cli(prog_name="noetl-celery")
    except NoetlError as exc:
        click.echo(f"Error: {one_line(exc)}", err=True)
        sys.exit(EXIT_INVALID)


if __name__ == "__main__":
    main()
