"""`schedule add | list | remove`: cron schedules kept in the engine's database and
fired by `noetl-celery beat`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NoReturn

import click

from noetl_celery.cli.common import (
    EXIT_FAILED,
    EXIT_INVALID,
    build_engine,
    dump_json,
    load_settings,
)
from noetl_celery.cli.inputs import parse_payload
from noetl_celery.errors import ConfigurationError, InputInvalid, NoetlError, PlaybookInvalid
from noetl_celery.models.inputs import PayloadLimits, check_payload
from noetl_celery.models.schedule import check_cron
from noetl_celery.models.validation import read_playbook


@click.group()
def schedule() -> None:
    """Cron schedules that start executions (fired by `noetl-celery beat`)."""


@schedule.command("add")
@click.argument("target")
@click.option("--cron", required=True, help='A cron expression, e.g. "*/5 * * * *".')
@click.option("--timezone", default="UTC", show_default=True, help="IANA timezone of --cron.")
@click.option("--payload", metavar="JSON", help="JSON object merged over the workload.")
@click.option("--json", "as_json", is_flag=True, help="Print the schedule as JSON.")
def add(target: str, cron: str, timezone: str, payload: str | None, as_json: bool) -> None:
    """Schedule TARGET: a catalog path, or a playbook file (registered on the way).
    Exit 2 when the payload or the playbook is invalid (nothing is written)."""
    settings = load_settings()
    try:  # every check that needs no database, before the playbook is registered
        values = parse_payload(payload, settings.max_payload_bytes)
        check_payload(values, PayloadLimits(max_bytes=settings.max_payload_bytes))
        check_cron(cron, timezone)
        text = read_playbook(target) if Path(target).is_file() else None
    except (InputInvalid, ConfigurationError) as exc:
        _refuse(exc, as_json)
    engine = build_engine(settings, dispatch=False)
    try:
        path = target
        if text is not None:
            _, entry = engine.register_text(text, target)
            path = entry.path
        row = engine.schedules.add(path, cron, timezone=timezone, payload=values)
    except (InputInvalid, PlaybookInvalid) as exc:
        _refuse(exc, as_json)
    except NoetlError as exc:
        raise click.ClickException(str(exc)) from exc
    finally:
        engine.close()
    if as_json:
        dump_json(row.to_json())
    else:
        click.echo(
            f"schedule {row.schedule_id}: {row.path} at '{row.cron}' ({row.timezone}), "
            f"next {row.next_fire_at:%Y-%m-%d %H:%M:%S} UTC"
        )


def _refuse(exc: NoetlError, as_json: bool) -> NoReturn:
    """Invalid input: one line (a bad cron keeps exit 1, as before; the rest exit 2),
    and with --json one object `{"schedule_id": null, "error": ...}` on stdout."""
    if isinstance(exc, PlaybookInvalid):
        message = "; ".join(str(p) for p in exc.problems if p.severity == "error") or str(exc)
    else:
        message = str(exc)
    if as_json:
        dump_json({"schedule_id": None, "error": message})
    else:
        click.echo(f"Error: {message}", err=True)
    sys.exit(EXIT_FAILED if isinstance(exc, ConfigurationError) else EXIT_INVALID)


@schedule.command("list")
@click.option("--json", "as_json", is_flag=True, help="A JSON array of schedules.")
def list_(as_json: bool) -> None:
    """Every schedule with its next firing."""
    engine = build_engine(load_settings(), dispatch=False)
    try:
        rows = engine.schedules.all()
    finally:
        engine.close()
    if as_json:
        dump_json([r.to_json() for r in rows])
        return
    for r in rows:
        state = "" if r.enabled else " (disabled)"
        click.echo(
            f"{r.schedule_id:>5}  {r.cron:<20} {r.timezone:<16} {r.path}  "
            f"next {r.next_fire_at:%Y-%m-%d %H:%M:%S} UTC{state}"
        )


@schedule.command("remove")
@click.argument("schedule_id", type=int)
@click.option("--json", "as_json", is_flag=True, help="Print {schedule_id, removed}.")
def remove(schedule_id: int, as_json: bool) -> None:
    """Remove a schedule (runs it started are not touched). Exit 1 if there is none."""
    engine = build_engine(load_settings(), dispatch=False)
    try:
        removed = engine.schedules.remove(schedule_id)
    finally:
        engine.close()
    if as_json:
        dump_json({"schedule_id": schedule_id, "removed": removed})
    elif removed:
        click.echo(f"schedule {schedule_id} removed")
    else:
        click.echo(f"no schedule {schedule_id}", err=True)
    if not removed:
        raise SystemExit(1)
