"""Embedded executions by owner process (see engine.owner; `store.owners` opens the
transaction)."""

from __future__ import annotations

from sqlalchemy import Connection, select

from noetl_celery.constants import RUNNING
from noetl_celery.store.schema import executions


def running_owned(conn: Connection) -> list[tuple[str, str]]:
    """(execution id, owner) of every RUNNING execution that records an owner process
    (through the status index: RUNNING executions are few)."""
    rows = conn.execute(
        select(executions.c.execution_id, executions.c.owner).where(
            executions.c.status == RUNNING, executions.c.owner.is_not(None)
        )
    ).all()
    return [(str(r[0]), str(r[1])) for r in rows]
