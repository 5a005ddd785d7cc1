"""`store.retention`: the transactions of a prune (the SQL is `store.queries.prune`).

Reads run on their own; every delete is a transaction of its own that removes at most a
chunk of rows of one table (`delete_chunk`), so no transaction holds its row locks for
long, however large an execution is (a 1M-item loop's three million rows go a chunk at a
time). The executions rows go last: a prune that stops half way leaves the executions it
had started on ended and old, and the next prune finishes them.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Sequence

from noetl_celery.models.retention import Lineage
from noetl_celery.store import queries
from noetl_celery.store.database import Database
from noetl_celery.store.queries import prune as sql
from noetl_celery.store.schema import executions, utcnow

__all__ = ["EXECUTION_TABLES", "KEPT_TABLES", "RetentionManager"]

EXECUTION_TABLES = tuple(t.name for t in sql.EXECUTION_TABLES)
KEPT_TABLES = sql.KEPT_TABLES
# ids per IN list: well under SQLite's bound on a statement's parameters
_IDS_PER_STATEMENT = 500


def _chunks(ids: Sequence[str]) -> list[list[str]]:
    return [list(ids[i : i + _IDS_PER_STATEMENT]) for i in range(0, len(ids), _IDS_PER_STATEMENT)]


class RetentionManager:
    """Candidates, their families' links, and deleting a family's rows by chunks."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def ended_before(
        self, cutoff: dt.datetime, after: tuple[dt.datetime, str] | None, limit: int
    ) -> list[tuple[Lineage, dt.datetime]]:
        with self.db.read() as conn:
            return sql.ended_before(conn, cutoff, after, limit)

    def closure(self, rows: Sequence[Lineage]) -> list[Lineage]:
        """`rows`, every execution linked to them by parent/child links, transitively,
        and every running rerun (what `models.retention.decide` needs to see)."""
        known = {r.execution_id: r for r in rows}
        frontier = list(rows)
        with self.db.read() as conn:
            while frontier:
                parents = sorted(
                    {r.parent_execution_id for r in frontier if r.parent_execution_id}
                    - known.keys()
                )
                found: list[Lineage] = []
                for part in self._parts([r.execution_id for r in frontier]):
                    found.extend(sql.children(conn, part))
                for part in self._parts(parents):
                    found.extend(sql.lineage(conn, part))
                frontier = []
                for row in found:
                    if row.execution_id not in known:
                        known[row.execution_id] = row
                        frontier.append(row)
            for row in sql.running_reruns(conn):
                known.setdefault(row.execution_id, row)
        return list(known.values())

    def rerun_originals(self) -> set[str]:
        """The executions a running rerun reruns."""
        with self.db.read() as conn:
            return {str(r.rerun_of) for r in sql.running_reruns(conn)}

    def count(self, ids: Sequence[str]) -> dict[str, int]:
        """Rows per table that deleting `ids` would remove (executions included)."""
        counts = dict.fromkeys([*EXECUTION_TABLES, executions.name], 0)
        with self.db.read() as conn:
            for part in self._parts(ids):
                for table in sql.EXECUTION_TABLES:
                    counts[table.name] += sql.count_rows(conn, table, part)
                counts[executions.name] += sql.count_rows(conn, executions, part)
        return counts

    def delete_chunk(self, table: str, ids: Sequence[str], limit: int) -> tuple[int, float]:
        """Delete up to `limit` rows of `table` that belong to `ids`, in a transaction of
        its own: (rows deleted, seconds the transaction took, commit included)."""
        target = next(t for t in sql.EXECUTION_TABLES if t.name == table)
        started = time.perf_counter()
        done = 0
        with self.db.write() as conn:
            for part in self._parts(ids):
                done += sql.delete_chunk(conn, target, part, limit - done)
                if done >= limit:
                    break
        return done, time.perf_counter() - started

    def _parts(self, ids: Sequence[str]) -> list[list[str]]:
        # Postgres takes any number of ids as one array parameter; SQLite binds each
        if not ids:
            return []
        return _chunks(ids) if self.db.is_sqlite else [list(ids)]

    def delete_executions(self, ids: Sequence[str]) -> tuple[int, float]:
        """Delete the executions rows of `ids` (their rows gone already), one
        transaction: (rows deleted, seconds)."""
        started = time.perf_counter()
        with self.db.write() as conn:
            done = sum(sql.delete_executions(conn, part) for part in self._parts(ids))
        return done, time.perf_counter() - started

    def idle_keys(self, idle_before: float, *, dry_run: bool) -> int:
        """Delete (or with `dry_run` count) the pacing rows of rate_limit keys idle since
        `idle_before` (epoch seconds), one transaction: few rows, one per key."""
        if dry_run:
            with self.db.read() as conn:
                return sql.count_idle_keys(conn, idle_before)
        with self.db.write() as conn:
            return sql.delete_idle_keys(conn, idle_before)

    def take_lease(self, name: str, owner: str, seconds: float) -> bool:
        """The duty `name` for `seconds` unless another owner holds it unexpired (the
        reaper's lease rows)."""
        now = utcnow()
        with self.db.write() as conn:
            queries.take_lease(conn, name, owner, now + dt.timedelta(seconds=seconds), now)
            return queries.lease_holder(conn, name) == owner

    def lease_holder(self, name: str) -> str | None:
        with self.db.read() as conn:
            return queries.lease_holder(conn, name)

    def release_lease(self, name: str, owner: str) -> None:
        with self.db.write() as conn:
            queries.release_lease(conn, name, owner, utcnow())
