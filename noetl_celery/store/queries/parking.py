"""Parking: a running command put aside as `delayed` until its retry is due, and issued
again when the wait is over (store.parking)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import Connection, select, update

from noetl_celery.constants import CMD_DELAYED, CMD_ISSUED, CMD_RUNNING, EV_ITEM_THROTTLED
from noetl_celery.store.schema import commands, events, inbox


def park_for_retry(
    conn: Connection,
    command_id: str,
    resume: dict[str, Any],
    due: dt.datetime,
) -> bool:
    """A running command waits out a retry delay as a `delayed` row due at `due` (the
    reaper issues it then); False when it is no longer running (cancelled, taken over).
    The lease is dropped: nothing runs it until it is issued again."""
    parked = conn.execute(
        update(commands)
        .where(commands.c.command_id == command_id, commands.c.status == CMD_RUNNING)
        .values(status=CMD_DELAYED, resume=resume, issued_at=due, lease_until=None, worker=None)
        .returning(commands.c.command_id)
    ).first()
    return parked is not None


def issue_parked(conn: Connection, command_id: str, due: dt.datetime, now: dt.datetime) -> bool:
    """Issue a parked command whose wait, parked until `due`, is over; False when it is
    no longer that parked command (issued by a sweep, cancelled, parked again later)."""
    issued = conn.execute(
        update(commands)
        .where(
            commands.c.command_id == command_id,
            commands.c.status == CMD_DELAYED,
            commands.c.issued_at <= due,
        )
        .values(status=CMD_ISSUED, issued_at=now)
        .returning(commands.c.command_id)
    ).first()
    return issued is not None


def append_throttled(
    conn: Connection,
    command_id: str,
    payload: dict[str, Any],
    now: dt.datetime,
) -> None:
    """The `item.throttled` event of a loop item just parked for its rate_limit key's
    turn, and its inbox entry (the pass gives the item's window slot back): written in
    the transaction that parked it, so the event exists exactly when the park does, and
    comes before the item's terminal event."""
    row = conn.execute(
        select(
            commands.c.execution_id, commands.c.step, commands.c.epoch, commands.c.iteration
        ).where(commands.c.command_id == command_id)
    ).one()
    event_id = conn.execute(
        events.insert()
        .values(
            execution_id=row.execution_id,
            type=EV_ITEM_THROTTLED,
            step=row.step,
            command_id=command_id,
            epoch=row.epoch,
            iteration=row.iteration,
            payload=payload,
            created_at=now,
        )
        .returning(events.c.event_id)
    ).scalar_one()
    conn.execute(
        inbox.insert().values(
            event_id=event_id,
            execution_id=row.execution_id,
            step=row.step,
            epoch=row.epoch,
            iteration=row.iteration,
        )
    )
