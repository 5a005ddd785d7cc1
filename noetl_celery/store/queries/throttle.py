"""Run slots of keyed `rate_limit.concurrency` (`store.throttle` opens the transactions).
Postgres only: an SQLite engine is one process, which counts its slots in memory
(worker.throttle).

A slot is a row `(key, slot_no)` with `slot_no` below the key's cap: the primary key is
what bounds the holders, so concurrent acquirers can never exceed the cap (the second
insert of one slot meets the first's row and takes it only if that row is free). A row
is free when its command is no longer `running` with a live lease: a worker killed
while holding a slot frees it when the command's lease lapses, a parked or finished
command holds none, and the holder's own release deletes it at once.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import JSON, Connection, func, select, text, type_coerce

from noetl_celery.constants import CMD_DELAYED, CMD_RUNNING
from noetl_celery.store.schema import commands, http_pace

_RUNNING = str(CMD_RUNNING)

ACQUIRE = text(
    f"""
INSERT INTO throttle_slots (key, slot_no, command_id, acquired_at)
VALUES (:key, :slot, :command_id, :now)
ON CONFLICT (key, slot_no) DO UPDATE
  SET command_id = excluded.command_id, acquired_at = excluded.acquired_at
  WHERE throttle_slots.command_id = excluded.command_id
     OR NOT EXISTS (SELECT 1 FROM commands c
                    WHERE c.command_id = throttle_slots.command_id
                      AND c.status = '{_RUNNING}' AND c.lease_until > :now)
RETURNING slot_no
"""
)

# the slots below `:cap` that ACQUIRE could take now (free, held by a command no longer
# running with a live lease, or the caller's own): one read instead of a write per slot
# while a key's slots are all held
FREE = text(
    f"""
SELECT s.slot_no FROM generate_series(0, CAST(:cap AS integer) - 1) AS s(slot_no)
LEFT JOIN throttle_slots t ON t.key = :key AND t.slot_no = s.slot_no
WHERE t.key IS NULL OR t.command_id = :command_id
   OR NOT EXISTS (SELECT 1 FROM commands c
                  WHERE c.command_id = t.command_id
                    AND c.status = '{_RUNNING}' AND c.lease_until > :now)
ORDER BY s.slot_no
"""
)

RELEASE = text("DELETE FROM throttle_slots WHERE key = :key AND command_id = :command_id")

# the slots held now, per key (a row whose command lost its lease holds none)
HELD = text(
    f"""
SELECT s.key, count(*) FROM throttle_slots s JOIN commands c ON c.command_id = s.command_id
WHERE c.status = '{_RUNNING}' AND c.lease_until > :now
GROUP BY s.key
"""
)


def acquire(conn: Connection, key: str, slot: int, command_id: str, now: dt.datetime) -> bool:
    """Take slot `slot` of `key` for `command_id` if it is free (or already its own)."""
    params = {"key": key, "slot": slot, "command_id": command_id, "now": now}
    return conn.execute(ACQUIRE, params).first() is not None


def free(conn: Connection, key: str, cap: int, command_id: str, now: dt.datetime) -> list[int]:
    params = {"key": key, "cap": cap, "command_id": command_id, "now": now}
    return [int(row[0]) for row in conn.execute(FREE, params)]


def release(conn: Connection, key: str, command_id: str) -> None:
    conn.execute(RELEASE, {"key": key, "command_id": command_id})


def held(conn: Connection, now: dt.datetime) -> dict[str, int]:
    return {str(row[0]): int(row[1]) for row in conn.execute(HELD, {"now": now})}


# the pacing rows of keyed limits (`key:<key>`): the learned and declared rate, and the
# slots booked in the current second and the one before (the key's current rate)
STATES = select(
    http_pace.c.host,
    http_pace.c.rate,
    http_pace.c.ceiling,
    http_pace.c.bucket_at,
    http_pace.c.bucket_n,
    http_pace.c.prev_n,
).where(http_pace.c.host.like("key:%"))

# commands parked for a keyed limit's turn or run slot, per key (worker.parking writes
# `resume.parked.throttled`)
_WAITED_FOR = type_coerce(commands.c.resume, JSON)[("parked", "throttled")].as_string()
WAITING = (
    select(_WAITED_FOR, func.count())
    .where(commands.c.status == CMD_DELAYED, _WAITED_FOR.is_not(None))
    .group_by(_WAITED_FOR)
)


def states(conn: Connection) -> list[tuple[Any, ...]]:
    """(key, rate, ceiling, bucket_at, bucket_n, prev_n) of every keyed limit's row."""
    return [tuple(row) for row in conn.execute(STATES)]


def waiting(conn: Connection) -> dict[str, int]:
    return {str(key): int(n) for key, n in conn.execute(WAITING)}
