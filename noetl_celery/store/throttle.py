"""`store.throttle`: the run slots of keyed `rate_limit.concurrency`, shared by the worker
processes of a fleet (worker.throttle); the SQL is `store.queries.throttle`."""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import Connection

from noetl_celery.store.database import Database
from noetl_celery.store.queries import throttle as sql
from noetl_celery.store.schema import utcnow


@dataclass(frozen=True)
class KeyState:
    """A keyed limit's pacing row (store.queries.pacing): its epoch-second buckets."""

    key: str
    rate: float | None  # the learned rate; None: not paced
    declared: float | None
    bucket_at: float
    bucket_n: int
    prev_n: int


@dataclass(frozen=True)
class ThrottleSnapshot:
    """What the keyed limits are doing now, read in one transaction."""

    states: list[KeyState] = field(default_factory=list)
    held: dict[str, int] = field(default_factory=dict)  # run slots held, per key
    waiting: dict[str, int] = field(default_factory=dict)  # commands parked, per key


class ThrottleManager:
    def __init__(self, db: Database) -> None:
        self.db = db

    @property
    def available(self) -> bool:
        """Only Postgres serves several processes (an SQLite engine is one process)."""
        return not self.db.is_sqlite

    def acquire(self, key: str, cap: int, command_id: str) -> int | None:
        """A free slot of `key` below `cap` taken for `command_id` (its number), or None
        when all are held. One read for the slots that look free, then one autocommitted
        statement per slot tried (the row of a slot is locked only while its statement
        runs; another acquirer may take a slot between the read and the write, and the
        write, not the read, decides)."""
        with self.db.read() as conn:
            candidates = sql.free(conn, key, cap, command_id, utcnow())
        for slot in candidates:
            with self.db.single_write() as conn:
                if sql.acquire(conn, key, slot, command_id, utcnow()):
                    return slot
        return None

    def release(self, key: str, command_id: str) -> None:
        with self.db.single_write() as conn:
            sql.release(conn, key, command_id)

    def held(self) -> dict[str, int]:
        """The slots held now, per key."""
        with self.db.read() as conn:
            return sql.held(conn, utcnow())

    def snapshot(self) -> ThrottleSnapshot:
        with self.db.read() as conn:
            return read_snapshot(conn)


def read_snapshot(conn: Connection) -> ThrottleSnapshot:
    """The keyed limits' rows, held slots and parked commands (on the caller's read)."""
    return ThrottleSnapshot(
        states=[
            KeyState(
                str(key),
                None if rate is None else float(rate),
                None if ceiling is None else float(ceiling),
                float(at),
                int(n),
                int(prev),
            )
            for key, rate, ceiling, at, n, prev in sql.states(conn)
        ],
        held=sql.held(conn, utcnow()),
        waiting=sql.waiting(conn),
    )
