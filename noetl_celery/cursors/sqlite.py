"""The `sqlite` cursor driver (embedded setups): the claim runs under `BEGIN IMMEDIATE`,
SQLite's database write lock, which is what keeps two lanes from claiming one row
(SQLite has no `FOR UPDATE SKIP LOCKED`). `auth` (or `options.database`) is the file.
The claim commits at once: holding SQLite's only write lock until the engine has recorded
the rows would stall every writer of that file (the engine's own, embedded)."""

from __future__ import annotations

import sqlite3
from typing import ClassVar

from noetl_celery.cursors.base import ClaimRequest, Committed, CursorError
from noetl_celery.tools.jsonable import to_jsonable
from noetl_celery.tools.services import ToolServices


class Driver:
    kind: ClassVar[str] = "sqlite"

    def claim(self, request: ClaimRequest, services: ToolServices) -> Committed:
        path = request.options.get("database") or request.auth
        if not isinstance(path, str) or not path:
            raise CursorError("config_error", "a sqlite cursor needs the database file as `auth`")
        try:
            conn = sqlite3.connect(path, timeout=30, isolation_level=None)
        except sqlite3.Error as exc:
            raise CursorError("db_connection", str(exc), retryable=True) from None
        try:
            conn.execute("BEGIN IMMEDIATE")
            cur = conn.execute(request.sql)
            columns = [c[0] for c in cur.description or []]
            rows = [
                {name: to_jsonable(value) for name, value in zip(columns, row, strict=True)}
                for row in cur.fetchall()
            ]
            conn.execute("COMMIT")
            return Committed(rows)
        except sqlite3.OperationalError as exc:
            retryable = "locked" in str(exc)
            raise CursorError(
                "db_timeout" if retryable else "db_error", str(exc), retryable
            ) from None
        except sqlite3.Error as exc:
            raise CursorError("db_error", str(exc)) from None
        finally:
            conn.close()
