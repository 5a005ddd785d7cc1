"""Quarantined loop items: the `item.quarantined` events the orchestrator writes (one
per item, ux_events_item_quarantined), with their commands (`store.quarantine` opens
the transactions)."""

from __future__ import annotations

from sqlalchemy import ColumnElement, Connection, and_, exists, select

from noetl_celery.constants import EV_COMMAND_FAILED, EV_ITEM_QUARANTINED, EV_ITEM_REDRIVEN
from noetl_celery.store.rows import QuarantinedItem
from noetl_celery.store.schema import commands, events

_quarantine = events.alias("quarantine")


def not_quarantined() -> ColumnElement[bool]:
    """For a query over `events`: the row's loop item was not quarantined (the failed
    items' reads: a quarantined item is not a failed one). Looked up through the
    unique partial index of `item.quarantined` events."""
    q = _quarantine.c
    return ~exists(
        select(q.event_id).where(
            and_(
                q.type == EV_ITEM_QUARANTINED,
                q.execution_id == events.c.execution_id,
                q.step == events.c.step,
                q.epoch == events.c.epoch,
                q.iteration == events.c.iteration,
            )
        )
    )


def quarantined_items(
    conn: Connection, execution_id: str, *, step: str | None = None, kind: str | None = None
) -> list[QuarantinedItem]:
    """The execution's quarantined items in (step, epoch, iteration) order, `step` and
    error `kind` filtering, each with its command's item and its terminal error."""
    q = events.c
    terminal = events.alias("terminal")
    redrive = events.alias("redrive")
    query = (
        select(
            q.step,
            q.epoch,
            q.iteration,
            q.command_id,
            q.payload,
            q.created_at,
            commands.c.item,
            terminal.c.payload.label("outcome"),
            redrive.c.payload.label("redrive"),
        )
        .select_from(
            events.outerjoin(commands, commands.c.command_id == q.command_id)
            .outerjoin(
                terminal,
                and_(
                    terminal.c.command_id == q.command_id,
                    terminal.c.type == EV_COMMAND_FAILED,
                ),
            )
            # through ux_events_item_redriven: at most one row per item
            .outerjoin(
                redrive,
                and_(
                    redrive.c.type == EV_ITEM_REDRIVEN,
                    redrive.c.execution_id == q.execution_id,
                    redrive.c.step == q.step,
                    redrive.c.epoch == q.epoch,
                    redrive.c.iteration == q.iteration,
                ),
            )
        )
        .where(q.execution_id == execution_id, q.type == EV_ITEM_QUARANTINED)
        .order_by(q.step, q.epoch, q.iteration)
    )
    if step is not None:
        query = query.where(q.step == step)
    out = []
    for r in conn.execute(query):
        mark = r.payload or {}
        if kind is not None and mark.get("kind") != kind:
            continue  # filtered here: the payload's JSON is read the same on both backends
        out.append(
            QuarantinedItem(
                step=str(r.step),
                epoch=int(r.epoch),
                iteration=int(r.iteration),
                command_id=str(r.command_id),
                kind=str(mark.get("kind") or "error"),
                message=str(mark.get("message") or ""),
                runs=mark.get("runs"),
                attempt=mark.get("attempt"),
                item=r.item,
                error=(r.outcome or {}).get("error"),
                quarantined_at=r.created_at,
                redriven_by=(r.redrive or {}).get("execution_id"),
            )
        )
    return out
