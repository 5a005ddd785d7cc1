"""What an ended execution's trace needs (noetl_celery.tracing): when each step (per
epoch) began and ended, from its commands. Read once per execution, at its end, and
only while tracing is on."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import Connection, case, func, select

from noetl_celery.constants import CMD_FAILED
from noetl_celery.store.schema import commands
from noetl_celery.tracing import StepTimes


def step_times(conn: Connection, execution_id: str, ended: dt.datetime) -> list[StepTimes]:
    """One entry per (step, epoch) that had commands: from its first command's issue (or
    start) to its last command's end (`ended` for one still open)."""
    c = commands.c
    began = func.min(func.coalesce(c.issued_at, c.started_at))
    rows = conn.execute(
        select(
            c.step,
            c.epoch,
            began,
            func.max(c.finished_at),
            func.count(),
            func.sum(case((c.status == CMD_FAILED, 1), else_=0)),
        )
        .where(c.execution_id == execution_id)
        .group_by(c.step, c.epoch)
        .order_by(began)
    ).all()
    return [
        StepTimes(
            step=str(step),
            epoch=int(epoch),
            started=first or ended,
            ended=last or ended,
            commands=int(count),
            failed=int(failures or 0),
        )
        for step, epoch, first, last, count, failures in rows
    ]
