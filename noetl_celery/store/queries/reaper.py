"""The reaper's statements: its lease, stale and delayed commands, lost runs and their
next attempt, executions waiting for a pass; the engine-wide counters."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import Connection, and_, or_, select, update

from noetl_celery.constants import CMD_DELAYED, CMD_ISSUED, CMD_RUNNING, RUNNING
from noetl_celery.store.dialect import add_to_counter, insert_ignore, upsert
from noetl_celery.store.rows import LostCommand
from noetl_celery.store.schema import commands, counters, events, executions, inbox, leases
from noetl_celery.store.statements import COMMAND_COLUMNS

# Only RUNNING executions are looked at, through their commands' index (there is no
# index on `commands.status`: it would make every claim and close a non-HOT update).
_of_execution = executions.c.execution_id == commands.c.execution_id


def add_counter(conn: Connection, name: str, amount: int) -> None:
    """Add to an engine-wide counter (store.counters), in the caller's transaction."""
    add_to_counter(conn, counters, name, amount)


def take_lease(
    conn: Connection, name: str, owner: str, expires_at: dt.datetime, now: dt.datetime
) -> None:
    """Take or renew the lease `name` unless another owner holds it unexpired."""
    conn.execute(
        upsert(
            conn,
            leases,
            ["name"],
            {"name": name, "owner": owner, "expires_at": expires_at},
            where=or_(leases.c.expires_at < now, leases.c.owner == owner),
        )
    )


def lease_holder(conn: Connection, name: str) -> str | None:
    holder = conn.execute(select(leases.c.owner).where(leases.c.name == name)).scalar()
    return None if holder is None else str(holder)


def lease_expiry(conn: Connection, name: str) -> dt.datetime | None:
    """When the lease `name` runs out; once released, when its holder let it go."""
    value = conn.execute(select(leases.c.expires_at).where(leases.c.name == name)).scalar()
    return value if isinstance(value, dt.datetime) else None


def release_lease(conn: Connection, name: str, owner: str, now: dt.datetime) -> None:
    conn.execute(
        update(leases).where(leases.c.name == name, leases.c.owner == owner).values(expires_at=now)
    )


def _running_commands(status: str) -> Any:
    return (
        select(
            commands.c.command_id,
            *COMMAND_COLUMNS,
            commands.c.lease_until,
            commands.c.deadline_at,
        )
        .select_from(commands.join(executions, _of_execution))
        .where(executions.c.status == RUNNING, commands.c.status == status)
    )


def stale_issued(conn: Connection, before: dt.datetime, limit: int) -> list[Any]:
    """Issued commands of RUNNING executions issued before `before`, with their issue
    time and republish count."""
    return list(
        conn.execute(
            _running_commands(CMD_ISSUED)
            .add_columns(commands.c.issued_at, commands.c.republished)
            .where(commands.c.issued_at < before)
            .limit(limit)
        ).all()
    )


def mark_republished(conn: Connection, command_ids: list[str], now: dt.datetime) -> None:
    conn.execute(
        update(commands)
        .where(commands.c.command_id.in_(command_ids), commands.c.status == CMD_ISSUED)
        .values(issued_at=now, republished=commands.c.republished + 1)
    )


def due_delayed(conn: Connection, now: dt.datetime, limit: int) -> list[str]:
    rows = conn.execute(
        select(commands.c.command_id)
        .select_from(commands.join(executions, _of_execution))
        .where(
            executions.c.status == RUNNING,
            commands.c.status == CMD_DELAYED,
            commands.c.issued_at <= now,
        )
        .limit(limit)
    ).scalars()
    return [str(r) for r in rows]


def issue_delayed(conn: Connection, command_ids: list[str], now: dt.datetime) -> list[str]:
    """Issue those of `command_ids` still delayed; the ids this statement issued."""
    issued = conn.execute(
        update(commands)
        .where(commands.c.command_id.in_(command_ids), commands.c.status == CMD_DELAYED)
        .values(status=CMD_ISSUED, issued_at=now)
        .returning(commands.c.command_id)
    ).all()
    return [str(r[0]) for r in issued]


def lost_runs(conn: Connection, now: dt.datetime, limit: int) -> list[LostCommand]:
    """Running commands whose lease expired or whose deadline passed."""
    rows = conn.execute(
        _running_commands(CMD_RUNNING)
        .where(or_(commands.c.lease_until < now, commands.c.deadline_at < now))
        .limit(limit)
    ).all()
    return [LostCommand(**r._mapping) for r in rows]


def expire_run(conn: Connection, command_id: str, status: str, now: dt.datetime) -> bool:
    """End a running command whose lease expired or deadline passed with `status`;
    False when it is no longer such a command."""
    done = conn.execute(
        update(commands)
        .where(
            commands.c.command_id == command_id,
            commands.c.status == CMD_RUNNING,
            or_(commands.c.lease_until < now, commands.c.deadline_at < now),
        )
        .values(status=status, finished_at=now)
        .returning(commands.c.command_id)
    ).first()
    return done is not None


def resume_of(conn: Connection, command_id: str) -> Any:
    """A command's `resume` as it is now."""
    return conn.execute(
        select(commands.c.resume).where(commands.c.command_id == command_id)
    ).scalar()


def insert_next_attempt(
    conn: Connection, lost: LostCommand, new_id: str, status: str, now: dt.datetime
) -> None:
    """The next attempt of a lost run: same coordinate, item, context and resume."""
    conn.execute(
        insert_ignore(conn, commands),
        {
            "command_id": new_id,
            "execution_id": lost.execution_id,
            "step": lost.step,
            "kind": lost.kind,
            "epoch": lost.epoch,
            "iteration": lost.iteration,
            "attempt": lost.attempt + 1,
            "status": status,
            "ctx_version": lost.ctx_version,
            "item": lost.item,
            "meta": lost.meta,
            "resume": lost.resume,
            "issued_at": now,
        },
    )


def inbox_waiting_since(conn: Connection, cutoff: dt.datetime, limit: int) -> list[str]:
    """Executions with a completion in the inbox since before `cutoff`."""
    rows = conn.execute(
        select(inbox.c.execution_id)
        .select_from(inbox.join(events, events.c.event_id == inbox.c.event_id))
        .where(events.c.created_at < cutoff)
        .group_by(inbox.c.execution_id)
        .limit(limit)
    ).scalars()
    return [str(r) for r in rows]


def unstarted_since(conn: Connection, cutoff: dt.datetime, limit: int) -> list[str]:
    """RUNNING executions created before `cutoff` that no pass has run yet."""
    rows = conn.execute(
        select(executions.c.execution_id)
        .where(
            and_(
                executions.c.status == RUNNING,
                executions.c.passes == 0,
                executions.c.created_at < cutoff,
            )
        )
        .limit(limit)
    ).scalars()
    return [str(r) for r in rows]


def running_since(conn: Connection, cutoff: dt.datetime, limit: int) -> list[str]:
    """RUNNING executions created before `cutoff`."""
    rows = conn.execute(
        select(executions.c.execution_id)
        .where(executions.c.status == RUNNING, executions.c.created_at < cutoff)
        .limit(limit)
    ).scalars()
    return [str(r) for r in rows]
