"""Embedded executions by owner process (see engine.owner)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy import select

from noetl_celery.constants import RUNNING
from noetl_celery.store.schema import executions

if TYPE_CHECKING:
    from noetl_celery.store.repository import Store


def running_owned(store: Store) -> list[tuple[str, str]]:
    """(execution id, owner) of every RUNNING execution that records an owner process
    (through the status index: RUNNING executions are few)."""
    with store.db.read() as conn:
        rows = conn.execute(
            select(executions.c.execution_id, executions.c.owner).where(
                executions.c.status == RUNNING, executions.c.owner.is_not(None)
            )
        ).all()
    return [(str(r[0]), str(r[1])) for r in rows]
