"""`worker`, `beat`, `db upgrade` and `db prune`.

Workers and beat never create or migrate tables: they refuse a database that is not at
this version's revision (one line, exit 2), and print at start which database (and its
identity) and which broker they serve, so a misconfigured fleet is visible in its logs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from noetl_celery import tracing
from noetl_celery.cli.common import InvalidInput, dump_json, load_settings
from noetl_celery.constants import QUEUE_COMMANDS, QUEUE_ORCHESTRATE, ROW_CHUNK
from noetl_celery.engine.bootstrap import schema_mode
from noetl_celery.errors import ConfigurationError
from noetl_celery.routing import is_queue_name
from noetl_celery.settings import Settings, age_seconds, not_an_age
from noetl_celery.store.database import SchemaMode, open_database

if TYPE_CHECKING:
    from noetl_celery.engine.retention import PruneReport


def _fleet_settings() -> tuple[Settings, str | None]:
    """Settings of a worker or beat, checked; and the engine database's identity."""
    settings = load_settings()
    if settings.embedded:
        raise ConfigurationError(
            "set NOETL_BROKER_URL (e.g. redis://127.0.0.1:6379/0 or amqp://guest:guest@127.0.0.1:5672//)"
        )
    settings.require_shared_database()
    # the engines are built in the pool's processes, later: a bad OTEL_* value is
    # refused here, in one line, before Celery starts
    tracing.check()
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


def worker_queues(celery_args: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """The queues a worker serves and Celery's other arguments. Without `-Q` the
    engine's commands queue; `-Q io,cpu` (or `--queues`) chooses instead (a pool serving
    the steps routed there, tasks.routing). The orchestration queue is always served:
    any worker may run a pass."""
    chosen: list[str] = []
    rest: list[str] = []
    args = list(celery_args)
    i = 0
    while i < len(args):
        arg = args[i]
        value: str | None = None
        if arg in ("-Q", "--queues"):
            if i + 1 >= len(args):
                raise ConfigurationError(f"{arg} needs a queue name (e.g. {arg} io)")
            value = args[i + 1]
            i += 1
        elif arg.startswith("--queues="):
            value = arg.split("=", 1)[1]
        elif arg.startswith("-Q") and len(arg) > 2:
            value = arg[2:]
        else:
            rest.append(arg)
        if value is not None:
            for name in (part.strip() for part in value.split(",")):
                if not is_queue_name(name):
                    raise ConfigurationError(
                        f"worker -Q: {name!r} is not a queue name (letters, digits, - and _)"
                    )
                chosen.append(name)
        i += 1
    queues = list(dict.fromkeys(chosen or [QUEUE_COMMANDS]))
    if QUEUE_ORCHESTRATE not in queues:
        queues.append(QUEUE_ORCHESTRATE)
    return queues, rest


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
      -Q, --queues Q,...    queues to serve instead of noetl.commands (steps routed
                            there: spec.queue, NOETL_QUEUE_BY_KIND); noetl.orchestrate
                            is always served
      -n, --hostname NAME   this worker's name in Flower and logs (e.g. api@%h)
      -l, --loglevel LEVEL  INFO by default; DEBUG also shows every task received

    The rest: `celery worker --help`.
    """
    settings, database_id = _fleet_settings()
    click.echo(banner("worker", settings, database_id), err=True)
    from noetl_celery.tasks import fleet
    from noetl_celery.tasks.app import app

    fleet.set_identity(database_id, settings.shown_database_url)
    queues, rest = worker_queues(celery_args)
    argv = [
        "worker",
        "-Q",
        ",".join(queues),
        "--without-gossip",
        "--without-mingle",
        "-l",
        "INFO",
        *rest,
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


@db.command("prune")
@click.option(
    "--older-than",
    "older_than",
    required=True,
    metavar="AGE",
    help="Delete executions that ended longer ago than this: 30d, 12h, 90m.",
)
@click.option("--dry-run", is_flag=True, help="Count what would be deleted; change nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option(
    "--chunk-rows",
    type=click.IntRange(min=1),
    default=ROW_CHUNK,
    show_default=True,
    help="Rows of one table one delete transaction removes at most.",
)
def prune(older_than: str, dry_run: bool, as_json: bool, chunk_rows: int) -> None:
    """Delete ended executions (COMPLETED, FAILED, CANCELLED) older than AGE with all
    their rows: commands, events, results, contexts, loops, inbox, logs, cursor rows,
    held publishes, schedule firings. A running execution, and any execution linked to
    one (its sub-playbook parent or child, the original of a running rerun), stays;
    catalog, schedules, counters and leases are never touched. Deletes a chunk of rows
    per transaction; one prune at a time."""
    from noetl_celery.engine.retention import Pruner
    from noetl_celery.store.repository import Store

    seconds = age_seconds(older_than)
    if seconds is None:
        raise InvalidInput(f"--older-than: {not_an_age(older_than)}")
    settings = load_settings()
    database = open_database(
        settings.effective_database_url,
        SchemaMode.REQUIRE,
        statement_timeout_seconds=settings.db_statement_timeout_seconds,
        idle_in_transaction_seconds=settings.db_idle_in_transaction_seconds,
    )
    try:  # another prune running: PruneBusy, one line and exit 2 (cli.main)
        report = Pruner(Store(database), row_chunk=chunk_rows).prune(seconds, dry_run=dry_run)
    finally:
        database.dispose()
    if as_json:
        dump_json({"older_than": older_than, **report.as_json()})
        return
    click.echo(render_prune(report, older_than))


def render_prune(report: PruneReport, older_than: str) -> str:
    """The text `db prune` prints: what went (or would go), per table."""
    verb = "would delete" if report.dry_run else "deleted"
    lines = [
        f"{verb} {report.executions} executions that ended before "
        f"{report.cutoff.isoformat(timespec='seconds')} UTC (older than {older_than})"
    ]
    width = max(len(t) for t in report.rows)
    lines += [f"  {table:<{width}}  {n:>10}" for table, n in report.rows.items()]
    if report.kept:
        lines.append(
            f"{report.kept} ended executions kept: linked to a running one (its sub-playbook "
            "parent or child, or a running rerun)"
        )
    if report.idle_keys:
        lines.append(
            f"{report.idle_keys} rate_limit keys idle as long: their pacing rows "
            f"{'would go' if report.dry_run else 'went'} (declared again when next used)"
        )
    if report.transactions:
        lines.append(
            f"{report.transactions} transactions, longest {report.longest_transaction_ms:.0f} ms"
            f" ({report.longest_table}), {report.seconds:.1f} s in all"
        )
    return "\n".join(lines)
