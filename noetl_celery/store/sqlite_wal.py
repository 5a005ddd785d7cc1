"""A SQLite engine file's journal mode: WAL, switched to even while the file is busy."""

from __future__ import annotations

import sqlite3
import time
from typing import Any

# seconds a SQLite connection waits for another's write lock before "database is locked"
SQLITE_BUSY_SECONDS = 60


def use_wal(cursor: Any, patience: float = SQLITE_BUSY_SECONDS) -> None:
    """Put the file in WAL mode (kept by the file: a file already in it is left alone).
    Changing the mode needs the file to itself, and SQLite answers "database is locked"
    at once instead of calling the busy handler: processes opening a new file together
    (an embedded run started twice) would fail. So the change is tried again while
    another connection holds the file, for as long as a busy writer is waited for."""
    deadline = time.monotonic() + patience
    pause = 0.005
    while True:
        mode = cursor.execute("PRAGMA journal_mode").fetchone()
        if mode is not None and str(mode[0]).lower() == "wal":
            return
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.1)
