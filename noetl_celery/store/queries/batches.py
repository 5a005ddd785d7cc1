"""Batches: one broker message may carry many command ids (worker.batch); they are
claimed, renewed and handed back with one statement each, never one per command."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, Select, Update, bindparam, select, update

from noetl_celery.constants import CMD_ISSUED, CMD_RUNNING
from noetl_celery.store.schema import commands
from noetl_celery.store.statements import COMMAND_COLUMNS, one_of


def _claim_batch(postgres: bool) -> Update:
    return (
        update(commands)
        .where(one_of(commands.c.command_id, "b_ids", postgres), commands.c.status == CMD_ISSUED)
        .values(
            status=CMD_RUNNING,
            worker=bindparam("b_worker"),
            started_at=bindparam("b_now"),
            lease_until=bindparam("b_lease"),
        )
        .returning(commands.c.command_id, *COMMAND_COLUMNS)
    )


def _running_of(postgres: bool) -> Select[tuple[str]]:
    return select(commands.c.command_id).where(
        one_of(commands.c.command_id, "b_ids", postgres), commands.c.status == CMD_RUNNING
    )


# Statements run for every batch (and every status poll) are built once: building one
# per call, and its cache key, cost about as much as SQLAlchemy's compiled-cache hit
# saves (py-spy on bench.pft_cursor: 0.7 % of a worker's CPU in claim_batch alone);
# keyed by "is the connection Postgres's"
_CLAIM_BATCH = {pg: _claim_batch(pg) for pg in (True, False)}
_RUNNING_OF = {pg: _running_of(pg) for pg in (True, False)}


def claim_batch(
    conn: Connection,
    command_ids: Sequence[str],
    worker: str,
    now: dt.datetime,
    lease_until: dt.datetime,
) -> list[Any]:
    """Claim those of `command_ids` still issued (the others were claimed or finished
    by another delivery: skipped); their command_id and COMMAND_COLUMNS."""
    params = {"b_ids": list(command_ids), "b_worker": worker, "b_now": now}
    statement = _CLAIM_BATCH[conn.dialect.name == "postgresql"]
    return list(conn.execute(statement, {**params, "b_lease": lease_until}).all())


def renew_leases(conn: Connection, command_ids: Sequence[str], until: dt.datetime) -> list[str]:
    """Extend the leases of those of `command_ids` still running; the ids renewed."""
    rows = conn.execute(
        update(commands)
        .where(commands.c.command_id.in_(list(command_ids)), commands.c.status == CMD_RUNNING)
        .values(lease_until=until)
        .returning(commands.c.command_id)
    ).all()
    return [str(r[0]) for r in rows]


def running_of(conn: Connection, command_ids: Sequence[str]) -> list[str]:
    """Those of `command_ids` still `running` (the heartbeat's status poll: a command
    cancelled or finished meanwhile is not among them)."""
    statement = _RUNNING_OF[conn.dialect.name == "postgresql"]
    rows = conn.execute(statement, {"b_ids": list(command_ids)}).all()
    return [str(r[0]) for r in rows]


def release_claims(
    conn: Connection, command_ids: Sequence[str], worker: str, now: dt.datetime
) -> list[str]:
    """Put claimed commands that never started back to `issued` (a batch past its
    budget), only while they are still `worker`'s claim; the ids released. `issued_at`
    is now: the reaper republishes them only if this hand-back's message is lost."""
    rows = conn.execute(
        update(commands)
        .where(
            commands.c.command_id.in_(list(command_ids)),
            commands.c.status == CMD_RUNNING,
            commands.c.worker == worker,
        )
        .values(status=CMD_ISSUED, worker=None, started_at=None, lease_until=None, issued_at=now)
        .returning(commands.c.command_id)
    ).all()
    return [str(r[0]) for r in rows]


def release_workers(conn: Connection, workers: Sequence[str], now: dt.datetime) -> list[str]:
    """Put every command still `running` under one of `workers` (`host:pid` claims) back
    to `issued`: a stopping worker hands back what it could not finish in its shutdown
    budget (tasks.shutdown), after its processes that ran them are gone. The ids."""
    if not workers:
        return []
    rows = conn.execute(
        update(commands)
        .where(commands.c.status == CMD_RUNNING, commands.c.worker.in_(list(workers)))
        .values(status=CMD_ISSUED, worker=None, started_at=None, lease_until=None, issued_at=now)
        .returning(commands.c.command_id)
    ).all()
    return [str(r[0]) for r in rows]
