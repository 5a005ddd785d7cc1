"""`status`, `executions` and `cancel` (`events` and `logs`: cli.history)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import click
from rich.text import Text

from noetl_celery.cli.common import InvalidInput, build_engine, dump_json, load_settings
from noetl_celery.cli.fleet import unserved_queues, unserved_text
from noetl_celery.cli.renderables import (
    executions_renderable,
    status_renderable,
    stdout_console,
    unfinished_text,
)
from noetl_celery.constants import RUNNING, TERMINAL_STATUSES, TRIGGERS
from noetl_celery.engine.bootstrap import Role
from noetl_celery.errors import ExecutionNotFound
from noetl_celery.models.filters import ExecutionFilter
from noetl_celery.settings import Settings

# a routed step waiting at least this long makes `status` ask which queues workers serve
UNSERVED_AFTER_SECONDS = 5.0


def _engine_call(method: str, execution_id: str) -> Any:
    engine = build_engine(load_settings(), Role.READER)
    try:
        return getattr(engine, method)(execution_id)
    except ExecutionNotFound as exc:
        raise InvalidInput(str(exc)) from exc
    finally:
        engine.close()


@click.command()
@click.argument("execution_id")
@click.option("--json", "as_json", is_flag=True)
def status(execution_id: str, as_json: bool) -> None:
    """Show an execution: status, steps, what runs now, loop progress, errors."""
    settings = load_settings()
    engine = build_engine(settings, Role.READER)
    try:
        view = engine.status(execution_id)
        database_id = engine.database_id
    except ExecutionNotFound as exc:
        raise InvalidInput(str(exc)) from exc
    finally:
        engine.close()
    if as_json:
        dump_json(view)
        return
    console = stdout_console()
    console.print(status_renderable(view))
    for queue, steps in _unserved(view, settings, database_id).items():
        console.print(Text(unserved_text(queue, steps), style="yellow"))


def _unserved(
    view: Mapping[str, Any], settings: Settings, mine: str | None
) -> dict[str, list[str]]:
    """Routed queues the execution's waiting steps need that no worker consumes (asks the
    fleet, a second at most, only when a routed step has waited a while)."""
    routed = [
        w
        for w in view.get("waiting") or []
        if w.get("queue") and (w.get("seconds") or 0) >= UNSERVED_AFTER_SECONDS
    ]
    if settings.embedded or not routed:
        return {}
    from noetl_celery.tasks.app import make_app
    from noetl_celery.tasks.fleet import fleet_identities

    return unserved_queues(routed, fleet_identities(make_app(settings), timeout=1.0), mine)


@click.command()
@click.option("--status", "status_", metavar="S", help="RUNNING, COMPLETED, FAILED or CANCELLED.")
@click.option("--playbook", metavar="P", help="Only runs of this catalog path.")
@click.option(
    "--trigger",
    "trigger",
    metavar="T",
    help="How they were started: manual, schedule, rerun, parent.",
)
@click.option("--limit", type=click.IntRange(1, 10_000), default=20, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="One JSON array, newest first.")
def executions(
    status_: str | None, playbook: str | None, trigger: str | None, limit: int, as_json: bool
) -> None:
    """Recent executions, newest first, with how each was started."""
    if status_ is not None and status_.upper() not in (RUNNING, *TERMINAL_STATUSES):
        raise click.BadParameter(f"unknown status {status_!r}", param_hint="--status")
    if trigger is not None and trigger.lower() not in TRIGGERS:
        known = ", ".join(sorted(TRIGGERS))
        raise click.BadParameter(
            f"unknown trigger {trigger!r} (use {known})", param_hint="--trigger"
        )
    engine = build_engine(load_settings(), Role.READER)
    try:
        match = ExecutionFilter(status=status_, path=playbook, trigger=trigger, limit=limit)
        rows = engine.executions(match)
    finally:
        engine.close()
    if as_json:
        dump_json(rows)
    else:
        stdout_console().print(executions_renderable(rows))


@click.command()
@click.argument("execution_id")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print {execution_id, status, cancelled, unfinished_rows, child_unfinished_rows}.",
)
def cancel(execution_id: str, as_json: bool) -> None:
    """Cancel a running execution and its children: nothing more is issued, running
    pipelines stop at their next task boundary. Rows cursor steps had claimed and not
    processed are listed (they stay claimed in your queue). Exit 1 if it had already
    ended."""
    engine = build_engine(load_settings(), Role.CLIENT)
    try:
        ended = engine.cancel_tree(execution_id, "cancelled by `noetl-celery cancel`")
        status_now = engine.store.execution_status(execution_id)
    except ExecutionNotFound as exc:
        raise InvalidInput(str(exc)) from exc
    finally:
        engine.close()
    left = ended.unfinished_rows if ended is not None else {}
    children = {
        child.execution_id: child.unfinished_rows
        for child in (ended.descendants() if ended is not None else ())
        if child.unfinished_rows
    }
    if as_json:
        dump_json(
            {
                "execution_id": execution_id,
                "status": status_now,
                "cancelled": ended is not None,
                # per cursor step: {epoch, count, rows, interrupted, truncated}
                "unfinished_rows": left,
                "child_unfinished_rows": children,
            }
        )
    elif ended is not None:
        click.echo(f"execution {execution_id} CANCELLED")
        for eid, reports in [(execution_id, left), *children.items()]:
            for step, report in reports.items():
                click.echo(unfinished_text(eid, step, report), err=True)
    else:
        click.echo(f"execution {execution_id} had already ended: {status_now}", err=True)
    if ended is None:
        raise SystemExit(1)
