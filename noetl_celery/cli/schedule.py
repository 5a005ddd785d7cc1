"""`schedule add | list | remove`: cron schedules kept in the engine's database and
fired by `noetl-celery beat`."""

from __future__ import annotations

from pathlib import Path

import click

from noetl_celery.cli.common import build_engine, dump_json, load_settings
from noetl_celery.cli.run import parse_payload
from noetl_celery.errors import NoetlError


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
    """Schedule TARGET: a catalog path, or a playbook file (registered on the way)."""
    values = parse_payload(payload)
    engine = build_engine(load_settings(), dispatch=False)
    try:
        path = target
        if Path(target).is_file():
            _, entry = engine.register_file(target)
            path = entry.path
        row = engine.schedules.add(path, cron, timezone=timezone, payload=values)
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
