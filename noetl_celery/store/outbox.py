"""`store.outbox`: messages the broker could not take, kept in the engine database until a
relay publishes them (engine.outbox); the SQL is `store.queries.outbox`.

Rows are written only when a publish failed: the hot path never writes here."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from noetl_celery.store.database import Database
from noetl_celery.store.queries import outbox as sql
from noetl_celery.store.rows import HeldItem
from noetl_celery.store.schema import utcnow

__all__ = ["HeldItem", "OutboxManager"]

KIND_COMMAND = "command"
KIND_WAKE = "wake"
# the lease row naming the broker's token the fleet last recovered for
RECOVERY_LEASE = "broker-recovery"


class OutboxManager:
    def __init__(self, db: Database) -> None:
        self.db = db

    def hold(self, command_ids: Sequence[str] = (), wakes: Sequence[str] = ()) -> None:
        """Record commands whose `execute_command` and executions whose wake-up could not
        be published (each once, however often it is held)."""
        items = [HeldItem(c, KIND_COMMAND, c.split(":", 1)[0]) for c in command_ids]
        items += [HeldItem(e, KIND_WAKE, e) for e in wakes]
        if not items:
            return
        with self.db.write() as conn:
            sql.hold(conn, items, utcnow())

    def any_held(self) -> bool:
        """One tiny read: whether anything waits (a relay's poll, nearly always False)."""
        with self.db.read() as conn:
            return sql.any_held(conn)

    def claim(self, seconds: float, limit: int = 1000) -> list[HeldItem]:
        """Rows for this caller to publish within `seconds` (then free again)."""
        now = utcnow()
        with self.db.write() as conn:
            return sql.claim(conn, now, now + dt.timedelta(seconds=seconds), limit)

    def still_issued(self, command_ids: Sequence[str]) -> list[str]:
        if not command_ids:
            return []
        with self.db.read() as conn:
            return sql.still_issued(conn, command_ids)

    def done(self, item_ids: Sequence[str]) -> None:
        if item_ids:
            with self.db.write() as conn:
                sql.drop(conn, item_ids)

    def release(self, item_ids: Sequence[str]) -> None:
        """Give claimed rows back (their publish failed again)."""
        if item_ids:
            with self.db.write() as conn:
                sql.unclaim(conn, item_ids)

    def waiting(self, execution_id: str) -> int:
        """Commands of `execution_id` held for the broker."""
        with self.db.read() as conn:
            return sql.held_of(conn, execution_id)

    def claim_recovery(self, token: str, lost_at: dt.datetime | None) -> bool:
        """True for exactly one caller per broker restart (a new `token`) and per outage
        (callers that saw the broker away since `lost_at`): that caller republishes what
        the broker lost."""
        with self.db.write() as conn:
            return sql.claim_recovery(conn, RECOVERY_LEASE, token, lost_at, utcnow())
