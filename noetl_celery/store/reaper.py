"""The reaper's queries: what was lost, and putting it back (design §3).

- an `issued` command nobody started within the grace period (lost message, flushed
  broker) is published again; duplicates are harmless (conditional claim)
- a `running` command whose lease expired (its worker is gone) is issued again as the
  next attempt of the same coordinate (`:a<n>`, same item, same context), up to a limit;
  past the limit, or past its step deadline, it fails with a terminal event in the inbox
- an execution with completions waiting and nobody folding them is woken
- a `delayed` command (a cursor claim retried after a backoff) whose due time came is
  issued, and published by the transaction that issued it

Only RUNNING executions are looked at, through their commands' index (there is no index
on `commands.status`: it would make every claim and close a non-HOT update).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, and_, or_, select, update

from noetl_celery.constants import (
    CMD_DELAYED,
    CMD_EXPIRED,
    CMD_FAILED,
    CMD_ISSUED,
    CMD_RUNNING,
    EV_COMMAND_FAILED,
    RUNNING,
)
from noetl_celery.orchestrator.ids import with_attempt
from noetl_celery.store.counters import (
    COUNTER_LEASES_EXPIRED,
    COUNTER_REISSUED,
    COUNTER_REPUBLISHED,
    give_up_counter,
)
from noetl_celery.store.database import Database
from noetl_celery.store.dialect import add_to_counter, insert_ignore, upsert
from noetl_celery.store.queries import append_terminal
from noetl_celery.store.schema import (
    commands,
    counters,
    events,
    executions,
    inbox,
    leases,
    utcnow,
)
from noetl_celery.store.statements import COMMAND_COLUMNS

_of_execution = executions.c.execution_id == commands.c.execution_id


@dataclass(frozen=True)
class LostCommand:
    command_id: str
    execution_id: str
    step: str
    kind: str
    epoch: int
    iteration: int | None
    attempt: int
    ctx_version: int
    item: Any
    meta: dict[str, Any] | None
    resume: dict[str, Any] | None
    lease_until: dt.datetime | None
    deadline_at: dt.datetime | None


def _running_commands(status: str) -> Any:
    return (
        select(
            commands.c.command_id,
            *COMMAND_COLUMNS,
            commands.c.lease_until,
            commands.c.deadline_at,
        )
        .select_from(
            commands.join(executions, executions.c.execution_id == commands.c.execution_id)
        )
        .where(executions.c.status == RUNNING, commands.c.status == status)
    )


def _expire(conn: Connection, lost: LostCommand, status: str, now: dt.datetime) -> bool:
    done = conn.execute(
        update(commands)
        .where(
            commands.c.command_id == lost.command_id,
            commands.c.status == CMD_RUNNING,
            or_(commands.c.lease_until < now, commands.c.deadline_at < now),
        )
        .values(status=status, finished_at=now)
        .returning(commands.c.command_id)
    ).first()
    return done is not None


class ReaperManager:
    """The reaper's queries (`store.reaper`): its lease, stale and delayed commands,
    lost runs, executions to wake."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def take_lease(self, name: str, owner: str, ttl: float) -> bool:
        """Hold the duty `name` for `ttl` seconds unless another owner holds it unexpired
        (a holder that died loses it when `ttl` runs out)."""
        now = utcnow()
        with self.db.write() as conn:
            conn.execute(
                upsert(
                    conn,
                    leases,
                    ["name"],
                    {"name": name, "owner": owner, "expires_at": now + dt.timedelta(seconds=ttl)},
                    where=or_(leases.c.expires_at < now, leases.c.owner == owner),
                )
            )
            holder = conn.execute(select(leases.c.owner).where(leases.c.name == name)).scalar()
        return bool(holder == owner)

    def republish_stale(self, grace: float, limit: int = 1000) -> list[str]:
        """Issued commands nobody started: waiting longer than `grace` seconds, doubled for
        every earlier republish (a long broker backlog is not a lost message; its commands
        are republished a few times at most, not every sweep). Their issue time is renewed."""
        now = utcnow()
        with self.db.write() as conn:
            rows = conn.execute(
                _running_commands(CMD_ISSUED)
                .add_columns(commands.c.issued_at, commands.c.republished)
                .where(commands.c.issued_at < now - dt.timedelta(seconds=grace))
                .limit(limit)
            ).all()
            due = [
                r.command_id
                for r in rows
                if r.issued_at < now - dt.timedelta(seconds=grace * 2 ** min(r.republished, 10))
            ]
            if due:
                conn.execute(
                    update(commands)
                    .where(commands.c.command_id.in_(due), commands.c.status == CMD_ISSUED)
                    .values(issued_at=now, republished=commands.c.republished + 1)
                )
                add_to_counter(conn, counters, COUNTER_REPUBLISHED, len(due))
        return due

    def release_delayed(self, limit: int = 1000) -> list[str]:
        """Issue the `delayed` commands whose due time (`issued_at`) has come; returns the
        ids this call issued, to publish (a concurrent sweep issues none of them twice)."""
        now = utcnow()
        with self.db.write() as conn:
            due = (
                conn.execute(
                    select(commands.c.command_id)
                    .select_from(commands.join(executions, _of_execution))
                    .where(
                        executions.c.status == RUNNING,
                        commands.c.status == CMD_DELAYED,
                        commands.c.issued_at <= now,
                    )
                    .limit(limit)
                )
                .scalars()
                .all()
            )
            if not due:
                return []
            issued = conn.execute(
                update(commands)
                .where(commands.c.command_id.in_(due), commands.c.status == CMD_DELAYED)
                .values(status=CMD_ISSUED, issued_at=now)
                .returning(commands.c.command_id)
            ).all()
        return sorted(str(r[0]) for r in issued)

    def lost_commands(self, limit: int = 1000) -> list[LostCommand]:
        """Running commands whose lease expired or whose deadline passed."""
        now = utcnow()
        with self.db.read() as conn:
            rows = conn.execute(
                _running_commands(CMD_RUNNING)
                .where(or_(commands.c.lease_until < now, commands.c.deadline_at < now))
                .limit(limit)
            ).all()
        return [LostCommand(**r._mapping) for r in rows]

    def reissue(self, lost: LostCommand) -> str | None:
        """Replace a lost run by its next attempt (same coordinate, item and context).
        Returns the new command id to publish, or None if the command moved on meanwhile."""
        now = utcnow()
        new_id = with_attempt(lost.command_id, lost.attempt + 1)
        with self.db.write() as conn:
            if not _expire(conn, lost, CMD_EXPIRED, now):
                return None
            add_to_counter(conn, counters, COUNTER_LEASES_EXPIRED, 1)
            add_to_counter(conn, counters, COUNTER_REISSUED, 1)
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
                    "status": CMD_ISSUED,
                    "ctx_version": lost.ctx_version,
                    "item": lost.item,
                    "meta": lost.meta,
                    "resume": lost.resume,
                    "issued_at": now,
                },
            )
        return new_id

    def give_up(self, lost: LostCommand, kind: str, message: str) -> bool:
        """Fail a lost command for good: a terminal event in the inbox, as a worker would."""
        now = utcnow()
        with self.db.write() as conn:
            if not _expire(conn, lost, CMD_FAILED, now):
                return False
            # a lost run given up for good: its lease expired (or its deadline passed)
            add_to_counter(conn, counters, give_up_counter(kind), 1)
            error = {"kind": kind, "message": message, "retryable": False}
            append_terminal(
                conn,
                lost.execution_id,
                lost.step,
                lost.command_id,
                lost.epoch,
                lost.iteration,
                EV_COMMAND_FAILED,
                {"status": "error", "result": None, "error": error},
                now,
            )
        return True

    def executions_to_wake(self, grace: float, limit: int = 500) -> list[str]:
        """RUNNING executions with a completion waiting longer than `grace`, or never
        started (no state yet: the process that created them died before its first pass)."""
        cutoff = utcnow() - dt.timedelta(seconds=grace)
        with self.db.read() as conn:
            waiting = (
                conn.execute(
                    select(inbox.c.execution_id)
                    .select_from(inbox.join(events, events.c.event_id == inbox.c.event_id))
                    .where(events.c.created_at < cutoff)
                    .group_by(inbox.c.execution_id)
                    .limit(limit)
                )
                .scalars()
                .all()
            )
            unstarted = (
                conn.execute(
                    select(executions.c.execution_id)
                    .where(
                        and_(
                            executions.c.status == RUNNING,
                            executions.c.passes == 0,
                            executions.c.created_at < cutoff,
                        )
                    )
                    .limit(limit)
                )
                .scalars()
                .all()
            )
        return sorted({str(e) for e in (*waiting, *unstarted)})

    def executions_past(self, seconds: float, limit: int = 500) -> list[str]:
        """RUNNING executions started more than `seconds` ago."""
        cutoff = utcnow() - dt.timedelta(seconds=seconds)
        with self.db.read() as conn:
            rows = (
                conn.execute(
                    select(executions.c.execution_id)
                    .where(executions.c.status == RUNNING, executions.c.created_at < cutoff)
                    .limit(limit)
                )
                .scalars()
                .all()
            )
        return [str(r) for r in rows]

    def release_lease(self, name: str, owner: str) -> None:
        with self.db.write() as conn:
            conn.execute(
                update(leases)
                .where(leases.c.name == name, leases.c.owner == owner)
                .values(expires_at=utcnow())
            )
