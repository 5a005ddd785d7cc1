"""`store.pacing`: the http tool's pacing schedule shared by the worker processes of a
fleet (tools.http_pacing's `PaceLedger`); the SQL is `store.queries.pacing`."""

from __future__ import annotations

from noetl_celery.store.database import Database
from noetl_celery.store.queries import pacing as sql
from noetl_celery.store.queries.pacing import PaceRules

__all__ = ["PaceRules", "PacingManager"]


class PacingManager:
    def __init__(self, db: Database) -> None:
        self.db = db

    @property
    def available(self) -> bool:
        """Only Postgres serves several processes (an SQLite engine is one process)."""
        return not self.db.is_sqlite

    def book(
        self,
        host: str,
        rules: PaceRules,
        now: float | None = None,
        count: int = 1,
        tolerance: float = 0.0,
    ) -> tuple[float | None, float, float, float] | None:
        """Book `host`'s next `count` send slots: (its rate, seconds to the first slot,
        seconds between two, seconds since its last cut); None when the host is not
        paced. One statement, autocommitted: the row is locked only while it runs.
        `tolerance`: how far ahead of the schedule a keyed limit's burst may go
        (seconds)."""
        with self.db.single_write() as conn:
            return sql.book(conn, host, rules, now, count, tolerance)

    def book_key(
        self,
        key: str,
        declared: float,
        rules: PaceRules,
        now: float | None = None,
        tolerance: float = 0.0,
    ) -> tuple[float | None, float, float, float] | None:
        """book() for a keyed limit declared at `declared`: a key whose row is gone (a
        prune removed it idle, a reset ledger) is declared again and booked, in one
        transaction; the process that cached its declaration need not know."""
        booked = self.book(key, rules, now, 1, tolerance)
        if booked is not None:
            return booked
        with self.db.write() as conn:
            sql.declare(conn, key, declared)
            return sql.book(conn, key, rules, now, 1, tolerance)

    def cut(
        self,
        host: str,
        rules: PaceRules,
        *,
        unbooked: int,
        sent_age: float,
        retry_after: float | None,
        now: float | None = None,
    ) -> float:
        """Report a 429 of `host`; its rate after it."""
        with self.db.write() as conn:
            return sql.cut(
                conn,
                host,
                rules,
                unbooked=unbooked,
                sent_age=sent_age,
                retry_after=retry_after,
                now=now,
            )

    def cut_key(
        self,
        key: str,
        rules: PaceRules,
        *,
        target: float,
        learned: float,
        sent_age: float,
        retry_after: float | None,
        now: float | None = None,
    ) -> float | None:
        """Report a 429 of a keyed limit; its rate after the cut (None: nothing cut)."""
        with self.db.write() as conn:
            return sql.cut_key(
                conn,
                key,
                rules,
                target=target,
                learned=learned,
                sent_age=sent_age,
                retry_after=retry_after,
                now=now,
            )

    def schedule_key(self, key: str) -> tuple[float, float] | None:
        """A keyed limit's (rate, last cut), for a holder of a slot booked before it."""
        with self.db.read() as conn:
            return sql.schedule_key(conn, key)

    def declare(self, host: str, rate: float) -> None:
        with self.db.write() as conn:
            sql.declare(conn, host, rate)
