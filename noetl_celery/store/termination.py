"""Ending an execution from outside its own flow: cancellation, execution timeouts, and
orchestration passes that keep crashing (`record_pass_crash` counts them).

One transaction, under the execution's lock: the terminal status and event, every
unfinished command cancelled (a worker's close of a running one then finds it gone and
drops the result; nothing cancelled can be claimed), the inbox emptied, and a parent
command waiting for this execution resumed with its summary. The caller gets the running
children to end the same way (cascade).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy import delete, select, update

from noetl_celery.constants import (
    CANCELLED,
    CMD_CANCELLED,
    CMD_DELAYED,
    EV_EXECUTION_CANCELLED,
    EV_EXECUTION_FAILED,
    EV_PASS_FAILED,
    RUNNING,
)
from noetl_celery.store.children import WAITING, resume_parent
from noetl_celery.store.dialect import insert_ignore
from noetl_celery.store.orchestration import SYNC_COMMIT
from noetl_celery.store.rows import ExecutionRow
from noetl_celery.store.schema import commands, events, executions, inbox, utcnow
from noetl_celery.store.statements import EXECUTION_COLUMNS, LOCK_WAIT

if TYPE_CHECKING:
    from noetl_celery.store.repository import Store

UNFINISHED = ("planned", CMD_DELAYED, "issued", "running", WAITING)


@dataclass
class Ended:
    ended: bool  # False when it had already ended
    children: list[str] = field(default_factory=list)  # running children to end too
    publish: list[str] = field(default_factory=list)  # a resumed parent command


def end_execution(
    store: Store, execution_id: str, status: str, message: str, kind: str | None = None
) -> Ended:
    now = utcnow()
    with store.db.engine.begin() as conn:
        row = conn.execute(LOCK_WAIT, {"b_eid": execution_id}).first()
        if row is None or row.status != RUNNING:
            return Ended(ended=False)
        if conn.dialect.name == "postgresql":
            conn.execute(SYNC_COMMIT)  # what `cancel` reports must survive a crash
        error = {"message": message} if kind is None else {"kind": kind, "message": message}
        conn.execute(
            update(executions)
            .where(executions.c.execution_id == execution_id)
            .values(status=status, error=error, finished_at=now, updated_at=now)
        )
        conn.execute(
            insert_ignore(conn, events),
            {
                "execution_id": execution_id,
                "type": EV_EXECUTION_CANCELLED if status == CANCELLED else EV_EXECUTION_FAILED,
                "payload": {"status": status, "error": error},
                "created_at": now,
            },
        )
        conn.execute(
            update(commands)
            .where(commands.c.execution_id == execution_id, commands.c.status.in_(UNFINISHED))
            .values(status=CMD_CANCELLED, finished_at=now)
        )
        conn.execute(delete(inbox).where(inbox.c.execution_id == execution_id))
        ended_row = conn.execute(
            select(*EXECUTION_COLUMNS).where(executions.c.execution_id == execution_id)
        ).one()
        parent = resume_parent(store, conn, ExecutionRow(**ended_row._mapping))
        children = (
            conn.execute(
                select(executions.c.execution_id).where(
                    executions.c.parent_execution_id == execution_id,
                    executions.c.status == RUNNING,
                )
            )
            .scalars()
            .all()
        )
    return Ended(True, [str(c) for c in children], [parent] if parent else [])


def record_pass_crash(store: Store, execution_id: str, error: dict[str, Any]) -> int:
    """Record that an orchestration pass of `execution_id` crashed (a `pass.failed`
    event with `error`, kept in its history) and return how many passes crashed in a row
    at this point of its history, i.e. since its last committed pass (`executions.passes`
    is stored with each crash); 0 when the execution is no longer RUNNING."""
    with store.db.engine.begin() as conn:
        row = conn.execute(
            select(executions.c.status, executions.c.passes).where(
                executions.c.execution_id == execution_id
            )
        ).first()
        if row is None or row.status != RUNNING:
            return 0
        conn.execute(
            events.insert().values(
                execution_id=execution_id,
                type=EV_PASS_FAILED,
                payload={"passes": row.passes, "error": error},
                created_at=utcnow(),
            )
        )
        crashes = conn.execute(
            select(events.c.payload).where(
                events.c.execution_id == execution_id, events.c.type == EV_PASS_FAILED
            )
        ).scalars()
        return sum(1 for payload in crashes if (payload or {}).get("passes") == row.passes)
