"""What a rerun reads from its (ended, hence immutable) original execution
(`store.reruns` opens their transactions)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, func, select

from noetl_celery.constants import EV_COMMAND_FAILED
from noetl_celery.store.queries.quarantine import not_quarantined
from noetl_celery.store.schema import commands, events

# a quarantined item is not a failed one: `quarantine redrive` runs it again
_failed_iteration = (
    events.c.type == EV_COMMAND_FAILED,
    events.c.iteration.is_not(None),
    not_quarantined(),
)


def failed_loops(conn: Connection, execution_id: str) -> dict[str, tuple[int, int]]:
    """Loop steps with failed iterations: step -> (how many, first failure's event id)."""
    query = (
        select(events.c.step, func.count(), func.min(events.c.event_id))
        .where(events.c.execution_id == execution_id, *_failed_iteration)
        .group_by(events.c.step)
    )
    rows = conn.execute(query).all()
    return {str(r[0]): (int(r[1]), int(r[2])) for r in rows}


def failed_items(conn: Connection, execution_id: str, step: str) -> list[Any]:
    """The items of the failed iterations of `step`, in the original order (epoch,
    iteration): the `item` of each failed command."""
    query = (
        select(events.c.epoch, events.c.iteration, commands.c.item)
        .select_from(events.join(commands, commands.c.command_id == events.c.command_id))
        .where(events.c.execution_id == execution_id, events.c.step == step, *_failed_iteration)
        .order_by(events.c.epoch, events.c.iteration)
    )
    seen: set[tuple[int, int]] = set()
    items = []
    for epoch, iteration, item in conn.execute(query):
        if (epoch, iteration) not in seen:  # one per coordinate, whatever the attempts
            seen.add((epoch, iteration))
            items.append(item)
    return items


def step_context(conn: Connection, execution_id: str, step: str) -> int | None:
    """The context version `step` started its latest epoch with (the version of that
    epoch's first command: a loop's iterations issued later may see newer ones); None
    when the step never ran."""
    query = (
        select(commands.c.ctx_version)
        .where(commands.c.execution_id == execution_id, commands.c.step == step)
        .order_by(commands.c.epoch.desc(), commands.c.iteration.asc().nulls_first())
        .limit(1)
    )
    value = conn.execute(query).scalar()
    return None if value is None else int(value)
