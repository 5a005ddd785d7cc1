"""The outbox's statements (store.outbox): messages the broker could not take, and the
fleet's once-per-outage recovery claim."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from sqlalchemy import Connection, delete, func, or_, select, update

from noetl_celery.constants import CMD_ISSUED
from noetl_celery.store.dialect import insert_ignore
from noetl_celery.store.rows import HeldItem
from noetl_celery.store.schema import commands, leases, publish_outbox


def hold(conn: Connection, items: Sequence[HeldItem], now: dt.datetime) -> None:
    """Record `items` (a row each; one already held stays as it is)."""
    conn.execute(
        insert_ignore(conn, publish_outbox),
        [
            {
                "item_id": i.item_id,
                "kind": i.kind,
                "execution_id": i.execution_id,
                "held_at": now,
                "claimed_until": None,
            }
            for i in items
        ],
    )


# built once: every process's relay asks each second
_ANY_HELD = select(publish_outbox.c.item_id).limit(1)


def any_held(conn: Connection) -> bool:
    return conn.execute(_ANY_HELD).first() is not None


def claim(conn: Connection, now: dt.datetime, until: dt.datetime, limit: int) -> list[HeldItem]:
    """Take up to `limit` rows nobody holds (or whose claim ran out) until `until`; rows
    another relay is claiming right now are skipped (Postgres SKIP LOCKED; SQLite's
    write lock serialises claims)."""
    free = or_(publish_outbox.c.claimed_until.is_(None), publish_outbox.c.claimed_until < now)
    ids = (
        select(publish_outbox.c.item_id)
        .where(free)
        .order_by(publish_outbox.c.held_at)
        .limit(limit)
        .with_for_update(skip_locked=True)
        .scalar_subquery()
    )
    rows = conn.execute(
        update(publish_outbox)
        .where(publish_outbox.c.item_id.in_(ids), free)
        .values(claimed_until=until)
        .returning(publish_outbox.c.item_id, publish_outbox.c.kind, publish_outbox.c.execution_id)
    ).all()
    return [HeldItem(str(r[0]), str(r[1]), str(r[2])) for r in rows]


def still_issued(conn: Connection, command_ids: Sequence[str]) -> list[str]:
    """Those of `command_ids` still `issued` (nobody claimed them), in the given order."""
    rows = conn.execute(
        select(commands.c.command_id).where(
            commands.c.command_id.in_(list(command_ids)), commands.c.status == CMD_ISSUED
        )
    ).scalars()
    found = {str(r) for r in rows}
    return [c for c in command_ids if c in found]


def drop(conn: Connection, item_ids: Sequence[str]) -> None:
    conn.execute(delete(publish_outbox).where(publish_outbox.c.item_id.in_(list(item_ids))))


def unclaim(conn: Connection, item_ids: Sequence[str]) -> None:
    conn.execute(
        update(publish_outbox)
        .where(publish_outbox.c.item_id.in_(list(item_ids)))
        .values(claimed_until=None)
    )


def held_of(conn: Connection, execution_id: str) -> int:
    """Commands of `execution_id` waiting in the outbox."""
    return int(
        conn.execute(
            select(func.count())
            .select_from(publish_outbox)
            .where(
                publish_outbox.c.execution_id == execution_id,
                publish_outbox.c.kind == "command",
            )
        ).scalar_one()
    )


def claim_recovery(
    conn: Connection, name: str, token: str, lost_at: dt.datetime | None, now: dt.datetime
) -> bool:
    """Whether this caller recovers from the broker's outage (once across the fleet): the
    lease row `name` remembers the broker's token and when the last recovery began; it is
    this caller's when the token changed (the broker restarted empty) or, for a caller
    that saw the broker away since `lost_at`, when no recovery began since."""
    # RETURNING, not rowcount: the driver may not count an INSERT ... ON CONFLICT (-1)
    inserted = conn.execute(
        insert_ignore(conn, leases).returning(leases.c.name),
        {"name": name, "owner": token, "expires_at": now},
    ).first()
    if inserted is not None:
        return True
    stale = leases.c.owner != token
    if lost_at is not None:
        stale = or_(stale, leases.c.expires_at < lost_at)
    taken = conn.execute(
        update(leases)
        .where(leases.c.name == name, stale)
        .values(owner=token, expires_at=now)
        .returning(leases.c.name)
    ).first()
    return taken is not None


__all__ = [
    "any_held",
    "claim",
    "claim_recovery",
    "drop",
    "held_of",
    "hold",
    "still_issued",
    "unclaim",
]
