"""`schedule add | list | remove | pause | resume | trigger`: cron schedules kept in the
engine's database and fired by `noetl-celery beat`."""

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
from noetl_celery.cli.renderables import schedules_renderable, stdout_console
from noetl_celery.engine.bootstrap import Role
from noetl_celery.errors import (
    BrokerUnavailable,
    CatalogNotFound,
    ConfigurationError,
    InputInvalid,
    NoetlError,
    PlaybookInvalid,
    ScheduleNotFound,
)
from noetl_celery.models.deadlines import parse_deadline
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
@click.option(
    "--deadline",
    metavar="WHEN",
    help='Its runs\' deadline: a duration from the start ("2h") or a time of day ("06:00", '
    "in --timezone); missing it records deadline.missed and notifies.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the schedule as JSON.")
def add(
    target: str,
    cron: str,
    timezone: str,
    payload: str | None,
    deadline: str | None,
    as_json: bool,
) -> None:
    """Schedule TARGET: a catalog path, or a playbook file (registered on the way).
    Exit 2 when the payload or the playbook is invalid (nothing is written)."""
    settings = load_settings()
    try:  # every check that needs no database, before the playbook is registered
        values = parse_payload(payload, settings.max_payload_bytes)
        check_payload(values, PayloadLimits(max_bytes=settings.max_payload_bytes))
        check_cron(cron, timezone)
        if deadline is not None:
            parse_deadline(deadline, timezone, "--deadline")
        text = read_playbook(target) if Path(target).is_file() else None
    except (InputInvalid, ConfigurationError) as exc:
        _refuse(exc, as_json)
    engine = build_engine(settings, Role.EDITOR)
    try:
        path = target
        if text is not None:
            _, entry = engine.register_text(text, target)
            path = entry.path
        row = engine.schedules.add(path, cron, timezone=timezone, payload=values, deadline=deadline)
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
    """Every schedule: enabled or paused, its next and its last firing."""
    engine = build_engine(load_settings(), Role.READER)
    try:
        rows = engine.schedules.all()
    finally:
        engine.close()
    if as_json:
        dump_json([r.to_json() for r in rows])
    else:
        stdout_console().print(schedules_renderable([r.to_json() for r in rows]))


@schedule.command("remove")
@click.argument("schedule_id", type=int)
@click.option("--json", "as_json", is_flag=True, help="Print {schedule_id, removed}.")
def remove(schedule_id: int, as_json: bool) -> None:
    """Remove a schedule (runs it started are not touched). Exit 2 if there is none."""
    engine = build_engine(load_settings(), Role.EDITOR)
    try:
        removed = engine.schedules.remove(schedule_id)
    finally:
        engine.close()
    if as_json:
        dump_json({"schedule_id": schedule_id, "removed": removed})
    if removed:
        if not as_json:
            click.echo(f"schedule {schedule_id} removed")
    else:
        _unknown(ScheduleNotFound(f"no schedule {schedule_id} (see `noetl-celery schedule list`)"))


def _unknown(exc: NoetlError) -> NoReturn:
    click.echo(str(exc), err=True)
    sys.exit(EXIT_INVALID)


@schedule.command("pause")
@click.argument("schedule_id", type=int)
@click.option("--json", "as_json", is_flag=True, help="Print the schedule as JSON.")
def pause(schedule_id: int, as_json: bool) -> None:
    """Stop firing a schedule and keep it (`resume` fires it again). Exit 2 if there is
    none."""
    _switch(schedule_id, as_json, enabled=False)


@schedule.command("resume")
@click.argument("schedule_id", type=int)
@click.option("--json", "as_json", is_flag=True, help="Print the schedule as JSON.")
def resume(schedule_id: int, as_json: bool) -> None:
    """Fire a paused schedule again, from its next cron time after now (firings missed
    while it was paused are not made up). Exit 2 if there is none."""
    _switch(schedule_id, as_json, enabled=True)


def _switch(schedule_id: int, as_json: bool, *, enabled: bool) -> None:
    engine = build_engine(load_settings(), Role.EDITOR)
    try:
        row, changed = (engine.schedules.resume if enabled else engine.schedules.pause)(schedule_id)
    except ScheduleNotFound as exc:
        _unknown(exc)
    finally:
        engine.close()
    if as_json:
        dump_json({**row.to_json(), "changed": changed})
        return
    state = "resumed" if enabled else "paused"
    line = f"schedule {schedule_id} {state}" if changed else f"schedule {schedule_id} was {state}"
    if row.enabled:
        line += f", next {row.next_fire_at:%Y-%m-%d %H:%M:%S} UTC"
    click.echo(line)


@schedule.command("trigger")
@click.argument("schedule_id", type=int)
@click.option("--wait", is_flag=True, help="Wait for the run to end (always, when embedded).")
@click.option("--timeout", type=float, default=None, help="Give up waiting after S seconds.")
@click.option("--json", "as_json", is_flag=True, help="Print {schedule_id, execution_id, status}.")
def trigger(schedule_id: int, wait: bool, timeout: float | None, as_json: bool) -> None:
    """Start a run of the schedule now, with its payload, whether it is paused or not.
    The run is listed by `executions` as a schedule run (triggered by hand); the
    schedule's cadence is untouched. Exit 2 if there is no such schedule."""
    settings = load_settings()
    engine = build_engine(settings, Role.CLIENT)
    try:
        engine.check_broker()  # nothing is created while the broker cannot be reached
        try:
            execution_id = engine.trigger_schedule(schedule_id)
        except (ScheduleNotFound, CatalogNotFound) as exc:
            _unknown(exc)
        except BrokerUnavailable as exc:
            if exc.execution_id is None:
                raise
            # the broker went away since the check: recorded, published when it is back
            execution_id = exc.execution_id
            click.echo(str(exc), err=True)
        status = engine.store.execution_status(execution_id)
        # embedded: the run's commands execute on this process's threads, so leaving
        # now would strand it
        if wait or settings.embedded:
            try:
                status = engine.wait(execution_id, timeout).status
            except TimeoutError as exc:
                click.echo(str(exc), err=True)
    finally:
        engine.close()
    if as_json:
        dump_json({"schedule_id": schedule_id, "execution_id": execution_id, "status": status})
    else:
        click.echo(f"schedule {schedule_id} triggered: execution {execution_id} {status}")
