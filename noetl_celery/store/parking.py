"""Parking a command that waits out a retry delay (docs/design.md §2.7: no worker slot is held
while waiting). The row becomes `delayed` with its due time in `issued_at` and the
pipeline's continuation in `resume`; the reaper's sweep issues it when due
(`ReaperManager.release_delayed`), and a cancel of its execution cancels it like any
other unfinished command. The worker that parked it issues it itself when the wait is
over (`issue_when_due`, on time); the sweep is what brings it back when that worker is
gone."""

from __future__ import annotations

import datetime as dt
from typing import Any

from noetl_celery.store import queries
from noetl_celery.store.database import Database
from noetl_celery.store.schema import utcnow


class ParkingManager:
    """`store.parking`: commands put aside until a due time."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def park(
        self,
        command_id: str,
        resume: dict[str, Any],
        delay: float,
        throttled: dict[str, Any] | None = None,
    ) -> dt.datetime | None:
        """Park a running command for `delay` seconds with `resume` (its continuation);
        the due time, or None when the command was no longer running (nothing changed).
        `throttled`: a loop item waits for its rate_limit key's turn; its
        `item.throttled` event (this payload) goes to the inbox with the park."""
        now = utcnow()
        due = now + dt.timedelta(seconds=delay)
        with self.db.write() as conn:
            if not queries.park_for_retry(conn, command_id, resume, due):
                return None
            if throttled is not None:
                queries.append_throttled(conn, command_id, throttled, now)
            return due

    def issue_when_due(self, command_id: str, due: dt.datetime) -> bool:
        """Issue the command parked until `due` (True: the caller publishes it); False
        when it was issued, cancelled or parked again meanwhile."""
        with self.db.write() as conn:
            return queries.issue_parked(conn, command_id, due, utcnow())
